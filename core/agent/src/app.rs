//! The one place the agent is wired.
//!
//! [`App`] is what every command starts: the plugins it needs (one-shot commands name the
//! kinds they use; `run` starts every kind), the store with every metric declared, the
//! pipeline and discovery. [`Agent`] is the running agent of `run`, `demo` and
//! `collectd-exec`: an [`App`] plus everything the configuration turns on (exporters,
//! remediation, the Alertmanager receiver, probes, the QoS metrics loop) and the schedules.
//! Nothing below this module sees the whole configuration: each component gets its own
//! section and the narrow handles it needs (the pipeline, the plugin entries of its kind).

use std::sync::Arc;

use rocewatch_plugin_api::{PluginKind, QosState};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use rocewatch_export::otlp::OtlpExporter;
use rocewatch_export::ExportError;
use rocewatch_qos::apply::Applier;
use rocewatch_remediation::{Dispatcher, Targets};
use rocewatch_runtime::app::AppSpec;
use rocewatch_runtime::host::call::CallError;
use rocewatch_runtime::pipeline::scheduler::{self, Schedule};

/// Plugin kinds of the commands that only read: discovery and collectors.
pub const READ: &[PluginKind] = &[PluginKind::Discovery, PluginKind::Collector];

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

/// What every command works with: the runtime's [`rocewatch_runtime::app::App`] (started
/// plugins, store, pipeline, discovery; reached through `Deref`) and the configuration it
/// was started from.
pub struct App {
    pub cfg: Config,
    pub core: Arc<rocewatch_runtime::app::App>,
}

impl std::ops::Deref for App {
    type Target = rocewatch_runtime::app::App;

    fn deref(&self) -> &Self::Target {
        &self.core
    }
}

impl App {
    /// Build the registry with the built-in plugins and `[plugins]`, the plugins of
    /// `kinds` (`None`: every kind) started, and declare what they and the agent's own
    /// features may emit.
    pub async fn start(cfg: Config, kinds: Option<&[PluginKind]>) -> Arc<App> {
        let probes = cfg.probes.clone();
        let declare = move |store: &rocewatch_runtime::store::Store| {
            store.declare(&rocewatch_metrics::derived_descriptors());
            rocewatch_probes::declare(store, probes.as_ref());
            store.declare(&rocewatch_metrics::descriptors_of(
                rocewatch_metrics::QOS_CATALOG,
            ));
        };
        let core = rocewatch_runtime::app::App::start(AppSpec {
            host: cfg.host_settings(kinds),
            sysfs_root: cfg.agent.sysfs_root.clone(),
            host_name: host_name(&cfg),
            rules: &cfg.rules,
            declare: &declare,
        })
        .await;
        Arc::new(App { cfg, core })
    }

    /// Every configuration plugin's view of the ports, merged.
    pub async fn observe_qos(&self) -> Result<Vec<QosState>, CallError> {
        rocewatch_qos::observe::observe(
            &rocewatch_qos::observe::config_plugins(&self.registry),
            self.metrics(),
        )
        .await
    }

    /// What `qos apply`, `qos rollback` and the `qos_apply` action change settings through.
    pub fn qos_applier(&self) -> Applier {
        Applier::new(
            rocewatch_qos::observe::config_plugins(&self.registry),
            self.cfg.qos.clone(),
            self.cfg.remediation.audit(),
            self.host_name.clone(),
            Arc::clone(self.metrics()),
        )
    }
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    ProbePlugin(#[from] rocewatch_probes::PluginNotFound),
    #[error(transparent)]
    Listen(#[from] ExportError),
    #[error(transparent)]
    Audit(#[from] rocewatch_runtime::audit::AuditError),
    #[error("{path}: {message}")]
    Config { path: String, message: String },
    #[error(
        "[alertmanager] needs at least one action under [remediation.actions] to route alerts to"
    )]
    AlertmanagerWithoutActions,
}

/// The bound addresses of the agent's listeners.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Addresses {
    pub prometheus: Option<std::net::SocketAddr>,
    pub alertmanager: Option<std::net::SocketAddr>,
}

/// Outputs a command adds to the configured ones.
#[derive(Debug, Default)]
pub struct Extras {
    /// `collectd-exec`: PUTVAL lines of every series on standard output every interval;
    /// the agent stops when collectd closes the pipe.
    pub collectd_exec: bool,
    /// Remediation's cooldowns and limits, carried across a configuration reload.
    pub remediation: rocewatch_remediation::Memory,
}

/// The running agent: an [`App`] with every configured feature and exporter.
pub struct Agent {
    pub app: Arc<App>,
    /// Where the listeners are bound (the port the kernel chose for port 0).
    pub addresses: Addresses,
    otlp: Option<OtlpExporter>,
    tasks: Vec<JoinHandle<()>>,
    /// The stop flag, as the scheduler sees it (taken at start: a stop that arrives
    /// before `run` is not missed).
    stop: watch::Receiver<bool>,
    /// Remediation's memory: the actions still running, waited for at the end.
    remediation: rocewatch_remediation::Memory,
}

impl Agent {
    /// Start everything the configuration turns on; stop when `shutdown` turns true.
    /// A listener that cannot bind and an unusable `[alertmanager]` are errors here, before
    /// anything runs.
    pub async fn start(
        mut cfg: Config,
        shutdown: watch::Receiver<bool>,
        extras: Extras,
    ) -> Result<Agent, StartError> {
        if let Some(p) = &cfg.probes {
            let path = match &p.plugin {
                Some(path) => path.clone(),
                None => rocewatch_probes::plugin_path()?,
            };
            let mut plugin = rocewatch_probes::plugin_config(
                path,
                p.timeout,
                &p.device,
                p.tcp_port,
                p.serve,
                false,
                p.reconnect_backoff,
            );
            plugin.options["serve_bandwidth"] = p.serve_bandwidth.into();
            cfg.plugins.external.push(plugin);
        }
        // Read the web configuration and bind before anything else: a bad certificate or a
        // taken port is a configuration error, reported at once.
        let prom_web = match cfg
            .exporters
            .prometheus
            .as_ref()
            .and_then(|p| p.web_config_file.as_ref())
        {
            Some(f) => Some(rocewatch_web::server::WebListener::load(f).map_err(|e| {
                StartError::Config {
                    path: "exporters.prometheus.web_config_file".into(),
                    message: e.to_string(),
                }
            })?),
            None => None,
        };
        let prom_listener = match &cfg.exporters.prometheus {
            Some(p) => Some(rocewatch_export::prometheus::bind(p.listen).await?),
            None => None,
        };
        let am_listener = match &cfg.alertmanager {
            Some(am) => Some(rocewatch_export::prometheus::bind(am.listen).await?),
            None => None,
        };
        let (stop_tx, stop) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        {
            let stop_tx = Arc::clone(&stop_tx);
            let mut shutdown = shutdown;
            tokio::spawn(async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
                let _ = stop_tx.send(true);
            });
        }
        let app = App::start(cfg, None).await;
        let cfg = &app.cfg;
        let mut tasks = Vec::new();
        let mut addresses = Addresses {
            prometheus: prom_listener.as_ref().and_then(|l| l.local_addr().ok()),
            alertmanager: None,
        };
        if let Some(l) = prom_listener {
            let web = prom_web.as_ref().map_or_else(
                || "plain HTTP, no authentication".to_string(),
                |w| w.current("prometheus endpoint").summary,
            );
            tracing::info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), %web, "serving Prometheus /metrics and /healthz");
            let state = rocewatch_export::prometheus::Exposition {
                store: Arc::clone(app.store()),
                metrics: Arc::clone(app.metrics()),
                pipeline: Some(Arc::clone(&app.pipeline)),
            };
            tasks.push(tokio::spawn(rocewatch_export::prometheus::serve(
                l,
                state,
                cfg.exporters
                    .prometheus
                    .as_ref()
                    .map_or(64, |p| p.max_connections),
                prom_web,
                stop.clone(),
            )));
        }
        for s in app.registry.statuses() {
            tracing::info!(plugin = %s.name, kind = ?s.kind, origin = %s.origin, state = ?s.state, "plugin");
        }
        // From here on, a failure stops what was started (plugins, tasks) before it returns.
        let remediation = match start_remediation(&app, &extras.remediation) {
            Ok(r) => r,
            Err(e) => return Err(abandon(&app, tasks, e).await),
        };
        tasks.push(tokio::spawn(rocewatch_qos::metrics::watch(
            rocewatch_qos::observe::config_plugins(&app.registry),
            cfg.qos.clone(),
            Arc::clone(&app.discovery),
            Arc::clone(&app.pipeline),
            stop.clone(),
        )));
        if let Some(p) = cfg.probes.clone() {
            match app.probe_plugin() {
                Some(entry) => {
                    tracing::info!(interval = ?p.interval, "probing peers over RDMA verbs");
                    tasks.push(tokio::spawn(rocewatch_probes::run(
                        entry,
                        Arc::clone(&app.pipeline),
                        p,
                        stop.clone(),
                    )));
                }
                None => tracing::error!(
                    "probes: the probe-verbs plugin is not loaded; no probes will run"
                ),
            }
        }
        match (&cfg.alertmanager, &remediation, am_listener) {
            (Some(am), Some(d), Some(listener)) => {
                addresses.alertmanager = listener.local_addr().ok();
                let rx = match rocewatch_remediation::alertmanager::Receiver::new(
                    am,
                    Arc::clone(d),
                    Arc::clone(app.metrics()),
                ) {
                    Ok(rx) => rx,
                    Err((path, message)) => {
                        return Err(abandon(&app, tasks, StartError::Config { path, message }).await)
                    }
                };
                tracing::info!(addr = %addresses.alertmanager.unwrap_or(am.listen), authenticated = rx.authenticated(), web = am.web_config_file.as_ref().map(|f| f.display().to_string()).unwrap_or_default(), "Alertmanager webhook receiver on POST /alertmanager");
                tasks.push(tokio::spawn(rocewatch_remediation::alertmanager::serve(
                    listener,
                    rx,
                    stop.clone(),
                )));
            }
            (Some(_), _, _) => {
                return Err(abandon(&app, tasks, StartError::AlertmanagerWithoutActions).await)
            }
            _ => {}
        }
        let otlp = start_otlp(&app);
        if let Some(c) = cfg.exporters.collectd.clone() {
            tracing::info!(server = %c.server, security = ?c.security_level, "sending to collectd");
            tasks.push(tokio::spawn(rocewatch_export::collectd::run(
                c,
                app.host_name.clone(),
                cfg.agent.interval,
                Arc::clone(app.store()),
                Arc::clone(app.metrics()),
                stop.clone(),
            )));
        }
        if extras.collectd_exec {
            let stop_tx = Arc::clone(&stop_tx);
            let exec = rocewatch_export::collectd::run_exec(
                app.host_name.clone(),
                cfg.agent.interval,
                Arc::clone(app.store()),
                Arc::clone(app.metrics()),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                exec.await;
                // collectd closed the pipe: it is stopping us.
                let _ = stop_tx.send(true);
            }));
        }
        if cfg.exporters.stdout.enabled {
            tasks.push(tokio::spawn(rocewatch_export::stdout::run(
                app.pipeline.collections(),
                Arc::clone(app.metrics()),
            )));
        }
        Ok(Agent {
            app,
            addresses,
            otlp,
            tasks,
            stop: stop.clone(),
            remediation: extras.remediation,
        })
    }

    /// Whether the OTLP exporter is running (it was configured and could start).
    pub fn otlp_running(&self) -> bool {
        self.otlp.is_some()
    }

    /// Run the schedules until shutdown, then wait for the remediation actions still
    /// running (unless the next agent of a reload takes them over), stop the plugins,
    /// export a last time and end every task.
    pub async fn run(self) {
        let app = &self.app;
        scheduler::run(
            Schedule {
                jitter: app.cfg.agent.jitter,
                discovery_interval: app.cfg.agent.discovery_interval,
            },
            Arc::clone(&app.registry),
            Arc::clone(&app.discovery),
            Arc::clone(&app.pipeline),
            self.stop,
        )
        .await;
        // Before the plugins stop: an action may act through one (plugin, qos_apply).
        if !self.remediation.handing_over() {
            self.remediation.finish().await;
        }
        app.stop().await;
        finish_otlp(self.otlp).await;
        for t in self.tasks {
            t.abort();
        }
    }
}

/// A start that failed half-way: end the tasks already spawned and stop the plugins
/// already started (a retry or the previous configuration must find nothing of it).
async fn abandon(app: &App, tasks: Vec<JoinHandle<()>>, e: StartError) -> StartError {
    for t in tasks {
        t.abort();
    }
    app.stop().await;
    e
}

fn start_otlp(app: &App) -> Option<OtlpExporter> {
    let o = app.cfg.exporters.otlp.as_ref()?;
    match OtlpExporter::start(
        o,
        &app.host_name,
        Arc::clone(app.store()),
        Arc::clone(app.metrics()),
    ) {
        Ok(x) => {
            tracing::info!(endpoint = %o.endpoint, protocol = ?o.protocol, "exporting over OTLP");
            Some(x)
        }
        Err(e) => {
            tracing::error!("{e}; continuing without OTLP export");
            None
        }
    }
}

async fn finish_otlp(otlp: Option<OtlpExporter>) {
    if let Some(x) = otlp {
        // The final export: the latest values of every series.
        match tokio::task::spawn_blocking(move || x.shutdown()).await {
            Ok(Ok(0)) => tracing::info!("final OTLP export done"),
            Ok(Ok(n)) => tracing::warn!(
                "final OTLP export: the endpoint was unreachable at shutdown; {n} snapshot(s) dropped"
            ),
            Ok(Err(e)) => tracing::warn!("final OTLP export: {e}"),
            Err(e) => tracing::warn!("final OTLP export: {e}"),
        }
    }
}

/// The remediation dispatcher, when any action is configured: it takes every rule
/// transition from the pipeline and decides (and audits) its actions.
fn start_remediation(
    app: &App,
    memory: &rocewatch_remediation::Memory,
) -> Result<Option<Arc<Dispatcher>>, StartError> {
    let cfg = &app.cfg.remediation;
    if cfg.actions.is_empty() {
        return Ok(None);
    }
    let targets = Targets {
        plugins: app
            .registry
            .of_kind(PluginKind::Remediation)
            .cloned()
            .collect(),
        qos: Some(Arc::new(app.qos_applier())),
        store: Some(Arc::clone(app.store())),
    };
    let d = Dispatcher::with_memory(cfg.clone(), Arc::clone(app.metrics()), targets, memory)?;
    tracing::info!(
        audit_log = %d.audit_path().display(),
        kill_switch = %cfg.kill_switch.display(),
        actions = cfg.actions.len(),
        "remediation enabled (actions are dry runs unless dry_run = false)"
    );
    let mut rx = app.pipeline.transitions();
    let dispatcher = Arc::clone(&d);
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(t) => {
                    d.handle(&t);
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::error!(
                        missed = n,
                        "remediation fell behind: {n} rule transitions were not acted on"
                    );
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    Ok(Some(dispatcher))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn schedules_collectors_and_stops_on_shutdown() {
        let mut cfg = Config::default();
        cfg.agent.sysfs_root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/mlx5-roce-dual-port/sys");
        cfg.agent.interval = Duration::from_millis(200);
        cfg.agent.jitter = Duration::from_millis(50);
        let (tx, shutdown) = watch::channel(false);
        let agent = Agent::start(cfg, shutdown, Extras::default())
            .await
            .expect("starts");
        let app = Arc::clone(&agent.app);
        let mut rx = app.pipeline.collections();
        let runner = tokio::spawn(agent.run());
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
        assert!(!app.store().by_name("rdma.port.io").is_empty());
    }

    #[tokio::test]
    async fn one_shot_commands_start_only_the_kinds_they_name() {
        let mut cfg = Config::default();
        cfg.agent.sysfs_root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/mlx5-roce-dual-port/sys");
        let app = App::start(cfg, Some(&[PluginKind::Discovery])).await;
        let started: Vec<_> = app
            .registry
            .entries
            .iter()
            .filter(|e| e.instance.is_some())
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(started, ["discovery-sysfs"]);
        assert!(app.registry.of_kind(PluginKind::Collector).next().is_none());
        assert!(!app.discover().await.unwrap().devices.is_empty());
    }
}
