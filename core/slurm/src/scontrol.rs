//! Draining and resuming a node through `scontrol`, as LBNL Node Health Check does
//! (`nhc`'s `nhc_mark_offline` / `node-mark-online`): drain with a reason that starts with
//! our prefix; resume only a node that is drained with a reason that starts with it, so a
//! node an administrator drained ("maintenance") stays drained.
//!
//! `scontrol` runs directly (`Command` with arguments, never a shell), with this process's
//! environment (`SLURM_CONF` passes through) plus whatever [`Scontrol::env`] adds, and a
//! bound on how long it may take (it retries a controller that does not answer for
//! `MessageTimeout` seconds, by default 10, per attempt), as a process group killed at the
//! bound ([`rocewatch_process`]: a site's wrapper that does not `exec` scontrol goes with it).
//! A drain or a resume (show, then update) takes one bound for both runs: slurmd kills a
//! HealthCheckProgram that runs past its own limit.
//!
//! A node that health calls unhealthy must not keep taking jobs, so a drain does not hang
//! on reading the node first: a `show` that fails (an error, output that is not this
//! node's record, output cut at [`rocewatch_process::KEEP_BYTES`], a timeout) is tried once
//! more, and when that fails too the node is drained anyway, the outcome saying that a
//! reason someone else set may have been replaced ([`DrainOutcome::DrainedUnread`]). A
//! resume is the opposite: never on a `show` that failed. An `update` that exits 0 but
//! says something on standard error (a wrapper that loses scontrol's status; scontrol
//! itself exits 1 with `slurm_update error: ...` and prints nothing on success) failed.
//! A node name that scontrol would read as several nodes or another argument (`n[1-4]`,
//! `a,b`, `ALL`, a space or `=`) is refused before anything runs.
//!
//! The commands: `scontrol update nodename=NODE state=drain reason=REASON`,
//! `scontrol update nodename=NODE state=resume`, `scontrol show node NODE` (read with
//! [`crate::node`]), `scontrol show hostnames LIST` (the `scontrol(1)` man page).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use rocewatch_process::{one_line, run_bounded, BoundedOutput, RunError};

use crate::node::{parse_one_node, Node, NodeParseError};

/// The prefix of every reason rocewatch sets, by which it knows a drain as its own.
pub const REASON_PREFIX: &str = "rocewatch: ";

/// The longest reason rocewatch sets, in bytes, prefix included. Slurm 22.05 sets no
/// limit of its own (`scontrol update ... reason=` of 120000 bytes was taken and shown
/// whole); `sinfo -R` and `scontrol show node` print the reason on one line, so rocewatch
/// keeps it to what an operator reads there.
pub const MAX_REASON_BYTES: usize = 256;

/// How long one `scontrol` may run before it is killed, unless set otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The least time left for the update of a drain or a resume to be started.
const MIN_LEFT: Duration = Duration::from_secs(1);

/// Whether `node` names one node to scontrol: not empty, no hostlist syntax (`[`, `]`,
/// `,`), no space, control character, `=` or quote (another argument or key), not starting
/// with `-` (an option), not `ALL`.
fn check_node_name(node: &str) -> Result<(), ScontrolError> {
    let why = if node.is_empty() {
        Some("empty")
    } else if node.starts_with('-') {
        Some("starts with '-'")
    } else if node.eq_ignore_ascii_case("all") {
        Some("ALL names every node")
    } else if node
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "[],=\"'".contains(c))
    {
        Some("holds a space, a control character or one of [ ] , = \" ' (a list of nodes or another argument)")
    } else {
        None
    };
    match why {
        Some(why) => Err(ScontrolError::BadNodeName {
            node: node.to_string(),
            why,
        }),
        None => Ok(()),
    }
}

/// A reason as rocewatch gives it to Slurm: the prefix, then the text on one line with
/// control characters escaped (`\n`, `\t`, `\x1b`, ...), cut to [`MAX_REASON_BYTES`] on
/// a character boundary (ending in `...` when cut).
pub fn reason(prefix: &str, text: &str) -> String {
    let mut out = String::with_capacity(MAX_REASON_BYTES);
    for c in prefix.chars().chain(text.chars()) {
        let piece = match c {
            '\n' => "\\n".to_string(),
            '\t' => "\\t".to_string(),
            '\r' => "\\r".to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        };
        if out.len() + piece.len() > MAX_REASON_BYTES {
            while out.len() + 3 > MAX_REASON_BYTES {
                out.pop();
            }
            out.push_str("...");
            return out;
        }
        out.push_str(&piece);
    }
    out
}

/// What [`Scontrol::resume_if_ours`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// The node was drained with our prefix and is resumed.
    Resumed { reason: String },
    /// The node is drained for another reason (an administrator's): left drained.
    LeftAlone { reason: String },
    /// The node is not drained: nothing to do.
    NotDrained { state: String },
}

/// What [`Scontrol::drain_unless_others`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    /// The node is drained now, with this reason.
    Drained { reason: String },
    /// The node was drained already with this very reason: left as it is.
    AlreadyDrained { reason: String },
    /// Someone else set the node's state: a reason that is not rocewatch's (an
    /// administrator's drain, DOWN or FAIL, `Not responding`), or DOWN/FAIL without one.
    /// Left as it is.
    Others { state: String, reason: String },
    /// `scontrol show node` failed twice (`why`: the last failure), so the node was drained
    /// with this reason without knowing its state: a reason someone else had set (an
    /// administrator's drain) may have been replaced.
    DrainedUnread { reason: String, why: String },
}

impl DrainOutcome {
    /// One line for standard error and the audit log.
    pub fn describe(&self, node: &str) -> String {
        match self {
            DrainOutcome::Drained { reason } => format!("{node} drained: {reason}"),
            DrainOutcome::AlreadyDrained { reason } => format!("{node} stays drained: {reason}"),
            DrainOutcome::Others { state, reason } => {
                format!("{node} is {state} by someone else (reason {reason:?}): left as it is")
            }
            DrainOutcome::DrainedUnread { reason, why } => format!(
                "{node} drained: {reason}; WARNING: its state and reason could not be read first ({why}), so a drain reason someone else set may have been replaced"
            ),
        }
    }
}

/// A node down or failing (`DOWN`, `+FAIL`): not rocewatch's to drain or resume.
fn down_or_failing(n: &Node) -> bool {
    n.state.base == crate::node::BaseState::Down || n.state.flags.iter().any(|f| f == "FAIL")
}

/// An `scontrol` that failed, named with its command line.
#[derive(Debug, thiserror::Error)]
pub enum ScontrolError {
    #[error("{command}: cannot run: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// `output`: its standard error, and its standard output when there is any (scontrol
    /// says "Node N not found" on standard output).
    #[error("{command}: {status}: {output}")]
    Failed {
        command: String,
        status: ExitStatus,
        output: String,
    },
    #[error("{command}: still running after {timeout:?}; killed (stderr: {stderr})")]
    Timeout {
        command: String,
        timeout: Duration,
        stderr: String,
    },
    #[error("{command}: {source}")]
    Parse {
        command: String,
        #[source]
        source: NodeParseError,
    },
    #[error("{command}: {what}")]
    Unexpected { command: String, what: String },
    /// `what`: "drain" or "resume", the update that was not started.
    #[error("{what} of {node}: scontrol show node took nearly all of {timeout:?}; the {what} was not started")]
    NoTimeLeft {
        what: &'static str,
        node: String,
        timeout: Duration,
    },
    #[error("node name {node:?}: {why}; refused before running scontrol")]
    BadNodeName { node: String, why: &'static str },
    /// The node's state could not be read, and the drain tried anyway failed too.
    #[error("drain of {node}: its state could not be read ({show}), and the drain tried anyway failed: {drain}")]
    Unread {
        node: String,
        show: String,
        drain: Box<ScontrolError>,
    },
}

/// The `scontrol` program and how to run it.
#[derive(Debug, Clone)]
pub struct Scontrol {
    program: PathBuf,
    env: Vec<(OsString, OsString)>,
    timeout: Duration,
}

impl Default for Scontrol {
    fn default() -> Self {
        Self::new("scontrol")
    }
}

impl Scontrol {
    /// `program` (a path, or a name looked up in `PATH`).
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            env: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Set `key=value` in scontrol's environment (on top of this process's).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// How long one scontrol may run (a resume's two runs together).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long one `scontrol` may run (a resume's two runs together).
    pub fn limit(&self) -> Duration {
        self.timeout
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// A `Command` for `scontrol ARGS` with this environment.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut c = Command::new(&self.program);
        c.args(args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// Run `scontrol ARGS`; its standard output, or an error naming the command, its
    /// exit status and standard error.
    pub fn run(&self, args: &[&str]) -> Result<String, ScontrolError> {
        self.run_checked(args, false).map(|(_, out)| out.stdout)
    }

    /// `scontrol show node NODE`, parsed.
    ///
    /// Output cut at [`rocewatch_process::KEEP_BYTES`] is not read: what was cut could hold
    /// the reason.
    pub fn show_node(&self, node: &str) -> Result<Node, ScontrolError> {
        let args = ["show", "node", node];
        let (command, out) = self.run_checked(&args, false)?;
        if out.stdout_dropped > 0 {
            return Err(ScontrolError::Unexpected {
                command,
                what: format!(
                    "its output passed {} bytes and was cut ({} bytes more): not read",
                    rocewatch_process::KEEP_BYTES,
                    out.stdout_dropped
                ),
            });
        }
        let n = parse_one_node(&out.stdout).map_err(|source| match out.stderr.trim() {
            // An error said on standard error with exit 0 (a controller that does not
            // answer): what it said is why.
            "" => ScontrolError::Parse {
                command: command.clone(),
                source,
            },
            _ => ScontrolError::Unexpected {
                command: command.clone(),
                what: format!("{source}; standard error: {}", one_line(&out.stderr)),
            },
        })?;
        if n.name != node {
            return Err(ScontrolError::Unexpected {
                command,
                what: format!("answered for node {:?}", n.name),
            });
        }
        Ok(n)
    }

    /// `scontrol update nodename=NODE state=drain reason=REASON`, the reason made with
    /// [`reason`] from [`REASON_PREFIX`] and `text`. Returns the reason as set. Standard
    /// error on an exit status of 0 is a failure ([`Scontrol::update`]).
    pub fn drain(&self, node: &str, text: &str) -> Result<String, ScontrolError> {
        check_node_name(node)?;
        let r = reason(REASON_PREFIX, text);
        self.update(&[
            "update",
            &format!("nodename={node}"),
            "state=drain",
            &format!("reason={r}"),
        ])?;
        Ok(r)
    }

    /// Drain `node` with [`reason`]`(REASON_PREFIX, text)`, unless someone else set its
    /// state (a reason that is not rocewatch's, whatever the state: an administrator's
    /// drain, DOWN or FAIL; or DOWN/FAIL with no reason: their reason and state stay, as
    /// NHC leaves them) or it is drained with this very reason already (no second
    /// `update`). A node drained with another reason of rocewatch's gets the new one.
    /// What `health --slurm` and the `slurm_drain` remediation action both do.
    ///
    /// A show that fails is tried once more; when it fails again the node is drained
    /// anyway ([`DrainOutcome::DrainedUnread`]): see the module doc. A node name that is
    /// not one node's is refused before any run.
    ///
    /// The `scontrol` runs share `timeout` (the first show gets up to half of it, the two
    /// shows together up to two thirds; the update is not started with under a second
    /// left), so the drain ends within it.
    pub fn drain_unless_others(
        &self,
        node: &str,
        text: &str,
        timeout: Duration,
    ) -> Result<DrainOutcome, ScontrolError> {
        check_node_name(node)?;
        let started = Instant::now();
        let deadline = started + timeout;
        let n = match self.show_twice(node, started + timeout / 2, deadline - timeout / 3) {
            Ok(n) => n,
            // Nothing could run; a drain could not either.
            Err(e @ ScontrolError::Spawn { .. }) => return Err(e),
            Err(show) => return self.drain_unread(node, text, deadline, timeout, show),
        };
        let current = n
            .reason
            .as_ref()
            .map(|r| r.text.clone())
            .unwrap_or_default();
        let ours = current.starts_with(REASON_PREFIX);
        if (down_or_failing(&n) || !current.is_empty()) && !ours {
            return Ok(DrainOutcome::Others {
                state: n.state.to_string(),
                reason: current,
            });
        }
        if n.state.is_drain() && current == reason(REASON_PREFIX, text) {
            return Ok(DrainOutcome::AlreadyDrained { reason: current });
        }
        let sc = self
            .within(deadline)
            .ok_or_else(|| ScontrolError::NoTimeLeft {
                what: "drain",
                node: node.to_string(),
                timeout,
            })?;
        let reason = sc.drain(node, text)?;
        Ok(DrainOutcome::Drained { reason })
    }

    /// `scontrol show node NODE`, the first run until `first_until`, and once more on a
    /// failure other than one to start it, until `until` (when a second is left by then).
    fn show_twice(
        &self,
        node: &str,
        first_until: Instant,
        until: Instant,
    ) -> Result<Node, ScontrolError> {
        let first = first_until.saturating_duration_since(Instant::now());
        match self.clone().timeout(first).show_node(node) {
            Err(e) if !matches!(e, ScontrolError::Spawn { .. }) => match self.within(until) {
                Some(sc) => sc.show_node(node),
                None => Err(e),
            },
            r => r,
        }
    }

    /// Drain `node` without having read it (`show`: why not), within what is left of
    /// `timeout` before `deadline`.
    fn drain_unread(
        &self,
        node: &str,
        text: &str,
        deadline: Instant,
        timeout: Duration,
        show: ScontrolError,
    ) -> Result<DrainOutcome, ScontrolError> {
        let show = show.to_string();
        let unread = |drain| ScontrolError::Unread {
            node: node.to_string(),
            show: show.clone(),
            drain: Box::new(drain),
        };
        let Some(sc) = self.within(deadline) else {
            return Err(unread(ScontrolError::NoTimeLeft {
                what: "drain",
                node: node.to_string(),
                timeout,
            }));
        };
        match sc.drain(node, text) {
            Ok(reason) => Ok(DrainOutcome::DrainedUnread { reason, why: show }),
            Err(e) => Err(unread(e)),
        }
    }

    /// Resume `node` only when it is drained and its reason starts with `prefix`; a node
    /// drained for another reason is left alone, and the outcome says so.
    ///
    /// The two `scontrol` runs (show, then update) share this scontrol's [`limit`]
    /// (`Scontrol::limit`), as [`Scontrol::drain_unless_others`]'s do.
    ///
    /// Between reading the reason and resuming, an administrator could drain the node
    /// anew; Slurm offers no compare-and-set, and NHC has the same window.
    ///
    /// [`limit`]: Scontrol::limit
    pub fn resume_if_ours(&self, node: &str, prefix: &str) -> Result<ResumeOutcome, ScontrolError> {
        check_node_name(node)?;
        let deadline = Instant::now() + self.timeout;
        let n = self.show_node(node)?;
        if !n.state.is_drain() {
            return Ok(ResumeOutcome::NotDrained {
                state: n.state.to_string(),
            });
        }
        let down = down_or_failing(&n);
        let reason = n.reason.map(|r| r.text).unwrap_or_default();
        // DOWN or FAIL is Slurm's or an administrator's to end, even under our reason.
        if !reason.starts_with(prefix) || down {
            return Ok(ResumeOutcome::LeftAlone { reason });
        }
        let sc = self
            .within(deadline)
            .ok_or_else(|| ScontrolError::NoTimeLeft {
                what: "resume",
                node: node.to_string(),
                timeout: self.timeout,
            })?;
        sc.update(&["update", &format!("nodename={node}"), "state=resume"])?;
        Ok(ResumeOutcome::Resumed { reason })
    }

    /// `scontrol update ...`: as [`Scontrol::run`], and standard error on an exit status
    /// of 0 is a failure too (scontrol prints nothing on a successful update and exits 1
    /// after `slurm_update error: ...`; a wrapper that loses its status must not pass for
    /// a drain).
    fn update(&self, args: &[&str]) -> Result<String, ScontrolError> {
        self.run_checked(args, true).map(|(_, out)| out.stdout)
    }

    /// `scontrol show hostnames LIST`: Slurm's own expansion (scontrol exits 0 even when
    /// it refuses the list, so its standard error is an error here).
    pub fn show_hostnames(&self, list: &str) -> Result<Vec<String>, ScontrolError> {
        let (_, out) = self.run_checked(&["show", "hostnames", list], true)?;
        Ok(out.stdout.lines().map(str::to_string).collect())
    }

    /// `scontrol ARGS` within this bound: its command line (what errors name it by) and
    /// output, or an error when it could not start, ran past the bound, exited other than
    /// 0, or said anything on standard error where `stderr_fails`.
    fn run_checked(
        &self,
        args: &[&str],
        stderr_fails: bool,
    ) -> Result<(String, BoundedOutput), ScontrolError> {
        let command = self.describe(args);
        let out = match run_bounded(self.command(args), self.timeout) {
            Ok(out) => out,
            Err(RunError::Spawn(source)) => return Err(ScontrolError::Spawn { command, source }),
            Err(RunError::Timeout { stderr }) => {
                return Err(ScontrolError::Timeout {
                    command,
                    timeout: self.timeout,
                    stderr,
                })
            }
        };
        if !out.status.success() || (stderr_fails && !out.stderr.trim().is_empty()) {
            return Err(ScontrolError::Failed {
                command,
                status: out.status,
                output: failure_output(&out),
            });
        }
        Ok((command, out))
    }

    /// This scontrol with what is left of `timeout` begun at `deadline`; none when under a
    /// second is left (an update is not started that could not end).
    fn within(&self, deadline: Instant) -> Option<Scontrol> {
        let left = deadline.saturating_duration_since(Instant::now());
        (left >= MIN_LEFT).then(|| self.clone().timeout(left))
    }

    fn describe(&self, args: &[&str]) -> String {
        let mut s = self.program.display().to_string();
        for a in args {
            s.push(' ');
            s.push_str(&format!("{a:?}"));
        }
        s
    }
}

fn failure_output(out: &BoundedOutput) -> String {
    let stderr = one_line(&out.stderr);
    if out.stdout.trim().is_empty() {
        stderr
    } else {
        format!("{stderr}; standard output: {}", one_line(&out.stdout))
    }
}

/// This host's Slurm node name: `override_name` when given; else `SLURMD_NODENAME`,
/// which slurmd sets for its health program (`run_script_health_check` in
/// `src/slurmd/slurmd/slurmd.c`) and prolog; else the host name up to its first `.`, as
/// slurmd takes it when started without `-N` (`gethostname_short` in
/// `src/common/read_config.c`).
pub fn this_node_name(override_name: Option<&str>) -> std::io::Result<String> {
    choose_node_name(
        override_name,
        std::env::var("SLURMD_NODENAME").ok().as_deref(),
        short_hostname,
    )
}

fn choose_node_name(
    override_name: Option<&str>,
    slurmd_nodename: Option<&str>,
    hostname: impl FnOnce() -> std::io::Result<String>,
) -> std::io::Result<String> {
    match override_name.or(slurmd_nodename.filter(|n| !n.is_empty())) {
        Some(n) => Ok(n.to_string()),
        None => hostname(),
    }
}

fn short_hostname() -> std::io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many
    // bytes and we read up to the first NUL within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let full = String::from_utf8_lossy(&buf[..end]).into_owned();
    let short = full.split('.').next().unwrap_or_default().to_string();
    if short.is_empty() {
        return Err(std::io::Error::other("the host name is empty"));
    }
    Ok(short)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reasons_are_one_bounded_line_with_the_prefix() {
        assert_eq!(
            reason(REASON_PREFIX, "mlx5_0 port 1 down"),
            "rocewatch: mlx5_0 port 1 down"
        );
        assert_eq!(
            reason(REASON_PREFIX, "a\nb\tc\u{1b}[31m"),
            "rocewatch: a\\nb\\tc\\u{1b}[31m"
        );
        let long = reason(REASON_PREFIX, &"é".repeat(400));
        assert!(long.len() <= MAX_REASON_BYTES, "{}", long.len());
        assert!(long.starts_with(REASON_PREFIX) && long.ends_with("..."));
    }

    #[test]
    fn a_missing_program_is_named() {
        let e = Scontrol::new("/nonexistent/scontrol")
            .show_node("n1")
            .unwrap_err();
        let t = e.to_string();
        assert!(
            t.contains("/nonexistent/scontrol \"show\" \"node\" \"n1\""),
            "{t}"
        );
        assert!(t.contains("cannot run"), "{t}");
    }

    #[test]
    fn a_failing_command_names_status_and_stderr() {
        // `sh -c` stands in for scontrol: the arguments it gets are scontrol's.
        let e = Scontrol::new("sh")
            .run(&["-c", "echo 'Node n1 not found' >&2; exit 1"])
            .unwrap_err();
        let t = e.to_string();
        assert!(t.contains("exit status: 1"), "{t}");
        assert!(t.contains("Node n1 not found"), "{t}");
    }

    #[test]
    fn a_hanging_command_is_killed_at_its_timeout() {
        let started = Instant::now();
        let e = Scontrol::new("sleep")
            .timeout(Duration::from_millis(200))
            .run(&["30"])
            .unwrap_err();
        assert!(matches!(e, ScontrolError::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// A stand-in for scontrol at `dir/scontrol`: a shell script (it ends the way
    /// `body` says).
    fn fake_scontrol(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("scontrol");
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// The pid `file` holds, once it is there (the script writes it first).
    fn pid_in(file: &Path) -> i32 {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(t) = std::fs::read_to_string(file) {
                if let Ok(p) = t.trim().parse() {
                    return p;
                }
            }
            assert!(Instant::now() < until, "{} never written", file.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Process `pid` is gone or dead (a zombie: killed, left to its reaper), within 2 s.
    fn gone(pid: i32) -> bool {
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|l| l.rsplit_once(')').map(|(_, r)| r.trim().to_string()));
            match state {
                None => return true,
                Some(s) if s.starts_with('Z') || s.starts_with('X') => return true,
                Some(_) if Instant::now() >= until => return false,
                Some(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// A wrapper that does not `exec` scontrol, whose child hangs: the call ends at its
    /// bound (not when the child lets go of the pipes), and the child is killed with it.
    #[test]
    fn a_wrapper_whose_child_hangs_is_killed_with_its_group_at_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let script = fake_scontrol(
            dir.path(),
            &format!(
                "sh -c 'echo $$ > {}; exec sleep 20'\necho never\n",
                pidfile.display()
            ),
        );
        let started = Instant::now();
        let e = Scontrol::new(&script)
            .timeout(Duration::from_secs(1))
            .show_node("n1")
            .unwrap_err();
        let took = started.elapsed();
        assert!(matches!(e, ScontrolError::Timeout { .. }), "{e}");
        assert!(
            took < Duration::from_secs(3),
            "a 1 s bound ended after {took:?}"
        );
        let child = pid_in(&pidfile);
        assert!(gone(child), "the wrapper's child {child} lives on");
    }

    /// What a drained node of ours looks like to `scontrol show node`.
    const DRAINED_BY_US: &str = "NodeName=n1 Arch=x86_64 CoresPerSocket=1\n   State=IDLE+DRAIN ThreadsPerCore=1\n   Reason=rocewatch: mlx5_0 port 1 down [root@2024-01-01T00:00:00]\n";

    /// `show` and `update` share the one bound: a slow controller makes the resume fail
    /// within it rather than take twice as long (slurmd kills a HealthCheckProgram that
    /// runs past its own limit).
    #[test]
    fn a_resume_shows_and_updates_within_one_bound() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls");
        let script = fake_scontrol(
            dir.path(),
            &format!(
                "echo \"$1\" >> {log}\nsleep 1.5\n[ \"$1\" = show ] && printf '{DRAINED_BY_US}'\nexit 0\n",
                log = log.display()
            ),
        );
        let sc = Scontrol::new(&script).timeout(Duration::from_secs(2));
        let started = Instant::now();
        let r = sc.resume_if_ours("n1", REASON_PREFIX);
        let took = started.elapsed();
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(r.is_err(), "{r:?} (calls: {calls:?})");
        assert!(
            took < Duration::from_millis(2500),
            "a 2 s bound ended after {took:?}: {r:?}"
        );
        assert!(!calls.contains("update"), "{calls:?}");
        // The same for the drain (show, then update).
        let started = Instant::now();
        let r = sc.drain_unless_others("n1", "another reason", Duration::from_secs(2));
        let took = started.elapsed();
        assert!(r.is_err(), "{r:?}");
        assert!(took < Duration::from_millis(2500), "{took:?}: {r:?}");
        // Quick enough, both run.
        let fast = fake_scontrol(
            dir.path(),
            &format!("[ \"$1\" = show ] && printf '{DRAINED_BY_US}'\nexit 0\n"),
        );
        let out = Scontrol::new(&fast)
            .timeout(Duration::from_secs(5))
            .resume_if_ours("n1", REASON_PREFIX)
            .unwrap();
        assert!(matches!(out, ResumeOutcome::Resumed { .. }), "{out:?}");
    }

    /// A fake scontrol at `dir/scontrol` that logs each call's arguments to `dir/calls`
    /// (one line a call), answers `show` as `show` says (a shell snippet) and `update` as
    /// `update` says.
    fn logging_scontrol(dir: &Path, show: &str, update: &str) -> PathBuf {
        fake_scontrol(
            dir,
            &format!(
                "echo \"$*\" >> {calls}\ncase \"$1\" in\nshow) {show} ;;\nupdate) {update} ;;\nesac\n",
                calls = dir.join("calls").display()
            ),
        )
    }

    fn calls(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A show that fails however it fails (garbage, another node's record, nothing on
    /// standard output and an error on standard error with exit 0, "not found", a hang)
    /// is tried once more; then the node is drained anyway, and the outcome says that its
    /// reason could not be read: a node health calls unhealthy must not keep taking jobs.
    #[test]
    fn a_node_whose_show_fails_is_drained_anyway_and_says_so() {
        let cases = [
            ("garbage", "echo 'lkasjd lkj'; exit 0"),
            (
                "another node",
                "printf 'NodeName=other Arch=x86_64\\n   State=IDLE\\n'; exit 0",
            ),
            (
                "stderr, exit 0",
                "echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 0",
            ),
            ("not found", "echo 'Node n1 not found'; exit 1"),
            ("hang", "sleep 30"),
        ];
        for (what, show) in cases {
            let dir = tempfile::tempdir().unwrap();
            let sc = Scontrol::new(logging_scontrol(dir.path(), show, "exit 0"));
            let bound = Duration::from_secs(4);
            let started = Instant::now();
            let r = sc.drain_unless_others("n1", "mlx5_0 port 1 down", bound);
            let took = started.elapsed();
            let calls = calls(dir.path());
            let out = r.unwrap_or_else(|e| panic!("{what}: {e} (calls {calls:?})"));
            let said = out.describe("n1");
            assert!(said.contains("could not be read"), "{what}: {said}");
            assert!(said.contains("may have been replaced"), "{what}: {said}");
            assert!(
                said.contains("rocewatch: mlx5_0 port 1 down"),
                "{what}: {said}"
            );
            assert_eq!(
                calls.last().map(String::as_str),
                Some("update nodename=n1 state=drain reason=rocewatch: mlx5_0 port 1 down"),
                "{what}: {calls:?}"
            );
            let shows = calls.iter().filter(|c| c.starts_with("show")).count();
            if what != "hang" {
                assert_eq!(shows, 2, "{what}: the show is tried twice: {calls:?}");
            }
            assert!(
                took < bound + Duration::from_millis(500),
                "{what}: a {bound:?} bound ended after {took:?}"
            );
        }
    }

    /// A show that fails once and then answers is read as usual: an administrator's drain
    /// stays.
    #[test]
    fn a_show_that_fails_once_is_tried_again() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("failed-once");
        let show = format!(
            "if [ -e {f} ]; then printf 'NodeName=n1 Arch=x86_64\\n   State=IDLE+DRAIN\\n   Reason=maintenance [admin@2024-01-01T00:00:00]\\n'; else touch {f}; echo junk; fi; exit 0",
            f = flag.display()
        );
        let sc = Scontrol::new(logging_scontrol(dir.path(), &show, "exit 0"));
        let out = sc
            .drain_unless_others("n1", "mlx5_0 port 1 down", Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e} (calls {:?})", calls(dir.path())));
        assert!(
            matches!(&out, DrainOutcome::Others { reason, .. } if reason == "maintenance"),
            "{out:?}"
        );
        assert_eq!(calls(dir.path()), ["show node n1", "show node n1"]);
    }

    /// A resume never acts on a show that failed: no update.
    #[test]
    fn a_resume_whose_show_fails_does_not_resume() {
        for show in ["echo junk; exit 0", "echo 'Node n1 not found'; exit 1"] {
            let dir = tempfile::tempdir().unwrap();
            let sc = Scontrol::new(logging_scontrol(dir.path(), show, "exit 0"));
            let r = sc.resume_if_ours("n1", REASON_PREFIX);
            assert!(r.is_err(), "{show}: {r:?}");
            let calls = calls(dir.path());
            assert!(!calls.iter().any(|c| c.starts_with("update")), "{calls:?}");
        }
    }

    /// An update that exits 0 yet says an error on standard error (a wrapper that loses
    /// scontrol's status) did not drain: an error naming what it said.
    #[test]
    fn an_update_that_says_an_error_and_exits_0_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let sc = Scontrol::new(logging_scontrol(
            dir.path(),
            "printf 'NodeName=n1 Arch=x86_64\\n   State=IDLE\\n'; exit 0",
            "echo 'slurm_update error: Invalid node name specified' >&2; exit 0",
        ));
        let e = sc
            .drain_unless_others("n1", "mlx5_0 port 1 down", Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Invalid node name specified"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let sc = Scontrol::new(logging_scontrol(
            dir.path(),
            &format!("printf '{DRAINED_BY_US}'; exit 0"),
            "echo 'slurm_update error: Invalid node name specified' >&2; exit 0",
        ));
        let e = sc
            .resume_if_ours("n1", REASON_PREFIX)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Invalid node name specified"), "{e}");
    }

    /// A record cut at the bound on what is kept is not read: the reason past the cut
    /// (an administrator's) would be missed.
    #[test]
    fn a_show_cut_at_the_bound_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let show = format!(
            "printf '{DRAINED_BY_US}'; printf '   Comment='; head -c {} /dev/zero | tr '\\0' A; echo; exit 0",
            rocewatch_process::KEEP_BYTES + 10
        );
        let sc = Scontrol::new(logging_scontrol(dir.path(), &show, "exit 0"));
        let e = sc.show_node("n1").map(|n| n.name).unwrap_err().to_string();
        assert!(e.contains("cut"), "{e}");
        let r = sc.resume_if_ours("n1", REASON_PREFIX);
        assert!(r.is_err(), "{r:?}");
        assert!(!calls(dir.path()).iter().any(|c| c.starts_with("update")));
    }

    /// A node name that scontrol would read as several nodes or as another argument is
    /// refused before any scontrol runs.
    #[test]
    fn a_node_name_that_is_not_one_node_is_refused_before_any_call() {
        for name in [
            "",
            "n[1-4]",
            "n1,n2",
            "n1 state=resume",
            "-h",
            "ALL",
            "n1\n",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let sc = Scontrol::new(logging_scontrol(dir.path(), "exit 1", "exit 0"));
            let e = sc
                .drain_unless_others(name, "x", Duration::from_secs(5))
                .unwrap_err();
            assert!(e.to_string().contains("node name"), "{name:?}: {e}");
            assert!(sc.resume_if_ours(name, REASON_PREFIX).is_err(), "{name:?}");
            assert!(sc.drain(name, "x").is_err(), "{name:?}");
            assert!(
                calls(dir.path()).is_empty(),
                "{name:?}: {:?}",
                calls(dir.path())
            );
        }
    }

    #[test]
    fn the_environment_reaches_scontrol() {
        let out = Scontrol::new("sh")
            .env("SLURM_CONF", "/x/slurm.conf")
            .run(&["-c", "printf %s \"$SLURM_CONF\""])
            .unwrap();
        assert_eq!(out, "/x/slurm.conf");
    }

    #[test]
    fn this_node_is_named() {
        let host = || Ok("host".to_string());
        assert_eq!(
            choose_node_name(Some("gpu017"), Some("n1"), host).unwrap(),
            "gpu017"
        );
        assert_eq!(choose_node_name(None, Some("n1"), host).unwrap(), "n1");
        assert_eq!(choose_node_name(None, Some(""), host).unwrap(), "host");
        assert_eq!(choose_node_name(None, None, host).unwrap(), "host");
        let n = short_hostname().unwrap();
        assert!(!n.is_empty() && !n.contains('.'), "{n}");
    }

    proptest! {
        #[test]
        fn any_reason_is_one_line_bounded_and_prefixed(text in "\\PC{0,300}|.{0,300}") {
            let r = reason(REASON_PREFIX, &text);
            prop_assert!(r.len() <= MAX_REASON_BYTES);
            prop_assert!(r.starts_with(REASON_PREFIX));
            prop_assert!(!r.chars().any(char::is_control), "{:?}", r);
        }
    }
}
