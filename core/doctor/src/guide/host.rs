//! What the host itself says: the [`Host`] every topic of the guide reads (read once).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rocewatch_netlink::ifaddrs::interface_addresses;
use rocewatch_plugin_api::{Device, Inventory, Port, QosState, ScrapeResult};
use rocewatch_sysfs::gid::routable_v2_gids;
use rocewatch_sysfs::railmap::RailMap;
use rocewatch_sysfs::verdict::{judge_gids, GidVerdict};
use rocewatch_sysfs::SysRoot;

use crate::check::{Check, Options};
use crate::checks::gpu::Placed;
use crate::checks::virtualization::CpuWindow;

/// What the checks read, read once: the inventory, the QoS state, the roots, the
/// interfaces' addresses, the PCI side, and what the live agent saw (the two collections
/// a window apart, the probe and the bandwidth test), filled by the guide's async steps.
pub(crate) struct Host<'a> {
    pub opts: &'a Options,
    /// The sysfs root, and whether it is the live `/sys`.
    pub root: PathBuf,
    pub sys: SysRoot,
    pub live: bool,
    /// Whether the proc root is the live `/proc`.
    pub proc_live: bool,
    pub inv: Inventory,
    pub qos: Vec<QosState>,
    /// The interfaces' addresses (live trees only).
    pub addrs: Option<BTreeMap<String, Vec<IpAddr>>>,
    pub gpus: Vec<Placed>,
    pub nics: Vec<Placed>,
    /// The two collections `opts.window` apart, and what the collectors failed to read.
    pub first: ScrapeResult,
    pub second: ScrapeResult,
    pub failed: Vec<String>,
    /// The probe's and the bandwidth test's verdicts (the live agent's).
    pub probe: Vec<Check>,
    /// Which rail each port is on (`rocewatch_sysfs::railmap`, by `opts.rail_rows`).
    pub rails: RailMap,
    /// `/proc/stat` at the start and the end of the window (`None`: the proc tree is not
    /// the sysfs tree's host's).
    pub cpu: Option<CpuWindow>,
}

/// A RoCE port: an Ethernet port with a netdev.
pub(crate) struct RocePort<'h> {
    pub device: &'h Device,
    pub port: &'h Port,
    pub netdev: &'h str,
}

impl<'a> Host<'a> {
    /// What is read before any check: the sysfs side of the host.
    pub fn new(root: PathBuf, opts: &'a Options, inv: Inventory, qos: Vec<QosState>) -> Self {
        let live = rocewatch_sysfs::read::is_sysfs(&root);
        let sys = SysRoot::new(&root);
        let addrs = if live {
            interface_addresses().ok()
        } else {
            None
        };
        let rails = sys.rail_map(&inv, opts.rail_rows.as_deref());
        let (gpus, nics) = (
            crate::checks::gpu::gpus(&sys),
            crate::checks::gpu::nics(&sys, &inv),
        );
        Host {
            opts,
            proc_live: opts.procfs_root == Path::new("/proc"),
            root,
            sys,
            live,
            inv,
            qos,
            addrs,
            gpus,
            nics,
            first: ScrapeResult::default(),
            second: ScrapeResult::default(),
            failed: Vec::new(),
            probe: Vec::new(),
            rails,
            cpu: None,
        }
    }

    /// The proc tree, when it is the same host's as the sysfs tree (both live, or both
    /// given).
    pub fn proc_root(&self) -> Option<&Path> {
        (self.live == self.proc_live).then_some(self.opts.procfs_root.as_path())
    }

    /// `/proc/stat` now, when the proc tree is this tree's host's.
    pub fn cpu_times(
        &self,
    ) -> Option<Result<rocewatch_sysfs::procstat::CpuSample, rocewatch_sysfs::procstat::StatError>>
    {
        self.proc_root().map(rocewatch_sysfs::procstat::read_stat)
    }

    /// The RoCE ports (Ethernet, with a netdev), in inventory order.
    pub fn roce_ports(&self) -> impl Iterator<Item = RocePort<'_>> {
        self.inv.devices.iter().flat_map(|d| {
            d.ports
                .iter()
                .filter(|p| p.link_layer.as_deref() == Some("Ethernet"))
                .filter_map(move |p| {
                    Some(RocePort {
                        device: d,
                        port: p,
                        netdev: p.netdev.as_deref()?,
                    })
                })
        })
    }

    /// A RoCE port's GIDs against its netdev's addresses: `health`'s verdict
    /// (`rocewatch_sysfs::verdict::gid`).
    pub fn gid_verdict(&self, p: &RocePort) -> GidVerdict {
        let addresses = self
            .addrs
            .as_ref()
            .map(|a| a.get(p.netdev).map_or(&[][..], Vec::as_slice));
        let why = self
            .sys
            .no_address(&p.device.name, p.netdev, self.addrs.as_ref());
        judge_gids(p.netdev, p.port, addresses, why)
    }

    /// A RoCE port's IPs: from the live interface, or (fixture trees) from its GIDs.
    pub fn ips(&self, p: &RocePort) -> Vec<IpAddr> {
        match &self.addrs {
            Some(a) => a.get(p.netdev).cloned().unwrap_or_default(),
            None => routable_v2_gids(p.port).iter().map(|g| g.ip).collect(),
        }
    }

    /// The netdev a capture should run on: the first RoCE port's that is up and has an
    /// address.
    pub fn capture_netdev(&self) -> Option<&str> {
        self.roce_ports()
            .find(|p| p.port.netdev_operstate.as_deref() == Some("up") && !self.ips(p).is_empty())
            .map(|p| p.netdev)
    }

    /// The RoCE netdevs' MTUs, an unreadable one `None`, by netdev name.
    pub fn mtus(&self) -> BTreeMap<String, Option<u32>> {
        self.roce_ports()
            .map(|p| (p.netdev.to_string(), p.port.netdev_mtu))
            .collect()
    }
}
