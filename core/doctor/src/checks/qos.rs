//! RoCE mode, PFC, trust and ECN on the expected priority, from the configuration plugins.

use rocewatch_plugin_api::{QosState, Setting};

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

pub(crate) fn setting<'a>(
    qos: &'a [QosState],
    dev: &str,
    port: u32,
    k: &str,
) -> Option<&'a Setting> {
    qos.iter()
        .find(|s| s.device == dev && s.port == port)
        .and_then(|s| s.settings.get(k))
}

pub(crate) fn has_priority(list: &str, p: u8) -> bool {
    list.split(',').any(|x| x.trim() == p.to_string())
}

/// The QoS checks of one port: RoCE mode, PFC and trust, ECN.
pub(crate) fn qos_checks(qos: &[QosState], dev: &str, port: u32, nd: &str, prio: u8) -> Vec<Check> {
    let subject = format!("{dev}/{port}");
    let w = word(nd);
    let mut out = Vec::new();
    let unreadable = |name: &str, what: &str, s: Option<&Setting>| match s {
        Some(Setting::Unsupported) => Some(check(
            name,
            &subject,
            Status::Skip,
            format!("unsupported: the device has no {what}"),
            None,
        )),
        Some(Setting::Unknown(why)) => Some(check(
            name,
            &subject,
            Status::Warn,
            format!("{what} unknown: {why}"),
            None,
        )),
        None => Some(check(
            name,
            &subject,
            Status::Skip,
            format!("no configuration plugin reports the {what}"),
            None,
        )),
        Some(Setting::Value(_)) => None,
    };
    let mode = setting(qos, dev, port, "roce_mode");
    out.push(match mode {
        Some(Setting::Value(v)) if v == "RoCE v2" => {
            check("roce-mode", &subject, Status::Pass, "RoCE v2", None)
        }
        Some(Setting::Value(v)) => check(
            "roce-mode",
            &subject,
            Status::Fail,
            format!("{v} (RDMA CM connections use RoCE v1: not routable, no ECN)"),
            Some(format!(
                "echo 'RoCE v2' > {} (or [[qos.desired]] roce_mode = \"RoCE v2\" and rocewatch qos apply --yes)",
                word(&format!("/sys/kernel/config/rdma_cm/{dev}/ports/{port}/default_roce_mode"))
            )),
        ),
        Some(Setting::Unknown(why)) => check(
            "roce-mode",
            &subject,
            Status::Warn,
            format!("unknown: {why}"),
            Some(format!(
                "mount -t configfs none /sys/kernel/config; mkdir {}; then run doctor again",
                word(&format!("/sys/kernel/config/rdma_cm/{dev}"))
            )),
        ),
        other => unreadable("roce-mode", "RoCE mode", other).expect("not a value"),
    });
    let pfc = setting(qos, dev, port, "pfc_enabled");
    let trust = setting(qos, dev, port, "trust");
    out.push(match (pfc, trust) {
        (Some(Setting::Value(p)), Some(Setting::Value(t))) => {
            let on = has_priority(p, prio);
            let dscp = t == "dscp";
            if on && dscp {
                check("pfc", &subject, Status::Pass, format!("PFC on priorities {p} (includes {prio}), trust {t}"), None)
            } else {
                let mut fix = Vec::new();
                if !on {
                    fix.push(format!("dcb pfc set dev {w} prio-pfc {prio}:on   (or mlnx_qos -i {w} --pfc with priority {prio} on)"));
                }
                if !dscp {
                    fix.push(format!("mlnx_qos -i {w} --trust dscp   (or [[qos.desired]] trust = \"dscp\")"));
                }
                check(
                    "pfc",
                    &subject,
                    Status::Fail,
                    format!("PFC on priorities {p} (expected {prio}), trust {t} (expected dscp)"),
                    Some(fix.join("\n")),
                )
            }
        }
        (p, t) => unreadable("pfc", "PFC", p)
            .or_else(|| unreadable("pfc", "trust mode", t))
            .expect("one is not a value"),
    });
    let np = setting(qos, dev, port, "ecn_np_enabled");
    let rp = setting(qos, dev, port, "ecn_rp_enabled");
    out.push(match (np, rp) {
        (Some(Setting::Value(n)), Some(Setting::Value(r))) => {
            if has_priority(n, prio) && has_priority(r, prio) {
                check("ecn", &subject, Status::Pass, format!("ECN on priority {prio} (notification point: {n}; reaction point: {r})"), None)
            } else {
                check(
                    "ecn",
                    &subject,
                    Status::Fail,
                    format!("ECN notification point on {n}, reaction point on {r}: not both on priority {prio}"),
                    Some(format!(
                        "echo 1 > {}; echo 1 > {}",
                        word(&format!("/sys/class/net/{nd}/ecn/roce_np/enable/{prio}")),
                        word(&format!("/sys/class/net/{nd}/ecn/roce_rp/enable/{prio}"))
                    )),
                )
            }
        }
        (n, r) => unreadable("ecn", "ECN enables", n)
            .or_else(|| unreadable("ecn", "ECN enables", r))
            .expect("one is not a value"),
    });
    out
}

/// One port (`mlx5_0/1` on `eth0`) with the settings given as values: the tests' input.
#[cfg(test)]
pub(crate) fn port_with(s: &[(&str, &str)]) -> Vec<QosState> {
    vec![QosState {
        device: "mlx5_0".into(),
        port: 1,
        netdev: Some("eth0".into()),
        settings: s
            .iter()
            .map(|(k, v)| (k.to_string(), Setting::Value(v.to_string())))
            .collect(),
        settable_unread: Vec::new(),
    }]
}
