//! Probe rounds on the agent's schedule: every peer of a round in flight at once through
//! the probe plugin, bounded by `max_peers` and `max_rate`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use rocewatch_plugin_api::{NicTimestamps, ProbeResult, ProbeTarget, CM_PROBES_AT_ONCE};

use super::config::{ProbesConfig, ATTR_MODE, ATTR_PEER, PLUGIN, RTT};
use super::peers::PeerSource;
use super::stats::{samples, PeerStats};
use rocewatch_runtime::host::registry::Entry;
use rocewatch_runtime::pipeline::Pipeline;

/// How long a call to the plugin for `targets` side-channel targets and `cm` RDMA CM
/// targets may take: connecting (64 at a time: the TCP connection and the side channel's
/// answer, each within the timeout) and the probe; then the CM probes,
/// [`CM_PROBES_AT_ONCE`] at a time, each within the timeout and a disconnect; plus five
/// seconds.
pub(super) fn call_limit(targets: usize, cm: usize, timeout: Duration) -> Duration {
    let connect_waves = targets.div_ceil(64).max(1) as u32;
    let cm_waves = cm.div_ceil(CM_PROBES_AT_ONCE) as u32;
    timeout * (2 * connect_waves + 1)
        + (timeout + Duration::from_millis(200)) * cm_waves
        + Duration::from_secs(5)
}

/// One probe through the probe plugin `entry`, on the runner.
pub async fn probe_once(
    entry: &rocewatch_runtime::host::registry::Entry,
    target: ProbeTarget,
    metrics: &rocewatch_runtime::selfmetrics::SelfMetrics,
) -> Result<ProbeResult, rocewatch_runtime::host::call::CallError> {
    let mut r = probe_batch(entry, vec![target], metrics).await?;
    Ok(r.remove(0))
}

/// Every target at once through the probe plugin `entry` (`probe_many`), on the runner.
pub async fn probe_batch(
    entry: &rocewatch_runtime::host::registry::Entry,
    targets: Vec<ProbeTarget>,
    metrics: &rocewatch_runtime::selfmetrics::SelfMetrics,
) -> Result<Vec<ProbeResult>, rocewatch_runtime::host::call::CallError> {
    let timeout = targets
        .iter()
        .map(|t| Duration::from_millis(t.timeout_ms))
        .max()
        .unwrap_or_default();
    let cm = targets.iter().filter(|t| t.cm_port != 0).count();
    let limit = call_limit(targets.len() - cm, cm, timeout);
    rocewatch_runtime::host::call::call(entry, limit, metrics, move |i| match i {
        rocewatch_runtime::host::registry::Instance::Probe(p) => p.probe_many(&targets),
        _ => Err(rocewatch_plugin_api::PluginError::failed(
            "not a probe plugin",
        )),
    })
    .await
}

/// Probe every peer once per (effective) interval until `shutdown` turns true.
pub async fn run(
    entry: Entry,
    pipeline: Arc<Pipeline>,
    cfg: ProbesConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let store = pipeline.store();
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
        // Peers no longer listed are forgotten (their series end). A peer is its entry:
        // `cm:ADDRESS` and ADDRESS are two (the two paths).
        let listed: std::collections::HashSet<&str> = list.iter().map(String::as_str).collect();
        stats.retain(|p, _| listed.contains(p.as_str()));
        let kept: std::collections::HashSet<(String, bool)> = stats
            .keys()
            .map(|e| {
                let (peer, cm) = cfg.peer_mode(e);
                (peer.to_string(), cm)
            })
            .collect();
        store.retain_histogram(RTT, |a| {
            a.get(ATTR_PEER)
                .is_some_and(|p| kept.contains(&(p.to_string(), a.get(ATTR_MODE) == Some("cm"))))
        });
        let targets: Vec<ProbeTarget> = list
            .iter()
            .map(|entry| {
                let (peer, cm) = cfg.peer_mode(entry);
                let mut t = ProbeTarget::new(peer, cfg.size, cfg.timeout.as_millis() as u64);
                if cm {
                    t.cm_port = cfg.cm_port;
                }
                t
            })
            .collect();
        if !targets.is_empty() {
            let results = tokio::select! {
                r = probe_batch(&entry, targets, pipeline.metrics()) => r,
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
                let s = stats.entry(peer.clone()).or_insert_with(|| {
                    let (addr, cm) = cfg.peer_mode(peer);
                    PeerStats::with_mode(addr, cm)
                });
                let outcome = match &results {
                    Ok(r) => r.get(i).map(|r| &r.outcome).ok_or(()),
                    Err(_) => Err(()),
                };
                if let Some(rtt) = s.count(outcome) {
                    rtts.push((s.attrs.clone(), rtt));
                }
            }
            store.observe(RTT, rtts.iter().map(|(a, v)| (a, *v)));
        }
        pipeline.ingest_at(
            PLUGIN,
            &samples(&stats, over_limit, interval),
            SystemTime::now(),
            Instant::now(),
        );
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
    fn call_limit_grows_with_connect_waves() {
        let t = Duration::from_secs(1);
        assert_eq!(call_limit(1, 0, t), Duration::from_secs(8));
        assert_eq!(call_limit(64, 0, t), Duration::from_secs(8));
        assert_eq!(call_limit(65, 0, t), Duration::from_secs(10));
        assert_eq!(call_limit(1000, 0, t), Duration::from_secs(38));
        // CM probes follow, 16 at a time, each within the timeout and a disconnect.
        assert_eq!(call_limit(0, 16, t), Duration::from_millis(9200));
        assert_eq!(call_limit(1, 17, t), Duration::from_millis(10400));
    }
}
