//! This host's names: the agent's, and the one a fleet or job list spells.

use super::Config;

/// The host name: config, else the kernel's.
pub fn host_name(cfg: &Config) -> String {
    cfg.agent.host_name.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".into())
    })
}

/// This host's name as a fleet or job list spells it: the configured `agent.host_name` as
/// it is (it may be an FQDN, as Kubernetes node names often are), else the kernel's up to
/// its first dot (as slurmd takes it).
pub fn fleet_host_name(cfg: &Config) -> String {
    match &cfg.agent.host_name {
        Some(name) => name.clone(),
        None => {
            let name = host_name(cfg);
            name.split('.').next().unwrap_or(&name).to_string()
        }
    }
}

/// This host's name in the fleet's map: `[fleet] host`, else the agent's.
pub fn fleet_host(cfg: &Config) -> String {
    cfg.fleet
        .as_ref()
        .and_then(|f| f.host.clone())
        .unwrap_or_else(|| fleet_host_name(cfg))
}
