//! `rocewatch bandwidth PEER`: a bandwidth test through the verbs plugin, printed as
//! `ib_write_bw` prints it, with the line rate, the share, the verdict and what moved on
//! both ports.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Args, ValueEnum};

use super::output::print_json;
use super::progress::Progress;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_plugin_api::{BandwidthOp, BandwidthRequest, PluginKind};
use rocewatch_probes::bandwidth::{
    gbps, measure, thousands, MeasureError, Measured, PortMoves, Verdict,
};
use rocewatch_runtime::util::duration::{BANDWIDTH, PROBE_TIMEOUT};

/// `rocewatch bandwidth`'s arguments.
#[derive(Debug, Args)]
pub struct BandwidthCmdArgs {
    /// The peer (IP address or name) running a responder.
    pub peer: String,
    /// How long messages are posted (ib_write_bw -D): 1s to 60s (a responder serves at
    /// most 60 s).
    #[arg(long, value_parser = BANDWIDTH.flag(), default_value = "10s", value_name = "DUR")]
    pub duration: Duration,
    /// Bytes per message (ib_write_bw -s), 1 to 64 MiB.
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u32).range(1..=64 << 20))]
    pub size: u32,
    /// RC queue pairs (ib_write_bw -q).
    #[arg(long, default_value_t = 4)]
    pub qps: u16,
    #[arg(long, value_enum, default_value = "write")]
    pub op: BandwidthOpArg,
    /// The peer runs the same test towards this host at the same time (ib_write_bw -b).
    #[arg(long)]
    pub bidirectional: bool,
    /// The share of the line rate below which the test fails (0 to 1; 0: no verdict).
    #[arg(long, default_value_t = 0.9, value_name = "FRACTION", value_parser = parse_share)]
    pub min_share: f64,
    /// RDMA device (default: the first).
    #[arg(long)]
    pub device: Option<String>,
    /// TCP port of the side channel.
    #[arg(long, default_value_t = rocewatch_plugin_api::DEFAULT_PROBE_TCP_PORT)]
    pub tcp_port: u16,
    /// Connecting and the side channel's answers (at most 1m).
    #[arg(long, value_parser = PROBE_TIMEOUT.flag(), default_value = "3s", value_name = "DUR")]
    pub timeout: Duration,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub source: SourceArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BandwidthOpArg {
    Write,
    Read,
    Send,
}

/// The operation as the result names it.
fn op_name(op: BandwidthOp) -> &'static str {
    match op {
        BandwidthOp::Write => "RDMA WRITE",
        BandwidthOp::Read => "RDMA READ",
        BandwidthOp::Send => "SEND",
    }
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a share between 0 and 1 (0.9: 90 % of the line rate)"
        )),
    }
}

/// Exit status of a test that could not run (refused, unreachable, no plugin).
const NOT_RUN: i32 = 2;

pub async fn run(a: BandwidthCmdArgs) -> Result<i32> {
    let mut cfg = a.source.load()?;
    let path = match rocewatch_probes::plugin_path() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rocewatch bandwidth: {e}");
            return Ok(NOT_RUN);
        }
    };
    // The collectors stay (their counters frame the test); the probe plugin is this one,
    // without a responder of its own.
    cfg.plugins.external = vec![rocewatch_probes::plugin_config(
        path,
        a.duration + Duration::from_secs(60),
        &a.device,
        a.tcp_port,
        false,
        false,
        Duration::ZERO,
    )];
    cfg.probes = None;
    // On a terminal, what it waits on: the test is seconds of silence otherwise.
    let progress = Progress::start("bandwidth");
    progress.waiting("starting the verbs plugin", None);
    let app = App::start(cfg, Some(&[PluginKind::Collector, PluginKind::Probe])).await;
    let op = match a.op {
        BandwidthOpArg::Write => BandwidthOp::Write,
        BandwidthOpArg::Read => BandwidthOp::Read,
        BandwidthOpArg::Send => BandwidthOp::Send,
    };
    let req = BandwidthRequest {
        peer: a.peer.clone(),
        op,
        size: a.size,
        qps: a.qps,
        duration_ms: a.duration.as_millis() as u64,
        bidirectional: a.bidirectional,
        timeout_ms: a.timeout.as_millis() as u64,
    };
    // The longest it can take: connecting and the side channel within --timeout, then
    // the messages posted for --duration.
    progress.waiting(
        format!(
            "{} test to {} for {}, connecting within {}",
            op_name(op),
            a.peer,
            humantime::format_duration(a.duration),
            humantime::format_duration(a.timeout)
        ),
        Some(Instant::now() + a.timeout + a.duration),
    );
    let measured = measure(&app.core, req, a.min_share).await;
    progress.finish();
    let m = match measured {
        Ok(m) => m,
        Err(e) => {
            let msg = match e {
                MeasureError::NoPlugin(_) => e.to_string(),
                MeasureError::Test(t) => t,
            };
            if a.json {
                print_json(&serde_json::json!({ "peer": a.peer, "error": msg }))?;
            }
            eprintln!("rocewatch bandwidth: {msg}");
            return Ok(NOT_RUN);
        }
    };
    for e in &m.collection_errors {
        eprintln!("rocewatch bandwidth: counters: {e}");
    }
    if a.json {
        print_json(&serde_json::to_value(&m)?)?;
    } else {
        print!("{}", text(&m));
    }
    Ok(match m.verdict {
        Verdict::Shortfall => 1,
        Verdict::Pass | Verdict::Unknown => 0,
    })
}

fn moves_lines(out: &mut String, who: &str, m: &PortMoves) {
    let opt = |v: Option<u64>| v.map_or("-".to_string(), thousands);
    let _ = writeln!(
        out,
        "  {who}: sent {} bytes / {} packets, received {} bytes / {} packets",
        opt(m.tx_bytes),
        opt(m.tx_packets),
        opt(m.rx_bytes),
        opt(m.rx_packets)
    );
    let prio = |p: &std::collections::BTreeMap<u8, u64>| {
        if p.is_empty() {
            "-".to_string()
        } else {
            p.iter()
                .map(|(k, v)| format!("prio{k} {}", thousands(*v)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let _ = writeln!(
        out,
        "    pauses received {} sent {}; CNPs handled {} sent {}; ECN marked {}",
        prio(&m.pause_rx),
        prio(&m.pause_tx),
        opt(m.cnp_handled),
        opt(m.cnp_sent),
        opt(m.ecn_marked)
    );
    let _ = writeln!(
        out,
        "    retransmissions {}; out of sequence {}; out_of_buffer {}; discards {}",
        opt(m.retransmissions),
        opt(m.out_of_sequence),
        opt(m.out_of_buffer),
        opt(m.discards)
    );
}

/// The result as text.
fn text(m: &Measured) -> String {
    let r = &m.result;
    let mut out = String::new();
    let op = op_name(r.op);
    let _ = writeln!(
        out,
        "{op} bandwidth to {} from {} port {}: {} queue pairs, {} messages in flight each",
        r.peer, r.device, r.port, r.qps, r.depth
    );
    let _ = writeln!(
        out,
        " {:<10} {:<13} {:<17} {:<20} MsgRate[Mpps]",
        "#bytes", "#iterations", "BW peak[Gb/sec]", "BW average[Gb/sec]"
    );
    let mut row = |side: &rocewatch_plugin_api::BandwidthSide, label: &str| {
        let avg = side.average_bps;
        // As perftest: the average rate in messages.
        let rate = avg / (f64::from(r.size.max(1)) * 8.0) / 1e6;
        let _ = writeln!(
            out,
            " {:<10} {:<13} {:<17.2} {:<20.2} {:.6}{label}",
            r.size,
            side.messages,
            side.peak_bps / 1e9,
            avg / 1e9,
            rate
        );
    };
    row(&r.local, "");
    if let Some(remote) = &r.remote {
        row(remote, "   (the peer towards this host)");
    }
    let lr = &m.line_rate;
    let _ = writeln!(
        out,
        "line rate: {} (port rate {}; netdev {} speed {})",
        lr.bps
            .map_or("unknown".into(), |b| format!("{} Gb/s", gbps(b))),
        lr.port_rate.as_deref().unwrap_or("unknown"),
        lr.netdev.as_deref().unwrap_or("-"),
        lr.netdev_speed_mbps
            .map_or("unknown".into(), |s| format!("{s} Mb/s"))
    );
    match (m.verdict, m.share) {
        (Verdict::Pass, Some(s)) => {
            let _ = writeln!(
                out,
                "PASS: {:.0} % of the line rate (--min-share {:.0} %)",
                s * 100.0,
                m.min_share * 100.0
            );
        }
        (Verdict::Shortfall, _) => {
            let _ = writeln!(
                out,
                "SHORTFALL (--min-share {:.0} %): {}",
                m.min_share * 100.0,
                m.explanation.as_deref().unwrap_or("")
            );
        }
        _ => {
            let _ = writeln!(out, "no verdict: the port's line rate is unknown");
        }
    }
    let _ = writeln!(out, "what moved during the test:");
    moves_lines(&mut out, "this port", &m.local_moves);
    match &m.remote_moves {
        Some(rm) => moves_lines(&mut out, "the peer's port", rm),
        None => {
            let _ = writeln!(out, "  the peer's port: its responder sent no counters");
        }
    }
    if let Some(e) = &r.remote_error {
        let _ = writeln!(out, "the responder reported: {e}");
    }
    out
}
