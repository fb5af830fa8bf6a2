//! `rocewatch collect --once`: every counter once, in one of four formats.

use std::io::Write;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use serde::ser::{SerializeMap, Serializer};

use super::show;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_plugin_api::{PartialError, PluginKind, Sample};

/// `rocewatch collect`'s arguments.
#[derive(Debug, Args)]
pub struct CollectArgs {
    /// Collect once and exit (required; use `rocewatch run` to keep collecting).
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub proc: super::source::ProcArgs,
    /// What to print: json (the default; as --json), text, prometheus or collectd.
    #[arg(long, value_enum, default_value = "json")]
    pub format: CollectFormat,
    /// Print JSON (the default): {"errors":[...],"samples":[...]}; the same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CollectFormat {
    /// `{"samples":[{"name","unit","value","attributes","source"}]}`
    Json,
    /// One line per sample.
    Text,
    /// The Prometheus text exposition, as `/metrics` serves it.
    Prometheus,
    /// collectd Exec-plugin `PUTVAL` lines.
    Collectd,
}

/// A sample as `serde_json::Value` printed it before (keys sorted), written straight to
/// the output: at 2000 ports the `Value` tree of 104 000 samples took 300 MB.
struct SortedSample<'a>(&'a Sample);

impl serde::Serialize for SortedSample<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let s = self.0;
        let mut m = ser.serialize_map(Some(6))?;
        m.serialize_entry("attributes", &*s.attributes)?;
        m.serialize_entry("kind", &s.kind)?;
        m.serialize_entry("name", &s.name)?;
        m.serialize_entry("source", &s.source)?;
        m.serialize_entry("unit", &s.unit)?;
        m.serialize_entry("value", &s.value)?;
        m.end()
    }
}

struct SortedError<'a>(&'a PartialError);

impl serde::Serialize for SortedError<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(Some(2))?;
        m.serialize_entry("message", &self.0.message)?;
        m.serialize_entry("target", &self.0.target)?;
        m.end()
    }
}

/// `{"errors": [...], "samples": [...]}`, pretty, keys sorted.
struct Output<'a>(&'a [Sample], &'a [PartialError]);

impl serde::Serialize for Output<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(Some(2))?;
        let errors: Vec<SortedError> = self.1.iter().map(SortedError).collect();
        m.serialize_entry("errors", &errors)?;
        let samples: Vec<SortedSample> = self.0.iter().map(SortedSample).collect();
        m.serialize_entry("samples", &samples)?;
        m.end()
    }
}

pub async fn run(a: CollectArgs) -> Result<i32> {
    let CollectArgs {
        once,
        source,
        proc,
        format,
        json,
    } = a;
    let format = if json { CollectFormat::Json } else { format };
    if !once {
        bail!("collect needs --once (use `rocewatch run` to collect continuously)");
    }
    let mut cfg = source.load()?;
    proc.apply(&mut cfg);
    let root = cfg.agent.sysfs_root.clone();
    let cfg_interval = cfg.agent.interval;
    let agent = App::start(cfg, Some(&[PluginKind::Collector])).await;
    let (result, failures) = agent.collect_unstored().await;
    for f in &failures {
        eprintln!("rocewatch: {f}");
    }
    for e in &result.errors {
        eprintln!("rocewatch: partial: {}: {}", e.target, e.message);
    }
    if result.samples.is_empty() && failures.is_empty() {
        eprintln!(
            "rocewatch: no samples (no RDMA devices under {}?)",
            root.display()
        );
    }
    // Buffered: standard output is line-buffered, a write per line at 100 000 samples.
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    match format {
        CollectFormat::Json => {
            serde_json::to_writer_pretty(&mut out, &Output(&result.samples, &result.errors))?;
            writeln!(out)?;
        }
        CollectFormat::Text => write!(out, "{}", show::samples_text(&result.samples))?,
        CollectFormat::Collectd => {
            let interval = cfg_interval;
            for s in &result.samples {
                let v = rocewatch_export::collectd::value_list(
                    s,
                    &agent.host_name,
                    std::time::SystemTime::now(),
                    interval,
                );
                writeln!(out, "{}", rocewatch_export::collectd::putval(&v))?;
            }
        }
        CollectFormat::Prometheus => out.write_all(
            rocewatch_export::prometheus::render_samples(
                &result.samples,
                &agent.store().descriptors(),
                rocewatch_export::prometheus::Format::Text,
            )
            .as_bytes(),
        )?,
    }
    out.flush()?;
    Ok(if failures.is_empty() { 0 } else { 1 })
}
