//! The path MTU to a peer: packets of the RoCE MTU reach it unfragmented (`ping -M do`).

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;
use crate::tool::run_tool;

/// Path MTU to the peer: the largest ICMP echo that passes without fragmentation
/// (`ping -M do`), tried at the netdev's MTU.
pub(crate) fn peer_mtu_check(peer: &str, mtu: u32, nd: &str) -> Check {
    let size = mtu.saturating_sub(28).to_string();
    match run_tool("ping", &["-M", "do", "-c", "1", "-W", "2", "-s", &size, peer]) {
        None => check("mtu", peer, Status::Skip, "ping is not installed: the path MTU to the peer was not measured", None),
        Some(Ok(_)) => check(
            "mtu",
            peer,
            Status::Pass,
            format!("{mtu}-byte packets reach {peer} unfragmented (ping -M do -s {size})"),
            None,
        ),
        Some(Err(e)) => check(
            "mtu",
            peer,
            Status::Fail,
            format!("{mtu}-byte packets do not reach {peer} unfragmented: {e}"),
            Some(format!(
                "set the same MTU on {nd}, the switch ports and the peer (ip link set {} mtu {mtu} on the peer), or lower it here",
                word(nd)
            )),
        ),
    }
}
