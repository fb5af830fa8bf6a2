//! What an action receives (the breach) and the `exec` action: a command, never through a
//! shell, with the breach in `ROCEWATCH_*` variables and as JSON on standard input
//! (`ROCEWATCH_WORKLOADS`: the workloads on the port, comma-separated, most QPs first).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::config::{ActionKind, Event};
use crate::processes;
use crate::workloads::Workload;

/// What the action receives (stdin of `exec`, body of `webhook`).
#[derive(Debug, Clone, Serialize)]
pub struct Breach {
    pub rule: String,
    pub metric: String,
    pub event: Event,
    pub action: String,
    pub severity: String,
    pub labels: BTreeMap<String, String>,
    pub value: Option<f64>,
    /// Recent values, oldest first: (seconds ago, value).
    pub recent: Vec<(f64, f64)>,
    pub dry_run: bool,
    /// The workloads holding QPs on the port the labels name, most QPs first (at most
    /// [`crate::MAX_WORKLOADS`]): absent when the labels name no `rdma.device` or rocewatch has
    /// no resources series (unknown), `[]` when nobody holds a QP there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workloads: Option<Vec<Workload>>,
    /// Workloads on the port beyond the list, left out.
    #[serde(skip_serializing_if = "is_zero")]
    pub workloads_truncated: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What an action would do, for dry runs and the audit log.
pub fn describe(kind: &ActionKind) -> String {
    match kind {
        ActionKind::Log {} => "log the breach".into(),
        ActionKind::QosApply {} => {
            "re-apply [[qos.desired]] to the settings the rule's labels select (snapshot, audit, undo on failure)".into()
        }
        ActionKind::Plugin { plugin } => format!("call remediation plugin {plugin:?}"),
        ActionKind::Exec { command } => format!("run {command:?}"),
        ActionKind::Webhook { url, .. } => format!("POST the breach to {url}"),
        ActionKind::SlurmDrain { node, scontrol } => format!(
            "drain {} in Slurm through {scontrol} (unless someone else set its state)",
            rocewatch_slurm::this_node_name(node.as_deref())
                .unwrap_or_else(|e| format!("this node (its name: {e})"))
        ),
    }
}

/// The drain reason's text for a firing rule (`rocewatch_slurm::reason` adds the
/// prefix, escapes control characters and bounds the length): the rule, its labels
/// and value.
pub fn drain_text(b: &Breach) -> String {
    let mut t = format!("rule {} fired", b.rule);
    let labels: Vec<String> = b.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !labels.is_empty() {
        t.push_str(&format!(": {}", labels.join(",")));
    }
    if let Some(v) = b.value {
        t.push_str(&format!(" value {v}"));
    }
    t
}

/// Drain this node through `scontrol` (blocking: run it off the runtime's workers).
pub fn slurm_drain(
    node: Option<&str>,
    scontrol: &str,
    timeout: Duration,
    b: &Breach,
) -> Result<String, String> {
    let name = rocewatch_slurm::this_node_name(node)
        .map_err(|e| format!("this node's name in Slurm: {e}"))?;
    // A second of the action's timeout is left for the dispatcher to hear the outcome.
    let bound = timeout
        .saturating_sub(Duration::from_secs(1))
        .max(Duration::from_secs(1));
    let sc = rocewatch_slurm::Scontrol::new(scontrol);
    sc.drain_unless_others(&name, &drain_text(b), bound)
        .map(|o| o.describe(&name))
        .map_err(|e| e.to_string())
}

/// `ROCEWATCH_LABEL_RDMA_DEVICE` for `rdma.device`.
fn env_name(label: &str) -> String {
    let mut s = String::from("ROCEWATCH_LABEL_");
    s.extend(label.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    s
}

/// The `ROCEWATCH_LABEL_*` variables of `labels`; labels that differ only in case or
/// punctuation (`a.b`, `a_b`, `A-B`) would share one variable, and the command could act on
/// the wrong one: that is refused, naming them.
pub(super) fn label_env(labels: &BTreeMap<String, String>) -> Result<Vec<(String, &str)>, String> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = Vec::with_capacity(labels.len());
    for (k, v) in labels {
        let name = env_name(k);
        if let Some(other) = seen.insert(name.clone(), k) {
            return Err(format!(
                "labels {other:?} and {k:?} both map to {name}: refused (rename one of them, or read the labels from the JSON on standard input)"
            ));
        }
        out.push((name, v.as_str()));
    }
    Ok(out)
}

/// How much of a command's standard output and error is kept: the first and the last
/// bytes; the rest is read and discarded, so a command that prints gigabytes costs no
/// memory.
const KEEP_HEAD: usize = 2048;
const KEEP_TAIL: usize = 2048;

/// What a command printed: its first and last bytes, and how much in all.
#[derive(Debug, Default)]
pub(super) struct Captured {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    total: u64,
}

impl Captured {
    fn push(&mut self, mut buf: &[u8]) {
        self.total += buf.len() as u64;
        if self.head.len() < KEEP_HEAD {
            let n = buf.len().min(KEEP_HEAD - self.head.len());
            self.head.extend_from_slice(&buf[..n]);
            buf = &buf[n..];
        }
        if buf.len() >= KEEP_TAIL {
            self.tail.clear();
            buf = &buf[buf.len() - KEEP_TAIL..];
        }
        let over = (self.tail.len() + buf.len()).saturating_sub(KEEP_TAIL);
        self.tail.drain(..over);
        self.tail.extend(buf);
    }

    /// The last 400 characters (what the audit record keeps), trimmed.
    fn tail_text(&self) -> String {
        let mut all = self.head.clone();
        let skipped = self.total - (self.head.len() + self.tail.len()) as u64;
        all.extend(self.tail.iter());
        let s = String::from_utf8_lossy(&all);
        let s = s.trim();
        let start = s.len().saturating_sub(400);
        let start = (start..=s.len())
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(s.len());
        if skipped > 0 {
            format!("[{skipped} bytes not kept] ...{}", &s[start..])
        } else {
            s[start..].to_string()
        }
    }
}

/// Read `r` to its end, keeping only what [`Captured`] keeps.
async fn capture(mut r: impl tokio::io::AsyncRead + Unpin) -> Captured {
    use tokio::io::AsyncReadExt;
    let mut c = Captured::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return c,
            Ok(n) => c.push(&buf[..n]),
        }
    }
}

/// Block until process `pid` (a child of ours) has exited, leaving it to be reaped.
fn exited_unreaped(pid: u32) {
    loop {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter; waitid with WNOWAIT only
        // reports, it reaps nothing.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Run `command` for `b`, in a session of its own, with bounded output. When it ends (it
/// exited, its timeout dropped this future, the agent stops), every process it started is
/// killed ([`processes`]). The outcome is the command's exit status, not the end of its
/// output (a daemon it left holding stdout is killed).
pub(crate) async fn run_exec(command: &[String], b: &Breach) -> Result<String, String> {
    use tokio::io::AsyncWriteExt;
    let env = label_env(&b.labels)?;
    let mut c = tokio::process::Command::new(&command[0]);
    c.args(&command[1..])
        .env("ROCEWATCH_RULE", &b.rule)
        .env(
            "ROCEWATCH_EVENT",
            if b.event == Event::Firing {
                "firing"
            } else {
                "clearing"
            },
        )
        .env("ROCEWATCH_ACTION", &b.action)
        .env("ROCEWATCH_SEVERITY", &b.severity)
        .env(
            "ROCEWATCH_VALUE",
            b.value.map(|v| v.to_string()).unwrap_or_default(),
        )
        // Only when known: unset says "unknown", empty says "nobody".
        .envs(b.workloads.as_ref().map(|w| {
            (
                "ROCEWATCH_WORKLOADS",
                w.iter()
                    .map(|w| w.workload.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            )
        }))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: setsid is async-signal-safe; the child is a new process, not yet a group
    // leader, so it cannot fail.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let (mut child, started) = processes::spawn(&b.action, || c.spawn(), |c| c.id())
        .map_err(|e| format!("cannot run {:?}: {e}", command[0]))?;
    // Declared after the child, so dropped before it: on timeout (the future running the
    // command is dropped) every process of the command is killed while its leader is
    // still unreaped. A fast exit kills them too (`at_exit`).
    let mut started = started;
    let out = tokio::spawn(capture(child.stdout.take().expect("piped")));
    let err = tokio::spawn(capture(child.stderr.take().expect("piped")));
    if let Some(mut stdin) = child.stdin.take() {
        let body = serde_json::to_vec(b).expect("plain data");
        // A command that does not read its input is not an error.
        let _ = stdin.write_all(&body).await;
    }
    // Wait for the command to exit without reaping it: while it is a zombie its pid, the
    // session's and the group's id, cannot be given to another process.
    if let Some(pid) = child.id() {
        let _ = tokio::task::spawn_blocking(move || exited_unreaped(pid)).await;
    }
    // The command is done: whatever it left running goes (nothing it started lives on),
    // which also closes the pipes the readers wait on.
    if let Some(s) = started.take() {
        s.end().await;
    }
    let status = child
        .wait()
        .await
        .map_err(|e| format!("{:?}: {e}", command[0]))?;
    // A process that could not be killed (uninterruptible sleep) may still hold the pipes:
    // read what came within a second, then stop reading.
    let grace = std::time::Duration::from_secs(1);
    let (mut out, mut err) = (out, err);
    let out_text = tokio::time::timeout(grace, &mut out)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let err_text = tokio::time::timeout(grace, &mut err)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    out.abort();
    err.abort();
    let (out, err) = (out_text, err_text);
    if status.success() {
        Ok(format!("exit 0; stdout: {}", out.tail_text()))
    } else {
        Err(format!("{status}; stderr: {}", err.tail_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_that_share_a_variable_are_refused() {
        let l = |ks: &[&str]| -> BTreeMap<String, String> {
            ks.iter()
                .map(|k| (k.to_string(), "v".to_string()))
                .collect()
        };
        assert_eq!(
            label_env(&l(&["rdma.device", "rdma.port"])).unwrap()[0].0,
            "ROCEWATCH_LABEL_RDMA_DEVICE"
        );
        for pair in [["a.b", "a_b"], ["a.b", "A-B"], ["x", "X"]] {
            let e = label_env(&l(&pair)).unwrap_err();
            assert!(e.contains("both map to") && e.contains(pair[0]), "{e}");
        }
    }

    fn breach() -> Breach {
        Breach {
            rule: "storm".into(),
            metric: "rdma.pfc.pause_ratio".into(),
            event: Event::Firing,
            action: "hang".into(),
            severity: "warning".into(),
            labels: BTreeMap::new(),
            value: Some(0.5),
            recent: Vec::new(),
            dry_run: false,
            workloads: None,
            workloads_truncated: 0,
        }
    }

    /// A site's wrapper at `dir/NAME` that does not `exec` what it wraps: its child writes
    /// its pid to `dir/child.pid` and hangs.
    fn hanging_wrapper(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\nsh -c 'echo $$ > {}; exec sleep 30'\necho never\n",
                dir.join("child.pid").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// The wrapper's child, once it said its pid: gone (or dead, left to its reaper)
    /// within 3 s.
    async fn child_gone(dir: &std::path::Path) -> Result<(), String> {
        let file = dir.join("child.pid");
        for _ in 0..300 {
            let Some(pid) = std::fs::read_to_string(&file)
                .ok()
                .filter(|t| t.ends_with('\n'))
            else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let pid = pid.trim().to_string();
            for _ in 0..300 {
                let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|l| l.rsplit_once(')').map(|(_, r)| r.trim().to_string()));
                match state {
                    None => return Ok(()),
                    Some(s) if s.starts_with('Z') || s.starts_with('X') => return Ok(()),
                    Some(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
            return Err(format!("the wrapper's child {pid} lives on"));
        }
        Err(format!("{} never written", file.display()))
    }

    /// `slurm_drain` as the dispatcher runs it (off the workers, under the action's
    /// timeout): a wrapper scontrol whose child hangs ends within the timeout, and takes
    /// its child with it.
    #[tokio::test]
    async fn a_drain_through_a_hanging_scontrol_wrapper_ends_in_time_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let scontrol = hanging_wrapper(dir.path(), "scontrol");
        let started = std::time::Instant::now();
        let timeout = Duration::from_secs(2);
        let r = tokio::task::spawn_blocking(move || {
            slurm_drain(Some("n1"), scontrol.to_str().unwrap(), timeout, &breach())
        })
        .await
        .unwrap();
        let took = started.elapsed();
        let e = r.unwrap_err();
        assert!(e.contains("killed"), "{e}");
        assert!(took < timeout + Duration::from_secs(1), "{took:?}: {e}");
        child_gone(dir.path()).await.unwrap();
    }

    /// `exec` as the dispatcher runs it (under the action's timeout, the future dropped at
    /// it): the same wrapper's child is killed with it.
    #[tokio::test]
    async fn an_exec_through_a_hanging_wrapper_is_killed_with_its_child_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let cmd = hanging_wrapper(dir.path(), "act");
        let command = vec![cmd.display().to_string()];
        let b = breach();
        let started = std::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(1), run_exec(&command, &b)).await;
        assert!(r.is_err(), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        child_gone(dir.path()).await.unwrap();
    }

    #[test]
    fn output_keeps_head_and_tail_only() {
        let mut c = Captured::default();
        c.push(b"first line\n");
        for _ in 0..10_000 {
            c.push(&[b'x'; 1000]);
        }
        c.push(b"\nlast line");
        assert_eq!(c.total, 11 + 10_000_000 + 10);
        assert!(c.head.len() <= KEEP_HEAD && c.tail.len() <= KEEP_TAIL);
        assert!(c.head.starts_with(b"first line"));
        let t = c.tail_text();
        assert!(t.ends_with("last line") && t.starts_with('['), "{t}");
        let mut small = Captured::default();
        small.push(b"ok\n");
        assert_eq!(small.tail_text(), "ok");
    }
}
