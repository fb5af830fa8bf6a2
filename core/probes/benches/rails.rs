//! What eight rails cost the fleet prober against one rail, in the same run (issue 50).
//!
//! The prober is the agent's own loop (`rocewatch_probes::run_fleet`), unchanged: each
//! round rotates the flows' labels, plans the targets, calls every rail's probe plugin
//! instance at once (through the runtime's plugin call, on the blocking pool), judges the
//! host's load from `/proc`, counts the results into the fleet statistics, the RTT
//! histograms and the store. The instances are in-process fakes that answer every probe
//! at once (20 µs), one per rail, so what is measured is the agent's side only: no verbs,
//! no C ABI and its JSON (`benches/fleet-prober-overhead.sh` measures those through
//! the fake-probe library; so do the `-abi` cases below).
//!
//! Cases, each in a process of its own (so that each has its own peak RSS), alternated:
//! - `one`: one rail, 600 peers on its ToR, 4 paths: 2,400 flows a round;
//! - `eight`: eight rails, 600 peers on each (`[fleet] max_peers = 4800`): 19,200 flows;
//! - `eight-bounded`: eight rails at the default `max_peers = 600`: 2,400 flows over the
//!   eight rails (what a host of a 10,000-host fleet probes, docs/FLEET.md);
//! - `idle`: the same process with no prober (the RSS baseline);
//! - `one-abi`, `eight-abi`: `one` and `eight` with the instances loaded from the
//!   fake-probe library (`integration-tests/fake-probe`, answering in 20 µs) through the C
//!   ABI and its JSON, as the agent calls the verbs plugin: run when
//!   `libfake_probe.so` is beside the bench's directory (`cargo build --release -p
//!   fake-probe` into the same target directory), else said SKIPPED (a failure with
//!   `ROCEWATCH_REQUIRE_ALL=1`).
//!
//! Rounds run every 50 ms (no rate bound) for the window, an interval every case's calls
//! fit in: since each rail runs on its own task and skips a round while its previous call
//! runs, rounds back to back (1 ms, as this bench ran first) measured the skipping, not
//! the probing. The CPU time is the process's (`getrusage`, every thread) over the rounds
//! completed. Then one
//! Prometheus rendering of the store is timed (what a scrape adds).
//!
//! `cargo bench -p rocewatch-probes --bench rails [-- SECONDS [RUNS]]` (default 5 s, 2
//! runs).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocewatch_export::prometheus::{render, Format};
use rocewatch_fleet::Topology;
use rocewatch_plugin_api::{
    Plugin, PluginError, PluginKind, ProbeOutcome, ProbePlugin, ProbeResult, ProbeTarget,
};
use rocewatch_probes::fleet::{view_of, FleetConfig, Probing};
use rocewatch_probes::ProbesConfig;
use rocewatch_runtime::host::registry::{Entry, Instance, Origin, State, Status};
use rocewatch_runtime::pipeline::Pipeline;
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::Store;
use tokio::sync::watch;

const PEERS: usize = 600;
const CASES: [&str; 6] = [
    "idle",
    "one",
    "eight",
    "eight-bounded",
    "one-abi",
    "eight-abi",
];

/// A probe plugin instance that answers every probe at once.
struct Fake {
    calls: Arc<AtomicU64>,
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
        self.calls.fetch_add(1, Ordering::Relaxed);
        targets.iter().map(|t| self.probe(t)).collect()
    }
}

/// The fake-probe library beside the bench's target directory (`release/deps/rails-*`).
fn fake_library() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let so = exe.parent()?.parent()?.join("libfake_probe.so");
    so.exists().then_some(so)
}

/// A fake-probe instance through the C ABI, counting its rounds as [`Fake`] does.
struct Abi {
    inner: rocewatch_plugin_sdk::host::ExternalPlugin,
    calls: Arc<AtomicU64>,
}

impl Plugin for Abi {
    fn name(&self) -> &str {
        self.inner.name()
    }
}

impl ProbePlugin for Abi {
    fn probe(&mut self, t: &ProbeTarget) -> Result<ProbeResult, PluginError> {
        self.inner.probe(t)
    }

    fn probe_many(&mut self, targets: &[ProbeTarget]) -> Result<Vec<ProbeResult>, PluginError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.probe_many(targets)
    }
}

fn abi_instance(calls: &Arc<AtomicU64>) -> Instance {
    let so = fake_library().expect("libfake_probe.so");
    let lib = rocewatch_plugin_sdk::host::PluginLibrary::load(&so).expect("fake-probe loads");
    let mut inner = lib
        .instantiate(PluginKind::Probe)
        .expect("a probe instance");
    inner
        .start(&rocewatch_plugin_api::PluginContext::new("/nonexistent"))
        .expect("fake-probe starts");
    Instance::Probe(Box::new(Abi {
        inner,
        calls: Arc::clone(calls),
    }))
}

fn entry(calls: &Arc<AtomicU64>, abi: bool) -> Entry {
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
        instance: Some(Arc::new(Mutex::new(if abi {
            abi_instance(calls)
        } else {
            Instance::Probe(Box::new(Fake {
                calls: Arc::clone(calls),
            }))
        }))),
        busy: Arc::new(AtomicBool::new(false)),
        status: Arc::new(Mutex::new(status)),
    }
}

/// Host `a` on `rails` rails, each rail's ToR with `PEERS` other hosts on it.
fn topology(rails: u8) -> Topology {
    let mut csv = String::from("host,rail,addr,tor\n");
    for r in 0..rails {
        csv.push_str(&format!("a,{r},10.200.{r}.1,t{r}\n"));
        for i in 0..PEERS {
            // Last byte 1-99: the addresses fake-probe answers.
            csv.push_str(&format!("h{i},{r},10.{r}.{}.{},t{r}\n", i / 99, i % 99 + 1));
        }
    }
    Topology::parse("bench", &csv).expect("the bench's topology")
}

/// Process CPU time, every thread (those ended included).
fn cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is given; RUSAGE_SELF is always valid.
    let u = unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()), 0);
        u.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// One case, in this process: its figures as `key=value` words on one line.
fn child(case: &str, secs: f64) -> String {
    let abi = case.ends_with("-abi");
    let (rails, max_peers) = match case.trim_end_matches("-abi") {
        "one" => (1u8, PEERS),
        "eight" => (8, 8 * PEERS),
        "eight-bounded" | "idle" => (8, PEERS),
        _ => panic!("unknown case {case}"),
    };
    // The agent's malloc settings (core/agent/src/main.rs): two arenas, big blocks mapped.
    // SAFETY: malloc tuning calls before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
    let topo = topology(rails);
    let fleet: FleetConfig =
        toml::from_str(&format!("topology = \"bench\"\nmax_peers = {max_peers}")).unwrap();
    let local: BTreeMap<IpAddr, Probing> = (0..rails)
        .map(|r| {
            let addr = format!("10.200.{r}.1").parse().unwrap();
            let p = Probing {
                instance: usize::from(r),
                port: format!("mlx5_{r}:1"),
            };
            (addr, p)
        })
        .collect();
    let view = view_of(&topo, "a", fleet.options(), &local).expect("a's view");
    let flows = rocewatch_probes::FlowSet::new(&view, &fleet).len();
    let cfg: ProbesConfig =
        toml::from_str("interval = \"50ms\"\ntimeout = \"1s\"\nmax_rate = 1e12").unwrap();
    let store = Arc::new(Store::new());
    rocewatch_probes::declare(&store, Some(&cfg));
    let metrics = Arc::new(SelfMetrics::default());
    let pipeline = Pipeline::new(Arc::clone(&store), Arc::clone(&metrics), &[]);
    let calls = Arc::new(AtomicU64::new(0));
    let instances: Vec<Entry> = (0..rails).map(|_| entry(&calls, abi)).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (_views_tx, views) = watch::channel(Some(Arc::new(view)));
    let (stop, stopped) = watch::channel(false);
    let rounds = || calls.load(Ordering::Relaxed) / u64::from(rails);
    let (mut per_round, mut n) = (Duration::ZERO, 0);
    if case != "idle" {
        let task = rt.spawn(rocewatch_probes::run_fleet(
            instances,
            Arc::clone(&pipeline),
            cfg,
            fleet,
            views,
            stopped,
        ));
        // Warm up: the view adopted, every flow's statistics made.
        while rounds() < 5 {
            std::thread::sleep(Duration::from_millis(10));
        }
        let (c0, r0) = (cpu(), rounds());
        std::thread::sleep(Duration::from_secs_f64(secs));
        let (c1, r1) = (cpu(), rounds());
        stop.send(true).unwrap();
        rt.block_on(task).unwrap();
        n = r1 - r0;
        per_round = (c1 - c0) / n.max(1) as u32;
    }
    let body = render(&store, &metrics, Format::Text);
    let start = Instant::now();
    let renders = 20;
    for _ in 0..renders {
        std::hint::black_box(render(&store, &metrics, Format::Text));
    }
    let scrape = start.elapsed() / renders;
    format!(
        "case={case} rails={rails} flows={flows} rounds={n} round_us={} scrape_us={} lines={} hwm_kib={}",
        per_round.as_micros(),
        scrape.as_micros(),
        body.lines().count(),
        vm_hwm_kib()
    )
}

fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(5.0);
    if let Some(i) = args.iter().position(|a| a == "--case") {
        println!("{}", child(&args[i + 1], secs));
        return;
    }
    let runs: usize = args
        .iter()
        .filter_map(|a| a.parse().ok())
        .nth(1)
        .unwrap_or(2);
    let exe = std::env::current_exe().unwrap();
    println!(
        "{PEERS} peers a rail, 4 paths, {secs} s of back-to-back rounds per case, {runs} runs"
    );
    for run in 1..=runs {
        let mut got = BTreeMap::new();
        for case in CASES {
            if case.ends_with("-abi") && fake_library().is_none() {
                let why = "SKIPPED: no libfake_probe.so beside the bench (cargo build --release -p fake-probe)";
                assert!(
                    std::env::var_os("ROCEWATCH_REQUIRE_ALL").is_none(),
                    "{case}: {why}"
                );
                println!("run {run}: case={case} {why}");
                continue;
            }
            let out = Command::new(&exe)
                .args(["--case", case, &secs.to_string()])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{case}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
            println!("run {run}: {line}");
            got.insert(case, line);
        }
        report(&got);
    }
}

/// Ratios to one rail (the ABI cases' to one rail through the ABI), the share of a core at a 1 s interval and at the interval
/// `max_rate = 2400` (FLEET.md's setting for 600 x 4 flows a second) stretches it to.
fn report(got: &BTreeMap<&str, String>) {
    let idle = field(&got["idle"], "hwm_kib");
    for (case, l) in got.iter().filter(|(c, _)| **c != "idle") {
        let base = if case.ends_with("-abi") {
            "one-abi"
        } else {
            "one"
        };
        let one = field(&got[base], "round_us");
        let round = field(l, "round_us");
        let flows = field(l, "flows");
        let interval = (flows / 2400.0).max(1.0);
        println!(
            "  {case:>13}: {flows:>6} flows, {:>8.0} µs a round ({:.2} µs a flow), {:.2}× one rail ({base}); \
             {:.2} % of a core at 1 s, {:.2} % at max_rate 2400 (every {interval:.0} s); \
             scrape {:.0} µs ({} lines); peak RSS {:.1} MiB ({:+.1} over idle)",
            round,
            round / flows,
            round / one,
            round / 1e4,
            round / 1e4 / interval,
            field(l, "scrape_us"),
            field(l, "lines"),
            field(l, "hwm_kib") / 1024.0,
            (field(l, "hwm_kib") - idle) / 1024.0,
        );
    }
}
