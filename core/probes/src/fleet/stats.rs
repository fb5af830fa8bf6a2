//! Probe statistics of a fleet pinglist, bounded per host whatever the fleet's size:
//! results by class, path and outcome; RTTs by class and path; and the failing flows,
//! only while they fail, the worst `top_failing` of them. Never a series per healthy pair.
//!
//! Time is the caller's (seconds), so that the fleet simulator feeds this code simulated
//! rounds exactly as the prober feeds it real ones.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use rocewatch_fleet::pinglist::{Class, Peer};
use rocewatch_metrics::names;
use rocewatch_plugin_api::{Attributes, ProbeOutcome, Sample, Value};

use crate::stats::sample;

/// This host's name on fleet series.
pub const ATTR_HOST: &str = "host";
/// This host's ToR on the flow's rail.
pub const ATTR_TOR: &str = "tor";
/// The rail of the flow (the peer's rail in the pinglist: both ends are on it).
pub const ATTR_RAIL: &str = "rail";
/// The local RDMA device (and port) the flow's rail is probed from, where known.
pub const ATTR_DEVICE: &str = "device";
/// `same_tor` or `cross_tor`.
pub const ATTR_CLASS: &str = "class";
/// The flow's index among the peer's flows.
pub const ATTR_PATH: &str = "path";
/// `ok`, `timeout`, `failed`, `host_overloaded`.
pub const ATTR_OUTCOME: &str = "outcome";
/// The peer's address, host and ToR.
pub const ATTR_PEER: &str = "peer";
pub const ATTR_PEER_HOST: &str = "peer_host";
pub const ATTR_PEER_TOR: &str = "peer_tor";

/// How one probe of a flow ended, as the fleet counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Ok,
    Timeout,
    /// No connection to the peer (refused, unreachable, its side channel silent) or the
    /// queue pair failed in flight (`QP error: work completion status ...`).
    Failed,
    /// A timeout while this host was overloaded: not the network's.
    HostOverloaded,
    /// This host could not probe at all: the plugin failed the round, a queue pair could
    /// not be made (`QP: ...`), no local address or GID (`address resolution: ...`). Not
    /// the network's either.
    LocalError,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Timeout,
        Outcome::Failed,
        Outcome::HostOverloaded,
        Outcome::LocalError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Timeout => "timeout",
            Outcome::Failed => "failed",
            Outcome::HostOverloaded => "host_overloaded",
            Outcome::LocalError => "local_error",
        }
    }

    /// A probe's result as counted: a timeout while overloaded is the host's.
    pub fn of(r: Result<&ProbeOutcome, ()>, overloaded: bool) -> Outcome {
        match r {
            Ok(ProbeOutcome::Ok { .. }) => Outcome::Ok,
            Ok(ProbeOutcome::Timeout) if overloaded => Outcome::HostOverloaded,
            Ok(ProbeOutcome::Timeout) => Outcome::Timeout,
            Ok(ProbeOutcome::ConnectFailed { cause }) => {
                // The plugin's causes (`conn.rs`): `QP: ...` is a local verbs call,
                // `address resolution: ...` a local address without its GID;
                // `QP error: ...` (a failed completion), `rejected: ...` and `route: ...`
                // are about the path or the peer.
                let local = cause.starts_with("QP:") || cause.starts_with("address resolution");
                if local {
                    Outcome::LocalError
                } else {
                    Outcome::Failed
                }
            }
            Err(()) => Outcome::LocalError,
        }
    }

    /// Lost to the network (what the failing window counts).
    fn lost(self) -> bool {
        matches!(self, Outcome::Timeout | Outcome::Failed)
    }
}

/// Buckets of the failing window.
const BUCKETS: usize = 6;

/// A flow's recent probes: `BUCKETS` buckets of `window / BUCKETS` seconds each, (bucket
/// number, sent, lost).
#[derive(Debug, Clone, Default)]
struct Recent {
    buckets: [(u64, u32, u32); BUCKETS],
}

impl Recent {
    fn record(&mut self, bucket: u64, counted: bool, lost: bool) {
        let b = &mut self.buckets[(bucket % BUCKETS as u64) as usize];
        if b.0 != bucket {
            *b = (bucket, 0, 0);
        }
        b.1 += u32::from(counted);
        b.2 += u32::from(lost);
    }

    /// (sent, lost) over the buckets of the window ending at `bucket`.
    fn window(&self, bucket: u64) -> (u32, u32) {
        self.buckets
            .iter()
            .filter(|b| b.0 + BUCKETS as u64 > bucket && b.0 <= bucket)
            .fold((0, 0), |a, b| (a.0 + b.1, a.1 + b.2))
    }
}

/// A flow: a peer of the pinglist and a path index.
type FlowKey = (IpAddr, u16);

/// A multiply-rotate hasher for flow keys (addresses from the fleet's map, not from
/// strangers: no need for SipHash's resistance, and a round looks up every flow).
#[derive(Debug, Default, Clone, Copy)]
struct FlowHasher(u64);

impl std::hash::Hasher for FlowHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type FlowMap<V> = HashMap<FlowKey, V, std::hash::BuildHasherDefault<FlowHasher>>;

/// One host's fleet probe statistics.
pub struct FleetStats {
    host: String,
    /// This host's ToR per rail.
    tors: BTreeMap<u8, String>,
    /// The local device each rail is probed from, where known.
    devices: BTreeMap<u8, String>,
    /// By (rail, class, path, outcome).
    results: BTreeMap<(u8, Class, u16, Outcome), u64>,
    flows: FlowMap<(Peer, Recent)>,
    bucket_s: u64,
    top: usize,
}

impl FleetStats {
    /// `tors`: this host's ToR on each rail; failing flows are judged over `window_s`
    /// and the worst `top` of them exported.
    pub fn new(host: &str, tors: BTreeMap<u8, String>, window_s: u64, top: usize) -> Self {
        FleetStats {
            host: host.to_string(),
            tors,
            devices: BTreeMap::new(),
            results: BTreeMap::new(),
            flows: FlowMap::default(),
            bucket_s: (window_s / BUCKETS as u64).max(1),
            top,
        }
    }

    /// This host's ToRs changed (a new map).
    pub fn set_tors(&mut self, tors: BTreeMap<u8, String>) {
        self.tors = tors;
    }

    /// The local device (`mlx5_3:1`) each rail is probed from: the series of a rail's
    /// flows name it (`device`) from now on. One device a rail, so the label adds no
    /// series; a rail without one has no `device` label.
    pub fn set_devices(&mut self, devices: BTreeMap<u8, String>) {
        self.devices = devices;
    }

    /// Count one probe of `peer` on `path` at `now_s`.
    pub fn record(&mut self, peer: &Peer, path: u16, outcome: Outcome, now_s: u64) {
        *self
            .results
            .entry((peer.rail, peer.class, path, outcome))
            .or_default() += 1;
        let bucket = now_s / self.bucket_s;
        let (_, recent) = self
            .flows
            .entry((peer.addr, path))
            .or_insert_with(|| (peer.clone(), Recent::default()));
        // An overloaded host's timeouts and its local errors count neither way.
        let counted = !matches!(outcome, Outcome::HostOverloaded | Outcome::LocalError);
        recent.record(bucket, counted, outcome.lost());
    }

    /// Forget the flows not in `keep` (peers that left the pinglist).
    pub fn retain(&mut self, keep: impl Fn(&IpAddr, u16) -> bool) {
        self.flows.retain(|(a, p), _| keep(a, *p));
    }

    /// A new pinglist: forget the flows of peers that left it or of paths beyond
    /// `paths`, and take the peers' new details (a re-cabled peer's ToR, an address now
    /// another host's) for the flows that stay.
    pub fn adopt(&mut self, peers: &[Peer], paths: u16) {
        let now: HashMap<IpAddr, &Peer> = peers.iter().map(|p| (p.addr, p)).collect();
        self.flows.retain(|(a, path), (peer, _)| match now.get(a) {
            Some(p) if *path < paths => {
                if *p != peer {
                    *peer = (*p).clone();
                }
                true
            }
            _ => false,
        });
    }

    /// The failing flows at `now_s`, worst first (most lost, then highest share), at most
    /// `top`: (peer, path, sent, lost).
    pub fn failing(&self, now_s: u64) -> Vec<(&Peer, u16, u32, u32)> {
        let bucket = now_s / self.bucket_s;
        let mut out: Vec<(&Peer, u16, u32, u32)> = self
            .flows
            .iter()
            .filter_map(|((_, path), (peer, r))| {
                let (sent, lost) = r.window(bucket);
                (lost > 0).then_some((peer, *path, sent, lost))
            })
            .collect();
        // Ties (a ToR down fails thousands of flows alike) fall to a hash of the flow, so
        // the ones kept spread over the peers rather than being the lowest addresses.
        let tie = |addr: IpAddr, path: u16| {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<FlowHasher>::default().hash_one((addr, path, &self.host))
        };
        out.sort_by(|a, b| {
            b.3.cmp(&a.3)
                .then_with(|| {
                    (u64::from(b.3) * u64::from(a.2)).cmp(&(u64::from(a.3) * u64::from(b.2)))
                })
                .then_with(|| tie(a.0.addr, a.1).cmp(&tie(b.0.addr, b.1)))
                .then_with(|| (a.0.addr, a.1).cmp(&(b.0.addr, b.1)))
        });
        out.truncate(self.top);
        out
    }

    /// This host's attributes, the rail's and its device's where known, and `pairs`.
    fn attrs(&self, rail: u8, pairs: &[(&str, &str)]) -> Attributes {
        let mut m = rocewatch_plugin_api::AttrSet::new();
        m.insert(ATTR_HOST, &self.host);
        m.insert(ATTR_RAIL, rail.to_string());
        if let Some(d) = self.devices.get(&rail) {
            m.insert(ATTR_DEVICE, d);
        }
        for (k, v) in pairs {
            m.insert(k, v);
        }
        Attributes::new(m)
    }

    /// The attributes of the RTT histogram of a flow of `peer` (on any path): by rail
    /// and class. Not by path: a path index is a different fabric path for every peer
    /// (its label is drawn per peer and rotates), so the RTT by path index would tell
    /// nothing and multiply the histograms by the paths (8 rails x 2 classes x 4 paths
    /// x 19 series each would be 1,216 series a host).
    pub fn rtt_attrs(&self, peer: &Peer, _path: u16) -> Attributes {
        self.attrs(peer.rail, &[(ATTR_CLASS, peer.class.as_str())])
    }

    /// The counters and the failing flows as samples at `now_s`.
    pub fn samples(&self, now_s: u64) -> Vec<Sample> {
        let mut out = Vec::with_capacity(self.results.len());
        for ((rail, class, path, outcome), n) in &self.results {
            out.push(sample(
                names::PROBE_FLEET_RESULTS,
                Value::U64(*n),
                self.attrs(
                    *rail,
                    &[
                        (ATTR_CLASS, class.as_str()),
                        (ATTR_PATH, &path.to_string()),
                        (ATTR_OUTCOME, outcome.as_str()),
                    ],
                ),
            ));
        }
        for (peer, path, sent, lost) in self.failing(now_s) {
            let tor = self.tors.get(&peer.rail).map_or("", String::as_str);
            out.push(sample(
                names::PROBE_FLEET_FAILING,
                Value::F64(f64::from(lost) / f64::from(sent.max(1))),
                self.attrs(
                    peer.rail,
                    &[
                        (ATTR_TOR, tor),
                        (ATTR_CLASS, peer.class.as_str()),
                        (ATTR_PEER, &peer.addr.to_string()),
                        (ATTR_PEER_HOST, &peer.host),
                        (ATTR_PEER_TOR, &peer.tor),
                        (ATTR_PATH, &path.to_string()),
                    ],
                ),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(addr: &str, class: Class) -> Peer {
        Peer {
            rail: 0,
            class,
            host: format!("h-{addr}"),
            addr: addr.parse().unwrap(),
            tor: if class == Class::SameTor { "t1" } else { "t2" }.into(),
            prober_rank: 0,
        }
    }

    #[test]
    fn results_by_class_path_outcome_and_failing_flows_only_while_they_fail() {
        let tors = BTreeMap::from([(0, "t1".to_string())]);
        let mut s = FleetStats::new("a", tors, 60, 2);
        let (p1, p2, p3) = (
            peer("10.0.0.2", Class::SameTor),
            peer("10.0.1.2", Class::CrossTor),
            peer("10.0.1.3", Class::CrossTor),
        );
        for t in 0..30 {
            for path in 0..4 {
                s.record(&p1, path, Outcome::Ok, t);
                // Path 2 to p2 is black-holed; p3 loses every other probe on path 1.
                let o2 = if path == 2 {
                    Outcome::Timeout
                } else {
                    Outcome::Ok
                };
                s.record(&p2, path, o2, t);
                let o3 = if path == 1 && t % 2 == 0 {
                    Outcome::Failed
                } else {
                    Outcome::Ok
                };
                s.record(&p3, path, o3, t);
            }
        }
        let out = s.samples(29);
        let failing: Vec<_> = out
            .iter()
            .filter(|x| x.name == names::PROBE_FLEET_FAILING)
            .map(|x| {
                (
                    x.attributes[ATTR_PEER].to_string(),
                    x.attributes[ATTR_PATH].to_string(),
                    x.value,
                )
            })
            .collect();
        assert_eq!(
            failing,
            [
                ("10.0.1.2".to_string(), "2".to_string(), Value::F64(1.0)),
                ("10.0.1.3".to_string(), "1".to_string(), Value::F64(0.5)),
            ]
        );
        let f = out
            .iter()
            .find(|x| x.name == names::PROBE_FLEET_FAILING)
            .unwrap();
        for (k, v) in [
            ("host", "a"),
            ("tor", "t1"),
            ("rail", "0"),
            ("class", "cross_tor"),
            ("peer_host", "h-10.0.1.2"),
            ("peer_tor", "t2"),
        ] {
            assert_eq!(&f.attributes[k], v, "{k}");
        }
        let results: u64 = out
            .iter()
            .filter(|x| x.name == names::PROBE_FLEET_RESULTS)
            .map(|x| match x.value {
                Value::U64(n) => n,
                _ => 0,
            })
            .sum();
        assert_eq!(results, 30 * 4 * 3);
        // 2 classes x 4 paths of ok, cross_tor timeouts on path 2, failures on path 1.
        assert_eq!(
            out.iter()
                .filter(|x| x.name == names::PROBE_FLEET_RESULTS)
                .count(),
            10
        );
        // A minute of success later, nothing fails any more: the series are gone.
        for t in 30..100 {
            for path in 0..4 {
                s.record(&p2, path, Outcome::Ok, t);
                s.record(&p3, path, Outcome::Ok, t);
            }
        }
        assert!(s.failing(99).is_empty());
        // The top bound holds whatever fails.
        for i in 0..50 {
            s.record(
                &peer(&format!("10.0.2.{i}"), Class::CrossTor),
                0,
                Outcome::Timeout,
                100,
            );
        }
        assert_eq!(s.failing(100).len(), 2);
        s.retain(|a, _| a.to_string() == "10.0.2.7");
        assert_eq!(s.failing(100).len(), 1);
    }

    /// Every series a host exports names the rail of its flows, so that eight rails'
    /// results are told apart; the RTT histogram is by rail and class, not path (a path
    /// index means a different fabric path for every peer: by path it would only
    /// multiply the series).
    #[test]
    fn results_rtts_and_failing_flows_are_by_rail() {
        let tors = BTreeMap::from([(0, "t1".to_string()), (5, "t1-5".to_string())]);
        let mut s = FleetStats::new("a", tors, 60, 8);
        let p0 = peer("10.0.1.2", Class::CrossTor);
        let mut p5 = peer("10.5.1.2", Class::CrossTor);
        p5.rail = 5;
        p5.tor = "t2-5".into();
        for t in 0..10 {
            s.record(&p0, 0, Outcome::Ok, t);
            s.record(&p5, 0, Outcome::Timeout, t);
        }
        let out = s.samples(9);
        let results: Vec<(String, String, u64)> = out
            .iter()
            .filter(|x| x.name == names::PROBE_FLEET_RESULTS)
            .map(|x| {
                let n = match x.value {
                    Value::U64(n) => n,
                    Value::F64(_) => panic!("a counter"),
                };
                let rail = x.attributes.get(ATTR_RAIL).unwrap_or("none").to_string();
                (rail, x.attributes[ATTR_OUTCOME].to_string(), n)
            })
            .collect();
        assert_eq!(
            results,
            [
                ("0".to_string(), "ok".to_string(), 10),
                ("5".to_string(), "timeout".to_string(), 10)
            ]
        );
        let failing: Vec<_> = out
            .iter()
            .filter(|x| x.name == names::PROBE_FLEET_FAILING)
            .map(|x| {
                (
                    x.attributes[ATTR_RAIL].to_string(),
                    x.attributes[ATTR_TOR].to_string(),
                )
            })
            .collect();
        assert_eq!(failing, [("5".to_string(), "t1-5".to_string())]);
        let rtt = s.rtt_attrs(&p5, 3);
        assert_eq!(rtt.get(ATTR_RAIL), Some("5"));
        assert_eq!(rtt.get(ATTR_CLASS), Some("cross_tor"));
        assert_eq!(rtt.get(ATTR_PATH), None);
        assert_eq!(s.rtt_attrs(&p5, 0), rtt);
        // Once the rails' devices are known, their series name them; a rail without one
        // has no device label.
        s.set_devices(BTreeMap::from([(5, "mlx5_5:1".to_string())]));
        let out = s.samples(9);
        let devices: Vec<(&str, &str, Option<&str>)> = out
            .iter()
            .map(|x| {
                (
                    &*x.name,
                    &x.attributes[ATTR_RAIL],
                    x.attributes.get(ATTR_DEVICE),
                )
            })
            .collect();
        assert_eq!(
            devices,
            [
                (names::PROBE_FLEET_RESULTS, "0", None),
                (names::PROBE_FLEET_RESULTS, "5", Some("mlx5_5:1")),
                (names::PROBE_FLEET_FAILING, "5", Some("mlx5_5:1")),
            ]
        );
        assert_eq!(s.rtt_attrs(&p5, 0).get(ATTR_DEVICE), Some("mlx5_5:1"));
        assert_eq!(s.rtt_attrs(&p0, 0).get(ATTR_DEVICE), None);
    }

    #[test]
    fn an_overloaded_hosts_timeouts_are_not_network_loss() {
        let mut s = FleetStats::new("a", BTreeMap::new(), 60, 8);
        let p = peer("10.0.1.2", Class::CrossTor);
        let to = ProbeOutcome::Timeout;
        for t in 0..10 {
            s.record(&p, 0, Outcome::of(Ok(&to), true), t);
        }
        assert!(s.failing(9).is_empty());
        let out = s.samples(9);
        let r = out
            .iter()
            .find(|x| x.name == names::PROBE_FLEET_RESULTS)
            .unwrap();
        assert_eq!(&r.attributes[ATTR_OUTCOME], "host_overloaded");
        assert_eq!(Outcome::of(Ok(&to), false), Outcome::Timeout);
        assert_eq!(Outcome::of(Err(()), true), Outcome::LocalError);
        let failed = |c: &str| {
            Outcome::of(
                Ok(&ProbeOutcome::ConnectFailed {
                    cause: c.to_string(),
                }),
                false,
            )
        };
        assert_eq!(
            failed("QP: ibv_create_qp rxe0: Cannot allocate memory"),
            Outcome::LocalError
        );
        assert_eq!(
            failed("address resolution: no RoCE v2 GID for 10.0.0.1 on rxe0 port 1"),
            Outcome::LocalError
        );
        assert_eq!(
            failed("QP error: work completion status transport retry counter exceeded (12)"),
            Outcome::Failed
        );
        assert_eq!(
            failed("rejected: no responder on 10.0.0.2:18516"),
            Outcome::Failed
        );
        // A plugin failing every round fails no flow.
        let mut s = FleetStats::new("a", BTreeMap::new(), 60, 8);
        for t in 0..10 {
            s.record(&p, 1, Outcome::of(Err(()), false), t);
        }
        assert!(s.failing(9).is_empty());
    }

    #[test]
    fn a_new_pinglist_gives_failing_flows_their_peers_new_details() {
        let mut s = FleetStats::new("a", BTreeMap::new(), 60, 8);
        let p = peer("10.0.1.2", Class::CrossTor);
        s.record(&p, 0, Outcome::Timeout, 1);
        s.record(&p, 3, Outcome::Timeout, 1);
        let mut moved = p.clone();
        moved.tor = "t9".into();
        moved.host = "h-new".into();
        s.adopt(std::slice::from_ref(&moved), 2);
        let f = s.failing(1);
        assert_eq!(f.len(), 1, "path 3 is beyond the 2 paths now");
        assert_eq!((f[0].0.tor.as_str(), f[0].0.host.as_str()), ("t9", "h-new"));
        s.adopt(&[], 2);
        assert!(s.failing(1).is_empty());
    }
}
