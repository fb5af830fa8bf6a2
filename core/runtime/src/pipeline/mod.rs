//! The pipeline: what happens to samples once a plugin returned them.
//!
//! [`Pipeline`] is the one handle every writer gets (collectors through the scheduler, the
//! prober, the QoS metrics loop): it keeps only declared metrics, stores the samples,
//! computes the derived signals ([`derive`]), evaluates the rules and publishes what
//! changed (rule transitions for remediation, collections for the demo view and the stdout
//! exporter). [`scheduler`] runs every collector on its own interval with jitter, and
//! discovery on its own.

pub mod derive;
pub mod scheduler;

use rocewatch_metrics::labels::PluginErrorReason;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use rocewatch_plugin_api::{PluginKind, Sample, ScrapeResult};
use tokio::sync::broadcast;

use crate::host::call::{self, CallError};
use crate::host::registry::{Entry, Instance, Registry};
use crate::rules::{Engine, RuleConfig, RuleStatus, Transition};
use crate::selfmetrics::SelfMetrics;
use crate::store::Store;

/// How often a partial error whose message keeps changing is said again.
const PARTIAL_CHANGE_SAID_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A plugin's partial errors as last said: target → message and when it was said.
type Said = std::collections::BTreeMap<String, (String, Instant)>;

/// One collection by one plugin, as published to subscribers.
#[derive(Debug, Clone)]
pub struct Collection {
    pub plugin: String,
    pub time: SystemTime,
    pub result: ScrapeResult,
}

/// Store, derived signals, rules and subscribers: the narrow handle writers get.
pub struct Pipeline {
    store: Arc<Store>,
    metrics: Arc<SelfMetrics>,
    rules: Mutex<Engine>,
    transitions: broadcast::Sender<Arc<Transition>>,
    events: broadcast::Sender<Arc<Collection>>,
    /// The partial errors last said, per plugin (target → message and when it was said).
    partial_said: Mutex<std::collections::HashMap<String, Said>>,
}

impl Pipeline {
    /// A pipeline over `store` evaluating `rules`.
    pub fn new(store: Arc<Store>, metrics: Arc<SelfMetrics>, rules: &[RuleConfig]) -> Arc<Self> {
        let (events, _) = broadcast::channel(64);
        let (transitions, _) = broadcast::channel(1024);
        Arc::new(Pipeline {
            store,
            metrics,
            rules: Mutex::new(Engine::new(rules)),
            transitions,
            events,
            partial_said: Mutex::default(),
        })
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn metrics(&self) -> &Arc<SelfMetrics> {
        &self.metrics
    }

    /// Replace what the collector `plugin` emitted with `samples`, then recompute the
    /// derived signals (they come from counter rates) and evaluate the rules.
    pub fn ingest(&self, plugin: &str, samples: &[Sample]) {
        self.store.ingest(plugin, samples, &self.metrics);
        self.store
            .ingest(derive::PLUGIN, &derive::compute(&self.store), &self.metrics);
        self.evaluate_rules();
    }

    /// Replace what `plugin` (the prober, the QoS loop: no counters, so no derived
    /// signal moves) emitted with `samples` read at `now`, then evaluate the rules.
    pub fn ingest_at(&self, plugin: &str, samples: &[Sample], now: SystemTime, mono: Instant) {
        self.store
            .ingest_at(plugin, samples, &self.metrics, now, mono);
        self.evaluate_rules();
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

    /// The state of every rule now (for `/rules`, `rocewatch rules` and the demo).
    pub fn rule_status(&self) -> Vec<RuleStatus> {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .status(tokio::time::Instant::now())
    }

    /// Rules firing and clearing, for remediation.
    pub fn transitions(&self) -> broadcast::Receiver<Arc<Transition>> {
        self.transitions.subscribe()
    }

    /// Every collection, for the stdout exporter and the demo's view.
    pub fn collections(&self) -> broadcast::Receiver<Arc<Collection>> {
        self.events.subscribe()
    }

    /// One collection by one collector: declared metrics only, stored, derived, rules,
    /// subscribers.
    pub async fn collect_from(&self, e: &Entry) -> Result<Arc<Collection>, CallError> {
        let result = self.scrape(e).await?;
        self.ingest(&e.name, &result.samples);
        let c = Arc::new(Collection {
            plugin: e.name.clone(),
            time: SystemTime::now(),
            result,
        });
        let _ = self.events.send(Arc::clone(&c));
        Ok(c)
    }

    /// One collection by one collector, declared metrics only, its partial errors said
    /// and counted; not stored.
    async fn scrape(&self, e: &Entry) -> Result<ScrapeResult, CallError> {
        let mut result = call::call(e, e.timeout, &self.metrics, |i| match i {
            Instance::Collector(c) => c.collect(),
            _ => Ok(ScrapeResult::default()),
        })
        .await?;
        let dropped = self
            .store
            .retain_declared_from(&e.name, &mut result.samples);
        if dropped > 0 {
            self.metrics
                .plugin_error(&e.name, PluginErrorReason::Undeclared);
            tracing::warn!(plugin = %e.name, dropped, "{}: emitted metrics it did not declare; dropped", e.label());
        }
        {
            // Every partial error is counted; each is said when it appears, and when it
            // changes at most once a minute, not on every collection (an unreadable counter
            // stays unreadable; a collection over its budget says how far it got each time).
            // The steady case (the same errors, or none) allocates nothing.
            for _ in &result.errors {
                self.metrics
                    .plugin_error(&e.name, PluginErrorReason::Partial);
            }
            // Per target: the message last said and when. A message that changes within a
            // minute of the last one said is held back, and said once the minute is over
            // if it still differs (the map keeps what was said, not the latest).
            let mut said = self.partial_said.lock().unwrap_or_else(|p| p.into_inner());
            let unchanged = match said.get(&e.name) {
                None => result.errors.is_empty(),
                Some(before) => {
                    before.len() == result.errors.len()
                        && result.errors.iter().all(|err| {
                            before
                                .get(&err.target)
                                .is_some_and(|(m, _)| *m == err.message)
                        })
                }
            };
            if !unchanged {
                let at = Instant::now();
                let entry = said.entry(e.name.clone()).or_default();
                for err in &result.errors {
                    let say = match entry.get(&err.target) {
                        Some((m, _)) if *m == err.message => false,
                        Some((_, when)) => at.duration_since(*when) >= PARTIAL_CHANGE_SAID_EVERY,
                        None => true,
                    };
                    if say {
                        tracing::warn!(plugin = %e.name, target = %err.target, "{}: partial scrape: {}", e.label(), err.message);
                        entry.insert(err.target.clone(), (err.message.clone(), at));
                    }
                }
                let current: std::collections::HashSet<&str> = result
                    .errors
                    .iter()
                    .map(|err| err.target.as_str())
                    .collect();
                entry.retain(|target, _| current.contains(target.as_str()));
                if entry.is_empty() {
                    said.remove(&e.name);
                }
            }
        }
        self.metrics.samples_emitted(&e.name, result.samples.len());
        Ok(result)
    }

    /// One collection by one collector, declared metrics only, not stored (`rocewatch
    /// top` reads the resources collector alone, and must tell its "unsupported" apart).
    pub async fn collect_unstored_from(&self, e: &Entry) -> Result<ScrapeResult, CallError> {
        self.scrape(e).await
    }

    /// One collection by every collector of `registry`, not stored (for `collect
    /// --once`, which prints it and exits: at 2000 ports storing it was a fifth of the
    /// command's time). Unsupported collectors contribute nothing; other failures are
    /// returned alongside what did work.
    pub async fn collect_unstored(&self, registry: &Registry) -> (ScrapeResult, Vec<CallError>) {
        let mut all = ScrapeResult::default();
        let mut failures = Vec::new();
        for e in registry.of_kind(PluginKind::Collector) {
            match self.scrape(e).await {
                Ok(c) => {
                    all.samples.extend(c.samples);
                    all.errors.extend(c.errors);
                }
                Err(err) if err.is_unsupported() => {}
                Err(err) => failures.push(err),
            }
        }
        (all, failures)
    }

    /// One collection by every collector of `registry`, stored as the agent stores them
    /// (for commands that read the store or the rules after it). Unsupported collectors
    /// contribute nothing; other failures are returned alongside what did work.
    pub async fn collect_all(&self, registry: &Registry) -> (ScrapeResult, Vec<CallError>) {
        let mut all = ScrapeResult::default();
        let mut failures = Vec::new();
        for e in registry.of_kind(PluginKind::Collector) {
            match self.collect_from(e).await {
                // Taken, not copied, when no subscriber holds the collection (one-shot
                // commands have none): 100 000 samples at 2000 ports.
                Ok(c) => match Arc::try_unwrap(c) {
                    Ok(c) => {
                        all.samples.extend(c.result.samples);
                        all.errors.extend(c.result.errors);
                    }
                    Err(c) => {
                        all.samples.extend(c.result.samples.iter().cloned());
                        all.errors.extend(c.result.errors.iter().cloned());
                    }
                },
                Err(err) if err.is_unsupported() => {}
                Err(err) => failures.push(err),
            }
        }
        (all, failures)
    }

    /// Ask every collector of `registry` what it may emit, and declare it.
    pub async fn declare_collectors(&self, registry: &Registry) {
        for e in registry.of_kind(PluginKind::Collector) {
            let d = call::call(e, e.timeout, &self.metrics, |i| match i {
                Instance::Collector(c) => Ok(c.descriptors()),
                _ => Ok(Vec::new()),
            })
            .await;
            if let Ok(d) = d {
                self.store.declare(&d);
            }
        }
    }
}
