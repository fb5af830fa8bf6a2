//! Every NIC accounted for, and the PCIe links above it: the verdicts `health` and
//! `doctor` both give on how many RDMA NICs a host should have and on the switch links
//! between a NIC and its root port.
//!
//! What the host says it should have, without configuration:
//! - the rows of this host in the fleet topology no port carries (the rail map's
//!   `missing`, [`crate::railmap`]): the host has fewer rails than the topology says,
//!   which keeps it out of jobs ([`MissingNic::drains`]);
//! - an RDMA-capable PCI function whose driver is bound but which has no RDMA device
//!   (`<function>/infiniband/` empty or absent): class `0x0207` (InfiniBand controller,
//!   any driver: only ever RDMA, so it drains), or `0x0200` (Ethernet) bound to a driver
//!   whose RDMA half is another module ([`rdma_module_of_function`]): only worth a look
//!   unless a topology row is pinned on it (RDMA may be off on purpose: devlink
//!   `enable_rdma`, the RDMA module blacklisted), and not counted at all when another
//!   function of its slot has an RDMA device (a RoCE LAG's `mlx5_bond_0` on PF0 only).
//!   SR-IOV VFs (a `physfn` link) are not counted;
//! - a PCIe bridge whose link is down (`current_link_speed` `Unknown` or
//!   `current_link_width` 0, drivers/pci/pci-sysfs.c, while `max_link_width` says it has
//!   lanes) with no function below it: an empty slot. An empty slot alone is how many
//!   hosts are built (an NVMe bay), so it only tells where a missing rail's NIC was, and
//!   only when that is unambiguous ([`missing_nics`]).
//!
//! The links above a NIC: in the chain from the root port down (`PciFunction::chain`),
//! a PCIe switch is an upstream port and its downstream ports on a virtual bus, and each
//! port reports its own link in its Link Status: a downstream port's is the link below
//! it, an upstream port's the link to the port above. So the physical links are the
//! functions at even places of the chain from the root port (the first switch's upstream
//! port, a second switch's upstream port, ..., the NIC), each against the port above it
//! as its slot; the NIC's own is judged by [`super::PcieLinkVerdict`] already, the others
//! here with the same verdict.

use std::net::IpAddr;

use crate::pci::PciFunction;
use crate::railmap::{RailMap, RailsBy};
use crate::SysRoot;

use super::PcieLinkVerdict;

/// The RDMA module that serves an Ethernet function bound to `driver`, for the drivers
/// whose RDMA half binds to an auxiliary device the Ethernet driver creates (the
/// `auxiliary_device_id` tables of drivers/infiniband/hw/: mlx5 `mlx5_core.rdma`,
/// bnxt_re `bnxt_en.rdma`, irdma `ice.roce`/`ice.iwarp`, mana_ib `mana.rdma`), or to the
/// Ethernet driver's own client interface (qedr on qed, iw_cxgb4 on cxgb4's ULD,
/// hns_roce_hw_v2 on hnae3, ocrdma on be2net, mlx4_ib on mlx4_core). rdma-core's
/// providers (`doctor`'s userspace check) name the same pairs. `i40e` is not here: most
/// of its NICs (X710, XL710, XXV710) have no RDMA at all; see [`rdma_module_of_function`].
pub fn rdma_module_of(driver: &str) -> Option<&'static str> {
    Some(match driver {
        "mlx5_core" => "mlx5_ib",
        "mlx4_core" => "mlx4_ib",
        "bnxt_en" => "bnxt_re",
        "ice" => "irdma",
        "qede" => "qedr",
        "cxgb4" => "iw_cxgb4",
        "mana" => "mana_ib",
        "hns3" => "hns_roce_hw_v2",
        "be2net" => "ocrdma",
        _ => return None,
    })
}

/// The X722 physical functions of i40e (drivers/net/ethernet/intel/i40e/i40e_devids.h:
/// `I40E_DEV_ID_KX_X722` 0x37ce to `I40E_DEV_ID_SFP_I_X722` 0x37d3), the only i40e
/// NICs with iWARP (irdma binds `i40e.iwarp`, the auxiliary device i40e creates when
/// the function reports the iWARP capability).
const I40E_X722: std::ops::RangeInclusive<u16> = 0x37ce..=0x37d3;

/// [`rdma_module_of`] for a function with PCI device ID `device` (`0x37d0`): an i40e
/// function is served by irdma only when it is an X722.
pub fn rdma_module_of_function(driver: &str, device: Option<&str>) -> Option<&'static str> {
    if driver != "i40e" {
        return rdma_module_of(driver);
    }
    let id = u16::from_str_radix(device?.trim().trim_start_matches("0x"), 16).ok()?;
    I40E_X722.contains(&id).then_some("irdma")
}

/// Why a NIC is counted missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// The function is there, its driver bound, and it has no RDMA device.
    NoRdmaDevice {
        driver: String,
        /// The RDMA module to load, when the driver's RDMA half is another module.
        module: Option<&'static str>,
        /// Class `0x0207` (InfiniBand controller): a function that is only ever RDMA.
        infiniband: bool,
    },
    /// Nothing below this bridge, whose link is down: the NIC is gone from the bus.
    SlotDown,
    /// A rail of the topology no port carries while RDMA ports of this host carry no
    /// address of the topology (named here): the address is likely not configured.
    Unaddressed { ports: Vec<String> },
    /// A rail of the topology no port carries, and more places it could have been (the
    /// empty slots' bridges and RDMA-less functions, named here) than rails to pin.
    OneOf(Vec<String>),
    /// A rail of the topology no port carries, and no function or slot to pin it on.
    Unplaced,
}

/// A NIC the host should have and does not show as an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingNic {
    /// Its rail and address in the fleet topology, when a row no port carries is paired
    /// with it.
    pub rail: Option<(usize, IpAddr)>,
    /// The function ([`Gone::NoRdmaDevice`]) or the slot's bridge ([`Gone::SlotDown`]).
    pub pci: Option<String>,
    pub gone: Gone,
}

impl MissingNic {
    /// Whether the host has fewer NICs than it should for sure, which keeps it out of
    /// jobs (health unhealthy, doctor FAIL): a row of the fleet topology no port
    /// carries, or an InfiniBand controller without its RDMA device. An Ethernet
    /// function without one that no row points at is only worth a look (RDMA off on
    /// purpose, a NIC without RDMA, a port of a RoCE LAG).
    pub fn drains(&self) -> bool {
        self.rail.is_some()
            || matches!(
                self.gone,
                Gone::NoRdmaDevice {
                    infiniband: true,
                    ..
                }
            )
    }

    /// What is missing, in words both commands print.
    pub fn evidence(&self) -> String {
        let rail = match &self.rail {
            Some((r, a)) => format!("rail {r} ({a}) of the fleet topology is on no RDMA port"),
            None => "a NIC is missing".to_string(),
        };
        match (&self.gone, &self.pci) {
            (Gone::NoRdmaDevice { driver, .. }, Some(p)) if self.drains() => format!(
                "{rail}: PCI function {p} is bound to {driver} but has no RDMA device"
            ),
            (Gone::NoRdmaDevice { driver, .. }, Some(p)) => format!(
                "PCI function {p} is bound to {driver}, whose NICs can do RDMA, but has no RDMA device (no row of the fleet topology needs it: RDMA may be off on purpose)"
            ),
            (Gone::SlotDown, Some(p)) => format!(
                "{rail}: its slot's bridge {p} has no function below it and its link is down (the NIC is gone from the bus)"
            ),
            (Gone::Unaddressed { ports }, _) => format!(
                "{rail}, and {} carr{} no address of the topology: the address is not configured?",
                ports.join(", "),
                if ports.len() == 1 { "ies" } else { "y" }
            ),
            (Gone::OneOf(places), _) => format!(
                "{rail}: its NIC was in one of: {} (an empty slot or a function without an RDMA device; more of them than rails missing)",
                places.join(", ")
            ),
            _ => format!("{rail}: no PCI function or empty slot found for it"),
        }
    }

    /// The short form for a line of at most 80 bytes, after the rail (the finding's
    /// subject): what is gone and where.
    pub fn headline(&self) -> String {
        match (&self.gone, &self.pci, &self.rail) {
            (Gone::NoRdmaDevice { driver, .. }, Some(p), _) => {
                format!("NIC {p} ({driver}) has no RDMA device")
            }
            (Gone::SlotDown, Some(p), _) => format!("NIC gone from the bus: slot {p} link down"),
            (Gone::Unaddressed { .. }, _, Some((_, a))) => {
                format!("{a} on no port: address not configured?")
            }
            (Gone::OneOf(places), _, Some((_, a))) => {
                format!("no RDMA port carries {a}; one of: {}", places.join(", "))
            }
            (_, _, Some((_, a))) => format!("no RDMA port carries {a}"),
            _ => "a NIC is missing".into(),
        }
    }

    /// What would bring it back, in the order to try.
    pub fn fix(&self) -> String {
        match (&self.gone, &self.pci) {
            (Gone::NoRdmaDevice { driver, module, .. }, Some(p)) => {
                let load = module.map_or(String::new(), |m| format!("modprobe {m}; "));
                format!(
                    "{load}dmesg | grep {p} (why the RDMA device did not register); rebind the function: echo {p} > /sys/bus/pci/drivers/{driver}/unbind; echo {p} > /sys/bus/pci/drivers/{driver}/bind"
                )
            }
            (Gone::SlotDown, Some(p)) => format!(
                "echo 1 > /sys/bus/pci/rescan (enumerates again what trains a link); if /sys/bus/pci/devices/{p}/current_link_width stays 0, power the host off and reseat the NIC (and its riser or cable); a NIC that fell off after a fatal error may need a cold boot, not a reboot"
            ),
            (Gone::Unaddressed { ports }, _) => {
                let addr = self.rail.map_or(String::new(), |(_, a)| format!("{a} "));
                format!(
                    "configure the rail's address {addr}on its port's netdev (netplan, NetworkManager, ifcfg: ip addr show on {}); not a reseat",
                    ports.join(", ")
                )
            }
            (Gone::OneOf(places), _) => format!(
                "lspci -s on each of {} (which one held the NIC?), dmesg (did it fail to probe?); then echo 1 > /sys/bus/pci/rescan",
                places.join(", ")
            ),
            _ => "lspci (is the NIC on the bus?), dmesg (did it fail to probe?), rdma link (does it carry its address?)".into(),
        }
    }
}

/// The PCI functions of the tree's NIC-less slots and RDMA-less RDMA functions, by
/// address.
fn candidates(sys: &SysRoot) -> Vec<MissingNic> {
    let Ok(functions) = sys.pci_functions() else {
        return Vec::new();
    };
    let has_device = |f: &PciFunction| {
        crate::read::list_dir(&f.dir.join("infiniband"))
            .map(|d| !d.is_empty())
            .unwrap_or(false)
    };
    // The slots (domain:bus:device) where a function has an RDMA device: in a RoCE LAG
    // only PF0 has one (`mlx5_bond_0`), and a NIC may have RDMA on one PF only.
    let slot = |a: &str| a.rsplit_once('.').map_or(a, |(s, _)| s).to_string();
    let with_rdma: std::collections::BTreeSet<String> = functions
        .iter()
        .filter(|f| has_device(f))
        .map(|f| slot(&f.address))
        .collect();
    let mut out = Vec::new();
    for f in &functions {
        let class = sys.pci_attr(&f.dir, "class").unwrap_or_default();
        let class = class.trim_start_matches("0x");
        let driver = std::fs::read_link(f.dir.join("driver"))
            .ok()
            .and_then(|l| Some(l.file_name()?.to_string_lossy().into_owned()));
        if class.starts_with("0604") {
            if slot_down(sys, f, &functions) {
                out.push(MissingNic {
                    rail: None,
                    pci: Some(f.address.clone()),
                    gone: Gone::SlotDown,
                });
            }
            continue;
        }
        let Some(driver) = driver else { continue };
        let device = sys.pci_attr(&f.dir, "device");
        let module = rdma_module_of_function(&driver, device.as_deref());
        let infiniband = class.starts_with("0207");
        let ethernet = class.starts_with("0200") && module.is_some();
        let vf = f.dir.join("physfn").symlink_metadata().is_ok();
        let sibling = ethernet && with_rdma.contains(&slot(&f.address));
        if (infiniband || ethernet) && !vf && !sibling && !has_device(f) {
            out.push(MissingNic {
                rail: None,
                pci: Some(f.address.clone()),
                gone: Gone::NoRdmaDevice {
                    driver,
                    module,
                    infiniband,
                },
            });
        }
    }
    out
}

/// A bridge with lanes whose link is down and with no function below it.
fn slot_down(sys: &SysRoot, bridge: &PciFunction, all: &[PciFunction]) -> bool {
    let Ok(l) = sys.pcie_link(&bridge.dir) else {
        return false;
    };
    let lanes = l.max_width.is_some_and(|w| w > 0);
    let down = l.width == Some(0) || (l.speed.is_none() && l.max_speed.is_some());
    let below = all
        .iter()
        .any(|f| f.chain.len() > bridge.chain.len() && f.chain.starts_with(&bridge.chain));
    lanes && down && !below
}

/// The NICs this host should have and does not show: the rails of `map` no port
/// carries, and RDMA functions without an RDMA device beyond those. A missing rail is
/// pinned on a slot or function only when that is unambiguous: as many of those as
/// missing rails (paired in PCI address order, the order rails are cabled in when the
/// topology was made from the host: `fleet topology`) and no port of the host without
/// an address of the topology. A port without one makes the missing rails "address not
/// configured?" (host-side SR-IOV VFs are not such ports: the map keeps them apart,
/// `RailMap::host_vfs`); more places than rails names them all, claiming none.
pub fn missing_nics(sys: &SysRoot, map: &RailMap) -> Vec<MissingNic> {
    let found = candidates(sys);
    let rails: Vec<(usize, IpAddr)> = map.missing.iter().map(|m| (m.rail, m.addr)).collect();
    let unaddressed: Vec<String> = match map.by {
        RailsBy::Topology => map
            .ports
            .iter()
            .filter(|p| p.rail.is_none())
            .map(|p| match &p.netdev {
                Some(n) => format!("{} ({n})", p.name()),
                None => p.name(),
            })
            .collect(),
        RailsBy::PciOrder => Vec::new(),
    };
    if !rails.is_empty() && unaddressed.is_empty() && rails.len() == found.len() {
        return rails
            .into_iter()
            .zip(found)
            .map(|(r, c)| MissingNic { rail: Some(r), ..c })
            .collect();
    }
    let gone = if !unaddressed.is_empty() {
        Gone::Unaddressed { ports: unaddressed }
    } else if !found.is_empty() {
        Gone::OneOf(found.iter().filter_map(|c| c.pci.clone()).collect())
    } else {
        Gone::Unplaced
    };
    let mut out: Vec<MissingNic> = rails
        .into_iter()
        .map(|r| MissingNic {
            rail: Some(r),
            pci: None,
            gone: gone.clone(),
        })
        .collect();
    // An empty slot alone is not a missing NIC; a function without its RDMA device is.
    out.extend(
        found
            .into_iter()
            .filter(|c| matches!(c.gone, Gone::NoRdmaDevice { .. })),
    );
    out
}

impl SysRoot {
    /// The verdicts on the PCIe links between `f` (a NIC) and its root port, other than
    /// its own: each switch upstream port's link against the port above it.
    pub fn upstream_link_verdicts(
        &self,
        f: &PciFunction,
        port_gbps: Option<f64>,
    ) -> Vec<PcieLinkVerdict> {
        let last = f.chain.len().saturating_sub(1);
        (2..last)
            .step_by(2)
            .filter_map(|i| {
                let dir = self.pci_dir_in_chain(f, &f.chain[i])?;
                let port = PciFunction {
                    address: f.chain[i].clone(),
                    dir,
                    chain: f.chain[..=i].to_vec(),
                };
                Some(self.pcie_link_verdict(&port, port_gbps))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testrails::{eight_rows as rows, row};
    use crate::verdict::PcieLinkKind;

    fn tree(case: &str) -> SysRoot {
        SysRoot::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures")
                .join(case)
                .join("sys"),
        )
    }

    fn inventory(sys: &SysRoot) -> rocewatch_plugin_api::Inventory {
        let filter = crate::inventory::DeviceFilter::new(&Default::default()).unwrap();
        crate::inventory::read_inventory(sys, &filter).unwrap().0
    }

    /// A function at `addr` under host bridge pci0000:00 in the small tree at `root`,
    /// with its `class`, `device` and the `driver` link (the layout of
    /// Documentation/ABI/testing/sysfs-bus-pci), linked from `bus/pci/devices`.
    fn function(
        root: &std::path::Path,
        addr: &str,
        class: &str,
        driver: &str,
        device: &str,
    ) -> std::path::PathBuf {
        let d = root.join("devices/pci0000:00").join(addr);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(d.join("device"), format!("{device}\n")).unwrap();
        let drv = root.join("bus/pci/drivers").join(driver);
        std::fs::create_dir_all(&drv).unwrap();
        std::os::unix::fs::symlink(&drv, d.join("driver")).unwrap();
        let bus = root.join("bus/pci/devices");
        std::fs::create_dir_all(&bus).unwrap();
        std::os::unix::fs::symlink(&d, bus.join(addr)).unwrap();
        d
    }

    /// A root port at `addr` with x16 lanes and no link trained, nothing below it.
    fn empty_slot(root: &std::path::Path, addr: &str) {
        let d = root.join("devices/pci0000:00").join(addr);
        std::fs::create_dir_all(&d).unwrap();
        for (f, v) in [
            ("class", "0x060400"),
            ("current_link_speed", "Unknown"),
            ("current_link_width", "0"),
            ("max_link_speed", "32.0 GT/s PCIe"),
            ("max_link_width", "16"),
        ] {
            std::fs::write(d.join(f), format!("{v}\n")).unwrap();
        }
        let bus = root.join("bus/pci/devices");
        std::fs::create_dir_all(&bus).unwrap();
        std::os::unix::fs::symlink(&d, bus.join(addr)).unwrap();
    }

    fn port(device: &str, rail: Option<usize>, pci: &str) -> crate::railmap::RailPort {
        crate::railmap::RailPort {
            rail,
            device: device.into(),
            port: 1,
            netdev: None,
            addrs: Vec::new(),
            pci: Some(pci.into()),
            up: true,
        }
    }

    /// Ethernet functions of RDMA drivers without an RDMA device that nothing needs: an
    /// X710 (i40e, no RDMA at all) is not counted; a RoCE LAG's PF1 (only PF0 has
    /// `mlx5_bond_0`) is not; an X722 and an mlx5 function alone are, without draining;
    /// a function bound to vfio-pci is not; an InfiniBand controller drains.
    #[test]
    fn an_ethernet_function_without_rdma_device_is_no_drain() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        function(root, "0000:5e:00.0", "0x020000", "i40e", "0x1572");
        let pf0 = function(root, "0000:3b:00.0", "0x020000", "mlx5_core", "0x1021");
        std::fs::create_dir_all(pf0.join("infiniband/mlx5_bond_0")).unwrap();
        function(root, "0000:3b:00.1", "0x020000", "mlx5_core", "0x1021");
        function(root, "0000:60:00.0", "0x020000", "vfio-pci", "0x1021");
        let sys = SysRoot::new(root);
        let map = sys.rail_map(&Default::default(), None);
        assert_eq!(missing_nics(&sys, &map), vec![]);

        function(root, "0000:18:00.0", "0x020000", "i40e", "0x37d0");
        function(root, "0000:af:00.0", "0x020000", "mlx5_core", "0x1021");
        let m = missing_nics(&sys, &map);
        let pci: Vec<_> = m.iter().filter_map(|m| m.pci.as_deref()).collect();
        assert_eq!(pci, ["0000:18:00.0", "0000:af:00.0"], "{m:?}");
        assert!(m.iter().all(|m| !m.drains()), "{m:?}");
        assert!(m[0].fix().starts_with("modprobe irdma; "), "{}", m[0].fix());

        function(root, "0000:c1:00.0", "0x020700", "mlx5_core", "0x101b");
        let m = missing_nics(&sys, &map);
        let drains: Vec<_> = m.iter().filter(|m| m.drains()).collect();
        assert_eq!(drains.len(), 1, "{m:?}");
        assert_eq!(drains[0].pci.as_deref(), Some("0000:c1:00.0"));
    }

    /// Rail 3's address on no port while a present port carries no address of the
    /// topology, with an empty bay too: the address is not configured, not a NIC gone.
    #[test]
    fn a_port_without_its_address_is_not_a_nic_gone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        empty_slot(root, "0000:00:05.0");
        let sys = SysRoot::new(root);
        let map = RailMap {
            by: RailsBy::Topology,
            ports: vec![
                port("mlx5_0", Some(0), "0000:13:00.0"),
                port("mlx5_3", None, "0000:43:00.0"),
            ],
            missing: vec![row(3)],
            host_vfs: Vec::new(),
        };
        let m = missing_nics(&sys, &map);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(
            m[0].gone,
            Gone::Unaddressed {
                ports: vec!["mlx5_3:1".into()]
            }
        );
        assert!(m[0].drains(), "fewer rails than the topology says");
        assert!(
            m[0].headline().contains("address not configured?"),
            "{}",
            m[0].headline()
        );
        assert!(!m[0].fix().contains("reseat the NIC"), "{}", m[0].fix());
        assert!(m[0].evidence().contains("mlx5_3:1"), "{}", m[0].evidence());
    }

    /// One rail missing and two empty slots (the NIC's and an NVMe bay): which one held
    /// the NIC is not told; both are named. Two rails missing, two slots: pinned.
    #[test]
    fn a_missing_rail_is_pinned_only_when_unambiguous() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        empty_slot(root, "0000:00:05.0");
        empty_slot(root, "0000:00:06.0");
        let sys = SysRoot::new(root);
        let mut map = RailMap {
            by: RailsBy::Topology,
            ports: vec![port("mlx5_0", Some(0), "0000:13:00.0")],
            missing: vec![row(3)],
            host_vfs: Vec::new(),
        };
        let m = missing_nics(&sys, &map);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(
            m[0].gone,
            Gone::OneOf(vec!["0000:00:05.0".into(), "0000:00:06.0".into()])
        );
        assert_eq!(m[0].pci, None);
        assert!(
            m[0].headline()
                .contains("one of: 0000:00:05.0, 0000:00:06.0"),
            "{}",
            m[0].headline()
        );
        assert!(m[0].drains());
        map.missing.push(row(5));
        let m = missing_nics(&sys, &map);
        let pinned: Vec<_> = m
            .iter()
            .map(|m| (m.rail.unwrap().0, m.pci.clone()))
            .collect();
        assert_eq!(
            pinned,
            [
                (3, Some("0000:00:05.0".into())),
                (5, Some("0000:00:06.0".into()))
            ]
        );
    }

    #[test]
    fn a_missing_rail_is_pinned_on_the_empty_slot() {
        let sys = tree("eight-rails-one-gone");
        let map = sys.rail_map(&inventory(&sys), Some(&rows()));
        let m = missing_nics(&sys, &map);
        assert_eq!(
            m,
            vec![MissingNic {
                rail: Some((3, "10.0.3.1".parse().unwrap())),
                pci: Some("0000:41:01.0".into()),
                gone: Gone::SlotDown,
            }]
        );
        assert!(m[0].headline().len() < 60, "{}", m[0].headline());
        // Without a topology an empty slot alone is no missing NIC.
        let map = sys.rail_map(&inventory(&sys), None);
        assert!(missing_nics(&sys, &map).is_empty());
        // All eight there: nothing missing.
        let sys = tree("eight-rails");
        let map = sys.rail_map(&inventory(&sys), Some(&rows()));
        assert!(missing_nics(&sys, &map).is_empty());
    }

    /// A hypervisor's PF carries rail 0; rail 1's NIC is gone. The PF's VFs bound on the
    /// host (mlx5_2, mlx5_3) have no address of the topology and are not rails: the
    /// missing rail is not blamed on them as an address not configured.
    #[test]
    fn host_side_vfs_do_not_make_a_missing_rail_unaddressed() {
        let sys = tree("sriov-host");
        let mut inv = inventory(&sys);
        let pf = inv.devices.iter_mut().find(|d| d.name == "mlx5_0").unwrap();
        let netdev = pf.ports[0].netdev.clone();
        pf.ports[0].gids.push(rocewatch_plugin_api::Gid {
            index: 3,
            gid: "0000:0000:0000:0000:0000:ffff:0a00:0001".into(),
            gid_type: Some("RoCE v2".into()),
            netdev,
        });
        let map = sys.rail_map(&inv, Some(&[row(0), row(1)]));
        assert_eq!(map.rail_of("mlx5_0", 1), Some(0), "{}", map.line());
        let m = missing_nics(&sys, &map);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].rail, Some((1, row(1).addr)));
        assert!(
            !matches!(m[0].gone, Gone::Unaddressed { .. }),
            "{}",
            m[0].evidence()
        );
        assert!(!m[0].evidence().contains("ens1f0v"), "{}", m[0].evidence());
        assert!(m[0].drains());
    }

    #[test]
    fn the_switch_uplink_above_a_nic_is_judged_against_its_root_port() {
        let sys = tree("eight-rails-switch-degraded");
        let f = sys.rdma_pci_function("mlx5_5").unwrap();
        let v = sys.upstream_link_verdicts(&f, Some(400.0));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].address, "0000:a0:00.0");
        assert_eq!(v[0].kind, PcieLinkKind::Degraded);
        let f = sys.rdma_pci_function("mlx5_4").unwrap();
        let v = sys.upstream_link_verdicts(&f, Some(400.0));
        assert_eq!(v[0].kind, PcieLinkKind::Full, "{v:?}");
    }

    /// An Ethernet function bound to mlx5_core with no `infiniband/` (mlx5_ib not
    /// loaded), beside one with its RDMA device, a VF and an Ethernet NIC of no RDMA
    /// driver: the first only is missing, without any topology.
    #[test]
    fn a_function_bound_without_its_rdma_device_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        function(root, "0000:01:00.0", "0x020000", "mlx5_core", "0x1021");
        let with = function(root, "0000:02:00.0", "0x020000", "mlx5_core", "0x1021");
        std::fs::create_dir_all(with.join("infiniband/mlx5_0")).unwrap();
        let vf = function(root, "0000:02:00.2", "0x020000", "mlx5_core", "0x101e");
        std::os::unix::fs::symlink(&with, vf.join("physfn")).unwrap();
        function(root, "0000:03:00.0", "0x020000", "igb", "0x1533");
        let sys = SysRoot::new(root);
        let map = sys.rail_map(&Default::default(), None);
        let m = missing_nics(&sys, &map);
        assert_eq!(
            m,
            vec![MissingNic {
                rail: None,
                pci: Some("0000:01:00.0".into()),
                gone: Gone::NoRdmaDevice {
                    driver: "mlx5_core".into(),
                    module: Some("mlx5_ib"),
                    infiniband: false,
                },
            }]
        );
        assert!(
            m[0].fix().starts_with("modprobe mlx5_ib; "),
            "{}",
            m[0].fix()
        );
        assert!(m[0]
            .fix()
            .contains("echo 0000:01:00.0 > /sys/bus/pci/drivers/mlx5_core/bind"));
    }

    proptest::proptest! {
        /// Any `device` text: never panics; irdma only for an X722 ID, in the kernel's
        /// `0x%04x` form, whatever the case.
        #[test]
        fn an_i40e_device_id_of_any_text(text in ".{0,12}", id in 0u16..) {
            let _ = rdma_module_of_function("i40e", Some(&text));
            let x722 = (0x37ce..=0x37d3).contains(&id);
            let got = rdma_module_of_function("i40e", Some(&format!("0x{id:04X}\n")));
            proptest::prop_assert_eq!(got, x722.then_some("irdma"));
        }
    }

    #[test]
    fn rdma_modules_of_ethernet_drivers() {
        assert_eq!(rdma_module_of("mlx5_core"), Some("mlx5_ib"));
        assert_eq!(rdma_module_of("ice"), Some("irdma"));
        assert_eq!(rdma_module_of("bnxt_en"), Some("bnxt_re"));
        assert_eq!(rdma_module_of("igb"), None);
        // i40e: only the X722 has RDMA (iWARP through irdma).
        assert_eq!(rdma_module_of("i40e"), None);
        assert_eq!(rdma_module_of_function("i40e", Some("0x1572")), None);
        assert_eq!(
            rdma_module_of_function("i40e", Some("0x37d2\n")),
            Some("irdma")
        );
        assert_eq!(rdma_module_of_function("i40e", None), None);
    }
}
