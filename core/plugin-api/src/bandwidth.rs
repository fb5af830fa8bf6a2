//! Bandwidth tests (`rocewatch bandwidth`): what is asked of a probe plugin, and what it
//! answers. Optional: a probe plugin that does not measure bandwidth keeps the default
//! [`crate::ProbePlugin::bandwidth`], which says so.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The RDMA operation a bandwidth test posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BandwidthOp {
    /// RDMA WRITE into the peer's buffer (`ib_write_bw`).
    #[default]
    Write,
    /// RDMA READ from the peer's buffer (`ib_read_bw`).
    Read,
    /// SEND into receives the peer keeps posted (`ib_send_bw`).
    Send,
}

impl BandwidthOp {
    pub fn as_str(self) -> &'static str {
        match self {
            BandwidthOp::Write => "write",
            BandwidthOp::Read => "read",
            BandwidthOp::Send => "send",
        }
    }
}

impl std::fmt::Display for BandwidthOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A bandwidth test towards a peer running a responder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BandwidthRequest {
    /// Peer address (IP or name).
    pub peer: String,
    pub op: BandwidthOp,
    /// Bytes per message.
    pub size: u32,
    /// RC queue pairs, each with its own buffer and up to `depth` messages in flight.
    pub qps: u16,
    /// How long messages are posted.
    pub duration_ms: u64,
    /// The responder runs the same test towards this side at the same time.
    pub bidirectional: bool,
    /// How long connecting and the side channel's answers may take.
    pub timeout_ms: u64,
}

/// One side's traffic during a test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BandwidthSide {
    /// Bytes of the messages this side posted and saw complete.
    pub bytes: u64,
    pub messages: u64,
    /// From the first post to the last completion.
    pub seconds: f64,
    /// The best 100 ms interval, in bits per second.
    pub peak_bps: f64,
    /// The steady rate, as `ib_write_bw -D` measures it: the messages completed between
    /// a margin after the start and the same margin before the end (a quarter of the
    /// duration, at most 2 s), in bits per second.
    #[serde(default)]
    pub average_bps: f64,
}

/// Raw counters of a port, before and after a test, as the files name them relative to
/// the port directory (`hw_counters/sent_pkts`, `counters/port_xmit_data`): the responder
/// reads its own port's and sends them back, so both ends of the path are seen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PortSnapshot {
    pub device: String,
    pub port: u8,
    /// The port's `rate` file (`100 Gb/sec (4X EDR)`), when readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// The port's netdev (RoCE) and its `speed` in Mb/s, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev_speed_mbps: Option<u64>,
    pub before: BTreeMap<String, u64>,
    pub after: BTreeMap<String, u64>,
}

/// What a bandwidth test measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BandwidthResult {
    pub peer: String,
    pub op: BandwidthOp,
    pub size: u32,
    pub qps: u16,
    /// Messages in flight per queue pair.
    pub depth: u32,
    /// The local RDMA device and port the test ran on.
    pub device: String,
    pub port: u8,
    /// This side's messages (the writes, reads or sends it posted).
    pub local: BandwidthSide,
    /// The responder's messages towards this side (with `bidirectional`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<BandwidthSide>,
    /// The responder's port counters around the test, when it sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_port: Option<PortSnapshot>,
    /// What went wrong on the responder's side, if anything (its report says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_error: Option<String>,
}
