//! The trait of the one type a plugin library exports.

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
