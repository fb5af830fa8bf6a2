//! This host's rail map (`rocewatch_sysfs::railmap`) as every command takes it: the
//! rows of this host in `[fleet] topology` when the configuration names one, matched to
//! the ports by address; else the ports in PCI address order. `env`, `fleet topology`,
//! `preflight` and `doctor` read it here, so that they agree.

use anyhow::Result;
use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::railmap::{RailMap, RailRow};
use rocewatch_sysfs::SysRoot;

use crate::config::Config;

pub use crate::app::fleet_host;

/// `host`'s rows of `[fleet] topology`, when the configuration names a topology file
/// (read as the agent's map and its quarantine self-test read it); an unreadable or
/// malformed file is an error naming it.
pub fn rows(cfg: &Config, host: &str) -> Result<Option<Vec<RailRow>>> {
    rocewatch_probes::fleet::map::topology_rows(cfg.fleet.as_ref(), host)
        .map_err(anyhow::Error::msg)
}

/// The rail map of `inv`, read under the configured sysfs root.
pub fn map(cfg: &Config, host: &str, inv: &Inventory) -> Result<RailMap> {
    let rows = rows(cfg, host)?;
    Ok(SysRoot::new(&cfg.agent.sysfs_root).rail_map(inv, rows.as_deref()))
}
