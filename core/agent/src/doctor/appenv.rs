//! What an application (NCCL, UCX, Open MPI) must be told on this host to take the RDMA
//! path, computed from discovery and the QoS state: the ACTIVE ports, the GID index that
//! holds the RoCE v2 GID of the netdev's IPv4 address, the traffic class that puts RDMA on
//! the lossless priority, the interface for sockets. `rocewatch env` prints it;
//! `rocewatch doctor --env` compares an application's settings with it (appenv_check).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use rocewatch_plugin_api::{Inventory, QosState, Setting};
use serde::Serialize;

use super::host::gid_ip;

/// Which application's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum For {
    Nccl,
    Ucx,
    Openmpi,
    All,
}

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

/// What this host needs, with what could not be decided.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HostEnv {
    pub ports: Vec<PortEnv>,
    /// Name → value, in the order printed.
    pub variables: Vec<(String, String)>,
    pub warnings: Vec<String>,
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
pub(super) fn value(s: Option<&Setting>) -> Option<&str> {
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

/// The RoCE ToS the QoS configuration's `[[qos.desired]]` asks of any of these ports.
pub fn desired_tos(cfg: &crate::qos::QosConfig, qos: &[QosState]) -> Option<u8> {
    qos.iter().find_map(|st| {
        crate::qos::desired_for(cfg, st)
            .get("roce_tos")
            .and_then(|v| v.trim().parse().ok())
    })
}

/// The most common value among `values` (ties: the smallest), and whether they differ.
fn consensus<T: Ord + Copy>(values: impl Iterator<Item = T>) -> Option<(T, bool)> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    let differ = counts.len() > 1;
    let best = counts
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(v, _)| *v)?;
    Some((best, differ))
}

/// What an application on this host needs. `desired_tos` is the RoCE ToS the QoS
/// configuration asks for, used when no port's ToS could be read.
pub fn compute(
    ports: Vec<PortEnv>,
    desired_tos: Option<u8>,
    target: For,
    addrs: Option<&BTreeMap<String, Vec<IpAddr>>>,
) -> HostEnv {
    let mut warnings = Vec::new();
    for p in ports.iter().filter(|p| !p.up) {
        warnings.push(format!(
            "{}: port is {} (not ACTIVE/LinkUp): left out",
            p.name(),
            p.state
        ));
    }
    let active: Vec<&PortEnv> = ports.iter().filter(|p| p.up).collect();
    if active.is_empty() {
        warnings.push("no ACTIVE RDMA port: applications would fall back to TCP".into());
    }
    let roce: Vec<&PortEnv> = active.iter().copied().filter(|p| p.roce()).collect();
    for p in roce.iter().filter(|p| p.gid_index.is_none()) {
        warnings.push(format!(
            "{}: no RoCE v2 GID with an IPv4 address{}: configure an address on the netdev (the kernel adds the GID)",
            p.name(),
            p.netdev.as_deref().map(|n| format!(" on {n}")).unwrap_or_default()
        ));
    }
    let gid_index = consensus(roce.iter().filter_map(|p| p.gid_index));
    if let Some((index, true)) = gid_index {
        for p in roce
            .iter()
            .filter(|p| p.gid_index.is_some_and(|i| i != index))
        {
            warnings.push(format!(
                "{}: its RoCE v2 IPv4 GID is at index {}, not {index} like the other ports: one NCCL_IB_GID_INDEX cannot fit both; with NCCL 2.21 or later leave it unset and set NCCL_IB_ROCE_VERSION_NUM=2 and NCCL_IB_ADDR_FAMILY=AF_INET (it then picks per port), or add the same address layout on every port",
                p.name(),
                p.gid_index.unwrap_or_default()
            ));
        }
    }
    let read_tos = consensus(roce.iter().filter_map(|p| p.tos));
    if let Some((tos, true)) = read_tos {
        for p in roce.iter().filter(|p| p.tos.is_some_and(|t| t != tos)) {
            warnings.push(format!(
                "{}: RoCE ToS {} differs from the other ports' {tos}",
                p.name(),
                p.tos.unwrap_or_default()
            ));
        }
    }
    // A ToS of 0 read from configfs is the kernel's default, not a choice: the desired
    // state says what is meant, when there is one.
    let tc = match (read_tos.map(|t| t.0), desired_tos) {
        (Some(t), _) if t != 0 => Some(t),
        (_, Some(d)) => Some(d),
        (t, None) => t,
    };
    if !roce.is_empty() && tc.unwrap_or(0) == 0 {
        warnings.push("no RoCE traffic class configured (ToS 0): RDMA traffic goes out on priority 0, usually not the lossless one; set the RDMA CM default ToS (rocewatch qos apply with roce_tos, e.g. 106 for DSCP 26) and the same NCCL_IB_TC".into());
    }
    let hca = active
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(",");
    // Sockets: the netdevs with an address. RoCE: the GID table tells (the VLAN netdev
    // when the address is on one); InfiniBand: the IPoIB netdev, whose address the GID
    // table does not carry: on the live host its addresses say, on a tree it is assumed.
    let socket_ifs: Vec<String> = active
        .iter()
        .filter_map(|p| {
            if p.roce() {
                p.ipv4.and(p.ip_netdev.clone())
            } else {
                let nd = p.netdev.clone()?;
                match addrs {
                    Some(a) if a.get(&nd).is_none_or(|ips| ips.is_empty()) => None,
                    _ => Some(nd),
                }
            }
        })
        .collect();
    if active.iter().any(|p| p.roce()) && active.iter().any(|p| !p.roce()) {
        warnings.push("both InfiniBand and RoCE ports are ACTIVE: the GID index and traffic class apply to the RoCE ports only; give each job the ports of one fabric (--device)".into());
    }
    for p in active.iter().filter(|p| !p.roce()) {
        if let (Some(nd), Some(a)) = (&p.netdev, addrs) {
            if a.get(nd).is_none_or(|ips| ips.is_empty()) {
                warnings.push(format!(
                    "{}: its IPoIB netdev {nd} has no address: NCCL's sockets cannot use it",
                    p.name()
                ));
            }
        }
    }
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| vars.push((k.to_string(), v));
    let nccl = matches!(target, For::Nccl | For::All);
    let ucx = matches!(target, For::Ucx | For::Openmpi | For::All);
    if !active.is_empty() {
        if nccl {
            set("NCCL_IB_HCA", format!("={hca}"));
            if let Some((i, _)) = gid_index {
                set("NCCL_IB_GID_INDEX", i.to_string());
            }
            if let Some(t) = tc.filter(|t| *t != 0 && !roce.is_empty()) {
                set("NCCL_IB_TC", t.to_string());
            }
            if !socket_ifs.is_empty() {
                set("NCCL_SOCKET_IFNAME", format!("={}", socket_ifs.join(",")));
            }
        }
        if ucx {
            set("UCX_NET_DEVICES", hca.clone());
            if let Some((i, _)) = gid_index {
                set("UCX_IB_GID_INDEX", i.to_string());
            }
            if let Some(t) = tc.filter(|t| *t != 0 && !roce.is_empty()) {
                set("UCX_IB_TRAFFIC_CLASS", t.to_string());
            }
        }
        if matches!(target, For::Openmpi | For::All) {
            set("OMPI_MCA_pml", "ucx".into());
            set("OMPI_MCA_btl", "^openib".into());
        }
    }
    HostEnv {
        ports,
        variables: vars,
        warnings,
    }
}

/// A value as a POSIX shell word.
fn quote(v: &str) -> String {
    if v.chars()
        .all(|c| c.is_ascii_alphanumeric() || "=,:^_./-+".contains(c))
    {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', r"'\''"))
    }
}

/// `export NAME=value` lines.
pub fn shell(env: &HostEnv) -> String {
    env.variables
        .iter()
        .map(|(k, v)| format!("export {k}={}\n", quote(v)))
        .collect()
}

/// A Slurm TaskProlog: what it prints as `export NAME=value` is set in the task's
/// environment.
pub fn slurm(env: &HostEnv, host: &str) -> String {
    let mut s = format!(
        "#!/bin/sh\n# Slurm TaskProlog (slurm.conf: TaskProlog=/etc/slurm/rdma-env.sh): each line it prints\n# as \"export NAME=value\" is set in the task's environment.\n# Values of {host}, from `rocewatch env --format slurm`. Nodes that differ (other devices,\n# GID layout) need their own; or let the prolog ask each node itself:\n#   rocewatch env --format shell 2>/dev/null\n"
    );
    for w in &env.warnings {
        s.push_str(&format!("# warning: {w}\n"));
    }
    for (k, v) in &env.variables {
        s.push_str(&format!("echo \"export {k}={}\"\n", quote(v)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(name: &str, up: bool, gid: Option<u32>, tos: Option<u8>) -> PortEnv {
        let (device, port) = name.split_once(':').unwrap();
        PortEnv {
            device: device.into(),
            port: port.parse().unwrap(),
            link_layer: "Ethernet".into(),
            state: if up { "ACTIVE" } else { "DOWN" }.into(),
            up,
            netdev: Some(format!("eth-{device}")),
            ip_netdev: Some(format!("eth-{device}")),
            gid_index: gid,
            gid: gid.map(|_| "::ffff:10.0.0.1".into()),
            ipv4: gid.map(|_| Ipv4Addr::new(10, 0, 0, 1)),
            tos,
        }
    }

    fn var<'a>(e: &'a HostEnv, k: &str) -> Option<&'a str> {
        e.variables
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn active_ports_their_gid_index_and_traffic_class() {
        let e = compute(
            vec![
                port("mlx5_0:1", true, Some(3), Some(106)),
                port("mlx5_1:1", true, Some(3), None),
                port("mlx5_2:1", false, None, None),
            ],
            None,
            For::All,
            None,
        );
        assert_eq!(var(&e, "NCCL_IB_HCA"), Some("=mlx5_0:1,mlx5_1:1"));
        assert_eq!(var(&e, "NCCL_IB_GID_INDEX"), Some("3"));
        assert_eq!(var(&e, "NCCL_IB_TC"), Some("106"));
        assert_eq!(var(&e, "UCX_IB_TRAFFIC_CLASS"), Some("106"));
        assert_eq!(
            var(&e, "NCCL_SOCKET_IFNAME"),
            Some("=eth-mlx5_0,eth-mlx5_1")
        );
        assert_eq!(var(&e, "OMPI_MCA_btl"), Some("^openib"));
        assert!(
            e.warnings
                .iter()
                .any(|w| w.starts_with("mlx5_2:1: port is DOWN")),
            "{:?}",
            e.warnings
        );
        assert!(shell(&e).contains("export OMPI_MCA_btl=^openib\n"));
        assert!(slurm(&e, "h").contains("echo \"export NCCL_IB_GID_INDEX=3\"\n"));
    }

    #[test]
    fn a_port_with_another_gid_index_is_named() {
        let e = compute(
            vec![
                port("a:1", true, Some(3), Some(106)),
                port("b:1", true, Some(3), Some(106)),
                port("c:1", true, Some(5), Some(106)),
            ],
            None,
            For::Nccl,
            None,
        );
        assert_eq!(var(&e, "NCCL_IB_GID_INDEX"), Some("3"));
        assert!(
            e.warnings
                .iter()
                .any(|w| w.starts_with("c:1: its RoCE v2 IPv4 GID is at index 5, not 3")),
            "{:?}",
            e.warnings
        );
        assert_eq!(var(&e, "UCX_NET_DEVICES"), None, "NCCL only");
    }

    #[test]
    fn no_traffic_class_is_a_warning_and_the_desired_one_is_used() {
        let e = compute(
            vec![port("a:1", true, Some(1), Some(0))],
            None,
            For::Nccl,
            None,
        );
        assert_eq!(var(&e, "NCCL_IB_TC"), None);
        assert!(e
            .warnings
            .iter()
            .any(|w| w.contains("no RoCE traffic class")));
        let e = compute(
            vec![port("a:1", true, Some(1), Some(0))],
            Some(106),
            For::Nccl,
            None,
        );
        assert_eq!(var(&e, "NCCL_IB_TC"), Some("106"));
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("=a:1,b:1"), "=a:1,b:1");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
