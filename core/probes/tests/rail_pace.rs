//! Each rail on its own pace (issue 50): a rail whose probe plugin calls take three
//! intervals does not hold the other rails' rounds back; its rounds that come while its
//! call is still running are skipped and counted (`rocewatch.probe.rounds_skipped`), and
//! all rails together stay within `max_rate`. Through the prober's own loops
//! (`run` with `[probes] device_peers`, `run_fleet` with two rails), real time, in-process
//! probe instances that answer every probe, one of them after a delay.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocewatch_plugin_api::{
    Plugin, PluginError, PluginKind, ProbeOutcome, ProbePlugin, ProbeResult, ProbeTarget, Value,
};
use rocewatch_probes::fleet::{view_of, FleetConfig, Probing};
use rocewatch_probes::ProbesConfig;
use rocewatch_runtime::host::registry::{Entry, Instance, Origin, State, Status};
use rocewatch_runtime::pipeline::Pipeline;
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::Store;
use tokio::sync::watch;

/// When each call started and how many targets it had.
type Calls = Arc<Mutex<Vec<(Instant, usize)>>>;

/// A probe plugin instance that answers every probe after `delay`.
struct Fake {
    delay: Duration,
    calls: Calls,
}

impl Plugin for Fake {
    fn name(&self) -> &str {
        "fake-probe"
    }
}

impl ProbePlugin for Fake {
    fn probe(&mut self, t: &ProbeTarget) -> Result<ProbeResult, PluginError> {
        Ok(ProbeResult {
            peer: t.peer.clone(),
            outcome: ProbeOutcome::Ok { rtt_seconds: 20e-6 },
            nic_timestamps: None,
            cm: None,
        })
    }

    fn probe_many(&mut self, targets: &[ProbeTarget]) -> Result<Vec<ProbeResult>, PluginError> {
        self.calls
            .lock()
            .unwrap()
            .push((Instant::now(), targets.len()));
        std::thread::sleep(self.delay);
        targets.iter().map(|t| self.probe(t)).collect()
    }
}

fn entry(delay: Duration, calls: &Calls) -> Entry {
    let status = Status {
        name: "fake-probe".into(),
        kind: Some(PluginKind::Probe),
        origin: Origin::Builtin,
        abi: "-".into(),
        state: State::Started,
        last_error: None,
        calls: 0,
        errors: 0,
    };
    Entry {
        name: "fake-probe".into(),
        kind: Some(PluginKind::Probe),
        origin: Origin::Builtin,
        settings: Default::default(),
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
        instance: Some(Arc::new(Mutex::new(Instance::Probe(Box::new(Fake {
            delay,
            calls: Arc::clone(calls),
        }))))),
        busy: Arc::new(AtomicBool::new(false)),
        status: Arc::new(Mutex::new(status)),
    }
}

/// 10 peers a rail, 2 rails: 20 probes a round at `max_rate = 100` stretch the 100 ms
/// interval to 200 ms; rail 1's calls take 500 ms (two and a half intervals).
const PEERS: usize = 10;
const MAX_RATE: f64 = 100.0;
const INTERVAL: Duration = Duration::from_millis(200);
const SLOW: Duration = Duration::from_millis(500);
const RUN: Duration = Duration::from_secs(3);

fn probes_config(extra: &str) -> ProbesConfig {
    let cfg: ProbesConfig = toml::from_str(&format!(
        "interval = \"100ms\"\ntimeout = \"1s\"\nmax_rate = {MAX_RATE:?}\n{extra}"
    ))
    .unwrap();
    assert_eq!(cfg.effective_interval(2 * PEERS), INTERVAL);
    cfg
}

/// `rocewatch.probe.rounds_skipped` by its attributes (`device`, and `rail` where known).
fn skipped(metrics: &SelfMetrics) -> BTreeMap<(String, String), u64> {
    metrics
        .samples()
        .into_iter()
        .filter(|s| s.name.as_ref() == "rocewatch.probe.rounds_skipped")
        .map(|s| {
            let get = |k: &str| s.attributes.get(k).unwrap_or_default().to_string();
            let Value::U64(v) = s.value else {
                panic!("a count: {s:?}")
            };
            ((get("rail"), get("device")), v)
        })
        .collect()
}

/// What the two rails did over the run: each call's start and size, and the skip counts.
struct Run {
    fast: Vec<(Instant, usize)>,
    slow: Vec<(Instant, usize)>,
    skipped: BTreeMap<(String, String), u64>,
}

/// The rails kept their own pace: rail 0 a call every interval, rail 1 one call per three
/// rounds with the two between skipped and counted, never more than `max_rate`.
fn check(run: &Run, rail: &str) {
    let (n0, n1) = (run.fast.len(), run.slow.len());
    let rounds = (RUN.as_secs_f64() / INTERVAL.as_secs_f64()) as usize;
    println!(
        "rail 0: {n0} calls, rail 1: {n1} calls, skipped {:?}",
        run.skipped
    );
    // 15 rounds in 3 s; waiting for rail 1 would give 6.
    assert!(
        n0 + 3 >= rounds,
        "rail 0 made {n0} calls in {RUN:?} at {INTERVAL:?}: it waited for rail 1"
    );
    assert!(
        n1 * 2 <= n0,
        "rail 1 ({n1} calls) kept rail 0's pace ({n0})"
    );
    let slow = run
        .skipped
        .get(&(rail.to_string(), "mlx5_1:1".to_string()))
        .copied()
        .unwrap_or(0) as usize;
    assert!(
        slow >= n1 && slow + n1 + 2 >= n0 && slow + n1 <= n0 + 1,
        "rail 1: {slow} rounds skipped, {n1} called, rail 0 called {n0}"
    );
    assert_eq!(
        run.skipped.len(),
        1,
        "only rail 1 is skipped: {:?}",
        run.skipped
    );
    // The rate: in no second do the rails together start more than max_rate probes (one
    // round of one rail of slack for a window's edge).
    let mut all: Vec<(Instant, usize)> = run.fast.iter().chain(&run.slow).copied().collect();
    all.sort();
    for (i, (t, _)) in all.iter().enumerate() {
        let sent: usize = all[i..]
            .iter()
            .take_while(|(u, _)| *u < *t + Duration::from_secs(1))
            .map(|(_, n)| n)
            .sum();
        assert!(
            sent as f64 <= MAX_RATE + PEERS as f64,
            "{sent} probes within a second of call {i}: over max_rate {MAX_RATE}"
        );
    }
    // No rail starts a call sooner than an interval after its previous one (a thread's
    // start may lag by some milliseconds).
    for calls in [&run.fast, &run.slow] {
        for w in calls.windows(2) {
            let gap = w[1].0 - w[0].0;
            assert!(
                gap + Duration::from_millis(40) >= INTERVAL,
                "two calls {gap:?} apart"
            );
        }
    }
}

/// A prober (`start` makes it of a fast instance and a slow one, the pipeline and the
/// shutdown) run for [`RUN`]: what the rails did, the store and the self-metrics.
async fn run_for<F>(
    cfg: &ProbesConfig,
    start: impl FnOnce(Entry, Entry, Arc<Pipeline>, watch::Receiver<bool>) -> F,
) -> (Run, Arc<Store>, Arc<SelfMetrics>)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (fast, slow): (Calls, Calls) = Default::default();
    let store = Arc::new(Store::new());
    rocewatch_probes::declare(&store, Some(cfg));
    let metrics = Arc::new(SelfMetrics::default());
    let pipeline = Pipeline::new(Arc::clone(&store), Arc::clone(&metrics), &[]);
    let (stop, stopped) = watch::channel(false);
    let prober = start(
        entry(Duration::ZERO, &fast),
        entry(SLOW, &slow),
        pipeline,
        stopped,
    );
    let task = tokio::spawn(prober);
    tokio::time::sleep(RUN).await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let run = Run {
        fast: fast.lock().unwrap().clone(),
        slow: slow.lock().unwrap().clone(),
        skipped: skipped(&metrics),
    };
    (run, store, metrics)
}

fn addrs(rail: u8) -> Vec<String> {
    (1..=PEERS).map(|i| format!("10.0.{rail}.{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_device_does_not_set_the_other_devices_pace() {
    let list = |r| format!("{:?}", addrs(r));
    let cfg = probes_config(&format!(
        "peers = {}\n[device_peers]\n\"mlx5_1:1\" = {}",
        list(0),
        list(1)
    ));
    let (run, store, _) = run_for(&cfg.clone(), |fast, slow, pipeline, stopped| {
        let instances = vec![
            (Some("mlx5_0:1".to_string()), fast),
            (Some("mlx5_1:1".to_string()), slow),
        ];
        rocewatch_probes::run(instances, pipeline, cfg, stopped)
    })
    .await;
    check(&run, "");
    // Rail 1's peers count the probes that were sent, not the skipped rounds as failures.
    let sent = store.by_name("rdma.probe.sent");
    let failures = store.by_name("rdma.probe.failures");
    assert!(failures.is_empty(), "{failures:?}");
    for s in sent.iter().filter(|s| {
        s.sample
            .attributes
            .get("rdma.probe.peer")
            .is_some_and(|p| p.starts_with("10.0.1."))
    }) {
        let n = s.sample.value.as_f64() as usize;
        assert!(
            n + 1 >= run.slow.len() && n <= run.slow.len(),
            "{s:?}: {} calls",
            run.slow.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_rail_does_not_set_the_other_rails_pace() {
    let mut csv = String::from("host,rail,addr,tor\n");
    for r in 0..2u8 {
        csv.push_str(&format!("a,{r},10.200.{r}.1,t{r}\n"));
        for (i, addr) in addrs(r).iter().enumerate() {
            csv.push_str(&format!("h{i},{r},{addr},t{r}\n"));
        }
    }
    let topo = rocewatch_fleet::Topology::parse("t", &csv).unwrap();
    let fleet: FleetConfig =
        toml::from_str("topology = \"t\"\npaths = 1\npath_rotation = \"0s\"").unwrap();
    let local: BTreeMap<IpAddr, Probing> = (0..2u8)
        .map(|r| {
            let p = Probing {
                instance: usize::from(r),
                port: format!("mlx5_{r}:1"),
            };
            (format!("10.200.{r}.1").parse().unwrap(), p)
        })
        .collect();
    let view = view_of(&topo, "a", fleet.options(), &local).unwrap();
    assert_eq!(view.peers.len(), 2 * PEERS);
    let cfg = probes_config("");
    let (views_tx, views) = watch::channel(Some(Arc::new(view)));
    let (run, store, metrics) = run_for(&cfg.clone(), |fast, slow, pipeline, stopped| {
        rocewatch_probes::run_fleet(vec![fast, slow], pipeline, cfg, fleet, views, stopped)
    })
    .await;
    drop(views_tx);
    check(&run, "1");
    // As a scrape shows it.
    let text = rocewatch_export::prometheus::render(
        &store,
        &metrics,
        rocewatch_export::prometheus::Format::Text,
    );
    let line = format!(
        "rocewatch_probe_rounds_skipped_total{{device=\"mlx5_1:1\",rail=\"1\"}} {}",
        run.skipped[&("1".to_string(), "mlx5_1:1".to_string())]
    );
    assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    // Rail 1's results are its calls' probes, every one answered: a skipped round is not
    // a local error.
    let mut by_rail: BTreeMap<(String, String), f64> = BTreeMap::new();
    for s in store.by_name("rdma.probe.fleet.results") {
        let a = &s.sample.attributes;
        let key = (
            a.get("rail").unwrap_or_default().to_string(),
            a.get("outcome").unwrap_or_default().to_string(),
        );
        *by_rail.entry(key).or_default() += s.sample.value.as_f64();
    }
    let ok1 = by_rail.remove(&("1".into(), "ok".into())).unwrap_or(0.0) as usize;
    assert!(
        ok1 <= run.slow.len() * PEERS && ok1 + PEERS >= run.slow.len() * PEERS,
        "rail 1: {ok1} answered, {} calls of {PEERS}",
        run.slow.len()
    );
    by_rail.retain(|(_, outcome), n| outcome != "ok" && *n > 0.0);
    assert!(by_rail.is_empty(), "{by_rail:?}");
}
