//! This host in the fleet: its NICs at their ranks (the rails).

use rocewatch_plugin_api::Inventory;
use rocewatch_preflight as pf;

/// This host's NICs in `rocewatch env`'s order (`appenv::ports`: devices by name, ports
/// by number), down ones kept at their rank.
pub fn rails_of(host: &str, inv: &Inventory) -> pf::HostRails {
    let ports = rocewatch_doctor::appenv::ports(inv, &[], None);
    let nics = ports
        .iter()
        .map(|p| {
            let rate = inv
                .devices
                .iter()
                .find(|d| d.name == p.device)
                .and_then(|d| d.ports.iter().find(|x| x.port == p.port))
                .and_then(|x| x.rate_bps);
            pf::Nic {
                name: p.name(),
                netdev: p.netdev.clone(),
                up: p.up,
                line_rate_gbps: rate.map(|b| b as f64 / 1e9),
                addr: p.ipv4.map(|ip| ip.to_string()),
            }
        })
        .collect();
    pf::HostRails {
        host: host.to_string(),
        nics,
    }
}
