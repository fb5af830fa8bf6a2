//! The built-in configuration plugin: what a RoCE port is configured to do, read where
//! Linux keeps it.
//!
//! | setting | where |
//! |---|---|
//! | `roce_mode`, `roce_tos` | configfs `kernel/config/rdma_cm/<dev>/ports/<n>/default_roce_{mode,tos}` (under the sysfs root given, so fixture trees carry it) |
//! | `pfc_enabled`, `trust`, `dscp_map` | DCB over rtnetlink (`DCB_CMD_IEEE_GET`): the PFC bitmap and the APP table; live kernel only |
//! | `ecn_np_enabled`, `ecn_rp_enabled`, `cnp_dscp`, `cnp_802p_prio` | mlx5 `class/net/<if>/ecn/roce_{np,rp}/...` |
//! | `traffic_class` | mlx5 `class/infiniband/<dev>/tc/<port>/traffic_class` |
//! | `mtu`, `rdma_mtu` | `class/net/<if>/mtu` and the RoCE MTU it implies (`rdma_mtu` is read only) |
//! | `pfc_prevention_timeout` | ethtool tunable `pfc-prevention-tout` (ms, `auto`, `off`); live kernel only |
//!
//! `apply` writes the same places (configfs: creating the device's directory first
//! when needed; DCB: `DCB_CMD_IEEE_SET`/`DEL`; the tunable: `ETHTOOL_STUNABLE`), says in
//! a dry run what it would write where, and reports the value it replaced.
//! Each setting is a value, `unsupported` (the device has no such thing: not an error),
//! or `unknown` with the reason it could not be read (configfs not mounted, a directory
//! nobody created, not the live kernel).
//!
//! Modules:
//! - `configfs`: the configfs `rdma_cm` directory and reading `roce_mode`/`roce_tos`.
//! - `dcb`: DCB over rtnetlink: PFC, trust and the DSCP map, read and changed.
//! - `ecn`: mlx5 ECN enable files, and the priority-list syntax.
//! - `tunable`: the PFC storm-prevention ethtool tunable's syntax and errors.
//! - `mtu`: the RoCE MTU a netdev MTU implies.
//! - `attr`: reading and writing attribute files; the result constructors.

mod attr;
mod configfs;
mod dcb;
mod ecn;
mod mtu;
mod tunable;

use std::path::PathBuf;

use rocewatch_counters_ethtool::ioctl::{self, EthtoolSocket};
use rocewatch_netlink::dcb::DcbNetlink;
use rocewatch_plugin_api::*;
use rocewatch_sysfs::SysRoot;

use attr::{file_setting, outcome, read, value, write_file};
use dcb::{dcb_apply, dcb_settings};
use ecn::{enabled_priorities, priority_set};
pub use mtu::rdma_mtu_for;
use tunable::{parse_prevention_timeout, prevention_text, tunable_error};

/// The configuration plugin.
#[derive(Default)]
pub struct QosLinux {
    root: Option<SysRoot>,
    /// DCB over netlink, when the root is the live /sys (else why not).
    dcb: Option<Result<DcbNetlink, String>>,
    /// The ethtool socket (PFC storm-prevention timeout), on the live /sys only.
    ethtool: Option<Result<EthtoolSocket, String>>,
}

impl QosLinux {
    pub const NAME: &'static str = "qos-linux";

    pub fn new() -> Self {
        Self::default()
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
                settings.insert(
                    "pfc_prevention_timeout".into(),
                    match &self.ethtool {
                        Some(Ok(eth)) => {
                            match eth.get_tunable_u16(ifname, ioctl::TUNABLE_PFC_PREVENTION_TOUT) {
                                Ok(v) => value(prevention_text(v)),
                                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                                    Setting::Unsupported
                                }
                                Err(e) => {
                                    Setting::Unknown(format!("{ifname} pfc-prevention-tout: {e}"))
                                }
                            }
                        }
                        Some(Err(why)) => Setting::Unknown(why.clone()),
                        None => Setting::Unknown("not started".into()),
                    },
                );
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
                    "pfc_prevention_timeout",
                ] {
                    settings.insert(k.into(), Setting::Unknown("the port has no netdev".into()));
                }
            }
        }
        // RoCE defaults not read only because the device's configfs directory is not
        // created yet: apply creates it.
        let settable_unread = if self.configfs().is_dir() && !self.configfs().join(dev).is_dir() {
            vec!["roce_mode".to_string(), "roce_tos".to_string()]
        } else {
            Vec::new()
        };
        QosState {
            device: dev.to_string(),
            port,
            netdev,
            settings,
            settable_unread,
        }
    }
}

impl Plugin for QosLinux {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let root = SysRoot::new(PathBuf::from(&ctx.sysfs_root));
        let live = rocewatch_sysfs::read::is_sysfs(root.root());
        self.dcb = Some(if live {
            DcbNetlink::open().map_err(|e| e.to_string())
        } else {
            Err(format!(
                "DCB is read over netlink from the live kernel; {} is not the live /sys",
                root.root().display()
            ))
        });
        self.ethtool = Some(if live {
            EthtoolSocket::open().map_err(|e| format!("ethtool socket: {e}"))
        } else {
            Err(format!(
                "the PFC storm-prevention timeout is an ethtool tunable of the live kernel; {} is not the live /sys",
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

    fn apply(&mut self, change: &QosChange, dry_run: bool) -> Result<ApplyOutcome, PluginError> {
        let root = self
            .root
            .clone()
            .ok_or_else(|| PluginError::failed("apply called before start"))?;
        let (dev, port, to) = (&change.device, change.port, change.to.trim());
        let netdev = || -> Result<String, PluginError> {
            let gids = root.gids(dev, port).unwrap_or_default();
            root.port_netdev(dev, port, &gids)
                .ok_or_else(|| PluginError::Unsupported(format!("{dev}/{port} has no netdev")))
        };
        match change.setting.as_str() {
            s @ ("roce_mode" | "roce_tos") => {
                let cm = self.configfs();
                if !cm.is_dir() {
                    return Err(PluginError::Unsupported(format!(
                        "{} is not there (configfs not mounted at <root>/kernel/config, or rdma_cm not loaded)",
                        cm.display()
                    )));
                }
                let dev_dir = cm.join(dev);
                let create = !dev_dir.is_dir();
                let file = dev_dir
                    .join("ports")
                    .join(port.to_string())
                    .join(format!("default_{s}"));
                if dry_run {
                    let pre = if create {
                        format!("create {} and ", dev_dir.display())
                    } else {
                        String::new()
                    };
                    return Ok(outcome(
                        false,
                        format!("would {pre}write {to:?} to {}", file.display()),
                        None,
                    ));
                }
                if create {
                    std::fs::create_dir(&dev_dir).map_err(|e| {
                        PluginError::failed(format!("mkdir {}: {e}", dev_dir.display()))
                    })?;
                }
                let mut o = write_file(&file, to, false)?;
                if create {
                    o.message = format!("created {}; {}", dev_dir.display(), o.message);
                }
                Ok(o)
            }
            s @ ("ecn_np_enabled" | "ecn_rp_enabled") => {
                let which = if s == "ecn_np_enabled" {
                    "roce_np"
                } else {
                    "roce_rp"
                };
                let dir = root
                    .netdev_dir(&netdev()?)
                    .join("ecn")
                    .join(which)
                    .join("enable");
                if !dir.is_dir() {
                    return Err(PluginError::Unsupported(format!(
                        "{} is not there (not an mlx5 netdev)",
                        dir.display()
                    )));
                }
                let want = priority_set(to).map_err(PluginError::failed)?;
                let previous = match enabled_priorities(&dir) {
                    Setting::Value(v) => Some(v),
                    _ => None,
                };
                let mut wrote = Vec::new();
                for p in 0..8u8 {
                    let f = dir.join(p.to_string());
                    let on = want.contains(&p);
                    let now = read(&f).map_err(PluginError::failed)?;
                    if now.as_deref() == Some(if on { "1" } else { "0" }) {
                        continue;
                    }
                    if !dry_run {
                        std::fs::write(&f, if on { "1" } else { "0" }).map_err(|e| {
                            PluginError::failed(format!("write {}: {e}", f.display()))
                        })?;
                    }
                    wrote.push(format!("{}={}", p, u8::from(on)));
                }
                let msg = format!(
                    "{} {} in {}",
                    wrote.join(" "),
                    if dry_run {
                        "would be written"
                    } else {
                        "written"
                    },
                    dir.display()
                );
                Ok(outcome(!dry_run, msg, previous))
            }
            s @ ("cnp_dscp" | "cnp_802p_prio" | "mtu") => {
                let nd = root.netdev_dir(&netdev()?);
                let file = if s == "mtu" {
                    nd.join("mtu")
                } else {
                    nd.join("ecn/roce_np").join(s)
                };
                write_file(&file, to, dry_run)
            }
            "traffic_class" => {
                let file = root
                    .device_dir(dev)
                    .join("tc")
                    .join(port.to_string())
                    .join("traffic_class");
                write_file(&file, to, dry_run)
            }
            s @ ("pfc_enabled" | "trust" | "dscp_map") => {
                let ifname = netdev()?;
                let nl = match self.dcb.as_mut() {
                    Some(Ok(nl)) => nl,
                    Some(Err(why)) => return Err(PluginError::Unsupported(why.clone())),
                    None => return Err(PluginError::failed("not started")),
                };
                dcb_apply(nl, &ifname, s, to, dry_run)
            }
            "pfc_prevention_timeout" => {
                let ifname = netdev()?;
                let Some(Ok(eth)) = &self.ethtool else {
                    return Err(PluginError::Unsupported(
                        "the PFC storm-prevention timeout is an ethtool tunable of the live kernel"
                            .into(),
                    ));
                };
                let want = parse_prevention_timeout(to).map_err(PluginError::failed)?;
                let id = ioctl::TUNABLE_PFC_PREVENTION_TOUT;
                let previous = eth
                    .get_tunable_u16(&ifname, id)
                    .map_err(|e| tunable_error(&ifname, e))?;
                if dry_run {
                    return Ok(outcome(
                        false,
                        format!(
                            "would set {ifname}'s pfc-prevention-tout to {to} (now {})",
                            prevention_text(previous)
                        ),
                        Some(prevention_text(previous)),
                    ));
                }
                eth.set_tunable_u16(&ifname, id, want)
                    .map_err(|e| tunable_error(&ifname, e))?;
                Ok(outcome(
                    true,
                    format!(
                        "{ifname} pfc-prevention-tout {} -> {to}",
                        prevention_text(previous)
                    ),
                    Some(prevention_text(previous)),
                ))
            }
            other => Err(PluginError::Unsupported(format!(
                "qos-linux cannot set {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writable copy of the mlx5 fixture tree, started.
    fn started_copy() -> (tempfile::TempDir, QosLinux) {
        let src = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../integration-tests/fixtures/mlx5-roce-dual-port/sys"
        );
        let dir = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("cp")
            .args(["-a", src])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success());
        let mut p = QosLinux::new();
        p.start(&PluginContext::new(
            dir.path().join("sys").to_str().unwrap(),
        ))
        .unwrap();
        (dir, p)
    }

    fn change(dev: &str, setting: &str, to: &str) -> QosChange {
        QosChange {
            device: dev.into(),
            port: 1,
            setting: setting.into(),
            from: None,
            to: to.into(),
        }
    }

    fn observed(p: &mut QosLinux, dev: &str, setting: &str) -> Setting {
        p.observe()
            .unwrap()
            .into_iter()
            .find(|s| s.device == dev)
            .unwrap()
            .settings[setting]
            .clone()
    }

    #[test]
    fn dry_run_changes_nothing_and_says_what_it_would_do() {
        let (_d, mut p) = started_copy();
        let before = p.observe().unwrap();
        let o = p
            .apply(&change("mlx5_1", "roce_mode", "RoCE v2"), true)
            .unwrap();
        assert!(!o.applied);
        assert!(
            o.message.contains("would create") && o.message.contains("rdma_cm/mlx5_1"),
            "{}",
            o.message
        );
        let o = p
            .apply(&change("mlx5_0", "ecn_np_enabled", "3,4"), true)
            .unwrap();
        assert!(o.message.contains("would be written"), "{}", o.message);
        let o = p.apply(&change("mlx5_0", "mtu", "9000"), true).unwrap();
        assert!(
            o.message.starts_with("would write \"9000\""),
            "{}",
            o.message
        );
        assert_eq!(p.observe().unwrap(), before);
    }

    #[test]
    fn apply_writes_configfs_ecn_cnp_and_mtu_and_reports_the_previous_value() {
        let (_d, mut p) = started_copy();
        // mlx5_1 has no configfs directory: unread, but settable (apply creates it).
        let st = p.observe().unwrap();
        let m1 = st.iter().find(|s| s.device == "mlx5_1").unwrap();
        assert_eq!(m1.settable_unread, ["roce_mode", "roce_tos"]);
        assert!(st
            .iter()
            .find(|s| s.device == "mlx5_0")
            .unwrap()
            .settable_unread
            .is_empty());
        // The fixture's configfs is plain files: the directory apply creates gets no port
        // files (the kernel would make them), so the write after it finds none.
        match p.apply(&change("mlx5_1", "roce_tos", "106"), false) {
            Err(PluginError::Unsupported(m)) => {
                assert!(
                    m.contains("mlx5_1/ports/1/default_roce_tos is not there"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(_d.path().join("sys/kernel/config/rdma_cm/mlx5_1").is_dir());
        // On mlx5_0 (directory present) the value is written and read back.
        let o = p.apply(&change("mlx5_0", "roce_tos", "24"), false).unwrap();
        assert_eq!(o.previous.as_deref(), Some("106"));
        assert_eq!(
            observed(&mut p, "mlx5_0", "roce_tos"),
            Setting::Value("24".into())
        );
        let o = p
            .apply(&change("mlx5_0", "ecn_np_enabled", "3,4"), false)
            .unwrap();
        assert_eq!(o.previous.as_deref(), Some("3"));
        assert!(o.message.starts_with("4=1 written"), "{}", o.message);
        assert_eq!(
            observed(&mut p, "mlx5_0", "ecn_np_enabled"),
            Setting::Value("3,4".into())
        );
        let o = p
            .apply(&change("mlx5_0", "ecn_np_enabled", "none"), false)
            .unwrap();
        assert_eq!(o.previous.as_deref(), Some("3,4"));
        assert_eq!(
            observed(&mut p, "mlx5_0", "ecn_np_enabled"),
            Setting::Value("none".into())
        );
        p.apply(&change("mlx5_0", "cnp_dscp", "46"), false).unwrap();
        assert_eq!(
            observed(&mut p, "mlx5_0", "cnp_dscp"),
            Setting::Value("46".into())
        );
        let o = p.apply(&change("mlx5_0", "mtu", "1500"), false).unwrap();
        assert_eq!(o.previous.as_deref(), Some("9000"));
        assert_eq!(
            observed(&mut p, "mlx5_0", "rdma_mtu"),
            Setting::Value("1024".into())
        );
    }

    #[test]
    fn what_the_device_lacks_or_the_root_cannot_do_is_unsupported() {
        let (_d, mut p) = started_copy();
        let unsupported = |r: Result<ApplyOutcome, PluginError>| match r {
            Err(PluginError::Unsupported(m)) => m,
            other => panic!("unsupported expected, got {other:?}"),
        };
        let m = unsupported(p.apply(&change("mlx5_0", "traffic_class", "106"), false));
        assert!(m.contains("traffic_class is not there"), "{m}");
        let m = unsupported(p.apply(&change("mlx5_0", "pfc_enabled", "3"), false));
        assert!(m.contains("not the live /sys"), "{m}");
        let m = unsupported(p.apply(&change("mlx5_0", "pfc_prevention_timeout", "auto"), false));
        assert!(m.contains("live kernel"), "{m}");
        let m = unsupported(p.apply(&change("mlx5_0", "rdma_mtu", "4096"), false));
        assert!(m.contains("cannot set"), "{m}");
        match p.apply(&change("mlx5_0", "ecn_np_enabled", "9"), false) {
            Err(PluginError::Failed(m)) => assert!(m.contains("not a priority"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
