//! Scheduled verbs probes: every peer is probed once per `interval` through the
//! probe-verbs plugin; per-peer counters, the last RTT and an RTT histogram go into the
//! store under the pseudo-plugin [`PLUGIN`], so exporters and rules see them (probe loss
//! can fire remediation: `rdma.probe.timeouts` over `rdma.probe.sent`, joined on the
//! peer).
//!
//! Peers come from a static list, a DNS name resolving to many hosts, and a file (one peer
//! per line, `#` comments) re-read when it changes.
//!
//! Bounds: at most `max_peers` peers are probed (the rest are counted, not probed); the
//! interval stretches so that the agent sends at most `max_rate` probes per second; a
//! round hands every peer to the plugin at once (`probe_many`: every probe in flight
//! together, so dead peers cost the round one timeout, not one per dead peer; new peers
//! are connected 64 at a time). Memory per peer in the agent is its counters and one
//! histogram of `rtt_buckets.len() + 1` counts.

use std::collections::BTreeMap;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use tokio::sync::watch;

use rocewatch_plugin_api::{
    Attributes, MetricKind, NicTimestamps, ProbeOutcome, ProbeResult, ProbeTarget, Sample, Value,
};

use crate::pipeline::Agent;
use crate::store::Store;

/// The name probe series are stored under.
pub const PLUGIN: &str = "prober";
/// Attribute naming the peer.
pub const ATTR_PEER: &str = "rdma.probe.peer";
/// Attribute naming a failure's cause.
pub const ATTR_CAUSE: &str = "rdma.probe.cause";
/// The RTT histogram.
pub const RTT: &str = "rdma.probe.rtt";

fn default_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_timeout() -> Duration {
    Duration::from_secs(1)
}
fn default_size() -> u32 {
    64
}
fn default_tcp_port() -> u16 {
    18516
}
fn default_true() -> bool {
    true
}
fn default_max_peers() -> usize {
    1000
}
fn default_backoff() -> Duration {
    Duration::from_secs(30)
}
fn default_max_rate() -> f64 {
    1000.0
}
/// 10 µs to 1 s, three buckets a decade: RDMA RTTs are tens of microseconds on a healthy
/// fabric and milliseconds when something is wrong.
pub fn default_rtt_buckets() -> Vec<f64> {
    vec![
        10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
        100e-3, 250e-3, 500e-3, 1.0,
    ]
}
fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    crate::config::de_opt_duration(d).map(|o| o.unwrap_or_default())
}

/// `[probes]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbesConfig {
    /// Peers by address or name.
    #[serde(default)]
    pub peers: Vec<String>,
    /// A DNS name whose every address is a peer.
    #[serde(default)]
    pub peers_dns: Option<String>,
    /// A file with one peer per line (`#` comments), re-read when it changes.
    #[serde(default)]
    pub peers_file: Option<PathBuf>,
    /// Time between two probes of the same peer.
    #[serde(default = "default_interval", deserialize_with = "de_duration")]
    pub interval: Duration,
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Message size in bytes.
    #[serde(default = "default_size")]
    pub size: u32,
    /// At most this many peers are probed (the first ones listed).
    #[serde(default = "default_max_peers")]
    pub max_peers: usize,
    /// At most this many probes per second from this agent, all peers together.
    #[serde(default = "default_max_rate")]
    pub max_rate: f64,
    /// After a peer could not be connected, the plugin waits 1 s before trying again,
    /// doubling up to this (its probes fail with the last cause meanwhile).
    #[serde(default = "default_backoff", deserialize_with = "de_duration")]
    pub reconnect_backoff: Duration,
    /// Upper bounds of the RTT histogram's buckets, in seconds, ascending.
    #[serde(default = "default_rtt_buckets")]
    pub rtt_buckets: Vec<f64>,
    /// Also answer other agents' probes (default true).
    #[serde(default = "default_true")]
    pub serve: bool,
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default = "default_tcp_port")]
    pub tcp_port: u16,
    /// The probe-verbs plugin (default: next to the binary, or ROCEWATCH_PLUGIN_DIR).
    #[serde(default)]
    pub plugin: Option<PathBuf>,
}

impl ProbesConfig {
    /// What is wrong with the settings: (key, message).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |k: &str, m: String| Err((format!("probes.{k}"), m));
        let b = &self.rtt_buckets;
        if b.is_empty() || b.len() > 64 {
            return bad("rtt_buckets", format!("{} bounds; give 1 to 64", b.len()));
        }
        if !b.iter().all(|v| v.is_finite() && *v > 0.0) || !b.windows(2).all(|w| w[0] < w[1]) {
            return bad(
                "rtt_buckets",
                format!("{b:?}: bounds must be positive and strictly ascending (seconds)"),
            );
        }
        if !(self.max_rate.is_finite() && self.max_rate > 0.0) {
            return bad(
                "max_rate",
                format!(
                    "{}: give a positive number of probes per second",
                    self.max_rate
                ),
            );
        }
        if self.max_peers == 0 {
            return bad("max_peers", "must be at least 1".into());
        }
        if self.interval.is_zero() {
            return bad("interval", "must be greater than zero".into());
        }
        if self.timeout.is_zero() {
            return bad("timeout", "must be greater than zero".into());
        }
        Ok(())
    }

    /// The interval in effect for `peers` peers: `interval`, or longer so that the agent
    /// stays within `max_rate`.
    pub fn effective_interval(&self, peers: usize) -> Duration {
        let floor = Duration::from_secs_f64(peers as f64 / self.max_rate);
        self.interval.max(floor)
    }
}

/// Declare the probe metrics in the store (the RTT histogram with its buckets).
pub fn declare(store: &Store, cfg: Option<&ProbesConfig>) {
    let bounds = cfg.map_or_else(default_rtt_buckets, |c| c.rtt_buckets.clone());
    for d in rocewatch_metrics::descriptors_of(rocewatch_metrics::PROBE_CATALOG) {
        if d.kind == MetricKind::Histogram {
            store.declare_histogram(&d, &bounds);
        } else {
            store.declare(std::slice::from_ref(&d));
        }
    }
}

/// How long a DNS answer is used before the name is resolved again.
const DNS_REFRESH: Duration = Duration::from_secs(30);

/// The peers of the static list, the DNS name and the file: the file is read again only
/// when it changes (modification time or size), the name resolved again every
/// [`DNS_REFRESH`]. Both block, so the prober calls this on the blocking pool.
/// What identifies a version of the peers file: modification time and size.
type FileVersion = (Option<SystemTime>, u64);

pub struct PeerSource {
    cfg: ProbesConfig,
    file: Option<(FileVersion, Vec<String>)>,
    dns: Option<(std::time::Instant, Vec<String>)>,
}

impl PeerSource {
    pub fn new(cfg: ProbesConfig) -> Self {
        PeerSource {
            cfg,
            file: None,
            dns: None,
        }
    }

    /// The peers, deduplicated, in that order, and what could not be read.
    pub fn peers(&mut self) -> (Vec<String>, Vec<String>) {
        let mut problems = Vec::new();
        if let Some(name) = &self.cfg.peers_dns {
            if self
                .dns
                .as_ref()
                .is_none_or(|(at, _)| at.elapsed() >= DNS_REFRESH)
            {
                match (name.as_str(), 0).to_socket_addrs() {
                    Ok(addrs) => {
                        let ips = addrs.map(|a| a.ip().to_string()).collect();
                        self.dns = Some((std::time::Instant::now(), ips));
                    }
                    // The last answer stays in use; the failure is reported.
                    Err(e) => problems.push(format!("peers_dns {name}: {e}")),
                }
            }
        }
        if let Some(f) = &self.cfg.peers_file {
            match std::fs::metadata(f) {
                Ok(m) => {
                    let key = (m.modified().ok(), m.len());
                    if self.file.as_ref().is_none_or(|(k, _)| *k != key) {
                        match std::fs::read_to_string(f) {
                            Ok(text) => {
                                let list = text
                                    .lines()
                                    .map(|l| {
                                        l.split('#').next().unwrap_or_default().trim().to_string()
                                    })
                                    .collect();
                                self.file = Some((key, list));
                            }
                            Err(e) => problems.push(format!("peers_file {}: {e}", f.display())),
                        }
                    }
                }
                Err(e) => {
                    self.file = None;
                    problems.push(format!("peers_file {}: {e}", f.display()));
                }
            }
        }
        let mut out: Vec<String> = Vec::new();
        let from_dns = self.dns.iter().flat_map(|(_, v)| v);
        let from_file = self.file.iter().flat_map(|(_, v)| v);
        for p in self.cfg.peers.iter().chain(from_dns).chain(from_file) {
            let p = p.trim();
            if !p.is_empty() && !out.iter().any(|o| o == p) {
                out.push(p.to_string());
            }
        }
        (out, problems)
    }
}

#[derive(Debug, Clone)]
struct PeerStats {
    attrs: Attributes,
    sent: u64,
    received: u64,
    timeouts: u64,
    failures: BTreeMap<String, u64>,
    rtt: Option<f64>,
}

impl PeerStats {
    fn new(peer: &str) -> Self {
        PeerStats {
            attrs: Attributes::new([(ATTR_PEER.to_string(), peer.to_string())].into()),
            sent: 0,
            received: 0,
            timeouts: 0,
            failures: BTreeMap::new(),
            rtt: None,
        }
    }

    /// Count one result; the RTT of an answered probe.
    fn count(&mut self, r: Result<&ProbeOutcome, ()>) -> Option<f64> {
        self.sent += 1;
        match r {
            Ok(ProbeOutcome::Ok { rtt_seconds }) => {
                self.received += 1;
                self.rtt = Some(*rtt_seconds);
                return Some(*rtt_seconds);
            }
            Ok(ProbeOutcome::Timeout) => self.timeouts += 1,
            Ok(ProbeOutcome::ConnectFailed { cause }) => {
                *self.failures.entry(cause_class(cause)).or_default() += 1;
            }
            Err(()) => *self.failures.entry("plugin".into()).or_default() += 1,
        }
        None
    }
}

/// `rejected: no responder ...` → `rejected`; `QP error: ...` → `qp_error`.
fn cause_class(cause: &str) -> String {
    let head = cause
        .split(':')
        .next()
        .unwrap_or(cause)
        .trim()
        .to_ascii_lowercase();
    head.replace([' ', '-'], "_")
}

fn sample(name: &'static str, value: Value, attributes: Attributes) -> Sample {
    let e = rocewatch_metrics::PROBE_CATALOG
        .iter()
        .find(|e| e.name == name)
        .expect("probe metric is catalogued");
    Sample {
        name: name.into(),
        unit: e.unit.into(),
        value,
        attributes,
        source: "probe-verbs".into(),
        kind: e.kind,
    }
}

/// The round's state as samples: per peer, and the peer counts and interval in effect.
fn samples(
    stats: &BTreeMap<String, PeerStats>,
    over_limit: usize,
    interval: Duration,
) -> Vec<Sample> {
    let mut out = Vec::with_capacity(stats.len() * 5 + 3);
    for s in stats.values() {
        let a = &s.attrs;
        out.push(sample("rdma.probe.sent", Value::U64(s.sent), a.clone()));
        out.push(sample(
            "rdma.probe.received",
            Value::U64(s.received),
            a.clone(),
        ));
        out.push(sample(
            "rdma.probe.timeouts",
            Value::U64(s.timeouts),
            a.clone(),
        ));
        if let Some(r) = s.rtt {
            out.push(sample("rdma.probe.rtt.last", Value::F64(r), a.clone()));
        }
        for (cause, n) in &s.failures {
            let mut with_cause = (**a).clone();
            with_cause.insert(ATTR_CAUSE.into(), cause.clone());
            out.push(sample(
                "rdma.probe.failures",
                Value::U64(*n),
                Attributes::new(with_cause),
            ));
        }
    }
    for (state, n) in [("probed", stats.len()), ("over_limit", over_limit)] {
        out.push(sample(
            "rdma.probe.peers",
            Value::U64(n as u64),
            Attributes::new([("rdma.probe.state".to_string(), state.to_string())].into()),
        ));
    }
    out.push(sample(
        "rdma.probe.interval",
        Value::F64(interval.as_secs_f64()),
        Attributes::default(),
    ));
    out
}

/// How long a call to the plugin for `targets` may take: connecting (64 at a time: the
/// TCP connection and the side channel's answer, each within the timeout) and the probe,
/// plus five seconds.
fn call_limit(targets: usize, timeout: Duration) -> Duration {
    let connect_waves = targets.div_ceil(64).max(1) as u32;
    timeout * (2 * connect_waves + 1) + Duration::from_secs(5)
}

/// One probe through the probe plugin `entry`, on the runner.
pub async fn probe_once(
    entry: &crate::host::registry::Entry,
    target: ProbeTarget,
    metrics: &crate::selfmetrics::SelfMetrics,
) -> Result<ProbeResult, crate::host::call::CallError> {
    let mut r = probe_batch(entry, vec![target], metrics).await?;
    Ok(r.remove(0))
}

/// Every target at once through the probe plugin `entry` (`probe_many`), on the runner.
pub async fn probe_batch(
    entry: &crate::host::registry::Entry,
    targets: Vec<ProbeTarget>,
    metrics: &crate::selfmetrics::SelfMetrics,
) -> Result<Vec<ProbeResult>, crate::host::call::CallError> {
    let timeout = targets
        .iter()
        .map(|t| Duration::from_millis(t.timeout_ms))
        .max()
        .unwrap_or_default();
    let limit = call_limit(targets.len(), timeout);
    crate::host::call::call(entry, limit, metrics, move |i| match i {
        crate::host::registry::Instance::Probe(p) => p.probe_many(&targets),
        _ => Err(rocewatch_plugin_api::PluginError::failed(
            "not a probe plugin",
        )),
    })
    .await
}

/// Probe every peer once per (effective) interval until `shutdown` turns true.
pub async fn run(agent: Arc<Agent>, cfg: ProbesConfig, mut shutdown: watch::Receiver<bool>) {
    let Some(entry) = agent.probe_plugin() else {
        tracing::error!("probes: the probe-verbs plugin is not loaded; no probes will run");
        return;
    };
    let mut stats: BTreeMap<String, PeerStats> = BTreeMap::new();
    let mut last_problems = Vec::new();
    let mut last_limits = (0, Duration::ZERO);
    let mut said_timestamps = false;
    let mut source = Some(PeerSource::new(cfg.clone()));
    loop {
        let round = tokio::time::Instant::now();
        // DNS and the peers file block: not on the async worker.
        let mut src = source.take().expect("returned by the previous round");
        let Ok((src, (mut list, problems))) = tokio::task::spawn_blocking(move || {
            let r = src.peers();
            (src, r)
        })
        .await
        else {
            tracing::error!("probes: resolving the peers failed; probing stops");
            return;
        };
        source = Some(src);
        if problems != last_problems {
            for p in &problems {
                tracing::warn!("probes: {p}");
            }
            last_problems = problems;
        }
        let over_limit = list.len().saturating_sub(cfg.max_peers);
        list.truncate(cfg.max_peers);
        let interval = cfg.effective_interval(list.len());
        if (over_limit, interval) != last_limits {
            if over_limit > 0 {
                tracing::warn!(
                    "probes: {over_limit} peers beyond probes.max_peers = {} are not probed",
                    cfg.max_peers
                );
            }
            if interval > cfg.interval {
                tracing::warn!(
                    "probes: {} peers at probes.max_rate = {}/s: each is probed every {interval:?} instead of every {:?}",
                    list.len(),
                    cfg.max_rate,
                    cfg.interval
                );
            }
            last_limits = (over_limit, interval);
        }
        // Peers no longer listed are forgotten (their series end).
        let listed: std::collections::HashSet<&str> = list.iter().map(String::as_str).collect();
        stats.retain(|p, _| listed.contains(p.as_str()));
        agent.store.retain_histogram(RTT, |a| {
            a.get(ATTR_PEER).is_some_and(|p| stats.contains_key(p))
        });
        let targets: Vec<ProbeTarget> = list
            .iter()
            .map(|peer| ProbeTarget {
                peer: peer.clone(),
                size: cfg.size,
                timeout_ms: cfg.timeout.as_millis() as u64,
            })
            .collect();
        if !targets.is_empty() {
            let results = tokio::select! {
                r = probe_batch(&entry, targets, &agent.metrics) => r,
                _ = shutdown.changed() => return,
            };
            if let (Ok(r), false) = (&results, said_timestamps) {
                if let Some(NicTimestamps::Unsupported { reason }) =
                    r.first().and_then(|r| r.nic_timestamps.as_ref())
                {
                    tracing::info!("probes: no NIC-measured RTT split: {reason}");
                }
                said_timestamps = true;
            }
            let mut rtts = Vec::with_capacity(list.len());
            for (i, peer) in list.iter().enumerate() {
                let s = stats
                    .entry(peer.clone())
                    .or_insert_with(|| PeerStats::new(peer));
                let outcome = match &results {
                    Ok(r) => r.get(i).map(|r| &r.outcome).ok_or(()),
                    Err(_) => Err(()),
                };
                if let Some(rtt) = s.count(outcome) {
                    rtts.push((s.attrs.clone(), rtt));
                }
            }
            agent.store.observe(RTT, rtts.iter().map(|(a, v)| (a, *v)));
        }
        agent.store.ingest_at(
            PLUGIN,
            &samples(&stats, over_limit, interval),
            &agent.metrics,
            SystemTime::now(),
            Instant::now(),
        );
        agent.evaluate_rules();
        tokio::select! {
            _ = tokio::time::sleep_until(round + interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_from_list_dns_and_file_deduplicated() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("peers");
        std::fs::write(
            &f,
            "# the mesh\n10.0.0.3\n10.0.0.1  # dup of the list\n\n10.0.0.4\n",
        )
        .unwrap();
        let cfg: ProbesConfig = toml::from_str(&format!(
            "peers = [\"10.0.0.1\", \"10.0.0.2\"]\npeers_dns = \"localhost\"\npeers_file = {f:?}"
        ))
        .unwrap();
        let mut src = PeerSource::new(cfg);
        let (p, problems) = src.peers();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(&p[..2], ["10.0.0.1", "10.0.0.2"]);
        assert!(
            p.contains(&"127.0.0.1".to_string()) || p.contains(&"::1".to_string()),
            "{p:?}"
        );
        assert_eq!(&p[p.len() - 2..], ["10.0.0.3", "10.0.0.4"]);
        // The file is read again when it changes (here its size does).
        std::fs::write(&f, "10.0.0.9\n").unwrap();
        assert_eq!(src.peers().0.last().unwrap(), "10.0.0.9");
        std::fs::remove_file(&f).unwrap();
        let (p, problems) = src.peers();
        assert!(problems[0].contains("peers_file"), "{problems:?}");
        assert!(
            !p.contains(&"10.0.0.9".to_string()),
            "a removed file lists no peers"
        );
    }

    #[test]
    fn causes_and_samples() {
        assert_eq!(
            cause_class("rejected: no responder on 1.2.3.4:18516"),
            "rejected"
        );
        assert_eq!(
            cause_class("QP error: work completion status transport retry counter exceeded (12)"),
            "qp_error"
        );
        assert_eq!(
            cause_class("address resolution: x: no address"),
            "address_resolution"
        );
        let mut st = BTreeMap::new();
        let mut p = PeerStats::new("10.0.0.1");
        assert_eq!(
            p.count(Ok(&ProbeOutcome::Ok { rtt_seconds: 0.003 })),
            Some(0.003)
        );
        assert_eq!(
            p.count(Ok(&ProbeOutcome::Ok { rtt_seconds: 0.002 })),
            Some(0.002)
        );
        assert_eq!(p.count(Ok(&ProbeOutcome::Timeout)), None);
        let refused = ProbeOutcome::ConnectFailed {
            cause: "rejected: no responder".into(),
        };
        assert_eq!(p.count(Ok(&refused)), None);
        assert_eq!(p.count(Err(())), None);
        st.insert("10.0.0.1".to_string(), p);
        let s = samples(&st, 7, Duration::from_secs(2));
        let get = |n: &str| s.iter().find(|x| x.name == n).unwrap();
        assert_eq!(get("rdma.probe.sent").value, Value::U64(5));
        assert_eq!(get("rdma.probe.received").value, Value::U64(2));
        assert_eq!(get("rdma.probe.timeouts").value, Value::U64(1));
        assert_eq!(get("rdma.probe.rtt.last").value, Value::F64(0.002));
        let failures: Vec<_> = s
            .iter()
            .filter(|x| x.name == "rdma.probe.failures")
            .map(|x| (x.attributes[ATTR_CAUSE].as_str(), x.value))
            .collect();
        assert_eq!(
            failures,
            [("plugin", Value::U64(1)), ("rejected", Value::U64(1))]
        );
        assert_eq!(get("rdma.probe.timeouts").attributes[ATTR_PEER], "10.0.0.1");
        let peers: Vec<_> = s
            .iter()
            .filter(|x| x.name == "rdma.probe.peers")
            .map(|x| (x.attributes["rdma.probe.state"].as_str(), x.value))
            .collect();
        assert_eq!(
            peers,
            [("probed", Value::U64(1)), ("over_limit", Value::U64(7))]
        );
        assert_eq!(get("rdma.probe.interval").value, Value::F64(2.0));
        assert!(s.iter().all(|x| x.kind != MetricKind::Histogram));
    }

    #[test]
    fn limits_validate_and_stretch_the_interval() {
        let cfg = |extra: &str| -> ProbesConfig { toml::from_str(extra).unwrap() };
        let c = cfg("max_rate = 100.0\ninterval = \"1s\"");
        assert!(c.validate().is_ok());
        assert_eq!(c.effective_interval(50), Duration::from_secs(1));
        assert_eq!(c.effective_interval(250), Duration::from_millis(2500));
        assert_eq!(c.rtt_buckets, default_rtt_buckets());
        for (bad, key) in [
            ("rtt_buckets = [0.001, 0.001]", "probes.rtt_buckets"),
            ("rtt_buckets = []", "probes.rtt_buckets"),
            ("rtt_buckets = [-1.0]", "probes.rtt_buckets"),
            ("max_rate = 0.0", "probes.max_rate"),
            ("max_peers = 0", "probes.max_peers"),
        ] {
            let e = cfg(bad).validate().unwrap_err();
            assert_eq!(e.0, key, "{bad}: {e:?}");
        }
        // The default buckets are valid and tell 10 µs from 1 s.
        let d = default_rtt_buckets();
        assert_eq!((d[0], *d.last().unwrap()), (10e-6, 1.0));
        assert!(cfg("").validate().is_ok());
    }

    #[test]
    fn call_limit_grows_with_connect_waves() {
        let t = Duration::from_secs(1);
        assert_eq!(call_limit(1, t), Duration::from_secs(8));
        assert_eq!(call_limit(64, t), Duration::from_secs(8));
        assert_eq!(call_limit(65, t), Duration::from_secs(10));
        assert_eq!(call_limit(1000, t), Duration::from_secs(38));
    }
}
