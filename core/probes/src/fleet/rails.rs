//! This host's rails as the agent's fleet map takes them: from the one rail map
//! (`rocewatch_sysfs::railmap`, what `rocewatch env`, `fleet topology`, preflight, doctor
//! and health read), so that the agent and the commands cannot disagree on which port
//! carries which rail.
//!
//! - The rails probed: this host's rows of the fleet's map tell the rail map each port's
//!   rail (the row whose address is on the port); a rail is probed from its port when
//!   one of the probe plugin's instances serves that port ([`probed_rails`]).
//! - The rows LLDP gives: each port at its rail in the rail map, by the rows of
//!   `[fleet] topology` when one is configured, else by PCI address order
//!   ([`lldp_ports`], what `rocewatch fleet topology` joins with LLDP too).
//! - When to look again: [`ports_key`], the ports and the addresses their RoCE v2 GIDs
//!   carry, what a rail's assignment depends on.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rocewatch_fleet::lldp::LocalPort;
use rocewatch_fleet::Nic;
use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::railmap::{RailMap, RailRow};

use super::config::Probing;

/// The rail map's rows of `nics` (this host's rows of a topology).
pub fn rail_rows<'a>(nics: impl IntoIterator<Item = &'a Nic>) -> Vec<RailRow> {
    nics.into_iter()
        .map(|n| RailRow {
            rail: usize::from(n.rail),
            addr: n.addr,
        })
        .collect()
}

/// The ports LLDP is joined with, each at its rail in `map` (a port on no rail is left
/// out: the caller names it), with the address the row takes (its first IPv4 one, else
/// its first).
pub fn lldp_ports(map: &RailMap) -> Vec<(usize, LocalPort)> {
    map.ports
        .iter()
        .filter_map(|p| {
            let addr = p.addrs.iter().find(|a| a.is_ipv4()).or(p.addrs.first());
            let local = LocalPort {
                name: p.name(),
                netdev: p.netdev.clone(),
                addr: addr.copied(),
            };
            Some((p.rail?, local))
        })
        .collect()
}

/// The rails of `rows` that `map` (made from those rows) puts on a port an instance of
/// the probe plugin probes from, keyed by the row's address (what
/// [`super::view_on_ports`] looks up), each with that instance and port. `specs[i]` is
/// instance `i`'s port (`mlx5_3:1`), device (`mlx5_3`: its ports) or `None` (the plugin's
/// default: the first device of `inv`, in the order the plugin sees them); a port two
/// instances could serve is the first one's.
pub fn probed_rails(
    map: &RailMap,
    rows: &[RailRow],
    inv: &Inventory,
    specs: &[Option<String>],
) -> BTreeMap<IpAddr, Probing> {
    let first = inv.devices.first().map(|d| d.name.as_str());
    let mut out = BTreeMap::new();
    for row in rows {
        let Some(p) = map.port_on(row.rail) else {
            continue;
        };
        let name = p.name();
        let serves = |spec: &Option<String>| match spec {
            Some(s) => *s == name || *s == p.device,
            None => Some(p.device.as_str()) == first,
        };
        if let Some(instance) = specs.iter().position(serves) {
            out.insert(
                row.addr,
                Probing {
                    instance,
                    port: name,
                },
            );
        }
    }
    out
}

/// What a rail's port depends on, read from an inventory: each port with the addresses
/// its RoCE v2 GIDs carry. Two inventories with one key give one rail map.
pub fn ports_key(inv: &Inventory) -> Vec<(String, u32, Vec<IpAddr>)> {
    let mut key: Vec<(String, u32, Vec<IpAddr>)> = inv
        .devices
        .iter()
        .flat_map(|d| {
            d.ports.iter().map(|p| {
                let addrs = rocewatch_sysfs::gid::routable_v2_gids(p)
                    .into_iter()
                    .map(|g| g.ip)
                    .collect();
                (d.name.clone(), p.port, addrs)
            })
        })
        .collect();
    key.sort();
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_sysfs::SysRoot;

    fn tree(case: &str) -> (SysRoot, Inventory) {
        let root = SysRoot::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures")
                .join(case)
                .join("sys"),
        );
        let filter = rocewatch_sysfs::inventory::DeviceFilter::new(&Default::default()).unwrap();
        let (inv, _) = rocewatch_sysfs::inventory::read_inventory(&root, &filter).unwrap();
        (root, inv)
    }

    fn at(instance: usize, port: &str) -> Probing {
        Probing {
            instance,
            port: port.into(),
        }
    }

    /// Each instance serves the rails on its port: named by port, by device, or the first
    /// device's when it names none; a port two instances could serve is the first's.
    #[test]
    fn each_rail_is_probed_by_the_instance_on_its_port() {
        let (root, inv) = tree("mlx5-roce-dual-port");
        let (a0, a1): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.1.1".parse().unwrap());
        let rows = [RailRow { rail: 0, addr: a0 }, RailRow { rail: 1, addr: a1 }];
        let map = root.rail_map(&inv, Some(&rows));
        let probed = |specs: &[Option<String>]| probed_rails(&map, &rows, &inv, specs);
        assert_eq!(
            probed(&[Some("mlx5_0:1".into()), Some("mlx5_1:1".into())]),
            BTreeMap::from([(a0, at(0, "mlx5_0:1")), (a1, at(1, "mlx5_1:1"))])
        );
        assert_eq!(probed(&[None]), BTreeMap::from([(a0, at(0, "mlx5_0:1"))]));
        assert_eq!(
            probed(&[Some("mlx5_1".into()), None, Some("mlx5_1:1".into())]),
            BTreeMap::from([(a0, at(1, "mlx5_0:1")), (a1, at(0, "mlx5_1:1"))])
        );
        assert!(probed(&[Some("mlx5_7".into())]).is_empty());
    }

    /// The eight-rail host with NIC 3 gone from the bus (the later RDMA devices took lower
    /// names): the agent probes every other rail from the port the rail map (what `env`,
    /// `fleet topology`, preflight and doctor read) puts it on, by identity: rail 4 from
    /// mlx5_3, and rail 3 from none.
    #[test]
    fn the_rails_probed_are_the_rail_maps_with_a_nic_gone() {
        let (root, inv) = tree("eight-rails-one-gone");
        let text =
            std::fs::read_to_string(root.root().parent().unwrap().join("topology.csv")).unwrap();
        let topo = rocewatch_fleet::Topology::parse("topology.csv", &text).unwrap();
        let rows = rail_rows(topo.nics_of("gpu001"));
        assert_eq!(rows.len(), 8);
        let map = root.rail_map(&inv, Some(&rows));
        let specs: Vec<Option<String>> = rocewatch_sysfs::rails::ports(&inv, &[], None)
            .iter()
            .map(|p| Some(p.name()))
            .collect();
        assert_eq!(specs.len(), 7);
        let probed = probed_rails(&map, &rows, &inv, &specs);
        let by_rail: BTreeMap<usize, String> = rows
            .iter()
            .filter_map(|r| Some((r.rail, probed.get(&r.addr)?.port.clone())))
            .collect();
        let want: BTreeMap<usize, String> = map
            .ports
            .iter()
            .filter_map(|p| Some((p.rail?, p.name())))
            .collect();
        assert_eq!(by_rail, want);
        assert_eq!(by_rail.get(&4).map(String::as_str), Some("mlx5_3:1"));
        assert!(!by_rail.contains_key(&3), "{by_rail:?}");
        // LLDP's rows take the same rails.
        let lldp: BTreeMap<usize, String> = lldp_ports(&map)
            .into_iter()
            .map(|(r, p)| (r, p.name))
            .collect();
        assert_eq!(lldp, want);
    }

    /// A port whose address changed is a new key; the order devices are listed in is not.
    #[test]
    fn the_ports_key_changes_with_an_address_only() {
        let (_, inv) = tree("eight-rails");
        let mut reversed = inv.clone();
        reversed.devices.reverse();
        assert_eq!(ports_key(&inv), ports_key(&reversed));
        let mut moved = inv.clone();
        let gid = moved.devices[5].ports[0]
            .gids
            .iter_mut()
            .find(|g| g.gid_type.as_deref() == Some("RoCE v2") && g.gid.contains("ffff"))
            .expect("an IPv4 RoCE v2 GID");
        gid.gid = "0000:0000:0000:0000:0000:ffff:0a09:0901".into();
        assert_ne!(ports_key(&inv), ports_key(&moved));
    }
}
