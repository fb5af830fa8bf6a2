//! The `virtualization` topic: what this host is (bare metal, or a guest of which
//! hypervisor, with the evidence: `rocewatch_sysfs::virt`), which RDMA devices are SR-IOV
//! virtual functions (`rocewatch_sysfs::sriov`), the CPU time the hypervisor stole over
//! doctor's window (`rocewatch_sysfs::procstat`), and, in a guest, what only the
//! hypervisor can judge (the switch, the PF's PFC, trust and ECN, a VF's VLAN QoS): said as
//! such, SKIP, never PASS and never FAIL.

use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::procstat::{steal_share, CpuSample, StatError};
use rocewatch_sysfs::sriov::{Sriov, VirtFn};
use rocewatch_sysfs::virt::{Detection, Virtualization};
use rocewatch_sysfs::SysRoot;

use crate::check::{check, Check, Status};

/// Steal above this share of the CPU time over the window is high: the fleet prober's
/// default `overload_steal`, the share at which its timeouts stop counting as loss.
pub(crate) const HIGH_STEAL: f64 = 0.1;

/// `/proc/stat` read at the start and the end of doctor's window.
pub(crate) type CpuWindow = (Result<CpuSample, StatError>, Result<CpuSample, StatError>);

/// Every check of the topic: what the host is, its VFs, steal over `window` (`None`: the
/// proc tree is not this tree's host's), and in a guest what the hypervisor owns.
pub(crate) fn virtualization_checks(
    detection: &Detection,
    sys: &SysRoot,
    inv: &Inventory,
    cpu: Option<&CpuWindow>,
    window: std::time::Duration,
) -> Vec<Check> {
    let mut out = vec![what_it_is(detection)];
    let vfs = virtual_functions(sys, inv);
    let guest = matches!(detection.virt, Virtualization::Guest(_));
    for (dev, vf) in &vfs {
        out.push(vf_check(dev, vf, guest));
    }
    out.push(steal_check(cpu, window, guest));
    if guest {
        out.extend(owned_by_the_hypervisor(&vfs));
    }
    out
}

/// Bare metal, a guest of which hypervisor, or unknown: a fact, never a verdict.
pub(crate) fn what_it_is(d: &Detection) -> Check {
    let evidence = d.evidence.join("; ");
    let (status, said) = match d.virt {
        Virtualization::BareMetal => (Status::Info, "bare metal".to_string()),
        Virtualization::Guest(_) => (Status::Info, format!("a guest: {}", d.virt)),
        Virtualization::Unknown => (Status::Skip, "cannot tell".to_string()),
    };
    check(
        "virtualization",
        "",
        status,
        format!("{said} ({evidence})"),
        None,
    )
}

/// The RDMA devices whose PCI function is an SR-IOV VF, in inventory order.
fn virtual_functions(sys: &SysRoot, inv: &Inventory) -> Vec<(String, VirtFn)> {
    inv.devices
        .iter()
        .filter_map(|d| match sys.sriov_of_device(&d.name) {
            Ok(Some(Sriov::Vf(vf))) => Some((d.name.clone(), vf)),
            _ => None,
        })
        .collect()
}

fn vf_check(dev: &str, vf: &VirtFn, guest: bool) -> Check {
    let model = vf.model.map(|m| format!(" ({m})")).unwrap_or_default();
    let pf = match (&vf.pf, vf.index) {
        (Some(pf), Some(i)) => format!("VF {i} of the PF {pf} on this host"),
        (Some(pf), None) => format!("a VF of the PF {pf} on this host"),
        (None, _) if guest => "its PF is on the hypervisor, out of this guest's sight".into(),
        (None, _) => "its PF is not visible here".into(),
    };
    check(
        "virtualization",
        dev,
        Status::Info,
        format!("{dev} is an SR-IOV virtual function{model}: {pf}"),
        None,
    )
}

/// The CPU time stolen over the window: high steal makes probes late on this host,
/// whatever the network does.
pub(crate) fn steal_check(
    cpu: Option<&CpuWindow>,
    window: std::time::Duration,
    guest: bool,
) -> Check {
    let skip = |why: String| check("virtualization", "steal", Status::Skip, why, None);
    let Some((before, after)) = cpu else {
        return skip(
            "the proc tree is not this tree's host's: give --procfs-root with --sysfs-root".into(),
        );
    };
    let (a, b) = match (before, after) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return skip(format!("cannot read the CPU times: {e}")),
    };
    let over = humantime::format_duration(window);
    let Some(share) = steal_share(a, b) else {
        // A fixture's stat read twice, or no tick passed: the total since boot instead.
        let total = steal_share(
            &CpuSample {
                total: 0,
                steal: 0,
                ..*b
            },
            b,
        )
        .unwrap_or(0.0);
        return check("virtualization",
            "steal",
            Status::Info,
            format!(
                "no CPU time passed over the {over} window; since boot {:.1} % of it was stolen ({} ticks)",
                total * 100.0,
                b.steal
            ),
            None,
        );
    };
    let pct = share * 100.0;
    if share > HIGH_STEAL {
        return check("virtualization",
            "steal",
            Status::Warn,
            format!(
                "{pct:.1} % of the CPU time was stolen by the hypervisor over the {over} window (above {:.0} %): high steal: late probes on this host are the hypervisor's, not the network's",
                HIGH_STEAL * 100.0
            ),
            Some("on the hypervisor: give this guest dedicated (pinned) CPUs, or move it to a less loaded host; until then judge this host's probe timeouts and RTTs as its own (the fleet prober counts them as host_overloaded)".into()),
        );
    }
    let whose = if guest {
        "the hypervisor leaves this guest its CPUs"
    } else {
        "no hypervisor takes CPU time here"
    };
    check(
        "virtualization",
        "steal",
        Status::Pass,
        format!("{pct:.1} % of the CPU time was stolen over the {over} window: {whose}"),
        None,
    )
}

/// In a guest, what only the hypervisor can judge: the switch behind the virtual NIC and,
/// for each VF, the PF's PFC, trust and ECN and the VF's VLAN QoS.
fn owned_by_the_hypervisor(vfs: &[(String, VirtFn)]) -> Vec<Check> {
    let mut out = vec![check("virtualization",
        "switch",
        Status::Skip,
        "owned by the hypervisor: this guest sees its virtual NIC, not the physical port, its switch or the switch's PFC/ECN; this guest cannot judge them",
        Some("judge them on the hypervisor (rocewatch doctor there) and on the switch".into()),
    )];
    for (dev, _) in vfs.iter().filter(|(_, vf)| vf.pf.is_none()) {
        out.push(check("virtualization",
            dev,
            Status::Skip,
            format!("owned by the hypervisor: the PF's PFC, trust and ECN apply to {dev}'s traffic, and its VLAN QoS (the PCP the PF writes into its frames) decides its priority; a VF has no DCB of its own and this guest cannot read the PF's"),
            Some("on the hypervisor: rocewatch doctor (its sriov topic) checks the PF's PFC, trust and ECN and each VF's VLAN QoS against the lossless priority".into()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_sysfs::virt::Hypervisor;
    use std::time::Duration;

    const STAT: &str =
        "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 100 0 50 800 10 0 5 35 0 0\nprocs_running 1\n";

    fn sample(text: &str) -> Result<CpuSample, StatError> {
        rocewatch_sysfs::procstat::parse_stat("stat", text)
    }

    fn guest() -> Detection {
        Detection {
            virt: Virtualization::Guest(Hypervisor::Kvm),
            evidence: vec!["DMI sys_vendor: QEMU".into()],
        }
    }

    #[test]
    fn high_steal_names_the_hypervisor_not_the_network() {
        let after = STAT.replace("cpu  100 0 50 800 10 0 5 35", "cpu  150 0 60 880 10 0 5 95");
        let w = (sample(STAT), sample(&after));
        let c = steal_check(Some(&w), Duration::from_secs(5), true);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.evidence.starts_with("30.0 % of the CPU time"), "{c:?}");
        assert!(
            c.evidence
                .contains("late probes on this host are the hypervisor's, not the network's"),
            "{c:?}"
        );
        let calm = STAT.replace("cpu  100 0 50 800 10 0 5 35", "cpu  150 0 60 939 10 0 5 36");
        let w = (sample(STAT), sample(&calm));
        let c = steal_check(Some(&w), Duration::from_secs(5), true);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.evidence.starts_with("0.5 % "), "{c:?}");
    }

    #[test]
    fn steal_that_cannot_be_measured_never_passes() {
        let c = steal_check(None, Duration::from_secs(5), false);
        assert_eq!(c.status, Status::Skip);
        let w = (sample(STAT), sample("cpu 1\n"));
        let c = steal_check(Some(&w), Duration::from_secs(5), false);
        assert_eq!(c.status, Status::Skip, "{c:?}");
        assert!(c.evidence.contains("steal is the 8th"), "{c:?}");
        let w = (sample(STAT), sample(STAT));
        let c = steal_check(Some(&w), Duration::from_secs(5), true);
        assert_eq!(c.status, Status::Info, "{c:?}");
        assert!(c.evidence.contains("since boot 3.5 %"), "{c:?}");
    }

    #[test]
    fn a_guest_says_what_the_hypervisor_owns_never_pass_or_fail() {
        let dir = tempfile::tempdir().unwrap();
        let sys = SysRoot::new(dir.path());
        let checks = virtualization_checks(
            &guest(),
            &sys,
            &Inventory::default(),
            None,
            Duration::from_secs(5),
        );
        let switch = checks.iter().find(|c| c.subject == "switch").unwrap();
        assert_eq!(switch.status, Status::Skip);
        assert!(
            switch.evidence.starts_with("owned by the hypervisor"),
            "{switch:?}"
        );
        assert_eq!(checks[0].status, Status::Info);
        assert!(checks[0].evidence.contains("kvm"), "{:?}", checks[0]);
        let bare = Detection {
            virt: Virtualization::BareMetal,
            evidence: vec!["DMI sys_vendor: Dell Inc., no hypervisor's".into()],
        };
        let checks =
            virtualization_checks(&bare, &sys, &Inventory::default(), None, Duration::ZERO);
        assert!(checks.iter().all(|c| c.subject != "switch"), "{checks:?}");
        assert!(checks[0].evidence.starts_with("bare metal"), "{checks:?}");
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures")
            .join(name)
    }

    /// integration-tests/fixtures/sriov-guest (its SOURCE.md): a QEMU guest with an mlx5
    /// VF 0x101e and no physfn; sriov-host: the PF with VFs on mlx5_core (mlx5_2, mlx5_3).
    #[test]
    fn the_fixture_trees_guest_and_host() {
        use rocewatch_sysfs::inventory::{read_inventory, DeviceFilter};
        let tree = fixture("sriov-guest");
        let sys = SysRoot::new(tree.join("sys"));
        let inv = read_inventory(&sys, &DeviceFilter::default()).unwrap().0;
        let d = rocewatch_sysfs::virt::detect(&tree.join("sys"), &tree.join("proc"));
        assert_eq!(d.virt, Virtualization::Guest(Hypervisor::Qemu), "{d:?}");
        let cpu = || rocewatch_sysfs::procstat::read_stat(&tree.join("proc"));
        let w = (cpu(), cpu());
        let checks = virtualization_checks(&d, &sys, &inv, Some(&w), Duration::from_secs(5));
        let text = crate::check::text(&checks);
        assert!(checks.iter().all(|c| c.status != Status::Fail), "{text}");
        let vf = checks
            .iter()
            .find(|c| c.subject == "mlx5_0" && c.status == Status::Info)
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            vf.evidence.contains("virtual function") && vf.evidence.contains("on the hypervisor"),
            "{text}"
        );
        let owned = checks
            .iter()
            .find(|c| c.subject == "mlx5_0" && c.status == Status::Skip)
            .unwrap_or_else(|| panic!("{text}"));
        assert!(owned.evidence.contains("PFC"), "{text}");
        assert!(checks.iter().any(|c| c.subject == "steal"), "{text}");

        // On the hypervisor: its VFs named with their PF and index, nothing said owned.
        let tree = fixture("sriov-host");
        let sys = SysRoot::new(tree.join("sys"));
        let inv = read_inventory(&sys, &DeviceFilter::default()).unwrap().0;
        let bare = Detection {
            virt: Virtualization::BareMetal,
            evidence: vec!["test".into()],
        };
        let checks = virtualization_checks(&bare, &sys, &inv, None, Duration::ZERO);
        let text = crate::check::text(&checks);
        assert!(
            checks
                .iter()
                .any(|c| c.subject == "mlx5_2" && c.evidence.contains("VF 0 of the PF")),
            "{text}"
        );
        assert!(
            checks
                .iter()
                .all(|c| c.status != Status::Pass || c.subject == "steal"),
            "{text}"
        );
    }
}
