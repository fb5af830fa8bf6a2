//! Probe rounds on the agent's schedule: every peer of a round in flight at once through
//! the probe plugin, bounded by `max_peers` and `max_rate`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use rocewatch_plugin_api::{
    NicTimestamps, ProbeOutcome, ProbeResult, ProbeTarget, CM_PROBES_AT_ONCE,
};

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

/// A round's results from one probe plugin instance: its targets' indices and what the
/// plugin answered.
pub(crate) type Answer = (usize, Vec<usize>, Result<Vec<ProbeResult>, String>);

/// Each instance's targets (`groups`: indices in `targets`) through it, the instances
/// called at once; `None` when `shutdown` came first.
pub(crate) async fn probe_rails(
    instances: &[Entry],
    groups: BTreeMap<usize, Vec<usize>>,
    targets: &[ProbeTarget],
    pipeline: &Pipeline,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Vec<Answer>> {
    let mut calls = Vec::with_capacity(groups.len());
    for (instance, flows) in groups {
        let t: Vec<ProbeTarget> = flows.iter().map(|&i| targets[i].clone()).collect();
        let entry = instances.get(instance).cloned();
        let metrics = Arc::clone(pipeline.metrics());
        let call = tokio::spawn(async move {
            match entry {
                Some(e) => probe_batch(&e, t, &metrics)
                    .await
                    .map_err(|e| e.to_string()),
                None => Err(format!("no probe plugin instance {instance}")),
            }
        });
        calls.push((instance, flows, call));
    }
    let aborts: Vec<_> = calls.iter().map(|c| c.2.abort_handle()).collect();
    let all = async {
        let mut out = Vec::with_capacity(calls.len());
        for (instance, flows, call) in calls {
            let r = call
                .await
                .unwrap_or_else(|e| Err(format!("the call failed: {e}")));
            out.push((instance, flows, r));
        }
        out
    };
    tokio::select! {
        r = all => Some(r),
        _ = shutdown.changed() => {
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
            None
        }
    }
}

/// The outcome of each of `n` targets from the instances' answers (`Err`: none).
pub(crate) fn outcomes(n: usize, answers: &[Answer]) -> Vec<Result<&ProbeOutcome, ()>> {
    let mut out = vec![Err(()); n];
    for (_, flows, r) in answers {
        if let Ok(results) = r {
            for (k, &i) in flows.iter().enumerate() {
                out[i] = results.get(k).map(|r| &r.outcome).ok_or(());
            }
        }
    }
    out
}

/// Which instance each `[probes] device_peers` entry is probed from: (the peer entry,
/// the index in `ports`, the instances' ports), each device's peers in its order, the
/// peers of a device with no instance left out and named in the log.
fn bound_peers(cfg: &ProbesConfig, ports: &[Option<String>]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (key, peers) in &cfg.device_peers {
        match ports.iter().position(|p| p.as_deref() == Some(key.as_str())) {
            Some(i) => out.extend(peers.iter().map(|p| (p.trim().to_string(), i))),
            None => tracing::warn!(
                "probes: no probe plugin instance on {key}: its {} peers (probes.device_peers) are not probed",
                peers.len()
            ),
        }
    }
    out
}

/// The round's peers: those of the list (the first instance's) and each device's,
/// deduplicated (the first listing wins), with the instance each is probed from.
fn round_peers(list: Vec<String>, bound: &[(String, usize)]) -> Vec<(String, usize)> {
    let mut seen = std::collections::HashSet::new();
    list.into_iter()
        .map(|p| (p, 0))
        .chain(bound.iter().cloned())
        .filter(|(p, _)| !p.is_empty() && seen.insert(p.clone()))
        .collect()
}

/// Probe every peer once per (effective) interval until `shutdown` turns true: the peer
/// list from the first of `instances` (the plugin's default device or `probes.device`),
/// each `device_peers` entry from the instance of its device, the instances at once.
pub async fn run(
    instances: Vec<(Option<String>, Entry)>,
    pipeline: Arc<Pipeline>,
    cfg: ProbesConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let store = pipeline.store();
    let ports: Vec<Option<String>> = instances.iter().map(|(p, _)| p.clone()).collect();
    let entries: Vec<Entry> = instances.into_iter().map(|(_, e)| e).collect();
    let bound = bound_peers(&cfg, &ports);
    let mut stats: BTreeMap<String, PeerStats> = BTreeMap::new();
    let mut last_problems = Vec::new();
    let mut last_limits = (0, Duration::ZERO);
    let mut said_timestamps = false;
    let mut source = Some(PeerSource::new(cfg.clone()));
    loop {
        let round = tokio::time::Instant::now();
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
        let mut list = round_peers(list, &bound);
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
        let listed: std::collections::HashSet<&str> =
            list.iter().map(|(p, _)| p.as_str()).collect();
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
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let targets: Vec<ProbeTarget> = list
            .iter()
            .enumerate()
            .map(|(i, (entry, instance))| {
                groups.entry(*instance).or_default().push(i);
                let (peer, cm) = cfg.peer_mode(entry);
                let mut t = ProbeTarget::new(peer, cfg.size, cfg.timeout.as_millis() as u64);
                if cm {
                    t.cm_port = cfg.cm_port;
                }
                t
            })
            .collect();
        if !targets.is_empty() {
            let Some(answers) =
                probe_rails(&entries, groups, &targets, &pipeline, &mut shutdown).await
            else {
                return;
            };
            if !said_timestamps {
                if let Some(NicTimestamps::Unsupported { reason }) = answers
                    .iter()
                    .find_map(|(_, _, r)| r.as_ref().ok()?.first()?.nic_timestamps.as_ref())
                {
                    tracing::info!("probes: no NIC-measured RTT split: {reason}");
                }
                said_timestamps = answers.iter().any(|(_, _, r)| r.is_ok());
            }
            let outcomes = outcomes(targets.len(), &answers);
            let mut rtts = Vec::with_capacity(list.len());
            for ((peer, _), outcome) in list.iter().zip(outcomes) {
                let s = stats.entry(peer.clone()).or_insert_with(|| {
                    let (addr, cm) = cfg.peer_mode(peer);
                    PeerStats::with_mode(addr, cm)
                });
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
