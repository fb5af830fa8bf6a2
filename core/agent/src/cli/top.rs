//! `rocewatch top`: which workloads hold the RDMA resources, live or once.
//!
//! It reads the resources collector alone (every collector that declares
//! `rdma.resource.qps`), through the agent's guarded plugin calls, and keeps only its
//! metrics; `top_view` turns two successive readings into rows, text and JSON. The live
//! view draws on the terminal's alternate screen and reads `q` with the terminal out of
//! line mode (no echo; Ctrl-C stays a signal), both restored when it ends; when standard
//! output is not a terminal, frames are printed one after another. `--once` prints one
//! frame: two readings `--interval` apart when there are per-QP counters (rates need
//! two), else one.

use std::io::{IsTerminal, Write};

use super::terminal::{live_view, terminal_rows};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use clap::Args;
use rocewatch_metrics::{RESOURCE_CATALOG, RESOURCE_QPS, WORKLOAD_COUNTER};
use rocewatch_plugin_api::{PluginKind, Sample};

use super::output::print_json;
use super::source::SourceArgs;
use super::top_view::{self, Frame, SortKey};
use crate::app::App;
use rocewatch_runtime::host::call;
use rocewatch_runtime::host::registry::{Entry, Instance, State};

/// `rocewatch top`'s arguments.
#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub proc: super::source::ProcArgs,
    /// Print one frame and exit. With per-QP counters it collects twice, --interval
    /// apart, to show rates; without them, once.
    #[arg(long)]
    pub once: bool,
    /// With --once: print the frame as JSON: {"host","time","sort","totals","folded",
    /// "rates_over_s","per_qp_counters","workloads":[{"workload","kind","attributes",
    /// "qps","cqs","mrs","mr_bytes","pds","ports","rates"}],"not_shown","errors"}.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// The column rows are sorted by (descending; `workload` ascending).
    #[arg(long, value_enum, default_value = "qps")]
    pub sort: SortKey,
    /// Show at most N workloads (default: all; the live view: what fits the terminal).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Time between collections: the live view's refresh, and the window of the rates
    /// (100ms to 1h).
    #[arg(long, value_parser = rocewatch_runtime::util::duration::INTERVAL.flag(), default_value = "2s", value_name = "DUR")]
    pub interval: Duration,
}

/// The built-in collector of RDMA resources.
const RESOURCES_PLUGIN: &str = "resources";

/// Lines of a text frame besides the rows (header, blank, column header, "more not
/// shown", blank, rates), for the live view's default limit.
const FRAME_LINES: usize = 7;

pub async fn run(a: TopArgs) -> Result<i32> {
    let mut cfg = a.source.load()?;
    a.proc.apply(&mut cfg);
    let app = App::start(cfg, Some(&[PluginKind::Collector])).await;
    let code = match resource_collectors(&app).await {
        Err(why) => {
            eprintln!("rocewatch top: {why}");
            2
        }
        Ok(from) if a.once => once(&app, &from, &a).await?,
        Ok(from) => live(&app, &from, &a).await?,
    };
    app.stop().await;
    Ok(code)
}

/// The loaded collectors that emit the resources metrics; `Err` says why there are none.
async fn resource_collectors(app: &App) -> Result<Vec<Entry>, String> {
    let mut found = Vec::new();
    for e in app.registry.of_kind(PluginKind::Collector) {
        let declared = call::call(e, e.timeout, app.metrics(), |i| match i {
            Instance::Collector(c) => Ok(c.descriptors()),
            _ => Ok(Vec::new()),
        })
        .await;
        if declared.is_ok_and(|d| d.iter().any(|d| d.name == RESOURCE_QPS)) {
            found.push(e.clone());
        }
    }
    if !found.is_empty() {
        return Ok(found);
    }
    let disabled = app
        .registry
        .entries
        .iter()
        .any(|e| e.name == RESOURCES_PLUGIN && e.status().state == State::Disabled);
    Err(if disabled {
        format!("the resources collector is disabled ([plugins.builtin.{RESOURCES_PLUGIN}] enabled = false): top reads RDMA resources through it")
    } else {
        format!("no resources collector is loaded: this build has no built-in `{RESOURCES_PLUGIN}` plugin and no external plugin declares {RESOURCE_QPS} (`rocewatch plugins` lists what is loaded)")
    })
}

/// One reading of the resources collectors.
struct Reading {
    samples: Vec<Sample>,
    /// Partial errors and the failures of some of the collectors: (target, message).
    errors: Vec<(String, String)>,
    at: Instant,
}

/// Read every resources collector once; `Err` with the cause when none of them could.
async fn collect(app: &App, from: &[Entry]) -> Result<Reading, String> {
    let mut reading = Reading {
        samples: Vec::new(),
        errors: Vec::new(),
        at: Instant::now(),
    };
    let mut failed = Vec::new();
    let mut any = false;
    for e in from {
        match app.collect_unstored_from(e).await {
            Ok(r) => {
                any = true;
                reading.samples.extend(
                    r.samples
                        .into_iter()
                        .filter(|s| RESOURCE_CATALOG.iter().any(|c| c.name == s.name)),
                );
                reading
                    .errors
                    .extend(r.errors.into_iter().map(|p| (p.target, p.message)));
            }
            Err(err) if err.is_unsupported() => {
                failed.push(format!("the resources collector cannot run here: {err}"))
            }
            Err(err) => failed.push(format!("the resources collector failed: {err}")),
        }
    }
    reading.at = Instant::now();
    if !any {
        return Err(failed.join("; "));
    }
    reading.errors.extend(
        failed
            .into_iter()
            .map(|f| (RESOURCES_PLUGIN.to_string(), f)),
    );
    Ok(reading)
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// The view of `cur`, with the rates since `prev`.
fn view(cur: &Reading, prev: Option<&Reading>) -> top_view::View {
    top_view::build(
        &cur.samples,
        prev.map(|p| {
            (
                p.samples.as_slice(),
                cur.at.duration_since(p.at).as_secs_f64(),
            )
        }),
    )
}

async fn once(app: &App, from: &[Entry], a: &TopArgs) -> Result<i32> {
    let mut first = match collect(app, from).await {
        Ok(r) => r,
        Err(why) => {
            eprintln!("rocewatch top: {why}");
            return Ok(2);
        }
    };
    let (cur, prev) = if first.samples.iter().any(|s| s.name == WORKLOAD_COUNTER) {
        tokio::time::sleep(a.interval).await;
        match collect(app, from).await {
            Ok(second) => (second, Some(first)),
            Err(why) => {
                first.errors.push((RESOURCES_PLUGIN.into(), why));
                (first, None)
            }
        }
    } else {
        (first, None)
    };
    let v = view(&cur, prev.as_ref());
    let time = now_rfc3339();
    let frame = Frame {
        host: &app.host_name,
        time: &time,
        sort: a.sort,
        limit: a.limit,
        every: None,
        errors: &cur.errors,
    };
    if a.json {
        print_json(&top_view::render_json(&v, &frame))?;
    } else {
        print!("{}", top_view::render_text(&v, &frame));
    }
    Ok(0)
}

async fn live(app: &App, from: &[Entry], a: &TopArgs) -> Result<i32> {
    let mut cur = match collect(app, from).await {
        Ok(r) => r,
        Err(why) => {
            eprintln!("rocewatch top: {why}");
            return Ok(2);
        }
    };
    let mut prev: Option<Reading> = None;
    let tty = std::io::stdout().is_terminal();
    let mut signals = rocewatch_runtime::util::signals::shutdown_on_signals();
    let (terminal, mut quit) = live_view(tty);
    let every = humantime::format_duration(a.interval).to_string();
    loop {
        let v = view(&cur, prev.as_ref());
        let time = now_rfc3339();
        let limit = a.limit.or_else(|| {
            tty.then(|| {
                terminal_rows()
                    .saturating_sub(FRAME_LINES + cur.errors.len())
                    .max(1)
            })
        });
        let frame = Frame {
            host: &app.host_name,
            time: &time,
            sort: a.sort,
            limit,
            every: Some(&every),
            errors: &cur.errors,
        };
        let text = top_view::render_text(&v, &frame);
        {
            let mut out = std::io::stdout().lock();
            if tty {
                write!(out, "\x1b[H\x1b[2J{text}")?;
            } else {
                writeln!(out, "{text}")?;
            }
            out.flush()?;
        }
        tokio::select! {
            _ = tokio::time::sleep(a.interval) => {}
            Ok(_) = signals.wait_for(|stop| *stop) => break,
            () = quit.typed() => break,
        }
        match collect(app, from).await {
            Ok(next) => prev = Some(std::mem::replace(&mut cur, next)),
            Err(why) => {
                // The rows stay those of the last reading that worked, without rates.
                cur.errors = vec![(
                    RESOURCES_PLUGIN.into(),
                    format!("{why} (the rows are from the last collection that worked)"),
                )];
                prev = None;
            }
        }
    }
    drop(terminal);
    Ok(0)
}
