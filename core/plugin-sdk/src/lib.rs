//! The rocewatch plugin SDK: write a plugin in Rust, ship it as a `.so`.
//!
//! Layout:
//! - [`abi`]: the versioned C ABI. One exported symbol, [`abi::ENTRY_SYMBOL`], returns a
//!   `#[repr(C)]` [`abi::PluginTableV1`] that begins with the ABI major, minor and size.
//!   Only plain C data and `(ptr, len)` byte buffers cross the boundary; requests and
//!   responses are JSON of the types in `rocewatch-plugin-api`. Whoever allocates frees:
//!   buffers the plugin returns are released with the table's `free_buf`.
//! - [`ffi`]: the plugin side of every entry point, each wrapped in `catch_unwind` (an
//!   unwinding panic across `extern "C"` aborts the process since Rust 1.81).
//! - [`export_plugin!`]: turns a type implementing [`ExportPlugin`] into that symbol.
//! - `host` (feature `host`): loads a `.so` with libloading, checks the ABI, and wraps each
//!   instance as the plugin traits. Libraries are never unloaded.
//!
//! Writing a plugin: see `plugins/example-plugin`, the template to copy.

pub mod abi;
pub mod ffi;
#[cfg(feature = "host")]
pub mod host;

pub use rocewatch_plugin_api as api;
use rocewatch_plugin_api::{
    CollectorPlugin, ConfigurationPlugin, DiscoveryPlugin, Plugin, PluginKind, ProbePlugin,
    RemediationPlugin,
};

/// Implemented by the one type a `.so` exports.
///
/// The host creates one instance per role it uses (a plugin that is both a collector and
/// a remediation gets two instances), starts it with the context, and calls the matching
/// `as_*` accessor for every request. Return `Some(self)` from the accessors of the kinds
/// listed in [`ExportPlugin::KINDS`].
pub trait ExportPlugin: Plugin + Sized + 'static {
    /// The plugin's name, as shown by `rocewatch plugins`.
    const NAME: &'static str;
    /// The plugin's own version (not the ABI version).
    const VERSION: &'static str;
    /// The kinds this plugin implements.
    const KINDS: &'static [PluginKind];

    /// A fresh, unstarted instance.
    fn create() -> Self;

    fn as_discovery(&mut self) -> Option<&mut dyn DiscoveryPlugin> {
        None
    }
    fn as_configuration(&mut self) -> Option<&mut dyn ConfigurationPlugin> {
        None
    }
    fn as_probe(&mut self) -> Option<&mut dyn ProbePlugin> {
        None
    }
    fn as_collector(&mut self) -> Option<&mut dyn CollectorPlugin> {
        None
    }
    fn as_remediation(&mut self) -> Option<&mut dyn RemediationPlugin> {
        None
    }
}

/// Export `$ty` (which implements [`ExportPlugin`]) as this library's plugin.
///
/// ```text
/// rocewatch_plugin_sdk::export_plugin!(MyPlugin);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($ty:ty) => {
        /// The entry point the rocewatch host looks up.
        #[no_mangle]
        pub extern "C" fn rocewatch_plugin_entry() -> *const $crate::abi::PluginTableV1 {
            static TABLE: $crate::abi::PluginTableV1 = $crate::abi::PluginTableV1::of::<$ty>();
            &TABLE
        }
    };
}
