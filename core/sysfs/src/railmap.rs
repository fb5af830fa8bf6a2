//! The rail map: which rail each RDMA port of this host is on, by identity, never by
//! position, so that a NIC that is gone does not renumber the others. The one reader
//! `rocewatch env`, `rocewatch fleet topology`, preflight, doctor and health take rails
//! from.
//!
//! - With the fleet's topology (this host's rows of `[fleet] topology`, `host,rail,addr,tor`):
//!   a port's rail is the row whose address is on the port, that is carried by one of its
//!   RoCE v2 GIDs (the address probes and tests go to). A row no port carries is a missing
//!   rail; a port no row names has no rail (it is not in the topology).
//! - Without one: the ports in PCI address order, then devices with no PCI function
//!   (soft-RoCE) by name, each device's ports by number; rail k is the k-th. The PCI
//!   address is the slot's (bus numbers are handed to the bridges by the hierarchy), so
//!   it survives another NIC going, where an RDMA device's name does not (`mlx5_<n>`
//!   takes the lowest free index in probe order: with one NIC gone at boot the later
//!   ones take lower names). The map says it was made this way ([`RailsBy::PciOrder`]):
//!   a NIC that is gone shifts the ranks after it, which only a topology prevents.
//!
//! Host-side SR-IOV VFs are not rails: a VF (`physfn` link, [`crate::sriov`]) whose PF
//! is an RDMA device of this inventory too is the hypervisor's, handed to VMs or
//! containers, and shares its PF's cable, so it takes no rank (its PCI address sorts
//! right after its PF's: it would push every later NIC up) and is not a port "without
//! an address of the topology" ([`RailMap::host_vfs`]); a topology row whose address is
//! on one still gives it that rail. A VF whose PF is not in view (inside a VM: no
//! `physfn`; a container given only the VF) is the rail there.

use std::collections::BTreeSet;
use std::net::IpAddr;

use rocewatch_plugin_api::Inventory;
use serde::Serialize;

use crate::gid::routable_v2_gids;
use crate::sriov::{Sriov, VirtFn};
use crate::SysRoot;

/// One row of the topology for this host: its rail and the address on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct RailRow {
    pub rail: usize,
    pub addr: IpAddr,
}

/// How the rails were told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RailsBy {
    /// This host's rows of the fleet topology, matched by address.
    Topology,
    /// No topology: the ports' rank in PCI address order.
    PciOrder,
}

impl RailsBy {
    /// How the map was made, in words for a line of output.
    pub fn words(self) -> &'static str {
        match self {
            RailsBy::Topology => "by the fleet topology's rows (the row whose address is on the port)",
            RailsBy::PciOrder => "by PCI address order (no fleet topology: a NIC that is gone shifts the rails after it)",
        }
    }
}

/// One RDMA port of this host and its rail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RailPort {
    /// `None`: the topology has no row with one of its addresses.
    pub rail: Option<usize>,
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// The addresses its RoCE v2 GIDs carry (link-local ones left out).
    pub addrs: Vec<IpAddr>,
    /// The PCI function of its device (`0000:1c:00.0`); `None` for soft-RoCE.
    pub pci: Option<String>,
    /// ACTIVE/LinkUp.
    pub up: bool,
}

impl RailPort {
    /// `device:port`, as `rocewatch env` names a port.
    pub fn name(&self) -> String {
        format!("{}:{}", self.device, self.port)
    }
}

/// A port of a host-side SR-IOV VF whose PF is a port of this host too: not a rail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostVf {
    #[serde(flatten)]
    pub port: RailPort,
    /// The PF's PCI function (`0000:3b:00.0`).
    pub pf: String,
}

/// The rail map of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RailMap {
    pub by: RailsBy,
    /// The ports with a rail, by rail, then those without one.
    pub ports: Vec<RailPort>,
    /// Rows of the topology no port of this host carries, by rail.
    pub missing: Vec<RailRow>,
    /// Host-side VFs on no rail, in PCI order (not in `ports`).
    pub host_vfs: Vec<HostVf>,
}

impl RailMap {
    /// The port on `rail`, when one is.
    pub fn port_on(&self, rail: usize) -> Option<&RailPort> {
        self.ports.iter().find(|p| p.rail == Some(rail))
    }

    /// Whether `device:port` is a host-side VF left off the rails.
    pub fn is_host_vf(&self, device: &str, port: u32) -> bool {
        self.host_vfs
            .iter()
            .any(|v| v.port.device == device && v.port.port == port)
    }

    /// The rail of `device:port`.
    pub fn rail_of(&self, device: &str, port: u32) -> Option<usize> {
        self.ports
            .iter()
            .find(|p| p.device == device && p.port == port)
            .and_then(|p| p.rail)
    }

    /// The highest rail, of a port or a missing row, plus one (0 when none).
    pub fn width(&self) -> usize {
        let ports = self.ports.iter().filter_map(|p| p.rail);
        let rows = self.missing.iter().map(|r| r.rail);
        ports.chain(rows).max().map_or(0, |r| r + 1)
    }

    /// One line: `rail 0 mlx5_0:1, rail 1 mlx5_1:1, rail 2 missing (10.0.2.1)` and the
    /// ports without a rail, what every command prints the same way.
    pub fn line(&self) -> String {
        let mut parts: Vec<(usize, String)> = self
            .ports
            .iter()
            .filter_map(|p| p.rail.map(|r| (r, format!("rail {r} {}", p.name()))))
            .collect();
        parts.extend(
            self.missing
                .iter()
                .map(|m| (m.rail, format!("rail {} missing ({})", m.rail, m.addr))),
        );
        parts.sort();
        let mut out: Vec<String> = parts.into_iter().map(|(_, s)| s).collect();
        out.extend(
            self.ports
                .iter()
                .filter(|p| p.rail.is_none())
                .map(|p| format!("{} on no rail of the topology", p.name())),
        );
        let mut pfs: Vec<&str> = self.host_vfs.iter().map(|v| v.pf.as_str()).collect();
        pfs.dedup();
        for pf in pfs {
            let vfs: Vec<String> = self
                .host_vfs
                .iter()
                .filter(|v| v.pf == pf)
                .map(|v| v.port.name())
                .collect();
            out.push(format!(
                "not rails (SR-IOV VFs of {pf} on this host): {}",
                vfs.join(" ")
            ));
        }
        if out.is_empty() {
            return "no RDMA port".into();
        }
        out.join(", ")
    }
}

/// The PCI order: functions by address, soft-RoCE after, by name; ports by number.
fn pci_order(a: &RailPort, b: &RailPort) -> std::cmp::Ordering {
    (a.pci.is_none(), &a.pci, &a.device, a.port).cmp(&(b.pci.is_none(), &b.pci, &b.device, b.port))
}

/// The map of `ports` (in any order) and of the host-side VFs `vfs` (each with its PF's
/// address): by `rows` when given, else by PCI address order. A VF takes a row only
/// after every other port (a row on it gives it the rail); the others are `host_vfs`.
pub fn map(mut ports: Vec<RailPort>, mut vfs: Vec<HostVf>, rows: Option<&[RailRow]>) -> RailMap {
    ports.sort_by(pci_order);
    vfs.sort_by(|a, b| pci_order(&a.port, &b.port));
    let Some(rows) = rows else {
        for (k, p) in ports.iter_mut().enumerate() {
            p.rail = Some(k);
        }
        return RailMap {
            by: RailsBy::PciOrder,
            ports,
            missing: Vec::new(),
            host_vfs: vfs,
        };
    };
    let mut rows: Vec<RailRow> = rows.to_vec();
    rows.sort();
    let mut carried = BTreeSet::new();
    let mut take = |p: &RailPort| {
        let rail = rows
            .iter()
            .find(|r| !carried.contains(&r.rail) && p.addrs.contains(&r.addr))
            .map(|r| r.rail);
        carried.extend(rail);
        rail
    };
    for p in &mut ports {
        p.rail = take(p);
    }
    let mut host_vfs = Vec::new();
    for mut v in vfs {
        match take(&v.port) {
            Some(rail) => ports.push(RailPort {
                rail: Some(rail),
                ..v.port
            }),
            None => {
                v.port.rail = None;
                host_vfs.push(v);
            }
        }
    }
    // Stable: ports with a rail by rail, the others keep PCI order after them.
    ports.sort_by_key(|p| p.rail.unwrap_or(usize::MAX));
    let missing = rows
        .into_iter()
        .filter(|r| !carried.contains(&r.rail))
        .collect();
    RailMap {
        by: RailsBy::Topology,
        ports,
        missing,
        host_vfs,
    }
}

impl SysRoot {
    /// The rail map of the inventory's ports (read from this tree: the devices' PCI
    /// functions), by `rows` when the fleet topology gives this host's.
    pub fn rail_map(&self, inv: &Inventory, rows: Option<&[RailRow]>) -> RailMap {
        let mut ports = Vec::new();
        let mut vf_of = Vec::new();
        for d in &inv.devices {
            let pci = self.rdma_pci_function(&d.name).map(|f| f.address);
            // An unreadable SR-IOV file: not known to be a VF.
            let pf = match self.sriov_of_device(&d.name) {
                Ok(Some(Sriov::Vf(VirtFn { pf: Some(pf), .. }))) => Some(pf),
                _ => None,
            };
            for p in &d.ports {
                ports.push(RailPort {
                    rail: None,
                    device: d.name.clone(),
                    port: p.port,
                    netdev: p.netdev.clone(),
                    addrs: routable_v2_gids(p).into_iter().map(|g| g.ip).collect(),
                    pci: pci.clone(),
                    up: p.is_up(),
                });
                vf_of.push(pf.clone());
            }
        }
        // A VF is the host's only when its PF is an RDMA port here as well.
        let functions: BTreeSet<Option<String>> = ports.iter().map(|p| p.pci.clone()).collect();
        let (mut rails, mut vfs) = (Vec::new(), Vec::new());
        for (port, pf) in ports.into_iter().zip(vf_of) {
            match pf {
                Some(pf) if functions.contains(&Some(pf.clone())) => vfs.push(HostVf { port, pf }),
                _ => rails.push(port),
            }
        }
        map(rails, vfs, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testrails::eight_rows as rows;

    /// Eight NICs, `mlx5_<k>` at `0000:<k+1>:00.0` with 10.0.<k>.1, as named at boot.
    fn eight() -> Vec<RailPort> {
        (0..8)
            .map(|k| RailPort {
                rail: None,
                device: format!("mlx5_{k}"),
                port: 1,
                netdev: Some(format!("ens{k}np0")),
                addrs: vec![format!("10.0.{k}.1").parse().unwrap()],
                pci: Some(format!("0000:{:02x}:00.0", k + 1)),
                up: true,
            })
            .collect()
    }

    /// NIC 3 gone from the bus at boot: the kernel names the later ones one lower.
    fn one_gone() -> Vec<RailPort> {
        let mut ports = eight();
        ports.remove(3);
        for (i, p) in ports.iter_mut().enumerate() {
            p.device = format!("mlx5_{i}");
        }
        ports
    }

    fn rails(m: &RailMap) -> Vec<(Option<usize>, Option<String>)> {
        m.ports.iter().map(|p| (p.rail, p.pci.clone())).collect()
    }

    #[test]
    fn a_gone_nic_leaves_the_other_rails_where_the_topology_puts_them() {
        let all = map(eight(), Vec::new(), Some(&rows()));
        let gone = map(one_gone(), Vec::new(), Some(&rows()));
        assert_eq!(gone.by, RailsBy::Topology);
        for p in &gone.ports {
            let before = all.ports.iter().find(|q| q.pci == p.pci).unwrap();
            assert_eq!(p.rail, before.rail, "{} ({:?})", p.name(), p.pci);
        }
        assert_eq!(gone.missing, vec![rows()[3]]);
        assert_eq!(gone.port_on(4).unwrap().device, "mlx5_3");
        assert_eq!(gone.width(), 8);
        assert!(
            gone.line().contains("rail 3 missing (10.0.3.1)"),
            "{}",
            gone.line()
        );
    }

    #[test]
    fn without_a_topology_rails_follow_pci_order_not_names() {
        let mut ports = eight();
        // mlx5_10 sorts before mlx5_2 by name; its PCI address is the last.
        ports[7].device = "mlx5_10".into();
        let m = map(ports, Vec::new(), None);
        assert_eq!(m.by, RailsBy::PciOrder);
        assert_eq!(m.rail_of("mlx5_10", 1), Some(7));
        assert_eq!(m.rail_of("mlx5_2", 1), Some(2));
        assert!(m.missing.is_empty());
        // What PCI order cannot do: the NICs after a gone one move down (said in `by`).
        let gone = map(one_gone(), Vec::new(), None);
        assert_eq!(rails(&gone)[3], (Some(3), Some("0000:05:00.0".into())));
    }

    #[test]
    fn a_port_the_topology_does_not_name_has_no_rail_and_comes_last() {
        let mut ports = eight();
        ports[0].addrs = vec!["192.0.2.9".parse().unwrap()];
        let m = map(ports, Vec::new(), Some(&rows()));
        let last = m.ports.last().unwrap();
        assert_eq!((last.rail, last.device.as_str()), (None, "mlx5_0"));
        assert_eq!(m.missing, vec![rows()[0]]);
        assert!(
            m.line().ends_with("mlx5_0:1 on no rail of the topology"),
            "{}",
            m.line()
        );
        assert_eq!(m.ports[0].rail, Some(1));
    }

    /// The rail map of a fixture tree's inventory, the devices `keep` selects.
    fn fixture_map(case: &str, keep: fn(&str) -> bool, rows: Option<&[RailRow]>) -> RailMap {
        let sys = SysRoot::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures")
                .join(case)
                .join("sys"),
        );
        let filter = crate::inventory::DeviceFilter::new(&Default::default()).unwrap();
        let mut inv = crate::inventory::read_inventory(&sys, &filter).unwrap().0;
        inv.devices.retain(|d| keep(&d.name));
        sys.rail_map(&inv, rows)
    }

    fn named(m: &RailMap) -> Vec<(Option<usize>, String)> {
        m.ports.iter().map(|p| (p.rail, p.name())).collect()
    }

    /// A hypervisor: the PF mlx5_0 and two of its VFs (mlx5_2, mlx5_3) bound on the host.
    /// The VFs sort right after their PF; as rails they would push every later NIC up.
    #[test]
    fn host_side_vfs_are_not_rails() {
        let m = fixture_map("sriov-host", |_| true, None);
        assert_eq!(named(&m), [(Some(0), "mlx5_0:1".to_string())]);
        let vfs: Vec<(String, &str)> = m
            .host_vfs
            .iter()
            .map(|v| (v.port.name(), v.pf.as_str()))
            .collect();
        let pf = "0000:3b:00.0";
        assert_eq!(vfs, [("mlx5_2:1".into(), pf), ("mlx5_3:1".into(), pf)]);
        assert!(m.is_host_vf("mlx5_3", 1) && !m.is_host_vf("mlx5_0", 1));
        assert_eq!(
            m.line(),
            "rail 0 mlx5_0:1, not rails (SR-IOV VFs of 0000:3b:00.0 on this host): mlx5_2:1 mlx5_3:1"
        );
        assert_eq!(m.width(), 1);
    }

    /// With a topology: a row whose address is on a host-side VF gives it the rail (after
    /// every other port); a VF no row names is not a port "on no rail of the topology".
    #[test]
    fn a_topology_row_on_a_host_vf_makes_it_a_rail() {
        let mut ports = eight();
        let vf = |k: usize, addr: &str| HostVf {
            port: RailPort {
                device: format!("mlx5_{}", 8 + k),
                pci: Some(format!("0000:01:00.{}", 2 + k)),
                addrs: addr.parse().into_iter().collect(),
                ..ports[0].clone()
            },
            pf: "0000:01:00.0".into(),
        };
        let vfs = vec![vf(0, "10.0.0.1"), vf(1, "10.0.9.1"), vf(2, "")];
        ports[0].addrs.clear();
        let m = map(ports, vfs, Some(&rows()));
        assert_eq!(m.rail_of("mlx5_8", 1), Some(0), "{}", m.line());
        let left: Vec<&str> = m.host_vfs.iter().map(|v| v.port.device.as_str()).collect();
        assert_eq!(left, ["mlx5_9", "mlx5_10"]);
        assert!(m.missing.is_empty(), "{:?}", m.missing);
        // mlx5_0 lost its address: it is the one port on no rail, the VFs are not.
        let no_rail: Vec<String> = m
            .ports
            .iter()
            .filter(|p| p.rail.is_none())
            .map(RailPort::name)
            .collect();
        assert_eq!(no_rail, ["mlx5_0:1"]);
    }

    /// Inside a VM (no `physfn`: the PF is the host's) the VF is the rail; so is a VF
    /// whose PF has no RDMA device in view (a container given only the VF).
    #[test]
    fn a_vf_without_its_pf_in_view_is_a_rail() {
        let m = fixture_map("sriov-guest", |_| true, None);
        assert_eq!(named(&m), [(Some(0), "mlx5_0:1".to_string())]);
        let m = fixture_map("sriov-host", |d| d == "mlx5_3", None);
        assert_eq!(named(&m), [(Some(0), "mlx5_3:1".to_string())]);
    }

    #[test]
    fn soft_roce_after_pci_functions() {
        let mut ports = eight();
        ports[0].pci = None;
        ports[0].device = "rxe0".into();
        let m = map(ports, Vec::new(), None);
        assert_eq!(m.ports.last().unwrap().device, "rxe0");
        assert_eq!(m.rail_of("rxe0", 1), Some(7));
    }
}
