//! Signals the agent computes from counter rates after every collection (gauges of the
//! pseudo-plugin `derived`): their catalog entries and attributes.

use rocewatch_plugin_api::MetricDescriptor;

use crate::entry::{descriptors_of, entry, CatalogEntry, NONE, PORT};
use crate::names;

/// The derived `pfc_pause_ratio` signal.
pub const DERIVED_PFC_PAUSE_RATIO: CatalogEntry = entry!(names::PFC_PAUSE_RATIO, "1", Gauge, "rate of rdma.pfc.pause_duration / 1e6", NONE, 1, "mlx5",
        "Fraction of time a priority was paused over the last collection interval (pause time per second): 0 is never, 1 is always.");
/// The derived `port_throughput` signal.
pub const DERIVED_PORT_THROUGHPUT: CatalogEntry = entry!(
    names::PORT_THROUGHPUT,
    "By/s",
    Gauge,
    "rate of rdma.port.io",
    NONE,
    1,
    PORT,
    "Data throughput of a port per direction over the last collection interval."
);
/// The derived `priority_throughput` signal.
pub const DERIVED_PRIORITY_THROUGHPUT: CatalogEntry = entry!(
    names::PRIORITY_THROUGHPUT,
    "By/s",
    Gauge,
    "rate of rdma.priority.io",
    NONE,
    1,
    "mlx5",
    "Data throughput of a priority per direction over the last collection interval."
);
/// The derived `port_error_rate` signal.
pub const DERIVED_PORT_ERROR_RATE: CatalogEntry = entry!(names::PORT_ERROR_RATE, "{error}/s", Gauge, "sum of the rates of the port's error counters", NONE, 1, PORT,
        "Errors per second on a port: symbol, receive, remote physical, discards, link integrity, buffer overrun, link downed, out_of_buffer, out-of-sequence, ACK timeouts, sequence, RNR, CQE, retry and send errors together.");
/// The derived congestion state per port and priority (`rocewatch_congestion`).
pub const DERIVED_PRIORITY_CONGESTION: CatalogEntry = entry!(names::PRIORITY_CONGESTION, "{state}", Gauge, "rates of the priority's bytes, pauses, pause time and discards and of the port's ECN marks, CNPs, out-of-sequence and retransmissions", NONE, 1, "mlx5, bnxt (per-priority bytes and pause time)",
        "1 for a port and priority's congestion state over the last interval, named by `rdma.congestion.state`: idle, flowing, ecn_controlled (ECN marks or CNPs, no pauses), lossy (losses without pauses), pfc_dominated (pauses with fewer ECN marks and CNPs than pause frames), storm (paused by the peer 90 % of the interval while sending next to nothing). One series per port and priority; `rocewatch doctor` and docs/CONGESTION.md say what each points to.");
/// The attribute naming the congestion state.
pub const ATTR_CONGESTION_STATE: &str = "rdma.congestion.state";

/// Signals the agent computes from counter rates (gauges, emitted by the pseudo-plugin
/// `derived` after every collection).
pub static DERIVED_CATALOG: &[CatalogEntry] = &[
    DERIVED_PFC_PAUSE_RATIO,
    DERIVED_PORT_THROUGHPUT,
    DERIVED_PRIORITY_THROUGHPUT,
    DERIVED_PORT_ERROR_RATE,
    DERIVED_PRIORITY_CONGESTION,
];

/// Descriptors of the derived signals.
pub fn derived_descriptors() -> Vec<MetricDescriptor> {
    descriptors_of(DERIVED_CATALOG)
}
