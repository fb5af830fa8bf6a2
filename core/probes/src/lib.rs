//! Scheduled verbs probes: every peer is probed once per `interval` through the
//! probe-verbs plugin; per-peer counters, the last RTT and an RTT histogram go into the
//! store under the pseudo-plugin [`PLUGIN`], so exporters and rules see them (probe loss
//! can fire remediation: `rdma.probe.timeouts` over `rdma.probe.sent`, joined on the
//! peer).
//!
//! Peers come from a static list, a DNS name resolving to many hosts, and a file (one peer
//! per line, `#` comments) re-read when it changes.
//!
//! With `[fleet]`, the peers are this host's pinglist from the fleet's map: everything
//! about fleet probing is in [`fleet`] (its section, flows, rounds, statistics, host
//! noise and the fleet simulator).
//!
//! Bounds: at most `max_peers` peers are probed (the rest are counted, not probed); the
//! interval stretches so that the agent sends at most `max_rate` probes per second; a
//! round hands every peer to the plugin at once (`probe_many`: every probe in flight
//! together, so dead peers cost the round one timeout, not one per dead peer; new peers
//! are connected 64 at a time). Each probe plugin instance (a device, a rail) is called on
//! a task of its own: one whose call still runs when the next round comes skips that
//! round (counted, `rocewatch.probe.rounds_skipped`) and the others keep their interval.
//! Memory per peer in the agent is its counters and one histogram of
//! `rtt_buckets.len() + 1` counts.

pub mod bandwidth;
mod config;
pub mod fleet;
mod peers;
mod plugin;
mod rounds;
mod stats;

pub use config::{
    default_rtt_buckets, parse_port, ProbeMode, ProbesConfig, ATTR_CAUSE, ATTR_MODE, ATTR_PEER,
    CM_PREFIX, DEFAULT_CM_PORT, PLUGIN, RTT,
};
pub use fleet::{
    count_round, round_samples, run_fleet, targets as fleet_targets, FlowSet, RttAttrs,
};
pub use peers::{parse_peers_file, PeerSource};
pub use plugin::{
    check_port, instance_port, plugin_config, plugin_path, rail_ports, set_port, PluginNotFound,
};
pub use rounds::{probe_batch, probe_once, run};
pub use stats::declare;
