//! Every process an `exec` action starts, until the last one is killed and reaped.
//!
//! - The command runs in a session of its own: its leader's pid names the session and the
//!   process group of whatever does not call `setsid`.
//! - The agent is a child subreaper (`PR_SET_CHILD_SUBREAPER`, kernel/sys.c), set before
//!   the first command starts: when a process of an action ends, its children are adopted
//!   by the agent, not by init (kernel/exit.c `find_new_reaper`). Nothing an action starts
//!   leaves the agent's tree while the agent runs, `setsid` or not.
//! - When the action ends (its command exited, its timeout, the agent's shutdown), its
//!   processes are killed, and those the agent adopted are reaped: the command's session
//!   and group; every descendant of them (what called `setsid` while its parent lives);
//!   and what the agent adopted from it (its children in another session than the agent's
//!   that lead no running command). One adopted in the action's session is the action's.
//!   One that called `setsid` carries no mark of the action it came from: it is the
//!   ending action's unless another command still running started before it, and then
//!   it is left to the last of those to end (at shutdown, every action ends).
//!
//! The processes are read from `/proc/<pid>/stat` (fs/proc/array.c `do_task_stat`: pid,
//! `(comm)`, state, ppid, pgrp, session, ..., start time as field 22). A process is
//! signalled through a pidfd checked against the start time read before (`kill` where the
//! kernel has no `pidfd_open`, before 5.3), so a pid reused in between is never hit. The
//! kill repeats until a pass finds nothing new: a process cannot fork once a fatal signal
//! is pending (kernel/fork.c `copy_process`), and what it forked before is found by the
//! next pass, as a descendant, in the session, or adopted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where the processes are read: the live host's, since they are the agent's own children
/// and their descendants (no other tree could hold them).
const PROC: &str = "/proc";

/// How long an ended action's killed processes are waited for to be reaped; one that is
/// still there then (uninterruptible sleep) is named in the log and reaped by a later
/// sweep.
const REAP_WITHIN: Duration = Duration::from_secs(2);

/// One process as `/proc/<pid>/stat` has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    /// Exited, waiting to be reaped (`Z`), or being released (`X`).
    pub dead: bool,
    /// Clock ticks after boot: with the pid, names the process (pids are reused).
    pub start: u64,
}

/// Why a `/proc/<pid>/stat` line could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum StatError {
    #[error("no \"PID (COMM)\" at the start of {0:?}")]
    NoComm(String),
    #[error("field {field} missing after the command name")]
    Missing { field: &'static str },
    #[error("field {field}: {value:?} is not a number")]
    NotANumber { field: &'static str, value: String },
}

/// Parse one `/proc/<pid>/stat` line. The command name may hold spaces and parentheses:
/// it ends at the last `)`.
pub(super) fn parse_stat(line: &str) -> Result<Proc, StatError> {
    let no_comm = || StatError::NoComm(line.chars().take(40).collect());
    let (head, rest) = line.split_once(" (").ok_or_else(no_comm)?;
    let (_, after) = rest.rsplit_once(')').ok_or_else(no_comm)?;
    let fields: Vec<&str> = after.split_ascii_whitespace().collect();
    let field = |i: usize, name: &'static str| {
        fields
            .get(i)
            .copied()
            .ok_or(StatError::Missing { field: name })
    };
    fn number<T: std::str::FromStr>(field: &'static str, value: &str) -> Result<T, StatError> {
        value.parse().map_err(|_| StatError::NotANumber {
            field,
            value: value.chars().take(40).collect(),
        })
    }
    // After the name: state (field 3), ppid, pgrp, session, ... start time (field 22).
    let state = field(0, "state")?;
    Ok(Proc {
        pid: number("pid", head.trim())?,
        ppid: number("ppid", field(1, "ppid")?)?,
        pgid: number("pgrp", field(2, "pgrp")?)?,
        sid: number("session", field(3, "session")?)?,
        dead: matches!(state, "Z" | "X" | "x"),
        start: number("starttime", field(19, "starttime")?)?,
    })
}

/// Every process `proc_root` shows; one that ends while it is read is left out, and so is
/// one whose line does not parse (logged: it would be a kernel that writes another format).
fn snapshot(proc_root: &Path) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(line) = std::fs::read_to_string(proc_root.join(pid).join("stat")) else {
            continue;
        };
        match parse_stat(&line) {
            Ok(p) => out.push(p),
            Err(e) => tracing::debug!(pid, "cannot read {}/{pid}/stat: {e}", proc_root.display()),
        }
    }
    out
}

/// The agent, as its children see it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Agent {
    pub pid: i32,
    pub sid: i32,
}

impl Agent {
    fn me() -> Agent {
        // SAFETY: getpid and getsid(0) only read the calling process's ids.
        unsafe {
            Agent {
                pid: libc::getpid(),
                sid: libc::getsid(0),
            }
        }
    }
}

/// A command's leader: its pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Leader {
    pub pid: i32,
    pub start: u64,
}

/// The processes of the action led by `leader` in `procs` (the leader among them while it
/// is there). `leaders` are every command leader the agent has not yet reaped, and
/// `running` those of the other actions still running.
pub(super) fn of_action(
    procs: &[Proc],
    agent: Agent,
    leader: Leader,
    leaders: &BTreeSet<i32>,
    running: &[Leader],
) -> Vec<Proc> {
    // The leader's pid names the session and group only while it is not another
    // process's pid (a leader reaped, its number given again).
    let reused = procs
        .iter()
        .any(|p| p.pid == leader.pid && p.start != leader.start);
    let in_session = |p: &Proc| !reused && (p.sid == leader.pid || p.pgid == leader.pid);
    let others_session = |p: &Proc| running.iter().any(|l| p.sid == l.pid || p.pgid == l.pid);
    let adopted = |p: &Proc| {
        p.ppid == agent.pid
            && p.sid != agent.sid
            && !leaders.contains(&p.pid)
            && !others_session(p)
            && !running.iter().any(|l| l.start <= p.start)
    };
    let mut members: BTreeSet<i32> = procs
        .iter()
        .filter(|p| in_session(p) || adopted(p) || (p.pid == leader.pid && !reused))
        .map(|p| p.pid)
        .collect();
    // Their descendants, whatever session they moved to.
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut todo: Vec<i32> = members.iter().copied().collect();
    while let Some(pid) = todo.pop() {
        for &c in children.get(&pid).into_iter().flatten() {
            if c != agent.pid && members.insert(c) {
                todo.push(c);
            }
        }
    }
    procs
        .iter()
        .filter(|p| members.contains(&p.pid))
        .copied()
        .collect()
}

/// Every process of every action, and everything the agent adopted from another session
/// (a fast exit: every action ends now).
pub(super) fn of_every_action(procs: &[Proc], agent: Agent, leaders: &[Leader]) -> Vec<Proc> {
    let pids: BTreeSet<i32> = leaders.iter().map(|l| l.pid).collect();
    let mut all: BTreeMap<i32, Proc> = BTreeMap::new();
    for l in leaders {
        all.extend(
            of_action(procs, agent, *l, &pids, &[])
                .into_iter()
                .map(|p| (p.pid, p)),
        );
    }
    all.into_values().collect()
}

/// The commands started and not yet reaped, by leader pid; `true` while their action runs.
static LEADERS: Mutex<BTreeMap<Leader, bool>> = Mutex::new(BTreeMap::new());

fn leaders() -> std::sync::MutexGuard<'static, BTreeMap<Leader, bool>> {
    LEADERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Become a child subreaper, once; a failure is logged once (what an action leaves behind
/// after `setsid` would then go to init).
fn become_subreaper() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) only sets a flag of this process.
        let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if r != 0 {
            tracing::warn!(
                "cannot become a child subreaper ({}): what a remediation command starts and leaves behind in another session is adopted by init and may outlive the action",
                std::io::Error::last_os_error()
            );
        }
    });
}

/// The start time of process `pid` now, if it is there.
fn start_of(pid: i32) -> Option<u64> {
    let line = std::fs::read_to_string(Path::new(PROC).join(pid.to_string()).join("stat")).ok()?;
    parse_stat(&line).ok().map(|p| p.start)
}

/// SIGKILL `p`, if the process with its pid is still the one that started at `p.start`.
fn kill(p: &Proc) {
    // SAFETY: pidfd_open only opens a descriptor; it is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid, 0) } as i32;
    if fd < 0 {
        // No pidfd (before 5.3): the check and the kill are two steps.
        if start_of(p.pid) == Some(p.start) {
            // SAFETY: kill only sends a signal.
            unsafe { libc::kill(p.pid, libc::SIGKILL) };
        }
        return;
    }
    // The descriptor names one process for good: check it is the one read before.
    if start_of(p.pid) == Some(p.start) {
        // SAFETY: fd is a pidfd opened above; no siginfo.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
    }
    // SAFETY: fd was opened above and is not used after.
    unsafe { libc::close(fd) };
}

/// Reap `p`, a dead child of the agent that leads no command (its pid cannot be given to
/// another process before it is reaped, and nobody else waits for it).
fn reap(p: &Proc) {
    let mut status = 0;
    // SAFETY: waitpid on one pid with WNOHANG only reaps that child if it has exited.
    unsafe { libc::waitpid(p.pid, &mut status, libc::WNOHANG) };
}

/// One pass over the action led by `leader`: kill what was not killed yet, reap what the
/// agent adopted and is dead. Returns how many were newly killed and the processes of the
/// action that are still to end or to be reaped (the leader aside: it is its runner's to
/// reap).
fn pass(leader: Leader, killed: &mut BTreeSet<(i32, u64)>) -> (usize, Vec<Proc>) {
    let mut reg = leaders();
    let agent = Agent::me();
    let procs = snapshot(Path::new(PROC));
    // Leaders reaped since (not there, or their pid is another process's now) are gone.
    reg.retain(|l, _| *l == leader || procs.iter().any(|p| p.pid == l.pid && p.start == l.start));
    let pids: BTreeSet<i32> = reg.keys().map(|l| l.pid).collect();
    let running: Vec<Leader> = reg
        .iter()
        .filter(|(l, run)| **run && **l != leader)
        .map(|(l, _)| *l)
        .collect();
    let ours = |p: &Proc| p.ppid == agent.pid && !pids.contains(&p.pid);
    let mut new = 0;
    let mut left = Vec::new();
    for p in of_action(&procs, agent, leader, &pids, &running) {
        // A dead thread-group leader may still have live threads: every one is killed.
        if killed.insert((p.pid, p.start)) {
            kill(&p);
            new += 1;
        }
        if p.dead && ours(&p) {
            reap(&p);
        } else if p.pid != leader.pid && (!p.dead || ours(&p)) {
            left.push(p);
        }
    }
    (new, left)
}

/// Kill every process of the action led by `leader` (passes until one finds nothing
/// new); with `wait`, then reap what the agent adopted, up to [`REAP_WITHIN`].
fn sweep(leader: Leader, action: &str, wait: bool) {
    let mut killed = BTreeSet::new();
    let deadline = Instant::now() + REAP_WITHIN;
    loop {
        let (new, left) = pass(leader, &mut killed);
        if left.is_empty() || (new == 0 && !wait) {
            return;
        }
        if new > 0 {
            continue;
        }
        if Instant::now() >= deadline {
            let pids: Vec<i32> = left.iter().map(|p| p.pid).collect();
            tracing::warn!(action, "processes {pids:?} of the action were killed and have not ended within {}s (uninterruptible sleep?); they are reaped when they do", REAP_WITHIN.as_secs());
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A command started by [`spawn`], until its action ended and every process of it was
/// killed ([`Command::end`], or when dropped: on timeout, at shutdown).
pub(super) struct Command {
    leader: Leader,
    action: String,
    ended: bool,
}

/// Start a command through `spawn` (which must put it in a session of its own), the agent
/// a child subreaper, and register its leader. Its start and the search for what an
/// ending action adopted exclude each other: no new leader is taken for an orphan.
pub(super) fn spawn<C>(
    action: &str,
    spawn: impl FnOnce() -> std::io::Result<C>,
    pid: impl Fn(&C) -> Option<u32>,
) -> std::io::Result<(C, Option<Command>)> {
    become_subreaper();
    let mut reg = leaders();
    let child = spawn()?;
    let command = pid(&child).map(|pid| {
        let pid = pid as i32;
        // Read before the leader can be reaped (nothing waits for it yet); 0 when it cannot
        // be read: older than everything, so it holds what it may own.
        let leader = Leader {
            pid,
            start: start_of(pid).unwrap_or(0),
        };
        reg.insert(leader, true);
        Command {
            leader,
            action: action.to_string(),
            ended: false,
        }
    });
    Ok((child, command))
}

impl Command {
    /// The action ended: kill every process of it, reap what the agent adopted.
    pub(super) async fn end(mut self) {
        self.ended = true;
        leaders().insert(self.leader, false);
        let (leader, action) = (self.leader, self.action.clone());
        let _ = tokio::task::spawn_blocking(move || sweep(leader, &action, true)).await;
    }
}

impl Drop for Command {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Not ended by its command (a timeout, the runtime going away): kill now, reap in
        // the background.
        leaders().insert(self.leader, false);
        sweep(self.leader, &self.action, false);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (leader, action) = (self.leader, self.action.clone());
            rt.spawn_blocking(move || sweep(leader, &action, true));
        }
    }
}

/// The agent exits at once: kill every process of every action (no reaping: the agent's
/// children go to init).
pub(super) fn kill_every_action() {
    let reg = leaders();
    let all: Vec<Leader> = reg.keys().copied().collect();
    let mut killed = BTreeSet::new();
    for _ in 0..8 {
        let mut new = 0;
        for p in of_every_action(&snapshot(Path::new(PROC)), Agent::me(), &all) {
            if killed.insert((p.pid, p.start)) {
                kill(&p);
                new += 1;
            }
        }
        if new == 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stat(
        pid: i32,
        comm: &str,
        state: char,
        ppid: i32,
        pgid: i32,
        sid: i32,
        start: u64,
    ) -> String {
        format!("{pid} ({comm}) {state} {ppid} {pgid} {sid} 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 {start} 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n")
    }

    #[test]
    fn a_stat_line_is_read_whatever_the_command_name_holds() {
        let p = parse_stat(&stat(4242, "sleep", 'S', 1, 4242, 4242, 777)).unwrap();
        assert_eq!(
            p,
            Proc {
                pid: 4242,
                ppid: 1,
                pgid: 4242,
                sid: 4242,
                dead: false,
                start: 777
            }
        );
        // A name may hold spaces and parentheses: it ends at the last `)`.
        let p = parse_stat(&stat(7, "a) (b c) Z 9", 'Z', 3, 4, 5, 6)).unwrap();
        assert_eq!(
            (p.pid, p.ppid, p.pgid, p.sid, p.dead, p.start),
            (7, 3, 4, 5, true, 6)
        );
    }

    #[test]
    fn a_stat_line_that_is_not_one_names_what_is_wrong() {
        assert!(matches!(
            parse_stat("4242 sleep S 1"),
            Err(StatError::NoComm(_))
        ));
        assert_eq!(
            parse_stat("1 (init) S 0 1 1").unwrap_err(),
            StatError::Missing { field: "starttime" }
        );
        assert_eq!(
            parse_stat(&stat(1, "x", 'S', 0, 1, 1, 5).replace(" 0 1 1 0", " zero 1 1 0"))
                .unwrap_err(),
            StatError::NotANumber {
                field: "ppid",
                value: "zero".into()
            }
        );
        let e = parse_stat("5 (y) S 1 2 3").unwrap_err().to_string();
        assert!(e.contains("starttime"), "{e}");
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_refused_without_a_panic(text in ".{0,300}") {
            let _ = parse_stat(&text);
        }

        #[test]
        fn any_command_name_reads_back(comm in "[^\\x00]{0,16}", pid in 1i32..i32::MAX, start: u64) {
            let p = parse_stat(&stat(pid, &comm, 'R', 2, 3, 4, start)).unwrap();
            prop_assert_eq!((p.pid, p.ppid, p.pgid, p.sid, p.start), (pid, 2, 3, 4, start));
        }
    }

    const AGENT: Agent = Agent { pid: 100, sid: 1 };

    fn p(pid: i32, ppid: i32, pgid: i32, sid: i32, start: u64) -> Proc {
        Proc {
            pid,
            ppid,
            pgid,
            sid,
            dead: false,
            start,
        }
    }

    fn pids(v: Vec<Proc>) -> Vec<i32> {
        v.into_iter().map(|p| p.pid).collect()
    }

    #[test]
    fn an_action_is_its_session_its_descendants_and_what_the_agent_adopted_from_it() {
        let leader = Leader {
            pid: 200,
            start: 50,
        };
        let procs = [
            p(1, 0, 1, 1, 0),          // init
            p(100, 1, 100, 1, 1),      // the agent
            p(150, 100, 1, 1, 40),     // a child of the agent in its session (a plugin's `cp`)
            p(200, 100, 200, 200, 50), // the leader
            p(201, 200, 200, 200, 51), // its child
            p(202, 201, 202, 202, 52), // setsid, its parent alive
            p(203, 202, 203, 203, 53), // below it, setsid again
            p(204, 100, 204, 200, 54), // adopted, in the session (setpgid only)
            p(205, 100, 205, 205, 55), // adopted after setsid
            p(206, 205, 206, 205, 56), // its child
            p(300, 1, 300, 300, 60),   // someone else's
        ];
        let all: BTreeSet<i32> = [200].into();
        assert_eq!(
            pids(of_action(&procs, AGENT, leader, &all, &[])),
            [200, 201, 202, 203, 204, 205, 206]
        );
    }

    #[test]
    fn what_another_running_action_may_own_is_left_to_it() {
        let (a, b) = (
            Leader {
                pid: 200,
                start: 50,
            },
            Leader {
                pid: 400,
                start: 70,
            },
        );
        let procs = [
            p(100, 1, 100, 1, 1),
            p(200, 100, 200, 200, 50),
            p(400, 100, 400, 400, 70),
            p(401, 400, 400, 400, 71), // b's child
            p(402, 100, 402, 400, 72), // adopted, in b's session
            p(205, 100, 205, 205, 60), // adopted after setsid, before b started: a's
            p(206, 100, 206, 206, 80), // adopted after setsid, after b started: a's or b's
        ];
        let all: BTreeSet<i32> = [200, 400].into();
        assert_eq!(pids(of_action(&procs, AGENT, a, &all, &[b])), [200, 205]);
        // Once a has ended, b takes what is left of both.
        assert_eq!(
            pids(of_action(&procs, AGENT, b, &all, &[])),
            [400, 401, 402, 205, 206]
        );
        // Nothing of a running leader is ever taken, nor the leader itself.
        assert!(!pids(of_action(&procs, AGENT, a, &all, &[])).contains(&400));
        // A fast exit takes everything.
        assert_eq!(
            pids(of_every_action(&procs, AGENT, &[a, b])),
            [200, 205, 206, 400, 401, 402]
        );
    }

    #[test]
    fn a_reaped_leaders_pid_given_to_another_process_names_nothing() {
        let leader = Leader {
            pid: 200,
            start: 50,
        };
        let procs = [
            p(100, 1, 100, 1, 1),
            p(200, 1, 200, 200, 90), // pid 200 again, someone else's session now
            p(201, 200, 200, 200, 91),
        ];
        assert!(of_action(&procs, AGENT, leader, &[200].into(), &[]).is_empty());
    }
}
