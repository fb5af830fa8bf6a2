//! A bandwidth test with its context: the counters of the local port before and after
//! (every collector, as the agent reads them), the peer's (its responder's report), the
//! port's line rate, the share reached and the verdict. Used by `rocewatch bandwidth`
//! and by doctor's `--bandwidth` check (a 3 s test).

use std::sync::Arc;

use rocewatch_plugin_api::{BandwidthRequest, BandwidthResult};
use rocewatch_sysfs::SysRoot;
use serde::Serialize;

use super::{causes, run_test, shortfall_sentence, PortMoves};
use rocewatch_runtime::app::App;

/// The local port's line rate: its `rate` file and, for RoCE, its netdev's speed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LineRate {
    /// What the test is held against (the netdev speed when known, else the port rate).
    pub bps: Option<f64>,
    pub port_rate: Option<String>,
    pub netdev: Option<String>,
    pub netdev_speed_mbps: Option<u64>,
}

/// The line rate of `dev` port `port` under `root`.
pub fn line_rate(root: &SysRoot, dev: &str, port: u8) -> LineRate {
    let port_rate = root.port_attr(dev, port as u32, "rate").ok().flatten();
    let gids = root.gids(dev, port as u32).unwrap_or_default();
    let netdev = root.port_netdev(dev, port as u32, &gids);
    let netdev_speed_mbps = netdev.as_deref().and_then(|n| {
        let s = root.netdev_attr(n, "speed").ok().flatten()?;
        s.trim()
            .parse::<i64>()
            .ok()
            .filter(|v| *v > 0)
            .map(|v| v as u64)
    });
    let rate_bps = port_rate
        .as_deref()
        .and_then(rocewatch_sysfs::parse::parse_rate_bps);
    let bps = netdev_speed_mbps
        .map(|m| m as f64 * 1e6)
        .or(rate_bps.map(|b| b as f64));
    LineRate {
        bps,
        port_rate,
        netdev,
        netdev_speed_mbps,
    }
}

/// The verdict of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Shortfall,
    /// No line rate to hold the result against.
    Unknown,
}

/// A test and everything around it.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub result: BandwidthResult,
    /// This side's steady rate, in bits per second (perftest's BW average).
    pub average_bps: f64,
    pub line_rate: LineRate,
    pub share: Option<f64>,
    pub min_share: f64,
    pub verdict: Verdict,
    /// For a shortfall: the share and what in the counters explains it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    pub local_moves: PortMoves,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_moves: Option<PortMoves>,
    /// Collectors that failed around the test (their counters are missing above).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub collection_errors: Vec<String>,
}

/// Why a test did not run.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("the verbs probe plugin is not loaded: {0}")]
    NoPlugin(String),
    #[error("{0}")]
    Test(String),
}

/// Run `request` through `app`'s probe plugin with a collection before and after.
pub async fn measure(
    app: &Arc<App>,
    request: BandwidthRequest,
    min_share: f64,
) -> Result<Measured, MeasureError> {
    let entry = app
        .registry
        .of_kind(rocewatch_plugin_api::PluginKind::Probe)
        .find(|e| {
            e.instance.is_some()
                && e.status().state == rocewatch_runtime::host::registry::State::Started
        })
        .cloned()
        .ok_or_else(|| {
            let why: Vec<String> = app
                .registry
                .statuses()
                .into_iter()
                .filter_map(|s| s.last_error)
                .collect();
            MeasureError::NoPlugin(if why.is_empty() {
                "rocewatch plugins says why".into()
            } else {
                why.join("; ")
            })
        })?;
    let (before, mut errors) = app.collect_all().await;
    let result = run_test(&entry, request, app.metrics())
        .await
        .map_err(|e| MeasureError::Test(e.to_string()))?;
    let (after, errors_after) = app.collect_all().await;
    errors.extend(errors_after);
    let root = SysRoot::new(app.sysfs_root.clone());
    let line_rate = line_rate(&root, &result.device, result.port);
    let local_moves = PortMoves::from_samples(
        &before.samples,
        &after.samples,
        &result.device,
        result.port,
        line_rate.netdev.as_deref(),
    );
    let remote_moves = result.remote_port.as_ref().map(PortMoves::from_snapshot);
    let average_bps = result.local.average_bps;
    let share = line_rate.bps.filter(|b| *b > 0.0).map(|b| average_bps / b);
    let (verdict, explanation) = match (share, line_rate.bps) {
        (Some(s), Some(line)) if s < min_share => (
            Verdict::Shortfall,
            Some(shortfall_sentence(
                s,
                line,
                &causes(&local_moves, remote_moves.as_ref()),
            )),
        ),
        (Some(_), _) => (Verdict::Pass, None),
        _ => (Verdict::Unknown, None),
    };
    Ok(Measured {
        result,
        average_bps,
        line_rate,
        share,
        min_share,
        verdict,
        explanation,
        local_moves,
        remote_moves,
        collection_errors: errors.iter().map(|e| e.to_string()).collect(),
    })
}
