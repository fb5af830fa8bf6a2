//! Scheduled verbs probes: every `interval`, one probe to every peer through the
//! probe-verbs plugin; per-peer counters and the last RTT go into the store under the
//! pseudo-plugin [`PLUGIN`], so exporters and rules see them (probe loss can fire
//! remediation: `rdma.probe.timeouts` over `rdma.probe.sent`, joined on the peer).
//!
//! Peers come from a static list, a DNS name resolving to many hosts, and a file (one peer
//! per line, `#` comments) re-read when it changes.

use std::collections::BTreeMap;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use tokio::sync::watch;

use rocewatch_plugin_api::{Attributes, MetricKind, ProbeOutcome, ProbeTarget, Sample, Value};

use crate::agent::Agent;

/// The name probe series are stored under.
pub const PLUGIN: &str = "prober";
/// Attribute naming the peer.
pub const ATTR_PEER: &str = "rdma.probe.peer";
/// Attribute naming a failure's cause.
pub const ATTR_CAUSE: &str = "rdma.probe.cause";

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

#[derive(Debug, Default, Clone)]
struct PeerStats {
    sent: u64,
    received: u64,
    timeouts: u64,
    failures: BTreeMap<String, u64>,
    rtt: Option<f64>,
    rtt_sum: f64,
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

fn samples(stats: &BTreeMap<String, PeerStats>) -> Vec<Sample> {
    let mut out = Vec::new();
    for (peer, s) in stats {
        let attrs = Attributes::new([(ATTR_PEER.to_string(), peer.clone())].into());
        let mk = |name: &'static str, value: Value, attributes: Attributes| {
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
        };
        out.push(mk("rdma.probe.sent", Value::U64(s.sent), attrs.clone()));
        out.push(mk(
            "rdma.probe.received",
            Value::U64(s.received),
            attrs.clone(),
        ));
        out.push(mk(
            "rdma.probe.timeouts",
            Value::U64(s.timeouts),
            attrs.clone(),
        ));
        out.push(mk(
            "rdma.probe.rtt.sum",
            Value::F64(s.rtt_sum),
            attrs.clone(),
        ));
        if let Some(r) = s.rtt {
            out.push(mk("rdma.probe.rtt", Value::F64(r), attrs.clone()));
        }
        for (cause, n) in &s.failures {
            let mut a = (*attrs).clone();
            a.insert(ATTR_CAUSE.into(), cause.clone());
            out.push(mk(
                "rdma.probe.failures",
                Value::U64(*n),
                Attributes::new(a),
            ));
        }
    }
    debug_assert!(out.iter().all(|s| s.kind != MetricKind::Histogram));
    out
}

/// One probe through the probe plugin `entry`, on the runner (the plugin's own timeout is
/// the probe's; the runner allows five seconds more before giving up on the call).
pub async fn probe_once(
    entry: &crate::registry::Entry,
    target: ProbeTarget,
    metrics: &crate::selfmetrics::SelfMetrics,
) -> Result<rocewatch_plugin_api::ProbeResult, crate::runner::CallError> {
    let limit = Duration::from_millis(target.timeout_ms) + Duration::from_secs(5);
    crate::runner::call(entry, limit, metrics, move |i| match i {
        crate::registry::Instance::Probe(p) => p.probe(&target),
        _ => Err(rocewatch_plugin_api::PluginError::failed(
            "not a probe plugin",
        )),
    })
    .await
}

/// Probe every peer every `interval` until `shutdown` turns true.
pub async fn run(agent: Arc<Agent>, cfg: ProbesConfig, mut shutdown: watch::Receiver<bool>) {
    let Some(entry) = agent
        .registry
        .of_kind(rocewatch_plugin_api::PluginKind::Probe)
        .find(|e| e.instance.is_some())
        .cloned()
    else {
        tracing::error!("probes: the probe-verbs plugin is not loaded; no probes will run");
        return;
    };
    let mut stats: BTreeMap<String, PeerStats> = BTreeMap::new();
    let mut ticker = tokio::time::interval(cfg.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_problems = Vec::new();
    let mut source = Some(PeerSource::new(cfg.clone()));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        // DNS and the peers file block: not on the async worker.
        let mut src = source.take().expect("returned by the previous round");
        let Ok((src, (list, problems))) = tokio::task::spawn_blocking(move || {
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
        // Peers no longer listed are forgotten (their series end).
        stats.retain(|p, _| list.contains(p));
        for peer in list {
            let target = ProbeTarget {
                peer: peer.clone(),
                size: cfg.size,
                timeout_ms: cfg.timeout.as_millis() as u64,
            };
            let r = probe_once(&entry, target, &agent.metrics).await;
            let s = stats.entry(peer).or_default();
            s.sent += 1;
            match r {
                Ok(res) => match res.outcome {
                    ProbeOutcome::Ok { rtt_seconds } => {
                        s.received += 1;
                        s.rtt = Some(rtt_seconds);
                        s.rtt_sum += rtt_seconds;
                    }
                    ProbeOutcome::Timeout => s.timeouts += 1,
                    ProbeOutcome::ConnectFailed { cause } => {
                        *s.failures.entry(cause_class(&cause)).or_default() += 1;
                    }
                },
                Err(_) => *s.failures.entry("plugin".into()).or_default() += 1,
            }
        }
        let now = SystemTime::now();
        agent.store.ingest_at(
            PLUGIN,
            &samples(&stats),
            &agent.metrics,
            now,
            std::time::Instant::now(),
        );
        agent.evaluate_rules();
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
        st.insert(
            "10.0.0.1".to_string(),
            PeerStats {
                sent: 3,
                received: 2,
                timeouts: 1,
                failures: [("rejected".to_string(), 1)].into(),
                rtt: Some(0.002),
                rtt_sum: 0.005,
            },
        );
        let s = samples(&st);
        let get = |n: &str| s.iter().find(|x| x.name == n).unwrap();
        assert_eq!(get("rdma.probe.sent").value, Value::U64(3));
        assert_eq!(get("rdma.probe.rtt").value, Value::F64(0.002));
        assert_eq!(
            get("rdma.probe.failures").attributes[ATTR_CAUSE],
            "rejected"
        );
        assert_eq!(get("rdma.probe.timeouts").attributes[ATTR_PEER], "10.0.0.1");
    }
}
