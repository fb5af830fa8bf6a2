//! Ports on an SR-IOV virtual function (VF): the settings its physical function (PF) owns.
//!
//! A VF has no DCB operations: mlx5 attaches `dcbnl_ops` only to the function that is
//! the eswitch manager (drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c
//! `mlx5e_dcbnl_build_netdev`: `vport_group_manager` and `qos` capabilities), so PFC,
//! trust, the DSCP map, the buffers and ETS are the PF's, set on the hypervisor and
//! applied to every VF of it. The PFC storm-prevention timeout is the port's (the PF's).
//! ECN and the DCQCN parameters are the VF's only where the firmware lets the VF read and
//! change them (mlx5's `cc_query_allowed`/`cc_modify_allowed`: drivers/infiniband/hw/
//! mlx5/cong.c creates `cc_params` only then); a VF without them has the PF's. What a VF
//! does set itself stays its own: the RoCE mode and ToS (configfs `rdma_cm`), its traffic
//! class, its MTU.
//!
//! [`mark_pf_owned`] says so in the observed state (`qos show`), [`refuse_pf_owned`]
//! takes such settings out of a plan (`qos plan` and `qos apply` refuse them) and
//! [`on_hypervisor`] says what to run on the hypervisor instead.

use std::collections::BTreeMap;

use rocewatch_plugin_api::{QosState, Setting};
use serde::Serialize;

use crate::{port_label, Blocked, Plan};

/// How `qos show` and `qos plan` say a setting is the PF's.
pub const PF_OWNED: &str = "owned by the physical function (set on the hypervisor)";
/// The same for what is only read (what the switch announced, the NIC's buffer total).
pub const PF_READ: &str = "the physical function's (read it on the hypervisor)";

/// Settings a VF never has: DCB (PFC, trust, DSCP map, buffers, cable length, what DCBX
/// learned) and the PFC storm-prevention tunable (the port's).
const PF_ONLY: &[&str] = &[
    "pfc_enabled",
    "trust",
    "dscp_map",
    "prio2buffer",
    "buffer_size",
    "buffer_total",
    "cable_length",
    "peer_pfc_enabled",
    "peer_app",
    "pfc_prevention_timeout",
];

/// Settings a VF has only when the firmware grants them (ECN, CNP, DCQCN).
fn pf_unless_granted(setting: &str) -> bool {
    matches!(
        setting,
        "ecn_np_enabled" | "ecn_rp_enabled" | "cnp_dscp" | "cnp_802p_prio"
    ) || setting.starts_with("dcqcn_")
}

/// Read only: said as the PF's to read, not to set.
fn read_only(setting: &str) -> bool {
    setting.starts_with("peer_") || setting == "buffer_total"
}

/// Whether `setting`, observed as `value` on a VF, is the PF's.
fn owned_by_pf(setting: &str, value: &Setting) -> bool {
    if PF_ONLY.contains(&setting) {
        return !matches!(value, Setting::Value(_));
    }
    pf_unless_granted(setting) && matches!(value, Setting::Unsupported)
}

/// What is known of the VF an RDMA device is on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VfOf {
    /// The PF's PCI address; `None` where the PF is not visible (inside a guest).
    pub pf: Option<String>,
    /// The PF's netdev, when the PF is visible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pf_netdev: Option<String>,
    /// The VF's index on the PF (`virtfnN`, `ip link ... vf N`), when the PF is visible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The MAC of the VF's netdev: how the hypervisor's `ip link show PF` names the VF
    /// (`vf N link/ether MAC`) when the PF is not visible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// Which RDMA devices are VFs (`rocewatch_sysfs::SysRoot` answers from the tree).
pub trait Functions {
    /// `Some` when `device` is a VF.
    fn vf_of(&self, device: &str) -> Option<VfOf>;
}

impl Functions for rocewatch_sysfs::SysRoot {
    fn vf_of(&self, device: &str) -> Option<VfOf> {
        let sriov = self.sriov_of_device(device).ok().flatten()?;
        let vf = sriov.as_vf()?;
        // The PF's netdev: `physfn/net/*` of the VF's PCI function (visible on a host).
        let pf_netdev = vf.pf.as_ref().and_then(|_| {
            let dir = self
                .rdma_pci_function(device)?
                .dir
                .join("physfn")
                .join("net");
            let names = rocewatch_sysfs::read::list_dir(&dir).ok()?;
            (names.len() == 1).then(|| names[0].clone())
        });
        let mac = self
            .device_netdevs(device)
            .first()
            .and_then(|n| self.netdev_attr(n, "address").ok().flatten());
        Some(VfOf {
            pf: vf.pf.clone(),
            pf_netdev,
            index: vf.index,
            mac,
        })
    }
}

/// A port on a VF: its function and the settings the PF owns there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VfPort {
    /// Always `vf` (the shape `discover --json` gives a device's `sriov`).
    pub role: &'static str,
    #[serde(flatten)]
    pub function: VfOf,
    /// The settings shown as the PF's.
    pub pf_owned: Vec<String>,
}

/// The ports on VFs, by device and port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VfPorts(BTreeMap<(String, u32), VfPort>);

impl VfPorts {
    pub fn get(&self, device: &str, port: u32) -> Option<&VfPort> {
        self.0.get(&(device.to_string(), port))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A port as `qos show --json` prints it: the observed state, and on a VF its `sriov`.
#[derive(Debug, Serialize)]
pub struct ShownPort<'a> {
    #[serde(flatten)]
    pub state: &'a QosState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sriov: Option<&'a VfPort>,
}

/// The ports of `states` as `qos show --json` prints them.
pub fn shown_ports<'a>(states: &'a [QosState], vfs: &'a VfPorts) -> Vec<ShownPort<'a>> {
    states
        .iter()
        .map(|state| ShownPort {
            state,
            sriov: vfs.get(&state.device, state.port),
        })
        .collect()
}

/// Marks, on every port of a VF, the settings the PF owns: each becomes unknown with the
/// reason [`PF_OWNED`] (or [`PF_READ`]), in place of "unsupported" or a reason that says
/// nothing of the PF. Returns the ports on VFs.
pub fn mark_pf_owned(states: &mut [QosState], functions: &dyn Functions) -> VfPorts {
    let mut out = VfPorts::default();
    let mut known: BTreeMap<String, Option<VfOf>> = BTreeMap::new();
    for st in states {
        let vf = known
            .entry(st.device.clone())
            .or_insert_with(|| functions.vf_of(&st.device));
        let Some(vf) = vf else { continue };
        let mut pf_owned = Vec::new();
        for (k, v) in st.settings.iter_mut() {
            if owned_by_pf(k, v) {
                let why = if read_only(k) { PF_READ } else { PF_OWNED };
                *v = Setting::Unknown(why.into());
                pf_owned.push(k.clone());
            }
        }
        out.0.insert(
            (st.device.clone(), st.port),
            VfPort {
                role: "vf",
                function: vf.clone(),
                pf_owned,
            },
        );
    }
    out
}

/// Moves the desired settings a VF's PF owns out of the plan's `blocked` into its
/// `pf_owned`: what `qos plan` and `qos apply` refuse.
pub fn refuse_pf_owned(plan: &mut Plan, vfs: &VfPorts) {
    let (refused, kept): (Vec<Blocked>, Vec<Blocked>) = std::mem::take(&mut plan.blocked)
        .into_iter()
        .partition(|b| {
            vfs.get(&b.at.device, b.at.port)
                .is_some_and(|p| p.pf_owned.contains(&b.at.setting))
        });
    plan.blocked = kept;
    plan.pf_owned = refused
        .into_iter()
        .map(|mut b| {
            b.reason = PF_OWNED.into();
            b
        })
        .collect();
}

/// What to do on the hypervisor for one VF port whose PF-owned settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HypervisorSteps {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    #[serde(flatten)]
    pub function: VfOf,
    /// The refused settings and the values wanted.
    pub settings: BTreeMap<String, String>,
    /// Shell command lines to run on the hypervisor, as root (names quoted for `sh`;
    /// `PF`, `N`, `VLAN`, `P` stand for what cannot be known here, see `placeholders`).
    pub commands: Vec<String>,
    /// The same PF settings as a `[[qos.desired]]` entry for rocewatch on the hypervisor
    /// (then `rocewatch qos apply --yes` there).
    pub desired: String,
    /// What each placeholder in `commands` and `desired` stands for.
    pub placeholders: Vec<String>,
}

/// For every VF port with refused settings: the `mlnx_qos` line for PFC and trust, the
/// same settings as a rocewatch `[[qos.desired]]` entry, and the VF's VLAN priority
/// (`ip link set dev PF vf N vlan VLAN qos P`: the PCP the PF writes into the VF's
/// frames). `word` quotes a name for the shell.
pub fn on_hypervisor(
    plan: &Plan,
    vfs: &VfPorts,
    word: &dyn Fn(&str) -> String,
) -> Vec<HypervisorSteps> {
    let mut by_port: BTreeMap<(String, u32), HypervisorSteps> = BTreeMap::new();
    for b in &plan.pf_owned {
        let Some(vf) = vfs.get(&b.at.device, b.at.port) else {
            continue;
        };
        by_port
            .entry((b.at.device.clone(), b.at.port))
            .or_insert_with(|| HypervisorSteps {
                device: b.at.device.clone(),
                port: b.at.port,
                netdev: b.at.netdev.clone(),
                function: vf.function.clone(),
                settings: BTreeMap::new(),
                commands: Vec::new(),
                desired: String::new(),
                placeholders: Vec::new(),
            })
            .settings
            .insert(b.at.setting.clone(), b.to.clone());
    }
    let mut out: Vec<HypervisorSteps> = by_port.into_values().collect();
    for s in &mut out {
        fill_steps(s, word);
    }
    out
}

/// The commands, the desired entry and the placeholders of `s`, from its settings.
fn fill_steps(s: &mut HypervisorSteps, word: &dyn Fn(&str) -> String) {
    let mac = match &s.function.mac {
        Some(m) => format!("this VF's MAC, {}", word(m)),
        None => "this VF's MAC".into(),
    };
    let pf = match &s.function.pf_netdev {
        Some(n) => word(n),
        None => {
            s.placeholders.push(format!(
                "PF: the physical function's netdev on the hypervisor (the one whose `ip link show` lists a vf with {mac})"
            ));
            "PF".into()
        }
    };
    let mut mlnx = String::new();
    if let Some(p) = s.settings.get("pfc_enabled") {
        mlnx.push_str(&format!(" --pfc {}", word(&pfc_flags(p))));
    }
    if let Some(t) = s.settings.get("trust") {
        mlnx.push_str(&format!(" --trust {}", word(t)));
    }
    if !mlnx.is_empty() {
        s.commands.push(format!("mlnx_qos -i {pf}{mlnx}"));
    }
    let index = match s.function.index {
        Some(n) => n.to_string(),
        None => {
            s.placeholders.push(format!(
                "N: this VF's index on the PF (`ip link show PF`: \"vf N\" with {mac})"
            ));
            "N".into()
        }
    };
    s.placeholders
        .push("VLAN: the VLAN the PF puts this VF in (`ip link show PF`: \"vf N ... vlan VLAN\"; none: no PCP is written)".into());
    let prio = match s.settings.get("pfc_enabled").map(|p| priorities(p)) {
        Some(p) if p.len() == 1 => p[0].to_string(),
        _ => {
            s.placeholders
                .push("P: the lossless priority this VF's RoCE traffic uses".into());
            "P".into()
        }
    };
    s.commands.push(format!(
        "ip link set dev {pf} vf {index} vlan VLAN qos {prio}"
    ));
    let netdev = s.function.pf_netdev.as_deref().unwrap_or("PF");
    let settings: Vec<String> = s
        .settings
        .iter()
        .map(|(k, v)| format!("{k} = {}", toml_string(v)))
        .collect();
    s.desired = format!(
        "[[qos.desired]]\nnetdevs = {}\nsettings = {{ {} }}\n",
        toml_string(netdev),
        settings.join(", ")
    );
}

/// The priorities of a `pfc_enabled` value (`3,4`; `none`).
fn priorities(list: &str) -> Vec<u8> {
    list.split(',')
        .filter_map(|p| p.trim().parse::<u8>().ok())
        .filter(|p| *p < 8)
        .collect()
}

/// `mlnx_qos --pfc`'s argument: eight 0/1 flags, priority 0 first (`3` → `0,0,0,1,0,0,0,0`).
fn pfc_flags(list: &str) -> String {
    let on = priorities(list);
    (0..8u8)
        .map(|p| if on.contains(&p) { "1" } else { "0" })
        .collect::<Vec<_>>()
        .join(",")
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The refusal as text: which port, that the settings are the PF's, and what to run on
/// the hypervisor.
pub fn refusal_text(steps: &[HypervisorSteps]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for st in steps {
        let names: Vec<&str> = st.settings.keys().map(String::as_str).collect();
        let whose = match &st.function.pf {
            Some(pf) => format!("the physical function {pf}"),
            None => "the physical function (not visible here: on the hypervisor)".into(),
        };
        let _ = writeln!(
            s,
            "{} is a virtual function: {} {} owned by {whose}, which applies {} to every VF on it; set on the hypervisor, as root:",
            port_label(&st.device, st.port, st.netdev.as_deref()),
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" },
            if names.len() == 1 { "it" } else { "them" },
        );
        for c in &st.commands {
            let _ = writeln!(s, "  {c}");
        }
        let _ = writeln!(
            s,
            "  or with rocewatch there: this entry in its configuration, then `rocewatch qos apply --yes`:"
        );
        for l in st.desired.lines() {
            let _ = writeln!(s, "    {l}");
        }
        for p in &st.placeholders {
            let _ = writeln!(s, "  {p}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::state;

    struct Guest;
    impl Functions for Guest {
        fn vf_of(&self, device: &str) -> Option<VfOf> {
            (device == "mlx5_0").then(VfOf::default)
        }
    }

    fn quote(s: &str) -> String {
        if s.chars()
            .all(|c| c.is_ascii_alphanumeric() || ",.-_".contains(c))
        {
            s.to_string()
        } else {
            format!("'{s}'")
        }
    }

    fn observed() -> Vec<QosState> {
        let v = |s: &str| Setting::Value(s.into());
        let dcb = || Setting::Unknown("not the live /sys".into());
        let s = |dev, nd| {
            state(
                dev,
                nd,
                &[
                    ("pfc_enabled", dcb()),
                    ("trust", dcb()),
                    ("peer_app", dcb()),
                    ("ecn_np_enabled", Setting::Unsupported),
                    ("ecn_rp_enabled", v("3")),
                    ("roce_tos", v("0")),
                ],
            )
        };
        vec![s("mlx5_0", "ens5"), s("mlx5_1", "ens6")]
    }

    #[test]
    fn a_vf_shows_the_pf_settings_as_the_pf_s_and_keeps_its_own() {
        let mut st = observed();
        let vfs = mark_pf_owned(&mut st, &Guest);
        let owned = &vfs.get("mlx5_0", 1).unwrap().pf_owned;
        assert_eq!(
            owned,
            &["ecn_np_enabled", "peer_app", "pfc_enabled", "trust"]
        );
        let s = &st[0].settings;
        assert_eq!(s["pfc_enabled"], Setting::Unknown(PF_OWNED.into()));
        assert_eq!(s["peer_app"], Setting::Unknown(PF_READ.into()));
        // What the VF has (ECN granted by the firmware, its ToS) stays its own.
        assert_eq!(s["ecn_rp_enabled"], Setting::Value("3".into()));
        assert_eq!(s["roce_tos"], Setting::Value("0".into()));
        // A PF is left as it was.
        assert!(vfs.get("mlx5_1", 1).is_none());
        assert_eq!(st[1], observed()[1]);
    }

    #[test]
    fn a_plan_refuses_the_pf_settings_of_a_vf_and_says_what_to_run_on_the_hypervisor() {
        let mut st = observed();
        let vfs = mark_pf_owned(&mut st, &Guest);
        let cfg: crate::QosConfig = toml::from_str(
            "[[desired]]\nsettings = { pfc_enabled = \"3\", trust = \"dscp\", roce_tos = \"106\" }",
        )
        .unwrap();
        let mut p = crate::plan(&cfg, &st);
        refuse_pf_owned(&mut p, &vfs);
        let refused: Vec<_> = p
            .pf_owned
            .iter()
            .map(|b| (b.at.device.as_str(), b.at.setting.as_str()))
            .collect();
        assert_eq!(refused, [("mlx5_0", "pfc_enabled"), ("mlx5_0", "trust")]);
        // The PF's own DCB stays blocked as before; the VF's ToS is still a change.
        assert_eq!(p.blocked.len(), 2);
        assert!(p.blocked.iter().all(|b| b.at.device == "mlx5_1"));
        assert!(p.changes.iter().any(|c| c.at.device == "mlx5_0"));
        assert!(!p.is_clean());
        let steps = on_hypervisor(&p, &vfs, &quote);
        assert_eq!(steps.len(), 1);
        assert_eq!(
            steps[0].commands,
            [
                "mlnx_qos -i PF --pfc 0,0,0,1,0,0,0,0 --trust dscp",
                "ip link set dev PF vf N vlan VLAN qos 3"
            ]
        );
        assert_eq!(
            steps[0].desired,
            "[[qos.desired]]\nnetdevs = \"PF\"\nsettings = { pfc_enabled = \"3\", trust = \"dscp\" }\n"
        );
        let text = refusal_text(&steps);
        assert!(
            text.starts_with("mlx5_0/1 (ens5) is a virtual function: pfc_enabled, trust are owned by the physical function (not visible here"),
            "{text}"
        );
    }

    #[test]
    fn a_host_side_vf_names_its_pf_quoted_and_its_index() {
        let mut p = Plan::default();
        p.pf_owned.push(Blocked {
            at: crate::SettingAt {
                device: "mlx5_2".into(),
                port: 1,
                netdev: Some("ens1f0v0".into()),
                setting: "pfc_enabled".into(),
            },
            to: "3,4".into(),
            reason: PF_OWNED.into(),
        });
        let mut vfs = VfPorts::default();
        vfs.0.insert(
            ("mlx5_2".into(), 1),
            VfPort {
                role: "vf",
                function: VfOf {
                    pf: Some("0000:3b:00.0".into()),
                    pf_netdev: Some("ens 1\"f0".into()),
                    index: Some(2),
                    mac: None,
                },
                pf_owned: vec!["pfc_enabled".into()],
            },
        );
        let steps = on_hypervisor(&p, &vfs, &quote);
        assert_eq!(
            steps[0].commands,
            [
                "mlnx_qos -i 'ens 1\"f0' --pfc 0,0,0,1,1,0,0,0",
                "ip link set dev 'ens 1\"f0' vf 2 vlan VLAN qos P"
            ]
        );
        assert!(steps[0]
            .desired
            .contains("netdevs = \"ens 1\\\"f0\"\nsettings = { pfc_enabled = \"3,4\" }"));
        assert!(steps[0].placeholders.iter().any(|p| p.starts_with("P: ")));
        assert!(!steps[0].placeholders.iter().any(|p| p.starts_with("PF: ")));
    }

    proptest::proptest! {
        /// Whatever the PF netdev is called (a tree given with --sysfs-root may name it
        /// anything), the `[[qos.desired]]` entry parses as TOML and names exactly it.
        #[test]
        fn the_desired_entry_names_any_pf_netdev_exactly(name in "\\PC{0,16}", ctl in "[\\x00-\\x1f\"\\\\]{0,3}") {
            let name = format!("{name}{ctl}");
            let mut p = Plan::default();
            p.pf_owned.push(Blocked {
                at: crate::SettingAt {
                    device: "mlx5_0".into(),
                    port: 1,
                    netdev: None,
                    setting: "trust".into(),
                },
                to: "dscp".into(),
                reason: PF_OWNED.into(),
            });
            let mut vfs = VfPorts::default();
            vfs.0.insert(
                ("mlx5_0".into(), 1),
                VfPort {
                    role: "vf",
                    function: VfOf { pf_netdev: Some(name.clone()), ..VfOf::default() },
                    pf_owned: vec!["trust".into()],
                },
            );
            let steps = on_hypervisor(&p, &vfs, &quote);
            let v: toml::Value = toml::from_str(&steps[0].desired).unwrap();
            let entry = &v["qos"]["desired"][0];
            proptest::prop_assert_eq!(entry["netdevs"].as_str(), Some(name.as_str()));
            proptest::prop_assert_eq!(entry["settings"]["trust"].as_str(), Some("dscp"));
        }
    }
}
