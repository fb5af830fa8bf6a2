//! `qos diff`: two hosts' settings compared port by port, by value: what the fingerprint
//! digests (`metrics::fingerprint`), so that hosts the fleet's fingerprint finds alike are
//! hosts `qos diff` finds alike.

use rocewatch_plugin_api::{QosState, Setting};
use serde::{Deserialize, Serialize};

use super::config::normalize;

/// What `rocewatch qos show --json` prints, as `qos diff` reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostQos {
    pub ports: Vec<QosState>,
    /// The fingerprint of the ports' settings and the devices' drivers and firmware
    /// (absent from files of older versions).
    #[serde(default)]
    pub fingerprint: Option<String>,
}

/// One setting compared on two hosts' `qos show --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostDiff {
    /// `device/port` (`host` for the fingerprint).
    pub port: String,
    pub setting: String,
    /// The setting on each side, as `qos show --json` has it (`absent` when not reported).
    pub a: String,
    pub b: String,
    /// The settings themselves, for the text (the reasons said once).
    #[serde(skip)]
    pub(crate) settings: (Option<Setting>, Option<Setting>),
}

/// Two hosts compared: what differs (counted: the exit status), and what is shown apart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostComparison {
    /// Values that differ, ports on one side only, and (when no setting differs) the
    /// fingerprints: exactly where the fingerprints differ.
    pub differences: Vec<HostDiff>,
    /// Unknown on both sides for different reasons (a path or a PCI address in the
    /// reason): equal as values, not counted.
    pub reasons_differ: Vec<HostDiff>,
    /// What the fingerprint leaves out and that differs (what the switch announced, the
    /// NIC's buffer total): not the host's configuration, not counted.
    pub outside_fingerprint: Vec<HostDiff>,
}

impl HostComparison {
    /// The setting `fingerprint` of port `host`: the settings are alike, the drivers or
    /// firmware are not.
    pub fn drivers_or_firmware_differ(&self) -> bool {
        self.differences
            .iter()
            .any(|d| d.port == "host" && d.setting == "fingerprint")
    }
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

/// Settings the fingerprint leaves out: what the switch announced (`peer_*`: the host's
/// configuration is the same whatever DCBX says this minute) and the NIC's fixed buffer
/// total.
pub(crate) fn in_fingerprint(setting: &str) -> bool {
    !setting.starts_with("peer_") && setting != "buffer_total"
}

/// A setting as the fingerprint digests it and `qos diff` compares it: the normalized
/// value, `unsupported`, or `unknown` whatever the reason (the reason names a path or a
/// PCI address, which differ between hosts configured alike). A value that would read as
/// one of the two states (`unknown`, `unsupported`, or one starting with [`LITERAL`])
/// gets [`LITERAL`] before it, so no value is taken for a state; every other value is its
/// normalized self, as fingerprints have always digested it.
pub(crate) fn compared(setting: &str, s: &Setting) -> String {
    match s {
        Setting::Value(v) => {
            let v = normalize(setting, v);
            if v == UNSUPPORTED || v == UNKNOWN || v.starts_with(LITERAL) {
                format!("{LITERAL}{v}")
            } else {
                v
            }
        }
        Setting::Unsupported => UNSUPPORTED.into(),
        Setting::Unknown(_) => UNKNOWN.into(),
    }
}

const UNSUPPORTED: &str = "unsupported";
const UNKNOWN: &str = "unknown";
/// What marks a value that reads as a state in [`compared`].
const LITERAL: &str = "value:";

fn row(port: &str, setting: &str, a: Option<&Setting>, b: Option<&Setting>) -> HostDiff {
    HostDiff {
        port: port.into(),
        setting: setting.into(),
        a: setting_text(a),
        b: setting_text(b),
        settings: (a.cloned(), b.cloned()),
    }
}

/// Compare two hosts' `qos show --json`, port by port (`device/port`) and setting by
/// setting, by value; a port on one side only is one difference with the setting `port`.
/// When no setting differs but both files carry fingerprints that do, the drivers or
/// firmware differ: one difference with the setting `fingerprint`.
pub fn compare_hosts(a: &HostQos, b: &HostQos) -> HostComparison {
    let key = |s: &QosState| format!("{}/{}", s.device, s.port);
    let ports: std::collections::BTreeSet<String> =
        a.ports.iter().chain(&b.ports).map(key).collect();
    let mut out = HostComparison::default();
    for p in ports {
        let (sa, sb) = (
            a.ports.iter().find(|s| key(s) == p),
            b.ports.iter().find(|s| key(s) == p),
        );
        let (Some(sa), Some(sb)) = (sa, sb) else {
            let one = sa.or(sb).expect("a port of one side");
            let presence = |s: Option<&QosState>| -> String {
                if s.is_some() { "present" } else { "absent" }.into()
            };
            let d = HostDiff {
                port: p.clone(),
                setting: "port".into(),
                a: presence(sa),
                b: presence(sb),
                settings: (None, None),
            };
            // A port the fingerprint has no line of (every setting left out of it).
            if one.settings.keys().any(|k| in_fingerprint(k)) {
                out.differences.push(d);
            } else {
                out.outside_fingerprint.push(d);
            }
            continue;
        };
        let names: std::collections::BTreeSet<&String> =
            sa.settings.keys().chain(sb.settings.keys()).collect();
        for n in names {
            let (va, vb) = (sa.settings.get(n), sb.settings.get(n));
            let same = va.map(|v| compared(n, v)) == vb.map(|v| compared(n, v));
            let d = row(&p, n, va, vb);
            if !same && !in_fingerprint(n) {
                out.outside_fingerprint.push(d);
            } else if !same {
                out.differences.push(d);
            } else if va != vb && matches!(va, Some(Setting::Unknown(_))) {
                out.reasons_differ.push(d);
            }
        }
    }
    if let (true, Some(fa), Some(fb)) = (out.differences.is_empty(), &a.fingerprint, &b.fingerprint)
    {
        if fa != fb {
            out.differences.push(HostDiff {
                port: "host".into(),
                setting: "fingerprint".into(),
                a: fa.clone(),
                b: fb.clone(),
                settings: (None, None),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::fingerprint;
    use crate::tests::state;
    use proptest::prelude::*;
    use rocewatch_plugin_api::Inventory;

    fn host(ports: &[QosState]) -> HostQos {
        HostQos {
            ports: ports.to_vec(),
            fingerprint: None,
        }
    }

    fn rows(d: &[HostDiff]) -> Vec<(&str, &str, &str, &str)> {
        d.iter()
            .map(|x| {
                (
                    x.port.as_str(),
                    x.setting.as_str(),
                    x.a.as_str(),
                    x.b.as_str(),
                )
            })
            .collect()
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
        let c = compare_hosts(&host(&a), &host(&b));
        assert_eq!(
            rows(&c.differences),
            [
                ("mlx5_0/1", "mtu", "9000", "1500"),
                ("mlx5_0/1", "trust", "absent", "unsupported"),
                ("mlx5_1/1", "port", "present", "absent"),
            ]
        );
        assert!(compare_hosts(&host(&a), &host(&a)).differences.is_empty());
    }

    #[test]
    fn unknowns_for_different_reasons_are_equal_values_shown_apart() {
        let why = |root: &str| {
            Setting::Unknown(format!(
                "DCB is read over netlink from the live kernel; {root}/sys is not the live /sys"
            ))
        };
        let a = [state(
            "mlx5_0",
            "e0",
            &[("trust", why("/a")), ("pfc_enabled", why("/a"))],
        )];
        let b = [state(
            "mlx5_0",
            "e0",
            &[
                ("trust", why("/b")),
                ("pfc_enabled", Setting::Value("3".into())),
            ],
        )];
        let c = compare_hosts(&host(&a), &host(&b));
        assert_eq!(rows(&c.differences), [("mlx5_0/1", "pfc_enabled", "unknown: DCB is read over netlink from the live kernel; /a/sys is not the live /sys", "3")]);
        assert_eq!(c.reasons_differ.len(), 1);
        assert_eq!(c.reasons_differ[0].setting, "trust");
        // The same reason on both sides is nothing to show.
        assert!(compare_hosts(&host(&a), &host(&a))
            .reasons_differ
            .is_empty());
    }

    /// A value that reads "unknown" or "unsupported" is a value, never the state of a
    /// setting that could not be read or that the device lacks: a difference, and a
    /// different fingerprint.
    #[test]
    fn a_literal_value_is_not_the_unknown_or_unsupported_state() {
        let inv = Inventory::default();
        let v = |s: &str| Setting::Value(s.into());
        for (value, state_of) in [
            (v("unknown"), Setting::Unknown("no configfs".into())),
            (v("unsupported"), Setting::Unsupported),
            (v("value:unknown"), v("unknown")),
        ] {
            let a = [state("mlx5_0", "e0", &[("roce_mode", value.clone())])];
            let b = [state("mlx5_0", "e0", &[("roce_mode", state_of.clone())])];
            let c = compare_hosts(&host(&a), &host(&b));
            assert_eq!(
                c.differences.len(),
                1,
                "{value:?} against {state_of:?}: {c:?}"
            );
            assert_eq!(c.differences[0].setting, "roce_mode");
            assert_ne!(fingerprint(&a, &inv), fingerprint(&b, &inv), "{value:?}");
        }
    }

    #[test]
    fn what_the_fingerprint_leaves_out_is_shown_apart_and_drivers_are_one_difference() {
        let v = |s: &str| Setting::Value(s.into());
        let a = [state(
            "mlx5_0",
            "e0",
            &[("mtu", v("9000")), ("peer_pfc_enabled", v("3"))],
        )];
        let b = [state(
            "mlx5_0",
            "e0",
            &[("mtu", v("9000")), ("peer_pfc_enabled", v("4"))],
        )];
        let c = compare_hosts(&host(&a), &host(&b));
        assert!(c.differences.is_empty(), "{c:?}");
        assert_eq!(
            rows(&c.outside_fingerprint),
            [("mlx5_0/1", "peer_pfc_enabled", "3", "4")]
        );
        // The settings alike, the fingerprints not: a driver or the firmware differs.
        let with = |ports: &[QosState], fp: &str| HostQos {
            ports: ports.to_vec(),
            fingerprint: Some(fp.into()),
        };
        let c = compare_hosts(&with(&a, "00aa"), &with(&b, "00bb"));
        assert_eq!(
            rows(&c.differences),
            [("host", "fingerprint", "00aa", "00bb")]
        );
        assert!(c.drivers_or_firmware_differ());
        assert!(compare_hosts(&with(&a, "00aa"), &with(&b, "00aa"))
            .differences
            .is_empty());
        // A file without a fingerprint (an older version's): the settings only.
        assert!(compare_hosts(&host(&a), &with(&b, "00bb"))
            .differences
            .is_empty());
    }

    /// Settings as the plugin reports them: the names the fingerprint digests and those
    /// it leaves out, priority lists in any order, unknowns for reasons that name paths.
    fn setting() -> impl Strategy<Value = (String, Setting)> {
        let name = prop::sample::select(vec![
            "pfc_enabled",
            "ecn_np_enabled",
            "trust",
            "mtu",
            "roce_mode",
            "roce_tos",
            "prio2buffer",
            "dcqcn_rpg_ai_rate",
            "peer_pfc_enabled",
            "peer_app",
            "buffer_total",
        ]);
        let value = prop_oneof![
            prop::sample::select(vec![
                "3",
                "4,3",
                "3,4",
                "3, 4",
                "none",
                "9000",
                "1500",
                "RoCE v2",
                "2",
                "dscp",
                "0,0,1",
                "unknown",
                "unsupported",
                "value:unknown"
            ])
            .prop_map(|v| Setting::Value(v.into())),
            Just(Setting::Unsupported),
            "/[a-z]{1,3}/sys(/0000:3b:00\\.[01])? is not the live /sys".prop_map(Setting::Unknown),
        ];
        (name, value).prop_map(|(n, v)| (n.to_string(), v))
    }

    fn ports() -> impl Strategy<Value = Vec<QosState>> {
        let port = (
            prop::sample::select(vec!["mlx5_0", "mlx5_1"]),
            1u32..3,
            prop::collection::vec(setting(), 0..5),
        );
        prop::collection::vec(port, 0..4).prop_map(|ps| {
            let mut out: Vec<QosState> = Vec::new();
            for (dev, port, settings) in ps {
                if out.iter().any(|s| s.device == dev && s.port == port) {
                    continue;
                }
                let mut s = state(dev, "e0", &[]);
                s.port = port;
                s.settings = settings.into_iter().collect();
                out.push(s);
            }
            out
        })
    }

    /// A second host: the first one with a few settings changed, or another.
    fn pair() -> impl Strategy<Value = (Vec<QosState>, Vec<QosState>)> {
        prop_oneof![
            (ports(), ports()),
            (
                ports(),
                prop::collection::vec((any::<prop::sample::Index>(), setting()), 0..3)
            )
                .prop_map(|(a, edits)| {
                    let mut b = a.clone();
                    for (i, (n, v)) in edits {
                        if !b.is_empty() {
                            let at = i.index(b.len());
                            b[at].settings.insert(n, v);
                        }
                    }
                    (a, b)
                }),
        ]
    }

    proptest! {
        /// Every value but those that read as a state is compared as its normalized self,
        /// so that the fingerprints of hosts with such values stay what they were.
        #[test]
        fn ordinary_values_are_compared_as_themselves(n in "[a-z_]{1,20}", v in "\\PC{0,20}") {
            let normal = normalize(&n, &v);
            prop_assume!(!["unknown", "unsupported"].contains(&normal.as_str()) && !normal.starts_with("value:"));
            prop_assert_eq!(compared(&n, &Setting::Value(v)), normal);
        }

        /// The fleet's fingerprint and `qos diff` agree: the same fingerprint, and only
        /// then, no difference (drivers and firmware alike, or not).
        #[test]
        fn fingerprint_and_diff_agree((a, b) in pair(), same_firmware in any::<bool>()) {
            let inv = |fw: &str| -> Inventory {
                serde_json::from_value(serde_json::json!({"devices": [
                    {"name": "mlx5_0", "node_guid": null, "fw_ver": fw, "driver": "mlx5_core", "ports": []}
                ]})).unwrap()
            };
            let (ia, ib) = (inv("28.39.1002"), inv(if same_firmware { "28.39.1002" } else { "28.40.1000" }));
            let settings_alike = compare_hosts(&host(&a), &host(&b)).differences.is_empty();
            prop_assert_eq!(fingerprint(&a, &ia) == fingerprint(&b, &ia), settings_alike);
            let (fa, fb) = (fingerprint(&a, &ia), fingerprint(&b, &ib));
            let c = compare_hosts(
                &HostQos { ports: a.clone(), fingerprint: Some(fa.clone()) },
                &HostQos { ports: b.clone(), fingerprint: Some(fb.clone()) },
            );
            prop_assert_eq!(fa == fb, c.differences.is_empty(), "{:?}", c);
        }
    }
}
