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

use std::path::{Path, PathBuf};

use rocewatch_counters_ethtool::ioctl::{self, EthtoolSocket};
use rocewatch_netlink::dcb::{DcbApp, DcbNetlink, IeeeDcb};
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
    /// The ethtool socket (PFC storm-prevention timeout), on the live /sys only.
    ethtool: Option<Result<EthtoolSocket, String>>,
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

fn outcome(applied: bool, message: String, previous: Option<String>) -> ApplyOutcome {
    ApplyOutcome {
        applied,
        message,
        previous,
    }
}

/// Write `to` into an attribute file that must exist, and read it back; in a dry run,
/// say what would be written.
fn write_file(file: &Path, to: &str, dry_run: bool) -> Result<ApplyOutcome, PluginError> {
    let previous = match read(file).map_err(PluginError::failed)? {
        Some(v) => v,
        None => {
            return Err(PluginError::Unsupported(format!(
                "{} is not there",
                file.display()
            )))
        }
    };
    if dry_run {
        return Ok(outcome(
            false,
            format!(
                "would write {to:?} to {} (now {previous:?})",
                file.display()
            ),
            Some(previous),
        ));
    }
    std::fs::write(file, to)
        .map_err(|e| PluginError::failed(format!("write {to:?} to {}: {e}", file.display())))?;
    let now = read(file).map_err(PluginError::failed)?.unwrap_or_default();
    let msg = if now == to {
        format!("{}: {previous:?} -> {to:?}", file.display())
    } else {
        format!(
            "{}: {previous:?} -> {to:?} (reads back as {now:?})",
            file.display()
        )
    };
    Ok(outcome(true, msg, Some(previous)))
}

/// "3,4" / "none" → the priorities.
fn priority_set(v: &str) -> Result<Vec<u8>, String> {
    if v == "none" {
        return Ok(Vec::new());
    }
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|p| match p.parse::<u8>() {
            Ok(n) if n < 8 => Ok(n),
            _ => Err(format!("{p:?} is not a priority (0-7)")),
        })
        .collect()
}

/// "26:3,48:6" / "none" → DSCP → priority.
fn dscp_pairs(v: &str) -> Result<Vec<(u8, u8)>, String> {
    if v == "none" {
        return Ok(Vec::new());
    }
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (d, p) = pair
                .split_once(':')
                .ok_or_else(|| format!("{pair:?} is not DSCP:PRIORITY"))?;
            match (d.trim().parse::<u8>(), p.trim().parse::<u8>()) {
                (Ok(d), Ok(p)) if d < 64 && p < 8 => Ok((d, p)),
                _ => Err(format!("{pair:?}: DSCP 0-63, priority 0-7")),
            }
        })
        .collect()
}

/// "auto", "off" or milliseconds.
fn parse_prevention_timeout(v: &str) -> Result<u16, String> {
    match v {
        "auto" => Ok(ioctl::PFC_PREVENTION_AUTO),
        "off" => Ok(0),
        ms => ms
            .parse::<u16>()
            .ok()
            .filter(|m| *m != ioctl::PFC_PREVENTION_AUTO)
            .ok_or_else(|| format!("{v:?}: \"auto\", \"off\" or milliseconds")),
    }
}

fn prevention_text(v: u16) -> String {
    match v {
        ioctl::PFC_PREVENTION_AUTO => "auto".into(),
        0 => "off".into(),
        ms => ms.to_string(),
    }
}

fn tunable_error(ifname: &str, e: std::io::Error) -> PluginError {
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        PluginError::Unsupported(format!(
            "{ifname}'s driver has no PFC storm-prevention timeout"
        ))
    } else {
        PluginError::failed(format!("{ifname} pfc-prevention-tout: {e}"))
    }
}

/// The DCB changes over netlink: PFC priorities, the DSCP map, trust (trust is DSCP
/// while the APP table maps DSCP values, so `trust = dscp` installs the default map,
/// DSCP d to priority d/8, when there is none, and `trust = pcp` removes the map).
fn dcb_apply(
    nl: &mut DcbNetlink,
    ifname: &str,
    setting: &str,
    to: &str,
    dry_run: bool,
) -> Result<ApplyOutcome, PluginError> {
    let kernel = |e: rocewatch_netlink::NetlinkError| match e {
        rocewatch_netlink::NetlinkError::Kernel { errno, .. } if errno == libc::EOPNOTSUPP => {
            PluginError::Unsupported(format!("{ifname}'s driver has no DCB operations"))
        }
        e => PluginError::failed(e.to_string()),
    };
    let cur = nl.ieee_get(ifname).map_err(kernel)?;
    let before: std::collections::BTreeMap<&str, Setting> =
        dcb_settings(Ok(&cur)).into_iter().collect();
    let previous = match before.get(setting) {
        Some(Setting::Value(v)) => Some(v.clone()),
        _ => None,
    };
    let map = cur.dscp_map();
    let (mut add, mut del) = (Vec::new(), Vec::new());
    let mut pfc = None;
    match setting {
        "pfc_enabled" => {
            let mut p = cur.pfc.ok_or_else(|| {
                PluginError::Unsupported(format!("{ifname}'s driver reports no PFC"))
            })?;
            p.enabled = priority_set(to)
                .map_err(PluginError::failed)?
                .iter()
                .fold(0u8, |m, p| m | (1 << p));
            pfc = Some(p);
        }
        "dscp_map" => {
            let want = dscp_pairs(to).map_err(PluginError::failed)?;
            add = want.iter().filter(|w| !map.contains(w)).copied().collect();
            del = map.iter().filter(|m| !want.contains(m)).copied().collect();
        }
        "trust" => match to {
            "dscp" if map.is_empty() => add = (0..64u8).map(|d| (d, d >> 3)).collect(),
            "dscp" => {}
            "pcp" => del = map.clone(),
            other => return Err(PluginError::failed(format!("trust {other:?}: dscp or pcp"))),
        },
        _ => unreachable!("dcb settings only"),
    }
    let apps = |v: &[(u8, u8)]| {
        v.iter()
            .map(|(d, p)| DcbApp::dscp(*d, *p))
            .collect::<Vec<_>>()
    };
    let what = format!(
        "{ifname} {setting} -> {to} (DCB: {}{} APP entries added, {} removed)",
        if pfc.is_some() {
            "PFC bitmap set, "
        } else {
            ""
        },
        add.len(),
        del.len()
    );
    if dry_run {
        return Ok(outcome(false, format!("would set {what}"), previous));
    }
    // Added before removed: a map being replaced never passes through "no map" (which
    // would switch the port to PCP trust for a moment).
    if pfc.is_some() || !add.is_empty() {
        nl.ieee_set(ifname, pfc.as_ref(), &apps(&add))
            .map_err(kernel)?;
    }
    if !del.is_empty() {
        nl.ieee_del(ifname, &apps(&del)).map_err(kernel)?;
    }
    Ok(outcome(true, format!("set {what}"), previous))
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

    #[test]
    fn value_syntax() {
        assert_eq!(priority_set("4,3").unwrap(), [4, 3]);
        assert_eq!(priority_set("none").unwrap(), [] as [u8; 0]);
        assert!(priority_set("8").is_err());
        assert_eq!(dscp_pairs("26:3, 48:6").unwrap(), [(26, 3), (48, 6)]);
        assert!(dscp_pairs("64:1").is_err() && dscp_pairs("26").is_err());
        assert_eq!(parse_prevention_timeout("auto").unwrap(), 0xffff);
        assert_eq!(parse_prevention_timeout("off").unwrap(), 0);
        assert_eq!(parse_prevention_timeout("500").unwrap(), 500);
        assert!(parse_prevention_timeout("65535").is_err());
        assert_eq!(prevention_text(0xffff), "auto");
    }

    #[test]
    fn rdma_mtu_from_netdev_mtu() {
        assert_eq!(rdma_mtu_for(9000), Some(4096));
        assert_eq!(rdma_mtu_for(4200), Some(4096));
        assert_eq!(rdma_mtu_for(4191), Some(2048));
        assert_eq!(rdma_mtu_for(1500), Some(1024));
        assert_eq!(rdma_mtu_for(300), None);
    }
}
