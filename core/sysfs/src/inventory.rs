//! The RDMA inventory read from sysfs: devices, ports, GIDs and netdevs (what
//! `ibv_devices`, `ibv_devinfo`, `ibdev2netdev` and `show_gids` tell), for the devices a
//! [`DeviceFilter`] selects. Every plugin that reads per device shares this reading.
//!
//! A device filter comes from `include` and `exclude` lists of device-name globs (the
//! agent's `[devices]`, or a plugin's options). Excluded devices are never read at all,
//! which matters on restricted PFs where every read spams the kernel log.

use globset::{Glob, GlobSet, GlobSetBuilder};
use rocewatch_plugin_api::*;
use serde::Deserialize;

use crate::{parse, SysRoot};

/// Device include/exclude globs. An empty include list includes everything.
#[derive(Debug, Clone, Default)]
pub struct DeviceFilter {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

/// The options of the discovery and counter plugins that select devices.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DeviceSelection {
    /// Globs of device names to read (`mlx5_*`). Empty: all.
    #[serde(default)]
    pub include: Vec<String>,
    /// Globs of device names never to read.
    #[serde(default)]
    pub exclude: Vec<String>,
}

fn globset(patterns: &[String], key: &str) -> Result<Option<GlobSet>, PluginError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let g = Glob::new(p)
            .map_err(|e| PluginError::InvalidOptions(format!("{key}: bad glob {p:?}: {e}")))?;
        b.add(g);
    }
    b.build()
        .map(Some)
        .map_err(|e| PluginError::InvalidOptions(format!("{key}: {e}")))
}

impl DeviceFilter {
    pub fn new(sel: &DeviceSelection) -> Result<Self, PluginError> {
        Ok(DeviceFilter {
            include: globset(&sel.include, "include")?,
            exclude: globset(&sel.exclude, "exclude")?,
        })
    }

    pub fn allows(&self, device: &str) -> bool {
        self.include.as_ref().is_none_or(|g| g.is_match(device))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(device))
    }
}

/// Read the inventory. Failures of single attributes leave that field absent and are
/// returned as partial errors; the rest of the inventory still comes back.
/// The module serving `dev` and what its `module/` directory says of its build.
fn driver_module(root: &SysRoot, dev: &str) -> Option<DriverModule> {
    let m = root.module(&root.device_module(dev)?)?;
    Some(DriverModule {
        origin: m.origin().to_string(),
        name: m.name,
        version: m.version,
        srcversion: m.srcversion,
    })
}

pub fn read_inventory(
    root: &SysRoot,
    filter: &DeviceFilter,
) -> Result<(Inventory, Vec<PartialError>), PluginError> {
    let mut errors = Vec::new();
    let mut note = |e: crate::SysfsError| {
        errors.push(PartialError {
            target: e.path().display().to_string(),
            message: e.cause(),
        })
    };
    let devices = root
        .devices()
        .map_err(|e| PluginError::Failed(e.to_string()))?;
    let mut inv = Inventory::default();
    for name in devices.into_iter().filter(|d| filter.allows(d)) {
        if !root.device_dir(&name).exists() {
            continue; // vanished between listing and reading
        }
        let mut attr = |a: &str| {
            root.device_attr(&name, a).unwrap_or_else(|e| {
                note(e);
                None
            })
        };
        let module = driver_module(root, &name);
        let mut dev = Device {
            node_guid: attr("node_guid"),
            fw_ver: attr("fw_ver"),
            hca_type: attr("hca_type"),
            node_type: attr("node_type"),
            board_id: attr("board_id"),
            // Soft-RoCE has no parent function to name a driver: its module does.
            driver: root
                .device_driver(&name)
                .or_else(|| module.as_ref().map(|m| m.name.clone())),
            driver_module: module,
            name: name.clone(),
            ports: Vec::new(),
        };
        let ports = root.ports(&name).unwrap_or_else(|e| {
            note(e);
            Vec::new()
        });
        for p in ports {
            let mut pattr = |a: &str| {
                root.port_attr(&name, p, a).unwrap_or_else(|e| {
                    note(e);
                    None
                })
            };
            let state = pattr("state").map(|s| parse::parse_enum(&s).1);
            let phys_state = pattr("phys_state").map(|s| parse::parse_enum(&s).1);
            let link_layer = pattr("link_layer");
            let rate = pattr("rate");
            let gids = root.gids(&name, p).unwrap_or_else(|e| {
                note(e);
                Vec::new()
            });
            let netdev = root.port_netdev(&name, p, &gids);
            let (netdev_mtu, netdev_operstate) = match &netdev {
                Some(nd) => (
                    root.netdev_attr(nd, "mtu")
                        .ok()
                        .flatten()
                        .and_then(|m| m.parse().ok()),
                    root.netdev_attr(nd, "operstate").ok().flatten(),
                ),
                None => (None, None),
            };
            dev.ports.push(Port {
                port: p,
                state,
                phys_state,
                link_layer,
                rate_bps: rate.as_deref().and_then(parse::parse_rate_bps),
                rate,
                netdev,
                netdev_mtu,
                netdev_operstate,
                gids: gids
                    .into_iter()
                    .map(|g| Gid {
                        index: g.index,
                        gid: g.gid,
                        gid_type: g.gid_type,
                        netdev: g.netdev,
                    })
                    .collect(),
            });
        }
        inv.devices.push(dev);
    }
    Ok((inv, errors))
}

/// The started root, if it has RDMA devices at all. A root without
/// `class/infiniband` (no RDMA driver loaded) makes the sysfs plugins "unsupported".
pub fn rdma_root<'a>(root: Option<&'a SysRoot>, call: &str) -> Result<&'a SysRoot, PluginError> {
    let root = root.ok_or_else(|| PluginError::failed(format!("{call} called before start")))?;
    if !root.ib_class().is_dir() {
        return Err(PluginError::Unsupported(format!(
            "no RDMA devices: {} does not exist (no RDMA driver loaded?)",
            root.ib_class().display()
        )));
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_globs() {
        let f = DeviceFilter::new(&DeviceSelection {
            include: vec!["mlx5_*".into()],
            exclude: vec!["mlx5_1".into()],
        })
        .unwrap();
        assert!(f.allows("mlx5_0"));
        assert!(!f.allows("mlx5_1"));
        assert!(!f.allows("rxe0"));
        assert!(DeviceFilter::default().allows("anything"));
        let err = DeviceFilter::new(&DeviceSelection {
            include: vec!["[bad".into()],
            exclude: vec![],
        })
        .unwrap_err();
        assert!(err.to_string().contains("include"), "{err}");
    }
}
