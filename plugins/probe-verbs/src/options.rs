//! The plugin's options (`device`, `port`, `tcp_port`, `serve`, `serve_bandwidth`,
//! `busy_poll`, `reconnect_backoff`, `serve_cm_port`) and their defaults.

use std::time::Duration;

fn default_port() -> u8 {
    1
}
fn default_tcp_port() -> u16 {
    rocewatch_plugin_api::DEFAULT_PROBE_TCP_PORT
}
fn default_true() -> bool {
    true
}

/// The plugin's options.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default = "default_port")]
    pub port: u8,
    #[serde(default = "default_tcp_port")]
    pub tcp_port: u16,
    #[serde(default = "default_true")]
    pub serve: bool,
    /// The responder also serves bandwidth tests (one at a time, at most 60 s each).
    /// Off unless asked: a test fills the link for its duration.
    #[serde(default)]
    pub serve_bandwidth: bool,
    /// Busy-poll for completions instead of sleeping on completion events (prober and
    /// responder), as perftest does: the lowest, steadiest RTTs for a one-off
    /// measurement, at the price of a busy core. Off by default (the agent's prober
    /// spins 2 ms per round at most, its responder not at all).
    #[serde(default)]
    pub busy_poll: bool,
    /// After a peer could not be connected, wait before trying again: 1 s, doubling up
    /// to this (meanwhile its probes fail with the last cause, saying when the next
    /// attempt is). A dead peer then costs a connection attempt (a thread, a TCP SYN,
    /// its timeout) every `reconnect_backoff`, not every round. `"0s"`: try every time
    /// (`rocewatch probe` does).
    #[serde(default = "default_backoff", deserialize_with = "de_duration")]
    pub reconnect_backoff: Duration,
    /// Also listen for RDMA CM connections (what `rping -s` does) on this port, every
    /// address, and echo their messages: the responder of `probe --cm`. Absent: no CM
    /// listener.
    #[serde(default)]
    pub serve_cm_port: Option<u16>,
}

fn default_backoff() -> Duration {
    Duration::from_secs(30)
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    humantime::parse_duration(&s).map_err(serde::de::Error::custom)
}
