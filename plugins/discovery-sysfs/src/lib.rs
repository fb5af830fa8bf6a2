//! Built-in discovery plugin: the RDMA devices, ports, GIDs and netdevs of sysfs
//! (`rocewatch_sysfs::inventory`), for the devices its options select.
//!
//! Options (`[plugins.builtin.discovery-sysfs.options]`, or the agent's top-level
//! `[devices]`): `include` and `exclude` lists of device-name globs.

use rocewatch_plugin_api::*;
use rocewatch_sysfs::inventory::{rdma_root, read_inventory, DeviceFilter, DeviceSelection};
use rocewatch_sysfs::SysRoot;

/// The built-in discovery plugin.
#[derive(Debug, Default)]
pub struct SysfsDiscovery {
    root: Option<SysRoot>,
    filter: DeviceFilter,
}

impl SysfsDiscovery {
    pub const NAME: &'static str = "discovery-sysfs";

    /// Decode and check the plugin's options (the device selection, `[devices]`).
    pub fn check_options(options: &serde_json::Value) -> Result<DeviceFilter, PluginError> {
        DeviceFilter::new(&options::decode::<DeviceSelection>(options)?)
    }

    pub fn new() -> Self {
        Self::default()
    }
}

impl Plugin for SysfsDiscovery {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        self.filter = Self::check_options(&ctx.options)?;
        self.root = Some(SysRoot::new(&ctx.sysfs_root));
        Ok(())
    }

    fn stop(&mut self) {
        self.root = None;
    }
}

impl DiscoveryPlugin for SysfsDiscovery {
    fn discover(&mut self) -> Result<Inventory, PluginError> {
        let root = rdma_root(self.root.as_ref(), "discover")?;
        read_inventory(root, &self.filter).map(|(inv, _)| inv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_root_is_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = SysfsDiscovery::new();
        p.start(&PluginContext::new(dir.path())).unwrap();
        assert!(matches!(p.discover(), Err(PluginError::Unsupported(_))));
    }
}
