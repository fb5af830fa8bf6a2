//! The address a GID carries: a RoCE v2 GID (`ports/<n>/gids/<i>` of an RDMA device) is the
//! IPv4 address as `::ffff:a.b.c.d`, or the IPv6 address itself.

use std::net::IpAddr;

/// The IPv4 address a RoCE v2 GID carries (`::ffff:a.b.c.d`), or the IPv6 address it is.
pub fn gid_ip(gid: &str) -> Option<IpAddr> {
    let v6: std::net::Ipv6Addr = gid.parse().ok()?;
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
