//! `rocewatch collectd-exec` (collectd's Exec plugin) and `rocewatch collectd-types`.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;

use super::args::CollectdExecArgs;
use crate::config::Config;
use crate::pipeline::{self, Agent};

pub async fn run(a: CollectdExecArgs) -> Result<i32> {
    collectd_exec(a.source.load()?).await
}

/// `rocewatch collectd-exec`: collect every interval and print PUTVAL lines on stdout.
async fn collectd_exec(mut cfg: Config) -> Result<i32> {
    if let Some(i) = std::env::var("COLLECTD_INTERVAL")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|i| *i > 0.0)
    {
        cfg.agent.interval = Duration::from_secs_f64(i);
    }
    if let Ok(h) = std::env::var("COLLECTD_HOSTNAME") {
        if !h.is_empty() {
            cfg.agent.host_name = Some(h);
        }
    }
    let interval = cfg.agent.interval;
    let mut shutdown = pipeline::shutdown_on_signals();
    let agent = Agent::start(cfg).await;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return Ok(0),
        }
        let (result, _) = agent.collect_all().await;
        let now = std::time::SystemTime::now();
        let lists = crate::export::collectd::value_lists(
            &result.samples,
            &agent.metrics,
            &agent.host_name,
            now,
            interval,
        );
        let mut out = std::io::stdout().lock();
        for v in &lists {
            if writeln!(out, "{}", crate::export::collectd::putval(v)).is_err() {
                return Ok(0); // collectd closed the pipe: it is stopping us
            }
        }
        if out.flush().is_err() {
            return Ok(0);
        }
    }
}

pub fn types() -> Result<i32> {
    print!("{}", rocewatch_metrics::naming::collectd_types_db());
    Ok(0)
}
