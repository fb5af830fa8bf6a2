//! `rocewatch run`: the agent, until a signal or `--duration`; SIGHUP reloads the
//! configuration (the [`Supervisor`] runs it; this parses and loads).

use anyhow::Result;

use super::args::RunArgs;
use crate::config::Config;
use crate::supervisor::Supervisor;

/// The configuration file with the command line's overrides applied: what `run` starts
/// with, and what a SIGHUP loads again.
fn load(a: &RunArgs) -> Result<Config> {
    let mut cfg = a.source.load()?;
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
