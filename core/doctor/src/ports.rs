//! The guide's first topics: the RDMA devices, then per port its state, its netdev, the
//! netdev's IP, the RoCE v2 GID for that IP and the port's QoS; and the RoCE netdevs'
//! MTU.

use std::net::IpAddr;

use rocewatch_plugin_api::{Device, Port};
use rocewatch_sysfs::verdict::{judge_port_state, Weight};

use super::check::{check, Check, Status};
use super::host::{Host, RocePort};
use super::mtu::peer_mtu_check;
use super::qos::qos_checks;
use crate::shell::word_on_one_line as word;

/// The check when no RDMA device is there (and nothing else is checked).
pub(super) fn no_devices(root: &std::path::Path) -> Check {
    check(
        "devices",
        "",
        Status::Fail,
        format!("no RDMA devices under {}/class/infiniband", root.display()),
        Some("load the NIC's RDMA driver (modprobe mlx5_ib, irdma, bnxt_re); for soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IF".into()),
    )
}

/// The devices, their drivers and firmware; a device whose ports say nothing (no state
/// read) is no working device.
pub(super) fn devices(h: &Host) -> Vec<Check> {
    if h.inv.devices.is_empty() {
        return vec![no_devices(&h.root)];
    }
    let silent: Vec<&str> = h
        .inv
        .devices
        .iter()
        .filter(|d| !d.ports.iter().any(|p| p.state.is_some()))
        .map(|d| d.name.as_str())
        .collect();
    vec![check(
        "devices",
        "",
        if silent.is_empty() {
            Status::Pass
        } else {
            Status::Warn
        },
        h.inv
            .devices
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
    )]
}

/// Per port, in order: its state, its netdev, the netdev's IP, the GID for each IP and
/// the port's QoS (the RoCE checks for an Ethernet port with a netdev and an address).
pub(super) fn ports(h: &Host) -> Vec<Check> {
    let mut out = Vec::new();
    for d in &h.inv.devices {
        for p in &d.ports {
            let subject = format!("{}/{}", d.name, p.port);
            out.push(port_check(&subject, p));
            out.extend(roce_port_checks(h, d, p, &subject));
        }
    }
    out
}

/// The RoCE checks of one port: netdev, IP, GID, QoS.
fn roce_port_checks(h: &Host, d: &Device, p: &Port, subject: &str) -> Vec<Check> {
    if p.link_layer.as_deref() != Some("Ethernet") {
        return vec![check(
            "netdev",
            subject,
            Status::Info,
            format!(
                "link layer {}: not RoCE; the RoCE checks do not apply",
                p.link_layer.as_deref().unwrap_or("unknown")
            ),
            None,
        )];
    }
    let Some(nd) = p.netdev.as_deref() else {
        return vec![check(
            "netdev",
            subject,
            Status::Fail,
            "no netdev for this RoCE port (ibdev2netdev shows none)",
            Some(format!(
                "check that the Ethernet driver of {} is loaded and its netdev exists (ip link)",
                d.name
            )),
        )];
    };
    let up = p.netdev_operstate.as_deref() == Some("up");
    let mut out = vec![check(
        "netdev",
        subject,
        if up { Status::Pass } else { Status::Fail },
        format!(
            "{nd} (operstate {}, MTU {})",
            p.netdev_operstate.as_deref().unwrap_or("unknown"),
            p.netdev_mtu.map_or("unknown".into(), |m| m.to_string())
        ),
        (!up).then(|| format!("ip link set {} up", word(nd))),
    )];
    let rp = RocePort {
        device: d,
        port: p,
        netdev: nd,
    };
    let ips = h.ips(&rp);
    if ips.is_empty() {
        out.push(check(
            "ip",
            subject,
            Status::Fail,
            format!("no IP address on {nd}"),
            Some(format!("ip addr add ADDRESS/PREFIX dev {}", word(nd))),
        ));
        return out;
    }
    out.push(ip_check(h.live, subject, nd, &ips));
    out.extend(gid_checks(&rp, subject, &ips));
    out.extend(qos_checks(&h.qos, &d.name, p.port, nd, h.opts.priority));
    out.push(super::cm_path::cm_tos_check(
        &h.qos,
        &d.name,
        p.port,
        h.opts.priority,
        super::appenv::desired_tos(&h.opts.qos, &h.qos),
    ));
    out.push(super::buffers::buffer_check(
        &h.qos,
        &d.name,
        p.port,
        nd,
        &super::buffers::Link {
            speed_mbps: p.rate_bps.map(|b| b / 1_000_000),
            mtu: p.netdev_mtu,
            cable_m: h.opts.cable_length,
        },
    ));
    out.push(super::dcbx::dcbx_peer_check(
        &h.qos,
        &d.name,
        p.port,
        nd,
        h.opts.priority,
    ));
    out
}

/// The netdev's addresses (live), or those its GIDs carry (a tree).
fn ip_check(live: bool, subject: &str, nd: &str, ips: &[IpAddr]) -> Check {
    check(
        "ip",
        subject,
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
    )
}

/// A RoCE v2 GID for each of the netdev's addresses.
fn gid_checks(p: &RocePort, subject: &str, ips: &[IpAddr]) -> Vec<Check> {
    let v2 = Host::v2_gids(p.port);
    let nd = p.netdev;
    ips.iter()
        .map(|ip| match v2.iter().find(|(g, _)| g == ip) {
            Some((_, index)) => check(
                "gid",
                subject,
                Status::Pass,
                format!("RoCE v2 GID index {index} for {ip}"),
                None,
            ),
            None => check(
                "gid",
                subject,
                Status::Fail,
                format!("no RoCE v2 GID for {ip} on {}", p.device.name),
                Some(format!(
                    "the address must be on {nd} (or a VLAN of it) for the kernel to add its GID; see show_gids / rdma link; re-add it: ip addr del {ip} dev {w}; ip addr add {ip}/PREFIX dev {w}",
                    w = word(nd)
                )),
            ),
        })
        .collect()
}

/// A port's state: active and linked up, or what to look at. The verdict is
/// `rocewatch_sysfs::verdict`'s, the one `health` gives.
pub(super) fn port_check(subject: &str, p: &Port) -> Check {
    let v = judge_port_state(p);
    match v.weight() {
        Weight::Fine => check(
            "port",
            subject,
            Status::Pass,
            format!(
                "{}, {}, {}",
                v.state.as_deref().unwrap_or_default(),
                v.phys_state.as_deref().unwrap_or_default(),
                p.rate.as_deref().unwrap_or("rate unknown")
            ),
            None,
        ),
        Weight::CannotTell => check(
            "port",
            subject,
            Status::Skip,
            format!("{}: whether it is up cannot be told", v.text()),
            None,
        ),
        _ => check(
            "port",
            subject,
            Status::Fail,
            v.text(),
            Some(match &p.netdev {
                Some(nd) => format!("ip link set {w} up; check the cable, the optics and the switch port (ethtool {w})", w = word(nd)),
                None => "check the cable, the optics and the switch port (ibstat)".into(),
            }),
        ),
    }
}

/// MTU: the RDMA MTU the netdev allows, the same on every RoCE netdev here, and the path
/// MTU to the peer.
pub(super) fn mtu(h: &Host) -> Vec<Check> {
    let mtus = h.mtus();
    let mut out = Vec::new();
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
    if let (Some(peer), Some(nd)) = (&h.opts.peer, h.capture_netdev()) {
        if let Some(m) = mtus.get(nd) {
            out.push(peer_mtu_check(peer, *m, nd));
        }
    }
    out
}
