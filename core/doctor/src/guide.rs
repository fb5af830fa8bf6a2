//! The guide in order: devices, ports, netdev and IP, GID, the QoS checks, MTU, the PCIe
//! links, NUMA, multi-rail, firewall, interrupts, firmware, counters over a window, a
//! verbs probe, capture.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use rocewatch_plugin_api::{Inventory, Port};

use super::bandwidth::bandwidth_check;
use super::capture::vlan_offload;
use super::check::{check, Check, Options, Status, ROCE_PORT};
use super::counters::counters_checks;
use super::firewall::firewall_checks;
use super::host::{gid_ip, interface_addresses, irq_checks};
use super::kernel_log::kernel_log_checks;
use super::mtu::peer_mtu_check;
use super::qos::qos_checks;
use crate::shell::word_on_one_line as word;
use rocewatch_runtime::app::App;

/// Run every check.
pub async fn run(agent: &Arc<App>, opts: &Options) -> Vec<Check> {
    let root = agent.sysfs_root.clone();
    let live = rocewatch_sysfs::read::is_sysfs(Path::new(&root));
    let mut out = Vec::new();
    let inv: Inventory = agent.discover().await.unwrap_or_default();
    if inv.devices.is_empty() {
        out.push(check(
            "devices",
            "",
            Status::Fail,
            format!("no RDMA devices under {}/class/infiniband", root.display()),
            Some("load the NIC's RDMA driver (modprobe mlx5_ib, irdma, bnxt_re); for soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IF".into()),
        ));
        return out;
    }
    // A device whose ports say nothing (no state read) is no working device.
    let silent: Vec<&str> = inv
        .devices
        .iter()
        .filter(|d| !d.ports.iter().any(|p| p.state.is_some()))
        .map(|d| d.name.as_str())
        .collect();
    out.push(check(
        "devices",
        "",
        if silent.is_empty() {
            Status::Pass
        } else {
            Status::Warn
        },
        inv.devices
            .iter()
            .map(|d| {
                format!(
                    "{} ({}, firmware {})",
                    d.name,
                    d.driver.as_deref().unwrap_or("driver unknown"),
                    d.fw_ver.as_deref().unwrap_or("unknown")
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
            + &if silent.is_empty() {
                String::new()
            } else {
                format!(
                    "; no port state readable on {} (ports/N/state): not a working device, or an incomplete tree",
                    silent.join(", ")
                )
            },
        (!silent.is_empty()).then(|| {
            "check that the driver finished loading (dmesg, rdma dev) and that the sysfs tree is whole".to_string()
        }),
    ));
    let qos = rocewatch_qos::observe::observe(
        &rocewatch_qos::observe::config_plugins(&agent.registry),
        agent.metrics(),
    )
    .await
    .unwrap_or_default();
    let addrs = if live {
        interface_addresses().ok()
    } else {
        None
    };
    let mut netdevs: Vec<String> = Vec::new();
    let mut capture_if: Option<String> = None;
    let mut mtus: BTreeMap<String, u32> = BTreeMap::new();
    for d in &inv.devices {
        for p in &d.ports {
            let subject = format!("{}/{}", d.name, p.port);
            out.push(port_check(&subject, p));
            let ethernet = p.link_layer.as_deref() == Some("Ethernet");
            if !ethernet {
                out.push(check(
                    "netdev",
                    &subject,
                    Status::Info,
                    format!(
                        "link layer {}: not RoCE; the RoCE checks do not apply",
                        p.link_layer.as_deref().unwrap_or("unknown")
                    ),
                    None,
                ));
                continue;
            }
            let Some(nd) = p.netdev.clone() else {
                out.push(check(
                    "netdev",
                    &subject,
                    Status::Fail,
                    "no netdev for this RoCE port (ibdev2netdev shows none)",
                    Some(format!("check that the Ethernet driver of {} is loaded and its netdev exists (ip link)", d.name)),
                ));
                continue;
            };
            netdevs.push(nd.clone());
            let up = p.netdev_operstate.as_deref() == Some("up");
            out.push(check(
                "netdev",
                &subject,
                if up { Status::Pass } else { Status::Fail },
                format!(
                    "{nd} (operstate {}, MTU {})",
                    p.netdev_operstate.as_deref().unwrap_or("unknown"),
                    p.netdev_mtu.map_or("unknown".into(), |m| m.to_string())
                ),
                (!up).then(|| format!("ip link set {} up", word(&nd))),
            ));
            if let Some(m) = p.netdev_mtu {
                mtus.insert(nd.clone(), m);
            }
            // The port's IPs: from the live interface, or (fixture trees) from its GIDs.
            let v2: Vec<(IpAddr, u32)> = p
                .gids
                .iter()
                .filter(|g| g.gid_type.as_deref() == Some("RoCE v2"))
                .filter_map(|g| gid_ip(&g.gid).map(|ip| (ip, g.index)))
                .filter(|(ip, _)| !matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80))
                .collect();
            let ips: Vec<IpAddr> = match &addrs {
                Some(a) => a.get(&nd).cloned().unwrap_or_default(),
                None => v2.iter().map(|(ip, _)| *ip).collect(),
            };
            if ips.is_empty() {
                out.push(check(
                    "ip",
                    &subject,
                    Status::Fail,
                    format!("no IP address on {nd}"),
                    Some(format!("ip addr add ADDRESS/PREFIX dev {}", word(&nd))),
                ));
                continue;
            }
            out.push(check(
                "ip",
                &subject,
                if live { Status::Pass } else { Status::Info },
                format!(
                    "{nd}: {}{}",
                    ips.iter()
                        .map(IpAddr::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    if live {
                        ""
                    } else {
                        " (from the GID table: not the live system)"
                    }
                ),
                None,
            ));
            for ip in &ips {
                match v2.iter().find(|(g, _)| g == ip) {
                    Some((_, index)) => out.push(check(
                        "gid",
                        &subject,
                        Status::Pass,
                        format!("RoCE v2 GID index {index} for {ip}"),
                        None,
                    )),
                    None => out.push(check(
                        "gid",
                        &subject,
                        Status::Fail,
                        format!("no RoCE v2 GID for {ip} on {}", d.name),
                        Some(format!(
                            "the address must be on {nd} (or a VLAN of it) for the kernel to add its GID; see show_gids / rdma link; re-add it: ip addr del {ip} dev {w}; ip addr add {ip}/PREFIX dev {w}",
                            w = word(&nd)
                        )),
                    )),
                }
            }
            if capture_if.is_none() && up {
                capture_if = Some(nd.clone());
            }
            out.extend(qos_checks(&qos, &d.name, p.port, &nd, opts.priority));
        }
    }
    // MTU: the RDMA MTU the netdev allows, and the same on every RoCE netdev here.
    let distinct: std::collections::BTreeSet<u32> = mtus.values().copied().collect();
    let listing = mtus
        .iter()
        .map(|(n, m)| {
            format!(
                "{n} {m} (RoCE MTU {})",
                rocewatch_sysfs::parse::rdma_mtu_for(*m).map_or("none".into(), |r| r.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    if distinct.len() > 1 {
        out.push(check(
            "mtu",
            "",
            Status::Warn,
            format!("RoCE netdevs differ: {listing}"),
            Some(format!(
                "use one MTU on every RoCE netdev and end to end (ip link set IF mtu {})",
                distinct.iter().max().unwrap()
            )),
        ));
    } else if !mtus.is_empty() {
        out.push(check("mtu", "", Status::Pass, listing, None));
    }
    if let (Some(peer), Some(nd)) = (&opts.peer, &capture_if) {
        if let Some(m) = mtus.get(nd) {
            out.push(peer_mtu_check(peer, *m, nd));
        }
    }
    // The host's PCI side: each NIC's link, and where GPUs sit from NICs.
    let sys = rocewatch_sysfs::SysRoot::new(&root);
    out.extend(super::linklayer::link_layer_checks(
        &sys,
        &inv,
        opts.link_layer,
    ));
    out.extend(super::pcie::link_checks(&sys, &inv));
    let (gpus, nics) = (super::gpu::gpus(&sys), super::gpu::nics(&sys, &inv));
    out.extend(super::gpu::gpu_checks(&sys, &gpus, &nics));
    if !gpus.is_empty() && !nics.is_empty() {
        out.extend(super::acs::acs_checks(&sys, &gpus, &nics));
    }
    // Interrupts against the NIC's node: the proc tree must go with the sysfs tree.
    let proc_live = opts.procfs_root == Path::new("/proc");
    if live == proc_live {
        out.extend(super::numa::numa_checks(&sys, &opts.procfs_root, &inv));
    } else {
        out.push(check(
            "numa",
            "",
            Status::Skip,
            format!(
                "{} and {} are not the same host's: give --procfs-root with --sysfs-root",
                root.display(),
                opts.procfs_root.display()
            ),
            None,
        ));
    }
    // Multi-rail: live rtnetlink and sysctls of this network namespace, for the netdevs
    // the inventory names (a fixture tree's too, when those netdevs exist here).
    out.extend(super::multirail::multirail_checks(
        &inv,
        &root,
        &opts.procfs_root,
    ));
    // The host: firewall, interrupts (live only).
    if live {
        out.extend(firewall_checks());
        out.extend(irq_checks(Path::new(&root), &opts.procfs_root, &netdevs));
    } else {
        for c in ["firewall", "interrupts"] {
            out.push(check(
                c,
                "",
                Status::Skip,
                format!(
                    "{} is not the live /sys: this host's {c} say nothing about that tree",
                    root.display()
                ),
                None,
            ));
        }
    }
    // Driver and firmware: devices of one driver should run one firmware.
    let proc_root = (live == proc_live).then_some(opts.procfs_root.as_path());
    out.extend(super::driver::driver_checks(&sys, proc_root, &inv));
    out.extend(super::driver::firmware_checks(&inv));
    // The kernel log's driver messages over --log-window.
    out.extend(kernel_log_checks(
        &root,
        &opts.kernel_log,
        opts.log_window,
        rocewatch_klog::text::Clock::now(),
    ));
    // Live counters over the window.
    let (first, e1) = agent.collect_all().await;
    tokio::time::sleep(opts.window).await;
    let (second, e2) = agent.collect_all().await;
    let failed: Vec<String> = e1.iter().chain(&e2).map(ToString::to_string).collect();
    out.extend(counters_checks(&first, &second, &failed, opts.window));
    // The probe.
    match &opts.peer {
        None => out.push(check("probe", "", Status::Skip, "no --peer given", None)),
        Some(peer) => out.push(probe_check(agent, peer).await),
    }
    if let (Some(peer), true) = (&opts.peer, opts.bandwidth) {
        out.push(bandwidth_check(agent, peer).await);
    }
    // Capturing.
    match &capture_if {
        Some(nd) => {
            let now = vlan_offload(nd);
            let restore = now.clone().unwrap_or_else(|| "on".into());
            let (restore, w) = (word(&restore), word(nd));
            out.push(check(
                "capture",
                nd,
                Status::Info,
                format!(
                    "capture RoCE v2 on {w} (the RDMA port's netdev): tcpdump -i {w} -nn udp port {ROCE_PORT}; NIC offloads can hide VLAN tags and RDMA traffic: ethtool -K {w} rx-vlan-offload off before, and ethtool -K {w} rx-vlan-offload {restore} after{}",
                    if now.is_some() { " (as it is now)" } else { " (its state now could not be read; check ethtool -k)" }
                ),
                None,
            ));
        }
        None => out.push(check(
            "capture",
            "",
            Status::Skip,
            "no RoCE port with a netdev that is up",
            None,
        )),
    }
    // An application's settings against what this host needs.
    if let Some(env) = &opts.env {
        let host = super::appenv::compute(
            super::appenv::ports(&inv, &qos, None),
            super::appenv::desired_tos(&opts.qos, &qos),
            super::appenv::For::All,
            addrs.as_ref(),
        );
        out.extend(super::appenv_check::env_checks(
            &host,
            &inv,
            &qos,
            env,
            addrs.as_ref(),
        ));
    }
    out
}

pub(super) fn port_check(subject: &str, p: &Port) -> Check {
    let st = p.state.as_deref().unwrap_or("unknown");
    let ph = p.phys_state.as_deref().unwrap_or("unknown");
    if p.is_up() {
        check(
            "port",
            subject,
            Status::Pass,
            format!(
                "{st}, {ph}, {}",
                p.rate.as_deref().unwrap_or("rate unknown")
            ),
            None,
        )
    } else {
        check(
            "port",
            subject,
            Status::Fail,
            format!("state {st}, physical state {ph}"),
            Some(match &p.netdev {
                Some(nd) => format!("ip link set {w} up; check the cable, the optics and the switch port (ethtool {w})", w = word(nd)),
                None => "check the cable, the optics and the switch port (ibstat)".into(),
            }),
        )
    }
}

pub(super) async fn probe_check(agent: &Arc<App>, peer: &str) -> Check {
    let Some(entry) = agent.probe_plugin() else {
        return check(
            "probe",
            peer,
            Status::Skip,
            "the probe-verbs plugin is not loaded (rocewatch plugins says why)",
            None,
        );
    };
    let target = rocewatch_plugin_api::ProbeTarget {
        peer: peer.into(),
        size: 64,
        timeout_ms: 2000,
    };
    match rocewatch_probes::probe_once(&entry, target, agent.metrics()).await {
        Ok(r) => match r.outcome {
            rocewatch_plugin_api::ProbeOutcome::Ok { rtt_seconds } => check(
                "probe",
                peer,
                Status::Pass,
                format!("RC send/receive answered in {:.1} us", rtt_seconds * 1e6),
                None,
            ),
            rocewatch_plugin_api::ProbeOutcome::Timeout => check(
                "probe",
                peer,
                Status::Fail,
                "connected, but no answer within 2 s",
                Some("RoCE packets are lost on the path: check the firewall on both hosts (UDP 4791), PFC/ECN, and the switch".into()),
            ),
            rocewatch_plugin_api::ProbeOutcome::ConnectFailed { cause } => check(
                "probe",
                peer,
                Status::Fail,
                format!("no connection: {cause}"),
                Some(format!("the peer must run `rocewatch probe --serve` (or the agent with [probes]); check that {peer} is reachable over the RDMA netdev and UDP 4791 is not dropped")),
            ),
        },
        Err(e) => check("probe", peer, Status::Fail, e.to_string(), None),
    }
}
