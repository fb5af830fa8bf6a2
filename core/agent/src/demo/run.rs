//! The demo's run: the simulated tree, the agent on it (the real pipeline, the default
//! rules with a dry-run remediation of the PFC storm, OTLP when asked) and the live view.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use tempfile::TempDir;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::default_rules;
use super::fabric::{Fabric, Scenario};
use super::view::{port_rates, render, rules_footer};
use crate::app::{Agent, App, Extras, StartError};
use crate::config::Config;
use rocewatch_export::otlp::config::OtlpConfig;
use rocewatch_remediation::ActionConfig;
use rocewatch_runtime::pipeline::Collection;
use rocewatch_runtime::util::signals::shutdown_after;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// The per-port rate table.
    Table,
    /// JSON lines, one per collection (as the stdout exporter prints them).
    Json,
}

/// What the demo is asked to do (`rocewatch demo`'s options).
#[derive(Debug)]
pub struct Options {
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub no_tui: bool,
    pub format: Format,
    pub otlp: Option<OtlpConfig>,
    pub sysfs_out: Option<PathBuf>,
    pub scenario: Scenario,
    pub audit_log: Option<PathBuf>,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("writing the simulated sysfs tree under {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the default rules (configs/rules.toml): {0}")]
    Rules(config::ConfigError),
    #[error("the demo's remediation action: {0}")]
    Action(config::ConfigError),
    #[error(transparent)]
    Start(#[from] StartError),
}

impl DemoError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        DemoError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Run the demo until a signal or `duration`.
pub async fn run(options: Options) -> Result<(), DemoError> {
    let Options {
        interval,
        duration,
        no_tui,
        format,
        otlp,
        sysfs_out,
        scenario,
        audit_log,
    } = options;
    // Held to the end: the tree is removed when it drops.
    let (root, _tmp) = demo_root(sysfs_out)?;
    let mut fabric = Fabric::create(&root).map_err(|e| DemoError::io(&root, e))?;
    let audit_path = audit_log.unwrap_or_else(|| root.join("audit.jsonl"));
    set_scenario(&mut fabric, scenario);
    let cfg = demo_config(&root, interval, &audit_path, otlp)?;
    let shutdown = shutdown_after(duration);
    let agent = Agent::start(cfg, shutdown.clone(), Extras::default()).await?;
    let otlp_note = otlp_note(&agent);
    let (sim, tick_rx) = spawn_simulator(fabric, interval, shutdown.clone());
    let view = View {
        format,
        tui: !no_tui && format == Format::Table && std::io::stdout().is_terminal(),
        interval,
        root_shown: root.display().to_string(),
        otlp_note,
        audit_path,
        app: Arc::clone(&agent.app),
        tick_rx,
    };
    // While the screen is redrawn in place, log lines wait and follow it (screen_logs).
    let held = view.tui.then(super::screen_logs::hold_while_live);
    let view = tokio::spawn(view.run(agent.app.pipeline.collections()));
    agent.run().await;
    let _ = sim.await;
    view.abort();
    let _ = view.await;
    drop(held);
    Ok(())
}

/// Where the simulated tree is written: `--sysfs-out`, or a temporary directory (returned
/// too, to be held while the demo runs).
fn demo_root(sysfs_out: Option<PathBuf>) -> Result<(PathBuf, Option<TempDir>), DemoError> {
    match sysfs_out {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| DemoError::io(&d, e))?;
            Ok((d, None))
        }
        None => {
            let tmp = tempfile::Builder::new()
                .prefix("rocewatch-demo-")
                .tempdir()
                .map_err(|e| DemoError::io(&std::env::temp_dir(), e))?;
            Ok((tmp.path().to_path_buf(), Some(tmp)))
        }
    }
}

fn set_scenario(fabric: &mut Fabric, scenario: Scenario) {
    match scenario {
        // The error burst at 8 s, then the PFC storm at 20 s.
        Scenario::Default => fabric.storm = Some((20, 40)),
        // The storm alone, at 5 s.
        Scenario::PfcStorm => {
            fabric.storm = Some((5, 40));
            fabric.burst_at = u64::MAX;
        }
        // A congestion pattern on priority 3 of the first port, from 2 s on.
        s => {
            fabric.congestion = Some((s, 2, u64::MAX));
            fabric.burst_at = u64::MAX;
        }
    }
}

/// The agent's configuration on the simulated tree: the default rules with a dry-run
/// response to the PFC storm, OTLP when asked.
fn demo_config(
    root: &Path,
    interval: Duration,
    audit_path: &Path,
    otlp: Option<OtlpConfig>,
) -> Result<Config, DemoError> {
    let mut cfg = Config::default();
    cfg.agent.sysfs_root = root.to_path_buf();
    cfg.agent.interval = interval;
    cfg.agent.jitter = Duration::ZERO;
    // The simulated netdevs have no NIC behind them: the ethtool plugin reads the driver
    // statistics the simulator writes.
    cfg.plugins.builtin.insert(
        crate::builtins::COUNTERS_ETHTOOL.to_string(),
        rocewatch_runtime::host::settings::PluginSettings {
            options: serde_json::json!({ "stats_dir": root.join("ethtool") }),
            ..Default::default()
        },
    );
    // The default rules, with a dry-run response to the PFC storm.
    cfg.rules = default_rules().map_err(DemoError::Rules)?;
    for r in &mut cfg.rules {
        if r.name == "pfc-pause-storm" {
            r.actions = vec!["pfc-storm-response".into()];
        }
    }
    cfg.remediation.audit_log = audit_path.to_path_buf();
    cfg.remediation.kill_switch = root.join("remediation.disabled");
    cfg.remediation.actions.insert(
        "pfc-storm-response".into(),
        toml_action(
            r#"type = "exec"
command = ["/usr/local/sbin/roce-pfc-storm-response"]
cooldown = "10m""#,
        )
        .map_err(DemoError::Action)?,
    );
    cfg.exporters.otlp = otlp.map(|mut o| {
        o.interval = interval.max(Duration::from_secs(1));
        o
    });
    Ok(cfg)
}

/// Where the collections are exported, as the view's footer says it.
fn otlp_note(agent: &Agent) -> String {
    match (&agent.app.cfg.exporters.otlp, agent.otlp_running()) {
        (Some(o), true) => format!("OTLP {:?} to {}", o.protocol, o.endpoint),
        (Some(o), false) => format!("OTLP to {} FAILED to start (see log)", o.endpoint),
        _ => "stdout only (add --otlp-endpoint URL to export)".to_string(),
    }
}

/// What the simulator says after each advance: (tick, in the error burst, in the storm,
/// the congestion pattern on).
type Tick = (u64, bool, bool, Option<Scenario>);

/// The simulator: it advances the fabric half an interval before each collection, until
/// `shutdown`.
fn spawn_simulator(
    mut fabric: Fabric,
    interval: Duration,
    mut sim_shutdown: watch::Receiver<bool>,
) -> (JoinHandle<()>, watch::Receiver<Tick>) {
    let (tick_tx, tick_rx) = watch::channel((0u64, false, false, None));
    let sim = tokio::spawn(async move {
        // Traffic follows real elapsed time, so rates stay true even when a busy machine
        // delays a tick; the first advance covers one whole interval.
        let mut last = std::time::Instant::now() - interval / 2;
        tokio::time::sleep(interval / 2).await;
        let mut ticker = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = sim_shutdown.changed() => break,
            }
            if let Err(e) = fabric.advance(
                std::mem::replace(&mut last, std::time::Instant::now())
                    .elapsed()
                    .as_secs_f64(),
            ) {
                tracing::error!("simulator: {e}");
            }
            let _ = tick_tx.send((
                fabric.tick_count(),
                fabric.in_burst(),
                fabric.in_storm(),
                fabric.congestion_now(),
            ));
        }
    });
    (sim, tick_rx)
}

/// The live view: JSON lines, or one rate table per tick.
struct View {
    format: Format,
    /// Redraw the terminal in place (else print one frame after another).
    tui: bool,
    interval: Duration,
    root_shown: String,
    otlp_note: String,
    audit_path: PathBuf,
    app: Arc<App>,
    tick_rx: watch::Receiver<Tick>,
}

impl View {
    async fn run(self, mut events: broadcast::Receiver<Arc<Collection>>) {
        let mut frame = 0u64;
        loop {
            let c = match events.recv().await {
                Ok(c) => c,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => break,
            };
            if self.format == Format::Json {
                println!("{}", rocewatch_export::stdout::collection_json(&c));
                continue;
            }
            // One frame per tick: after the port counters' collection.
            if c.plugin != crate::builtins::COUNTERS_SYSFS {
                continue;
            }
            frame += 1;
            let text = self.frame(frame);
            let mut out = std::io::stdout().lock();
            if self.tui {
                let _ = write!(out, "\x1b[H\x1b[2J{text}");
            } else {
                let _ = writeln!(out, "{text}");
            }
            let _ = out.flush();
        }
    }

    /// Frame `frame`: the header, the rate table, the event and the rules.
    fn frame(&self, frame: u64) -> String {
        let (tick, burst, in_storm, pattern) = *self.tick_rx.borrow();
        let header = format!(
            "rocewatch demo: simulated fabric at {}, frame {frame}, tick {tick}, every {}{}",
            self.root_shown,
            humantime::format_duration(self.interval),
            if self.tui { "  (Ctrl-C to stop)" } else { "" }
        );
        let mut footer = format!(
            "event: {}\nexport: {}",
            if let Some(p) = pattern {
                p.event()
            } else if burst {
                "ERROR BURST on mlx5_1 port 1 (symbol errors, out_of_buffer drops, CNP surge)"
            } else if in_storm {
                "PFC PAUSE STORM on mlx5_0 port 1 priority 3 (paused 60% of the time)"
            } else {
                "steady traffic"
            },
            self.otlp_note
        );
        footer.push_str(&rules_footer(
            &self.app.pipeline.rule_status(),
            &self.audit_path,
        ));
        let held = super::screen_logs::held();
        if self.tui && held > 0 {
            footer.push_str(&format!(
                "\nlog: {held} line{} held, shown when the demo ends",
                if held == 1 { "" } else { "s" }
            ));
        }
        render(&port_rates(self.app.store()), &header, &footer)
    }
}

/// One `[remediation.actions.X]` table from TOML text (the demo's built-in action).
fn toml_action(text: &str) -> Result<ActionConfig, config::ConfigError> {
    config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()?
        .try_deserialize()
}
