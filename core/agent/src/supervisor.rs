//! The agent's lifecycle under `rocewatch run`: start, reload on SIGHUP, shutdown, what
//! outlives a reload (remediation's memory, the reload counts), the host changes that
//! must be put back (per-QP counter modes) and the ready file.
//!
//! Every way `run` ends (a signal, `--duration`, the agent ending, an error, a signal
//! while no configuration starts) goes through one end: the running remediation actions
//! waited for, each up to its timeout, then killed and audited ([`Memory::finish`]); the
//! counter modes put back; the ready file removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rocewatch_metrics::labels::ReloadResult;
use rocewatch_remediation::Memory;
use rocewatch_runtime::events::{self, Event};
use rocewatch_runtime::util::signals::shutdown_after;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::app::{Agent, Extras, StartError, ALERTMANAGER_WEB, PROMETHEUS_WEB};
use crate::config::Config;

/// Loads the configuration file again (with the command line's overrides) for a SIGHUP;
/// an error is said as it is.
pub type Reload = Box<dyn Fn() -> Result<Config, String> + Send>;

/// Why `run` ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("--ready-file {path}: {message}")]
    ReadyFile { path: String, message: String },
    #[error("cannot listen for SIGHUP: {0}")]
    Signal(std::io::Error),
}

/// What `run` supervises: the configuration to start with and how to load it again, the
/// ready file, and how long to run.
pub struct Supervisor {
    pub config: Config,
    pub reload: Reload,
    pub ready_file: Option<PathBuf>,
    pub duration: Option<Duration>,
}

/// What the supervisor carries from one agent to the next.
#[derive(Default)]
struct Carried {
    /// `rocewatch_config_reloads_total` by result.
    reloads: BTreeMap<ReloadResult, u64>,
    /// Cooldowns, limits and running actions: a reload never lets an action run early.
    memory: Memory,
    /// Whether an agent ran: until then a failure ends `run`; after it, nothing a reload
    /// meets does (a refused reload is logged and the agent runs on).
    started: bool,
    /// The previous configuration is being tried again (said once, and when it runs).
    retrying: bool,
}

/// Why an agent stopped.
enum Next {
    /// The end: a signal or `--duration`, or the agent ended on its own.
    End,
    /// A SIGHUP loaded this configuration.
    Reload(Box<Config>),
}

impl Supervisor {
    /// Run agents until a signal or `--duration`; the exit code.
    pub async fn run(self) -> Result<i32, RunError> {
        let _put_back = PutBackCounterModes;
        let _ready = RemoveReadyFile;
        let mut carried = Carried::default();
        let r = self.supervise(&mut carried).await;
        // The one end: the actions a reload handed over, or the last agent's, waited for.
        carried.memory.set_handing_over(false);
        carried.memory.finish().await;
        r
    }

    async fn supervise(self, c: &mut Carried) -> Result<i32, RunError> {
        let Supervisor {
            mut config,
            reload,
            ready_file,
            duration,
        } = self;
        let mut shutdown = shutdown_after(duration);
        let mut hup = signal(SignalKind::hangup()).map_err(RunError::Signal)?;
        let mut previous: Option<Config> = None;
        loop {
            let (stop_tx, stop_rx) = watch::channel(false);
            // A reload counts as `ok` once the new agent runs, `error` when it did not.
            let agent = match (start(&config, stop_rx, &c.memory).await, previous.take()) {
                (Ok(agent), previous) => {
                    if std::mem::take(&mut c.retrying) && previous.is_none() {
                        tracing::info!("SIGHUP: the previous configuration runs again");
                    }
                    if previous.is_some() {
                        *c.reloads.entry(ReloadResult::Ok).or_default() += 1;
                        events::publish(Event::config_reload(
                            true,
                            "configuration reloaded (SIGHUP); the agent runs with it".into(),
                        ));
                    }
                    agent
                }
                (Err(e), None) if !c.started => return Err(e.into()),
                (Err(e), None) => {
                    // The configuration that ran does not start again either (its port
                    // taken meanwhile): tried again every 5 s until it does, until a
                    // SIGHUP brings a file to try, or until asked to stop.
                    if !std::mem::replace(&mut c.retrying, true) {
                        tracing::error!("SIGHUP: the previous configuration did not start again: {e}; trying again every 5 s (or at the next SIGHUP)");
                        // Nothing is served: the file's addresses no longer hold.
                        remove_ready_file();
                    }
                    tokio::select! {
                        _ = shutdown.changed() => return Ok(0),
                        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                        _ = hup.recv() => {
                            if let Some(new) = load_again(&reload, &mut c.reloads) {
                                previous = Some(std::mem::replace(&mut config, new));
                            }
                        }
                    }
                    continue;
                }
                (Err(e), Some(old)) => {
                    // The reloaded configuration was valid but could not start (a port
                    // taken by someone else): back to the one that ran.
                    tracing::error!("SIGHUP: the new configuration did not start: {e}; running on with the previous one");
                    *c.reloads.entry(ReloadResult::Error).or_default() += 1;
                    events::publish(Event::config_reload(
                        false,
                        format!("the reloaded configuration did not start: {e}; running on with the previous one"),
                    ));
                    config = old;
                    continue;
                }
            };
            apply_counter_modes(&config).await;
            agent.app.metrics().set_config_reloads(c.reloads.clone());
            if let Some(path) = &ready_file {
                match write_ready_file(path, &agent.addresses) {
                    Ok(()) => {}
                    Err(e) if !c.started => return Err(e),
                    Err(e) => {
                        // The agent runs on; the old file's addresses may no longer hold.
                        tracing::error!("SIGHUP: {e}; the agent runs on with the new configuration, and the ready file it can no longer keep is removed");
                        remove_ready_file();
                    }
                }
            }
            c.started = true;
            let next = run_until_next(agent, stop_tx, &mut shutdown, &mut hup, &reload, c).await;
            match next {
                Next::End => return Ok(0),
                Next::Reload(new) => previous = Some(std::mem::replace(&mut config, *new)),
            }
        }
    }
}

/// Run `agent` until a signal, `--duration`, its own end or a SIGHUP that loads; then stop
/// it (a reload hands its running actions over to the next agent).
async fn run_until_next(
    agent: Agent,
    stop_tx: watch::Sender<bool>,
    shutdown: &mut watch::Receiver<bool>,
    hup: &mut tokio::signal::unix::Signal,
    reload: &Reload,
    c: &mut Carried,
) -> Next {
    let metrics = Arc::clone(agent.app.metrics());
    let webs = agent.webs.clone();
    let mut running = tokio::spawn(agent.run());
    let next = loop {
        tokio::select! {
            _ = shutdown.changed() => break Next::End,
            r = &mut running => {
                let _ = r;
                return Next::End;
            }
            _ = hup.recv() => match reload() {
                Ok(new) => {
                    tracing::info!("SIGHUP: configuration reloaded; restarting the agent with it");
                    say_weakened(&webs, &new);
                    break Next::Reload(Box::new(new));
                }
                Err(e) => {
                    metrics.config_reload(ReloadResult::Error);
                    tracing::error!("SIGHUP: {e}; running on with the previous configuration");
                    events::publish(Event::config_reload(
                        false,
                        format!("the reloaded configuration was refused: {e}; running on with the previous one"),
                    ));
                }
            },
        }
    };
    c.reloads = metrics.config_reloads();
    // A reload hands the running remediation actions over to the next agent; the end
    // waits for them (each up to its timeout, then killed and audited).
    c.memory.set_handing_over(matches!(next, Next::Reload(_)));
    let _ = stop_tx.send(true);
    let _ = running.await;
    next
}

/// A SIGHUP while no agent runs: the file loaded again, or the error said and counted.
fn load_again(reload: &Reload, reloads: &mut BTreeMap<ReloadResult, u64>) -> Option<Config> {
    match reload() {
        Ok(new) => {
            tracing::info!("SIGHUP: configuration reloaded; trying it");
            Some(new)
        }
        Err(e) => {
            *reloads.entry(ReloadResult::Error).or_default() += 1;
            tracing::error!("SIGHUP: {e}; trying the previous configuration again");
            None
        }
    }
}

/// A SIGHUP takes a web configuration as it is, also one the listener refused because it
/// weakens something: said at warn level, per listener, with what it weakens.
fn say_weakened(webs: &[(&'static str, Arc<rocewatch_web::server::WebListener>)], new: &Config) {
    for (key, web) in webs {
        let file = match *key {
            PROMETHEUS_WEB => new
                .exporters
                .prometheus
                .as_ref()
                .map(|p| &p.web_config_file),
            ALERTMANAGER_WEB => new.alertmanager.as_ref().map(|a| &a.web_config_file),
            _ => None,
        };
        // A listener the new configuration drops serves nothing to weaken.
        let Some(file) = file else { continue };
        // A file that does not load fails the start, which says so.
        if let Ok(weaker) = web.weakened_by(file.as_deref()) {
            if !weaker.is_empty() {
                tracing::warn!(
                    "SIGHUP: {key} {}: the reloaded web configuration weakens {}; applied (SIGHUP is the operator's act)",
                    file.as_deref().map_or("(none)".into(), |f| f.display().to_string()),
                    weaker.join("; ")
                );
            }
        }
    }
}

/// Start an agent; a listener whose port the agent it replaces has not let go of yet is
/// tried again for a few seconds.
async fn start(
    cfg: &Config,
    stop: watch::Receiver<bool>,
    memory: &Memory,
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

/// Per-QP counters: the devices' counter mode set as the configuration asks (kept across a
/// reload, put back when it no longer asks), audited.
async fn apply_counter_modes(cfg: &Config) {
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
static READY_FILE: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

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
fn write_ready_file(path: &Path, addresses: &impl serde::Serialize) -> Result<(), RunError> {
    let body = serde_json::to_vec(addresses).expect("plain data");
    rocewatch_runtime::util::fs::write_atomic(path, &body, 0o644).map_err(|e| {
        RunError::ReadyFile {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    })?;
    *READY_FILE.lock().unwrap_or_else(|p| p.into_inner()) = Some(path.to_path_buf());
    rocewatch_runtime::util::signals::before_fast_exit(remove_ready_file);
    Ok(())
}
