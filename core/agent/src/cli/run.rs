//! `rocewatch run`: the agent, until a signal or `--duration`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::args::RunArgs;
use super::probe::{probe_plugin_config, probe_plugin_path};
use crate::config::Config;
use crate::export::otlp::config::{OtlpConfig, OtlpProtocol};
use crate::export::otlp::OtlpExporter;
use crate::pipeline::{self, Agent};

pub async fn run(a: RunArgs) -> Result<i32> {
    let RunArgs {
        source,
        interval,
        otlp_endpoint,
        otlp_protocol,
        export_interval,
        prometheus_listen,
        stdout,
        duration,
    } = a;
    let mut cfg = source.load()?;
    if let Some(i) = interval {
        cfg.agent.interval = i;
    }
    if let Some(ep) = otlp_endpoint {
        let o = cfg
            .exporters
            .otlp
            .get_or_insert_with(|| OtlpConfig::new(ep.clone(), OtlpProtocol::default()));
        o.endpoint = ep;
    }
    if let (Some(p), Some(o)) = (otlp_protocol, cfg.exporters.otlp.as_mut()) {
        o.protocol = p;
    }
    if let (Some(i), Some(o)) = (export_interval, cfg.exporters.otlp.as_mut()) {
        o.interval = i;
    }
    if let Some(addr) = prometheus_listen {
        cfg.exporters
            .prometheus
            .get_or_insert_with(Default::default)
            .listen = addr;
    }
    if stdout {
        cfg.exporters.stdout.enabled = true;
    }
    run_agent(cfg, duration).await
}

/// A shutdown signal that also fires after `duration`.
pub(super) fn shutdown_after(duration: Option<Duration>) -> tokio::sync::watch::Receiver<bool> {
    let signals = pipeline::shutdown_on_signals();
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut signals = signals;
        tokio::select! {
            _ = signals.changed() => {}
            _ = async { match duration { Some(d) => tokio::time::sleep(d).await, None => std::future::pending().await } } => {
                tracing::info!("duration elapsed: shutting down");
            }
        }
        let _ = tx.send(true);
    });
    rx
}

pub(super) fn start_otlp(agent: &Arc<Agent>) -> Option<OtlpExporter> {
    let o = agent.cfg.exporters.otlp.as_ref()?;
    match OtlpExporter::start(
        o,
        &agent.host_name,
        Arc::clone(&agent.store),
        Arc::clone(&agent.metrics),
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

pub(super) async fn finish_otlp(otlp: Option<OtlpExporter>) {
    if let Some(x) = otlp {
        // The final export: the latest values of every series.
        match tokio::task::spawn_blocking(move || x.shutdown()).await {
            Ok(Ok(())) => tracing::info!("final OTLP export done"),
            Ok(Err(e)) => tracing::warn!("final OTLP export: {e}"),
            Err(e) => tracing::warn!("final OTLP export: {e}"),
        }
    }
}

async fn run_agent(mut cfg: Config, duration: Option<Duration>) -> Result<i32> {
    let shutdown = shutdown_after(duration);
    if let Some(p) = &cfg.probes {
        let path = match &p.plugin {
            Some(path) => path.clone(),
            None => probe_plugin_path()?,
        };
        cfg.plugins.external.push(probe_plugin_config(
            path,
            p.timeout,
            &p.device,
            p.tcp_port,
            p.serve,
            false,
            p.reconnect_backoff,
        ));
    }
    // Bind before anything else: a taken port is a configuration error, reported at once.
    let prom_listener = match &cfg.exporters.prometheus {
        Some(p) => Some(crate::export::prometheus::bind(p.listen).await?),
        None => None,
    };
    let agent = Agent::start(cfg).await;
    let prom_task = prom_listener.map(|l| {
        tracing::info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving Prometheus /metrics and /healthz");
        let state = crate::export::prometheus::Exposition {
            store: Arc::clone(&agent.store),
            metrics: Arc::clone(&agent.metrics),
            rules: Some(Arc::clone(&agent.rules)),
        };
        tokio::spawn(crate::export::prometheus::serve(l, state, shutdown.clone()))
    });
    for s in agent.registry.statuses() {
        tracing::info!(plugin = %s.name, kind = ?s.kind, origin = %s.origin, state = ?s.state, "plugin");
    }
    let remediation = start_remediation(&agent);
    let _qos = tokio::spawn(crate::qos::metrics::watch(
        Arc::clone(&agent),
        shutdown.clone(),
    ));
    let _prober = agent.cfg.probes.clone().map(|p| {
        tracing::info!(interval = ?p.interval, "probing peers over RDMA verbs");
        tokio::spawn(crate::probes::run(Arc::clone(&agent), p, shutdown.clone()))
    });
    let _alertmanager = match (&agent.cfg.alertmanager, &remediation) {
        (Some(am), Some(d)) => {
            let listener = crate::export::prometheus::bind(am.listen).await?;
            let rx = crate::alertmanager::Receiver::new(am, Arc::clone(d), Arc::clone(&agent.metrics))
                .map_err(|(path, msg)| anyhow::anyhow!("{path}: {msg}"))?;
            tracing::info!(addr = %am.listen, authenticated = !am.allow_unauthenticated || am.bearer_token.is_some() || am.bearer_token_file.is_some(), "Alertmanager webhook receiver on POST /alertmanager");
            Some(tokio::spawn(crate::alertmanager::serve(listener, rx, shutdown.clone())))
        }
        (Some(_), None) => anyhow::bail!("[alertmanager] needs at least one action under [remediation.actions] to route alerts to"),
        _ => None,
    };
    let otlp = start_otlp(&agent);
    let collectd_task = agent.cfg.exporters.collectd.clone().map(|c| {
        tracing::info!(server = %c.server, security = ?c.security_level, "sending to collectd");
        tokio::spawn(crate::export::collectd::run(
            c,
            agent.host_name.clone(),
            agent.cfg.agent.interval,
            Arc::clone(&agent.metrics),
            agent.events.subscribe(),
        ))
    });
    let stdout_task = agent
        .cfg
        .exporters
        .stdout
        .enabled
        .then(|| tokio::spawn(crate::export::stdout::run(agent.events.subscribe())));
    agent.run(shutdown).await;
    finish_otlp(otlp).await;
    if let Some(t) = stdout_task {
        t.abort();
    }
    for t in [prom_task, collectd_task].into_iter().flatten() {
        t.abort();
    }
    Ok(0)
}

/// The remediation dispatcher, when any action is configured: it takes every rule
/// transition from the agent and decides (and audits) its actions.
pub(super) fn start_remediation(agent: &Arc<Agent>) -> Option<Arc<crate::remediation::Dispatcher>> {
    if agent.cfg.remediation.actions.is_empty() {
        return None;
    }
    let plugins = agent
        .registry
        .of_kind(rocewatch_plugin_api::PluginKind::Remediation)
        .cloned()
        .collect();
    let d = crate::remediation::Dispatcher::new(
        agent.cfg.remediation.clone(),
        Arc::clone(&agent.metrics),
        plugins,
    );
    d.set_qos(Arc::new(crate::qos::apply::Applier::new(agent)));
    tracing::info!(
        audit_log = %d.audit_path().display(),
        kill_switch = %agent.cfg.remediation.kill_switch.display(),
        actions = agent.cfg.remediation.actions.len(),
        "remediation enabled (actions are dry runs unless dry_run = false)"
    );
    let mut rx = agent.transitions.subscribe();
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
    Some(dispatcher)
}
