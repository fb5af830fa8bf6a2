//! DCB over rtnetlink: PFC, trust and the DSCP map as settings, reading and changing them.

use rocewatch_netlink::dcb::{DcbApp, DcbNetlink, IeeeDcb};
use rocewatch_plugin_api::*;

use crate::attr::{outcome, value};
use crate::ecn::priority_set;

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

/// `pfc_enabled`, `trust` and `dscp_map` of `ifname`, read over netlink (the live kernel
/// only: else `dcb` says why not).
pub(crate) fn dcb_state(
    dcb: Option<&mut Result<DcbNetlink, String>>,
    ifname: &str,
) -> [(&'static str, Setting); 3] {
    let dcb = match dcb {
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
        Ok(d) => dcb_settings(Ok(&d)),
        // The driver has no DCB operations: the capability is missing.
        Err(None) => ["pfc_enabled", "trust", "dscp_map"].map(|k| (k, Setting::Unsupported)),
        Err(Some(why)) => dcb_settings(Err(&why)),
    }
}

/// Set `pfc_enabled`, `trust` or `dscp_map` of `ifname` over netlink.
pub(crate) fn apply(
    dcb: Option<&mut Result<DcbNetlink, String>>,
    ifname: &str,
    setting: &str,
    to: &str,
    dry_run: bool,
) -> Result<ApplyOutcome, PluginError> {
    let nl = match dcb {
        Some(Ok(nl)) => nl,
        Some(Err(why)) => return Err(PluginError::Unsupported(why.clone())),
        None => return Err(PluginError::failed("not started")),
    };
    dcb_apply(nl, ifname, setting, to, dry_run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_syntax() {
        assert_eq!(dscp_pairs("26:3, 48:6").unwrap(), [(26, 3), (48, 6)]);
        assert!(dscp_pairs("64:1").is_err() && dscp_pairs("26").is_err());
    }
}
