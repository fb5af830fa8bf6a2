//! The fleet, as rocewatch sees it without a central service: each host reads where the
//! fleet's NICs hang (a topology file a CMDB exports, or LLDP) and derives alone, from
//! that and its own name, which peers it probes.
//!
//! - [`topology`]: the topology CSV (`host,rail,addr,tor`), read strictly, errors naming
//!   the line.
//! - [`lldp`]: the switch and port each netdev is cabled to, from `lldpcli -f json0`.
//! - [`promapi`]: the same map from the metrics backend, the NIC info series every host
//!   exports, as the Prometheus HTTP API (or VictoriaMetrics) answers an instant query.
//! - [`pinglist`]: the ToR mesh plus cross-ToR peers chosen by rendezvous hashing, so
//!   that every ordered pair of ToRs is probed on every rail by two different hosts, with
//!   a bound per host.
//!
//! This crate depends on nothing of rocewatch.

pub mod lldp;
pub mod pinglist;
pub mod promapi;
pub mod topology;

pub use pinglist::{Class, Options, Peer, Pinglist, Plan};
pub use topology::{Nic, Topology, TopologyError};
