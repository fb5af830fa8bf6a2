//! `rocewatch collectd-exec` (collectd's Exec plugin) and `rocewatch collectd-types`.

use std::time::Duration;

use anyhow::Result;

use super::args::CollectdExecArgs;
use crate::app::{Agent, Extras};
use crate::config::Config;
use crate::util::signals::shutdown_on_signals;

pub async fn run(a: CollectdExecArgs) -> Result<i32> {
    collectd_exec(a.source.load()?).await
}

/// `rocewatch collectd-exec`: the agent, printing PUTVAL lines of every series on stdout
/// every interval (what the other exporters see), until collectd closes the pipe.
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
    // Standard output carries the PUTVAL lines: nothing else may print there.
    cfg.exporters.stdout.enabled = false;
    let extras = Extras {
        collectd_exec: true,
        ..Extras::default()
    };
    let agent = Agent::start(cfg, shutdown_on_signals(), extras).await?;
    agent.run().await;
    Ok(0)
}

pub fn types() -> Result<i32> {
    print!("{}", rocewatch_metrics::naming::collectd_types_db());
    Ok(0)
}
