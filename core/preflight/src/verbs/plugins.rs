//! The verbs probe plugin of each ACTIVE rail a sweep measures with: its configuration
//! (the rail's device and port, its responder on `tcp_port + rank` serving bandwidth
//! tests), and, once the caller has started them, each rank's started plugin or why it
//! has none.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rocewatch_runtime::host::registry::{Entry, Origin, State};
use rocewatch_runtime::host::settings::ExternalPluginConfig;

use super::Settings;
use crate::rails::HostRails;

/// An ACTIVE rail of this host: its rank, device and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rank {
    pub rank: usize,
    pub device: String,
    pub port: u8,
}

/// A rank whose responder port would be past 65535.
#[derive(Debug, thiserror::Error)]
#[error("--tcp-port {tcp_port} + rank {rank} is past 65535")]
pub struct PortPastMax {
    pub tcp_port: u16,
    pub rank: usize,
    #[source]
    source: std::num::TryFromIntError,
}

/// The ACTIVE rails of `rails` (NICs named DEVICE:PORT), in rank order.
pub fn active_ranks(rails: &HostRails) -> Vec<Rank> {
    rails
        .nics
        .iter()
        .enumerate()
        .filter(|(_, n)| n.up)
        .filter_map(|(k, n)| {
            let (dev, port) = n.name.rsplit_once(':')?;
            Some(Rank {
                rank: k,
                device: dev.to_string(),
                port: port.parse().ok()?,
            })
        })
        .collect()
}

/// The plugin of each rank, in the order of `ranks`: the verbs `.so` at `path` on the
/// rank's device and port, its responder on `tcp_port + rank` serving bandwidth tests,
/// each call bounded by a test's duration and 30 s.
pub fn configs(
    ranks: &[Rank],
    path: &Path,
    tcp_port: u16,
    settings: &Settings,
) -> Result<Vec<ExternalPluginConfig>, PortPastMax> {
    let limit = settings.duration + Duration::from_secs(30);
    let mut out = Vec::new();
    for r in ranks {
        let tcp = u16::try_from(usize::from(tcp_port) + r.rank).map_err(|source| PortPastMax {
            tcp_port,
            rank: r.rank,
            source,
        })?;
        let mut p = rocewatch_probes::plugin_config(
            path.to_path_buf(),
            limit,
            &Some(r.device.clone()),
            tcp,
            true,
            false,
            Duration::ZERO,
        );
        p.options["port"] = r.port.into();
        p.options["serve_bandwidth"] = true.into();
        out.push(p);
    }
    Ok(out)
}

/// Each rank's started plugin, from the registry's `entries` (those loaded from files are
/// the plugins of [`configs`], in its order), or why it has none: `path`'s error when
/// there was no plugin to start.
pub fn started(
    ranks: &[Rank],
    entries: &[Entry],
    path: &Result<PathBuf, String>,
) -> HashMap<usize, Result<Entry, String>> {
    let external: Vec<&Entry> = entries
        .iter()
        .filter(|e| matches!(e.origin, Origin::File(_)))
        .collect();
    let mut out = HashMap::new();
    for (i, r) in ranks.iter().enumerate() {
        let (dev, port) = (&r.device, r.port);
        let got = match external.get(i) {
            _ if path.is_err() => Err(path.clone().unwrap_err()),
            Some(e) if e.instance.is_some() && e.status().state == State::Started => {
                Ok((*e).clone())
            }
            Some(e) => Err(e
                .status()
                .last_error
                .unwrap_or_else(|| format!("the verbs plugin on {dev} port {port} did not start"))),
            None => Err(format!("no verbs plugin on {dev} port {port}")),
        };
        out.insert(r.rank, got);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rails::Nic;

    fn nic(name: &str, up: bool) -> Nic {
        Nic {
            name: name.into(),
            netdev: None,
            up,
            line_rate_gbps: None,
            addr: None,
        }
    }

    fn settings() -> Settings {
        Settings {
            control_port: 18620,
            patience: Duration::from_secs(60),
            duration: Duration::from_secs(5),
            size: 65536,
            qps: 4,
            probes: 10,
            line_rate_gbps: None,
            token: None,
        }
    }

    /// Down rails keep their rank and get no plugin; each plugin serves on its rank's
    /// port; a rank past 65535 is refused naming it; without the plugin every rank says
    /// why.
    #[test]
    fn a_plugin_per_active_rank_on_its_port() {
        let rails = HostRails {
            host: "a".into(),
            nics: vec![
                nic("mlx5_0:1", true),
                nic("mlx5_1:1", false),
                nic("mlx5_2:2", true),
            ],
        };
        let ranks = active_ranks(&rails);
        assert_eq!(
            ranks
                .iter()
                .map(|r| (r.rank, r.device.as_str(), r.port))
                .collect::<Vec<_>>(),
            [(0, "mlx5_0", 1), (2, "mlx5_2", 2)]
        );
        let c = configs(&ranks, Path::new("/p.so"), 18540, &settings()).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].options["port"], 2);
        assert_eq!(c[1].options["serve_bandwidth"], true);
        assert_eq!(c[1].options["tcp_port"], 18542, "{}", c[1].options);
        let e = configs(&ranks, Path::new("/p.so"), 65535, &settings()).unwrap_err();
        assert_eq!(e.to_string(), "--tcp-port 65535 + rank 2 is past 65535");
        let none = started(&ranks, &[], &Err("no plugin here".into()));
        assert_eq!(none[&2].as_ref().err().unwrap(), "no plugin here");
        let unstarted = started(&ranks, &[], &Ok("/p.so".into()));
        assert_eq!(
            unstarted[&0].as_ref().err().unwrap(),
            "no verbs plugin on mlx5_0 port 1"
        );
    }
}
