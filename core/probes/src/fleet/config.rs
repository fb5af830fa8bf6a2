//! `[fleet]`: where the fleet's map comes from (a topology file, or the metrics backend's
//! NIC info series), this host's place in it, and how its pinglist is probed (flows per
//! peer, their rotation, the failing flows kept, what counts as an overloaded host).
//!
//! [`FleetView`] is what the prober gets from the map: this host's ToR per rail and its
//! pinglist, on the rails whose address is on one of the ports the probe plugin's
//! instances probe from, each rail with its port.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use rocewatch_fleet::pinglist::{Options, Peer, Pinglist, Plan};
use rocewatch_fleet::{Nic, Topology};
use rocewatch_runtime::util::error::chain;

use super::flows::MAX_PATHS;

/// The failing flows a host exports at most.
pub const MAX_TOP_FAILING: usize = 1024;

/// Where the fleet's map comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetSource {
    /// `topology`: a CSV file (`host,rail,addr,tor[,tor_port]`), re-read when it changes.
    #[default]
    Topology,
    /// The NIC info series every host exports, queried over the Prometheus HTTP API.
    Prometheus,
}

fn default_query() -> String {
    // The sample's time as the value: of two series of one NIC, the newest wins.
    "timestamp(rdma_fleet_nic_info)".into()
}
fn default_refresh() -> Duration {
    Duration::from_secs(300)
}
fn default_probers() -> usize {
    rocewatch_fleet::pinglist::DEFAULT_PROBERS
}
fn default_max_peers() -> usize {
    rocewatch_fleet::pinglist::DEFAULT_MAX_PEERS
}
fn default_paths() -> u16 {
    4
}
fn default_rotation() -> Duration {
    Duration::from_secs(16)
}
fn default_top() -> usize {
    32
}
fn default_window() -> Duration {
    Duration::from_secs(60)
}
fn default_steal() -> f64 {
    0.1
}
fn default_run_queue() -> f64 {
    2.0
}
fn default_lldpcli() -> PathBuf {
    "lldpcli".into()
}
fn default_procfs() -> PathBuf {
    "/proc".into()
}

/// `[fleet]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    #[serde(default)]
    pub source: FleetSource,
    /// The topology file (`source = "topology"`; with `source = "prometheus"`, where this
    /// host's own rows come from when `lldp` is off).
    #[serde(default)]
    pub topology: Option<PathBuf>,
    /// The Prometheus HTTP API's base URL (`source = "prometheus"`): Prometheus,
    /// VictoriaMetrics (`http://vm:8428`), or anything serving `/api/v1/query`.
    #[serde(default)]
    pub url: Option<String>,
    /// The instant query giving every host's NIC info series.
    #[serde(default = "default_query")]
    pub query: String,
    /// How often the map is read again (the file when it changed, the query always).
    #[serde(
        default = "default_refresh",
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
    )]
    pub refresh: Duration,
    /// This host's name in the map (default: `agent.host_name`, else the kernel's host
    /// name up to its first dot).
    #[serde(default)]
    pub host: Option<String>,
    /// This host's rows (the NIC info series) from `lldpd`'s neighbours rather than from
    /// the topology file.
    #[serde(default)]
    pub lldp: bool,
    #[serde(default = "default_lldpcli")]
    pub lldpcli: PathBuf,
    /// Cross-ToR probers per ordered pair of ToRs and rail.
    #[serde(default = "default_probers")]
    pub probers: usize,
    /// Peers per host at most.
    #[serde(default = "default_max_peers")]
    pub max_peers: usize,
    /// Flows per peer, each with its own UDP source port (1..=16).
    #[serde(default = "default_paths")]
    pub paths: u16,
    /// Each flow takes a new source port this often (0s: never).
    #[serde(
        default = "default_rotation",
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
    )]
    pub path_rotation: Duration,
    /// The failing flows exported, worst first.
    #[serde(default = "default_top")]
    pub top_failing: usize,
    /// The window a flow's loss is judged over.
    #[serde(
        default = "default_window",
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
    )]
    pub failing_window: Duration,
    /// A round's timeouts are this host's, not the network's, when the CPU time stolen
    /// over it is above this share ...
    #[serde(default = "default_steal")]
    pub overload_steal: f64,
    /// ... or more tasks than this are runnable per CPU.
    #[serde(default = "default_run_queue")]
    pub overload_run_queue: f64,
    /// Where `/proc/stat` is read from.
    #[serde(default = "default_procfs")]
    pub procfs_root: PathBuf,
}

impl FleetConfig {
    /// What is wrong with the settings: (key, message).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |k: &str, m: String| Err((format!("fleet.{k}"), m));
        match self.source {
            FleetSource::Topology if self.topology.is_none() => {
                return bad(
                    "topology",
                    "source = \"topology\" needs the topology file's path".into(),
                )
            }
            FleetSource::Prometheus => match &self.url {
                None => {
                    return bad(
                        "url",
                        "source = \"prometheus\" needs the Prometheus HTTP API's URL (http://vm:8428)".into(),
                    )
                }
                Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                    return bad("url", format!("{u:?}: give an http:// or https:// URL"))
                }
                Some(_) if !self.lldp && self.topology.is_none() => {
                    return bad(
                        "lldp",
                        "with source = \"prometheus\", this host's own rows come from LLDP (lldp = true) or a topology file (topology = PATH)".into(),
                    )
                }
                _ => {}
            },
            FleetSource::Topology => {}
        }
        if !(1..=MAX_PATHS).contains(&self.paths) {
            return bad("paths", format!("{}: give 1 to {MAX_PATHS}", self.paths));
        }
        if let Some(h) = &self.host {
            rocewatch_fleet::topology::name(h, "host", false)
                .map_err(|e| ("fleet.host".to_string(), e))?;
        }
        if self.top_failing > MAX_TOP_FAILING {
            return bad(
                "top_failing",
                format!(
                    "{}: at most {MAX_TOP_FAILING} (series per host)",
                    self.top_failing
                ),
            );
        }
        if self.path_rotation.subsec_nanos() != 0 || self.failing_window.subsec_nanos() != 0 {
            let k = if self.path_rotation.subsec_nanos() != 0 {
                "path_rotation"
            } else {
                "failing_window"
            };
            return bad(k, "give whole seconds".into());
        }
        if !self.failing_window.as_secs().is_multiple_of(6) {
            return bad(
                "failing_window",
                format!(
                    "{:?}: give a multiple of 6 s (it is judged in six buckets)",
                    self.failing_window
                ),
            );
        }
        if !(self.overload_steal > 0.0 && self.overload_steal < 1.0) {
            return bad(
                "overload_steal",
                format!("{}: give a share between 0 and 1", self.overload_steal),
            );
        }
        if self.probers == 0 || self.max_peers == 0 || self.top_failing == 0 {
            let k = if self.probers == 0 {
                "probers"
            } else if self.max_peers == 0 {
                "max_peers"
            } else {
                "top_failing"
            };
            return bad(k, "must be at least 1".into());
        }
        let hour = Duration::from_secs(3600);
        for (k, v, min, max) in [
            ("refresh", self.refresh, Duration::from_secs(10), 24 * hour),
            (
                "failing_window",
                self.failing_window,
                Duration::from_secs(6),
                hour,
            ),
            ("path_rotation", self.path_rotation, Duration::ZERO, hour),
        ] {
            if v < min || v > max {
                return bad(k, format!("{v:?}: give {min:?} to {max:?}"));
            }
        }
        for (k, v) in [
            ("overload_steal", self.overload_steal),
            ("overload_run_queue", self.overload_run_queue),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(k, format!("{v}: give a positive number"));
            }
        }
        if self.query.trim().is_empty() {
            return bad("query", "is empty".into());
        }
        Ok(())
    }

    /// The pinglist options.
    pub fn options(&self) -> Options {
        Options {
            probers: self.probers,
            max_peers: self.max_peers,
        }
    }
}

/// The local RDMA port a rail is probed from: the probe plugin instance (its index among
/// the prober's instances) and the port's name (`mlx5_3:1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probing {
    pub instance: usize,
    pub port: String,
}

/// What the prober gets from the fleet's map.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetView {
    pub host: String,
    /// This host's ToR on each rail it probes.
    pub tors: BTreeMap<u8, String>,
    /// Its pinglist on those rails.
    pub peers: Vec<Peer>,
    /// The port each of those rails is probed from (empty in the fleet simulator, which
    /// has no ports).
    pub ports: BTreeMap<u8, Probing>,
    /// Rails of this host in the map whose address is on no port probed from (not
    /// probed).
    pub other_rails: Vec<u8>,
    /// The peers of those rails.
    pub other_rail_peers: usize,
}

/// This host's view of `topo`: its pinglist, on the rails whose address is one of
/// `local` (the probed ports' addresses, each with the port it is on; empty: every rail,
/// with no port).
pub fn view_of(
    topo: &Topology,
    host: &str,
    opts: Options,
    local: &BTreeMap<IpAddr, Probing>,
) -> Result<FleetView, String> {
    let list = Plan::new(topo, opts).of(host).map_err(|e| e.to_string())?;
    Ok(view_on_ports(topo, list, local))
}

/// This host's view from its pinglist (`list.host`'s, drawn from `topo`), on the rails
/// whose address is one of `local` (empty: every rail), with no port (the simulator's).
pub fn view_of_list(topo: &Topology, list: Pinglist, local: &BTreeSet<IpAddr>) -> FleetView {
    let mut v = view_on_ports(topo, list, &BTreeMap::new());
    if !local.is_empty() {
        let keep: BTreeSet<u8> = topo
            .nics_of(&v.host)
            .filter(|n| local.contains(&n.addr))
            .map(|n| n.rail)
            .collect();
        let (peers, others): (Vec<Peer>, Vec<Peer>) =
            v.peers.into_iter().partition(|p| keep.contains(&p.rail));
        v.other_rails = v
            .tors
            .keys()
            .filter(|r| !keep.contains(r))
            .copied()
            .collect();
        v.tors.retain(|r, _| keep.contains(r));
        v.peers = peers;
        v.other_rail_peers = others.len();
    }
    v
}

/// This host's view from its pinglist, each rail probed from the port its address is on
/// (`local`; empty: every rail, with no port).
pub fn view_on_ports(
    topo: &Topology,
    list: Pinglist,
    local: &BTreeMap<IpAddr, Probing>,
) -> FleetView {
    let host = list.host.as_str();
    let mut tors = BTreeMap::new();
    let mut ports = BTreeMap::new();
    let mut other_rails = Vec::new();
    for n in topo.nics_of(host) {
        match local.get(&n.addr) {
            Some(p) => {
                ports.insert(n.rail, p.clone());
                tors.insert(n.rail, n.tor.clone());
            }
            None if local.is_empty() => {
                tors.insert(n.rail, n.tor.clone());
            }
            None => other_rails.push(n.rail),
        }
    }
    let host = host.to_string();
    let (peers, others): (Vec<Peer>, Vec<Peer>) = list
        .peers
        .into_iter()
        .partition(|p| tors.contains_key(&p.rail));
    FleetView {
        host,
        tors,
        peers,
        ports,
        other_rails,
        other_rail_peers: others.len(),
    }
}

/// The NICs the metrics backend knows: `GET {url}/api/v1/query?query=...` (blocking,
/// within `timeout`), and the series it could not read.
pub fn fetch_prometheus(
    url: &str,
    query: &str,
    timeout: Duration,
) -> Result<(Vec<Nic>, Vec<String>), String> {
    let endpoint = format!("{}/api/v1/query", url.trim_end_matches('/'));
    let client = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| format!("{endpoint}: {e}"))?;
    let resp = client
        .get(&endpoint)
        .query(&[("query", query)])
        .send()
        .map_err(|e| format!("{endpoint}: {}", chain(&e)))?;
    let status = resp.status();
    // At most 64 MiB, read as it comes: 10,000 hosts of 8 NICs are about 20 MiB of JSON.
    const MAX: u64 = 64 << 20;
    let mut body = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(resp, MAX + 1), &mut body)
        .map_err(|e| format!("{endpoint}: reading the answer: {}", chain(&e)))?;
    if body.len() as u64 > MAX {
        return Err(format!("{endpoint}: the answer is over {} MiB", MAX >> 20));
    }
    rocewatch_fleet::promapi::parse_nics(&body).map_err(|e| {
        if status.is_success() {
            format!("{endpoint}: {e}")
        } else {
            format!("{endpoint}: HTTP {status}: {e}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_validate_naming_the_key() {
        let cfg = |t: &str| -> FleetConfig { toml::from_str(t).unwrap() };
        let ok = cfg("topology = \"/etc/rocewatch/topology.csv\"");
        assert!(ok.validate().is_ok());
        assert_eq!((ok.paths, ok.max_peers, ok.probers), (4, 600, 2));
        assert_eq!(ok.path_rotation, Duration::from_secs(16));
        for (t, key) in [
            ("", "fleet.topology"),
            ("source = \"prometheus\"", "fleet.url"),
            ("source = \"prometheus\"\nurl = \"vm:8428\"", "fleet.url"),
            (
                "source = \"prometheus\"\nurl = \"http://vm:8428\"",
                "fleet.lldp",
            ),
            ("topology = \"t\"\npaths = 0", "fleet.paths"),
            ("topology = \"t\"\npaths = 17", "fleet.paths"),
            ("topology = \"t\"\nmax_peers = 0", "fleet.max_peers"),
            ("topology = \"t\"\nrefresh = \"1s\"", "fleet.refresh"),
            (
                "topology = \"t\"\noverload_steal = 0.0",
                "fleet.overload_steal",
            ),
            (
                "topology = \"t\"\noverload_steal = 1.0",
                "fleet.overload_steal",
            ),
            (
                "topology = \"t\"\ntop_failing = 100000",
                "fleet.top_failing",
            ),
            (
                "topology = \"t\"\nfailing_window = \"10s\"",
                "fleet.failing_window",
            ),
            (
                "topology = \"t\"\npath_rotation = \"1500ms\"",
                "fleet.path_rotation",
            ),
            ("topology = \"t\"\nhost = \"a b\"", "fleet.host"),
        ] {
            assert_eq!(cfg(t).validate().unwrap_err().0, key, "{t}");
        }
        assert!(
            cfg("source = \"prometheus\"\nurl = \"http://vm:8428\"\nlldp = true")
                .validate()
                .is_ok()
        );
        assert!(toml::from_str::<FleetConfig>("topolgy = \"t\"").is_err());
    }

    #[test]
    fn the_view_keeps_the_rails_on_the_probed_ports_each_with_its_port() {
        let topo = Topology::parse(
            "t.csv",
            "host,rail,addr,tor\na,0,10.0.0.1,t1\na,1,10.1.0.1,t1b\na,2,10.2.0.1,t1c\nb,0,10.0.0.2,t1\nb,1,10.1.0.2,t1b\nb,2,10.2.0.2,t1c\nc,0,10.0.0.3,t2\nc,1,10.1.0.3,t2b\n",
        )
        .unwrap();
        let all = view_of(&topo, "a", Options::default(), &BTreeMap::new()).unwrap();
        assert_eq!((all.peers.len(), all.tors.len()), (5, 3));
        assert!(all.ports.is_empty());
        let port = |instance: usize, port: &str| Probing {
            instance,
            port: port.into(),
        };
        // Rails 1 and 2 are on two ports (two plugin instances); rail 0 on none.
        let local = BTreeMap::from([
            ("10.1.0.1".parse().unwrap(), port(0, "mlx5_1:1")),
            ("10.2.0.1".parse().unwrap(), port(1, "mlx5_2:1")),
        ]);
        let v = view_of(&topo, "a", Options::default(), &local).unwrap();
        assert_eq!(
            v.tors,
            BTreeMap::from([(1, "t1b".to_string()), (2, "t1c".to_string())])
        );
        assert_eq!(
            v.ports,
            BTreeMap::from([(1, port(0, "mlx5_1:1")), (2, port(1, "mlx5_2:1"))])
        );
        assert!(v.peers.iter().all(|p| p.rail != 0), "{v:?}");
        assert_eq!(v.peers.len(), 3, "{v:?}");
        assert_eq!((v.other_rails.clone(), v.other_rail_peers), (vec![0], 2));
        // The simulator's form: the rails of the addresses, no port.
        let list = Plan::new(&topo, Options::default()).of("a").unwrap();
        let s = view_of_list(&topo, list, &BTreeSet::from(["10.1.0.1".parse().unwrap()]));
        assert_eq!((s.tors.len(), s.peers.len(), s.other_rail_peers), (1, 2, 3));
        assert_eq!(s.other_rails, vec![0, 2]);
        let e = view_of(&topo, "zz", Options::default(), &local).unwrap_err();
        assert!(e.contains("zz"), "{e}");
    }
}
