//! Every NIC accounted for, and the PCIe links above it: the verdicts `health` and
//! `doctor` both give on how many RDMA NICs a host should have and on the switch links
//! between a NIC and its root port.
//!
//! What the host says it should have, without configuration:
//! - the rows of this host in the fleet topology no port carries (the rail map's
//!   `missing`, [`crate::railmap`]);
//! - an RDMA-capable PCI function whose driver is bound but which has no RDMA device
//!   (`<function>/infiniband/` empty or absent): class `0x0207` (InfiniBand controller,
//!   any driver), or `0x0200` (Ethernet) bound to a driver whose RDMA half is another
//!   module ([`rdma_module_of`]); SR-IOV VFs (a `physfn` link) are not counted;
//! - a PCIe bridge whose link is down (`current_link_speed` `Unknown` or
//!   `current_link_width` 0, drivers/pci/pci-sysfs.c, while `max_link_width` says it has
//!   lanes) with no function below it: an empty slot. An empty slot alone is how many
//!   hosts are built, so it only tells where a missing rail's NIC was (paired in PCI
//!   address order with the missing rails when there are as many of each).
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
use crate::railmap::RailMap;
use crate::SysRoot;

use super::PcieLinkVerdict;

/// The RDMA module that serves an Ethernet function bound to `driver`, for the drivers
/// whose RDMA half binds to an auxiliary device the Ethernet driver creates (the
/// `auxiliary_device_id` tables of drivers/infiniband/hw/: mlx5 `mlx5_core.rdma`,
/// bnxt_re `bnxt_en.rdma`, irdma `ice.roce`/`ice.iwarp` and `i40e.iwarp`, mana_ib
/// `mana.rdma`), or to the Ethernet driver's own client interface (qedr on qed,
/// iw_cxgb4 on cxgb4's ULD, hns_roce_hw_v2 on hnae3, ocrdma on be2net, mlx4_ib on
/// mlx4_core). rdma-core's providers (`doctor`'s userspace check) name the same pairs.
pub fn rdma_module_of(driver: &str) -> Option<&'static str> {
    Some(match driver {
        "mlx5_core" => "mlx5_ib",
        "mlx4_core" => "mlx4_ib",
        "bnxt_en" => "bnxt_re",
        "ice" | "i40e" => "irdma",
        "qede" => "qedr",
        "cxgb4" => "iw_cxgb4",
        "mana" => "mana_ib",
        "hns3" => "hns_roce_hw_v2",
        "be2net" => "ocrdma",
        _ => return None,
    })
}

/// Why a NIC is counted missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// The function is there, its driver bound, and it has no RDMA device.
    NoRdmaDevice {
        driver: String,
        /// The RDMA module to load, when the driver's RDMA half is another module.
        module: Option<&'static str>,
    },
    /// Nothing below this bridge, whose link is down: the NIC is gone from the bus.
    SlotDown,
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
    /// What is missing, in words both commands print.
    pub fn evidence(&self) -> String {
        let rail = match &self.rail {
            Some((r, a)) => format!("rail {r} ({a}) of the fleet topology is on no RDMA port"),
            None => "a NIC is missing".to_string(),
        };
        match (&self.gone, &self.pci) {
            (Gone::NoRdmaDevice { driver, .. }, Some(p)) => format!(
                "{rail}: PCI function {p} is bound to {driver} but has no RDMA device"
            ),
            (Gone::SlotDown, Some(p)) => format!(
                "{rail}: its slot's bridge {p} has no function below it and its link is down (the NIC is gone from the bus)"
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
            (_, _, Some((_, a))) => format!("no RDMA port carries {a}"),
            _ => "a NIC is missing".into(),
        }
    }

    /// What would bring it back, in the order to try.
    pub fn fix(&self) -> String {
        match (&self.gone, &self.pci) {
            (Gone::NoRdmaDevice { driver, module }, Some(p)) => {
                let load = module.map_or(String::new(), |m| format!("modprobe {m}; "));
                format!(
                    "{load}dmesg | grep {p} (why the RDMA device did not register); rebind the function: echo {p} > /sys/bus/pci/drivers/{driver}/unbind; echo {p} > /sys/bus/pci/drivers/{driver}/bind"
                )
            }
            (Gone::SlotDown, Some(p)) => format!(
                "echo 1 > /sys/bus/pci/rescan (enumerates again what trains a link); if /sys/bus/pci/devices/{p}/current_link_width stays 0, power the host off and reseat the NIC (and its riser or cable); a NIC that fell off after a fatal error may need a cold boot, not a reboot"
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
        let module = rdma_module_of(&driver);
        let rdma = class.starts_with("0207") || (class.starts_with("0200") && module.is_some());
        let vf = f.dir.join("physfn").symlink_metadata().is_ok();
        let has_device = crate::read::list_dir(&f.dir.join("infiniband"))
            .map(|d| !d.is_empty())
            .unwrap_or(false);
        if rdma && !vf && !has_device {
            out.push(MissingNic {
                rail: None,
                pci: Some(f.address.clone()),
                gone: Gone::NoRdmaDevice { driver, module },
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
/// carries, each pinned on a slot or function where there are as many of those as
/// missing rails (in PCI address order, the order rails are cabled in when the topology
/// was made from the host: `fleet topology`), and RDMA functions without an RDMA device
/// beyond those.
pub fn missing_nics(sys: &SysRoot, map: &RailMap) -> Vec<MissingNic> {
    let found = candidates(sys);
    let rails: Vec<(usize, IpAddr)> = map.missing.iter().map(|m| (m.rail, m.addr)).collect();
    if !rails.is_empty() && rails.len() == found.len() {
        return rails
            .into_iter()
            .zip(found)
            .map(|(r, c)| MissingNic { rail: Some(r), ..c })
            .collect();
    }
    let mut out: Vec<MissingNic> = rails
        .into_iter()
        .map(|r| MissingNic {
            rail: Some(r),
            pci: None,
            gone: Gone::Unplaced,
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
    use crate::railmap::RailRow;
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

    fn rows() -> Vec<RailRow> {
        (0..8)
            .map(|k| RailRow {
                rail: k,
                addr: format!("10.0.{k}.1").parse().unwrap(),
            })
            .collect()
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
        let function = |addr: &str, class: &str, driver: &str| {
            let d = root.join("devices/pci0000:00").join(addr);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
            let drv = root.join("bus/pci/drivers").join(driver);
            std::fs::create_dir_all(&drv).unwrap();
            std::os::unix::fs::symlink(&drv, d.join("driver")).unwrap();
            let bus = root.join("bus/pci/devices");
            std::fs::create_dir_all(&bus).unwrap();
            std::os::unix::fs::symlink(&d, bus.join(addr)).unwrap();
            d
        };
        function("0000:01:00.0", "0x020000", "mlx5_core");
        let with = function("0000:02:00.0", "0x020000", "mlx5_core");
        std::fs::create_dir_all(with.join("infiniband/mlx5_0")).unwrap();
        let vf = function("0000:02:00.2", "0x020000", "mlx5_core");
        std::os::unix::fs::symlink(&with, vf.join("physfn")).unwrap();
        function("0000:03:00.0", "0x020000", "igb");
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

    #[test]
    fn rdma_modules_of_ethernet_drivers() {
        assert_eq!(rdma_module_of("mlx5_core"), Some("mlx5_ib"));
        assert_eq!(rdma_module_of("ice"), Some("irdma"));
        assert_eq!(rdma_module_of("bnxt_en"), Some("bnxt_re"));
        assert_eq!(rdma_module_of("igb"), None);
    }
}
