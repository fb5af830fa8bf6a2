//! The guide's topics after the ports: each a named `fn(&Host) -> Vec<Check>` over what
//! the host was read to be (the checks themselves live in their own files).

use std::path::Path;

use super::host::Host;
use crate::check::{check, Check, Status, ROCE_PORT};
use crate::checks::capture::vlan_offload;
use crate::checks::interrupts::irq_checks;
use crate::shell::word_on_one_line as word;

/// The link layer each port runs against what it is meant to run.
pub(crate) fn link_layer(h: &Host) -> Vec<Check> {
    crate::checks::linklayer::link_layer_checks(&h.sys, &h.inv, h.opts.link_layer)
}

/// Each NIC's PCIe link.
pub(crate) fn pcie(h: &Host) -> Vec<Check> {
    crate::checks::pcie::link_checks(&h.sys, &h.inv)
}

/// SR-IOV: each PF's VFs and what the PF's settings of them do to RoCE (the settings
/// over this host's rtnetlink: live only).
pub(crate) fn sriov(h: &Host) -> Vec<Check> {
    use crate::checks::sriov::{LiveNetlink, NotThisHost, VfSettings};
    let (mut live, mut other) = (
        LiveNetlink::default(),
        NotThisHost(h.root.display().to_string()),
    );
    let settings: &mut dyn VfSettings = if h.live { &mut live } else { &mut other };
    crate::checks::sriov::sriov_checks(&h.sys, &h.inv, &h.qos, h.opts.priority, settings)
}

/// The netdevs of the RoCE ports, in inventory order.
fn roce_netdevs(h: &Host) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in h.inv.devices.iter().flat_map(|d| &d.ports) {
        if let Some(nd) = &p.netdev {
            if !out.contains(nd) {
                out.push(nd.clone());
            }
        }
    }
    out
}

/// Each port's transceiver module against its own thresholds (this host's only).
pub(crate) fn optics(h: &Host) -> Vec<Check> {
    let mut live = crate::checks::optics::LiveModules::default();
    crate::checks::optics::optics_checks(&roce_netdevs(h), h.live, &mut live)
}

/// Each port's link over the window: down reason, flaps, FEC, pre-FEC BER.
pub(crate) fn link(h: &Host) -> Vec<Check> {
    use crate::checks::link::{link_checks, link_ports, Limits};
    let limits = Limits {
        pre_fec_ber_warn: h.opts.pre_fec_ber_warn,
        max_flaps: h.opts.max_flaps,
    };
    let (first, second, window) = (&h.first, &h.second, h.opts.window);
    link_checks(&link_ports(&h.inv), first, second, window, &limits)
}

/// Where GPUs sit from NICs, GPUDirect, and ACS on the path between them.
pub(crate) fn gpu(h: &Host) -> Vec<Check> {
    let mut out = crate::checks::gpu::gpu_checks(&h.sys, &h.gpus, &h.nics);
    if !h.gpus.is_empty() && !h.nics.is_empty() {
        out.extend(crate::checks::acs::acs_checks(&h.sys, &h.gpus, &h.nics));
    }
    out
}

/// Interrupts against the NIC's node: the proc tree must go with the sysfs tree.
pub(crate) fn numa(h: &Host) -> Vec<Check> {
    match h.proc_root() {
        Some(proc_root) => crate::checks::numa::numa_checks(&h.sys, proc_root, &h.inv),
        None => vec![check(
            "numa",
            "",
            Status::Skip,
            format!(
                "{} and {} are not the same host's: give --procfs-root with --sysfs-root",
                h.root.display(),
                h.opts.procfs_root.display()
            ),
            None,
        )],
    }
}

/// Multi-rail: live rtnetlink and sysctls of this network namespace, for the netdevs
/// the inventory names (a fixture tree's too, when those netdevs exist here).
pub(crate) fn multirail(h: &Host) -> Vec<Check> {
    crate::checks::multirail::multirail_checks(&h.inv, &h.rails, &h.root, &h.opts.procfs_root)
}

/// A host check that says nothing about a tree that is not the live `/sys`: `what` is
/// what it reads, a plural ("firewall rules": "this host's firewall rules say nothing").
fn not_this_tree(h: &Host, name: &str, what: &str) -> Vec<Check> {
    vec![check(
        name,
        "",
        Status::Skip,
        format!(
            "{} is not the live /sys: this host's {what} say nothing about that tree",
            h.root.display()
        ),
        None,
    )]
}

/// Firewall rules for UDP 4791 (live only).
pub(crate) fn firewall(h: &Host) -> Vec<Check> {
    if !h.live {
        return not_this_tree(h, "firewall", "firewall rules");
    }
    crate::checks::firewall::firewall_checks()
}

/// The RoCE netdevs' interrupts (live only).
pub(crate) fn interrupts(h: &Host) -> Vec<Check> {
    if !h.live {
        return not_this_tree(h, "interrupts", "interrupts");
    }
    let netdevs: Vec<String> = h.roce_ports().map(|p| p.netdev.to_string()).collect();
    irq_checks(Path::new(&h.root), &h.opts.procfs_root, &netdevs)
}

/// The driver: loaded modules, taint, kernel.
pub(crate) fn driver(h: &Host) -> Vec<Check> {
    crate::checks::driver::driver_checks(&h.sys, h.proc_root(), &h.inv)
}

/// The userspace verbs stack: device files, the RDMA CM device, locked memory, the
/// provider of each device's driver. A fixture tree's need `--rootfs` and
/// `--procfs-root` of the same host.
pub(crate) fn userspace(h: &Host) -> Vec<Check> {
    let rootfs_live = h.opts.rootfs == Path::new("/");
    if h.live != rootfs_live {
        return vec![check(
            "userspace",
            "",
            Status::Skip,
            format!(
                "{} and {} are not the same host's: give --rootfs with --sysfs-root",
                h.root.display(),
                h.opts.rootfs.display()
            ),
            None,
        )];
    }
    super::userspace_topic::checks(h)
}

/// Firmware: devices of one driver should run one firmware.
pub(crate) fn firmware(h: &Host) -> Vec<Check> {
    crate::checks::driver::firmware_checks(&h.inv)
}

/// The kernel log's driver messages over --log-window.
pub(crate) fn kernel_log(h: &Host) -> Vec<Check> {
    crate::checks::kernel_log::kernel_log_checks(
        &h.root,
        &h.opts.kernel_log,
        h.opts.log_window,
        rocewatch_klog::text::Clock::of_procfs(&h.opts.procfs_root),
    )
}

/// Live counters over the window.
pub(crate) fn counters(h: &Host) -> Vec<Check> {
    let mut out =
        crate::checks::counters::counters_checks(&h.first, &h.second, &h.failed, h.opts.window);
    out.extend(crate::checks::congestion::congestion_checks(
        &h.first,
        &h.second,
        h.opts.window,
    ));
    out
}

/// The verbs probe to the peer and the bandwidth test (run by the live agent).
pub(crate) fn probe(h: &Host) -> Vec<Check> {
    h.probe.clone()
}

/// How to capture the RoCE traffic.
pub(crate) fn capture(h: &Host) -> Vec<Check> {
    let Some(nd) = h.capture_netdev() else {
        return vec![check(
            "capture",
            "",
            Status::Skip,
            "no RoCE port with a netdev that is up",
            None,
        )];
    };
    let now = vlan_offload(nd);
    let restore = now.clone().unwrap_or_else(|| "on".into());
    let (restore, w) = (word(&restore), word(nd));
    vec![check(
        "capture",
        nd,
        Status::Info,
        format!(
            "capture RoCE v2 on {w} (the RDMA port's netdev): tcpdump -i {w} -nn udp port {ROCE_PORT}; NIC offloads can hide VLAN tags and RDMA traffic: ethtool -K {w} rx-vlan-offload off before, and ethtool -K {w} rx-vlan-offload {restore} after{}",
            if now.is_some() { " (as it is now)" } else { " (its state now could not be read; check ethtool -k)" }
        ),
        None,
    )]
}

/// An application's settings (--env) against what this host needs.
pub(crate) fn env(h: &Host) -> Vec<Check> {
    let Some(env) = &h.opts.env else {
        return Vec::new();
    };
    let host = crate::appenv::compute(
        rocewatch_sysfs::rails::ports(&h.inv, &h.qos, None),
        crate::appenv::desired_tos(&h.opts.qos, &h.qos),
        crate::appenv::For::All,
        h.addrs.as_ref(),
    );
    crate::appenv::check::env_checks(&host, &h.inv, &h.qos, env, h.addrs.as_ref())
}

/// What the host is (bare metal, a guest of which hypervisor), its VFs, the CPU time
/// stolen over the window, and in a guest what only the hypervisor can judge.
pub(crate) fn virtualization(h: &Host) -> Vec<Check> {
    let mut facts = rocewatch_sysfs::virt::read_facts(&h.root, &h.opts.procfs_root);
    if h.proc_root().is_none() {
        // Another host's cpuinfo says nothing of this tree's.
        facts.hypervisor_flag = None;
    }
    crate::checks::virtualization::virtualization_checks(
        &rocewatch_sysfs::virt::judge(&facts),
        &h.sys,
        &h.inv,
        h.cpu.as_ref(),
        h.opts.window,
    )
}
