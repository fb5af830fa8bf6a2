//! `rocewatch run`: the agent, until a signal or `--duration`.

use anyhow::Result;

use super::args::RunArgs;
use crate::app::{Agent, Extras};
use crate::export::otlp::config::{OtlpConfig, OtlpProtocol};
use crate::util::signals::shutdown_after;

pub async fn run(a: RunArgs) -> Result<i32> {
    let RunArgs {
        source,
        interval,
        otlp_endpoint,
        otlp_protocol,
        export_interval,
        prometheus_listen,
        stdout,
        duration,
    } = a;
    let mut cfg = source.load()?;
    if let Some(i) = interval {
        cfg.agent.interval = i;
    }
    if let Some(ep) = otlp_endpoint {
        let o = cfg
            .exporters
            .otlp
            .get_or_insert_with(|| OtlpConfig::new(ep.clone(), OtlpProtocol::default()));
        o.endpoint = ep;
    }
    if let (Some(p), Some(o)) = (otlp_protocol, cfg.exporters.otlp.as_mut()) {
        o.protocol = p;
    }
    if let (Some(i), Some(o)) = (export_interval, cfg.exporters.otlp.as_mut()) {
        o.interval = i;
    }
    if let Some(addr) = prometheus_listen {
        cfg.exporters
            .prometheus
            .get_or_insert_with(Default::default)
            .listen = addr;
    }
    if stdout {
        cfg.exporters.stdout.enabled = true;
    }
    let agent = Agent::start(cfg, shutdown_after(duration), Extras::default()).await?;
    agent.run().await;
    Ok(0)
}
