//! The switch's view from the host: the PFC and APP configuration the link partner
//! announced over DCBX (DCB netlink's IEEE peer attributes, read by the configuration
//! plugin as `peer_pfc_enabled` and `peer_app`) against the host's own.

use rocewatch_plugin_api::{QosState, Setting};

use super::qos::setting;
use crate::check::{check, Check, Status, ROCE_PORT};
use crate::shell::word_on_one_line as word;

/// Priorities of a "3,4" / "none" list.
fn priorities(list: &str) -> Vec<u8> {
    list.split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// `(selector word, protocol, priority)` of a `dcb app show`-like text
/// ("dgram-port-prio 4791:3 dscp-prio 26:3"); an ethtype's protocol is hex.
pub(crate) fn app_entries(text: &str) -> Vec<(String, u32, u8)> {
    let mut out = Vec::new();
    let mut sel = String::new();
    for tok in text.split_whitespace() {
        match tok.rsplit_once(':') {
            Some((proto, prio)) => {
                let proto = match proto.strip_prefix("0x") {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => proto.parse().ok(),
                };
                if let (Some(proto), Ok(prio)) = (proto, prio.parse()) {
                    out.push((sel.clone(), proto, prio));
                }
            }
            None => sel = tok.to_string(),
        }
    }
    out
}

/// Where the switch sends RoCE, if not to `prio`: its UDP 4791 entries, and its DSCP
/// entries for the DSCPs the host marks RoCE with (its RoCE ToS, else its own map's
/// DSCPs to the priority).
fn roce_elsewhere(
    qos: &[QosState],
    dev: &str,
    port: u32,
    prio: u8,
    peer_app: Option<&Setting>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    let host_dscps: Vec<u32> = match setting(qos, dev, port, "roce_tos") {
        // ToS 0 is "not set" (applications set their own): the host's map says then.
        Some(Setting::Value(t)) if t.trim().parse::<u32>().is_ok_and(|t| t > 0) => {
            vec![t.trim().parse::<u32>().expect("checked") >> 2]
        }
        _ => match setting(qos, dev, port, "dscp_map") {
            Some(Setting::Value(m)) => m
                .split(',')
                .filter_map(|pair| {
                    let (d, q) = pair.split_once(':')?;
                    (q.trim().parse::<u8>().ok()? == prio).then(|| d.trim().parse().ok())?
                })
                .collect(),
            _ => Vec::new(),
        },
    };
    let peer_apps = match peer_app {
        Some(Setting::Value(v)) => app_entries(v),
        _ => Vec::new(),
    };
    for (sel, proto, q) in &peer_apps {
        let roce = match sel.as_str() {
            "dgram-port-prio" | "port-prio" => *proto == ROCE_PORT as u32,
            "dscp-prio" => host_dscps.contains(proto),
            _ => false,
        };
        if roce && *q != prio {
            wrong.push(format!(
                "the switch maps {} {proto} (RoCE) to priority {q}, the host expects {prio}",
                if sel == "dscp-prio" {
                    "DSCP"
                } else {
                    "UDP port"
                }
            ));
        }
    }
    wrong
}

/// The `dcbx-peer` check of one port: PFC on the same priorities on both ends of the
/// link, and the switch's APP table sending RoCE (UDP 4791, the RoCE DSCP) to the
/// priority the host expects it on.
pub(crate) fn dcbx_peer_check(qos: &[QosState], dev: &str, port: u32, nd: &str, prio: u8) -> Check {
    let subject = format!("{dev}/{port}");
    let (peer_pfc, peer_app) = (
        setting(qos, dev, port, "peer_pfc_enabled"),
        setting(qos, dev, port, "peer_app"),
    );
    let peer_pfc = match peer_pfc {
        Some(Setting::Value(v)) => v.clone(),
        Some(Setting::Unknown(why)) => {
            return check(
                "dcbx-peer",
                &subject,
                Status::Skip,
                format!("the link partner's DCBX view is unknown: {why}"),
                None,
            )
        }
        _ => {
            return check(
                "dcbx-peer",
                &subject,
                Status::Skip,
                format!(
                    "{nd}'s driver does not report the link partner's DCBX view over DCB netlink (mlx5, ice and bnxt never do; qede and cxgb4 do while their firmware runs DCBX; where lldpad runs it, lldptool -t -n -i {nd} shows the peer's TLVs): the switch's PFC is not compared"
                ),
                None,
            )
        }
    };
    let host_pfc = match setting(qos, dev, port, "pfc_enabled") {
        Some(Setting::Value(v)) => v.clone(),
        _ => {
            return check(
                "dcbx-peer",
                &subject,
                Status::Skip,
                format!(
                    "switch PFC {peer_pfc}; the host's PFC is unknown: nothing to compare it with"
                ),
                None,
            )
        }
    };
    let mut wrong = Vec::new();
    let (h, p) = (priorities(&host_pfc), priorities(&peer_pfc));
    {
        let host_only: Vec<String> = h
            .iter()
            .filter(|x| !p.contains(x))
            .map(u8::to_string)
            .collect();
        let peer_only: Vec<String> = p
            .iter()
            .filter(|x| !h.contains(x))
            .map(u8::to_string)
            .collect();
        if !host_only.is_empty() {
            wrong.push(format!(
                "priority {} lossless on the host only (host PFC {host_pfc}, switch PFC {peer_pfc}): the switch drops what the host expects to be paused",
                host_only.join(",")
            ));
        }
        if !peer_only.is_empty() {
            wrong.push(format!(
                "priority {} lossless on the switch only (host PFC {host_pfc}, switch PFC {peer_pfc}): the host ignores the switch's pauses there",
                peer_only.join(",")
            ));
        }
    }
    wrong.extend(roce_elsewhere(qos, dev, port, prio, peer_app));
    let peer_app_text = match peer_app {
        Some(Setting::Value(v)) => v.clone(),
        _ => "not reported".into(),
    };
    let evidence =
        format!("host PFC {host_pfc}; switch PFC {peer_pfc}; switch APP {peer_app_text}");
    if wrong.is_empty() {
        return check("dcbx-peer", &subject, Status::Pass, evidence, None);
    }
    check(
        "dcbx-peer",
        &subject,
        Status::Fail,
        format!("{}; {evidence}", wrong.join("; ")),
        Some(format!(
            "make both ends agree: on the switch, PFC on priority {prio} and RoCE (UDP {ROCE_PORT}, its DSCP) mapped to priority {prio}; on the host, dcb pfc show dev {} and dcb app show dev {} show its side",
            word(nd),
            word(nd)
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::qos::port_with as port;

    #[test]
    fn app_text_parses_back() {
        assert_eq!(
            app_entries("ethtype-prio 0x8915:3 dgram-port-prio 4791:5 dscp-prio 26:3 48:6"),
            [
                ("ethtype-prio".to_string(), 0x8915, 3),
                ("dgram-port-prio".to_string(), 4791, 5),
                ("dscp-prio".to_string(), 26, 3),
                ("dscp-prio".to_string(), 48, 6)
            ]
        );
        assert!(app_entries("none").is_empty());
    }

    #[test]
    fn both_ends_agree_is_a_pass() {
        let q = port(&[
            ("pfc_enabled", "3"),
            ("peer_pfc_enabled", "3"),
            ("roce_tos", "106"),
            ("peer_app", "dgram-port-prio 4791:3 dscp-prio 26:3"),
        ]);
        let c = dcbx_peer_check(&q, "mlx5_0", 1, "eth0", 3);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.evidence.contains("switch PFC 3"), "{}", c.evidence);
    }

    #[test]
    fn lossless_on_one_side_only_is_a_fail_with_both_values() {
        let q = port(&[
            ("pfc_enabled", "3"),
            ("peer_pfc_enabled", "none"),
            ("peer_app", "none"),
        ]);
        let c = dcbx_peer_check(&q, "mlx5_0", 1, "eth0", 3);
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence
                .contains("priority 3 lossless on the host only (host PFC 3, switch PFC none)"),
            "{}",
            c.evidence
        );
        let q = port(&[
            ("pfc_enabled", "3"),
            ("peer_pfc_enabled", "3,4"),
            ("peer_app", "none"),
        ]);
        let c = dcbx_peer_check(&q, "mlx5_0", 1, "eth0", 3);
        assert!(
            c.evidence
                .contains("priority 4 lossless on the switch only"),
            "{}",
            c.evidence
        );
    }

    #[test]
    fn roce_mapped_elsewhere_by_the_switch_is_a_fail() {
        // RoCE ToS 106 is DSCP 26; the switch puts DSCP 26 on priority 0.
        let q = port(&[
            ("pfc_enabled", "3"),
            ("peer_pfc_enabled", "3"),
            ("roce_tos", "106"),
            ("peer_app", "dscp-prio 26:0 46:5"),
        ]);
        let c = dcbx_peer_check(&q, "mlx5_0", 1, "eth0", 3);
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence
                .contains("the switch maps DSCP 26 (RoCE) to priority 0, the host expects 3"),
            "{}",
            c.evidence
        );
        // Without a RoCE ToS the host's own map says which DSCPs are RoCE's; UDP 4791 too.
        let q = port(&[
            ("pfc_enabled", "3"),
            ("peer_pfc_enabled", "3"),
            ("dscp_map", "24:3,26:3,46:5"),
            ("peer_app", "dgram-port-prio 4791:4 dscp-prio 24:3 46:0"),
        ]);
        let c = dcbx_peer_check(&q, "mlx5_0", 1, "eth0", 3);
        assert!(
            c.evidence.contains("UDP port 4791 (RoCE) to priority 4"),
            "{}",
            c.evidence
        );
        assert!(!c.evidence.contains("DSCP 46"), "{}", c.evidence);
    }

    #[test]
    fn no_peer_reported_is_a_skip_saying_why() {
        let mut q = port(&[("pfc_enabled", "3")]);
        q[0].settings
            .insert("peer_pfc_enabled".into(), Setting::Unsupported);
        let c = dcbx_peer_check(&q, "mlx5_0", 1, "eth0", 3);
        assert_eq!(c.status, Status::Skip);
        assert!(
            c.evidence.contains("mlx5, ice and bnxt never do"),
            "{}",
            c.evidence
        );
        // The host's PFC unknown: nothing to compare, not a pass.
        let mut q = port(&[("peer_pfc_enabled", "3")]);
        q[0].settings
            .insert("pfc_enabled".into(), Setting::Unknown("netlink".into()));
        assert_eq!(
            dcbx_peer_check(&q, "mlx5_0", 1, "eth0", 3).status,
            Status::Skip
        );
        // ToS 0 is unset: DSCP 0 on priority 0 at the switch is not RoCE's.
        let q = port(&[
            ("pfc_enabled", "3"),
            ("peer_pfc_enabled", "3"),
            ("roce_tos", "0"),
            ("dscp_map", "26:3"),
            ("peer_app", "dscp-prio 0:0 26:3"),
        ]);
        assert_eq!(
            dcbx_peer_check(&q, "mlx5_0", 1, "eth0", 3).status,
            Status::Pass
        );
    }
}
