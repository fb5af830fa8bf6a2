//! Probe rounds of a fleet pinglist: every flow of every peer in flight at once, each
//! flow on its own source port (rotated), the round judged against this host's load, and
//! the results counted by [`FleetStats`] instead of per peer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use rocewatch_fleet::pinglist::Class;
use rocewatch_metrics::names;
use rocewatch_plugin_api::{Attributes, NicTimestamps, ProbeOutcome, ProbeTarget, Sample};
use rocewatch_runtime::host::registry::Entry;
use rocewatch_runtime::pipeline::Pipeline;

use super::config::{FleetConfig, FleetView};
use super::flows::{epoch_at, flow_label, offset};
use super::noise::HostNoise;
use super::stats::{FleetStats, Outcome};
use crate::config::{ProbesConfig, PLUGIN};
use crate::rounds::{outcomes, Answer, Rails};
use crate::stats::peers_and_interval;

/// Seconds since the epoch: flows rotate on the wall clock.
fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One flow of a view: a peer (its index), a path, and its label's rotation.
#[derive(Debug, Clone)]
struct Flow {
    peer: usize,
    path: u16,
    addr: String,
    offset: u64,
    epoch: Option<u64>,
    label: u32,
}

/// Every path of every peer of a view, in order, with their flow labels: a label is drawn
/// again only when its flow's rotation epoch changes (none when there is one path that
/// never rotates: the driver's port, as without `[fleet]`).
#[derive(Debug, Clone)]
pub struct FlowSet {
    host: String,
    rotation: u64,
    labelled: bool,
    flows: Vec<Flow>,
}

impl FlowSet {
    pub fn new(view: &FleetView, fleet: &FleetConfig) -> FlowSet {
        let rotation = fleet.path_rotation.as_secs();
        let mut flows = Vec::with_capacity(view.peers.len() * usize::from(fleet.paths));
        for (peer, p) in view.peers.iter().enumerate() {
            let addr = p.addr.to_string();
            for path in 0..fleet.paths {
                flows.push(Flow {
                    peer,
                    path,
                    offset: offset(&view.host, &addr, path, rotation),
                    addr: addr.clone(),
                    epoch: None,
                    label: 0,
                });
            }
        }
        FlowSet {
            host: view.host.clone(),
            rotation,
            labelled: fleet.paths > 1 || rotation > 0,
            flows,
        }
    }

    /// Bring every flow's label to its epoch at `now_s`.
    pub fn rotate(&mut self, now_s: u64) {
        if !self.labelled {
            return;
        }
        for f in &mut self.flows {
            let e = epoch_at(now_s, f.offset, self.rotation);
            if f.epoch != Some(e) {
                f.epoch = Some(e);
                f.label = flow_label(&self.host, &f.addr, f.path, e);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// (peer index in the view, path, flow label) of each flow, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (usize, u16, u32)> + '_ {
        self.flows.iter().map(|f| (f.peer, f.path, f.label))
    }

    /// The round's probe targets, in order.
    pub fn targets(&self, cfg: &ProbesConfig) -> Vec<ProbeTarget> {
        let timeout = cfg.timeout.as_millis() as u64;
        self.flows
            .iter()
            .map(|f| {
                let mut t = ProbeTarget::new(f.addr.clone(), cfg.size, timeout);
                t.path = f.path;
                t.flow_label = f.label;
                t
            })
            .collect()
    }
}

/// The round's targets at `now` (a fresh [`FlowSet`]: the prober keeps one).
pub fn targets(
    view: &FleetView,
    cfg: &ProbesConfig,
    fleet: &FleetConfig,
    now: u64,
) -> Vec<ProbeTarget> {
    let mut f = FlowSet::new(view, fleet);
    f.rotate(now);
    f.targets(cfg)
}

/// RTT histogram attributes by rail and class, made once.
pub type RttAttrs = BTreeMap<(u8, Class), Attributes>;

/// Count a round: `outcomes[i]` is how the `i`th flow of `flows` ended, `Err` when the plugin gave nothing, `None` when it was not probed (its rail's call still running). The answered probes' RTTs, with
/// their histogram's attributes.
pub fn count_round(
    st: &mut FleetStats,
    view: &FleetView,
    flows: &FlowSet,
    outcomes: &[Option<Result<&ProbeOutcome, ()>>],
    overloaded: bool,
    now: u64,
    rtt_attrs: &mut RttAttrs,
) -> Vec<(Attributes, f64)> {
    let mut rtts = Vec::new();
    for ((peer, path, _), r) in flows.iter().zip(outcomes) {
        let Some(r) = r else { continue };
        let peer = &view.peers[peer];
        if let Ok(ProbeOutcome::Ok { rtt_seconds }) = r {
            let a = rtt_attrs
                .entry((peer.rail, peer.class))
                .or_insert_with(|| st.rtt_attrs(peer, path));
            rtts.push((a.clone(), *rtt_seconds));
        }
        st.record(peer, path, Outcome::of(*r, overloaded), now);
    }
    rtts
}

/// A round's samples: the fleet counters and failing flows, the peers and the interval.
pub fn round_samples(
    st: &FleetStats,
    view: &FleetView,
    interval: Duration,
    now: u64,
) -> Vec<Sample> {
    let mut out = st.samples(now);
    peers_and_interval(
        &mut out,
        &[
            ("probed", view.peers.len()),
            ("other_rail", view.other_rail_peers),
        ],
        interval,
    );
    out
}

/// The flows of each probe plugin instance: the indices in `flows` of the flows whose
/// rail is probed from it (instance 0 when the view has no ports).
fn by_instance(view: &FleetView, flows: &FlowSet) -> BTreeMap<usize, Vec<usize>> {
    let mut out: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, (peer, _, _)) in flows.iter().enumerate() {
        let rail = view.peers[peer].rail;
        let instance = view.ports.get(&rail).map_or(0, |p| p.instance);
        out.entry(instance).or_default().push(i);
    }
    out
}

/// What the prober says once or when it changes.
#[derive(Default)]
struct Said {
    waiting: bool,
    load: bool,
    timestamps: bool,
    /// Each instance's last round error, said when it starts and when it changes.
    errors: BTreeMap<usize, String>,
}

impl Said {
    /// Log what is new in a round's answers.
    fn answers(&mut self, view: &FleetView, answers: &[Answer]) {
        for (instance, _, r) in answers {
            let port = view
                .ports
                .values()
                .find(|p| p.instance == *instance)
                .map_or_else(|| "the probe device".to_string(), |p| p.port.clone());
            match r {
                Err(e) if self.errors.get(instance) != Some(e) => {
                    tracing::warn!("probes: the round from {port} failed: {e}");
                    self.errors.insert(*instance, e.clone());
                }
                Ok(_) if self.errors.remove(instance).is_some() => {
                    tracing::info!("probes: rounds from {port} work again");
                }
                _ => {}
            }
            if let (Ok(r), false) = (r, self.timestamps) {
                if let Some(NicTimestamps::Unsupported { reason }) =
                    r.first().and_then(|r| r.nic_timestamps.as_ref())
                {
                    tracing::info!("probes: no NIC-measured RTT split: {reason}");
                }
                self.timestamps = true;
            }
        }
    }
}

/// The statistics and flows of a new view, keeping the counters (a counter never goes
/// back).
fn adopt_view(
    stats: &mut Option<(Arc<FleetView>, FleetStats, FlowSet)>,
    view: &Arc<FleetView>,
    fleet: &FleetConfig,
) {
    let mut st = match stats.take() {
        Some((_, st, _)) => st,
        None => FleetStats::new(
            &view.host,
            view.tors.clone(),
            fleet.failing_window.as_secs(),
            fleet.top_failing,
        ),
    };
    st.set_tors(view.tors.clone());
    st.set_devices(
        view.ports
            .iter()
            .map(|(rail, p)| (*rail, p.port.clone()))
            .collect(),
    );
    st.adopt(&view.peers, fleet.paths);
    if !view.other_rails.is_empty() {
        tracing::warn!(
            "probes: rails {:?} of {} are on no port probed from: their {} peers are not probed",
            view.other_rails,
            view.host,
            view.other_rail_peers
        );
    }
    let flows = FlowSet::new(view, fleet);
    *stats = Some((Arc::clone(view), st, flows));
}

/// Probe the fleet view's pinglist once per (effective) interval until `shutdown`: each
/// rail from the probe plugin instance of its port (`instances[view.ports[rail].instance]`),
/// each instance's call on its own task (one still running at the next round skips that
/// round: [`Rails`]), every rail at the same interval so that all flows together stay
/// within `max_rate`.
pub async fn run_fleet(
    instances: Vec<Entry>,
    pipeline: Arc<Pipeline>,
    cfg: ProbesConfig,
    fleet: FleetConfig,
    mut views: watch::Receiver<Option<Arc<FleetView>>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let store = pipeline.store();
    let mut stats: Option<(Arc<FleetView>, FleetStats, FlowSet)> = None;
    let mut noise = HostNoise::new(
        &fleet.procfs_root,
        fleet.overload_steal,
        fleet.overload_run_queue,
    );
    let mut said = Said::default();
    let mut last_interval = Duration::ZERO;
    let mut rtt_attrs = RttAttrs::new();
    let mut rails = Rails::new(instances, &pipeline);
    loop {
        let round = tokio::time::Instant::now();
        let view = views.borrow_and_update().clone();
        let Some(view) = view else {
            if !said.waiting {
                tracing::info!("probes: waiting for the fleet's map (see the fleet log lines)");
                said.waiting = true;
            }
            tokio::select! {
                _ = views.changed() => continue,
                _ = shutdown.changed() => return,
            }
        };
        if !stats
            .as_ref()
            .is_some_and(|(v, _, _)| Arc::ptr_eq(v, &view))
        {
            adopt_view(&mut stats, &view, &fleet);
        }
        let (_, st, flows) = stats.as_mut().expect("adopted above");
        let now = now_s();
        flows.rotate(now);
        let targets = flows.targets(&cfg);
        let interval = cfg.effective_interval(targets.len());
        if interval != last_interval {
            if interval > cfg.interval {
                tracing::warn!(
                    "probes: {} flows ({} peers x {} paths, {} rails) at probes.max_rate = {}/s: each is probed every {interval:?} instead of every {:?}",
                    targets.len(), view.peers.len(), fleet.paths, view.tors.len(), cfg.max_rate, cfg.interval
                );
            }
            last_interval = interval;
        }
        if !targets.is_empty() {
            let groups = by_instance(&view, flows);
            rails.name_rails(
                view.ports
                    .iter()
                    .map(|(r, p)| (*r, p.instance, p.port.as_str())),
            );
            let Some(answers) = rails
                .round(groups, &targets, round + interval, &mut shutdown)
                .await
            else {
                return;
            };
            // The load over the round: steal since the last look, the run queue now.
            let overloaded = match noise.sample() {
                Ok(l) => noise.overloaded(&l),
                Err(e) => {
                    if !said.load {
                        tracing::warn!("probes: cannot tell whether this host is overloaded: {e}");
                        said.load = true;
                    }
                    false
                }
            };
            said.answers(&view, &answers);
            let outcomes = outcomes(targets.len(), &answers);
            let rtts = count_round(st, &view, flows, &outcomes, overloaded, now, &mut rtt_attrs);
            store.observe(names::PROBE_FLEET_RTT, rtts.iter().map(|(a, v)| (a, *v)));
        }
        let out = round_samples(st, &view, interval, now);
        pipeline.ingest_at(PLUGIN, &out, SystemTime::now(), Instant::now());
        tokio::select! {
            _ = tokio::time::sleep_until(round + interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_path_of_every_peer_with_its_own_label() {
        let topo = rocewatch_fleet::Topology::parse(
            "t",
            "host,rail,addr,tor\na,0,10.0.0.1,t1\nb,0,10.0.0.2,t1\nc,0,10.0.0.3,t2\n",
        )
        .unwrap();
        let view = super::super::config::view_of(&topo, "a", Default::default(), &BTreeMap::new())
            .unwrap();
        let cfg: ProbesConfig = toml::from_str("").unwrap();
        let fleet: FleetConfig = toml::from_str("topology = \"t\"").unwrap();
        let t = targets(&view, &cfg, &fleet, 1_000_000);
        assert_eq!(t.len(), 2 * 4);
        let paths: Vec<(String, u16)> = t.iter().map(|t| (t.peer.clone(), t.path)).collect();
        assert_eq!(
            paths[..4],
            [
                ("10.0.0.2".into(), 0),
                ("10.0.0.2".into(), 1),
                ("10.0.0.2".into(), 2),
                ("10.0.0.2".into(), 3)
            ]
        );
        let labels: BTreeSet<u32> = t.iter().map(|t| t.flow_label).collect();
        assert_eq!(labels.len(), 8, "{labels:?}");
        assert!(!labels.contains(&0));
        // 16 s later every flow has moved to another port.
        let later = targets(&view, &cfg, &fleet, 1_000_016);
        assert!(t
            .iter()
            .zip(&later)
            .all(|(a, b)| a.flow_label != b.flow_label));
        // One path that never rotates leaves the port to the driver.
        let one: FleetConfig =
            toml::from_str("topology = \"t\"\npaths = 1\npath_rotation = \"0s\"").unwrap();
        assert!(targets(&view, &cfg, &one, 5)
            .iter()
            .all(|t| t.flow_label == 0 && t.path == 0));
    }
}
