//! `qos plan`: the exact differences between the observed and the desired settings, and
//! what cannot be compared and why.

use std::collections::BTreeMap;

use globset::Glob;
use rocewatch_plugin_api::QosChange;
use rocewatch_plugin_api::{QosState, Setting};
use serde::{Deserialize, Serialize};

use super::config::{normalize, QosConfig};

/// One setting of one port: what a planned change, a blocked setting, a step of an apply
/// or rollback and a snapshot's record are about (flattened into each in JSON).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SettingAt {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub setting: String,
}

impl SettingAt {
    /// `mlx5_0/1 (ens1f0np0)`.
    pub fn port_label(&self) -> String {
        port_label(&self.device, self.port, self.netdev.as_deref())
    }

    /// The change of this setting from `from` to `to`, as a configuration plugin is asked
    /// to make it.
    pub fn change(&self, from: Option<String>, to: String) -> QosChange {
        QosChange {
            device: self.device.clone(),
            port: self.port,
            setting: self.setting.clone(),
            from,
            to,
        }
    }
}

/// One difference between the observed and the desired state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    #[serde(flatten)]
    pub at: SettingAt,
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
    #[serde(flatten)]
    pub at: SettingAt,
    pub to: String,
    pub reason: String,
}

/// The plan: what differs, what cannot be compared, what is refused as the physical
/// function's, how many settings already match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub changes: Vec<Change>,
    pub blocked: Vec<Blocked>,
    /// Desired settings of a port on a virtual function that its physical function owns
    /// (set on the hypervisor): refused (see `vf::refuse_pf_owned`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pf_owned: Vec<Blocked>,
    /// Desired settings of a port on a virtual function that its physical function owns,
    /// where the PF is on this host and the same plan desires the same value on it: the
    /// PF's entry sets them for every VF of it (see `vf::refuse_pf_owned`). Not refused,
    /// not written on the VF.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pf_covered: Vec<Blocked>,
    pub in_sync: usize,
}

impl Plan {
    pub fn is_clean(&self) -> bool {
        self.changes.is_empty() && self.blocked.is_empty() && self.pf_owned.is_empty()
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
            let at = SettingAt {
                device: st.device.clone(),
                port: st.port,
                netdev: st.netdev.clone(),
                setting: setting.clone(),
            };
            let blocked = |reason: String| Blocked {
                at: at.clone(),
                to: to.clone(),
                reason,
            };
            match st.settings.get(&setting) {
                Some(Setting::Value(v)) => {
                    if normalize(&setting, v) == normalize(&setting, &to) {
                        p.in_sync += 1;
                    } else {
                        p.changes.push(Change {
                            at,
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
                        at,
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
            c.at.port_label(),
            c.at.setting,
            c.from,
            c.to
        );
    }
    for b in &p.blocked {
        let _ = writeln!(s, "{}", blocked_line(b, 8));
    }
    for b in &p.pf_covered {
        let _ = writeln!(s, "{}", covered_line(b, 8));
    }
    for b in &p.pf_owned {
        let _ = writeln!(s, "{}", refused_line(b, 8));
    }
    let mut refused = match p.pf_covered.len() {
        0 => String::new(),
        n => format!(", {n} covered by the PF"),
    };
    if !p.pf_owned.is_empty() {
        refused.push_str(&format!(
            ", {} refused (the physical function's)",
            p.pf_owned.len()
        ));
    }
    let _ = writeln!(
        s,
        "{} to change, {} that cannot be compared, {} already as desired{refused}",
        p.changes.len(),
        p.blocked.len(),
        p.in_sync
    );
    s
}

/// "cannot  mlx5_0/1 (ens1f0np0)  pfc_enabled -> 3: why", the word padded to `width`.
pub fn blocked_line(b: &Blocked, width: usize) -> String {
    word_line("cannot", b, width)
}

/// "covered mlx5_2/1 (ens1f0v0)  pfc_enabled -> 3: covered by the PF ens1f0np0 (...)".
pub fn covered_line(b: &Blocked, width: usize) -> String {
    word_line("covered", b, width)
}

/// "refused mlx5_0/1 (ens5)  pfc_enabled -> 3: owned by the physical function (...)".
pub fn refused_line(b: &Blocked, width: usize) -> String {
    word_line("refused", b, width)
}

fn word_line(word: &str, b: &Blocked, width: usize) -> String {
    format!(
        "{:<width$}{}  {} -> {}: {}",
        word,
        b.at.port_label(),
        b.at.setting,
        b.to,
        b.reason
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::state;
    use crate::validate;

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
            (
                p.changes[0].at.device.as_str(),
                p.changes[0].at.setting.as_str()
            ),
            ("mlx5_0", "mtu")
        );
        assert_eq!(
            (p.changes[0].from.as_str(), p.changes[0].to.as_str()),
            ("1500", "9000")
        );
        // "4,3" is "3,4"; the later entry's value wins for mlx5_1.
        assert_eq!(p.in_sync, 3);
        let blocked: Vec<_> = p.blocked.iter().map(|b| b.at.setting.as_str()).collect();
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
}
