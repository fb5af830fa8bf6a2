//! The driver and firmware of the RDMA devices: devices of one driver should run one
//! firmware.

use std::collections::BTreeMap;

use rocewatch_plugin_api::Inventory;

use super::check::{check, Check, Status};

/// One check per driver: the firmware its devices run.
pub(super) fn firmware_checks(inv: &Inventory) -> Vec<Check> {
    let mut out = Vec::new();
    let mut fw: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for d in &inv.devices {
        fw.entry(d.driver.clone().unwrap_or_else(|| "unknown".into()))
            .or_default()
            .insert(d.fw_ver.clone().unwrap_or_else(|| "unknown".into()));
    }
    for (driver, versions) in fw {
        let v: Vec<String> = versions.into_iter().collect();
        out.push(if v.len() == 1 && v[0] == "unknown" {
            check(
                "firmware",
                &driver,
                Status::Info,
                "the devices report no firmware version (soft-RoCE has none)",
                None,
            )
        } else if v.len() > 1 {
            check(
                "firmware",
                &driver,
                Status::Warn,
                format!("{driver} devices run different firmware: {}", v.join(", ")),
                Some("update every NIC to one firmware (mlxfwmanager / the vendor's tool)".into()),
            )
        } else {
            check(
                "firmware",
                &driver,
                Status::Pass,
                format!("firmware {} on every device", v[0]),
                None,
            )
        });
    }
    out
}
