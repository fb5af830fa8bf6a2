//! `mtu` and `rdma_mtu`: the netdev's MTU file, and the RoCE MTU it implies.

use std::path::{Path, PathBuf};

use rocewatch_plugin_api::*;

use crate::attr::{file_setting, value};

/// `mtu` and `rdma_mtu` of the netdev whose `class/net/<if>` directory is `nd`.
pub(crate) fn mtu_settings(nd: &Path) -> [(&'static str, Setting); 2] {
    // The RoCE MTU follows the netdev's; an MTU that cannot be read leaves it
    // the same kind of answer.
    let mtu = file_setting(&mtu_file(nd));
    let rdma_mtu = match &mtu {
        Setting::Value(m) => match m
            .parse()
            .ok()
            .and_then(rocewatch_sysfs::parse::rdma_mtu_for)
        {
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
