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
//! takes such settings out of a plan (`qos plan` and `qos apply` refuse them, unless the
//! PF is on this host and the same plan sets them on it: then the PF covers them) and
//! [`on_hypervisor`] says what to run where the PF is instead.

use std::collections::BTreeMap;

use rocewatch_plugin_api::{QosState, Setting};
use serde::Serialize;

use crate::{desired_for, port_label, Blocked, Plan, QosConfig};

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

/// The reason of a VF's PF-owned setting that the PF's own entry in the same plan sets.
pub fn covered_reason(pf_netdev: &str) -> String {
    format!("covered by the PF {pf_netdev} (set there for every VF of it)")
}

/// The reason of a VF's PF-owned setting refused on the host (the PF is visible there).
fn on_this_host_reason(pf_netdev: &str) -> String {
    format!("owned by the physical function: set it on the PF {pf_netdev} (this host)")
}

/// Moves the desired settings a VF's PF owns out of the plan's `blocked`: into its
/// `pf_covered` where the PF is on this host and the plan desires the same value on it
/// (the PF's entry sets it for every VF; nothing to refuse), else into its `pf_owned`:
/// what `qos plan` and `qos apply` refuse. `desired` and `states` are what the plan was
/// made of.
pub fn refuse_pf_owned(plan: &mut Plan, vfs: &VfPorts, desired: &QosConfig, states: &[QosState]) {
    let (owned, kept): (Vec<Blocked>, Vec<Blocked>) = std::mem::take(&mut plan.blocked)
        .into_iter()
        .partition(|b| {
            vfs.get(&b.at.device, b.at.port)
                .is_some_and(|p| p.pf_owned.contains(&b.at.setting))
        });
    plan.blocked = kept;
    for mut b in owned {
        let pf_netdev = vfs
            .get(&b.at.device, b.at.port)
            .filter(|p| p.function.pf.is_some())
            .and_then(|p| p.function.pf_netdev.clone());
        let Some(pf) = pf_netdev else {
            b.reason = PF_OWNED.into();
            plan.pf_owned.push(b);
            continue;
        };
        let pf_desires_it = states
            .iter()
            .filter(|st| st.netdev.as_deref() == Some(pf.as_str()))
            .filter(|st| vfs.get(&st.device, st.port).is_none())
            .any(|st| desired_for(desired, st).get(&b.at.setting) == Some(&b.to));
        if pf_desires_it {
            b.reason = covered_reason(&pf);
            plan.pf_covered.push(b);
        } else {
            b.reason = on_this_host_reason(&pf);
            plan.pf_owned.push(b);
        }
    }
}

/// A VF port named in [`HypervisorSteps`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VfRef {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// The VF's index on its PF, when the PF is visible.
    pub index: Option<u32>,
    /// The MAC of the VF's netdev.
    pub mac: Option<String>,
}

/// What to do on the PF for the VF ports whose PF-owned settings were refused: one per
/// PF on the host (per VF port inside a guest, where the PF cannot be told), per set of
/// refused values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HypervisorSteps {
    /// The PF's PCI address; `None` inside a guest.
    pub pf: Option<String>,
    /// The PF's netdev, when the PF is visible.
    pub pf_netdev: Option<String>,
    /// The VF ports the settings were refused on.
    pub vfs: Vec<VfRef>,
    /// The refused settings and the values wanted.
    pub settings: BTreeMap<String, String>,
    /// Shell command lines to run where the PF is, as root (names quoted for `sh`;
    /// `PF`, `N`, `VLAN`, `P` stand for what cannot be known here, see `placeholders`).
    pub commands: Vec<String>,
    /// The same PF settings as a `[[qos.desired]]` entry for rocewatch where the PF is
    /// (then `rocewatch qos apply --yes` there).
    pub desired: String,
    /// What each placeholder in `commands` and `desired` stands for.
    pub placeholders: Vec<String>,
}

/// Groups the refused settings of `plan.pf_owned` by PF (by VF port where the PF is not
/// visible) and the values wanted, then says for each: the `mlnx_qos` line for PFC and
/// trust, the same settings as a rocewatch `[[qos.desired]]` entry, and, where PFC or
/// trust was refused, each VF's VLAN priority (`ip link set dev PF vf N vlan VLAN qos P`:
/// the PCP the PF writes into the VF's frames, where it puts the VF in a VLAN). `word`
/// quotes a name for the shell.
pub fn on_hypervisor(
    plan: &Plan,
    vfs: &VfPorts,
    word: &dyn Fn(&str) -> String,
) -> Vec<HypervisorSteps> {
    type PortKey = (String, u32);
    let mut by_port: BTreeMap<PortKey, (VfRef, &VfOf, BTreeMap<String, String>)> = BTreeMap::new();
    for b in &plan.pf_owned {
        let Some(vf) = vfs.get(&b.at.device, b.at.port) else {
            continue;
        };
        by_port
            .entry((b.at.device.clone(), b.at.port))
            .or_insert_with(|| {
                let r = VfRef {
                    device: b.at.device.clone(),
                    port: b.at.port,
                    netdev: b.at.netdev.clone(),
                    index: vf.function.index,
                    mac: vf.function.mac.clone(),
                };
                (r, &vf.function, BTreeMap::new())
            })
            .2
            .insert(b.at.setting.clone(), b.to.clone());
    }
    type GroupKey = (Option<String>, Option<PortKey>, BTreeMap<String, String>);
    let mut groups: BTreeMap<GroupKey, HypervisorSteps> = BTreeMap::new();
    for (key, (r, f, settings)) in by_port {
        let alone = f.pf.is_none().then_some(key);
        groups
            .entry((f.pf.clone(), alone, settings.clone()))
            .or_insert_with(|| HypervisorSteps {
                pf: f.pf.clone(),
                pf_netdev: f.pf_netdev.clone(),
                vfs: Vec::new(),
                settings,
                commands: Vec::new(),
                desired: String::new(),
                placeholders: Vec::new(),
            })
            .vfs
            .push(r);
    }
    let mut out: Vec<HypervisorSteps> = groups.into_values().collect();
    for s in &mut out {
        fill_steps(s, word);
    }
    out
}

/// The commands, the desired entry and the placeholders of `s`, from its settings.
fn fill_steps(s: &mut HypervisorSteps, word: &dyn Fn(&str) -> String) {
    let first_mac = s.vfs.first().and_then(|v| v.mac.as_deref());
    let mac = match first_mac {
        Some(m) => format!("this VF's MAC, {}", word(m)),
        None => "this VF's MAC".into(),
    };
    let pf = match &s.pf_netdev {
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
        vlan_priority(s, &pf, &mac);
    }
    let netdev = s.pf_netdev.as_deref().unwrap_or("PF");
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

/// Each VF's `ip link set dev PF vf N vlan VLAN qos P` line of `s` and what its
/// placeholders stand for: the priority matters only where the PF puts the VF in a VLAN.
fn vlan_priority(s: &mut HypervisorSteps, pf: &str, mac: &str) {
    let prio = match s.settings.get("pfc_enabled").map(|p| priorities(p)) {
        Some(p) if p.len() == 1 => p[0].to_string(),
        _ => {
            s.placeholders
                .push("P: the lossless priority this VF's RoCE traffic uses".into());
            "P".into()
        }
    };
    let mut unknown_index = false;
    for v in &s.vfs {
        let index = match v.index {
            Some(n) => n.to_string(),
            None => {
                unknown_index = true;
                "N".into()
            }
        };
        s.commands.push(format!(
            "ip link set dev {pf} vf {index} vlan VLAN qos {prio}"
        ));
    }
    if unknown_index {
        s.placeholders.push(format!(
            "N: this VF's index on the PF (`ip link show PF`: \"vf N\" with {mac})"
        ));
    }
    let (user, doctor) = if s.pf.is_some() {
        (
            "whoever uses the VF (this host, or the guest it is passed to)",
            "here",
        )
    } else {
        ("the guest", "on the hypervisor")
    };
    s.placeholders.push(format!(
        "VLAN: the VLAN the PF puts the VF in (`ip link show PF`: \"vf N ... vlan VLAN\"); the `ip link` line applies only where the PF inserts a VLAN for the VF: if the VF has no VLAN, {user} must tag its RoCE traffic with priority {prio} (`rocewatch doctor` {doctor}, its sriov check, says which)"
    ));
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

/// The refusal as text: which ports, that the settings are the PF's, and what to run
/// where the PF is (on the hypervisor, or on this host when the PF is visible).
pub fn refusal_text(steps: &[HypervisorSteps]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for st in steps {
        let names: Vec<&str> = st.settings.keys().map(String::as_str).collect();
        let ports: Vec<String> = st
            .vfs
            .iter()
            .map(|v| port_label(&v.device, v.port, v.netdev.as_deref()))
            .collect();
        let (one, it) = if names.len() == 1 {
            ("is", "it")
        } else {
            ("are", "them")
        };
        let (whose, where_) = match (&st.pf, &st.pf_netdev) {
            (Some(pf), Some(n)) => (
                format!("the physical function {n} ({pf}) on this host"),
                format!("set {it} on the PF {n} (this host)"),
            ),
            (Some(pf), None) => (
                format!("the physical function {pf} on this host"),
                format!("set {it} on that PF (this host)"),
            ),
            (None, _) => (
                "the physical function (not visible here: on the hypervisor)".into(),
                "set on the hypervisor".into(),
            ),
        };
        let _ = writeln!(
            s,
            "{} {} virtual function{}: {} {one} owned by {whose}, which applies {it} to every VF on it; {where_}, as root:",
            ports.join(", "),
            if ports.len() == 1 { "is a" } else { "are" },
            if ports.len() == 1 { "" } else { "s" },
            names.join(", "),
        );
        for c in &st.commands {
            let _ = writeln!(s, "  {c}");
        }
        let _ = writeln!(
            s,
            "  or with rocewatch {}: this entry in its configuration, then `rocewatch qos apply --yes`:",
            if st.pf.is_some() { "here" } else { "there" }
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
        refuse_pf_owned(&mut p, &vfs, &cfg, &st);
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

    /// A hypervisor: mlx5_0 the PF (ens1f0np0), mlx5_2 and mlx5_3 its VFs 0 and 1.
    struct Host;
    impl Functions for Host {
        fn vf_of(&self, device: &str) -> Option<VfOf> {
            let index = match device {
                "mlx5_2" => 0,
                "mlx5_3" => 1,
                _ => return None,
            };
            Some(VfOf {
                pf: Some("0000:3b:00.0".into()),
                pf_netdev: Some("ens1f0np0".into()),
                index: Some(index),
                mac: None,
            })
        }
    }

    fn host_plan(desired: &str) -> (Plan, VfPorts) {
        let dcb = || Setting::Unknown("not the live /sys".into());
        let s = |dev, nd| state(dev, nd, &[("pfc_enabled", dcb()), ("trust", dcb())]);
        let mut st = vec![
            s("mlx5_0", "ens1f0np0"),
            s("mlx5_2", "ens1f0v0"),
            s("mlx5_3", "ens1f0v1"),
        ];
        let vfs = mark_pf_owned(&mut st, &Host);
        let cfg: crate::QosConfig = toml::from_str(desired).unwrap();
        let mut p = crate::plan(&cfg, &st);
        refuse_pf_owned(&mut p, &vfs, &cfg, &st);
        (p, vfs)
    }

    fn at(list: &[Blocked]) -> Vec<(&str, &str)> {
        list.iter()
            .map(|b| (b.at.device.as_str(), b.at.setting.as_str()))
            .collect()
    }

    #[test]
    fn on_a_hypervisor_the_pf_s_own_entry_covers_its_vfs_and_nothing_is_refused() {
        let (p, _) =
            host_plan("[[desired]]\ndevices = \"mlx5_*\"\nsettings = { pfc_enabled = \"3\" }");
        assert!(p.pf_owned.is_empty(), "{p:?}");
        assert_eq!(
            at(&p.pf_covered),
            [("mlx5_2", "pfc_enabled"), ("mlx5_3", "pfc_enabled")]
        );
        assert_eq!(p.pf_covered[0].reason, covered_reason("ens1f0np0"));
        // The PF's own setting is planned as on any PF (here: cannot be compared).
        assert_eq!(at(&p.blocked), [("mlx5_0", "pfc_enabled")]);
        let text = crate::plan_text(&p);
        assert!(
            text.contains(
                "covered mlx5_2/1 (ens1f0v0)  pfc_enabled -> 3: covered by the PF ens1f0np0"
            ),
            "{text}"
        );
    }

    #[test]
    fn on_a_hypervisor_a_vf_only_entry_is_refused_with_one_pf_line_for_all_its_vfs() {
        let (p, vfs) = host_plan(
            "[[desired]]\ndevices = \"mlx5_[23]\"\nsettings = { pfc_enabled = \"3\", trust = \"dscp\" }",
        );
        assert!(p.pf_covered.is_empty(), "{p:?}");
        assert_eq!(p.pf_owned.len(), 4, "{p:?}");
        assert!(p.pf_owned[0]
            .reason
            .ends_with("set it on the PF ens1f0np0 (this host)"));
        let steps = on_hypervisor(&p, &vfs, &quote);
        assert_eq!(steps.len(), 1, "{steps:?}");
        assert_eq!(
            steps[0].commands,
            [
                "mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0,0 --trust dscp",
                "ip link set dev ens1f0np0 vf 0 vlan VLAN qos 3",
                "ip link set dev ens1f0np0 vf 1 vlan VLAN qos 3",
            ]
        );
        let text = refusal_text(&steps);
        assert!(
            text.starts_with("mlx5_2/1 (ens1f0v0), mlx5_3/1 (ens1f0v1) are virtual functions: pfc_enabled, trust are owned by the physical function ens1f0np0 (0000:3b:00.0) on this host"),
            "{text}"
        );
        assert!(
            text.contains("set them on the PF ens1f0np0 (this host)"),
            "{text}"
        );
        // The PF desired at another value does not cover its VFs.
        let (p, _) = host_plan(
            "[[desired]]\ndevices = \"mlx5_0\"\nsettings = { pfc_enabled = \"4\" }\n[[desired]]\ndevices = \"mlx5_[23]\"\nsettings = { pfc_enabled = \"3\" }",
        );
        assert!(p.pf_covered.is_empty(), "{p:?}");
        assert_eq!(p.pf_owned.len(), 2, "{p:?}");
    }

    #[test]
    fn the_vlan_priority_is_advised_only_when_pfc_or_trust_is_refused() {
        let mut st = observed();
        let vfs = mark_pf_owned(&mut st, &Guest);
        let cfg: crate::QosConfig =
            toml::from_str("[[desired]]\nsettings = { ecn_np_enabled = \"3\" }").unwrap();
        let mut p = crate::plan(&cfg, &st);
        refuse_pf_owned(&mut p, &vfs, &cfg, &st);
        let steps = on_hypervisor(&p, &vfs, &quote);
        assert_eq!(steps.len(), 1, "{steps:?}");
        assert!(steps[0].commands.is_empty(), "{steps:?}");
        assert!(
            !steps[0].placeholders.iter().any(|p| p.starts_with("VLAN")),
            "{steps:?}"
        );
        assert!(steps[0].desired.contains("ecn_np_enabled = \"3\""));
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
