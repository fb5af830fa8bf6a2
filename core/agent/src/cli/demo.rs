//! `rocewatch demo`: a simulated fabric, the agent on it, and a live view.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::args::{DemoArgs, DemoFormat, Scenario};
use crate::app::{Agent, Extras};
use crate::config::Config;
use crate::demo;
use crate::export::otlp::config::OtlpConfig;
use crate::util::signals::shutdown_after;

pub async fn run(a: DemoArgs) -> Result<i32> {
    let DemoArgs {
        interval,
        duration,
        no_tui,
        format,
        otlp_endpoint,
        otlp_protocol,
        sysfs_out,
        scenario,
        audit_log,
    } = a;
    run_demo(DemoRun {
        interval,
        duration,
        no_tui,
        format,
        otlp: otlp_endpoint.map(|e| OtlpConfig::new(e, otlp_protocol)),
        sysfs_out,
        scenario,
        audit_log,
    })
    .await
}

/// The demo's command line.
struct DemoRun {
    interval: Duration,
    duration: Option<Duration>,
    no_tui: bool,
    format: DemoFormat,
    otlp: Option<OtlpConfig>,
    sysfs_out: Option<PathBuf>,
    scenario: Scenario,
    audit_log: Option<PathBuf>,
}

async fn run_demo(args: DemoRun) -> Result<i32> {
    let DemoRun {
        interval,
        duration,
        no_tui,
        format,
        otlp,
        sysfs_out,
        scenario,
        audit_log,
    } = args;
    let tmp;
    let root = match sysfs_out {
        Some(d) => {
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("rocewatch-demo-")
                .tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let mut fabric = demo::Fabric::create(&root)
        .with_context(|| format!("writing the simulated sysfs tree under {}", root.display()))?;
    let mut cfg = Config::default();
    cfg.agent.sysfs_root = root.clone();
    cfg.agent.interval = interval;
    cfg.agent.jitter = Duration::ZERO;
    // The simulated netdevs have no NIC behind them: the ethtool plugin reads the driver
    // statistics the simulator writes.
    cfg.plugins.builtin.insert(
        rocewatch_counters_ethtool::EthtoolCounters::NAME.to_string(),
        crate::host::settings::PluginSettings {
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
        cfg.rules = demo::default_rules()?;
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
            )?,
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

    let tui = !no_tui && format == DemoFormat::Table && std::io::stdout().is_terminal();
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
            if format == DemoFormat::Json {
                println!("{}", crate::export::stdout::collection_json(&c));
                continue;
            }
            // One frame per tick: after the port counters' collection.
            if c.plugin != rocewatch_counters_sysfs::SysfsCounters::NAME {
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
                footer.push_str(&demo::rules_footer(
                    &view_agent.pipeline.rule_status(),
                    &audit_path,
                ));
            }
            let text = demo::render(&demo::port_rates(view_agent.store()), &header, &footer);
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
    Ok(0)
}

/// One `[remediation.actions.X]` table from TOML text (the demo's built-in action).
fn toml_action(text: &str) -> Result<crate::remediation::ActionConfig> {
    config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()?
        .try_deserialize()
        .context("the demo's remediation action")
}
