//! The demo's run: the simulated tree, the agent on it (the real pipeline, the default
//! rules with a dry-run remediation of the PFC storm, OTLP when asked) and the live view.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;

use super::default_rules;
use super::fabric::Fabric;
use super::view::{port_rates, render, rules_footer};
use crate::app::{Agent, Extras, StartError};
use crate::config::Config;
use rocewatch_export::otlp::config::OtlpConfig;
use rocewatch_remediation::ActionConfig;
use rocewatch_runtime::util::signals::shutdown_after;

/// What happens on the simulated fabric.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Scenario {
    /// Steady traffic, then an error burst on one port.
    Default,
    /// A PFC pause storm on priority 3 of one port: the default `pfc-pause-storm` rule
    /// fires after 30 s, a dry-run remediation is decided and audited, the storm ends and
    /// the rule clears.
    PfcStorm,
}

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
    let tmp;
    let root = match sysfs_out {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| DemoError::io(&d, e))?;
            d
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("rocewatch-demo-")
                .tempdir()
                .map_err(|e| DemoError::io(&std::env::temp_dir(), e))?;
            tmp.path().to_path_buf()
        }
    };
    let mut fabric = Fabric::create(&root).map_err(|e| DemoError::io(&root, e))?;
    let mut cfg = Config::default();
    cfg.agent.sysfs_root = root.clone();
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
    let audit_path = audit_log.unwrap_or_else(|| root.join("audit.jsonl"));
    match scenario {
        // The error burst at 8 s, then the PFC storm at 20 s.
        Scenario::Default => fabric.storm = Some((20, 40)),
        // The storm alone, at 5 s.
        Scenario::PfcStorm => {
            fabric.storm = Some((5, 40));
            fabric.burst_at = u64::MAX;
        }
    }
    // The default rules, with a dry-run response to the PFC storm.
    {
        cfg.rules = default_rules().map_err(DemoError::Rules)?;
        for r in &mut cfg.rules {
            if r.name == "pfc-pause-storm" {
                r.actions = vec!["pfc-storm-response".into()];
            }
        }
        cfg.remediation.audit_log = audit_path.clone();
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
    }
    cfg.exporters.otlp = otlp.map(|mut o| {
        o.interval = interval.max(Duration::from_secs(1));
        o
    });
    let shutdown = shutdown_after(duration);
    let agent = Agent::start(cfg, shutdown.clone(), Extras::default()).await?;
    let otlp_note = match (&agent.app.cfg.exporters.otlp, agent.otlp_running()) {
        (Some(o), true) => format!("OTLP {:?} to {}", o.protocol, o.endpoint),
        (Some(o), false) => format!("OTLP to {} FAILED to start (see log)", o.endpoint),
        _ => "stdout only (add --otlp-endpoint URL to export)".to_string(),
    };

    // The simulator advances the fabric half an interval before each collection.
    let mut sim_shutdown = shutdown.clone();
    let (tick_tx, tick_rx) = tokio::sync::watch::channel((0u64, false, false));
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
            let _ = tick_tx.send((fabric.tick_count(), fabric.in_burst(), fabric.in_storm()));
        }
    });

    let tui = !no_tui && format == Format::Table && std::io::stdout().is_terminal();
    let mut events = agent.app.pipeline.collections();
    let view_agent = Arc::clone(&agent.app);
    let root_shown = root.display().to_string();
    let view = tokio::spawn(async move {
        let mut frame = 0u64;
        loop {
            let c = match events.recv().await {
                Ok(c) => c,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => break,
            };
            if format == Format::Json {
                println!("{}", rocewatch_export::stdout::collection_json(&c));
                continue;
            }
            // One frame per tick: after the port counters' collection.
            if c.plugin != crate::builtins::COUNTERS_SYSFS {
                continue;
            }
            frame += 1;
            let (tick, burst, in_storm) = *tick_rx.borrow();
            let header = format!(
                "rocewatch demo: simulated fabric at {root_shown}, frame {frame}, tick {tick}, every {}{}",
                humantime::format_duration(interval),
                if tui { "  (Ctrl-C to stop)" } else { "" }
            );
            let mut footer = format!(
                "event: {}\nexport: {otlp_note}",
                if burst {
                    "ERROR BURST on mlx5_1 port 1 (symbol errors, out_of_buffer drops, CNP surge)"
                } else if in_storm {
                    "PFC PAUSE STORM on mlx5_0 port 1 priority 3 (paused 60% of the time)"
                } else {
                    "steady traffic"
                }
            );
            {
                footer.push_str(&rules_footer(
                    &view_agent.pipeline.rule_status(),
                    &audit_path,
                ));
            }
            let text = render(&port_rates(view_agent.store()), &header, &footer);
            let mut out = std::io::stdout().lock();
            if tui {
                let _ = write!(out, "\x1b[H\x1b[2J{text}");
            } else {
                let _ = writeln!(out, "{text}");
            }
            let _ = out.flush();
        }
    });
    agent.run().await;
    let _ = sim.await;
    view.abort();
    Ok(())
}

/// One `[remediation.actions.X]` table from TOML text (the demo's built-in action).
fn toml_action(text: &str) -> Result<ActionConfig, config::ConfigError> {
    config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()?
        .try_deserialize()
}
