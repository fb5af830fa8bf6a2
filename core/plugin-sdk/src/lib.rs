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
//! - `export`: [`ExportPlugin`], the trait of the one type a `.so` exports (re-exported
//!   here).
//! - [`export_plugin!`]: turns a type implementing [`ExportPlugin`] into that symbol.
//! - `host` (feature `host`): loads a `.so` with libloading, checks the ABI, and wraps each
//!   instance as the plugin traits. Libraries are never unloaded.
//!
//! Writing a plugin: see `plugins/example-plugin`, the template to copy.

pub mod abi;
mod export;
pub mod ffi;
#[cfg(feature = "host")]
pub mod host;

pub use export::ExportPlugin;
pub use rocewatch_plugin_api as api;

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
