//! `[qos]` and `[[qos.desired]]`: the desired settings per device/netdev glob, each value
//! checked and normalized per setting.

use std::collections::BTreeMap;

use globset::Glob;
use serde::Deserialize;

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
    "prio2buffer",
    "buffer_size",
    "cable_length",
    "dcqcn_clamp_tgt_rate",
    "dcqcn_clamp_tgt_rate_after_time_inc",
    "dcqcn_rpg_time_reset",
    "dcqcn_rpg_byte_reset",
    "dcqcn_rpg_threshold",
    "dcqcn_rpg_ai_rate",
    "dcqcn_rpg_max_rate",
    "dcqcn_rpg_hai_rate",
    "dcqcn_rpg_min_dec_fac",
    "dcqcn_rpg_min_rate",
    "dcqcn_rate_to_set_on_first_cnp",
    "dcqcn_dce_tcp_g",
    "dcqcn_dce_tcp_rtt",
    "dcqcn_rate_reduce_monitor_period",
    "dcqcn_initial_alpha_value",
    "dcqcn_rpg_gd",
    "dcqcn_min_time_between_cnps",
];

pub(super) fn star() -> String {
    "*".into()
}

/// `qos/` in the state directory (`$STATE_DIRECTORY`, else `/var/lib/rocewatch`).
pub(super) fn default_snapshot_dir() -> std::path::PathBuf {
    rocewatch_runtime::audit::state_dir().join("qos")
}

pub(super) fn default_interval() -> std::time::Duration {
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
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
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
        "cable_length" => int(1, 999, "metres"),
        // One-bit firmware fields; the rest are 32 bits, which OFED's sysfs prints signed.
        "dcqcn_clamp_tgt_rate" | "dcqcn_clamp_tgt_rate_after_time_inc" => int(0, 1, "0 or 1"),
        s if s.starts_with("dcqcn_") => int(0, i32::MAX as u32, "a whole number"),
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
        "prio2buffer" | "buffer_size" => {
            let (max, what) = if setting == "prio2buffer" {
                (7, "a buffer index")
            } else {
                (u32::MAX as u64, "bytes")
            };
            // All eight: a value left out would be written as 0 (a buffer emptied, a
            // priority moved to buffer 0).
            let parts: Vec<&str> = v.split(',').map(str::trim).collect();
            if parts.len() != 8 {
                return Err(format!(
                    "{v:?}: {} values; all 8 separated by commas ({})",
                    parts.len(),
                    if max == 7 {
                        "the buffer of priorities 0-7"
                    } else {
                        "the bytes of buffers 0-7"
                    }
                ));
            }
            for p in parts {
                if !p.parse::<u64>().is_ok_and(|n| n <= max) {
                    return Err(format!(
                        "{p:?} in {v:?}: {what} (0-{max}), one per {} separated by commas",
                        if max == 7 {
                            "priority 0-7"
                        } else {
                            "buffer 0-7"
                        }
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

/// Settings whose value is one whole number.
fn is_integer_setting(s: &str) -> bool {
    s.starts_with("dcqcn_")
        || matches!(
            s,
            "roce_tos" | "traffic_class" | "cnp_dscp" | "cnp_802p_prio" | "mtu" | "cable_length"
        )
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
        "prio2buffer" | "buffer_size" => v
            .split(',')
            .map(|x| {
                x.trim()
                    .parse::<u64>()
                    .map_or_else(|_| x.trim().to_string(), |n| n.to_string())
            })
            .collect::<Vec<_>>()
            .join(","),
        // Whole numbers as plain decimal: "010" and "+10" are 10 (the kernel's debugfs
        // would read a leading 0 as octal).
        s if is_integer_setting(s) => v
            .parse::<u64>()
            .map_or_else(|_| v.to_string(), |n| n.to_string()),
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

#[cfg(test)]
mod tests {
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
        assert!(check_value("prio2buffer", "0,0,0,1,0,0,0,0").is_ok());
        assert!(check_value("dcqcn_clamp_tgt_rate", "2").is_err());
        assert!(check_value("dcqcn_rpg_ai_rate", "5").is_ok());
        assert!(check_value("dcqcn_rpg_ai_rate", "-5").is_err());
        assert!(check_value("dcqcn_rpg_ai_rate", "4294967295").is_err());
        assert!(check_value("prio2buffer", "0,0,0,8").is_err());
        assert!(check_value("prio2buffer", "0,0,0,1").is_err());
        assert!(check_value("prio2buffer", "0,0,0,1,0,0,0,0").is_ok());
        assert_eq!(
            normalize("prio2buffer", "0, 0,0,01,0,0,0,0"),
            "0,0,0,1,0,0,0,0"
        );
        assert!(check_value("buffer_size", "130944,130944,0,0,0,0,0,0").is_ok());
        assert!(check_value("buffer_size", "262016").is_err());
        assert!(check_value("buffer_size", "1,2,3,4,5,6,7,8,9").is_err());
        assert_eq!(normalize("dcqcn_rpg_ai_rate", "010"), "10");
        assert_eq!(normalize("dcqcn_rpg_ai_rate", "+5"), "5");
        assert_eq!(normalize("mtu", "09000"), "9000");
    }
}
