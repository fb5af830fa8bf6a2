//! NUMA locality of each NIC's interrupts: the node its PCI function sits on
//! (`numa_node`) against the CPUs its interrupts run on (`/proc/irq/<N>/`
//! `effective_affinity_list`, else `smp_affinity_list`). Interrupts served only from
//! another node's CPUs put every completion across the socket interconnect.

use std::collections::BTreeSet;
use std::path::Path;

use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::interrupts::nic_irqs;
use rocewatch_sysfs::pci::parse_cpulist;
use rocewatch_sysfs::SysRoot;

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// Where one interrupt may run: its number and CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IrqCpus {
    pub irq: String,
    pub cpus: Vec<u32>,
}

/// The CPUs an interrupt runs on: the effective affinity (where the kernel put it) when
/// the kernel reports one, else the allowed set.
pub(crate) fn irq_cpus(proc_root: &Path, irq: &str) -> Option<Vec<u32>> {
    ["effective_affinity_list", "smp_affinity_list"]
        .iter()
        .find_map(|f| {
            let t = std::fs::read_to_string(proc_root.join("irq").join(irq).join(f)).ok()?;
            parse_cpulist(&t).filter(|c| !c.is_empty())
        })
}

/// `0-3,8`: a CPU set written back as a list.
pub(crate) fn cpulist(cpus: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let v: Vec<u32> = cpus.iter().copied().collect();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

/// The verdict for one NIC on `node` (whose CPUs are `local`), from its interrupts.
pub(crate) fn locality_check(
    subject: &str,
    netdev: Option<&str>,
    node: u32,
    local: &[u32],
    irqs: &[IrqCpus],
) -> Check {
    let local: BTreeSet<u32> = local.iter().copied().collect();
    let remote: Vec<&IrqCpus> = irqs
        .iter()
        .filter(|i| !i.cpus.iter().any(|c| local.contains(c)))
        .collect();
    let used: BTreeSet<u32> = irqs.iter().flat_map(|i| i.cpus.iter().copied()).collect();
    let node_cpus = cpulist(&local);
    if remote.len() == irqs.len() {
        let numbers: Vec<&str> = remote.iter().map(|i| i.irq.as_str()).collect();
        let nd = netdev.map_or_else(|| "NETDEV".to_string(), word);
        return check(
            "numa",
            subject,
            Status::Warn,
            format!(
                "the NIC is on node {node} (CPUs {node_cpus}) but its {} interrupts run on CPUs {}, none of node {node}: every completion crosses the socket interconnect",
                irqs.len(),
                cpulist(&used)
            ),
            Some(format!(
                "systemctl enable --now irqbalance (it keeps a device's interrupts on its node), or pin them to node {node}: set_irq_affinity_cpulist.sh {node_cpus} {nd} (the NIC vendor's script), or for IRQ in {}: echo {node_cpus} > /proc/irq/$IRQ/smp_affinity_list; run the application on node {node} too (numactl --cpunodebind={node} --membind={node})",
                numbers.join(" ")
            )),
        );
    }
    check(
        "numa",
        subject,
        Status::Pass,
        format!(
            "node {node} (CPUs {node_cpus}); {} of {} interrupts on its CPUs (CPUs {} in use)",
            irqs.len() - remote.len(),
            irqs.len(),
            cpulist(&used)
        ),
        None,
    )
}

/// The NUMA locality of every RDMA device's interrupts.
pub(crate) fn numa_checks(root: &SysRoot, proc_root: &Path, inv: &Inventory) -> Vec<Check> {
    let table = match std::fs::read_to_string(proc_root.join("interrupts")) {
        Ok(t) => t,
        Err(e) => {
            return vec![check(
                "numa",
                "",
                Status::Skip,
                format!("{}: {e}", proc_root.join("interrupts").display()),
                None,
            )]
        }
    };
    let mut out = Vec::new();
    for d in &inv.devices {
        let Some(f) = root.rdma_pci_function(&d.name) else {
            continue;
        };
        let Some(node) = root.pci_numa_node(&f.dir) else {
            out.push(check(
                "numa",
                &d.name,
                Status::Skip,
                format!(
                    "{} reports no NUMA node (numa_node -1: one node, or the firmware does not say)",
                    f.address
                ),
                None,
            ));
            continue;
        };
        let Some(local) = root.node_cpulist(node).and_then(|t| parse_cpulist(&t)) else {
            out.push(check(
                "numa",
                &d.name,
                Status::Skip,
                format!("node {node}'s CPU list (devices/system/node/node{node}/cpulist) is not readable"),
                None,
            ));
            continue;
        };
        let netdev = d.ports.iter().find_map(|p| p.netdev.as_deref());
        let irqs: Vec<IrqCpus> = nic_irqs(&table, netdev.unwrap_or(&d.name), Some(&f.address))
            .into_iter()
            .filter_map(|irq| {
                let cpus = irq_cpus(proc_root, &irq)?;
                Some(IrqCpus { irq, cpus })
            })
            .collect();
        if irqs.is_empty() {
            out.push(check(
                "numa",
                &d.name,
                Status::Skip,
                format!(
                    "node {node}; no interrupt of {} ({}) with a readable affinity in {}",
                    d.name,
                    f.address,
                    proc_root.display()
                ),
                None,
            ));
            continue;
        }
        out.push(locality_check(&d.name, netdev, node, &local, &irqs));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn irq(n: &str, cpus: &str) -> IrqCpus {
        IrqCpus {
            irq: n.into(),
            cpus: parse_cpulist(cpus).unwrap(),
        }
    }

    #[test]
    fn interrupts_only_on_the_other_node_warn_with_the_fix() {
        let node1: Vec<u32> = (16..32).collect();
        let irqs = [irq("112", "0-3"), irq("113", "0-3"), irq("114", "2")];
        let c = locality_check("mlx5_3", Some("ens3np0"), 1, &node1, &irqs);
        assert_eq!(c.status, Status::Warn);
        assert_eq!(
            c.evidence,
            "the NIC is on node 1 (CPUs 16-31) but its 3 interrupts run on CPUs 0-3, none of node 1: every completion crosses the socket interconnect"
        );
        let fix = c.fix.unwrap();
        assert!(
            fix.contains("set_irq_affinity_cpulist.sh 16-31 ens3np0"),
            "{fix}"
        );
        assert!(
            fix.contains("for IRQ in 112 113 114: echo 16-31 > /proc/irq/$IRQ/smp_affinity_list"),
            "{fix}"
        );
    }

    #[test]
    fn some_on_the_node_pass() {
        let node0: Vec<u32> = (0..16).collect();
        let c = locality_check(
            "mlx5_0",
            None,
            0,
            &node0,
            &[irq("1", "0-3"), irq("2", "20")],
        );
        assert_eq!(c.status, Status::Pass);
        assert_eq!(
            c.evidence,
            "node 0 (CPUs 0-15); 1 of 2 interrupts on its CPUs (CPUs 0-3,20 in use)"
        );
    }

    #[test]
    fn affinity_files_effective_first() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("irq/40");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("smp_affinity_list"), "0-31\n").unwrap();
        assert_eq!(irq_cpus(dir.path(), "40"), Some((0..32).collect()));
        std::fs::write(d.join("effective_affinity_list"), "5\n").unwrap();
        assert_eq!(irq_cpus(dir.path(), "40"), Some(vec![5]));
        assert_eq!(irq_cpus(dir.path(), "41"), None);
        assert_eq!(
            cpulist(&[0, 1, 2, 5, 7, 8].into_iter().collect()),
            "0-2,5,7-8"
        );
    }
}
