//! The RoCE MTU a netdev MTU implies.

/// The RoCE MTU a netdev MTU allows: the largest IB MTU that fits after the RoCE v2
/// headers (GRH 40, UDP 8, BTH 12, extended headers 32, ICRC 4: 96 bytes, as the
/// kernel's `iboe_get_mtu` counts them).
pub fn rdma_mtu_for(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(96)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= room)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_mtu_from_netdev_mtu() {
        assert_eq!(rdma_mtu_for(9000), Some(4096));
        assert_eq!(rdma_mtu_for(4200), Some(4096));
        assert_eq!(rdma_mtu_for(4191), Some(2048));
        assert_eq!(rdma_mtu_for(1500), Some(1024));
        assert_eq!(rdma_mtu_for(300), None);
    }
}
