//! `mtu` and `rdma_mtu`: the netdev's MTU file, and the RoCE MTU it implies.

use std::path::{Path, PathBuf};

use rocewatch_plugin_api::*;

use crate::attr::{file_setting, value};

/// The RoCE MTU a netdev MTU allows: the largest IB MTU that fits after the RoCE v2
/// headers (GRH 40, UDP 8, BTH 12, extended headers 32, ICRC 4: 96 bytes, as the
/// kernel's `iboe_get_mtu` counts them).
pub fn rdma_mtu_for(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(96)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= room)
}

/// `mtu` and `rdma_mtu` of the netdev whose `class/net/<if>` directory is `nd`.
pub(crate) fn mtu_settings(nd: &Path) -> [(&'static str, Setting); 2] {
    // The RoCE MTU follows the netdev's; an MTU that cannot be read leaves it
    // the same kind of answer.
    let mtu = file_setting(&mtu_file(nd));
    let rdma_mtu = match &mtu {
        Setting::Value(m) => match m.parse().ok().and_then(rdma_mtu_for) {
            Some(r) => value(r.to_string()),
            None => Setting::Unsupported,
        },
        other => other.clone(),
    };
    [("mtu", mtu), ("rdma_mtu", rdma_mtu)]
}

/// The `mtu` file of the netdev at `nd`.
pub(crate) fn mtu_file(nd: &Path) -> PathBuf {
    nd.join("mtu")
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
