//! The verdict on a RoCE port's GIDs: RoCE v2 traffic between hosts is addressed by a RoCE
//! v2 GID that holds an IP address (the kernel adds one for each address of the port's
//! netdev and of the devices above it: a VLAN, the bond it is the active slave of;
//! drivers/infiniband/core/roce_gid_mgmt.c). A port without one carries no RoCE v2 traffic,
//! unless something explains why its traffic is elsewhere.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use rocewatch_plugin_api::Port;

use crate::gid::{routable_v2_gids, V2Gid};
use crate::read::{read_attr, Attr};
use crate::SysRoot;

use super::weight::Weight;

/// Why a RoCE port has no address and no routable RoCE v2 GID and is not at fault.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NoAddress {
    /// The netdev is enslaved (`class/net/<netdev>/master`, made by
    /// `__netdev_adjacent_dev_insert()` in net/core/dev.c): its master (a bond, a team,
    /// a bridge) or a device stacked above it (a VLAN of the bond) holds the addresses,
    /// and the kernel gives the GIDs to its active slave.
    Enslaved { master: String, holder: Holder },
    /// The port's PCI function is an SR-IOV PF with VFs enabled (`sriov_numvfs`,
    /// drivers/pci/iov.c): the VFs, RDMA devices of their own, carry the traffic.
    SriovPf { vfs: u32 },
}

/// Which device above an enslaved netdev holds the addresses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Holder {
    /// The addresses are not known (a tree).
    Unknown,
    /// The master, or a device stacked above it (`upper_<dev>` links), holds one.
    Device(String),
    /// Neither the master nor any device stacked above it holds one: the addresses may
    /// be where sysfs does not link them (an Open vSwitch internal port, not stacked
    /// above `ovs-system`), so a guess, not a fault.
    NotFound,
}

/// The verdict on one RoCE port's GIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidKind {
    /// A RoCE v2 GID for each of the netdev's addresses; where the addresses are not
    /// known (a tree) or the netdev has none of its own (they are on a VLAN or master
    /// above it), at least one RoCE v2 GID holding an address.
    Fine,
    /// An address of the netdev has no RoCE v2 GID: nothing reaches it over RoCE v2.
    Missing,
    /// No address and no RoCE v2 GID holding one, and [`NoAddress`] says why.
    Explained,
    /// No address and no RoCE v2 GID holding one, and nothing explains it: the port
    /// cannot carry RoCE v2 traffic.
    Unaddressed,
}

/// One RoCE port's RoCE v2 GIDs against its netdev's addresses, with the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidVerdict {
    pub kind: GidKind,
    pub netdev: String,
    /// The port's RoCE v2 GIDs that hold a routable address.
    pub gids: Vec<V2Gid>,
    /// The netdev's own addresses (link-local left out), where they are known (the live
    /// host).
    pub addresses: Option<Vec<IpAddr>>,
    /// The addresses without a RoCE v2 GID.
    pub missing: Vec<IpAddr>,
    pub why: Option<NoAddress>,
}

/// Judge a RoCE port's GIDs: `addresses` are its netdev's (none known on a tree), `why`
/// what explains a port with neither address nor GID (read by [`SysRoot::no_address`]).
pub fn judge_gids(
    netdev: &str,
    port: &Port,
    addresses: Option<&[IpAddr]>,
    why: Option<NoAddress>,
) -> GidVerdict {
    let gids = routable_v2_gids(port);
    let missing: Vec<IpAddr> = addresses
        .unwrap_or_default()
        .iter()
        .filter(|a| !gids.iter().any(|g| g.ip == **a))
        .copied()
        .collect();
    let own = addresses.is_some_and(|a| !a.is_empty());
    let kind = match (own, missing.is_empty(), gids.is_empty(), &why) {
        (true, false, _, _) => GidKind::Missing,
        (true, true, _, _) | (false, _, false, _) => GidKind::Fine,
        (false, _, true, Some(_)) => GidKind::Explained,
        (false, _, true, None) => GidKind::Unaddressed,
    };
    GidVerdict {
        kind,
        netdev: netdev.to_string(),
        gids,
        addresses: addresses.map(<[IpAddr]>::to_vec),
        missing,
        why: if kind == GidKind::Explained {
            why
        } else {
            None
        },
    }
}

impl GidVerdict {
    pub fn weight(&self) -> Weight {
        match self.kind {
            GidKind::Fine => Weight::Fine,
            GidKind::Explained => Weight::Note,
            GidKind::Missing | GidKind::Unaddressed => Weight::Fault,
        }
    }

    /// The GID an address has: `RoCE v2 GID index 3 for 10.0.0.1`, with the netdev it
    /// comes from where that is not the port's (`(on bond0)`).
    pub fn found_text(&self, ip: &IpAddr) -> Option<String> {
        let g = self.gids.iter().find(|g| g.ip == *ip)?;
        let on = match &g.netdev {
            Some(nd) if *nd != self.netdev => format!(" (on {nd})"),
            _ => String::new(),
        };
        Some(format!("RoCE v2 GID index {} for {ip}{on}", g.index))
    }

    /// The addresses the port is reached by: the netdev's own, else those its GIDs hold.
    pub fn ips(&self) -> Vec<IpAddr> {
        match &self.addresses {
            Some(a) if !a.is_empty() => a.clone(),
            _ => self.gids.iter().map(|g| g.ip).collect(),
        }
    }

    /// The verdict in words: `RoCE v2 GID index 3 for 10.0.0.1`, `no RoCE v2 GID for
    /// 10.0.0.9`, `ens1f0np0 has no IP address and the port no RoCE v2 GID holding one:
    /// ...`.
    pub fn text(&self) -> String {
        let list = |ips: &[IpAddr]| {
            ips.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let none = match &self.addresses {
            Some(_) => format!(
                "{} has no IP address and the port no RoCE v2 GID holding one",
                self.netdev
            ),
            None => "no RoCE v2 GID holding an IP address".to_string(),
        };
        match (self.kind, &self.why) {
            (GidKind::Fine, _) => self
                .ips()
                .iter()
                .filter_map(|ip| self.found_text(ip))
                .collect::<Vec<_>>()
                .join(", "),
            (GidKind::Missing, _) => format!("no RoCE v2 GID for {}", list(&self.missing)),
            (GidKind::Explained, Some(NoAddress::Enslaved { master, holder })) => {
                let nd = &self.netdev;
                let held = match holder {
                    Holder::Device(d) if d != master => {
                        format!("{d}, stacked above it, holds the addresses")
                    }
                    Holder::Device(_) | Holder::Unknown => "which holds the addresses".into(),
                    Holder::NotFound => {
                        return format!(
                            "{none}: {nd} is enslaved to {master}, and no address was found on {master} or a device stacked above it (an Open vSwitch internal port holds its addresses where sysfs does not link it): check that the port carries RoCE traffic"
                        )
                    }
                };
                format!(
                    "{none}: {nd} is enslaved to {master}, {held} (the kernel gives their GIDs to its active slave's port)"
                )
            }
            (GidKind::Explained, Some(NoAddress::SriovPf { vfs })) => format!(
                "{none}: an SR-IOV PF with {vfs} VF{} enabled, which carry the traffic",
                if *vfs == 1 { "" } else { "s" }
            ),
            _ => format!("{none}: it cannot carry RoCE v2 traffic"),
        }
    }
}

impl SysRoot {
    /// What explains a RoCE port with no address of its own: its netdev enslaved
    /// (`class/net/<netdev>/master`), else its device's PCI function an SR-IOV PF with VFs
    /// enabled (`class/infiniband/<dev>/device/sriov_numvfs` above 0). `addresses` are the
    /// live host's: an enslaved netdev is explained by a master that, or a device stacked
    /// above it that, holds one; else by its VFs; else it is still enslaved, its addresses
    /// not found ([`Holder::NotFound`], a warning: the gate does not drain on a guess).
    pub fn no_address(
        &self,
        dev: &str,
        netdev: &str,
        addresses: Option<&BTreeMap<String, Vec<IpAddr>>>,
    ) -> Option<NoAddress> {
        let master = std::fs::read_link(self.netdev_dir(netdev).join("master"))
            .ok()
            .and_then(|l| Some(l.file_name()?.to_string_lossy().into_owned()));
        let holder = master.as_ref().map(|m| match addresses {
            None => Holder::Unknown,
            Some(a) => self.holder(m, a).map_or(Holder::NotFound, Holder::Device),
        });
        if let (Some(master), Some(holder @ (Holder::Unknown | Holder::Device(_)))) =
            (&master, &holder)
        {
            return Some(NoAddress::Enslaved {
                master: master.clone(),
                holder: holder.clone(),
            });
        }
        let numvfs = self.device_dir(dev).join("device/sriov_numvfs");
        match (read_number(&numvfs), master) {
            (Some(vfs), _) if vfs > 0 => Some(NoAddress::SriovPf { vfs }),
            // Enslaved, and its addresses not found: a warning, never a fault on a guess.
            (_, Some(master)) => Some(NoAddress::Enslaved {
                master,
                holder: Holder::NotFound,
            }),
            _ => None,
        }
    }

    /// The first of `master` and the devices stacked above it (its `upper_<dev>` links,
    /// made by `netdev_adjacent_sysfs_add()` in net/core/dev.c, followed up to
    /// [`MAX_STACK`] levels) that holds an address.
    fn holder(&self, master: &str, addresses: &BTreeMap<String, Vec<IpAddr>>) -> Option<String> {
        let holds = |d: &str| addresses.get(d).is_some_and(|v| !v.is_empty());
        let mut seen = std::collections::BTreeSet::new();
        let mut level = vec![master.to_string()];
        for _ in 0..=MAX_STACK {
            let mut next = Vec::new();
            for d in level {
                if !seen.insert(d.clone()) {
                    continue;
                }
                if holds(&d) {
                    return Some(d);
                }
                next.extend(self.uppers(&d));
            }
            level = next;
        }
        None
    }

    /// The devices stacked directly above `netdev`: its `upper_<dev>` entries.
    fn uppers(&self, netdev: &str) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.netdev_dir(netdev)) else {
            return Vec::new();
        };
        let mut out: Vec<String> = entries
            .filter_map(|e| {
                let name = e.ok()?.file_name().to_string_lossy().into_owned();
                Some(name.strip_prefix("upper_")?.to_string())
            })
            .collect();
        out.sort();
        out
    }
}

/// How many levels above a master are followed (a bond, its VLAN, a bridge over that:
/// real stacks are a few deep; the bound stops a loop in a malformed tree).
const MAX_STACK: usize = 8;

fn read_number(path: &Path) -> Option<u32> {
    match read_attr(path) {
        Ok(Attr::Value(v)) => v.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_plugin_api::Gid;

    fn port(gids: &[(u32, &str, &str)]) -> Port {
        Port {
            gids: gids
                .iter()
                .map(|(index, gid, nd)| Gid {
                    index: *index,
                    gid: (*gid).into(),
                    gid_type: Some("RoCE v2".into()),
                    netdev: Some((*nd).into()),
                })
                .collect(),
            ..Default::default()
        }
    }

    const LINK_LOCAL: &str = "fe80:0000:0000:0000:ba59:9fff:fec1:2a40";
    const TEN_ONE: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_address_needs_its_gid() {
        let p = port(&[(1, LINK_LOCAL, "e0"), (3, TEN_ONE, "e0")]);
        let v = judge_gids("e0", &p, Some(&[ip("10.0.0.1")]), None);
        assert_eq!((v.kind, v.weight()), (GidKind::Fine, Weight::Fine));
        assert_eq!(v.text(), "RoCE v2 GID index 3 for 10.0.0.1");
        let v = judge_gids("e0", &p, Some(&[ip("10.0.0.1"), ip("10.0.0.9")]), None);
        assert_eq!((v.kind, v.weight()), (GidKind::Missing, Weight::Fault));
        assert_eq!(v.text(), "no RoCE v2 GID for 10.0.0.9");
        // A tree: the addresses are not known, one GID holding an address will do.
        let v = judge_gids("e0", &p, None, None);
        assert_eq!(v.kind, GidKind::Fine);
        assert_eq!(v.ips(), [ip("10.0.0.1")]);
    }

    #[test]
    fn addresses_above_the_netdev_are_fine() {
        // The netdev has none of its own; a VLAN above it does, and the port has its GID.
        let p = port(&[(1, LINK_LOCAL, "e0"), (3, TEN_ONE, "e0.100")]);
        let v = judge_gids("e0", &p, Some(&[]), None);
        assert_eq!(v.kind, GidKind::Fine);
        assert_eq!(v.text(), "RoCE v2 GID index 3 for 10.0.0.1 (on e0.100)");
    }

    #[test]
    fn no_address_and_no_gid() {
        let p = port(&[(1, LINK_LOCAL, "e0")]);
        let bond = NoAddress::Enslaved {
            master: "bond0".into(),
            holder: Holder::Device("bond0".into()),
        };
        let v = judge_gids("e0", &p, Some(&[]), Some(bond));
        assert_eq!((v.kind, v.weight()), (GidKind::Explained, Weight::Note));
        assert_eq!(
            v.text(),
            "e0 has no IP address and the port no RoCE v2 GID holding one: e0 is enslaved to bond0, which holds the addresses (the kernel gives their GIDs to its active slave's port)"
        );
        let v = judge_gids("e0", &p, None, Some(NoAddress::SriovPf { vfs: 8 }));
        assert_eq!(
            v.text(),
            "no RoCE v2 GID holding an IP address: an SR-IOV PF with 8 VFs enabled, which carry the traffic"
        );
        let v = judge_gids("e0", &p, Some(&[]), None);
        assert_eq!((v.kind, v.weight()), (GidKind::Unaddressed, Weight::Fault));
        assert_eq!(
            v.text(),
            "e0 has no IP address and the port no RoCE v2 GID holding one: it cannot carry RoCE v2 traffic"
        );
        // What explains a port without an address does not excuse one whose address lacks
        // its GID.
        let v = judge_gids(
            "e0",
            &p,
            Some(&[ip("10.0.0.1")]),
            Some(NoAddress::SriovPf { vfs: 2 }),
        );
        assert_eq!((v.kind, v.why), (GidKind::Missing, None));
    }

    /// A tree with `e0` (the RoCE port's netdev, no VFs) enslaved to `master`, and
    /// `uppers` stacked above the master (`upper_<dev>` links, as net/core/dev.c makes).
    fn stacked(root: &Path, master: &str, uppers: &[(&str, &str)]) -> SysRoot {
        let pf = root.join("devices/pci0000:00/0000:3b:00.0");
        let virt = root.join("devices/virtual/net");
        std::fs::create_dir_all(root.join("class/net")).unwrap();
        std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
        std::fs::create_dir_all(pf.join("net/e0")).unwrap();
        std::os::unix::fs::symlink(pf.join("net/e0"), root.join("class/net/e0")).unwrap();
        std::os::unix::fs::symlink(&pf, root.join("class/infiniband/mlx5_0")).unwrap();
        std::os::unix::fs::symlink(&pf, pf.join("device")).unwrap();
        std::fs::write(pf.join("sriov_numvfs"), "0\n").unwrap();
        let mut devs = vec![master];
        devs.extend(uppers.iter().map(|(_, up)| *up));
        devs.sort_unstable();
        devs.dedup();
        for d in devs {
            std::fs::create_dir_all(virt.join(d)).unwrap();
            std::os::unix::fs::symlink(virt.join(d), root.join("class/net").join(d)).unwrap();
        }
        std::os::unix::fs::symlink(virt.join(master), pf.join("net/e0/master")).unwrap();
        for (below, up) in uppers {
            let link = virt.join(below).join(format!("upper_{up}"));
            std::os::unix::fs::symlink(virt.join(up), link).unwrap();
        }
        SysRoot::new(root)
    }

    #[test]
    fn a_slave_whose_addresses_are_above_its_master_is_not_a_fault() {
        let p = port(&[(1, LINK_LOCAL, "e0")]);
        let live = |pairs: &[(&str, &[&str])]| -> BTreeMap<String, Vec<IpAddr>> {
            pairs
                .iter()
                .map(|(d, a)| (d.to_string(), a.iter().map(|s| ip(s)).collect()))
                .collect()
        };
        // The backup slave of an active-backup bond whose address is on a VLAN of it
        // (a loop in the links is followed no further than once).
        let dir = tempfile::tempdir().unwrap();
        let sys = stacked(
            dir.path(),
            "bond0",
            &[("bond0", "bond0.100"), ("bond0.100", "bond0")],
        );
        let a = live(&[("e0", &[]), ("bond0", &[]), ("bond0.100", &["10.0.0.1"])]);
        let why = sys.no_address("mlx5_0", "e0", Some(&a));
        let v = judge_gids("e0", &p, Some(&[]), why);
        assert_eq!(v.weight(), Weight::Note, "{}", v.text());
        assert!(v.text().contains("bond0.100"), "{}", v.text());
        // A port enslaved to ovs-system, its address on an internal port sysfs does not
        // stack above it: not confirmed, so a warning, not a fault.
        let dir = tempfile::tempdir().unwrap();
        let sys = stacked(dir.path(), "ovs-system", &[]);
        let a = live(&[("e0", &[]), ("ovs-system", &[]), ("br0", &["10.0.0.1"])]);
        let why = sys.no_address("mlx5_0", "e0", Some(&a));
        let v = judge_gids("e0", &p, Some(&[]), why);
        assert_eq!(v.weight(), Weight::Note, "{}", v.text());
        assert!(v.text().contains("no address was found"), "{}", v.text());
    }

    #[test]
    fn what_explains_a_port_without_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let pf = root.join("devices/pci0000:00/0000:3b:00.0");
        std::fs::create_dir_all(root.join("class/net")).unwrap();
        std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
        std::fs::create_dir_all(pf.join("net/e0")).unwrap();
        std::fs::create_dir_all(root.join("devices/virtual/net/bond0")).unwrap();
        std::os::unix::fs::symlink(pf.join("net/e0"), root.join("class/net/e0")).unwrap();
        std::os::unix::fs::symlink(&pf, root.join("class/infiniband/mlx5_0")).unwrap();
        std::os::unix::fs::symlink(&pf, pf.join("device")).unwrap();
        let sys = SysRoot::new(root);
        assert_eq!(sys.no_address("mlx5_0", "e0", None), None);
        std::fs::write(pf.join("sriov_numvfs"), "0\n").unwrap();
        assert_eq!(sys.no_address("mlx5_0", "e0", None), None);
        std::fs::write(pf.join("sriov_numvfs"), "4\n").unwrap();
        assert_eq!(
            sys.no_address("mlx5_0", "e0", None),
            Some(NoAddress::SriovPf { vfs: 4 })
        );
        std::os::unix::fs::symlink("../../../../virtual/net/bond0", pf.join("net/e0/master"))
            .unwrap();
        let bond = |holder| {
            Some(NoAddress::Enslaved {
                master: "bond0".into(),
                holder,
            })
        };
        assert_eq!(sys.no_address("mlx5_0", "e0", None), bond(Holder::Unknown));
        // Live: the master must hold an address to explain it.
        let mut addrs = std::collections::BTreeMap::new();
        addrs.insert("bond0".to_string(), vec![]);
        assert_eq!(
            sys.no_address("mlx5_0", "e0", Some(&addrs)),
            Some(NoAddress::SriovPf { vfs: 4 })
        );
        addrs.insert("bond0".to_string(), vec![ip("10.0.0.1")]);
        assert_eq!(
            sys.no_address("mlx5_0", "e0", Some(&addrs)),
            bond(Holder::Device("bond0".into()))
        );
        // Without VFs, an enslaved netdev whose addresses are not found is still
        // enslaved: a warning, not a fault.
        std::fs::write(pf.join("sriov_numvfs"), "0\n").unwrap();
        addrs.insert("bond0".to_string(), vec![]);
        assert_eq!(
            sys.no_address("mlx5_0", "e0", Some(&addrs)),
            bond(Holder::NotFound)
        );
    }
}
