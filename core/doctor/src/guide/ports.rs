//! The guide's first topics: the RDMA devices, then per port its state, its netdev, the
//! netdev's IP, the RoCE v2 GID for that IP and the port's QoS; and the RoCE netdevs'
//! MTU.

use std::net::IpAddr;

use rocewatch_plugin_api::{Device, Port};
use rocewatch_sysfs::verdict::{judge_mtus, judge_port_state, GidVerdict, MtuVerdict, Weight};

use super::host::{Host, RocePort};
use crate::check::{check, Check, Status};
use crate::checks::mtu::peer_mtu_check;
use crate::checks::qos::qos_checks;
use crate::shell::word_on_one_line as word;

/// The check when no RDMA device is there (and nothing else is checked).
pub(crate) fn no_devices(root: &std::path::Path) -> Check {
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
pub(crate) fn devices(h: &Host) -> Vec<Check> {
    if h.inv.devices.is_empty() {
        return vec![no_devices(&h.root)];
    }
    let mut out = vec![present_devices(h)];
    let missing = rocewatch_sysfs::verdict::nics::missing_nics(&h.sys, &h.rails);
    out.extend(crate::checks::rails::rail_checks(&h.rails, &missing));
    out
}

/// The devices present, and those whose ports say nothing.
fn present_devices(h: &Host) -> Check {
    let silent: Vec<&str> = h
        .inv
        .devices
        .iter()
        .filter(|d| !d.ports.iter().any(|p| p.state.is_some()))
        .map(|d| d.name.as_str())
        .collect();
    check(
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
    )
}

/// Per port, in order: its state, its netdev, the netdev's IP, the GID for each IP and
/// the port's QoS (the RoCE checks for an Ethernet port with a netdev and an address).
pub(crate) fn ports(h: &Host) -> Vec<Check> {
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
    // The verdict health's `gid` gives.
    let v = h.gid_verdict(&rp);
    let ips = v.ips();
    if ips.is_empty() {
        out.push(no_address_check(&v, subject));
        return out;
    }
    out.push(ip_check(h.live, subject, &v));
    out.extend(gid_checks(&v, subject));
    out.extend(qos_checks(&h.qos, &d.name, p.port, nd, h.opts.priority));
    out.push(crate::checks::cm_path::cm_tos_check(
        &h.qos,
        &d.name,
        p.port,
        h.opts.priority,
        crate::appenv::desired_tos(&h.opts.qos, &h.qos),
    ));
    out.push(crate::checks::buffers::buffer_check(
        &h.qos,
        &d.name,
        p.port,
        nd,
        &crate::checks::buffers::Link {
            speed_mbps: p.rate_bps.map(|b| b / 1_000_000),
            mtu: p.netdev_mtu,
            cable_m: h.opts.cable_length,
        },
    ));
    out.push(crate::checks::dcbx::dcbx_peer_check(
        &h.qos,
        &d.name,
        p.port,
        nd,
        h.opts.priority,
    ));
    out
}

/// The netdev's addresses (live), or those its GIDs carry (a tree, or a netdev whose
/// addresses are on a VLAN or master above it).
fn ip_check(live: bool, subject: &str, v: &GidVerdict) -> Check {
    let ips = v
        .ips()
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let (status, whence) = match &v.addresses {
        Some(a) if !a.is_empty() => (Status::Pass, ""),
        Some(_) => (
            Status::Info,
            " (its RoCE v2 GIDs': the addresses are on a device above it)",
        ),
        None if live => (Status::Info, " (from the GID table)"),
        None => (Status::Info, " (from the GID table: not the live system)"),
    };
    check(
        "ip",
        subject,
        status,
        format!("{}: {ips}{whence}", v.netdev),
        None,
    )
}

/// A port with no address and no RoCE v2 GID holding one: a fault unless something
/// explains it (a warning then).
fn no_address_check(v: &GidVerdict, subject: &str) -> Check {
    let nd = &v.netdev;
    match v.weight() {
        Weight::Note => check("ip", subject, Status::Warn, v.text(), None),
        _ => check(
            "ip",
            subject,
            Status::Fail,
            v.text(),
            Some(format!("ip addr add ADDRESS/PREFIX dev {}", word(nd))),
        ),
    }
}

/// A RoCE v2 GID for each of the netdev's addresses.
fn gid_checks(v: &GidVerdict, subject: &str) -> Vec<Check> {
    let nd = &v.netdev;
    v.ips()
        .iter()
        .map(|ip| match v.found_text(ip) {
            Some(found) => check("gid", subject, Status::Pass, found, None),
            None => check(
                "gid",
                subject,
                Status::Fail,
                format!("no RoCE v2 GID for {ip}"),
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
pub(crate) fn port_check(subject: &str, p: &Port) -> Check {
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

/// MTU: the RoCE MTU each RoCE netdev gives, held against the others' and against the one
/// `[health] min_mtu` gives (`health`'s verdict), and the path MTU to the peer.
pub(crate) fn mtu(h: &Host) -> Vec<Check> {
    let mtus = h.mtus();
    let netdevs: Vec<(&str, Option<u32>)> = mtus.iter().map(|(n, m)| (n.as_str(), *m)).collect();
    let verdicts = judge_mtus(&netdevs, h.opts.min_mtu);
    let mut out = Vec::new();
    if verdicts.iter().all(|v| v.weight() == Weight::Fine) {
        if !verdicts.is_empty() {
            let listing = verdicts
                .iter()
                .map(|v| format!("{} {}", v.netdev, v.text().trim_start_matches("MTU ")))
                .collect::<Vec<_>>()
                .join(", ");
            out.push(check("mtu", "", Status::Pass, listing, None));
        }
    } else {
        out.extend(verdicts.iter().map(mtu_check));
    }
    if let (Some(peer), Some(nd)) = (&h.opts.peer, h.capture_netdev()) {
        if let Some(Some(m)) = mtus.get(nd) {
            out.push(peer_mtu_check(peer, *m, nd));
        }
    }
    out
}

/// One RoCE netdev's MTU verdict, where not every one is fine.
fn mtu_check(v: &MtuVerdict) -> Check {
    let w = word(&v.netdev);
    let (status, fix) = match v.weight() {
        Weight::Fine => (Status::Pass, None),
        Weight::Note => (Status::Warn, v.other.as_ref().map(|(_, o)| {
            format!("where IP traffic should see one MTU too: ip link set {w} mtu {o}")
        })),
        Weight::CannotTell | Weight::NotApplicable => (Status::Skip, None),
        Weight::Fault => (Status::Fail, Some(match v.wanted() {
            Some(m) => format!(
                "use one MTU on every RoCE netdev and end to end (switch ports, peers): ip link set {w} mtu {m}"
            ),
            None => format!("ip link set {w} mtu 1500 (at least 352 leaves room for RoCE)"),
        })),
    };
    check("mtu", &v.netdev, status, v.text(), fix)
}
