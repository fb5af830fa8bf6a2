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

/// The environment variable that holds the job's token when `--token-file` is not given.
pub const TOKEN_ENV: &str = "ROCEWATCH_PREFLIGHT_TOKEN";

/// The sweep's token: `--token-file` (one line, readable and writable by its owner only,
/// as ssh wants its keys: the token is the job's secret), else the environment's
/// [`TOKEN_ENV`]; neither is `None` (hellos unauthenticated, as before tokens, warned of
/// when the sweep starts).
pub fn token(
    file: Option<&std::path::Path>,
    env: Option<std::ffi::OsString>,
) -> anyhow::Result<Option<pf::control::Token>> {
    use anyhow::{anyhow, Context as _};
    use std::os::unix::fs::MetadataExt as _;
    let Some(file) = file else {
        return match env {
            None => Ok(None),
            Some(v) => {
                let v = v
                    .into_string()
                    .map_err(|_| anyhow!("{TOKEN_ENV}: not UTF-8"))?;
                let t = pf::control::Token::new(&v).map_err(|e| anyhow!("{TOKEN_ENV}: {e}"))?;
                Ok(Some(t))
            }
        };
    };
    let shown = file.display();
    // Opened once, not through a link and without waiting on a FIFO; what is checked is
    // the file that is read (fstat of the open descriptor, no window between the two).
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(file)
        .with_context(|| format!("--token-file {shown} (a link is not followed)"))?;
    let md = f
        .metadata()
        .with_context(|| format!("--token-file {shown}"))?;
    if !md.file_type().is_file() {
        anyhow::bail!("--token-file {shown}: not a regular file");
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if md.uid() != me && md.uid() != 0 {
        anyhow::bail!(
            "--token-file {shown}: owned by uid {}, not by this user (uid {me}) or root: \
             whoever owns it knows the job's token",
            md.uid()
        );
    }
    let mode = md.mode() & 0o7777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "--token-file {shown}: mode {mode:04o} lets others read or change the job's \
             token: chmod 600 {shown}"
        );
    }
    let limit = 4 * pf::control::MAX_TOKEN as u64;
    let mut text = String::new();
    f.take(limit + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("--token-file {shown}"))?;
    if text.len() as u64 > limit {
        anyhow::bail!("--token-file {shown}: more than {limit} bytes, too long for a token");
    }
    let t = pf::control::Token::new(&text).map_err(|e| anyhow!("--token-file {shown}: {e}"))?;
    Ok(Some(t))
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
    if a.settings.token.is_none() {
        eprintln!(
            "rocewatch preflight: warning: no --token-file or {TOKEN_ENV}: any host that \
             reaches control port {} can end this host's steps; give every host of the job \
             the same token",
            a.settings.control_port
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_token_comes_from_a_private_file_or_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "s3cret\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let want = pf::control::Token::new("s3cret").unwrap();
        assert_eq!(token(Some(&f), None).unwrap(), Some(want.clone()));
        // The file wins over the environment.
        assert_eq!(
            token(Some(&f), Some("other".into())).unwrap(),
            Some(want.clone())
        );
        assert_eq!(token(None, Some("s3cret".into())).unwrap(), Some(want));
        assert_eq!(token(None, None).unwrap(), None);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = token(Some(&f), None).unwrap_err().to_string();
        assert!(e.contains("mode 0640 lets others read"), "{e}");
        assert!(e.contains("chmod 600"), "{e}");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = token(Some(&empty), None).unwrap_err().to_string();
        assert!(e.ends_with("the token is empty"), "{e}");
        let e = token(None, Some(" ".into())).unwrap_err().to_string();
        assert_eq!(e, "ROCEWATCH_PREFLIGHT_TOKEN: the token is empty");
        let e = token(Some(&dir.path().join("missing")), None).unwrap_err();
        assert!(format!("{e:#}").contains("No such file"), "{e:#}");
    }

    /// What else could stand at the path is refused without reading through it: a FIFO
    /// (it would block the sweep for ever), a link to a private file, a file another
    /// user owns (they know the token).
    #[test]
    fn a_token_file_is_a_private_regular_file_of_this_user() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("token");
        std::fs::write(&real, "s3cret\n").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let e = format!("{:#}", token(Some(&fifo), None).unwrap_err());
        assert!(e.contains("not a regular file"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = format!("{:#}", token(Some(&link), None).unwrap_err());
        assert!(e.contains("a link is not followed"), "{e}");
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(8 * 1024)).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = format!("{:#}", token(Some(&big), None).unwrap_err());
        assert!(e.contains("too long for a token"), "{e}");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = dir.path().join("theirs");
            std::fs::write(&theirs, "s3cret\n").unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = format!("{:#}", token(Some(&theirs), None).unwrap_err());
            assert!(e.contains("owned by uid 65534"), "{e}");
        } else {
            eprintln!("SKIPPED: a file of another user needs root to make (CI runs as root)");
        }
    }
}
