//! `rocewatch preflight`'s sweep: the probe plugin of each ACTIVE rail started, this
//! host's steps measured (`rocewatch_preflight::verbs`), its results written as JSON
//! lines and a table of them printed.

use std::sync::{Arc, Mutex, PoisonError};

use super::progress::Progress;
use rocewatch_preflight as pf;
pub use rocewatch_preflight::verbs::Settings;
use rocewatch_preflight::verbs::Tell as _;
use rocewatch_preflight::verbs::{plugins, VerbsRunner};

/// A sweep's command line, past the host list.
pub struct Sweep {
    pub settings: Settings,
    /// The first verbs responder's TCP port (rank k: + k).
    pub tcp_port: u16,
    /// `--out`.
    pub out: Option<std::path::PathBuf>,
}

/// The sweep: a probe plugin per ACTIVE rail, this host's steps, its results written as
/// JSON lines, a table of them on stderr. Exit 1 when one of them failed, 2 when none
/// failed but one could not be judged, 0 when all passed.
pub async fn sweep(
    a: &Sweep,
    mut cfg: crate::config::Config,
    schedule: pf::Schedule,
    rails: pf::HostRails,
    th: &pf::Thresholds,
) -> anyhow::Result<i32> {
    use anyhow::Context as _;
    // Created first: a file left by an earlier run is said before the sweep, not after.
    let out = open_out(a.out.as_deref(), &rails.host)?;
    let shown = Arc::new(Shown(Mutex::new(Some(Progress::start("preflight")))));
    shown.waiting("starting the probe plugin of each rail".into(), None);
    // Without the plugin every rail's test says why; the partners still meet, so theirs
    // are not held up.
    let path = rocewatch_probes::plugin_path().map_err(|e| e.to_string());
    let ranks = plugins::active_ranks(&rails);
    cfg.plugins.external = match &path {
        Ok(p) => plugins::configs(&ranks, p, a.tcp_port, &a.settings)?,
        Err(_) => Vec::new(),
    };
    cfg.probes = None;
    let kinds = [rocewatch_plugin_api::PluginKind::Probe];
    let app = crate::app::App::start(cfg, Some(&kinds)).await;
    let entries = plugins::started(&ranks, &app.registry.entries, &path);
    let settings = a.settings.clone();
    let me = rails.clone();
    let mut runner = VerbsRunner::start(
        schedule.clone(),
        rails,
        entries,
        app.metrics().clone(),
        settings,
        shown.clone(),
    )
    .await
    .with_context(|| format!("listening on control port {}", a.settings.control_port))?;
    let results = pf::run_host(&schedule, &me, &mut runner).await?;
    shown.waiting("stopping the probe plugins".into(), None);
    app.stop().await;
    shown.finish();
    write_results(out, &me, &results)?;
    let (table, code) = local_table(&results, th);
    eprint!("{table}");
    Ok(code)
}

/// The sweep's progress line (on a terminal) and its notes, told by the runner.
struct Shown(Mutex<Option<Progress>>);

impl Shown {
    /// The line wiped for good (before the table); notes still said after.
    fn finish(&self) {
        let taken = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(p) = taken {
            p.finish();
        }
    }
}

impl pf::verbs::Tell for Shown {
    fn waiting(&self, what: String, until: Option<std::time::Instant>) {
        if let Some(p) = &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            p.waiting(what, until);
        }
    }

    fn note(&self, line: String) {
        let line = format!("rocewatch preflight: {line}");
        match &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(p) => p.note(&line),
            None => eprintln!("{line}"),
        }
    }
}

/// The `--out` file, created before the sweep. Removed again if the sweep ends without
/// writing it (an error, a signal's unwinding): an empty file left behind would make the
/// rerun refuse it.
struct OutFile {
    file: std::fs::File,
    path: std::path::PathBuf,
    written: bool,
}

impl Drop for OutFile {
    fn drop(&mut self) {
        if !self.written {
            // Ours: created with O_EXCL, in a directory whose sticky bit (a shared one)
            // keeps others from replacing it.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The file `--out` names, created (a new file, or HOST.jsonl in a directory; never an
/// existing file, never through a link: the directory may be a shared one). A name ending
/// in `/` is a directory, made if missing (`--out /shared/pf-$SLURM_JOB_ID/`, every host
/// of the job making it at once).
fn open_out(out: Option<&std::path::Path>, host: &str) -> anyhow::Result<Option<OutFile>> {
    use anyhow::Context as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let Some(out) = out else { return Ok(None) };
    let dir_meant = out.as_os_str().as_encoded_bytes().ends_with(b"/");
    let path = if dir_meant || out.is_dir() {
        std::fs::create_dir_all(out)
            .with_context(|| format!("--out {}: cannot make the directory", out.display()))?;
        out.join(format!("{host}.jsonl"))
    } else {
        out.to_path_buf()
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(&path)
        .map_err(|e| {
            let what = if e.kind() == std::io::ErrorKind::AlreadyExists {
                "cannot create it (an existing file is never overwritten): remove it, or name \
                 a new file or a directory (HOST.jsonl in it)"
            } else if e.raw_os_error() == Some(libc::ELOOP) {
                "it is a link, never followed (the directory may be a shared one): name a new file"
            } else {
                "cannot create it"
            };
            anyhow::Error::new(e).context(format!("--out {}: {what}", path.display()))
        })?;
    Ok(Some(OutFile {
        file,
        path,
        written: false,
    }))
}

/// This host's lines to the `--out` file, or stdout.
fn write_results(
    out: Option<OutFile>,
    me: &pf::HostRails,
    results: &[pf::TestResult],
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::io::Write as _;
    let lines = pf::results::to_lines(me, results);
    let Some(mut out) = out else {
        // One write: lines of hosts gathered by srun do not interleave mid-line.
        std::io::stdout().lock().write_all(lines.as_bytes())?;
        return Ok(());
    };
    out.file
        .write_all(lines.as_bytes())
        .with_context(|| format!("--out {}", out.path.display()))?;
    out.written = true;
    Ok(())
}

/// The tests this host drove, one row each, and the exit status they give.
fn local_table(results: &[pf::TestResult], th: &pf::Thresholds) -> (String, i32) {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        " {:<5} {:<5} {:<28} {:<28} {:>10} {:>7} {:>10}  verdict",
        "round", "rail", "from", "to", "BW[Gb/s]", "%line", "lat[us]"
    );
    let (mut failed, mut unknown) = (false, false);
    let num = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
    for t in results {
        let (share, j) = pf::judge_test(t, th);
        let verdict = match &j {
            pf::Judgement::Pass => "PASS".to_string(),
            pf::Judgement::Fail { reasons } => {
                failed = true;
                format!("FAIL: {}", reasons.join("; "))
            }
            pf::Judgement::Unknown { why } => {
                unknown = true;
                format!("cannot tell: {why}")
            }
        };
        let _ = writeln!(
            out,
            " {:<5} {:<5} {:<28} {:<28} {:>10} {:>7} {:>10}  {}",
            t.round,
            t.rank,
            pf::report::clean(&t.from.to_string()),
            pf::report::clean(&t.to.to_string()),
            num(t.bandwidth_gbps, 2),
            num(share.map(|s| s * 100.0), 0),
            num(t.latency_us, 1),
            pf::report::clean(&verdict)
        );
    }
    if results.is_empty() {
        out.push_str(" (this host drove no test: no partner, or no ACTIVE rail)\n");
        unknown = true;
    }
    out.push_str(
        "the verdict over every host: rocewatch preflight --judge with every host's lines\n",
    );
    let code = if failed {
        1
    } else if unknown {
        2
    } else {
        0
    };
    (out, code)
}
