//! Doctor's `--bandwidth` check: a 3 s test measured by `rocewatch_probes::bandwidth`
//! (the same measurement as `rocewatch bandwidth`), as a check.

use std::sync::Arc;
use std::time::Duration;

use rocewatch_plugin_api::{BandwidthOp, BandwidthRequest};

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;
use rocewatch_probes::bandwidth::{gbps, measure, MeasureError, Verdict};
use rocewatch_runtime::app::App;

/// Doctor's check: a 3 s RDMA WRITE test, 4 queue pairs of 64 KiB, held against 90 % of
/// the line rate.
/// How long `--bandwidth` measures.
pub(crate) const BANDWIDTH_TEST: Duration = Duration::from_secs(3);

pub(crate) async fn bandwidth_check(app: &Arc<App>, peer: &str) -> Check {
    let req = BandwidthRequest {
        peer: peer.into(),
        op: BandwidthOp::Write,
        size: 65536,
        qps: 4,
        duration_ms: BANDWIDTH_TEST.as_millis() as u64,
        bidirectional: false,
        timeout_ms: Duration::from_secs(3).as_millis() as u64,
    };
    match measure(app, req, 0.9).await {
        Err(MeasureError::NoPlugin(why)) => check(
            "bandwidth",
            peer,
            Status::Skip,
            format!("the verbs probe plugin is not loaded: {why}"),
            None,
        ),
        Err(MeasureError::Test(e)) => check(
            "bandwidth",
            peer,
            Status::Fail,
            e,
            Some(format!("the peer must run `rocewatch probe --serve` (or the agent with [probes] serve_bandwidth = true); then `rocewatch bandwidth {}` for the whole test", word(peer))),
        ),
        Ok(m) => {
            let got = format!(
                "RDMA WRITE {} Gb/s over {} s",
                gbps(m.average_bps),
                (m.result.local.seconds * 10.0).round() / 10.0
            );
            match m.verdict {
                Verdict::Pass => check(
                    "bandwidth",
                    peer,
                    Status::Pass,
                    format!("{got}: {:.0} % of the line rate", m.share.unwrap_or(0.0) * 100.0),
                    None,
                ),
                Verdict::Unknown => check(
                    "bandwidth",
                    peer,
                    Status::Info,
                    format!("{got}; the port's line rate is unknown (no rate or netdev speed)"),
                    None,
                ),
                Verdict::Shortfall => check(
                    "bandwidth",
                    peer,
                    Status::Warn,
                    format!("{got}: {}", m.explanation.unwrap_or_default()),
                    Some(format!("`rocewatch bandwidth {}` runs the full test and shows the counters of both ports", word(peer))),
                ),
            }
        }
    }
}
