//! The built-in configuration plugin: what a RoCE port is configured to do, read where
//! Linux keeps it.
//!
//! | setting | where |
//! |---|---|
//! | `roce_mode`, `roce_tos` | configfs `kernel/config/rdma_cm/<dev>/ports/<n>/default_roce_{mode,tos}` (under the sysfs root given, so fixture trees carry it) |
//! | `pfc_enabled`, `trust`, `dscp_map` | DCB over rtnetlink (`DCB_CMD_IEEE_GET`): the PFC bitmap and the APP table; live kernel only |
//! | `prio2buffer`, `buffer_size`, `buffer_total` (read only) | DCB over rtnetlink: `DCB_ATTR_DCB_BUFFER` (`dcb buffer show`) |
//! | `cable_length` (mlx5 with port buffers) | DCB over rtnetlink: the PFC struct's `delay`, which mlx5 takes as metres (`mlnx_qos --cable_len`) |
//! | `peer_pfc_enabled`, `peer_app` (read only) | DCB over rtnetlink: what the link partner announced over DCBX (`DCB_ATTR_IEEE_PEER_PFC`, `_PEER_APP`) |
//! | `ecn_np_enabled`, `ecn_rp_enabled`, `cnp_dscp`, `cnp_802p_prio` | mlx5 `class/net/<if>/ecn/roce_{np,rp}/...` |
//! | `traffic_class` | mlx5 `class/infiniband/<dev>/tc/<port>/traffic_class` |
//! | `dcqcn_*` (DCQCN reaction and notification point parameters) | MLNX_OFED's `class/net/<if>/ecn/roce_{rp,np}/<name>`, else the kernel's debugfs `kernel/debug/mlx5/<PCI>/cc_params/` (also `cnp_dscp`, `cnp_802p_prio` there) |
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
//! Modules (this file: the plugin type, `observe` and `apply`, which hand each setting
//! to the module that owns it):
//! - `configfs`: `roce_mode`, `roce_tos` (configfs `rdma_cm`), read and set, and which of
//!   them are settable though unread.
//! - `dcb`: `pfc_enabled`, `trust`, `dscp_map`, the buffers over DCB rtnetlink, read and
//!   set; the peer's PFC and APP entries, read; the DSCP map syntax.
//! - `ecn`: the mlx5 files: `ecn_np_enabled`, `ecn_rp_enabled` (read and set), the CNP
//!   and `traffic_class` files; the priority-list syntax (also PFC's).
//! - `dcqcn`: the DCQCN parameters, where OFED's sysfs or the kernel's debugfs keeps
//!   them, read and set.
//! - `mtu`: `mtu` and the `rdma_mtu` it implies (`rocewatch_sysfs::parse::rdma_mtu_for`).
//! - `tunable`: `pfc_prevention_timeout` (ethtool tunable), read and set; its syntax.
//! - `attr`: reading a setting from an attribute file, writing one and reading it back;
//!   the `Setting`/`ApplyOutcome` constructors.

mod attr;
mod configfs;
mod dcb;
mod dcqcn;
mod ecn;
mod mtu;
mod tunable;

use std::path::PathBuf;

use rocewatch_ethtool::EthtoolSocket;
use rocewatch_netlink::dcb::DcbNetlink;
use rocewatch_plugin_api::*;
use rocewatch_sysfs::SysRoot;

use attr::{file_setting, write_file, write_file_checked};

/// Options of the plugin: only the device selection the agent shares with every built-in
/// (`[devices]`); the settings of every RDMA port are read and changed. Anything else is
/// a mistake, refused with its name.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl Options {
    /// Decode `options`; errors name the key.
    pub fn from_json(options: &serde_json::Value) -> Result<Options, PluginError> {
        rocewatch_plugin_api::options::decode(options)
    }
}

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
        for (k, v) in configfs::roce_settings(&root, dev, port) {
            settings.insert(k.to_string(), v);
        }
        settings.insert(
            "traffic_class".into(),
            file_setting(&ecn::traffic_class_file(&root, dev, port)),
        );
        match &netdev {
            Some(ifname) => {
                let nd = root.netdev_dir(ifname);
                for (k, v) in ecn::ecn_settings(&nd) {
                    // The kernel's mlx5 keeps the CNP settings in debugfs, OFED's in sysfs.
                    let v = match (&v, dcqcn::cnp_debugfs_file(&root, dev, k)) {
                        (Setting::Unsupported, Some(f)) => file_setting(&f),
                        _ => v,
                    };
                    settings.insert(k.into(), v);
                }
                for (k, v) in dcqcn::dcqcn_settings(&root, dev, Some(&nd)) {
                    settings.insert(k.into(), v);
                }
                for (k, v) in mtu::mtu_settings(&nd) {
                    settings.insert(k.into(), v);
                }
                settings.insert(
                    "pfc_prevention_timeout".into(),
                    tunable::prevention_timeout_setting(self.ethtool.as_ref(), ifname),
                );
                let mlx5 = root.device_driver(dev).as_deref() == Some(dcb::CABLE_LENGTH_DRIVER);
                for (k, v) in dcb::dcb_state(self.dcb.as_mut(), ifname, mlx5) {
                    settings.insert(k.into(), v);
                }
            }
            None => {
                for (k, v) in dcqcn::dcqcn_settings(&root, dev, None) {
                    settings.insert(k.into(), v);
                }
                for k in [
                    "ecn_np_enabled",
                    "ecn_rp_enabled",
                    "cnp_dscp",
                    "cnp_802p_prio",
                    "mtu",
                    "rdma_mtu",
                    "pfc_prevention_timeout",
                ]
                .into_iter()
                .chain(dcb::DCB_KEYS)
                {
                    settings.insert(k.into(), Setting::Unknown("the port has no netdev".into()));
                }
            }
        }
        let settable_unread = configfs::settable_unread(&root, dev);
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
        Options::from_json(&ctx.options)?;
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
                configfs::apply_roce(&root, dev, port, s, to, dry_run)
            }
            s @ ("ecn_np_enabled" | "ecn_rp_enabled") => {
                ecn::apply_enabled(&root.netdev_dir(&netdev()?), s, to, dry_run)
            }
            s @ ("cnp_dscp" | "cnp_802p_prio") => {
                let f = ecn::cnp_file(&root.netdev_dir(&netdev()?), s);
                match dcqcn::cnp_debugfs_file(&root, dev, s) {
                    Some(d) if !f.exists() => write_file_checked(&d, to, dry_run),
                    _ => write_file_checked(&f, to, dry_run),
                }
            }
            s if s.starts_with("dcqcn_") => {
                let nd = netdev().ok().map(|n| root.netdev_dir(&n));
                write_file_checked(
                    &dcqcn::apply_file(&root, dev, nd.as_deref(), s)?,
                    to,
                    dry_run,
                )
            }
            "mtu" => write_file(&mtu::mtu_file(&root.netdev_dir(&netdev()?)), to, dry_run),
            "traffic_class" => write_file(&ecn::traffic_class_file(&root, dev, port), to, dry_run),
            s @ ("pfc_enabled" | "trust" | "dscp_map" | "prio2buffer" | "buffer_size"
            | "cable_length") => {
                let ifname = netdev()?;
                let mlx5 = root.device_driver(dev).as_deref() == Some(dcb::CABLE_LENGTH_DRIVER);
                dcb::apply(self.dcb.as_mut(), &ifname, mlx5, s, to, dry_run)
            }
            "pfc_prevention_timeout" => {
                let ifname = netdev()?;
                tunable::apply_prevention_timeout(self.ethtool.as_ref(), &ifname, to, dry_run)
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

    /// DCQCN where MLNX_OFED keeps it (mlx5_0: `ecn/roce_rp/rpg_ai_rate`...) and where
    /// the kernel does (mlx5_1: debugfs `mlx5/0000:3b:00.1/cc_params/rp_ai_rate`...),
    /// laid out from en_sysfs.c and cong.c with the defaults NVIDIA documents.
    #[test]
    fn dcqcn_from_ofed_sysfs_or_the_kernels_debugfs() {
        let (d, mut p) = started_copy();
        let sys = d.path().join("sys");
        // Before either exists: unknown on mlx5, saying where it looked.
        match observed(&mut p, "mlx5_1", "dcqcn_rpg_ai_rate") {
            Setting::Unknown(why) => assert!(
                why.contains("kernel/debug/mlx5/0000:3b:00.1/cc_params is not there"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        let nd = sys.join("class/net/ens1f0np0/ecn");
        for (dir, file, v) in [
            ("roce_rp", "rpg_ai_rate", "5"),
            ("roce_rp", "rpg_time_reset", "300"),
            ("roce_rp", "clamp_tgt_rate", "0"),
            ("roce_np", "min_time_between_cnps", "4"),
        ] {
            std::fs::write(nd.join(dir).join(file), v).unwrap();
        }
        let cc = sys.join("kernel/debug/mlx5/0000:3b:00.1/cc_params");
        std::fs::create_dir_all(&cc).unwrap();
        for (file, v) in [
            ("rp_ai_rate", "5"),
            ("rp_time_reset", "300"),
            ("rp_clamp_tgt_rate_ati", "1"),
            ("np_min_time_between_cnps", "0"),
            ("np_cnp_dscp", "48"),
        ] {
            std::fs::write(cc.join(file), v).unwrap();
        }
        std::fs::remove_file(sys.join("class/net/ens1f1np1/ecn/roce_np/cnp_dscp")).unwrap();
        assert_eq!(
            observed(&mut p, "mlx5_0", "dcqcn_rpg_ai_rate"),
            Setting::Value("5".into())
        );
        assert_eq!(
            observed(&mut p, "mlx5_0", "dcqcn_min_time_between_cnps"),
            Setting::Value("4".into())
        );
        // OFED's sysfs without the file: the driver lacks it.
        assert_eq!(
            observed(&mut p, "mlx5_0", "dcqcn_rpg_gd"),
            Setting::Unsupported
        );
        assert_eq!(
            observed(&mut p, "mlx5_1", "dcqcn_rpg_time_reset"),
            Setting::Value("300".into())
        );
        assert_eq!(
            observed(&mut p, "mlx5_1", "dcqcn_clamp_tgt_rate_after_time_inc"),
            Setting::Value("1".into())
        );
        // The CNP DSCP from debugfs where sysfs has none.
        assert_eq!(
            observed(&mut p, "mlx5_1", "cnp_dscp"),
            Setting::Value("48".into())
        );
        // Applied where each lives, read back.
        let o = p
            .apply(&change("mlx5_0", "dcqcn_rpg_ai_rate", "10"), false)
            .unwrap();
        assert_eq!(o.previous.as_deref(), Some("5"));
        assert!(
            o.message.contains("ecn/roce_rp/rpg_ai_rate"),
            "{}",
            o.message
        );
        let o = p
            .apply(&change("mlx5_1", "dcqcn_rpg_ai_rate", "20"), false)
            .unwrap();
        assert!(o.message.contains("cc_params/rp_ai_rate"), "{}", o.message);
        assert_eq!(
            observed(&mut p, "mlx5_1", "dcqcn_rpg_ai_rate"),
            Setting::Value("20".into())
        );
        p.apply(&change("mlx5_1", "cnp_dscp", "46"), false).unwrap();
        assert_eq!(
            std::fs::read_to_string(cc.join("np_cnp_dscp")).unwrap(),
            "46"
        );
        let o = p
            .apply(&change("mlx5_1", "dcqcn_rpg_ai_rate", "40"), true)
            .unwrap();
        assert!(
            !o.applied && o.message.starts_with("would write \"40\""),
            "{o:?}"
        );
        assert_eq!(
            std::fs::read_to_string(cc.join("rp_ai_rate")).unwrap(),
            "20"
        );
        // A file the driver lacks: unsupported, naming it.
        match p.apply(&change("mlx5_1", "dcqcn_rpg_min_rate", "1"), false) {
            Err(PluginError::Unsupported(m)) => {
                assert!(m.contains("cc_params/rp_min_rate is not there"), "{m}")
            }
            other => panic!("{other:?}"),
        }
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
