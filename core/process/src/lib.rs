//! Running an outside program within a bound, as a process group: whatever it starts is
//! killed with it and nothing it leaves holds the caller past the bound.
//!
//! Every outside program rocewatch runs and waits for goes through [`run_bounded`]:
//! `scontrol` (rocewatch-slurm), `nft`, `iptables-save`, `ip6tables-save`, `ping` and
//! `systemctl show` (rocewatch-doctor's `run_tool`), `lldpcli` and `tcpdump -D`
//! (the agent). Two run otherwise, for what they are: the capture's `tcpdump`, which
//! streams for as long as the capture lasts and is stopped by `--duration`, `--count` or a
//! signal (with a parent-death signal of its own); and remediation's `exec` action, which
//! runs in the agent's async runtime with its payload on standard input, in a session of
//! its own, bounded and reaped by the dispatcher.
//!
//! `scontrol` is often a site's wrapper script that does not `exec` the real one; a
//! `lldpcli`, `nft` or `systemctl` can hang on a daemon that does not answer. Killing only
//! the child leaves the wrapper's own child running, holding the pipes the output is read
//! from, so a bound enforced on the child alone is enforced only when that grandchild ends.
//! Hence:
//!
//! - the program starts in a process group of its own (`setpgid(0, 0)`, as Slurm's
//!   `run_command` does for the scripts slurmd runs), with `PR_SET_PDEATHSIG` so that it
//!   dies with the thread that started it (slurmd kills a HealthCheckProgram's group on
//!   its own timeout, and our program is no longer in that group);
//! - at the bound the whole group gets SIGKILL at once, without a SIGTERM first: these
//!   programs are queries and one-shot updates with nothing to clean up, a wrapper may
//!   ignore SIGTERM (`trap '' TERM`), and any grace would be spent past the bound;
//! - the leader's exit is observed without reaping it (`waitid(WNOWAIT)`), so its pid,
//!   which names the group, cannot be given to another process while the group is killed;
//!   what the program left in its group when it exited is killed too;
//! - the group is then reaped: the leader, and what the caller adopted from it when it is
//!   a child subreaper (the agent is one once an `exec` action ran);
//! - the output is read by two threads, and waited for only [`READ_GRACE`] after the group
//!   ended: a process that left the group (`setsid`) and still holds a pipe keeps its
//!   reader thread, not the caller;
//! - of each stream the first [`KEEP_BYTES`] are kept and the rest is read and discarded
//!   (counted in [`BoundedOutput::stdout_dropped`] and `stderr_dropped`): these programs
//!   run as root on compute nodes, and a broken wrapper or a `Comment=` of gigabytes
//!   (2.96 GB resident for a 1.5 GB line, before this bound) must not exhaust their memory.
//!   Reading on rather than closing the pipe lets the program end as it would (no
//!   SIGPIPE), so its exit status still means what it says.
//!
//! A process that cannot be killed (uninterruptible sleep) is waited for up to
//! [`REAP_WITHIN`], then left to be reaped by whoever reaps orphans.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the output is waited for once the group has ended.
pub const READ_GRACE: Duration = Duration::from_millis(500);

/// How long a killed group is waited for to be reaped.
pub const REAP_WITHIN: Duration = Duration::from_secs(2);

/// How much of each stream is kept: far above what the programs run here print
/// (`scontrol show node` of one node is about 1 KiB; `lldpcli` of a host, tens of KiB).
pub const KEEP_BYTES: usize = 1 << 20;

/// What a bounded run gave.
#[derive(Debug)]
pub struct BoundedOutput {
    pub status: ExitStatus,
    /// The first [`KEEP_BYTES`] of standard output.
    pub stdout: String,
    /// The first [`KEEP_BYTES`] of standard error.
    pub stderr: String,
    /// Bytes of standard output read past [`KEEP_BYTES`] and discarded.
    pub stdout_dropped: u64,
    /// Bytes of standard error read past [`KEEP_BYTES`] and discarded.
    pub stderr_dropped: u64,
}

impl BoundedOutput {
    /// Whether either stream was cut at [`KEEP_BYTES`].
    pub fn cut(&self) -> bool {
        self.stdout_dropped > 0 || self.stderr_dropped > 0
    }
}

/// Why a bounded run gave nothing.
#[derive(Debug)]
pub enum RunError {
    Spawn(std::io::Error),
    /// Killed at the deadline, with its process group; what it had written to standard
    /// error, on one line.
    Timeout {
        stderr: String,
    },
}

/// What a reader kept of its stream, and how much more it discarded.
#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    dropped: u64,
}

impl Kept {
    /// Keep what fits under `keep`; count the rest.
    fn add(&mut self, chunk: &[u8], keep: usize) {
        let room = keep.saturating_sub(self.bytes.len()).min(chunk.len());
        self.bytes.extend_from_slice(&chunk[..room]);
        self.dropped += (chunk.len() - room) as u64;
    }
}

/// One stream of the program, read by a thread of its own until its end.
struct Reader {
    got: Arc<Mutex<Kept>>,
    done: mpsc::Receiver<()>,
}

impl Reader {
    /// Read `pipe` to its end, keeping its first `keep` bytes.
    fn start(pipe: Option<impl Read + Send + 'static>, keep: usize) -> Reader {
        let got = Arc::new(Mutex::new(Kept::default()));
        let (tx, done) = mpsc::channel();
        let into = Arc::clone(&got);
        std::thread::spawn(move || {
            if let Some(mut p) = pipe {
                let mut buf = [0u8; 8192];
                loop {
                    match p.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => lock(&into).add(&buf[..n], keep),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => break,
                    }
                }
            }
            let _ = tx.send(());
        });
        Reader { got, done }
    }

    /// What was kept by `until` (all of it, when the stream ended by then), and how many
    /// bytes were discarded past the bound.
    fn take(self, until: Instant) -> (String, u64) {
        let _ = self
            .done
            .recv_timeout(until.saturating_duration_since(Instant::now()));
        let got = lock(&self.got);
        (
            String::from_utf8_lossy(&got.bytes).into_owned(),
            got.dropped,
        )
    }
}

fn lock(m: &Mutex<Kept>) -> std::sync::MutexGuard<'_, Kept> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `cmd` to its end or `timeout`, whichever comes first (then kill its process group),
/// with its output captured (the first [`KEEP_BYTES`] of each stream); see the module doc
/// for what is killed and reaped.
pub fn run_bounded(cmd: Command, timeout: Duration) -> Result<BoundedOutput, RunError> {
    run_bounded_keeping(cmd, timeout, KEEP_BYTES)
}

/// [`run_bounded`], keeping the first `keep` bytes of each stream.
pub fn run_bounded_keeping(
    mut cmd: Command,
    timeout: Duration,
    keep: usize,
) -> Result<BoundedOutput, RunError> {
    // SAFETY: getpid only reads this process's id.
    let parent = unsafe { libc::getpid() };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: prctl, getppid and _exit are async-signal-safe; the closure touches no
    // memory of the parent's but `parent`, a copied integer.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            // The parent died before the line above: nothing would kill this one.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let deadline = Instant::now() + timeout;
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    let out = Reader::start(child.stdout.take(), keep);
    let err = Reader::start(child.stderr.take(), keep);
    let pid = child.id() as libc::pid_t;
    let exited = exited_by(pid, deadline);
    // The leader is unreaped (alive or a zombie): its pid still names the group. Kill
    // what is left of it, the leader too when the bound ran out.
    // SAFETY: killpg only sends a signal, to the group this call started.
    unsafe { libc::killpg(pid, libc::SIGKILL) };
    let status = reap_group(pid);
    // Reaped through waitpid above; std's handle has nothing left to do.
    drop(child);
    let read_until = Instant::now() + READ_GRACE;
    if !exited {
        return Err(RunError::Timeout {
            stderr: one_line(&err.take(read_until).0),
        });
    }
    let (stdout, stdout_dropped) = out.take(read_until);
    let (stderr, stderr_dropped) = err.take(read_until);
    match status {
        Some(status) => Ok(BoundedOutput {
            status,
            stdout,
            stderr,
            stdout_dropped,
            stderr_dropped,
        }),
        // Exited, yet not reaped within REAP_WITHIN: someone else waited for it (a
        // SIGCHLD handler that reaps every child). Its status is lost.
        None => Err(RunError::Spawn(std::io::Error::other(
            "exited, but its exit status was taken by another waiter",
        ))),
    }
}

/// Whether `pid` (a child) exited by `deadline`; it is left unreaped.
fn exited_by(pid: libc::pid_t, deadline: Instant) -> bool {
    let mut nap = Duration::from_millis(1);
    loop {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter; WNOWAIT only reports.
        let (r, info_pid) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            (r, info.si_pid())
        };
        if r == 0 && info_pid == pid {
            return true;
        }
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // ECHILD: reaped by someone else; nothing of it left to wait for.
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Reap the killed group led by `pid`: the leader (its exit status), and what the caller
/// adopted from it, until none is left or [`REAP_WITHIN`] passed.
fn reap_group(pid: libc::pid_t) -> Option<ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let until = Instant::now() + REAP_WITHIN;
    let mut leader = None;
    loop {
        let mut raw = 0;
        // SAFETY: waitpid on our own group's children only; WNOHANG never blocks.
        let r = unsafe { libc::waitpid(-pid, &mut raw, libc::WNOHANG) };
        if r == pid {
            leader = Some(ExitStatus::from_raw(raw));
            continue;
        }
        if r > 0 {
            continue;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        // ECHILD: none of the group is our child any more.
        if r < 0 || Instant::now() >= until {
            return leader;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `s` trimmed, its lines joined with ` | ` (or a word saying it was empty).
pub fn one_line(s: &str) -> String {
    let t = s.trim();
    if t.is_empty() {
        "(no standard error)".to_string()
    } else {
        t.replace('\n', " | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    /// Process `pid` is gone or dead (a zombie: killed, left to its reaper), within 2 s.
    fn gone(pid: &str) -> bool {
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
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

    #[test]
    fn output_and_status_of_a_program_that_ends() {
        let out = run_bounded(
            sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str()),
            ("out\n", "err\n")
        );
    }

    /// What a program leaves in its group when it exits (here holding standard output)
    /// is killed, and the output is not waited for until that one ends.
    #[test]
    fn what_an_ended_program_left_in_its_group_is_killed() {
        let started = Instant::now();
        let out = run_bounded(sh("sleep 20 & echo $!; exit 0"), Duration::from_secs(10)).unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(
            gone(&out.stdout),
            "the left-behind {} lives on",
            out.stdout.trim()
        );
    }

    /// A process that left the group (`setsid`) and holds the pipes keeps the caller no
    /// longer than the bound and the grace.
    #[test]
    fn a_process_that_left_the_group_does_not_hold_the_caller() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("escaped.pid");
        let started = Instant::now();
        let e = run_bounded(
            sh(&format!(
                "setsid sh -c 'echo $$ > {}; exec sleep 5' & sleep 20",
                pid.display()
            )),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(matches!(e, RunError::Timeout { .. }), "{e:?}");
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(500) + READ_GRACE + Duration::from_secs(1),
            "{took:?}"
        );
        // It left the group, so it lives on: this test ends it, by its pid.
        let escaped: i32 = std::fs::read_to_string(&pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SAFETY: kill only sends a signal, to the process this test started.
        unsafe { libc::kill(escaped, libc::SIGKILL) };
    }

    /// A program that prints more than a caller could hold (a broken wrapper, a
    /// `Comment=` of gigabytes) costs at most what is kept of each stream; the rest is
    /// read and discarded, so the program still ends, and the result says so.
    #[test]
    fn what_is_kept_of_each_stream_is_bounded() {
        let total = 8usize << 20;
        let out = run_bounded(
            sh(&format!(
                "head -c {total} /dev/zero | tr '\\0' A; echo err >&2; exit 0"
            )),
            Duration::from_secs(30),
        )
        .unwrap();
        assert!(out.status.success(), "{:?}", out.status);
        assert!(
            out.stdout.len() <= 1 << 20,
            "kept {} bytes of standard output",
            out.stdout.len()
        );
        assert_eq!(out.stdout.len(), KEEP_BYTES);
        assert_eq!(out.stdout_dropped, (total - KEEP_BYTES) as u64);
        assert_eq!((out.stderr.as_str(), out.stderr_dropped), ("err\n", 0));
        assert!(out.cut());
        // Under the bound, nothing is cut.
        let out = run_bounded_keeping(sh("printf 12345"), Duration::from_secs(10), 5).unwrap();
        assert_eq!((out.stdout.as_str(), out.cut()), ("12345", false));
        let out = run_bounded_keeping(sh("printf 123456"), Duration::from_secs(10), 5).unwrap();
        assert_eq!((out.stdout.as_str(), out.stdout_dropped), ("12345", 1));
    }

    #[test]
    fn a_program_that_cannot_start_is_a_spawn_error() {
        let e = run_bounded(Command::new("/nonexistent/x"), Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, RunError::Spawn(_)), "{e:?}");
    }
}
