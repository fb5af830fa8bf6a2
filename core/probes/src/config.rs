//! `[probes]`: peers (list, DNS name, file), interval, timeout, bounds, RTT buckets.

use rocewatch_metrics::names;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The name probe series are stored under.
pub const PLUGIN: &str = "prober";

/// Attribute naming the peer.
pub const ATTR_PEER: &str = "rdma.probe.peer";

/// Attribute naming a failure's cause.
pub const ATTR_CAUSE: &str = "rdma.probe.cause";

/// Attribute naming the path a probe took, on the series of probes through the RDMA
/// connection manager (`cm`); absent on the side channel's (as before ABI 1.4).
pub const ATTR_MODE: &str = "rdma.probe.mode";

/// A peer entry that asks for the RDMA CM path whatever `[probes] mode` says:
/// `cm:10.0.0.2`.
pub const CM_PREFIX: &str = "cm:";

/// The RDMA CM port `probe --cm` and its responder use by default: next to the side
/// channel's TCP 18516, not rping's 7174 (an rping server on the host would hold it).
pub const DEFAULT_CM_PORT: u16 = 18517;

/// The RTT histogram.
pub const RTT: &str = names::PROBE_RTT;

pub(super) fn default_interval() -> Duration {
    Duration::from_secs(1)
}

pub(super) fn default_timeout() -> Duration {
    Duration::from_secs(1)
}

pub(super) fn default_size() -> u32 {
    64
}

pub(super) fn default_tcp_port() -> u16 {
    rocewatch_plugin_api::DEFAULT_PROBE_TCP_PORT
}

pub(super) fn default_true() -> bool {
    true
}

pub(super) fn default_max_peers() -> usize {
    1000
}

pub(super) fn default_backoff() -> Duration {
    Duration::from_secs(30)
}

pub(super) fn default_cm_port() -> u16 {
    DEFAULT_CM_PORT
}

/// How the peers are probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeMode {
    /// Queue-pair numbers over a TCP side channel, as perftest does.
    #[default]
    SideChannel,
    /// Through the RDMA connection manager, as rping and CM applications do.
    Cm,
}

pub(super) fn default_max_rate() -> f64 {
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
    /// Peers probed from another RDMA device (`mlx5_1`) or port (`mlx5_1:2`) than
    /// `device`: the peers of another rail. Each device named gets a probe plugin
    /// instance of its own.
    #[serde(default)]
    pub device_peers: BTreeMap<String, Vec<String>>,
    /// Time between two probes of the same peer.
    #[serde(
        default = "default_interval",
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
    )]
    pub interval: Duration,
    #[serde(
        default = "default_timeout",
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
    )]
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
    #[serde(
        default = "default_backoff",
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
    )]
    pub reconnect_backoff: Duration,
    /// Upper bounds of the RTT histogram's buckets, in seconds, ascending.
    #[serde(default = "default_rtt_buckets")]
    pub rtt_buckets: Vec<f64>,
    /// Also answer other agents' probes (default true).
    #[serde(default = "default_true")]
    pub serve: bool,
    /// The responder also serves bandwidth tests (`rocewatch bandwidth` from another
    /// host): one at a time, at most 60 s each. Default false: a test fills the link.
    /// Needs `serve`.
    #[serde(default)]
    pub serve_bandwidth: bool,
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default = "default_tcp_port")]
    pub tcp_port: u16,
    /// The probe-verbs plugin (default: ROCEWATCH_PLUGIN_DIR, next to the binary, or /usr/lib/rocewatch).
    #[serde(default)]
    pub plugin: Option<PathBuf>,
    /// How every peer is probed: `side_channel` (default) or `cm` (through the RDMA
    /// connection manager). A peer written `cm:ADDRESS` is probed through the CM
    /// whatever this says; one listed both ways is probed both ways.
    #[serde(default)]
    pub mode: ProbeMode,
    /// The RDMA CM port of the peers' listeners (and of this agent's, with `serve_cm`).
    #[serde(default = "default_cm_port")]
    pub cm_port: u16,
    /// The responder also listens for RDMA CM connections on `cm_port` (as `rping -s`).
    /// Default false: a listener other hosts can connect to is opened only when asked.
    #[serde(default)]
    pub serve_cm: bool,
}

/// A device (`mlx5_1`) or port (`mlx5_1:2`) as (device, port), the name as sysfs and
/// libibverbs spell it (letters, digits, `_`, `-`, `.`), the port 1 to 255.
pub fn parse_port(spec: &str) -> Option<(&str, Option<u8>)> {
    let (device, port) = match spec.rsplit_once(':') {
        Some((d, p)) => (d, Some(p.parse::<u8>().ok().filter(|p| *p > 0)?)),
        None => (spec, None),
    };
    let ok = !device.is_empty()
        && device.len() <= 64
        && device
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    ok.then_some((device, port))
}

impl ProbesConfig {
    /// The first key that lists peers (`peers`, `peers_dns`, `peers_file`,
    /// `device_peers`), if any: `[fleet]` refuses them.
    pub fn peer_list_key(&self) -> Option<&'static str> {
        [
            ("peers", !self.peers.is_empty()),
            ("peers_dns", self.peers_dns.is_some()),
            ("peers_file", self.peers_file.is_some()),
            ("device_peers", !self.device_peers.is_empty()),
        ]
        .into_iter()
        .find_map(|(k, set)| set.then_some(k))
    }

    /// A listed peer's address and whether it is probed through the RDMA CM.
    pub fn peer_mode<'a>(&self, entry: &'a str) -> (&'a str, bool) {
        match entry.strip_prefix(CM_PREFIX) {
            Some(peer) => (peer, true),
            None => (entry, self.mode == ProbeMode::Cm),
        }
    }
}

impl ProbesConfig {
    /// What is wrong with the settings: (key, message). Its durations are checked with
    /// every other one of the configuration (`Config::durations`).
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
        if self.serve_bandwidth && !self.serve {
            return bad(
                "serve_bandwidth",
                "needs serve = true (bandwidth tests are served by the responder)".into(),
            );
        }
        for key in self.device_peers.keys() {
            if parse_port(key).is_none() {
                return bad(
                    &format!("device_peers.{key}"),
                    format!(
                        "{key:?}: give an RDMA device's name (mlx5_1) or DEVICE:PORT (mlx5_1:2)"
                    ),
                );
            }
        }
        if self.serve_cm && !self.serve {
            return bad(
                "serve_cm",
                "a CM listener is part of the responder: set serve = true too".into(),
            );
        }
        Ok(())
    }

    /// The interval in effect for `peers` peers: `interval`, or longer so that the agent
    /// stays within `max_rate`, but never longer than a day (a rate so low would overflow
    /// the time of the next round).
    pub fn effective_interval(&self, peers: usize) -> Duration {
        let max = rocewatch_runtime::util::duration::PROBE_ROUND_MAX;
        let floor = Duration::try_from_secs_f64(peers as f64 / self.max_rate).unwrap_or(max);
        self.interval.max(floor).min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_max_rate_stretches_the_interval_without_overflowing() {
        let c: ProbesConfig = toml::from_str("max_rate = 1e-300\ninterval = \"1s\"").unwrap();
        assert!(c.validate().is_ok());
        let i = c.effective_interval(1000);
        // It is added to an Instant every round.
        assert!(std::time::Instant::now().checked_add(i).is_some(), "{i:?}");
        assert_eq!(i, rocewatch_runtime::util::duration::PROBE_ROUND_MAX);
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
            (
                "serve = false\nserve_bandwidth = true",
                "probes.serve_bandwidth",
            ),
        ] {
            let e = cfg(bad).validate().unwrap_err();
            assert_eq!(e.0, key, "{bad}: {e:?}");
        }
        // The default buckets are valid and tell 10 µs from 1 s.
        let d = default_rtt_buckets();
        assert_eq!((d[0], *d.last().unwrap()), (10e-6, 1.0));
        assert!(cfg("").validate().is_ok());
        assert!(!cfg("").serve_bandwidth, "off unless asked");
        assert!(cfg("serve_bandwidth = true").validate().is_ok());
        assert!(toml::from_str::<ProbesConfig>("serve_bandwith = true").is_err());
        assert_eq!(
            cfg("serve = false\nserve_cm = true")
                .validate()
                .unwrap_err()
                .0,
            "probes.serve_cm"
        );
        assert!(toml::from_str::<ProbesConfig>("mode = \"rping\"").is_err());
    }

    #[test]
    fn device_peers_name_a_device_or_port() {
        let c: ProbesConfig = toml::from_str(
            "[device_peers]\nmlx5_1 = [\"10.0.1.2\"]\n\"mlx5_2:2\" = [\"10.0.2.2\"]",
        )
        .unwrap();
        assert!(c.validate().is_ok());
        assert_eq!(c.device_peers["mlx5_1"], ["10.0.1.2"]);
        for key in ["\"mlx5_1:0\"", "\"mlx5 1\"", "\"mlx5_1:x\"", "\":1\""] {
            let c: ProbesConfig = toml::from_str(&format!("[device_peers]\n{key} = []")).unwrap();
            let (k, m) = c.validate().unwrap_err();
            assert_eq!(k, format!("probes.device_peers.{}", key.trim_matches('"')));
            assert!(m.contains("DEVICE:PORT"), "{m}");
        }
        assert_eq!(parse_port("mlx5_3:1"), Some(("mlx5_3", Some(1))));
        assert_eq!(parse_port("rxe0"), Some(("rxe0", None)));
        // [fleet] refuses peer lists, this one too.
        assert_eq!(c.peer_list_key(), Some("device_peers"));
        let none: ProbesConfig = toml::from_str("").unwrap();
        assert_eq!(none.peer_list_key(), None);
    }

    #[test]
    fn a_peer_is_probed_through_the_cm_by_its_prefix_or_the_mode() {
        let c: ProbesConfig = toml::from_str("").unwrap();
        assert_eq!(c.cm_port, DEFAULT_CM_PORT);
        assert_eq!(c.peer_mode("10.0.0.2"), ("10.0.0.2", false));
        assert_eq!(c.peer_mode("cm:10.0.0.2"), ("10.0.0.2", true));
        let c: ProbesConfig = toml::from_str("mode = \"cm\"\ncm_port = 7174").unwrap();
        assert_eq!(c.peer_mode("10.0.0.2"), ("10.0.0.2", true));
        assert_eq!(c.cm_port, 7174);
    }
}
