//! Interrupts of the RoCE netdevs: irqbalance running, or each NIC's interrupts spread
//! over CPUs.

use std::path::Path;

use rocewatch_sysfs::interrupts::nic_irqs;

use crate::check::{check, Check, Status};

/// Interrupts of the RoCE netdevs: irqbalance running, or each NIC's interrupts spread.
/// `sys` and `proc_root` are the live host's (the caller checks).
pub(crate) fn irq_checks(sys: &Path, proc_root: &Path, netdevs: &[String]) -> Vec<Check> {
    let irqbalance = std::fs::read_dir(proc_root)
        .map(|rd| {
            rd.filter_map(Result::ok).any(|e| {
                std::fs::read_to_string(e.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "irqbalance")
            })
        })
        .unwrap_or(false);
    if irqbalance {
        return vec![check(
            "interrupts",
            "",
            Status::Pass,
            "irqbalance is running",
            None,
        )];
    }
    let table = std::fs::read_to_string(proc_root.join("interrupts")).unwrap_or_default();
    let mut out = Vec::new();
    for nd in netdevs {
        // The netdev's PCI function (mlx5 names its queues' interrupts after it).
        let pci = std::fs::read_link(sys.join("class/net").join(nd).join("device"))
            .ok()
            .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
        let irqs = nic_irqs(&table, nd, pci.as_deref());
        if irqs.is_empty() {
            out.push(check(
                "interrupts",
                nd,
                Status::Skip,
                format!(
                    "no interrupt named after {nd} in {}, and irqbalance is not running",
                    proc_root.join("interrupts").display()
                ),
                None,
            ));
            continue;
        }
        let cpus: std::collections::BTreeSet<String> = irqs
            .iter()
            .filter_map(|i| {
                std::fs::read_to_string(proc_root.join(format!("irq/{i}/effective_affinity_list")))
                    .or_else(|_| {
                        std::fs::read_to_string(
                            proc_root.join(format!("irq/{i}/smp_affinity_list")),
                        )
                    })
                    .ok()
                    .map(|s| s.trim().to_string())
            })
            .collect();
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus.len() <= 1 && irqs.len() > 1 && online > 1 {
            out.push(check(
                "interrupts",
                nd,
                Status::Warn,
                format!(
                    "{} interrupts of {nd} all on CPU {} and irqbalance is not running",
                    irqs.len(),
                    cpus.iter().next().cloned().unwrap_or_default()
                ),
                Some("systemctl enable --now irqbalance (or spread them: set_irq_affinity.sh from the NIC vendor)".into()),
            ));
        } else {
            out.push(check(
                "interrupts",
                nd,
                Status::Pass,
                format!(
                    "{} interrupts of {nd} on CPUs {}",
                    irqs.len(),
                    cpus.into_iter().collect::<Vec<_>>().join(" ")
                ),
                None,
            ));
        }
    }
    out
}
