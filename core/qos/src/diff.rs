//! `qos diff`: two hosts' settings compared port by port.

use rocewatch_plugin_api::{QosState, Setting};
use serde::Serialize;

use super::config::normalize;

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
mod tests {
    use super::*;
    use crate::tests::state;

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
