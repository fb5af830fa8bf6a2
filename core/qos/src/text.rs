//! `qos show` and `qos diff` as text: a block per port (`mlx5_0/1 (ens1f0np0)`, then a
//! setting and its value a line, as `mlnx_qos` prints them), each reason a setting could
//! not be read for said once, under the table, and marked `unknown [n]` where it applies.

use std::fmt::Write;

use rocewatch_plugin_api::{QosState, Setting};

use super::diff::{setting_text, HostComparison, HostDiff};
use super::plan::port_label;
use super::vf::{VfPorts, PF_OWNED, PF_READ};

/// The reasons of the unknowns of one output, each numbered once.
#[derive(Debug, Default)]
struct Reasons(Vec<String>);

impl Reasons {
    /// The number of `why` (1 for the first reason seen).
    fn mark(&mut self, why: &str) -> usize {
        match self.0.iter().position(|r| r == why) {
            Some(i) => i + 1,
            None => {
                self.0.push(why.to_string());
                self.0.len()
            }
        }
    }

    /// A setting as a cell: its value, `unsupported`, `absent`, `unknown [n]`, or, on a
    /// virtual function, that the physical function owns it.
    fn cell(&mut self, s: Option<&Setting>) -> String {
        match s {
            Some(Setting::Unknown(why)) if why == PF_OWNED || why == PF_READ => why.clone(),
            Some(Setting::Unknown(why)) => format!("unknown [{}]", self.mark(why)),
            other => setting_text(other),
        }
    }

    /// `[n] why`, a line each.
    fn write(&self, out: &mut String) {
        for (i, why) in self.0.iter().enumerate() {
            let _ = writeln!(out, "[{}] {why}", i + 1);
        }
    }
}

/// `rocewatch qos show`: a block per port (a port on a virtual function says so, and
/// which physical function owns what it cannot set); the DCQCN parameters on one line
/// (`dcqcn_* (17)`) while none has a value; the reasons under the blocks.
pub fn show_text(states: &[QosState], vfs: &VfPorts) -> String {
    let mut s = String::new();
    if states.is_empty() {
        s.push_str("no RDMA ports found\n");
        return s;
    }
    let mut reasons = Reasons::default();
    for st in states {
        let _ = writeln!(
            s,
            "{}{}",
            port_label(&st.device, st.port, st.netdev.as_deref()),
            vf_note(vfs, st)
        );
        let dcqcn: Vec<_> = st
            .settings
            .iter()
            .filter(|(k, _)| k.starts_with("dcqcn_"))
            .collect();
        let dcqcn_as_one = dcqcn.len() > 1
            && dcqcn.iter().all(|(_, v)| *v == dcqcn[0].1)
            && !matches!(dcqcn[0].1, Setting::Value(_));
        let width = st
            .settings
            .keys()
            .filter(|k| !(dcqcn_as_one && k.starts_with("dcqcn_")))
            .map(String::len)
            .chain(dcqcn_as_one.then(|| format!("dcqcn_* ({})", dcqcn.len()).len()))
            .max()
            .unwrap_or(0);
        for (k, v) in &st.settings {
            let k = if dcqcn_as_one && k.starts_with("dcqcn_") {
                if k != dcqcn[0].0 {
                    continue;
                }
                format!("dcqcn_* ({})", dcqcn.len())
            } else {
                k.clone()
            };
            let _ = writeln!(s, "  {k:<width$}  {}", reasons.cell(Some(v)));
        }
    }
    reasons.write(&mut s);
    s
}

/// `  virtual function of 0000:3b:00.0 (vf 2)` after a port on a VF; empty on any other.
fn vf_note(vfs: &VfPorts, st: &QosState) -> String {
    let Some(vf) = vfs.get(&st.device, st.port) else {
        return String::new();
    };
    match (&vf.function.pf, vf.function.index) {
        (Some(pf), Some(i)) => format!("  virtual function {i} of {pf}"),
        (Some(pf), None) => format!("  virtual function of {pf}"),
        (None, _) => {
            "  virtual function (its physical function is on the hypervisor, not visible here)"
                .into()
        }
    }
}

/// A port and the numbers of the reasons on each side.
type ReasonPair<'a> = (&'a str, usize, usize);

/// Setting names, the DCQCN parameters among them as one (`dcqcn_* (17)`).
fn names_list(names: &[&str]) -> String {
    let dcqcn = names.iter().filter(|n| n.starts_with("dcqcn_")).count();
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if dcqcn > 1 && n.starts_with("dcqcn_") {
            let one = format!("dcqcn_* ({dcqcn})");
            if !out.contains(&one) {
                out.push(one);
            }
        } else {
            out.push(n.to_string());
        }
    }
    out.join(", ")
}

/// `rocewatch qos diff A B`: the differences (`PORT  SETTING: A = x  |  B = y`), then
/// what is shown apart and not counted (unknown on both sides for different reasons;
/// what the fingerprint leaves out), the reasons, and the count last.
pub fn diff_text(c: &HostComparison, a: &str, b: &str) -> String {
    let mut s = String::new();
    let mut reasons = Reasons::default();
    for d in &c.differences {
        if d.port == "host" && d.setting == "fingerprint" {
            let _ = writeln!(
                s,
                "host  fingerprint: {a} = {}  |  {b} = {}  (the settings are alike: a driver or the firmware differs; `rocewatch discover --json` on each host lists them)",
                d.a, d.b
            );
            continue;
        }
        let (va, vb) = cells(&mut reasons, d);
        let _ = writeln!(s, "{}  {}: {a} = {va}  |  {b} = {vb}", d.port, d.setting);
    }
    if !c.reasons_differ.is_empty() {
        s.push_str("unknown on both sides for different reasons, equal as values (not counted):\n");
        // One line per port and pair of reasons, the settings listed.
        let mut groups: Vec<(ReasonPair, Vec<&str>)> = Vec::new();
        for d in &c.reasons_differ {
            let na = reasons.mark(&setting_why(d.settings.0.as_ref()));
            let nb = reasons.mark(&setting_why(d.settings.1.as_ref()));
            let k = (d.port.as_str(), na, nb);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, names)) => names.push(&d.setting),
                None => groups.push((k, vec![&d.setting])),
            }
        }
        for ((port, na, nb), names) in groups {
            let _ = writeln!(
                s,
                "  {port}  {}: {a} = unknown [{na}]  |  {b} = unknown [{nb}]",
                names_list(&names)
            );
        }
    }
    if !c.outside_fingerprint.is_empty() {
        s.push_str("left out of the fingerprint, not counted (what the switch announced, the NIC's buffer total):\n");
        for d in &c.outside_fingerprint {
            let (va, vb) = cells(&mut reasons, d);
            let _ = writeln!(s, "  {}  {}: {a} = {va}  |  {b} = {vb}", d.port, d.setting);
        }
    }
    reasons.write(&mut s);
    let n = c.differences.len();
    let _ = writeln!(s, "{n} difference{}", if n == 1 { "" } else { "s" });
    s
}

/// Why a setting is unknown (empty when it is not).
fn setting_why(s: Option<&Setting>) -> String {
    match s {
        Some(Setting::Unknown(why)) => why.clone(),
        _ => String::new(),
    }
}

/// The two sides of a row as cells (a port's presence as it is).
fn cells(reasons: &mut Reasons, d: &HostDiff) -> (String, String) {
    if d.setting == "port" {
        return (d.a.clone(), d.b.clone());
    }
    (
        reasons.cell(d.settings.0.as_ref()),
        reasons.cell(d.settings.1.as_ref()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::state;
    use crate::{compare_hosts, HostQos};

    const DCB: &str = "DCB is read over netlink from the live kernel; /a/sys is not the live /sys";

    fn unknown(why: &str) -> Setting {
        Setting::Unknown(why.into())
    }

    #[test]
    fn show_says_each_reason_once() {
        let p = |dev: &str| {
            state(
                dev,
                "e0",
                &[
                    ("trust", unknown(DCB)),
                    ("pfc_enabled", unknown(DCB)),
                    ("mtu", Setting::Value("9000".into())),
                    ("dcqcn_a", unknown("no cc_params")),
                    ("dcqcn_b", unknown("no cc_params")),
                ],
            )
        };
        let text = show_text(&[p("mlx5_0"), p("mlx5_1")], &crate::vf::VfPorts::default());
        assert_eq!(
            text,
            format!(
                "mlx5_0/1 (e0)\n  dcqcn_* (2)  unknown [1]\n  mtu          9000\n  pfc_enabled  unknown [2]\n  trust        unknown [2]\n\
                 mlx5_1/1 (e0)\n  dcqcn_* (2)  unknown [1]\n  mtu          9000\n  pfc_enabled  unknown [2]\n  trust        unknown [2]\n\
                 [1] no cc_params\n[2] {DCB}\n"
            )
        );
        assert_eq!(text.matches(DCB).count(), 1);
    }

    #[test]
    fn diff_counts_values_and_shows_reasons_apart() {
        let a = state(
            "mlx5_0",
            "e0",
            &[
                ("trust", unknown(DCB)),
                ("pfc_enabled", unknown(DCB)),
                ("mtu", Setting::Value("9000".into())),
                ("peer_pfc_enabled", Setting::Value("3".into())),
            ],
        );
        let other = DCB.replace("/a/", "/b/");
        let b = state(
            "mlx5_0",
            "e0",
            &[
                ("trust", unknown(&other)),
                ("pfc_enabled", unknown(&other)),
                ("mtu", unknown(&other)),
                ("peer_pfc_enabled", Setting::Value("4".into())),
            ],
        );
        let host = |s: &QosState| HostQos {
            ports: vec![s.clone()],
            fingerprint: None,
        };
        let text = diff_text(&compare_hosts(&host(&a), &host(&b)), "a.json", "b.json");
        assert_eq!(
            text,
            format!(
                "mlx5_0/1  mtu: a.json = 9000  |  b.json = unknown [1]\n\
                 unknown on both sides for different reasons, equal as values (not counted):\n\
                 \x20 mlx5_0/1  pfc_enabled, trust: a.json = unknown [2]  |  b.json = unknown [1]\n\
                 left out of the fingerprint, not counted (what the switch announced, the NIC's buffer total):\n\
                 \x20 mlx5_0/1  peer_pfc_enabled: a.json = 3  |  b.json = 4\n\
                 [1] {other}\n[2] {DCB}\n1 difference\n"
            )
        );
    }
}
