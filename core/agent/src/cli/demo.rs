//! `rocewatch demo`: a simulated fabric, the agent on it, and a live view.

use anyhow::Result;

use super::args::DemoArgs;
use crate::demo;
use rocewatch_export::otlp::config::OtlpConfig;

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
    demo::run(demo::Options {
        interval,
        duration,
        no_tui,
        format,
        otlp: otlp_endpoint.map(|e| OtlpConfig::new(e, otlp_protocol)),
        sysfs_out,
        scenario,
        audit_log,
    })
    .await?;
    Ok(0)
}
