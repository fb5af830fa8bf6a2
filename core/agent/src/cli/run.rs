//! `rocewatch run`: the agent, until a signal or `--duration`; SIGHUP reloads the
//! configuration.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use super::args::RunArgs;
use crate::app::{Agent, Extras, StartError};
use crate::config::Config;
use rocewatch_export::otlp::config::{OtlpConfig, OtlpProtocol};
use rocewatch_runtime::util::signals::shutdown_after;

/// The configuration file with the command line's overrides applied: what `run` starts
/// with, and what a SIGHUP loads again.
fn load(a: &RunArgs) -> Result<Config> {
    let mut cfg = a.source.load()?;
    if let Some(i) = a.interval {
        cfg.agent.interval = i;
    }
    if let Some(ep) = &a.otlp_endpoint {
        let o = cfg
            .exporters
            .otlp
            .get_or_insert_with(|| OtlpConfig::new(ep.clone(), OtlpProtocol::default()));
        o.endpoint = ep.clone();
    }
    if let (Some(p), Some(o)) = (a.otlp_protocol, cfg.exporters.otlp.as_mut()) {
        o.protocol = p;
    }
    if let (Some(i), Some(o)) = (a.export_interval, cfg.exporters.otlp.as_mut()) {
        o.interval = i;
    }
    if let Some(addr) = a.prometheus_listen {
        cfg.exporters
            .prometheus
            .get_or_insert_with(Default::default)
            .listen = addr;
    }
    if a.stdout {
        cfg.exporters.stdout.enabled = true;
    }
    Ok(cfg)
}

/// Start an agent; a listener whose port the agent it replaces has not let go of yet is
/// tried again for a few seconds.
async fn start(
    cfg: &Config,
    stop: watch::Receiver<bool>,
    memory: &rocewatch_remediation::Memory,
) -> Result<Agent, StartError> {
    let mut tries = 0;
    loop {
        let extras = Extras {
            remediation: memory.clone(),
            ..Extras::default()
        };
        match Agent::start(cfg.clone(), stop.clone(), extras).await {
            Err(StartError::Listen(_)) if tries < 30 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            r => return r,
        }
    }
}

/// Puts back the QP counter modes `run` set, however it ends (an error returned, the
/// agent's task panicking): a drop guard.
struct PutBackCounterModes;

impl Drop for PutBackCounterModes {
    fn drop(&mut self) {
        rocewatch_qos::counter_mode::restore_pending();
    }
}

/// The `--ready-file` being kept: removed when `run` ends, however it ends (an agent that
/// is gone is not ready), also on the fast exit of a second signal.
static READY_FILE: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

fn remove_ready_file() {
    let ready = READY_FILE.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(path) = ready {
        // unlink removes a link itself, never what it points at.
        let _ = std::fs::remove_file(path);
    }
}

/// Removes the ready file when `run` ends: a drop guard.
struct RemoveReadyFile;

impl Drop for RemoveReadyFile {
    fn drop(&mut self) {
        remove_ready_file();
    }
}

/// Writes the ready file whole (a reader never sees half of one; see
/// [`rocewatch_runtime::util::fs::write_atomic`]), to be removed at exit.
fn write_ready_file(path: &std::path::Path, addresses: &impl serde::Serialize) -> Result<()> {
    let body = serde_json::to_vec(addresses).expect("plain data");
    rocewatch_runtime::util::fs::write_atomic(path, &body, 0o644)
        .map_err(|e| anyhow::anyhow!("--ready-file {}: {e}", path.display()))?;
    *READY_FILE.lock().unwrap_or_else(|p| p.into_inner()) = Some(path.to_path_buf());
    rocewatch_runtime::util::signals::before_fast_exit(remove_ready_file);
    Ok(())
}

pub async fn run(a: RunArgs) -> Result<i32> {
    let mut cfg = load(&a)?;
    let _put_back = PutBackCounterModes;
    let _ready = RemoveReadyFile;
    let mut shutdown = shutdown_after(a.duration);
    let mut hup = signal(SignalKind::hangup())?;
    let mut reloads: BTreeMap<String, u64> = BTreeMap::new();
    let mut previous: Option<Config> = None;
    // Cooldowns and limits outlive a reload: a reload never lets an action run early.
    let memory = rocewatch_remediation::Memory::default();
    // Until the first agent runs, a failure ends `run`; after it, nothing a reload meets
    // does (a refused reload is logged and the agent runs on).
    let mut started = false;
    // The previous configuration is being tried again (said once, and when it runs).
    let mut retrying = false;
    loop {
        let (stop_tx, stop_rx) = watch::channel(false);
        // A reload counts as `ok` once the new agent runs, `error` when it did not.
        let agent = match (start(&cfg, stop_rx, &memory).await, previous.take()) {
            (Ok(agent), None) => {
                if std::mem::take(&mut retrying) {
                    tracing::info!("SIGHUP: the previous configuration runs again");
                }
                agent
            }
            (Ok(agent), Some(_)) => {
                *reloads.entry("ok".into()).or_default() += 1;
                agent
            }
            (Err(e), None) if !started => return Err(e.into()),
            (Err(e), None) => {
                // The configuration that ran does not start again either (its port taken
                // meanwhile): tried again every 5 s until it does, or until asked to stop.
                if !std::mem::replace(&mut retrying, true) {
                    tracing::error!("SIGHUP: the previous configuration did not start again: {e}; trying again every 5 s");
                }
                tokio::select! {
                    _ = shutdown.changed() => return Ok(0),
                    _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
                }
            }
            (Err(e), Some(old)) => {
                // The reloaded configuration was valid but could not start (a port taken
                // by someone else): back to the one that ran.
                tracing::error!("SIGHUP: the new configuration did not start: {e}; running on with the previous one");
                *reloads.entry("error".into()).or_default() += 1;
                cfg = old;
                continue;
            }
        };
        // Per-QP counters: the devices' counter mode set as the configuration asks (kept
        // across a reload, put back when it no longer asks), audited.
        {
            let options = cfg
                .plugins
                .builtin
                .get(crate::builtins::RESOURCES)
                .filter(|p| p.enabled)
                .map(|p| p.options.clone());
            let (root, devices) = (cfg.agent.sysfs_root.clone(), cfg.devices.clone());
            let audit = cfg.remediation.audit();
            let _ = tokio::task::spawn_blocking(move || {
                rocewatch_qos::counter_mode::apply(options.as_ref(), &root, &devices, audit)
            })
            .await;
        }
        agent.app.metrics().set_config_reloads(reloads.clone());
        if let Some(path) = &a.ready_file {
            match write_ready_file(path, &agent.addresses) {
                Ok(()) => {}
                Err(e) if !started => return Err(e),
                Err(e) => {
                    // The agent runs on; the old file's addresses may no longer hold.
                    tracing::error!("SIGHUP: {e:#}; the agent runs on with the new configuration, and the ready file it can no longer keep is removed");
                    remove_ready_file();
                }
            }
        }
        started = true;
        let metrics = Arc::clone(agent.app.metrics());
        let mut running = tokio::spawn(agent.run());
        let next = loop {
            tokio::select! {
                _ = shutdown.changed() => break None,
                r = &mut running => {
                    let _ = r;
                    return Ok(0);
                }
                _ = hup.recv() => match load(&a) {
                    Ok(new) => {
                        tracing::info!("SIGHUP: configuration reloaded; restarting the agent with it");
                        break Some(new);
                    }
                    Err(e) => {
                        metrics.config_reload("error");
                        tracing::error!("SIGHUP: {e:#}; running on with the previous configuration");
                    }
                },
            }
        };
        reloads = metrics.config_reloads();
        // A reload hands the running remediation actions over to the next agent; the end
        // waits for them (each up to its timeout, then killed and audited).
        memory.set_handing_over(next.is_some());
        let _ = stop_tx.send(true);
        let _ = running.await;
        match next {
            None => return Ok(0),
            Some(new) => previous = Some(std::mem::replace(&mut cfg, new)),
        }
    }
}
