//! The rails: which rail each RDMA port is on (`rocewatch_sysfs::railmap`, the one rail
//! map `rocewatch env`, `fleet topology` and preflight print too), and each rail of the
//! fleet topology that no port of this host carries.

use rocewatch_sysfs::railmap::RailMap;

use crate::check::{check, Check, Status};

/// One line with the map; one failure per rail of the topology that no port carries.
pub(crate) fn rail_checks(map: &RailMap) -> Vec<Check> {
    let mut out = vec![check(
        "rails",
        "",
        Status::Info,
        format!("{}; rails told {}", map.line(), map.by.words()),
        None,
    )];
    for m in &map.missing {
        out.push(check(
            "rails",
            &format!("rail {}", m.rail),
            Status::Fail,
            format!(
                "rail {} of the fleet topology ({}) is on no RDMA port of this host: its NIC is gone or does not carry its address",
                m.rail, m.addr
            ),
            Some(format!(
                "find the NIC of rail {}: `rdma link`, `lspci -d 15b3:` (or the vendor's ID), `dmesg`; give its port the address {} if the NIC is there",
                m.rail, m.addr
            )),
        ));
    }
    out
}
