//! Typed readers of the RDMA parts of sysfs (and of procfs where a NIC shows there), under
//! a configurable root.
//!
//! Layout:
//! - [`SysRoot`]: the root (`/sys` on a host, a fixture in tests) and the readers of
//!   `class/infiniband/<dev>` (devices, ports, GIDs, counter directories) and
//!   `class/net/<if>`.
//! - [`parse`]: pure functions for the odd strings the kernel prints (`4: ACTIVE`,
//!   `100 Gb/sec (4X EDR)`, `N/A (no PMA)`), table-tested inline.
//! - [`gid`]: the IP address a GID carries, a port's RoCE v2 GIDs that hold a routable one.
//! - [`rails`]: the rail order, the ports as applications see them (what `rocewatch env`,
//!   the fleet and preflight list and rank).
//! - [`railmap`]: which rail each port is on, by identity (the fleet topology's row whose
//!   address is on the port; else PCI address order, said as such): the one rail map.
//! - [`interrupts`]: a NIC's interrupts in `/proc/interrupts` (procfs).
//! - [`procstat`]: the host's CPU times in `/proc/stat` (procfs): steal, the run queue.
//! - [`pci`]: the PCI function of a device, its PCIe link and NUMA node, GPUs on the bus,
//!   the distance between two functions (`nvidia-smi topo -m` terms), ACS from config space.
//! - [`module`]: the kernel module serving a device: version, srcversion, taint.
//! - [`sriov`]: SR-IOV roles: a PF with its VFs (`virtfnN`), a VF with its PF (`physfn`)
//!   or, in a guest, by its PCI id.
//! - [`inventory`]: the whole RDMA inventory (devices, ports, GIDs, netdevs) for the
//!   devices a [`inventory::DeviceFilter`] selects: what every per-device plugin reads.
//! - [`verdict`]: the verdicts `health` and `doctor` both give on one fact (the PCIe link
//!   against its card and slot, a port's state, a RoCE netdev's MTU, a RoCE port's GIDs),
//!   each with its weight and evidence.
//! - [`virt`]: whether the host is a virtual machine and of which hypervisor (DMI, the
//!   CPU's hypervisor flag, `hypervisor/type`), as `systemd-detect-virt` tells it.
//! - [`read`]: reading one attribute file, and the classification of errors into
//!   "absent" (the kernel says the value does not exist here) and real failures.
//!
//! Every reader returns `Ok(None)` for absent values: absent and zero are different.

pub mod gid;
pub mod interrupts;
pub mod inventory;
pub mod module;
pub mod parse;
pub mod pci;
pub mod procstat;
pub mod read;
pub mod sriov;
pub mod verdict;
pub mod virt;

pub mod railmap;
pub mod rails;
#[cfg(test)]
mod testrails;
use std::path::{Path, PathBuf};

pub use read::{Attr, SysfsError};

/// One slot of a port's GID table that holds an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: String,
    pub gid_type: Option<String>,
    pub netdev: Option<String>,
}

/// A sysfs tree.
#[derive(Debug, Clone)]
pub struct SysRoot {
    root: PathBuf,
}

impl SysRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SysRoot { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/class/infiniband`
    pub fn ib_class(&self) -> PathBuf {
        self.root.join("class/infiniband")
    }

    /// `<root>/class/infiniband/<dev>`
    pub fn device_dir(&self, dev: &str) -> PathBuf {
        self.ib_class().join(dev)
    }

    /// `<root>/class/infiniband/<dev>/ports/<port>`
    pub fn port_dir(&self, dev: &str, port: u32) -> PathBuf {
        self.device_dir(dev).join("ports").join(port.to_string())
    }

    /// `<root>/class/net/<ifname>`
    pub fn netdev_dir(&self, ifname: &str) -> PathBuf {
        self.root.join("class/net").join(ifname)
    }

    /// The RDMA devices, sorted. No `class/infiniband` at all means no devices, not an error.
    pub fn devices(&self) -> Result<Vec<String>, SysfsError> {
        read::list_dir(&self.ib_class())
    }

    /// Port numbers of a device, sorted.
    pub fn ports(&self, dev: &str) -> Result<Vec<u32>, SysfsError> {
        let mut ports: Vec<u32> = read::list_dir(&self.device_dir(dev).join("ports"))?
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        ports.sort_unstable();
        Ok(ports)
    }

    /// A device attribute (`fw_ver`, `node_guid`...), trimmed; `None` when absent.
    pub fn device_attr(&self, dev: &str, attr: &str) -> Result<Option<String>, SysfsError> {
        read::read_attr(&self.device_dir(dev).join(attr)).map(Attr::into_option)
    }

    /// A port attribute (`state`, `rate`...), trimmed; `None` when absent.
    pub fn port_attr(
        &self,
        dev: &str,
        port: u32,
        attr: &str,
    ) -> Result<Option<String>, SysfsError> {
        read::read_attr(&self.port_dir(dev, port).join(attr)).map(Attr::into_option)
    }

    /// A netdev attribute (`mtu`, `operstate`...), trimmed; `None` when absent.
    pub fn netdev_attr(&self, ifname: &str, attr: &str) -> Result<Option<String>, SysfsError> {
        read::read_attr(&self.netdev_dir(ifname).join(attr)).map(Attr::into_option)
    }

    /// The kernel driver bound to the device's parent (`device/driver` symlink).
    pub fn device_driver(&self, dev: &str) -> Option<String> {
        std::fs::read_link(self.device_dir(dev).join("device/driver"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    }

    /// Netdevs of the device's parent PCI function (`device/net/*`), sorted.
    pub fn device_netdevs(&self, dev: &str) -> Vec<String> {
        read::list_dir(&self.device_dir(dev).join("device/net")).unwrap_or_default()
    }

    /// The netdev of a port, as `ibdev2netdev` finds it: the netdev of the port's first
    /// populated GID; else the parent function's netdev whose `dev_port` matches
    /// (`port - 1`), or its only netdev; else the `parent` attribute (soft-RoCE).
    pub fn port_netdev(&self, dev: &str, port: u32, gids: &[GidEntry]) -> Option<String> {
        if let Some(nd) = gids.iter().find_map(|g| g.netdev.clone()) {
            return Some(nd);
        }
        let netdevs = self.device_netdevs(dev);
        let dev_ports: Vec<Option<u32>> = netdevs
            .iter()
            .map(
                |nd| match read::read_attr(&self.netdev_dir(nd).join("dev_port")) {
                    Ok(Attr::Value(v)) => v.parse().ok(),
                    _ => None,
                },
            )
            .collect();
        if let Some(i) = dev_ports.iter().position(|p| *p == Some(port - 1)) {
            return Some(netdevs[i].clone());
        }
        // Without dev_port to tell them apart, a lone netdev belongs to port 1 only.
        if netdevs.len() == 1 && dev_ports[0].is_none() && port == 1 {
            return netdevs.into_iter().next();
        }
        if !netdevs.is_empty() {
            return None;
        }
        self.device_attr(dev, "parent").ok().flatten()
    }

    /// The populated slots of a port's GID table. Empty slots (all zeros, whose `types`
    /// and `ndevs` fail with EINVAL) are skipped.
    pub fn gids(&self, dev: &str, port: u32) -> Result<Vec<GidEntry>, SysfsError> {
        let port_dir = self.port_dir(dev, port);
        let mut indexes: Vec<u32> = read::list_dir(&port_dir.join("gids"))?
            .iter()
            .filter_map(|i| i.parse().ok())
            .collect();
        indexes.sort_unstable();
        let mut out = Vec::new();
        for index in indexes {
            let gid = match read::read_attr(&port_dir.join("gids").join(index.to_string()))? {
                Attr::Value(g) if !parse::is_empty_gid(&g) => g,
                _ => continue,
            };
            let attrs = port_dir.join("gid_attrs");
            let gid_type =
                read::read_attr(&attrs.join("types").join(index.to_string()))?.into_option();
            let netdev =
                read::read_attr(&attrs.join("ndevs").join(index.to_string()))?.into_option();
            out.push(GidEntry {
                index,
                gid,
                gid_type,
                netdev,
            });
        }
        Ok(out)
    }

    /// The files of a counter directory of a port (`counters`, `counters_ext`,
    /// `hw_counters`), sorted; empty when the directory does not exist.
    pub fn counter_files(
        &self,
        dev: &str,
        port: u32,
        group: &str,
    ) -> Result<Vec<String>, SysfsError> {
        read::list_dir(&self.port_dir(dev, port).join(group))
    }
}
