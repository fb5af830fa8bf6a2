//! The address a GID carries: a RoCE v2 GID (`ports/<n>/gids/<i>` of an RDMA device) is the
//! IPv4 address as `::ffff:a.b.c.d`, or the IPv6 address itself; and the RoCE v2 GIDs of a
//! port that an IP route can reach ([`routable_v2_gids`]).

use std::net::IpAddr;

use rocewatch_plugin_api::Port;

/// A RoCE v2 GID of a port that holds a routable address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V2Gid {
    /// The address it carries.
    pub ip: IpAddr,
    /// Its slot in the port's GID table (`gids/<index>`), what an application names.
    pub index: u32,
    /// The netdev whose address it is (`gid_attrs/ndevs/<index>`): the port's own, or a
    /// VLAN or bond master above it.
    pub netdev: Option<String>,
}

/// The IPv4 address a RoCE v2 GID carries (`::ffff:a.b.c.d`), or the IPv6 address it is.
pub fn gid_ip(gid: &str) -> Option<IpAddr> {
    let v6: std::net::Ipv6Addr = gid.parse().ok()?;
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

/// Whether `ip` is an IPv6 link-local address (`fe80::/10`): every RoCE port has one, made
/// from its MAC, and no route reaches it.
pub fn is_link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
}

/// The port's RoCE v2 GIDs that hold an address other than a link-local one: those RoCE v2
/// traffic between hosts can use, in table order.
pub fn routable_v2_gids(p: &Port) -> Vec<V2Gid> {
    p.gids
        .iter()
        .filter(|g| g.gid_type.as_deref() == Some("RoCE v2"))
        .filter_map(|g| {
            let ip = gid_ip(&g.gid).filter(|ip| !is_link_local(ip))?;
            Some(V2Gid {
                ip,
                index: g.index,
                netdev: g.netdev.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_plugin_api::Gid;

    #[test]
    fn routable_v2_gids_leave_out_v1_and_link_local() {
        let gid = |index, gid: &str, t: &str| Gid {
            index,
            gid: gid.into(),
            gid_type: Some(t.into()),
            netdev: Some("ens1f0np0".into()),
        };
        let p = Port {
            gids: vec![
                gid(0, "fe80:0000:0000:0000:ba59:9fff:fec1:2a40", "IB/RoCE v1"),
                gid(1, "fe80:0000:0000:0000:ba59:9fff:fec1:2a40", "RoCE v2"),
                gid(2, "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
                gid(3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2"),
                gid(4, "fd00:0000:0000:0000:0000:0000:0000:0001", "RoCE v2"),
                gid(5, "febf:0000:0000:0000:0000:0000:0000:0001", "RoCE v2"),
                gid(6, "fec0:0000:0000:0000:0000:0000:0000:0001", "RoCE v2"),
            ],
            ..Default::default()
        };
        let got: Vec<(u32, String)> = routable_v2_gids(&p)
            .iter()
            .map(|g| (g.index, g.ip.to_string()))
            .collect();
        assert_eq!(
            got,
            [
                (3, "10.0.0.1".into()),
                (4, "fd00::1".into()),
                (6, "fec0::1".into())
            ]
        );
    }

    #[test]
    fn gid_addresses() {
        assert_eq!(
            gid_ip("0000:0000:0000:0000:0000:ffff:0a00:0001"),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            gid_ip("fe80:0000:0000:0000:ba59:9fff:fec1:2a40"),
            Some("fe80::ba59:9fff:fec1:2a40".parse().unwrap())
        );
        assert_eq!(gid_ip("nonsense"), None);
    }
}
