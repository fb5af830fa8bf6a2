//! The path RDMA CM applications take (issue #32): a probe through the connection
//! manager beside the side-channel probe, the difference between them explained, and the
//! type of service CM connections carry (the device's configfs `default_roce_tos`)
//! against the priority PFC protects.

use std::sync::Arc;

use rocewatch_plugin_api::{CmConnection, ProbeOutcome, ProbeTarget, QosState, Setting};
use rocewatch_runtime::app::App;

use super::qos::setting;
use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// Why the side channel can pass while the CM fails, by where the CM stopped, with what
/// the host's own configuration says (a RoCE v1 default mode).
fn difference(cause: &str, roce_v1: bool) -> String {
    let class = cause.split(':').next().unwrap_or_default();
    let mut why = match class {
        "address" => "the side channel reaches the peer over TCP, but the CM cannot resolve its address to an RDMA device: a route for the RDMA subnet over the RDMA netdev, the source address's RoCE v2 GID".to_string(),
        "route" => "the CM resolved the address but not a route: the RDMA netdev's route and MTU".to_string(),
        "unreachable" => "the CM's request (a MAD over UDP 4791 to queue pair 1, in the CM's class of service) or its reply is dropped where the side channel's TCP and queue pairs pass: a firewall rule on either host or an ACL on the path that matches queue pair 1 or the CM's DSCP".to_string(),
        "rejected" => "the peer's CM refused: see the reason".to_string(),
        _ => "the CM set the connection up differently from the side channel (RoCE mode, GID, QP attributes)".to_string(),
    };
    if roce_v1 {
        why.push_str(
            "; and the CM's default RoCE mode here is IB/RoCE v1 (not routable): set RoCE v2",
        );
    }
    why
}

/// Where the CM put the connection, as the end of a check's evidence.
fn via(cm: Option<&CmConnection>) -> String {
    cm.map(|c| {
        format!(
            " (via {} port {}, ToS {}: DSCP {}, {})",
            c.device,
            c.port,
            c.tos,
            c.tos >> 2,
            if c.tos_set {
                "the probe's own"
            } else {
                "the port's default"
            }
        )
    })
    .unwrap_or_default()
}

/// The CM probe to `peer`'s listener on `port`, and when the side channel passed
/// (`side_ok`) but this fails, why the two differ.
pub(crate) async fn cm_probe_check(
    agent: &Arc<App>,
    peer: &str,
    port: u16,
    side_ok: bool,
    qos: &[QosState],
) -> Check {
    let Some(entry) = agent.probe_plugin() else {
        return check(
            "probe-cm",
            peer,
            Status::Skip,
            "the probe-verbs plugin is not loaded",
            None,
        );
    };
    let mut target = ProbeTarget::new(peer, 64, 3000);
    target.cm_port = port;
    let roce_v1 = qos.iter().any(
        |s| matches!(s.settings.get("roce_mode"), Some(Setting::Value(v)) if v == "IB/RoCE v1"),
    );
    match rocewatch_probes::probe_once(&entry, target, agent.metrics()).await {
        Ok(r) => match r.outcome {
            ProbeOutcome::Ok { rtt_seconds } => check(
                "probe-cm",
                peer,
                Status::Pass,
                format!(
                    "through the RDMA connection manager (port {port}): address, route, connection and an RC send/receive answered in {:.1} us{}",
                    rtt_seconds * 1e6,
                    via(r.cm.as_ref())
                ),
                None,
            ),
            // The CM answered for the peer: the path CM applications take works up to
            // the listener.
            ProbeOutcome::ConnectFailed { cause } if cause.contains("CM reject reason 8") => check(
                "probe-cm",
                peer,
                Status::Info,
                format!("the CM path reaches {peer}: its CM answered that nothing listens on port {port} (address, route and UDP 4791 work for CM applications)"),
                Some(format!("to measure it: rocewatch probe --serve --cm --cm-port {port} on {}", word(peer))),
            ),
            ProbeOutcome::ConnectFailed { cause } => {
                let evidence = if side_ok {
                    format!("{cause}{}; the side-channel probe passed: {}", via(r.cm.as_ref()), difference(&cause, roce_v1))
                } else {
                    format!("{cause}{}", via(r.cm.as_ref()))
                };
                check("probe-cm", peer, Status::Fail, evidence, Some(format!(
                    "rocewatch probe {} --cm --port {port} repeats it; rping -c -a {} shows what CM applications see",
                    word(peer),
                    word(peer)
                )))
            }
            ProbeOutcome::Timeout => check(
                "probe-cm",
                peer,
                Status::Fail,
                format!("connected through the CM, but no answer within 3 s{}", via(r.cm.as_ref())),
                Some("RoCE packets are lost on the path: the firewall (UDP 4791), PFC/ECN, the switch".into()),
            ),
        },
        Err(e) => check("probe-cm", peer, Status::Fail, e.to_string(), None),
    }
}

/// The priority a ToS lands on under DSCP trust (the APP table's map, else DSCP / 8).
fn priority_of(dscp: u8, map: &str) -> u8 {
    map.split(',')
        .filter_map(|pair| pair.split_once(':'))
        .find(|(d, _)| d.trim().parse::<u8>() == Ok(dscp))
        .and_then(|(_, p)| p.trim().parse().ok())
        .unwrap_or(dscp >> 3)
}

/// The type of service RDMA CM connections from this port carry (configfs
/// `default_roce_tos`; an application may set its own) against the desired ToS and the
/// PFC priority `prio`: landing on a lossy priority is a FAIL with both values.
pub(crate) fn cm_tos_check(
    qos: &[QosState],
    dev: &str,
    port: u32,
    prio: u8,
    desired: Option<u8>,
) -> Check {
    let subject = format!("{dev}/{port}");
    let tos = match setting(qos, dev, port, "roce_tos") {
        Some(Setting::Value(v)) => match v.trim().parse::<u8>() {
            Ok(t) => t,
            Err(_) => {
                return check(
                    "cm-tos",
                    &subject,
                    Status::Warn,
                    format!("default_roce_tos {v:?} is not a ToS"),
                    None,
                )
            }
        },
        Some(Setting::Unknown(why)) => {
            return check(
                "cm-tos",
                &subject,
                Status::Skip,
                format!("the CM's default ToS is unknown: {why}"),
                None,
            )
        }
        _ => {
            return check(
                "cm-tos",
                &subject,
                Status::Skip,
                "no configuration plugin reports the CM's default ToS",
                None,
            )
        }
    };
    let configfs = format!("/sys/kernel/config/rdma_cm/{dev}/ports/{port}/default_roce_tos");
    if let Some(d) = desired.filter(|d| *d != tos) {
        return check(
            "cm-tos",
            &subject,
            Status::Fail,
            format!("RDMA CM connections carry ToS {tos} (default_roce_tos), the desired state says {d}"),
            Some(format!("echo {d} > {} (or rocewatch qos apply --yes)", word(&configfs))),
        );
    }
    let dscp = tos >> 2;
    let get = |k: &str| match setting(qos, dev, port, k) {
        Some(Setting::Value(v)) => Some(v.clone()),
        _ => None,
    };
    match (get("trust").as_deref(), get("pfc_enabled")) {
        (Some("dscp"), Some(pfc)) => {
            let map = get("dscp_map").unwrap_or_default();
            let p = priority_of(dscp, &map);
            let on: Vec<u8> = pfc.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            if on.contains(&p) {
                check("cm-tos", &subject, Status::Pass, format!("RDMA CM connections carry ToS {tos} (DSCP {dscp}): priority {p}, lossless (PFC on {pfc})"), None)
            } else {
                // A DSCP the host maps to the expected priority.
                let want = map
                    .split(',')
                    .filter_map(|pair| pair.split_once(':'))
                    .find(|(_, q)| q.trim().parse::<u8>() == Ok(prio))
                    .and_then(|(d, _)| d.trim().parse::<u8>().ok())
                    .unwrap_or(prio << 3);
                check(
                    "cm-tos",
                    &subject,
                    Status::Fail,
                    format!("RDMA CM connections carry ToS {tos} (DSCP {dscp}), which the host maps to priority {p}: lossy (PFC on {pfc}); expected priority {prio}"),
                    Some(format!("echo {} > {} (DSCP {want}: priority {prio})", want << 2, word(&configfs))),
                )
            }
        }
        (Some(trust), _) if trust != "dscp" => check(
            "cm-tos",
            &subject,
            Status::Info,
            format!("RDMA CM connections carry ToS {tos}; trust {trust}: the priority comes from the VLAN tag, not the ToS"),
            None,
        ),
        _ => check("cm-tos", &subject, Status::Skip, format!("RDMA CM connections carry ToS {tos}; the port's trust and PFC are unknown: where it lands cannot be told"), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::qos::port_with as port;

    #[test]
    fn a_tos_on_a_lossy_priority_fails_with_both_values() {
        let q = port(&[
            ("roce_tos", "0"),
            ("trust", "dscp"),
            ("pfc_enabled", "3"),
            ("dscp_map", "26:3"),
        ]);
        let c = cm_tos_check(&q, "mlx5_0", 1, 3, None);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.evidence.contains("ToS 0 (DSCP 0), which the host maps to priority 0: lossy (PFC on 3); expected priority 3"), "{}", c.evidence);
        assert!(c
            .fix
            .unwrap()
            .starts_with("echo 104 > /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"));
        let q = port(&[
            ("roce_tos", "106"),
            ("trust", "dscp"),
            ("pfc_enabled", "3"),
            ("dscp_map", "26:3"),
        ]);
        let c = cm_tos_check(&q, "mlx5_0", 1, 3, None);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        // The desired state's ToS differs.
        let c = cm_tos_check(&q, "mlx5_0", 1, 3, Some(104));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence
                .contains("carry ToS 106 (default_roce_tos), the desired state says 104"),
            "{}",
            c.evidence
        );
        // Without DSCP trust the ToS says nothing about the priority.
        let q = port(&[("roce_tos", "106"), ("trust", "pcp"), ("pfc_enabled", "3")]);
        assert_eq!(cm_tos_check(&q, "mlx5_0", 1, 3, None).status, Status::Info);
        assert_eq!(cm_tos_check(&[], "mlx5_0", 1, 3, None).status, Status::Skip);
    }

    #[test]
    fn the_difference_is_named_by_where_the_cm_stopped() {
        assert!(difference("unreachable: no answer", false).contains("firewall"));
        assert!(difference("address: no RDMA device", false).contains("route for the RDMA subnet"));
        assert!(difference("route: x", true).ends_with("set RoCE v2"));
    }
}
