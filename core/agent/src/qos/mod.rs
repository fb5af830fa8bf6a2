//! Desired RoCE/PFC/ECN state (`[[qos.desired]]`) and the plan that takes the observed
//! state there: which setting of which port differs, and which cannot be compared (the
//! device lacks it, or it could not be read).
//!
//! ```toml
//! [[qos.desired]]
//! devices = "mlx5_*"          # glob on the RDMA device (default: every device)
//! netdevs = "*"               # glob on the netdev (default: every netdev)
//! settings = { roce_mode = "RoCE v2", pfc_enabled = "3", trust = "dscp", ecn_np_enabled = "3", mtu = "9000" }
//! ```
//!
//! Entries apply in order; a later one overrides an earlier one's value for a setting.

pub mod apply;

use std::collections::BTreeMap;

use globset::Glob;
use rocewatch_plugin_api::{QosState, Setting};
use serde::{Deserialize, Serialize};

/// The settings a desired state may name (`rdma_mtu` follows from `mtu`).
pub const SETTABLE: &[&str] = &[
    "roce_mode",
    "roce_tos",
    "pfc_enabled",
    "trust",
    "dscp_map",
    "ecn_np_enabled",
    "ecn_rp_enabled",
    "cnp_dscp",
    "cnp_802p_prio",
    "traffic_class",
    "mtu",
    "pfc_prevention_timeout",
];

fn star() -> String {
    "*".into()
}

fn default_snapshot_dir() -> std::path::PathBuf {
    "/var/lib/rocewatch/qos".into()
}

fn default_interval() -> std::time::Duration {
    std::time::Duration::from_secs(60)
}

/// `[qos]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    #[serde(default)]
    pub desired: Vec<DesiredEntry>,
    /// How often the agent reads the configuration for its metrics (`rdma.qos.*`);
    /// `0s` turns that off.
    #[serde(
        default = "default_interval",
        deserialize_with = "crate::config::de_duration"
    )]
    pub interval: std::time::Duration,
    /// Where `qos apply` keeps what it replaced, for `qos rollback`.
    #[serde(default = "default_snapshot_dir")]
    pub snapshot_dir: std::path::PathBuf,
}

impl Default for QosConfig {
    fn default() -> Self {
        QosConfig {
            desired: Vec::new(),
            interval: default_interval(),
            snapshot_dir: default_snapshot_dir(),
        }
    }
}

/// One `[[qos.desired]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesiredEntry {
    #[serde(default = "star")]
    pub devices: String,
    #[serde(default = "star")]
    pub netdevs: String,
    pub settings: BTreeMap<String, String>,
}

/// What is wrong with the desired state: (key, message).
pub fn validate(cfg: &QosConfig) -> Result<(), (String, String)> {
    for (i, e) in cfg.desired.iter().enumerate() {
        for (k, g) in [("devices", &e.devices), ("netdevs", &e.netdevs)] {
            Glob::new(g).map_err(|err| (format!("qos.desired[{i}].{k}"), err.to_string()))?;
        }
        if e.settings.is_empty() {
            return Err((
                format!("qos.desired[{i}].settings"),
                "names no setting".into(),
            ));
        }
        for (k, v) in &e.settings {
            if !SETTABLE.contains(&k.as_str()) {
                return Err((
                    format!("qos.desired[{i}].settings.{k}"),
                    format!("not a setting; known: {}", SETTABLE.join(", ")),
                ));
            }
            check_value(k, v).map_err(|m| (format!("qos.desired[{i}].settings.{k}"), m))?;
        }
    }
    Ok(())
}

/// Whether `v` is a value `setting` can take (what apply would write).
pub fn check_value(setting: &str, v: &str) -> Result<(), String> {
    let v = v.trim();
    let int = |lo: u32, hi: u32, what: &str| match v.parse::<u32>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(()),
        _ => Err(format!("{v:?}: {what} ({lo}-{hi})")),
    };
    let prio_list = || {
        if v == "none" {
            return Ok(());
        }
        for p in v.split(',').map(str::trim) {
            match p.parse::<u8>() {
                Ok(n) if n < 8 => {}
                _ => {
                    return Err(format!(
                        "{v:?}: priorities 0-7 separated by commas, or \"none\""
                    ))
                }
            }
        }
        Ok(())
    };
    match setting {
        "roce_mode" => match canonical_roce_mode(v) {
            Some(_) => Ok(()),
            None => Err(format!("{v:?}: \"RoCE v2\" or \"IB/RoCE v1\"")),
        },
        "roce_tos" | "traffic_class" => int(0, 255, "a ToS byte"),
        "cnp_dscp" => int(0, 63, "a DSCP value"),
        "cnp_802p_prio" => int(0, 7, "a priority"),
        "mtu" => int(68, 65535, "bytes"),
        "pfc_enabled" | "ecn_np_enabled" | "ecn_rp_enabled" => prio_list(),
        "trust" if v == "dscp" || v == "pcp" => Ok(()),
        "trust" => Err(format!("{v:?}: \"dscp\" or \"pcp\"")),
        "dscp_map" if v == "none" => Ok(()),
        "dscp_map" => {
            for pair in v.split(',').map(str::trim) {
                let ok = pair.split_once(':').is_some_and(|(d, p)| {
                    d.trim().parse::<u8>().is_ok_and(|d| d < 64)
                        && p.trim().parse::<u8>().is_ok_and(|p| p < 8)
                });
                if !ok {
                    return Err(format!(
                        "{pair:?}: DSCP:PRIORITY pairs (DSCP 0-63, priority 0-7) separated by commas, or \"none\""
                    ));
                }
            }
            Ok(())
        }
        "pfc_prevention_timeout" if v == "auto" || v == "off" => Ok(()),
        "pfc_prevention_timeout" => int(1, 65534, "milliseconds, \"auto\" or \"off\""),
        _ => Ok(()),
    }
}

/// `RoCE v2` / `IB/RoCE v1` as configfs spells them, from those or `v2`, `2`, `v1`...
pub fn canonical_roce_mode(v: &str) -> Option<&'static str> {
    match v.trim().to_ascii_lowercase().as_str() {
        "roce v2" | "rocev2" | "v2" | "2" => Some("RoCE v2"),
        "ib/roce v1" | "roce v1" | "rocev1" | "v1" | "1" => Some("IB/RoCE v1"),
        _ => None,
    }
}

/// Lists of priorities compare as sets ("4,3" is "3,4"); everything else as trimmed text.
pub fn normalize(setting: &str, v: &str) -> String {
    let v = v.trim();
    match setting {
        "pfc_enabled" | "ecn_np_enabled" | "ecn_rp_enabled" if v != "none" => {
            let mut p: Vec<&str> = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            p.sort();
            p.dedup();
            if p.is_empty() {
                "none".into()
            } else {
                p.join(",")
            }
        }
        "roce_mode" => canonical_roce_mode(v).map_or_else(|| v.to_string(), str::to_string),
        "dscp_map" if v != "none" => {
            let mut p: Vec<(u8, u8)> = v
                .split(',')
                .filter_map(|pair| {
                    let (d, p) = pair.split_once(':')?;
                    Some((d.trim().parse().ok()?, p.trim().parse().ok()?))
                })
                .collect();
            p.sort();
            p.dedup();
            p.iter()
                .map(|(d, p)| format!("{d}:{p}"))
                .collect::<Vec<_>>()
                .join(",")
        }
        _ => v.to_string(),
    }
}

/// One difference between the observed and the desired state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub setting: String,
    /// The observed value ("unknown" when it could not be read but can be set).
    pub from: String,
    pub to: String,
    /// The value could not be read before (see `QosState::settable_unread`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unread: bool,
}

/// A desired setting that cannot be compared on a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Blocked {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub setting: String,
    pub to: String,
    pub reason: String,
}

/// The plan: what differs, what cannot be compared, how many settings already match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub changes: Vec<Change>,
    pub blocked: Vec<Blocked>,
    pub in_sync: usize,
}

impl Plan {
    pub fn is_clean(&self) -> bool {
        self.changes.is_empty() && self.blocked.is_empty()
    }
}

/// The desired settings of one port: every matching entry, in order.
pub fn desired_for(cfg: &QosConfig, st: &QosState) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in &cfg.desired {
        let m = |g: &str, v: Option<&str>| {
            Glob::new(g)
                .map(|g| g.compile_matcher().is_match(v.unwrap_or("")))
                .unwrap_or(false)
        };
        if m(&e.devices, Some(&st.device))
            && (e.netdevs == "*" || m(&e.netdevs, st.netdev.as_deref()))
        {
            for (k, v) in &e.settings {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// Compare every port's observed settings with what the configuration wants.
pub fn plan(cfg: &QosConfig, observed: &[QosState]) -> Plan {
    let mut p = Plan::default();
    for st in observed {
        for (setting, to) in desired_for(cfg, st) {
            let (device, port, netdev) = (st.device.clone(), st.port, st.netdev.clone());
            let blocked = |reason: String| Blocked {
                device: device.clone(),
                port,
                netdev: netdev.clone(),
                setting: setting.clone(),
                to: to.clone(),
                reason,
            };
            match st.settings.get(&setting) {
                Some(Setting::Value(v)) => {
                    if normalize(&setting, v) == normalize(&setting, &to) {
                        p.in_sync += 1;
                    } else {
                        p.changes.push(Change {
                            device,
                            port,
                            netdev,
                            setting: setting.clone(),
                            from: v.clone(),
                            to: normalize(&setting, &to),
                            unread: false,
                        });
                    }
                }
                Some(Setting::Unsupported) => p
                    .blocked
                    .push(blocked("the device does not have this setting".into())),
                Some(Setting::Unknown(_)) if st.settable_unread.contains(&setting) => {
                    p.changes.push(Change {
                        device,
                        port,
                        netdev,
                        setting: setting.clone(),
                        from: "unknown".into(),
                        to: normalize(&setting, &to),
                        unread: true,
                    })
                }
                Some(Setting::Unknown(why)) => p.blocked.push(blocked(format!("unknown: {why}"))),
                None => p
                    .blocked
                    .push(blocked("no configuration plugin reports it".into())),
            }
        }
    }
    p
}

/// `mlx5_0/1 (ens1f0np0)`: how every QoS text names a port.
pub fn port_label(device: &str, port: u32, netdev: Option<&str>) -> String {
    format!("{device}/{port} ({})", netdev.unwrap_or("no netdev"))
}

/// The plan as text: one line per difference, then what could not be compared.
pub fn plan_text(p: &Plan) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for c in &p.changes {
        let _ = writeln!(
            s,
            "change  {}  {}: {} -> {}",
            port_label(&c.device, c.port, c.netdev.as_deref()),
            c.setting,
            c.from,
            c.to
        );
    }
    for b in &p.blocked {
        let _ = writeln!(s, "{}", blocked_line(b, 8));
    }
    let _ = writeln!(
        s,
        "{} to change, {} that cannot be compared, {} already as desired",
        p.changes.len(),
        p.blocked.len(),
        p.in_sync
    );
    s
}

/// "cannot  mlx5_0/1 (ens1f0np0)  pfc_enabled -> 3: why", the word padded to `width`.
pub fn blocked_line(b: &Blocked, width: usize) -> String {
    format!(
        "{:<width$}{}  {} -> {}: {}",
        "cannot",
        port_label(&b.device, b.port, b.netdev.as_deref()),
        b.setting,
        b.to,
        b.reason
    )
}

/// One setting that differs between two hosts' `qos show --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostDiff {
    /// `device/port`.
    pub port: String,
    pub setting: String,
    /// The setting on each side, as `qos show` prints it (`absent` when not reported).
    pub a: String,
    pub b: String,
}

/// A setting as `qos show` prints it (`absent` when not reported).
pub fn setting_text(s: Option<&Setting>) -> String {
    match s {
        Some(Setting::Value(v)) => v.clone(),
        Some(Setting::Unsupported) => "unsupported".into(),
        Some(Setting::Unknown(why)) => format!("unknown: {why}"),
        None => "absent".into(),
    }
}

/// Compare two hosts' port states, port by port (`device/port`) and setting by setting;
/// a port on one side only is one difference with the setting `port`.
pub fn diff_hosts(a: &[QosState], b: &[QosState]) -> Vec<HostDiff> {
    let key = |s: &QosState| format!("{}/{}", s.device, s.port);
    let ports: std::collections::BTreeSet<String> = a.iter().chain(b).map(key).collect();
    let mut out = Vec::new();
    for p in ports {
        let (sa, sb) = (
            a.iter().find(|s| key(s) == p),
            b.iter().find(|s| key(s) == p),
        );
        match (sa, sb) {
            (Some(sa), Some(sb)) => {
                let names: std::collections::BTreeSet<&String> =
                    sa.settings.keys().chain(sb.settings.keys()).collect();
                for n in names {
                    let (va, vb) = (sa.settings.get(n), sb.settings.get(n));
                    let same = match (va, vb) {
                        (Some(Setting::Value(x)), Some(Setting::Value(y))) => {
                            normalize(n, x) == normalize(n, y)
                        }
                        _ => va == vb,
                    };
                    if !same {
                        out.push(HostDiff {
                            port: p.clone(),
                            setting: n.clone(),
                            a: setting_text(va),
                            b: setting_text(vb),
                        });
                    }
                }
            }
            (x, _) => out.push(HostDiff {
                port: p.clone(),
                setting: "port".into(),
                a: if x.is_some() { "present" } else { "absent" }.into(),
                b: if x.is_some() { "absent" } else { "present" }.into(),
            }),
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn values_checked_and_normalized_per_setting() {
        assert!(check_value("roce_mode", "v2").is_ok());
        assert_eq!(normalize("roce_mode", "v2"), "RoCE v2");
        assert_eq!(normalize("roce_mode", "IB/RoCE v1"), "IB/RoCE v1");
        assert!(check_value("roce_mode", "v3").is_err());
        assert_eq!(normalize("dscp_map", "48:6, 26:3"), "26:3,48:6");
        assert!(check_value("dscp_map", "26:3,48:6").is_ok());
        assert!(check_value("dscp_map", "64:3").is_err());
        assert!(check_value("pfc_prevention_timeout", "auto").is_ok());
        assert!(check_value("pfc_prevention_timeout", "65535").is_err());
        assert!(check_value("cnp_802p_prio", "8").is_err());
        assert!(check_value("mtu", "9000").is_ok());
        assert!(check_value("ecn_np_enabled", "none").is_ok());
        assert!(check_value("ecn_np_enabled", "3;4").is_err());
    }

    /// Port 1 of `dev` on netdev `nd` with settings `s`.
    pub(crate) fn state(dev: &str, nd: &str, s: &[(&str, Setting)]) -> QosState {
        QosState {
            device: dev.into(),
            port: 1,
            netdev: Some(nd.into()),
            settings: s.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            settable_unread: Vec::new(),
        }
    }

    fn cfg(text: &str) -> QosConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn plan_lists_differences_and_what_cannot_be_compared() {
        let c = cfg(r#"
[[desired]]
settings = { roce_mode = "RoCE v2", pfc_enabled = "3", mtu = "9000" }
[[desired]]
devices = "mlx5_1"
settings = { pfc_enabled = "3,4" }
"#);
        assert!(validate(&c).is_ok());
        let v = |s: &str| Setting::Value(s.into());
        let obs = [
            state(
                "mlx5_0",
                "ens1f0np0",
                &[
                    ("roce_mode", v("RoCE v2")),
                    ("pfc_enabled", v("3")),
                    ("mtu", v("1500")),
                ],
            ),
            state(
                "mlx5_1",
                "ens1f1np1",
                &[
                    ("roce_mode", Setting::Unknown("not created".into())),
                    ("pfc_enabled", v("4,3")),
                    ("mtu", Setting::Unsupported),
                ],
            ),
        ];
        let p = plan(&c, &obs);
        assert_eq!(p.changes.len(), 1);
        assert_eq!(
            (p.changes[0].device.as_str(), p.changes[0].setting.as_str()),
            ("mlx5_0", "mtu")
        );
        assert_eq!(
            (p.changes[0].from.as_str(), p.changes[0].to.as_str()),
            ("1500", "9000")
        );
        // "4,3" is "3,4"; the later entry's value wins for mlx5_1.
        assert_eq!(p.in_sync, 3);
        let blocked: Vec<_> = p.blocked.iter().map(|b| b.setting.as_str()).collect();
        assert_eq!(blocked, ["mtu", "roce_mode"]);
        assert!(p.blocked[1].reason.contains("not created"));
        assert!(!p.is_clean());
        let text = plan_text(&p);
        assert!(
            text.contains("change  mlx5_0/1 (ens1f0np0)  mtu: 1500 -> 9000\n"),
            "{text}"
        );
        assert!(text.ends_with("1 to change, 2 that cannot be compared, 3 already as desired\n"));
    }

    #[test]
    fn validation_names_the_key() {
        let e = validate(&cfg("[[desired]]\nsettings = { roce_mode2 = \"x\" }")).unwrap_err();
        assert_eq!(e.0, "qos.desired[0].settings.roce_mode2");
        let e = validate(&cfg(
            "[[desired]]\ndevices = \"[\"\nsettings = { mtu = \"9000\" }",
        ))
        .unwrap_err();
        assert_eq!(e.0, "qos.desired[0].devices");
        let e = validate(&cfg("[[desired]]\nsettings = {}")).unwrap_err();
        assert_eq!(e.0, "qos.desired[0].settings");
        assert_eq!(normalize("pfc_enabled", " 4, 3 ,3"), "3,4");
        assert_eq!(normalize("roce_mode", " RoCE v2\n"), "RoCE v2");
    }

    #[test]
    fn two_hosts_differ_setting_by_setting() {
        let v = |s: &str| Setting::Value(s.into());
        let a = [
            state(
                "mlx5_0",
                "e0",
                &[("pfc_enabled", v("3,4")), ("mtu", v("9000"))],
            ),
            state("mlx5_1", "e1", &[("mtu", v("9000"))]),
        ];
        let b = [state(
            "mlx5_0",
            "e0",
            &[
                ("pfc_enabled", v("4,3")),
                ("mtu", v("1500")),
                ("trust", Setting::Unsupported),
            ],
        )];
        let d = diff_hosts(&a, &b);
        let rows: Vec<(&str, &str, &str, &str)> = d
            .iter()
            .map(|x| {
                (
                    x.port.as_str(),
                    x.setting.as_str(),
                    x.a.as_str(),
                    x.b.as_str(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("mlx5_0/1", "mtu", "9000", "1500"),
                ("mlx5_0/1", "trust", "absent", "unsupported"),
                ("mlx5_1/1", "port", "present", "absent"),
            ]
        );
        assert!(diff_hosts(&a, &a).is_empty());
    }
}
