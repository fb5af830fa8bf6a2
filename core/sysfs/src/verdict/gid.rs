//! The verdict on a RoCE port's GIDs: RoCE v2 traffic between hosts is addressed by a RoCE
//! v2 GID that holds an IP address (the kernel adds one for each address of the port's
//! netdev and of the devices above it: a VLAN, the bond it is the active slave of;
//! drivers/infiniband/core/roce_gid_mgmt.c). A port without one carries no RoCE v2 traffic,
//! unless something explains why its traffic is elsewhere.

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
    /// a bridge) holds the addresses, and the kernel gives the GIDs to its active slave.
    Enslaved { master: String },
    /// The port's PCI function is an SR-IOV PF with VFs enabled (`sriov_numvfs`,
    /// drivers/pci/iov.c): the VFs, RDMA devices of their own, carry the traffic.
    SriovPf { vfs: u32 },
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
            (GidKind::Explained, Some(NoAddress::Enslaved { master })) => format!(
                "{none}: {} is enslaved to {master}, which holds the addresses (the kernel gives their GIDs to its active slave's port)",
                self.netdev
            ),
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
    /// live host's: an enslaved netdev whose master has none is not explained by it.
    pub fn no_address(
        &self,
        dev: &str,
        netdev: &str,
        addresses: Option<&std::collections::BTreeMap<String, Vec<IpAddr>>>,
    ) -> Option<NoAddress> {
        let master = std::fs::read_link(self.netdev_dir(netdev).join("master"))
            .ok()
            .and_then(|l| Some(l.file_name()?.to_string_lossy().into_owned()));
        if let Some(master) = master {
            let holds = addresses.is_none_or(|a| a.get(&master).is_some_and(|v| !v.is_empty()));
            if holds {
                return Some(NoAddress::Enslaved { master });
            }
        }
        let numvfs = self.device_dir(dev).join("device/sriov_numvfs");
        match read_number(&numvfs) {
            Some(vfs) if vfs > 0 => Some(NoAddress::SriovPf { vfs }),
            _ => None,
        }
    }
}

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
        let bond = Some(NoAddress::Enslaved {
            master: "bond0".into(),
        });
        assert_eq!(sys.no_address("mlx5_0", "e0", None), bond);
        // Live: the master must hold an address to explain it.
        let mut addrs = std::collections::BTreeMap::new();
        addrs.insert("bond0".to_string(), vec![]);
        assert_eq!(
            sys.no_address("mlx5_0", "e0", Some(&addrs)),
            Some(NoAddress::SriovPf { vfs: 4 })
        );
        addrs.insert("bond0".to_string(), vec![ip("10.0.0.1")]);
        assert_eq!(sys.no_address("mlx5_0", "e0", Some(&addrs)), bond);
    }
}
