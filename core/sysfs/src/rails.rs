//! The rail order: the RDMA ports of an inventory as applications (NCCL, UCX, Open MPI)
//! see them, devices by name and each device's ports by number, with the RoCE v2 GID of
//! the netdev's IPv4 address and the RoCE ToS the QoS state read. `rocewatch env` lists
//! them in this order, and the fleet and preflight rank a host's NICs by it.

use std::net::{IpAddr, Ipv4Addr};

use rocewatch_plugin_api::{Inventory, QosState, Setting};
use serde::Serialize;

use crate::gid::gid_ip;

/// One RDMA port as an application sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortEnv {
    pub device: String,
    pub port: u32,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: String,
    /// `ACTIVE`, `DOWN`...
    pub state: String,
    pub up: bool,
    pub netdev: Option<String>,
    /// The index of the RoCE v2 GID that carries the netdev's IPv4 address (RoCE only).
    pub gid_index: Option<u32>,
    pub gid: Option<String>,
    pub ipv4: Option<Ipv4Addr>,
    /// The netdev that address is on (a VLAN netdev's, when the GID is the VLAN's).
    pub ip_netdev: Option<String>,
    /// The RoCE traffic class (ToS) the port's RDMA CM default says, when read.
    pub tos: Option<u8>,
}

impl PortEnv {
    pub fn name(&self) -> String {
        format!("{}:{}", self.device, self.port)
    }

    pub fn roce(&self) -> bool {
        self.link_layer == "Ethernet"
    }
}

/// The RoCE v2 GID index of a port: the lowest index whose GID is RoCE v2 and carries an
/// IPv4 address, on the port's own netdev when one does (a VLAN netdev's GIDs come after).
fn v2_ipv4_gid(p: &rocewatch_plugin_api::Port) -> Option<(u32, String, Ipv4Addr, Option<String>)> {
    let candidates = p.gids.iter().filter_map(|g| {
        let v2 = g.gid_type.as_deref() == Some("RoCE v2");
        match (v2, gid_ip(&g.gid)) {
            (true, Some(IpAddr::V4(ip))) => Some((g, ip)),
            _ => None,
        }
    });
    let mut best: Option<(&rocewatch_plugin_api::Gid, Ipv4Addr)> = None;
    for (g, ip) in candidates {
        let own = p.netdev.is_some() && g.netdev == p.netdev;
        let better = match best {
            None => true,
            Some((b, _)) => {
                let b_own = p.netdev.is_some() && b.netdev == p.netdev;
                (own && !b_own) || (own == b_own && g.index < b.index)
            }
        };
        if better {
            best = Some((g, ip));
        }
    }
    best.map(|(g, ip)| (g.index, g.gid.clone(), ip, g.netdev.clone()))
}

/// A setting's value, when it was read.
pub fn value(s: Option<&Setting>) -> Option<&str> {
    match s {
        Some(Setting::Value(v)) => Some(v.as_str()),
        _ => None,
    }
}

/// The ports of `inv` that `device` (a glob on the device name) selects, as applications
/// see them, with the RoCE ToS read from `qos`.
pub fn ports(
    inv: &Inventory,
    qos: &[QosState],
    device: Option<&globset::GlobMatcher>,
) -> Vec<PortEnv> {
    let mut out = Vec::new();
    for d in &inv.devices {
        if device.is_some_and(|g| !g.is_match(&d.name)) {
            continue;
        }
        for p in &d.ports {
            let link_layer = p.link_layer.clone().unwrap_or_else(|| "unknown".into());
            let gid = if link_layer == "Ethernet" {
                v2_ipv4_gid(p)
            } else {
                None
            };
            let tos = qos
                .iter()
                .find(|s| s.device == d.name && s.port == p.port)
                .and_then(|s| value(s.settings.get("roce_tos")))
                .and_then(|v| v.trim().parse::<u8>().ok());
            out.push(PortEnv {
                device: d.name.clone(),
                port: p.port,
                link_layer,
                state: p.state.clone().unwrap_or_else(|| "unknown".into()),
                up: p.is_up(),
                netdev: p.netdev.clone(),
                gid_index: gid.as_ref().map(|g| g.0),
                gid: gid.as_ref().map(|g| g.1.clone()),
                ipv4: gid.as_ref().map(|g| g.2),
                ip_netdev: gid.and_then(|g| g.3).or_else(|| p.netdev.clone()),
                tos,
            });
        }
    }
    out
}
