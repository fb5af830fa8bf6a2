//! Probe rounds on the agent's schedule: every peer of a round in flight at once through
//! the probe plugin, bounded by `max_peers` and `max_rate`; each probe plugin instance
//! (device, rail) called on a task of its own ([`Rails`]), so that a slow one skips rounds
//! instead of holding the others' back.

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
    probe_shared(entry, Arc::new(targets), metrics).await
}

/// [`probe_batch`] of targets the caller keeps too.
async fn probe_shared(
    entry: &rocewatch_runtime::host::registry::Entry,
    targets: Arc<Vec<ProbeTarget>>,
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

/// A round's results from one probe plugin instance: its targets' indices in the round's
/// targets and what the plugin answered.
pub(crate) type Answer = (usize, Vec<usize>, Result<Vec<ProbeResult>, String>);

/// A call that returned: its instance, the round it was made in, its targets (their
/// indices in that round's targets, and the targets) and what the plugin answered.
struct Done {
    instance: usize,
    round: u64,
    flows: Vec<usize>,
    targets: Arc<Vec<ProbeTarget>>,
    result: Result<Vec<ProbeResult>, String>,
}

/// What one instance is doing and has been said about it.
#[derive(Default)]
struct Pace {
    /// Since when its call in flight runs (none: it is free).
    busy: Option<tokio::time::Instant>,
    /// The round its last call was made in.
    last: Option<u64>,
    /// Rounds skipped since the log said so (none: it keeps its pace).
    skipping: Option<u64>,
}

/// What a round does with an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Called.
    Call,
    /// Called, and keeping its interval again after that many rounds skipped (said).
    Recovered(u64),
    /// Skipped: its call still runs.
    Skip,
    /// Skipped, the first of a run: its call has run that long (said).
    SkipStarts(Duration),
}

impl Pace {
    /// Round `round` at `now`: skipped while a call runs; called otherwise. A run of
    /// skipped rounds ends (is said to end) only when a call returns within its round (a
    /// rail whose every call takes three rounds skips two of three, said once).
    fn step(&mut self, round: u64, now: tokio::time::Instant) -> Step {
        if let Some(since) = self.busy {
            return match &mut self.skipping {
                Some(n) => {
                    *n += 1;
                    Step::Skip
                }
                None => {
                    self.skipping = Some(1);
                    Step::SkipStarts(now - since)
                }
            };
        }
        let kept = self.last.is_some_and(|l| l + 1 == round);
        self.busy = Some(now);
        self.last = Some(round);
        match self.skipping {
            Some(n) if kept => {
                self.skipping = None;
                Step::Recovered(n)
            }
            _ => Step::Call,
        }
    }
}

/// The rails a probe plugin instance probes and its port, for the skip counter and the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Name {
    rails: Vec<u8>,
    device: String,
}

impl Name {
    fn describe(&self, instance: usize) -> String {
        let port = if self.device.is_empty() {
            format!("probe plugin instance {instance}")
        } else {
            self.device.clone()
        };
        match self.rails.as_slice() {
            [] => port,
            [r] => format!("{port} (rail {r})"),
            r => format!("{port} (rails {r:?})"),
        }
    }
}

/// Every probe plugin instance on tasks of their own, on one schedule: each round calls
/// each instance that has targets and no call in flight; an instance whose previous call
/// still runs is skipped for that round (counted in `rocewatch.probe.rounds_skipped`,
/// said once when it starts and once when it ends) and its call's answer is handed back
/// in the round it returns in. The rounds come from the caller, at most one call per
/// instance each, so the rate is at most the targets of a round per interval.
pub(crate) struct Rails {
    entries: Vec<Entry>,
    metrics: Arc<rocewatch_runtime::selfmetrics::SelfMetrics>,
    names: BTreeMap<usize, Name>,
    pace: BTreeMap<usize, Pace>,
    calls: tokio::task::JoinSet<Done>,
    /// The instance of each call in flight.
    ids: std::collections::HashMap<tokio::task::Id, usize>,
    round: u64,
}

impl Rails {
    pub(crate) fn new(entries: Vec<Entry>, pipeline: &Pipeline) -> Rails {
        Rails {
            entries,
            metrics: Arc::clone(pipeline.metrics()),
            names: BTreeMap::new(),
            pace: BTreeMap::new(),
            calls: tokio::task::JoinSet::new(),
            ids: std::collections::HashMap::new(),
            round: 0,
        }
    }

    /// Each instance's port (`ports[i]`: the `i`th instance's, none: the plugin's default).
    pub(crate) fn name_devices(&mut self, ports: &[Option<String>]) {
        self.names = ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let device = p.clone().unwrap_or_default();
                let name = Name {
                    rails: Vec::new(),
                    device,
                };
                (i, name)
            })
            .collect();
    }

    /// Each instance's rails and port, from (rail, instance, port) of each rail probed.
    pub(crate) fn name_rails<'a>(&mut self, rails: impl Iterator<Item = (u8, usize, &'a str)>) {
        let mut names: BTreeMap<usize, Name> = BTreeMap::new();
        for (rail, instance, port) in rails {
            let n = names.entry(instance).or_default();
            n.rails.push(rail);
            n.device = port.to_string();
        }
        if names != self.names {
            self.names = names;
        }
    }

    /// A call that returned: its instance is free again.
    fn returned(
        &mut self,
        r: Result<(tokio::task::Id, Done), tokio::task::JoinError>,
    ) -> Option<Done> {
        let id = match &r {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        if let Some(i) = self.ids.remove(&id) {
            self.pace.entry(i).or_default().busy = None;
        }
        match r {
            Ok((_, done)) => Some(done),
            Err(e) => {
                tracing::warn!("probes: a call to the probe plugin ended without an answer: {e}");
                None
            }
        }
    }

    /// Whether `instance` is called this round ([`Pace::step`]): a round skipped is
    /// counted, the first of a run and the end of the run said.
    fn may_call(&mut self, instance: usize, now: tokio::time::Instant) -> bool {
        let step = self.pace.entry(instance).or_default().step(self.round, now);
        let name = || {
            self.names.get(&instance).map_or_else(
                || Name::default().describe(instance),
                |n| n.describe(instance),
            )
        };
        match step {
            Step::Call => return true,
            Step::Recovered(n) => {
                tracing::info!(
                    "probes: rounds from {} keep their interval again ({n} skipped)",
                    name()
                );
                return true;
            }
            Step::SkipStarts(running) => tracing::warn!(
                "probes: the call from {} is still running after {running:?}: its rounds are skipped while a call runs (the other rails keep their interval; counted in rocewatch.probe.rounds_skipped)",
                name()
            ),
            Step::Skip => {}
        }
        let empty = Name::default();
        let n = self.names.get(&instance).unwrap_or(&empty);
        if n.rails.is_empty() {
            self.metrics.probe_round_skipped(None, &n.device);
        }
        for r in &n.rails {
            self.metrics.probe_round_skipped(Some(*r), &n.device);
        }
        false
    }

    /// One round: each instance of `groups` (its targets' indices in `targets`) called
    /// unless its previous call still runs; waits until this round's calls have returned
    /// or `deadline` (the next round) comes. The answers of the calls that returned, this
    /// round's first, each with the indices in `targets` of its targets (a call of an
    /// earlier round keeps the targets still in the round); `None` when `shutdown` came
    /// first.
    pub(crate) async fn round(
        &mut self,
        groups: BTreeMap<usize, Vec<usize>>,
        targets: &[ProbeTarget],
        deadline: tokio::time::Instant,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Vec<Answer>> {
        self.round += 1;
        let mut done = Vec::new();
        while let Some(r) = self.calls.try_join_next_with_id() {
            done.extend(self.returned(r));
        }
        let now = tokio::time::Instant::now();
        let mut started = 0;
        for (instance, flows) in groups {
            if !self.may_call(instance, now) {
                continue;
            }
            let t: Arc<Vec<ProbeTarget>> =
                Arc::new(flows.iter().map(|&i| targets[i].clone()).collect());
            let entry = self.entries.get(instance).cloned();
            let metrics = Arc::clone(&self.metrics);
            let round = self.round;
            let id = self
                .calls
                .spawn(async move {
                    let result = match entry {
                        Some(e) => probe_shared(&e, Arc::clone(&t), &metrics)
                            .await
                            .map_err(|e| e.to_string()),
                        None => Err(format!("no probe plugin instance {instance}")),
                    };
                    Done {
                        instance,
                        round,
                        flows,
                        targets: t,
                        result,
                    }
                })
                .id();
            self.ids.insert(id, instance);
            started += 1;
        }
        while started > 0 {
            tokio::select! {
                Some(r) = self.calls.join_next_with_id() => {
                    let d = self.returned(r);
                    if d.as_ref().is_none_or(|d| d.round == self.round) {
                        started -= 1;
                    }
                    done.extend(d);
                }
                _ = tokio::time::sleep_until(deadline) => break,
                _ = shutdown.changed() => {
                    self.calls.abort_all();
                    return None;
                }
            }
        }
        Some(self.answers(done, targets))
    }

    /// The calls' answers with their targets' indices in this round's `targets`.
    fn answers(&self, mut done: Vec<Done>, targets: &[ProbeTarget]) -> Vec<Answer> {
        done.sort_by_key(|d| std::cmp::Reverse(d.round));
        let mut at: Option<std::collections::HashMap<(&str, u16, u16), usize>> = None;
        let mut out = Vec::with_capacity(done.len());
        for d in done {
            if d.round == self.round {
                out.push((d.instance, d.flows, d.result));
                continue;
            }
            let at = at.get_or_insert_with(|| {
                targets
                    .iter()
                    .enumerate()
                    .map(|(i, t)| ((t.peer.as_str(), t.path, t.cm_port), i))
                    .collect()
            });
            let index: Vec<Option<usize>> = d
                .targets
                .iter()
                .map(|t| at.get(&(t.peer.as_str(), t.path, t.cm_port)).copied())
                .collect();
            let flows = index.iter().flatten().copied().collect();
            let result = d.result.map(|results| {
                results
                    .into_iter()
                    .zip(&index)
                    .filter_map(|(r, i)| i.map(|_| r))
                    .collect()
            });
            out.push((d.instance, flows, result));
        }
        out
    }
}

/// The outcome of each of `n` targets from the instances' answers: `None` for a target
/// not probed this round (its instance's call still running), `Err` when its call gave
/// nothing. The first answer for a target wins.
pub(crate) fn outcomes(n: usize, answers: &[Answer]) -> Vec<Option<Result<&ProbeOutcome, ()>>> {
    let mut out = vec![None; n];
    for (_, flows, r) in answers {
        for (k, &i) in flows.iter().enumerate() {
            if out[i].is_none() {
                out[i] = Some(match r {
                    Ok(results) => results.get(k).map(|r| &r.outcome).ok_or(()),
                    Err(_) => Err(()),
                });
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

/// The round's targets, one a peer of `list`, and each instance's (their indices).
fn targets_of(
    cfg: &ProbesConfig,
    list: &[(String, usize)],
) -> (Vec<ProbeTarget>, BTreeMap<usize, Vec<usize>>) {
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let targets = list
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
    (targets, groups)
}

/// Probe every peer once per (effective) interval until `shutdown` turns true: the peer
/// list from the first of `instances` (the plugin's default device or `probes.device`),
/// each `device_peers` entry from the instance of its device, each instance on its own
/// task (one whose call still runs at the next round skips it: [`Rails`]).
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
    let mut rails = Rails::new(entries, &pipeline);
    rails.name_devices(&ports);
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
        let (targets, groups) = targets_of(&cfg, &list);
        if !targets.is_empty() {
            let Some(answers) = rails
                .round(groups, &targets, round + interval, &mut shutdown)
                .await
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
                // Not probed this round: its device's call still runs.
                let Some(outcome) = outcome else { continue };
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

    /// A rail whose calls take two and a half rounds skips two rounds of three, said
    /// once; when its calls return within their round again, said once more.
    #[test]
    fn a_run_of_skipped_rounds_is_said_when_it_starts_and_when_it_ends() {
        let t0 = tokio::time::Instant::now();
        let at = |r: u64| t0 + Duration::from_millis(200 * r);
        let mut p = Pace::default();
        let mut steps = Vec::new();
        for r in 0..12 {
            // A call made in round r returns after 500 ms until round 6, at once after.
            if let Some(l) = p.last {
                let took = if l < 6 { 500 } else { 0 };
                if at(l) + Duration::from_millis(took) < at(r) {
                    p.busy = None;
                }
            }
            steps.push(p.step(r, at(r)));
        }
        use Step::*;
        assert_eq!(
            steps,
            [
                Call,
                SkipStarts(Duration::from_millis(200)),
                Skip,
                Call,
                Skip,
                Skip,
                Call,
                Recovered(4),
                Call,
                Call,
                Call,
                Call
            ]
        );
    }

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
