//! The `exec` action: a command, never through a shell, with the breach in `ROCEWATCH_*`
//! variables and as JSON on standard input (`ROCEWATCH_WORKLOADS`: the workloads on the
//! port, comma-separated, most QPs first). It runs in a session of its own; when it ends,
//! every process it started is killed (`crate::processes`).

use std::collections::BTreeMap;

use super::breach::Breach;
use crate::config::Event;
use crate::processes;

/// What `exec` would do.
pub(super) fn describe(command: &[String]) -> String {
    format!("run {command:?}")
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
pub(super) async fn run(command: &[String], b: &Breach) -> Result<String, String> {
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
    use crate::actions::testing::{breach, child_gone, hanging_wrapper};
    use std::time::Duration;

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

    /// `exec` as the dispatcher runs it (under the action's timeout, the future dropped at
    /// it): the same wrapper's child is killed with it.
    #[tokio::test]
    async fn an_exec_through_a_hanging_wrapper_is_killed_with_its_child_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let cmd = hanging_wrapper(dir.path(), "act");
        let command = vec![cmd.display().to_string()];
        let b = breach();
        let started = std::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(1), run(&command, &b)).await;
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
