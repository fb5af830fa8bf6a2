//! The built-in configuration plugin: what a RoCE port is configured to do, read where
//! Linux keeps it.
//!
//! | setting | where |
//! |---|---|
//! | `roce_mode`, `roce_tos` | configfs `kernel/config/rdma_cm/<dev>/ports/<n>/default_roce_{mode,tos}` (under the sysfs root given, so fixture trees carry it) |
//! | `pfc_enabled`, `trust`, `dscp_map` | DCB over rtnetlink (`DCB_CMD_IEEE_GET`): the PFC bitmap and the APP table; live kernel only |
//! | `ecn_np_enabled`, `ecn_rp_enabled`, `cnp_dscp`, `cnp_802p_prio` | mlx5 `class/net/<if>/ecn/roce_{np,rp}/...` |
//! | `traffic_class` | mlx5 `class/infiniband/<dev>/tc/<port>/traffic_class` |
//! | `mtu`, `rdma_mtu` | `class/net/<if>/mtu` and the RoCE MTU it implies |
//!
//! Each setting is a value, `unsupported` (the device has no such thing: not an error),
//! or `unknown` with the reason it could not be read (configfs not mounted, a directory
//! nobody created, not the live kernel).

use std::path::{Path, PathBuf};

use rocewatch_netlink::dcb::{DcbNetlink, IeeeDcb};
use rocewatch_plugin_api::*;
use rocewatch_sysfs::SysRoot;

/// The RoCE MTU a netdev MTU allows: the largest IB MTU that fits after the RoCE v2
/// headers (GRH 40, UDP 8, BTH 12, extended headers 32, ICRC 4: 96 bytes, as the
/// kernel's `iboe_get_mtu` counts them).
pub fn rdma_mtu_for(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(96)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= room)
}

fn value(v: impl Into<String>) -> Setting {
    Setting::Value(v.into())
}

/// Read one attribute file: its trimmed text, or `None` when it does not exist.
fn read(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// A setting from a file: its value, `unsupported` when the file is not there.
fn file_setting(path: &Path) -> Setting {
    match read(path) {
        Ok(Some(v)) => value(v),
        Ok(None) => Setting::Unsupported,
        Err(e) => Setting::Unknown(e),
    }
}

/// The priorities whose `<dir>/<prio>` file says 1, as "3" or "3,4" ("none" if none);
/// `unsupported` without the directory.
fn enabled_priorities(dir: &Path) -> Setting {
    if !dir.is_dir() {
        return Setting::Unsupported;
    }
    let mut on = Vec::new();
    for p in 0..8 {
        match read(&dir.join(p.to_string())) {
            Ok(Some(v)) if v == "1" => on.push(p.to_string()),
            Ok(_) => {}
            Err(e) => return Setting::Unknown(e),
        }
    }
    value(if on.is_empty() {
        "none".to_string()
    } else {
        on.join(",")
    })
}

/// The DCB settings of one netdev.
fn dcb_settings(dcb: Result<&IeeeDcb, &str>) -> [(&'static str, Setting); 3] {
    match dcb {
        Ok(d) => {
            let pfc = match &d.pfc {
                Some(p) if p.enabled == 0 => value("none"),
                Some(p) => value(
                    p.priorities()
                        .iter()
                        .map(u8::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                None => Setting::Unsupported,
            };
            let map = d
                .dscp_map()
                .iter()
                .map(|(dscp, prio)| format!("{dscp}:{prio}"))
                .collect::<Vec<_>>()
                .join(",");
            [
                ("pfc_enabled", pfc),
                ("trust", value(d.trust())),
                (
                    "dscp_map",
                    value(if map.is_empty() { "none".into() } else { map }),
                ),
            ]
        }
        Err(why) => [
            ("pfc_enabled", Setting::Unknown(why.to_string())),
            ("trust", Setting::Unknown(why.to_string())),
            ("dscp_map", Setting::Unknown(why.to_string())),
        ],
    }
}

/// The configuration plugin.
#[derive(Default)]
pub struct QosLinux {
    root: Option<SysRoot>,
    /// DCB over netlink, when the root is the live /sys (else why not).
    dcb: Option<Result<DcbNetlink, String>>,
}

impl QosLinux {
    pub const NAME: &'static str = "qos-linux";

    pub fn new() -> Self {
        Self::default()
    }

    fn configfs(&self) -> PathBuf {
        self.root
            .as_ref()
            .expect("started")
            .root()
            .join("kernel/config/rdma_cm")
    }

    /// `roce_mode` and `roce_tos` of a port from configfs.
    fn roce_settings(&self, dev: &str, port: u32) -> [(&'static str, Setting); 2] {
        let cm = self.configfs();
        let port_dir = cm.join(dev).join("ports").join(port.to_string());
        let why = if !cm.is_dir() {
            Some(format!(
                "{} is not there (configfs not mounted at <root>/kernel/config, or rdma_cm not loaded)",
                cm.display()
            ))
        } else if !cm.join(dev).is_dir() {
            Some(format!(
                "{} not created (configfs shows a device's RoCE defaults once its directory is made: mkdir {})",
                cm.join(dev).display(),
                cm.join(dev).display()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return [
                ("roce_mode", Setting::Unknown(why.clone())),
                ("roce_tos", Setting::Unknown(why)),
            ];
        }
        [
            (
                "roce_mode",
                file_setting(&port_dir.join("default_roce_mode")),
            ),
            ("roce_tos", file_setting(&port_dir.join("default_roce_tos"))),
        ]
    }

    fn port_state(&mut self, dev: &str, port: u32) -> QosState {
        let root = self.root.clone().expect("started");
        let gids = root.gids(dev, port).unwrap_or_default();
        let netdev = root.port_netdev(dev, port, &gids);
        let mut settings = std::collections::BTreeMap::new();
        for (k, v) in self.roce_settings(dev, port) {
            settings.insert(k.to_string(), v);
        }
        let tc = root.device_dir(dev).join("tc").join(port.to_string());
        settings.insert(
            "traffic_class".into(),
            file_setting(&tc.join("traffic_class")),
        );
        match &netdev {
            Some(ifname) => {
                let nd = root.netdev_dir(ifname);
                let ecn = nd.join("ecn");
                settings.insert(
                    "ecn_np_enabled".into(),
                    enabled_priorities(&ecn.join("roce_np/enable")),
                );
                settings.insert(
                    "ecn_rp_enabled".into(),
                    enabled_priorities(&ecn.join("roce_rp/enable")),
                );
                settings.insert(
                    "cnp_dscp".into(),
                    file_setting(&ecn.join("roce_np/cnp_dscp")),
                );
                settings.insert(
                    "cnp_802p_prio".into(),
                    file_setting(&ecn.join("roce_np/cnp_802p_prio")),
                );
                // The RoCE MTU follows the netdev's; an MTU that cannot be read leaves it
                // the same kind of answer.
                let mtu = file_setting(&nd.join("mtu"));
                let rdma_mtu = match &mtu {
                    Setting::Value(m) => match m.parse().ok().and_then(rdma_mtu_for) {
                        Some(r) => value(r.to_string()),
                        None => Setting::Unsupported,
                    },
                    other => other.clone(),
                };
                settings.insert("mtu".into(), mtu);
                settings.insert("rdma_mtu".into(), rdma_mtu);
                let dcb = match self.dcb.as_mut() {
                    Some(Ok(nl)) => match nl.ieee_get(ifname) {
                        Ok(d) => Ok(d),
                        Err(rocewatch_netlink::NetlinkError::Kernel { errno, .. })
                            if errno == libc::EOPNOTSUPP =>
                        {
                            Err(None)
                        }
                        Err(e) => Err(Some(e.to_string())),
                    },
                    Some(Err(why)) => Err(Some(why.clone())),
                    None => Err(Some("not started".into())),
                };
                match dcb {
                    Ok(d) => {
                        for (k, v) in dcb_settings(Ok(&d)) {
                            settings.insert(k.into(), v);
                        }
                    }
                    // The driver has no DCB operations: the capability is missing.
                    Err(None) => {
                        for k in ["pfc_enabled", "trust", "dscp_map"] {
                            settings.insert(k.into(), Setting::Unsupported);
                        }
                    }
                    Err(Some(why)) => {
                        for (k, v) in dcb_settings(Err(&why)) {
                            settings.insert(k.into(), v);
                        }
                    }
                }
            }
            None => {
                for k in [
                    "ecn_np_enabled",
                    "ecn_rp_enabled",
                    "cnp_dscp",
                    "cnp_802p_prio",
                    "mtu",
                    "rdma_mtu",
                    "pfc_enabled",
                    "trust",
                    "dscp_map",
                ] {
                    settings.insert(k.into(), Setting::Unknown("the port has no netdev".into()));
                }
            }
        }
        QosState {
            device: dev.to_string(),
            port,
            netdev,
            settings,
        }
    }
}

impl Plugin for QosLinux {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let root = SysRoot::new(PathBuf::from(&ctx.sysfs_root));
        self.dcb = Some(if rocewatch_sysfs::read::is_sysfs(root.root()) {
            DcbNetlink::open().map_err(|e| e.to_string())
        } else {
            Err(format!(
                "DCB is read over netlink from the live kernel; {} is not the live /sys",
                root.root().display()
            ))
        });
        self.root = Some(root);
        Ok(())
    }
}

impl ConfigurationPlugin for QosLinux {
    fn observe(&mut self) -> Result<Vec<QosState>, PluginError> {
        let root = self
            .root
            .clone()
            .ok_or_else(|| PluginError::failed("observe called before start"))?;
        let devices = root
            .devices()
            .map_err(|e| PluginError::Unsupported(e.to_string()))?;
        let mut out = Vec::new();
        for dev in devices {
            for port in root.ports(&dev).unwrap_or_default() {
                out.push(self.port_state(&dev, port));
            }
        }
        Ok(out)
    }

    fn apply(&mut self, _change: &QosChange, _dry_run: bool) -> Result<ApplyOutcome, PluginError> {
        Err(PluginError::Unsupported(
            "qos-linux: applying changes is not implemented yet (observe only)".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_mtu_from_netdev_mtu() {
        assert_eq!(rdma_mtu_for(9000), Some(4096));
        assert_eq!(rdma_mtu_for(4200), Some(4096));
        assert_eq!(rdma_mtu_for(4191), Some(2048));
        assert_eq!(rdma_mtu_for(1500), Some(1024));
        assert_eq!(rdma_mtu_for(300), None);
    }
}
