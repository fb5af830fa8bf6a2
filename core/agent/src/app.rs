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
use rocewatch_export::otlp::logs::EventsExporter;
use rocewatch_export::otlp::OtlpExporter;
use rocewatch_export::ExportError;
use rocewatch_qos::apply::Applier;
use rocewatch_remediation::{Dispatcher, Targets};
use rocewatch_runtime::app::AppSpec;
use rocewatch_runtime::host::call::CallError;
use rocewatch_runtime::host::registry::{Entry, Origin};
use rocewatch_runtime::pipeline::scheduler::{self, Schedule};
use rocewatch_web::server::WebListener;
use tokio::net::TcpListener;

/// Plugin kinds of the commands that only read: discovery and collectors.
pub const READ: &[PluginKind] = &[PluginKind::Discovery, PluginKind::Collector];

pub use crate::config::host::{fleet_host, fleet_host_name, host_name};

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
    /// The web configurations the listeners serve with, by key
    /// ([`PROMETHEUS_WEB`], [`ALERTMANAGER_WEB`]).
    pub webs: Vec<(&'static str, Arc<WebListener>)>,
    otlp: Option<OtlpExporter>,
    /// Events as OTLP logs (`[exporters.otlp] events`).
    events: Option<EventsExporter>,
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
        add_probe_plugin(&mut cfg)?;
        let listeners = bind_listeners(&cfg).await?;
        let (stop_tx, stop) = relay_stop(shutdown);
        let app = App::start(cfg, None).await;
        let mut tasks = Vec::new();
        let mut addresses = Addresses::default();
        let mut webs = Vec::new();
        serve_prometheus(
            &app,
            listeners.prometheus,
            &stop,
            &mut tasks,
            &mut addresses,
            &mut webs,
        );
        for s in app.registry.statuses() {
            tracing::info!(plugin = %s.name, kind = ?s.kind, origin = %s.origin, state = ?s.state, "plugin");
        }
        // Before remediation and the quarantine watcher: their first decisions are events.
        let events = start_events(&app);
        // From here on, a failure stops what was started (plugins, tasks) before it returns.
        let remediation = match start_remediation(&app, &extras.remediation) {
            Ok(r) => r,
            Err(e) => return Err(abandon(&app, tasks, e).await),
        };
        tasks.push(watch_qos(&app, &stop));
        tasks.push(tokio::spawn(crate::quarantine::watcher(&app.cfg).run(
            Arc::clone(&app.pipeline),
            Arc::clone(app.metrics()),
            stop.clone(),
        )));
        tasks.extend(start_probes(&app, &stop));
        let am = AlertmanagerParts {
            dispatcher: remediation.as_ref(),
            listener: listeners.alertmanager,
        };
        match serve_alertmanager(&app, am, &stop) {
            Ok(Some((task, addr, web))) => {
                tasks.push(task);
                addresses.alertmanager = addr;
                webs.extend(web.map(|w| (ALERTMANAGER_WEB, w)));
            }
            Ok(None) => {}
            Err(e) => return Err(abandon(&app, tasks, e).await),
        }
        let otlp = start_otlp(&app);
        tasks.extend(start_collectd(&app, &stop));
        if extras.collectd_exec {
            tasks.push(start_collectd_exec(&app, &stop, stop_tx));
        }
        if app.cfg.exporters.stdout.enabled {
            tasks.push(tokio::spawn(rocewatch_export::stdout::run(
                app.pipeline.collections(),
                Arc::clone(app.metrics()),
            )));
        }
        Ok(Agent {
            app,
            addresses,
            webs,
            otlp,
            events,
            tasks,
            stop,
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
        if let Some(e) = self.events {
            let _ = tokio::task::spawn_blocking(move || e.shutdown()).await;
        }
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

/// The key of the Prometheus listener's web configuration.
pub const PROMETHEUS_WEB: &str = "exporters.prometheus.web_config_file";
/// The key of the Alertmanager receiver's web configuration.
pub const ALERTMANAGER_WEB: &str = "alertmanager.web_config_file";

/// `[probes]`: the probe plugin added to the external plugins: one instance and one per
/// `device_peers` device, or with `[fleet]` and no `probes.device` one instance per RoCE
/// port of the host (each rail probed from its own port). The first instance runs the
/// responder, which answers on every port.
fn add_probe_plugin(cfg: &mut Config) -> Result<(), StartError> {
    let Some(p) = &cfg.probes else {
        return Ok(());
    };
    let path = match &p.plugin {
        Some(path) => path.clone(),
        None => rocewatch_probes::plugin_path()?,
    };
    let rails = match (&cfg.fleet, &p.device) {
        (Some(_), None) => rocewatch_probes::rail_ports(&cfg.agent.sysfs_root),
        _ => Vec::new(),
    };
    let mut ports: Vec<Option<&str>> = if rails.is_empty() {
        vec![None]
    } else {
        rails.iter().map(|r| Some(r.as_str())).collect()
    };
    // Without [fleet]: the list from the first instance, each device_peers device from
    // an instance of its own.
    for key in p.device_peers.keys() {
        rocewatch_probes::check_port(&cfg.agent.sysfs_root, key).map_err(|message| {
            StartError::Config {
                path: format!("probes.device_peers.{key}"),
                message,
            }
        })?;
        ports.push(Some(key.as_str()));
    }
    for (i, port) in ports.into_iter().enumerate() {
        let serve = p.serve && i == 0;
        let mut plugin = rocewatch_probes::plugin_config(
            path.clone(),
            p.timeout,
            &p.device,
            p.tcp_port,
            serve,
            false,
            p.reconnect_backoff,
        );
        if let Some(port) = port {
            rocewatch_probes::set_port(&mut plugin.options, port);
        }
        plugin.options["serve_bandwidth"] = (serve && p.serve_bandwidth).into();
        if serve && p.serve_cm {
            plugin.options["serve_cm_port"] = p.cm_port.into();
        }
        cfg.plugins.external.push(plugin);
    }
    Ok(())
}

/// The listeners, bound before anything else starts, with the Prometheus listener's web
/// configuration.
struct Listeners {
    prometheus: Option<(TcpListener, Option<Arc<WebListener>>)>,
    alertmanager: Option<TcpListener>,
}

/// Read the web configuration and bind before anything else: a bad certificate or a taken
/// port is a configuration error, reported at once.
async fn bind_listeners(cfg: &Config) -> Result<Listeners, StartError> {
    let prometheus = match &cfg.exporters.prometheus {
        Some(p) => {
            let web = match &p.web_config_file {
                Some(f) => Some(WebListener::load(f).map_err(|e| StartError::Config {
                    path: PROMETHEUS_WEB.into(),
                    message: e.to_string(),
                })?),
                None => None,
            };
            Some((rocewatch_export::prometheus::bind(p.listen).await?, web))
        }
        None => None,
    };
    let alertmanager = match &cfg.alertmanager {
        Some(am) => Some(rocewatch_export::prometheus::bind(am.listen).await?),
        None => None,
    };
    Ok(Listeners {
        prometheus,
        alertmanager,
    })
}

/// The agent's own stop flag, turned on by `shutdown` (and by collectd closing the pipe).
fn relay_stop(
    mut shutdown: watch::Receiver<bool>,
) -> (Arc<watch::Sender<bool>>, watch::Receiver<bool>) {
    let (stop_tx, stop) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let relay = Arc::clone(&stop_tx);
    tokio::spawn(async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
        let _ = relay.send(true);
    });
    (stop_tx, stop)
}

/// Serve `/metrics` and `/healthz` on the bound Prometheus listener.
fn serve_prometheus(
    app: &App,
    listener: Option<(TcpListener, Option<Arc<WebListener>>)>,
    stop: &watch::Receiver<bool>,
    tasks: &mut Vec<JoinHandle<()>>,
    addresses: &mut Addresses,
    webs: &mut Vec<(&'static str, Arc<WebListener>)>,
) {
    let Some((l, web)) = listener else {
        return;
    };
    addresses.prometheus = l.local_addr().ok();
    let summary = web.as_ref().map_or_else(
        || "plain HTTP, no authentication".to_string(),
        |w| w.current("prometheus endpoint").summary,
    );
    tracing::info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), web = %summary, "serving Prometheus /metrics and /healthz");
    let state = rocewatch_export::prometheus::Exposition {
        store: Arc::clone(app.store()),
        metrics: Arc::clone(app.metrics()),
        pipeline: Some(Arc::clone(&app.pipeline)),
    };
    webs.extend(web.clone().map(|w| (PROMETHEUS_WEB, w)));
    tasks.push(tokio::spawn(rocewatch_export::prometheus::serve(
        l,
        state,
        app.cfg
            .exporters
            .prometheus
            .as_ref()
            .map_or(64, |p| p.max_connections),
        web,
        stop.clone(),
    )));
}

/// The QoS metrics loop.
fn watch_qos(app: &App, stop: &watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(rocewatch_qos::metrics::watch(
        rocewatch_qos::observe::config_plugins(&app.registry),
        app.cfg.qos.clone(),
        Arc::clone(&app.discovery),
        Arc::clone(&app.pipeline),
        stop.clone(),
    ))
}

/// The probe plugin's instances [`add_probe_plugin`] added, in order, each with the port
/// it probes from (`None`: the plugin's default).
fn probe_instances(app: &App) -> Vec<(Option<String>, Entry)> {
    let Some(path) = app.cfg.probes.as_ref().and_then(|p| {
        p.plugin
            .clone()
            .or_else(|| rocewatch_probes::plugin_path().ok())
    }) else {
        return Vec::new();
    };
    app.registry
        .of_kind(PluginKind::Probe)
        .filter(|e| matches!(&e.origin, Origin::File(f) if *f == path))
        .map(|e| {
            (
                rocewatch_probes::instance_port(&e.settings.options),
                e.clone(),
            )
        })
        .collect()
}

/// `[fleet]` and `[probes]`: the fleet's map (and this host's NIC info series), and the
/// peers probed through the probe plugin: the peer list, or with `[fleet]` this host's
/// pinglist, each rail from its own port.
fn start_probes(app: &App, stop: &watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let probes = app.cfg.probes.clone();
    let instances = probe_instances(app);
    let views = app.cfg.fleet.clone().map(|f| {
        let (tx, rx) = watch::channel(None);
        let specs = if instances.is_empty() {
            vec![probes.as_ref().and_then(|p| p.device.clone())]
        } else {
            instances.iter().map(|(port, _)| port.clone()).collect()
        };
        let this = rocewatch_probes::fleet::map::ThisHost {
            name: fleet_host(&app.cfg),
            sysfs_root: app.cfg.agent.sysfs_root.clone(),
            specs,
        };
        tasks.push(tokio::spawn(rocewatch_probes::fleet::map::run(
            f.clone(),
            this,
            Arc::clone(&app.discovery),
            Arc::clone(&app.pipeline),
            tx,
            stop.clone(),
        )));
        (f, rx)
    });
    let Some(p) = probes else {
        return tasks;
    };
    if instances.is_empty() {
        tracing::error!("probes: the probe-verbs plugin is not loaded; no probes will run");
        return tasks;
    }
    tracing::info!(interval = ?p.interval, fleet = views.is_some(), instances = instances.len(), "probing peers over RDMA verbs");
    let pipeline = Arc::clone(&app.pipeline);
    tasks.push(match views {
        Some((f, rx)) => tokio::spawn(rocewatch_probes::run_fleet(
            instances.into_iter().map(|(_, e)| e).collect(),
            pipeline,
            p,
            f,
            rx,
            stop.clone(),
        )),
        None => tokio::spawn(rocewatch_probes::run(instances, pipeline, p, stop.clone())),
    });
    tasks
}

/// What the Alertmanager receiver needs from the steps before it.
struct AlertmanagerParts<'a> {
    dispatcher: Option<&'a Arc<Dispatcher>>,
    listener: Option<TcpListener>,
}

/// A served receiver: its task, its address and its web configuration.
type Served = (
    JoinHandle<()>,
    Option<std::net::SocketAddr>,
    Option<Arc<WebListener>>,
);

/// `[alertmanager]`: the webhook receiver on its bound listener, routing to the actions.
fn serve_alertmanager(
    app: &App,
    parts: AlertmanagerParts<'_>,
    stop: &watch::Receiver<bool>,
) -> Result<Option<Served>, StartError> {
    let (am, d, listener) = match (&app.cfg.alertmanager, parts.dispatcher, parts.listener) {
        (Some(am), Some(d), Some(listener)) => (am, d, listener),
        (Some(_), _, _) => return Err(StartError::AlertmanagerWithoutActions),
        _ => return Ok(None),
    };
    let addr = listener.local_addr().ok();
    let rx = rocewatch_remediation::alertmanager::Receiver::new(
        am,
        Arc::clone(d),
        Arc::clone(app.metrics()),
    )
    .map_err(|(path, message)| StartError::Config { path, message })?;
    // What the receiver serves with, for a reload to compare (the receiver keeps its own).
    let web = am.web().ok().flatten();
    tracing::info!(addr = %addr.unwrap_or(am.listen), authenticated = rx.authenticated(), web = am.web_config_file.as_ref().map(|f| f.display().to_string()).unwrap_or_default(), "Alertmanager webhook receiver on POST /alertmanager");
    let task = tokio::spawn(rocewatch_remediation::alertmanager::serve(
        listener,
        rx,
        stop.clone(),
    ));
    Ok(Some((task, addr, web)))
}

/// `[exporters.collectd]`: the network client.
fn start_collectd(app: &App, stop: &watch::Receiver<bool>) -> Option<JoinHandle<()>> {
    let c = app.cfg.exporters.collectd.clone()?;
    tracing::info!(server = %c.server, security = ?c.security_level, "sending to collectd");
    Some(tokio::spawn(rocewatch_export::collectd::run(
        c,
        app.host_name.clone(),
        app.cfg.agent.interval,
        Arc::clone(app.store()),
        Arc::clone(app.metrics()),
        stop.clone(),
    )))
}

/// `collectd-exec`: PUTVAL lines on standard output; the agent stops when collectd closes
/// the pipe.
fn start_collectd_exec(
    app: &App,
    stop: &watch::Receiver<bool>,
    stop_tx: Arc<watch::Sender<bool>>,
) -> JoinHandle<()> {
    let exec = rocewatch_export::collectd::run_exec(
        app.host_name.clone(),
        app.cfg.agent.interval,
        Arc::clone(app.store()),
        Arc::clone(app.metrics()),
        stop.clone(),
    );
    tokio::spawn(async move {
        exec.await;
        // collectd closed the pipe: it is stopping us.
        let _ = stop_tx.send(true);
    })
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

/// Events as OTLP logs, where OTLP is configured and `events` is not turned off.
fn start_events(app: &App) -> Option<EventsExporter> {
    let o = app.cfg.exporters.otlp.as_ref().filter(|o| o.events)?;
    match EventsExporter::start(o, &app.host_name, Arc::clone(app.metrics()), &app.pipeline) {
        Ok(x) => {
            tracing::info!(endpoint = %o.logs_endpoint(), "events go over OTLP as logs");
            Some(x)
        }
        Err(e) => {
            tracing::error!("{e}; continuing without OTLP events");
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
