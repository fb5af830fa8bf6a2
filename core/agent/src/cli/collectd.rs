//! `rocewatch collectd-exec` (collectd's Exec plugin) and `rocewatch collectd-types`.

use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::source::SourceArgs;
use crate::app::{Agent, Extras};
use crate::config::Config;
use rocewatch_runtime::util::signals::shutdown_on_signals;

/// `rocewatch collectd-exec`'s arguments.
#[derive(Debug, Args)]
pub struct CollectdExecArgs {
    #[command(flatten)]
    pub source: SourceArgs,
}

pub async fn run(a: CollectdExecArgs) -> Result<i32> {
    collectd_exec(a.source.load()?).await
}

/// `rocewatch collectd-exec`: the agent, printing PUTVAL lines of every series on stdout
/// every interval (what the other exporters see), until collectd closes the pipe.
async fn collectd_exec(mut cfg: Config) -> Result<i32> {
    if let Ok(text) = std::env::var("COLLECTD_INTERVAL") {
        cfg.agent.interval = collectd_interval(&text)
            .map_err(|e| anyhow::anyhow!("COLLECTD_INTERVAL={text:?}: {e}"))?;
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

/// collectd's interval (seconds, `10.000`), within the bounds of `agent.interval`.
fn collectd_interval(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|e| format!("not a number of seconds ({e})"))?;
    let d = Duration::try_from_secs_f64(secs).map_err(|e| format!("{secs} s: {e}"))?;
    rocewatch_runtime::util::duration::INTERVAL
        .check(d)
        .map(|()| d)
}

pub fn types() -> Result<i32> {
    print!("{}", rocewatch_metrics::naming::collectd_types_db());
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn collectds_interval_is_bounded_as_agent_interval_is() {
        assert_eq!(
            super::collectd_interval("10.000"),
            Ok(std::time::Duration::from_secs(10))
        );
        for (bad, why) in [
            ("0", "at least 100ms"),
            ("1e6", "at most 1h"),
            ("1e30", "1000000000000000000000000000000 s"),
            ("-1", "negative"),
            ("NaN", ""),
            ("ten", "not a number"),
        ] {
            let e = super::collectd_interval(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
