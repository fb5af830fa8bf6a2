//! The agent pipeline: registry → start → per-plugin schedules → store → exporters.
//!
//! Every collector runs on its own interval with jitter and a per-call timeout; a slow,
//! hung, panicking or failing plugin only affects itself. Collections are published on a
//! broadcast channel that line-oriented exporters and the demo view subscribe to; the
//! OTLP exporter reads the store on its own schedule.

pub mod derive;

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rocewatch_plugin_api::*;
use tokio::sync::{broadcast, watch};

use crate::config::Config;
use crate::host::call::{self, CallError};
use crate::host::registry::{Entry, Instance, Registry};
use crate::selfmetrics::SelfMetrics;
use crate::store::Store;

/// One collection by one plugin, as published to subscribers.
#[derive(Debug, Clone)]
pub struct Collection {
    pub plugin: String,
    pub time: SystemTime,
    pub result: ScrapeResult,
}

/// The running pieces, shared by every task.
pub struct Agent {
    pub cfg: Config,
    pub registry: Registry,
    pub store: Arc<Store>,
    pub metrics: Arc<SelfMetrics>,
    pub inventory: RwLock<Inventory>,
    pub events: broadcast::Sender<Arc<Collection>>,
    pub host_name: String,
    /// The threshold rules and their per-series state.
    pub rules: Arc<std::sync::Mutex<crate::rules::Engine>>,
    /// Rules firing and clearing, for remediation and logs.
    pub transitions: broadcast::Sender<Arc<crate::rules::Transition>>,
}

/// The host name: config, else the kernel's.
pub fn host_name(cfg: &Config) -> String {
    cfg.agent.host_name.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".into())
    })
}

/// A small xorshift PRNG for jitter (no need for cryptographic randomness here).
struct Jitter(u64);

impl Jitter {
    fn new(seed: &str) -> Self {
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let h = seed.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        Jitter((t ^ h ^ std::process::id() as u64) | 1)
    }

    fn next(&mut self, max: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if max.is_zero() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.0 % max.as_nanos().max(1) as u64)
    }
}

impl Agent {
    /// Build the registry, start every plugin and learn what collectors may emit.
    pub async fn start(cfg: Config) -> Arc<Agent> {
        let metrics = Arc::new(SelfMetrics::default());
        let registry = Registry::build(&cfg, &metrics);
        let host_name = host_name(&cfg);
        let mut ctx = PluginContext::new(&cfg.agent.sysfs_root);
        ctx.host_name = host_name.clone();
        call::start_all(&registry, &ctx, &cfg, &metrics).await;
        let store = Arc::new(Store::new());
        store.declare(&rocewatch_metrics::derived_descriptors());
        crate::probes::declare(&store, cfg.probes.as_ref());
        store.declare(&rocewatch_metrics::descriptors_of(
            rocewatch_metrics::QOS_CATALOG,
        ));
        for e in registry.of_kind(PluginKind::Collector) {
            let d = call::call(e, e.timeout(&cfg), &metrics, |i| match i {
                Instance::Collector(c) => Ok(c.descriptors()),
                _ => Ok(Vec::new()),
            })
            .await;
            if let Ok(d) = d {
                store.declare(&d);
            }
        }
        let (events, _) = broadcast::channel(64);
        let (transitions, _) = broadcast::channel(1024);
        let rules = Arc::new(std::sync::Mutex::new(crate::rules::Engine::new(&cfg.rules)));
        Arc::new(Agent {
            rules,
            transitions,
            cfg,
            registry,
            store,
            metrics,
            inventory: RwLock::new(Inventory::default()),
            events,
            host_name,
        })
    }

    /// Every configuration plugin's view of the ports, merged (a port seen by two plugins
    /// has the settings of both). Fails when no configuration plugin answered.
    pub async fn observe_qos(&self) -> Result<Vec<rocewatch_plugin_api::QosState>, CallError> {
        crate::qos::observe::observe(&crate::qos::observe::config_plugins(self), &self.metrics)
            .await
    }

    /// The loaded probe plugin, if any.
    pub fn probe_plugin(&self) -> Option<Entry> {
        self.registry
            .of_kind(PluginKind::Probe)
            .find(|e| e.instance.is_some())
            .cloned()
    }

    /// The inventory of the last discovery.
    pub fn inventory(&self) -> Inventory {
        self.inventory
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Run every discovery plugin once and merge their inventories.
    pub async fn discover(&self) -> Result<Inventory, CallError> {
        let mut merged = Inventory::default();
        let mut last_err = None;
        let mut any_ok = false;
        for e in self.registry.of_kind(PluginKind::Discovery) {
            match call::call(e, e.timeout(&self.cfg), &self.metrics, |i| match i {
                Instance::Discovery(d) => d.discover(),
                _ => Ok(Inventory::default()),
            })
            .await
            {
                Ok(inv) => {
                    any_ok = true;
                    merged.devices.extend(inv.devices);
                }
                Err(err) => last_err = Some(err),
            }
        }
        if let (false, Some(e)) = (any_ok, last_err) {
            return Err(e);
        }
        *self.inventory.write().unwrap_or_else(|p| p.into_inner()) = merged.clone();
        Ok(merged)
    }

    /// One collection by one collector: store, self-metrics, subscribers.
    pub async fn collect_from(&self, e: &Entry) -> Result<Arc<Collection>, CallError> {
        let mut result = call::call(e, e.timeout(&self.cfg), &self.metrics, |i| match i {
            Instance::Collector(c) => c.collect(),
            _ => Ok(ScrapeResult::default()),
        })
        .await?;
        let dropped = self.store.retain_declared(&mut result.samples);
        if dropped > 0 {
            self.metrics.plugin_error(&e.name, "undeclared");
            tracing::warn!(plugin = %e.name, dropped, "{}: emitted metrics it did not declare; dropped", e.label());
        }
        for err in &result.errors {
            self.metrics.plugin_error(&e.name, "partial");
            tracing::warn!(plugin = %e.name, target = %err.target, "{}: partial scrape: {}", e.label(), err.message);
        }
        self.metrics.samples_emitted(&e.name, result.samples.len());
        self.store.ingest(&e.name, &result.samples, &self.metrics);
        self.store.ingest(
            crate::pipeline::derive::PLUGIN,
            &crate::pipeline::derive::compute(&self.store),
            &self.metrics,
        );
        self.evaluate_rules();
        let c = Arc::new(Collection {
            plugin: e.name.clone(),
            time: SystemTime::now(),
            result,
        });
        let _ = self.events.send(Arc::clone(&c));
        Ok(c)
    }

    /// Evaluate the rules on what is in the store now; log and publish what changed.
    pub fn evaluate_rules(&self) {
        let changes = {
            let mut engine = self.rules.lock().unwrap_or_else(|p| p.into_inner());
            if engine.is_empty() {
                return;
            }
            engine.evaluate(&self.store, tokio::time::Instant::now())
        };
        for t in changes {
            let labels: Vec<String> = t.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if t.firing {
                tracing::warn!(rule = %t.rule, severity = %t.severity, value = t.value, labels = %labels.join(","), "rule firing");
            } else {
                tracing::info!(rule = %t.rule, value = t.value, labels = %labels.join(","), "rule cleared");
            }
            self.metrics.rule_transition(&t.rule, t.firing);
            let _ = self.transitions.send(Arc::new(t));
        }
    }

    /// One collection by every collector (for `collect --once`). Unsupported collectors
    /// contribute nothing; other failures are returned alongside what did work.
    pub async fn collect_all(&self) -> (ScrapeResult, Vec<CallError>) {
        let mut all = ScrapeResult::default();
        let mut failures = Vec::new();
        for e in self.registry.of_kind(PluginKind::Collector) {
            match self.collect_from(e).await {
                Ok(c) => {
                    all.samples.extend(c.result.samples.iter().cloned());
                    all.errors.extend(c.result.errors.iter().cloned());
                }
                Err(err) if err.is_unsupported() => {}
                Err(err) => failures.push(err),
            }
        }
        (all, failures)
    }

    /// Run the schedules until `shutdown` turns true.
    pub async fn run(self: &Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tasks = tokio::task::JoinSet::new();
        let discovery = Arc::clone(self);
        let mut sd = shutdown.clone();
        tasks.spawn(async move {
            loop {
                if let Err(e) = discovery.discover().await {
                    if !e.is_unsupported() {
                        tracing::warn!("discovery: {e}");
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(discovery.cfg.agent.discovery_interval) => {}
                    _ = sd.changed() => break,
                }
            }
        });
        for idx in 0..self.registry.entries.len() {
            let e = &self.registry.entries[idx];
            if e.kind != Some(PluginKind::Collector) || e.instance.is_none() {
                continue;
            }
            let agent = Arc::clone(self);
            let mut sd = shutdown.clone();
            tasks.spawn(async move {
                let e = &agent.registry.entries[idx];
                let interval = e.interval(&agent.cfg);
                let mut jitter = Jitter::new(&e.name);
                let mut next = tokio::time::Instant::now();
                loop {
                    let at = next + jitter.next(agent.cfg.agent.jitter.min(interval / 2));
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = sd.changed() => break,
                    }
                    let _ = agent.collect_from(e).await;
                    next += interval;
                    let now = tokio::time::Instant::now();
                    if next < now {
                        next = now; // fell behind (slow plugin): skip, never burst
                    }
                }
            });
        }
        let _ = shutdown.changed().await;
        tasks.shutdown().await;
        call::stop_all(&self.registry, &self.cfg, &self.metrics).await;
    }
}

/// A watch channel that turns true on SIGINT or SIGTERM.
pub fn shutdown_on_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => tracing::info!("SIGTERM: shutting down"),
        }
        let _ = tx.send(true);
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn schedules_collectors_and_stops_on_shutdown() {
        let mut cfg = Config::default();
        cfg.agent.sysfs_root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/mlx5-roce-dual-port/sys");
        cfg.agent.interval = Duration::from_millis(200);
        cfg.agent.jitter = Duration::from_millis(50);
        let agent = Agent::start(cfg).await;
        let mut rx = agent.events.subscribe();
        let (tx, shutdown) = watch::channel(false);
        let runner = tokio::spawn({
            let agent = Arc::clone(&agent);
            async move { agent.run(shutdown).await }
        });
        let started = tokio::time::Instant::now();
        let mut n = 0;
        while started.elapsed() < Duration::from_millis(1100) {
            if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
                if c.plugin == "counters-sysfs" {
                    assert!(!c.result.samples.is_empty());
                    n += 1;
                }
            }
        }
        // 1.1 s at 200 ms: the first collection at once (plus jitter), then one per interval.
        assert!((4..=7).contains(&n), "{n} collections");
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(2), runner)
            .await
            .expect("shutdown is prompt")
            .unwrap();
        assert!(!agent.store.by_name("rdma.port.io").is_empty());
    }

    #[test]
    fn jitter_stays_in_bounds() {
        let mut j = Jitter::new("x");
        for _ in 0..1000 {
            assert!(j.next(Duration::from_millis(100)) < Duration::from_millis(100));
        }
        assert_eq!(j.next(Duration::ZERO), Duration::ZERO);
    }
}
