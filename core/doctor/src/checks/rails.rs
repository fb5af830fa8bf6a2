//! The rails: which rail each RDMA port is on (`rocewatch_sysfs::railmap`, the one rail
//! map `rocewatch env`, `fleet topology` and preflight print too), and every NIC the
//! host should have and does not show (`rocewatch_sysfs::verdict::nics`, the verdict
//! `health`'s `devices` check gives): a rail of the fleet topology no port carries, an
//! RDMA function without an RDMA device.

use rocewatch_sysfs::railmap::RailMap;
use rocewatch_sysfs::verdict::nics::MissingNic;

use crate::check::{check, Check, Status};

/// One line with the map; one failure per NIC missing (a warning for an RDMA-less
/// function no row of the topology needs: `MissingNic::drains`), naming its rail and
/// PCI address and what would bring it back.
pub(crate) fn rail_checks(map: &RailMap, missing: &[MissingNic]) -> Vec<Check> {
    let mut out = vec![check(
        "rails",
        "",
        Status::Info,
        format!("{}; rails told {}", map.line(), map.by.words()),
        None,
    )];
    for m in missing {
        let subject = match (&m.rail, &m.pci) {
            (Some((r, _)), _) => format!("rail {r}"),
            (None, Some(p)) => p.clone(),
            (None, None) => String::new(),
        };
        out.push(check(
            "rails",
            &subject,
            if m.drains() {
                Status::Fail
            } else {
                Status::Warn
            },
            m.evidence(),
            Some(m.fix()),
        ));
    }
    out
}
