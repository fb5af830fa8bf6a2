//! `rocewatch demo`: a simulated fabric, the agent on it, and a live view.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use crate::demo;
use crate::demo::{Format as DemoFormat, Scenario};
use rocewatch_export::otlp::config::{OtlpConfig, OtlpProtocol};
use rocewatch_runtime::util::duration::{INTERVAL, RUN_FOR};

/// `rocewatch demo`'s arguments.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Tick and collection interval (100ms to 1h).
    #[arg(long, value_parser = INTERVAL.flag(), default_value = "1s", value_name = "DUR")]
    pub interval: Duration,
    /// Stop after this long (default: until Ctrl-C).
    #[arg(long, value_parser = RUN_FOR.flag(), value_name = "DUR")]
    pub duration: Option<Duration>,
    /// Print plain frames one after another instead of redrawing the screen. (While the
    /// screen is redrawn, log lines wait and are written to standard error after it ends,
    /// the screen saying how many.)
    #[arg(long)]
    pub no_tui: bool,
    /// Print JSON lines, one per collection (as the stdout exporter prints them), instead
    /// of the rate table.
    #[arg(long)]
    pub json: bool,
    /// table or json (the first spelling of --json, kept).
    #[arg(
        long,
        value_enum,
        default_value = "table",
        hide = true,
        conflicts_with = "json"
    )]
    pub format: DemoFormat,
    /// Export over OTLP to this URL as well.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    #[arg(long, value_enum, default_value = "http/protobuf")]
    pub otlp_protocol: OtlpProtocol,
    /// Write the simulated tree here (kept afterwards) instead of a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub sysfs_out: Option<PathBuf>,
    /// What happens on the simulated fabric.
    #[arg(long, value_enum, default_value = "default")]
    pub scenario: Scenario,
    /// The remediation audit log (pfc-storm scenario; default: in the simulated tree).
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
}

pub async fn run(a: DemoArgs) -> Result<i32> {
    let DemoArgs {
        interval,
        duration,
        no_tui,
        json,
        format,
        otlp_endpoint,
        otlp_protocol,
        sysfs_out,
        scenario,
        audit_log,
    } = a;
    let format = if json { DemoFormat::Json } else { format };
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
