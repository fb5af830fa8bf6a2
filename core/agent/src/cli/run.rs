//! `rocewatch run`: the agent, until a signal or `--duration`; SIGHUP reloads the
//! configuration (the [`Supervisor`] runs it; this parses and loads).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::source::SourceArgs;
use crate::config::Config;
use crate::supervisor::Supervisor;
use rocewatch_export::otlp::config::OtlpProtocol;
use rocewatch_runtime::util::duration::{INTERVAL, RUN_FOR};

/// `rocewatch run`'s arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub proc: super::source::ProcArgs,
    /// Default collection interval (overrides agent.interval; 100ms to 1h).
    #[arg(long, value_parser = INTERVAL.flag(), value_name = "DUR")]
    pub interval: Option<Duration>,
    /// Export over OTLP to this URL (overrides exporters.otlp.endpoint).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport (with --otlp-endpoint).
    #[arg(long, value_enum)]
    pub otlp_protocol: Option<OtlpProtocol>,
    /// OTLP export interval (overrides exporters.otlp.interval; 100ms to 1h).
    #[arg(long, value_parser = INTERVAL.flag(), value_name = "DUR")]
    pub export_interval: Option<Duration>,
    /// Serve Prometheus /metrics and /healthz on this address, e.g. 127.0.0.1:9464
    /// (overrides exporters.prometheus.listen).
    #[arg(long, value_name = "ADDR")]
    pub prometheus_listen: Option<std::net::SocketAddr>,
    /// Also print every collection as JSON lines on standard output.
    #[arg(long)]
    pub stdout: bool,
    /// Stop after this long (default: run until a signal).
    #[arg(long, value_parser = RUN_FOR.flag(), value_name = "DUR")]
    pub duration: Option<Duration>,
    /// Once every listener is bound, write their addresses to this file as JSON
    /// (`{"prometheus":"127.0.0.1:9464","alertmanager":null}`), again after each reload:
    /// with port 0 in the configuration, this says which port the kernel chose. Removed
    /// when the agent exits (and after a reload that could not write it).
    #[arg(long, value_name = "FILE")]
    pub ready_file: Option<PathBuf>,
}

/// The configuration file with the command line's overrides applied: what `run` starts
/// with, and what a SIGHUP loads again.
fn load(a: &RunArgs) -> Result<Config> {
    let mut cfg = a.source.load()?;
    a.proc.apply(&mut cfg);
    if let Some(i) = a.interval {
        cfg.agent.interval = i;
    }
    cfg.apply_otlp_flags(
        a.otlp_endpoint.as_deref(),
        a.otlp_protocol,
        a.export_interval,
    )?;
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

pub async fn run(a: RunArgs) -> Result<i32> {
    let config = load(&a)?;
    let agent_logs = super::agent_logs::start(
        config.exporters.otlp.as_ref(),
        &crate::app::host_name(&config),
    )
    .await?;
    let (ready_file, duration) = (a.ready_file.clone(), a.duration);
    let supervisor = Supervisor {
        config,
        reload: Box::new(move || load(&a).map_err(|e| format!("{e:#}"))),
        ready_file,
        duration,
    };
    let r = supervisor.run().await;
    if let Some(l) = agent_logs {
        l.shutdown().await;
    }
    Ok(r?)
}
