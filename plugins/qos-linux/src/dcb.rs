//! DCB over rtnetlink: PFC, trust and the DSCP map as settings, reading and changing them.

use rocewatch_netlink::dcb::{self, DcbApp, DcbNetlink, IeeeDcb};
use rocewatch_plugin_api::*;

use crate::attr::{outcome, value};
use crate::ecn::priority_set;

/// The DCB settings of a netdev, in this order.
pub(crate) const DCB_KEYS: [&str; 9] = [
    "pfc_enabled",
    "cable_length",
    "trust",
    "dscp_map",
    "prio2buffer",
    "buffer_size",
    "buffer_total",
    "peer_pfc_enabled",
    "peer_app",
];

/// Priorities as "3,4", or "none".
fn priority_list(p: &[u8]) -> String {
    if p.is_empty() {
        "none".into()
    } else {
        p.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
    }
}

/// `v` joined with commas.
fn comma_list<T: ToString>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

/// APP entries the way `dcb app show` groups them: "dgram-port-prio 4791:3 dscp-prio
/// 26:3"; "none" for an empty table.
pub(crate) fn app_text(apps: &[DcbApp]) -> String {
    let mut apps = apps.to_vec();
    apps.sort();
    let mut out: Vec<String> = Vec::new();
    let mut last = None;
    for a in &apps {
        let key = match a.selector {
            dcb::SEL_ETHERTYPE => "ethtype-prio",
            dcb::SEL_STREAM => "stream-port-prio",
            dcb::SEL_DGRAM => "dgram-port-prio",
            dcb::SEL_ANY => "port-prio",
            dcb::SEL_DSCP => "dscp-prio",
            _ => "selector-unknown",
        };
        if last != Some(a.selector) {
            out.push(key.to_string());
            last = Some(a.selector);
        }
        if a.selector == dcb::SEL_ETHERTYPE {
            out.push(format!("{:#06x}:{}", a.protocol, a.priority));
        } else {
            out.push(format!("{}:{}", a.protocol, a.priority));
        }
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(" ")
    }
}

/// The driver whose PFC `delay` is the cable length in metres (`mlx5e_dcbnl_ieee_getpfc`
/// reports `priv->dcbx.cable_len` there, and `_setpfc` takes it from there, 1-999, when
/// the device has port buffers); in `struct ieee_pfc` it is otherwise a delay in bit times.
pub(crate) const CABLE_LENGTH_DRIVER: &str = "mlx5_core";

/// The DCB settings of one netdev; `mlx5`: its driver is [`CABLE_LENGTH_DRIVER`].
fn dcb_settings(dcb: Result<&IeeeDcb, &str>, mlx5: bool) -> Vec<(&'static str, Setting)> {
    let d = match dcb {
        Ok(d) => d,
        Err(why) => {
            return DCB_KEYS
                .iter()
                .map(|k| (*k, Setting::Unknown(why.to_string())))
                .collect()
        }
    };
    let pfc = match &d.pfc {
        Some(p) => value(priority_list(&p.priorities())),
        None => Setting::Unsupported,
    };
    let map = d
        .dscp_map()
        .iter()
        .map(|(dscp, prio)| format!("{dscp}:{prio}"))
        .collect::<Vec<_>>()
        .join(",");
    // A malformed optional attribute: those settings unknown, with what was wrong.
    let missing = |attr: u16| match d.attr_errors.iter().find(|(a, _)| *a == attr) {
        Some((_, e)) => Setting::Unknown(e.clone()),
        None => Setting::Unsupported,
    };
    let (p2b, sizes, total) = match &d.buffer {
        Some(b) => (
            value(comma_list(&b.prio2buffer)),
            value(comma_list(&b.buffer_size)),
            value(b.total_size.to_string()),
        ),
        None => (
            missing(dcb::DCB_BUFFER),
            missing(dcb::DCB_BUFFER),
            missing(dcb::DCB_BUFFER),
        ),
    };
    // mlx5 reports the cable length only with port buffers (0 otherwise).
    let cable = match (&d.pfc, &d.buffer) {
        (Some(p), Some(_)) if mlx5 && p.delay > 0 => value(p.delay.to_string()),
        _ => Setting::Unsupported,
    };
    vec![
        ("pfc_enabled", pfc),
        ("cable_length", cable),
        ("trust", value(d.trust())),
        (
            "dscp_map",
            value(if map.is_empty() { "none".into() } else { map }),
        ),
        ("prio2buffer", p2b),
        ("buffer_size", sizes),
        ("buffer_total", total),
        (
            "peer_pfc_enabled",
            d.peer_pfc.as_ref().map_or_else(
                || missing(dcb::IEEE_PEER_PFC),
                |p| value(priority_list(&p.priorities())),
            ),
        ),
        (
            "peer_app",
            d.peer_apps
                .as_deref()
                .map_or_else(|| missing(dcb::IEEE_PEER_APP), |a| value(app_text(a))),
        ),
    ]
}

/// "0,0,0,1,0,0,0,0" → one value per priority or buffer (all 8), each at most `max`.
fn eight(v: &str, what: &str, max: u64) -> Result<Vec<u64>, String> {
    let v: Vec<&str> = v.split(',').map(str::trim).collect();
    if v.len() != 8 {
        return Err(format!("{} values, 8 expected ({what})", v.len()));
    }
    v.iter()
        .map(|x| match x.parse::<u64>() {
            Ok(n) if n <= max => Ok(n),
            _ => Err(format!("{x:?} is not a {what} (0-{max})")),
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

/// The DCB changes over netlink: PFC priorities, the DSCP map, trust (trust is DSCP
/// while the APP table maps DSCP values, so `trust = dscp` installs the default map,
/// DSCP d to priority d/8, when there is none, and `trust = pcp` removes the map).
fn dcb_apply(
    nl: &mut DcbNetlink,
    ifname: &str,
    mlx5: bool,
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
        dcb_settings(Ok(&cur), mlx5).into_iter().collect();
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
        // The PFC struct read, its delay changed, written back: the enabled priorities
        // stay (a change of them would make mlx5 toggle the link).
        "cable_length" => {
            if !matches!(before.get(setting), Some(Setting::Value(_))) {
                return Err(PluginError::Unsupported(format!(
                    "{ifname} reports no cable length (an mlx5 netdev with port buffers does)"
                )));
            }
            let mut p = cur.pfc.expect("a cable length comes with PFC");
            p.delay = match to.parse::<u16>() {
                Ok(n) if (1..1000).contains(&n) => n,
                _ => {
                    return Err(PluginError::failed(format!(
                        "cable_length {to:?}: metres, 1-999"
                    )))
                }
            };
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
        "prio2buffer" | "buffer_size" => {
            return buffer_apply(nl, &cur, ifname, setting, to, dry_run, previous)
        }
        _ => unreachable!("dcb settings only"),
    }
    let apps = |v: &[(u8, u8)]| {
        v.iter()
            .map(|(d, p)| DcbApp::dscp(*d, *p))
            .collect::<Vec<_>>()
    };
    let what = if setting == "cable_length" {
        format!("{ifname} cable_length -> {to} m (DCB: the PFC struct's delay; the PFC priorities unchanged)")
    } else {
        format!(
            "{ifname} {setting} -> {to} (DCB: {}{} APP entries added, {} removed)",
            if pfc.is_some() {
                "PFC bitmap set, "
            } else {
                ""
            },
            add.len(),
            del.len()
        )
    };
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
    if setting == "cable_length" {
        // mlx5 ignores a length it cannot use (no port buffers, or firmware-owned
        // buffers, where it restores the old one): read back.
        let now = nl
            .ieee_get(ifname)
            .map_err(|e| PluginError::failed(format!("read back after the change: {e}")))?;
        let delay = now.pfc.map(|p| p.delay.to_string());
        if delay.as_deref() != Some(to) {
            return Err(PluginError::failed(format!(
                "{ifname}: the kernel accepted cable_length {to} but reads back {} (the driver keeps the cable length only where it manages the port buffers)",
                delay.as_deref().unwrap_or("nothing")
            )));
        }
    }
    Ok(outcome(true, format!("set {what}"), previous))
}

/// Set `prio2buffer` or `buffer_size`: the driver's buffer operation, then a read back
/// (a driver without the operation ignores the attribute without an error).
fn buffer_apply(
    nl: &mut DcbNetlink,
    cur: &IeeeDcb,
    ifname: &str,
    setting: &str,
    to: &str,
    dry_run: bool,
    previous: Option<String>,
) -> Result<ApplyOutcome, PluginError> {
    let mut b = cur.buffer.ok_or_else(|| {
        PluginError::Unsupported(format!("{ifname}'s driver reports no DCB buffers"))
    })?;
    if setting == "prio2buffer" {
        let v =
            eight(to, "buffer index", dcb::MAX_BUFFERS as u64 - 1).map_err(PluginError::failed)?;
        b.prio2buffer = std::array::from_fn(|i| v.get(i).copied().unwrap_or(0) as u8);
    } else {
        let v = eight(to, "size in bytes", u32::MAX as u64).map_err(PluginError::failed)?;
        b.buffer_size = std::array::from_fn(|i| v.get(i).copied().unwrap_or(0) as u32);
    }
    let what = format!("{ifname} {setting} -> {to} (DCB buffer)");
    if dry_run {
        return Ok(outcome(false, format!("would set {what}"), previous));
    }
    nl.buffer_set(ifname, &b)
        .map_err(|e| PluginError::failed(e.to_string()))?;
    let after = nl
        .ieee_get(ifname)
        .map_err(|e| PluginError::failed(format!("read back after the change: {e}")))?;
    let got = after.buffer.map(|a| {
        if setting == "prio2buffer" {
            comma_list(&a.prio2buffer)
        } else {
            comma_list(&a.buffer_size)
        }
    });
    let want = if setting == "prio2buffer" {
        comma_list(&b.prio2buffer)
    } else {
        comma_list(&b.buffer_size)
    };
    if got.as_deref() != Some(want.as_str()) {
        // What the driver made of it stays on the NIC unless put back: the buffers read
        // before, written again.
        let before = cur.buffer.expect("checked above");
        let restored = match nl.buffer_set(ifname, &before) {
            Ok(()) => "the buffers before written back".to_string(),
            Err(e) => format!("writing the buffers before back failed too: {e}"),
        };
        return Err(PluginError::failed(format!(
            "{ifname}: the kernel accepted {setting} {want} but reads back {} (the driver has no buffer operation, or rounded the sizes to its cells: mlx5 keeps 128-byte cells); {restored}",
            got.as_deref().unwrap_or("nothing")
        )));
    }
    Ok(outcome(true, format!("set {what}"), previous))
}

/// The DCB settings of `ifname` ([`DCB_KEYS`]), read over netlink (the live kernel
/// only: else `dcb` says why not).
pub(crate) fn dcb_state(
    dcb: Option<&mut Result<DcbNetlink, String>>,
    ifname: &str,
    mlx5: bool,
) -> Vec<(&'static str, Setting)> {
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
        Ok(d) => dcb_settings(Ok(&d), mlx5),
        // The driver has no DCB operations: the capability is missing.
        Err(None) => DCB_KEYS
            .iter()
            .map(|k| (*k, Setting::Unsupported))
            .collect(),
        Err(Some(why)) => dcb_settings(Err(&why), mlx5),
    }
}

/// Set `pfc_enabled`, `trust`, `dscp_map`, `prio2buffer` or `buffer_size` of `ifname`
/// over netlink.
pub(crate) fn apply(
    dcb: Option<&mut Result<DcbNetlink, String>>,
    ifname: &str,
    mlx5: bool,
    setting: &str,
    to: &str,
    dry_run: bool,
) -> Result<ApplyOutcome, PluginError> {
    let nl = match dcb {
        Some(Ok(nl)) => nl,
        Some(Err(why)) => return Err(PluginError::Unsupported(why.clone())),
        None => return Err(PluginError::failed("not started")),
    };
    dcb_apply(nl, ifname, mlx5, setting, to, dry_run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_syntax() {
        assert_eq!(dscp_pairs("26:3, 48:6").unwrap(), [(26, 3), (48, 6)]);
        assert!(dscp_pairs("64:1").is_err() && dscp_pairs("26").is_err());
        assert_eq!(
            eight("0,0,0,1,0,0,0,0", "buffer index", 7).unwrap(),
            [0, 0, 0, 1, 0, 0, 0, 0]
        );
        assert!(eight("0,0,0,1", "buffer index", 7)
            .unwrap_err()
            .contains("4 values"));
        assert!(eight("0,8,0,0,0,0,0,0", "buffer index", 7)
            .unwrap_err()
            .contains("\"8\""));
        assert!(eight("0,0,0,0,0,0,0,0,0", "b", 7).is_err());
    }

    #[test]
    fn buffers_and_the_peer_as_settings() {
        let d = IeeeDcb {
            pfc: Some(dcb::IeeePfc {
                enabled: 1 << 3,
                ..Default::default()
            }),
            buffer: Some(dcb::DcbBuffer {
                prio2buffer: [0, 0, 0, 1, 0, 0, 0, 0],
                buffer_size: [130_944, 130_944, 0, 0, 0, 0, 0, 0],
                total_size: 262_016,
            }),
            peer_pfc: Some(dcb::IeeePfc {
                enabled: 0,
                ..Default::default()
            }),
            peer_apps: Some(vec![
                DcbApp::dscp(26, 3),
                DcbApp {
                    selector: dcb::SEL_DGRAM,
                    priority: 3,
                    protocol: 4791,
                },
                DcbApp {
                    selector: dcb::SEL_ETHERTYPE,
                    priority: 3,
                    protocol: 0x8915,
                },
            ]),
            ..Default::default()
        };
        let mut d = d;
        d.pfc.as_mut().unwrap().delay = 7;
        let s: std::collections::BTreeMap<_, _> = dcb_settings(Ok(&d), true).into_iter().collect();
        assert_eq!(s["cable_length"], value("7"));
        // Elsewhere the delay is bit times, not metres.
        let other: std::collections::BTreeMap<_, _> =
            dcb_settings(Ok(&d), false).into_iter().collect();
        assert_eq!(other["cable_length"], Setting::Unsupported);
        assert_eq!(s.len(), DCB_KEYS.len());
        assert_eq!(s["prio2buffer"], value("0,0,0,1,0,0,0,0"));
        assert_eq!(s["buffer_size"], value("130944,130944,0,0,0,0,0,0"));
        assert_eq!(s["buffer_total"], value("262016"));
        assert_eq!(s["peer_pfc_enabled"], value("none"));
        assert_eq!(
            s["peer_app"],
            value("ethtype-prio 0x8915:3 dgram-port-prio 4791:3 dscp-prio 26:3")
        );
        let bare: std::collections::BTreeMap<_, _> = dcb_settings(Ok(&IeeeDcb::default()), true)
            .into_iter()
            .collect();
        assert_eq!(bare["peer_app"], Setting::Unsupported);
        assert_eq!(bare["prio2buffer"], Setting::Unsupported);
    }
}
