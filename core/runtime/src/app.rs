//! What every command works with: the started plugins of the kinds it needs, the store
//! with every metric declared, the pipeline and discovery. The agent crate builds it from
//! the configuration (its sections, its list of built-in plugins) and adds the rest.

use std::path::PathBuf;
use std::sync::Arc;

use rocewatch_plugin_api::{Inventory, PluginContext, PluginKind, ScrapeResult};

use crate::host::call::{self, CallError};
use crate::host::discovery::Discovery;
use crate::host::registry::{Entry, HostSettings, Registry};
use crate::pipeline::Pipeline;
use crate::rules::RuleConfig;
use crate::selfmetrics::SelfMetrics;
use crate::store::Store;

/// What an [`App`] is started from.
pub struct AppSpec<'a> {
    /// The registry's plugins: the built-ins handed in, `[plugins]`, the kinds needed.
    pub host: HostSettings<'a>,
    pub sysfs_root: PathBuf,
    pub host_name: String,
    /// Evaluated after every collection.
    pub rules: &'a [RuleConfig],
    /// Declares what the agent's own features may emit (derived signals, probes, QoS).
    pub declare: &'a dyn Fn(&Store),
}

/// Started plugins, the store and the pipeline.
pub struct App {
    /// The sysfs root every reader starts from (`/sys` on a host, a fixture in tests).
    pub sysfs_root: PathBuf,
    pub host_name: String,
    pub registry: Arc<Registry>,
    pub discovery: Arc<Discovery>,
    pub pipeline: Arc<Pipeline>,
}

impl App {
    /// Build the registry, start its plugins and declare what they and the agent's own
    /// features may emit.
    pub async fn start(spec: AppSpec<'_>) -> Arc<App> {
        let metrics = Arc::new(SelfMetrics::default());
        let registry = Arc::new(Registry::build(&spec.host, &metrics));
        let mut ctx = PluginContext::new(&spec.sysfs_root);
        ctx.host_name = spec.host_name.clone();
        call::start_all(&registry, &ctx, &metrics).await;
        let store = Arc::new(Store::new());
        (spec.declare)(&store);
        let pipeline = Pipeline::new(store, Arc::clone(&metrics), spec.rules);
        pipeline.declare_collectors(&registry).await;
        let discovery = Discovery::new(&registry, metrics);
        Arc::new(App {
            sysfs_root: spec.sysfs_root,
            host_name: spec.host_name,
            registry,
            discovery,
            pipeline,
        })
    }

    pub fn store(&self) -> &Arc<Store> {
        self.pipeline.store()
    }

    pub fn metrics(&self) -> &Arc<SelfMetrics> {
        self.pipeline.metrics()
    }

    /// The loaded probe plugin, if any.
    pub fn probe_plugin(&self) -> Option<Entry> {
        self.registry.of_kind(PluginKind::Probe).next().cloned()
    }

    /// Run every discovery plugin once.
    pub async fn discover(&self) -> Result<Inventory, CallError> {
        self.discovery.discover().await
    }

    /// One collection by every collector.
    pub async fn collect_all(&self) -> (ScrapeResult, Vec<CallError>) {
        self.pipeline.collect_all(&self.registry).await
    }

    /// One collection by every collector, not stored (`collect --once`).
    pub async fn collect_unstored(&self) -> (ScrapeResult, Vec<CallError>) {
        self.pipeline.collect_unstored(&self.registry).await
    }

    /// One collection by one collector, not stored.
    pub async fn collect_unstored_from(&self, e: &Entry) -> Result<ScrapeResult, CallError> {
        self.pipeline.collect_unstored_from(e).await
    }

    /// Stop every plugin that is not stuck in a call.
    pub async fn stop(&self) {
        call::stop_all(&self.registry, self.metrics()).await;
    }
}
