//! `rocewatch congestion`: the congestion state of every port and priority over a window
//! (`rocewatch_congestion`), as a table like `mlnx_qos` prints per priority; `--advise`:
//! what to tune for the troubled ones; `--watch`: again every window, one screen redrawn
//! on a terminal (like `top`), frames one after another elsewhere.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use anyhow::Result;
use clap::Args;
use rocewatch_congestion::{between, has_per_priority, settings_advice, Row, State};
use rocewatch_plugin_api::{PluginKind, QosState, Sample, Setting};

use super::output::print_json;
use super::progress::Progress;
use super::source::SourceArgs;
use super::terminal::{live_view, terminal_rows};
use crate::app::App;

/// `rocewatch congestion`'s arguments.
#[derive(Debug, Args)]
pub struct CongestionArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Time between the two collections the rates are computed over (100ms to 1h).
    #[arg(long, value_parser = rocewatch_runtime::util::duration::WATCH.flag(), default_value = "10s", value_name = "DUR")]
    pub window: Duration,
    /// For each port and priority in a troubled state: what to tune, the counters it
    /// rests on, and the port's own settings it points at (ECN enables, DCQCN timers,
    /// PFC, buffer, storm prevention).
    #[arg(long)]
    pub advise: bool,
    /// Show idle priorities too.
    #[arg(long)]
    pub all: bool,
    /// Again every window until interrupted: on a terminal one screen redrawn like top
    /// (q quits), elsewhere frames one after another.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// Print JSON: {"window_s","ports":[{"device","port","netdev","priority","state",
    /// "evidence","knob","rates":{...}}],"errors"}.
    #[arg(long)]
    pub json: bool,
}

/// How long --advise keeps the configuration it read.
const CONFIG_EVERY: Duration = Duration::from_secs(30);

pub async fn run(a: CongestionArgs) -> Result<i32> {
    let cfg = a.source.load()?;
    // On a terminal, what it waits on; a live view draws it on its own screen (`frames`).
    let progress = if live(&a) {
        Progress::new("congestion", false)
    } else {
        Progress::start("congestion")
    };
    progress.waiting("starting the collectors", None);
    // With --advise, the configuration plugins too: the settings each advice points at.
    let kinds: &[PluginKind] = if a.advise {
        &[PluginKind::Collector, PluginKind::Configuration]
    } else {
        &[PluginKind::Collector]
    };
    let app = App::start(cfg, Some(kinds)).await;
    let code = frames(&app, &a, progress).await;
    app.stop().await;
    code
}

/// Whether `--watch` redraws one screen (on a terminal, like top).
fn live(a: &CongestionArgs) -> bool {
    a.watch && !a.json && std::io::stdout().is_terminal()
}

/// What is said when not even the first collection read anything: exit status 2.
fn nothing_collected(errors: &[String]) -> i32 {
    eprintln!(
        "rocewatch congestion: nothing could be collected{}",
        match errors.first() {
            Some(e) => format!(" ({e}{})", if errors.len() > 1 { "; ..." } else { "" }),
            None => String::new(),
        }
    );
    2
}

/// The answer the first collection decides (no per-priority counter in it: the window
/// could only end in no rows), given at once instead of after the window.
async fn answer_now(
    app: &App,
    a: &CongestionArgs,
    first: &[Sample],
    mut errors: Vec<String>,
    elapsed: Duration,
) -> Result<i32> {
    if first.is_empty() {
        return Ok(nothing_collected(&errors));
    }
    let mut config = Vec::new();
    if a.advise {
        match app.observe_qos().await {
            Ok(states) => config = states,
            Err(e) => errors.push(format!("configuration: {e}")),
        }
    }
    if a.json {
        print_json(&json(&[], elapsed, &errors))?;
    } else {
        let over = Over::FirstCollection { window: a.window };
        let advise = a.advise.then_some(config.as_slice());
        print!("{}", text(&[], &over, advise, a.all, &errors));
    }
    Ok(0)
}

/// One collection: its samples and what could not be read ("target: message").
async fn collect(app: &App) -> (Vec<Sample>, Vec<String>) {
    let (r, failed) = app.collect_unstored().await;
    let errors = r
        .errors
        .into_iter()
        .map(|e| format!("{}: {}", e.target, e.message))
        .chain(failed.into_iter().map(|e| e.to_string()))
        .collect();
    (r.samples, errors)
}

async fn frames(app: &App, a: &CongestionArgs, progress: Progress) -> Result<i32> {
    progress.waiting("reading the counters", None);
    let started = Instant::now();
    let (mut before, first_errors) = collect(app).await;
    if !a.watch && !has_per_priority(&before) {
        progress.finish();
        return answer_now(app, a, &before, first_errors, started.elapsed()).await;
    }
    let mut at = Instant::now();
    // --watch on a terminal redraws one screen, like top (q or Ctrl-C ends it); else
    // frames follow one another.
    let tty = live(a);
    let (terminal, mut quit) = live_view(tty);
    // Until the first frame, what it waits on (on the live view's screen when there is
    // one); later windows show the frame before.
    let progress = if tty {
        Progress::start("congestion")
    } else {
        progress
    };
    progress.waiting(
        format!(
            "reading counters over a {} window",
            humantime::format_duration(a.window)
        ),
        Some(at + a.window),
    );
    let mut progress = Some(progress);
    // Only --watch ends on a signal as a quit; a single frame keeps the default (Ctrl-C
    // is an interrupted command, status 130).
    let (_no_signal, quiet) = watch::channel(false);
    let mut signals = if a.watch {
        rocewatch_runtime::util::signals::shutdown_on_signals()
    } else {
        quiet
    };
    // The configuration --advise shows, read again at most every 30 s: the DCQCN
    // parameters in debugfs are one firmware command each.
    let mut config: Option<(Instant, Vec<QosState>)> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(a.window) => {}
            Ok(_) = signals.wait_for(|stop| *stop) => break,
            () = quit.typed() => break,
        }
        let (after, errors) = collect(app).await;
        if let Some(p) = progress.take() {
            p.finish();
        }
        // The rates over the time that really passed between the two collections (the
        // window, plus a collection, plus printing when watching).
        let elapsed = std::mem::replace(&mut at, Instant::now()).elapsed();
        if before.is_empty() && after.is_empty() {
            drop(terminal);
            return Ok(nothing_collected(&errors));
        }
        let rows = between(&before, &after, elapsed);
        let mut errors = errors;
        if a.advise
            && config
                .as_ref()
                .is_none_or(|(at, _)| at.elapsed() >= CONFIG_EVERY)
        {
            match app.observe_qos().await {
                Ok(states) => config = Some((Instant::now(), states)),
                Err(e) => errors.push(format!("configuration: {e}")),
            }
        }
        let config: &[QosState] = config.as_ref().map_or(&[], |(_, s)| s.as_slice());
        if a.json {
            print_json(&json(&rows, elapsed, &errors))?;
        } else {
            let advise = a.advise.then_some(config);
            let body = text(&rows, &Over::Window(elapsed), advise, a.all, &errors);
            let mut out = std::io::stdout().lock();
            if tty {
                // The frame cut to the screen, the host and time on top (as top does).
                let keep = terminal_rows().saturating_sub(2).max(1);
                let shown: Vec<&str> = body.lines().take(keep).collect();
                write!(
                    out,
                    "\x1b[H\x1b[2J{} {} (every {}; q quits)\n{}\n",
                    safe(&app.host_name),
                    humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
                    humantime::format_duration(a.window),
                    shown.join("\n")
                )?;
            } else {
                write!(out, "{body}")?;
            }
            out.flush()?;
        }
        if !a.watch {
            break;
        }
        before = after;
    }
    drop(terminal);
    Ok(0)
}

fn rate(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x >= 1e6 => format!("{:.1}M", x / 1e6),
        Some(x) if x >= 1e4 => format!("{:.0}k", x / 1e3),
        Some(x) => format!("{x:.0}"),
    }
}

fn gbps(v: Option<f64>) -> String {
    v.map_or("-".into(), |b| format!("{:.2}", b * 8.0 / 1e9))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:.1}%", x * 100.0))
}

fn sum(v: &[Option<f64>]) -> Option<f64> {
    v.iter().flatten().copied().reduce(|a, b| a + b)
}

/// A name from the system as one printable line (device and netdev names may hold
/// control characters; the table never prints them raw).
fn safe(s: &str) -> String {
    rocewatch_doctor::shell::one_line(s)
}

fn port_name(r: &Row) -> String {
    if r.at.device.is_empty() {
        "-".into()
    } else {
        format!("{}/{}", safe(&r.at.device), safe(&r.at.port))
    }
}

/// The settings of the port a row is about, by name (values only).
fn setting_of<'a>(config: &'a [QosState], r: &Row) -> impl Fn(&str) -> Option<String> + 'a {
    let port = config
        .iter()
        .find(|s| s.device == r.at.device && s.port.to_string() == r.at.port);
    move |k| match port.and_then(|p| p.settings.get(k)) {
        Some(Setting::Value(v)) => Some(v.clone()),
        _ => None,
    }
}

/// What the rates are over.
pub(crate) enum Over {
    /// The time that passed between the two collections.
    Window(Duration),
    /// The first collection decided it: no per-priority counter, no need to wait `window`.
    FirstCollection { window: Duration },
}

impl Over {
    /// The first line, and how "over what" reads in a sentence ("over 10s").
    fn words(&self) -> (String, String) {
        // Whole milliseconds: the elapsed time's nanoseconds say nothing.
        let ms =
            |d: &Duration| humantime::format_duration(Duration::from_millis(d.as_millis() as u64));
        match self {
            Over::Window(d) => {
                let over = format!("over {}", ms(d));
                (format!("rocewatch congestion {over}"), over)
            }
            Over::FirstCollection { window } => (
                format!(
                    "rocewatch congestion from the first collection, without waiting the {} window",
                    ms(window)
                ),
                "in the first collection".to_string(),
            ),
        }
    }
}

/// The table, and with `advise` (the ports' configuration) what to tune.
pub(crate) fn text(
    rows: &[Row],
    over: &Over,
    advise: Option<&[QosState]>,
    all: bool,
    errors: &[String],
) -> String {
    let (first_line, w) = over.words();
    let mut out = format!("{first_line}\n");
    let shown: Vec<&Row> = rows
        .iter()
        .filter(|r| all || r.verdict.state != State::Idle)
        .collect();
    let idle = rows.len() - shown.len();
    if rows.is_empty() {
        out.push_str("no per-priority counters (bytes, pauses, pause time: the NIC's driver statistics through counters-ethtool): no congestion state\n");
    } else {
        let _ = writeln!(
            out,
            "{:<10} {:<14} {:>4}  {:<14} {:>7} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7}",
            "PORT",
            "NETDEV",
            "PRIO",
            "STATE",
            "TX Gb/s",
            "RX Gb/s",
            "PAUSED",
            "PAUSING",
            "PAUSES/s",
            "ECN/s",
            "CNP/s",
            "LOSS/s"
        );
        for r in &shown {
            let x = &r.rates;
            let _ = writeln!(
                out,
                "{:<10} {:<14} {:>4}  {:<14} {:>7} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7}",
                port_name(r),
                if r.at.netdev.is_empty() {
                    "-".to_string()
                } else {
                    safe(&r.at.netdev)
                },
                safe(&r.at.priority),
                r.verdict.state.as_str(),
                gbps(x.tx_bytes),
                gbps(x.rx_bytes),
                pct(x.paused_by_peer),
                pct(x.pausing_peer),
                rate(sum(&[x.pause_frames_rx, x.pause_frames_tx])),
                rate(x.ecn_marked),
                rate(sum(&[x.cnp_sent, x.cnp_handled])),
                rate(sum(&[x.out_of_sequence, x.retransmissions, x.discards])),
            );
        }
        if idle > 0 {
            let _ = writeln!(out, "({idle} idle priorities not shown; --all shows them)");
        }
    }
    if let Some(config) = advise {
        let troubled: Vec<&Row> = rows
            .iter()
            .filter(|r| {
                matches!(
                    r.verdict.state,
                    State::Storm | State::PfcDominated | State::Lossy
                )
            })
            .collect();
        out.push('\n');
        if troubled.is_empty() {
            let _ = writeln!(
                out,
                "nothing to tune {w}: no priority in storm, pfc_dominated or lossy"
            );
        }
        for r in troubled {
            let _ = writeln!(
                out,
                "{} {} prio {}: {}\n  rests on: {}\n  tune: {}",
                port_name(r),
                safe(&r.at.netdev),
                safe(&r.at.priority),
                r.verdict.state,
                r.verdict.evidence,
                r.verdict.knob
            );
            if let Ok(prio) = r.at.priority.parse::<u8>() {
                for line in settings_advice(&r.verdict, &r.rates, prio, &setting_of(config, r)) {
                    let _ = writeln!(out, "  here: {}", safe(&line));
                }
            }
        }
    }
    for e in errors.iter().take(5) {
        let _ = writeln!(out, "not read: {e}");
    }
    if errors.len() > 5 {
        let _ = writeln!(out, "not read: and {} more", errors.len() - 5);
    }
    out
}

fn json(rows: &[Row], window: Duration, errors: &[String]) -> serde_json::Value {
    serde_json::json!({
        "window_s": window.as_secs_f64(),
        "ports": rows.iter().map(|r| {
            let x = &r.rates;
            serde_json::json!({
                "device": r.at.device, "port": r.at.port, "netdev": r.at.netdev,
                "priority": r.at.priority, "state": r.verdict.state.as_str(),
                "evidence": r.verdict.evidence, "knob": r.verdict.knob,
                "rates": {
                    "tx_bytes": x.tx_bytes, "rx_bytes": x.rx_bytes,
                    "paused_by_peer": x.paused_by_peer, "pausing_peer": x.pausing_peer,
                    "pause_frames_rx": x.pause_frames_rx, "pause_frames_tx": x.pause_frames_tx,
                    "discards": x.discards, "ecn_marked": x.ecn_marked,
                    "cnp_sent": x.cnp_sent, "cnp_handled": x.cnp_handled,
                    "out_of_sequence": x.out_of_sequence, "retransmissions": x.retransmissions,
                },
            })
        }).collect::<Vec<_>>(),
        "errors": errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_congestion::{classify, PortPriority, Rates};

    fn row(prio: &str, rates: Rates) -> Row {
        Row {
            at: PortPriority {
                device: "mlx5_0".into(),
                port: "1".into(),
                netdev: "ens1f0np0".into(),
                priority: prio.into(),
            },
            verdict: classify(&rates),
            rates,
        }
    }

    #[test]
    fn the_table_and_the_advice() {
        let storm = row(
            "3",
            Rates {
                tx_bytes: Some(0.0),
                paused_by_peer: Some(0.98),
                pause_frames_rx: Some(15_000.0),
                ..Rates::default()
            },
        );
        let idle = row("0", Rates::default());
        let flowing = row(
            "5",
            Rates {
                tx_bytes: Some(1.25e9),
                rx_bytes: Some(0.0),
                ..Rates::default()
            },
        );
        let rows = [storm, idle, flowing];
        // The port's storm prevention, read by a configuration plugin, joins the advice.
        let config = [QosState {
            device: "mlx5_0".into(),
            port: 1,
            netdev: Some("ens1f0np0".into()),
            settings: [(
                "pfc_prevention_timeout".to_string(),
                Setting::Value("off".into()),
            )]
            .into(),
            settable_unread: Vec::new(),
        }];
        let t = text(
            &rows,
            &Over::Window(Duration::from_secs(10)),
            Some(&config),
            false,
            &[],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "rocewatch congestion over 10s");
        assert!(lines[1].starts_with("PORT"), "{t}");
        assert!(
            lines[2].starts_with("mlx5_0/1   ens1f0np0         3  storm")
                && lines[2].contains("98.0%")
                && lines[2].contains("15k"),
            "{t}"
        );
        assert!(
            lines[3].contains("flowing") && lines[3].contains("10.00"),
            "{t}"
        );
        assert_eq!(lines[4], "(1 idle priorities not shown; --all shows them)");
        assert!(
            t.contains("mlx5_0/1 ens1f0np0 prio 3: storm\n  rests on: paused by the peer 98 %"),
            "{t}"
        );
        assert!(
            t.contains("  tune: the peer keeps pausing this priority"),
            "{t}"
        );
        assert!(
            t.contains("  here: this NIC's storm prevention: pfc_prevention_timeout = off"),
            "{t}"
        );
        // --all shows the idle priority; without --advise no advice.
        let t = text(
            &rows,
            &Over::Window(Duration::from_secs(10)),
            None,
            true,
            &["x: denied".into()],
        );
        assert!(t.contains("idle"), "{t}");
        assert!(!t.contains("tune:"), "{t}");
        assert!(t.ends_with("not read: x: denied\n"), "{t}");
        // Nothing to tune, said.
        let t = text(
            &rows[1..],
            &Over::Window(Duration::from_secs(10)),
            Some(&[]),
            false,
            &[],
        );
        assert!(t.contains("nothing to tune over 10s"), "{t}");
        // A netdev name with a terminal escape prints escaped.
        let mut odd = rows[0].clone();
        odd.at.netdev = "x\x1b[2J".into();
        let t = text(
            &[odd],
            &Over::Window(Duration::from_millis(10_400)),
            Some(&[]),
            false,
            &[],
        );
        assert!(
            t.starts_with("rocewatch congestion over 10s 400ms\n"),
            "{t}"
        );
        assert!(t.contains("x\\x1b[2J") && !t.contains('\x1b'), "{t}");
        // Decided by the first collection: said, and the window not claimed.
        let over = Over::FirstCollection {
            window: Duration::from_secs(30),
        };
        let t = text(&[], &over, Some(&[]), false, &[]);
        assert_eq!(
            t,
            "rocewatch congestion from the first collection, without waiting the 30s window\n\
             no per-priority counters (bytes, pauses, pause time: the NIC's driver statistics \
             through counters-ethtool): no congestion state\n\n\
             nothing to tune in the first collection: no priority in storm, pfc_dominated or lossy\n"
        );
        let j = json(&rows, Duration::from_secs(10), &[]);
        assert_eq!(j["ports"][0]["state"], "storm");
        assert_eq!(j["ports"][0]["rates"]["paused_by_peer"], 0.98);
        assert!(j["ports"][1]["rates"]["ecn_marked"].is_null());
    }
}
