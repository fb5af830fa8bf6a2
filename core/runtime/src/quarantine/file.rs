//! The host's quarantine: a host that must take no jobs until an operator (or the recovery
//! policy the operator configured) says otherwise. One file in the state directory,
//! `quarantine.json`, so it outlives the agent, a `kill -9` and a reboot; entering and
//! leaving it are audited. An agent's restart never ends it.
//!
//! The file is read and replaced as every state file root acts on ([`crate::util::fs`]:
//! no link followed, no predictable temporary name). In a state directory another user
//! owns (the packages give `/var/lib/rocewatch` to the agent's user; Slurm runs `health
//! --slurm` as root) root acts as that user ([`crate::util::fs::as_owner_of`]), so the
//! file stays the agent's to update.
//!
//! One owner at a time: entering and releasing are a read, a check and a write under an
//! exclusive `flock` of the state directory, taken for at most [`LOCK_WAIT`], so of many
//! concurrent entries exactly one changes the file and is audited `executing`; the
//! others find the quarantine in force. Readers take no lock (the file is replaced whole
//! by a rename).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::audit::{AuditKind, AuditLog, AuditRecord, Decision};
use crate::util::fs::{
    as_owner_of, create_trusted_dir, parent_of, read_trusted, trusted_dir, write_atomic, FsError,
};

/// The file's name in the state directory.
pub const FILE: &str = "quarantine.json";

/// How long an entry or a release waits for another one to finish.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What `action` the audit records of the quarantine name.
pub const ACTION_ENTER: &str = "quarantine";
pub const ACTION_RELEASE: &str = "quarantine-release";

/// A quarantine in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quarantine {
    /// Why, in one line (`rule nic-firmware-trouble firing on mlx5_0`).
    pub reason: String,
    /// Who set it: `rule:NAME`, `health`, `operator`.
    pub origin: String,
    /// When it began (RFC 3339).
    pub since: String,
    /// Seconds since the epoch of `since`.
    pub since_unix: u64,
    /// The labels of what set it (the rule's series), if any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Quarantine {
    /// A quarantine beginning now.
    pub fn now(reason: &str, origin: &str, labels: BTreeMap<String, String>) -> Quarantine {
        let now = std::time::SystemTime::now();
        Quarantine {
            reason: one_line(reason),
            origin: one_line(origin),
            since: humantime::format_rfc3339_seconds(now).to_string(),
            since_unix: now
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            labels,
        }
    }

    /// The rule that set it (`origin` `rule:NAME`).
    pub fn rule(&self) -> Option<&str> {
        self.origin.strip_prefix("rule:")
    }
}

/// A reason or an origin on one line, bounded (it lands in a metric label and in
/// `scontrol`'s reason).
fn one_line(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > 256 {
        let mut cut = 256;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// Why the quarantine could not be read or changed, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("{path}: not a quarantine record ({why}); move it away to end the quarantine by hand")]
    Corrupt { path: String, why: String },
    #[error("the audit log {path} cannot be written ({why}): the quarantine was not changed")]
    Audit { path: String, why: String },
    #[error("{path}: another process has been changing the quarantine for {waited:?} (it holds the directory's lock): the quarantine was not changed")]
    Busy {
        path: String,
        waited: std::time::Duration,
    },
}

/// The quarantine file of a state directory.
#[derive(Debug, Clone)]
pub struct QuarantineFile {
    dir: PathBuf,
    path: PathBuf,
}

impl QuarantineFile {
    /// The quarantine of the state directory `dir`.
    pub fn in_dir(dir: &Path) -> QuarantineFile {
        QuarantineFile {
            dir: dir.to_path_buf(),
            path: dir.join(FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The quarantine in force, if any (as the state directory's owner).
    pub fn read(&self) -> Result<Option<Quarantine>, QuarantineError> {
        as_owner_of(&self.dir, || self.read_here())
    }

    /// `f` as the state directory's owner, holding its lock (created first with
    /// `create`, as [`crate::util::fs::create_trusted_dir`] does).
    fn locked<T>(
        &self,
        create: bool,
        f: impl FnOnce() -> Result<T, QuarantineError>,
    ) -> Result<T, QuarantineError> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        as_owner_of(&self.dir, || {
            if create {
                create_trusted_dir(&self.dir)?;
            } else {
                trusted_dir(&self.dir)?;
            }
            let d = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&self.dir)
                .map_err(|e| FsError::io(&self.dir, "open", e))?;
            let started = std::time::Instant::now();
            loop {
                // SAFETY: flock on a descriptor we own; released when it is closed.
                if unsafe { libc::flock(d.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                    break;
                }
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(FsError::io(&self.dir, "lock", e).into());
                }
                if started.elapsed() >= LOCK_WAIT {
                    return Err(QuarantineError::Busy {
                        path: self.dir.display().to_string(),
                        waited: LOCK_WAIT,
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let r = f();
            drop(d);
            r
        })
    }

    /// The quarantine in force, read as the caller is.
    fn read_here(&self) -> Result<Option<Quarantine>, QuarantineError> {
        let bytes = match read_trusted(&self.path) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| QuarantineError::Corrupt {
                path: self.path.display().to_string(),
                why: e.to_string(),
            })
    }

    /// The quarantine in force, read to judge (`rocewatch health`), not to act on: never
    /// through a link, only a regular file of bounded size, but also in a state directory
    /// another user (the agent's own) owns, which [`QuarantineFile::read`] refuses to
    /// root. A file that is there and cannot be read is an error: the caller fails closed.
    pub fn read_status(&self) -> Result<Option<Quarantine>, QuarantineError> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&self.path);
        let corrupt = |why: String| QuarantineError::Corrupt {
            path: self.path.display().to_string(),
            why,
        };
        let f = match f {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(corrupt(format!("cannot be opened: {e}"))),
        };
        let md = f.metadata().map_err(|e| corrupt(e.to_string()))?;
        if !md.is_file() {
            return Err(corrupt("not a regular file".into()));
        }
        let mut bytes = Vec::new();
        f.take(64 * 1024)
            .read_to_end(&mut bytes)
            .map_err(|e| corrupt(e.to_string()))?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| corrupt(e.to_string()))
    }

    /// Put the host in quarantine (the state directory created when missing), audited
    /// first (nothing changes unless the audit log takes it). A quarantine already in
    /// force is kept as it is (its reason and since): `Ok(false)`.
    pub fn enter(&self, q: &Quarantine, audit: &AuditLog) -> Result<bool, QuarantineError> {
        self.locked(true, || {
            if self.read_here()?.is_some() {
                return Ok(false);
            }
            let detail = format!("{} (by {})", q.reason, q.origin);
            self.audited(audit, ACTION_ENTER, &q.origin, detail, &q.labels, || {
                let json = serde_json::to_vec_pretty(q).expect("plain data");
                write_atomic(&self.path, &json, 0o644).map_err(QuarantineError::from)
            })?;
            Ok(true)
        })
    }

    /// End the quarantine, audited with `why` and `by`; `Ok(None)` when there was none.
    pub fn release(
        &self,
        why: &str,
        by: &str,
        audit: &AuditLog,
    ) -> Result<Option<Quarantine>, QuarantineError> {
        self.release_if(why, by, audit, |_| true)
    }

    /// End the quarantine in force if `ours` says so of it (read under the lock: the one
    /// judged earlier may have been released and another entered since); `Ok(None)` when
    /// there was none or it is left.
    pub fn release_if(
        &self,
        why: &str,
        by: &str,
        audit: &AuditLog,
        ours: impl FnOnce(&Quarantine) -> bool,
    ) -> Result<Option<Quarantine>, QuarantineError> {
        if !self.dir.is_dir() {
            return Ok(None);
        }
        self.locked(false, || {
            let Some(q) = self.read_here()?.filter(|q| ours(q)) else {
                return Ok(None);
            };
            let detail = format!(
                "{} (in quarantine since {}: {})",
                one_line(why),
                q.since,
                q.reason
            );
            self.audited(audit, ACTION_RELEASE, by, detail, &q.labels, || {
                std::fs::remove_file(&self.path)
                    .or_else(|e| match e.kind() {
                        std::io::ErrorKind::NotFound => Ok(()),
                        _ => Err(e),
                    })
                    .map_err(|e| FsError::io(&self.path, "remove", e).into())
            })?;
            Ok(Some(q))
        })
    }

    /// `executing` flushed before the change, `result` after it (each appended as the
    /// owner of the audit log's directory).
    fn audited(
        &self,
        audit: &AuditLog,
        action: &str,
        origin: &str,
        detail: String,
        labels: &BTreeMap<String, String>,
        change: impl FnOnce() -> Result<(), QuarantineError>,
    ) -> Result<(), QuarantineError> {
        let d = Decision::new(labels.clone());
        let started = std::time::Instant::now();
        let rec = AuditRecord::change(
            AuditKind::Executing,
            origin,
            action,
            detail.clone(),
            None,
            None,
        );
        let log_dir = parent_of(audit.path());
        as_owner_of(log_dir, || audit.append_to(&d, rec, true)).map_err(|e| {
            QuarantineError::Audit {
                path: audit.path().display().to_string(),
                why: e.to_string(),
            }
        })?;
        let r = change();
        let (outcome, msg) = match &r {
            Ok(()) => (crate::audit::ActionOutcome::Ok, detail),
            Err(e) => (crate::audit::ActionOutcome::Error, e.to_string()),
        };
        let rec = AuditRecord::change(
            AuditKind::Result,
            origin,
            action,
            msg,
            Some(outcome),
            Some(started),
        );
        let _ = as_owner_of(log_dir, || audit.append_to(&d, rec, false));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(audit: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(audit)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn entered_once_kept_until_released_and_each_step_audited() {
        let dir = tempfile::tempdir().unwrap();
        let file = QuarantineFile::in_dir(dir.path());
        let audit = AuditLog::new(dir.path().join("audit.jsonl"));
        assert_eq!(file.read().unwrap(), None);
        let labels = BTreeMap::from([("rdma.device".to_string(), "mlx5_0".to_string())]);
        let q = Quarantine::now(
            "rule nic-firmware-trouble firing\non mlx5_0",
            "rule:nic-firmware-trouble",
            labels,
        );
        assert_eq!(q.reason, "rule nic-firmware-trouble firing on mlx5_0");
        assert_eq!(q.rule(), Some("nic-firmware-trouble"));
        assert!(file.enter(&q, &audit).unwrap());
        // A second entry keeps the first reason and time.
        let later = Quarantine::now("other", "health", BTreeMap::new());
        assert!(!file.enter(&later, &audit).unwrap());
        assert_eq!(file.read().unwrap(), Some(q.clone()));
        // Another reader (a restarted agent, `rocewatch health`) sees the same.
        assert_eq!(
            QuarantineFile::in_dir(dir.path()).read().unwrap(),
            Some(q.clone())
        );
        let released = file.release("cable replaced", "operator", &audit).unwrap();
        assert_eq!(released, Some(q));
        assert_eq!(file.read().unwrap(), None);
        assert_eq!(file.release("again", "operator", &audit).unwrap(), None);
        let recs = records(&dir.path().join("audit.jsonl"));
        let kinds: Vec<(&str, &str)> = recs
            .iter()
            .map(|r| {
                (
                    r["decision"].as_str().unwrap(),
                    r["action"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("executing", ACTION_ENTER),
                ("result", ACTION_ENTER),
                ("executing", ACTION_RELEASE),
                ("result", ACTION_RELEASE)
            ]
        );
        assert!(recs[2]["detail"]
            .as_str()
            .unwrap()
            .starts_with("cable replaced (in quarantine since "));
        assert_eq!(recs[2]["rule"], "operator");
    }

    #[test]
    fn nothing_changes_when_the_audit_log_cannot_take_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = QuarantineFile::in_dir(dir.path());
        let audit = AuditLog::new(dir.path().join("no-such-dir/audit.jsonl"));
        let q = Quarantine::now("r", "operator", BTreeMap::new());
        let e = file.enter(&q, &audit).unwrap_err();
        assert!(matches!(e, QuarantineError::Audit { .. }), "{e}");
        assert_eq!(file.read().unwrap(), None);
    }

    /// `nobody`, the user the tests act as.
    const NOBODY: u32 = 65534;

    fn chown(path: &Path, uid: u32) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: lchown on a path the test made; the result is checked.
        let r = unsafe { libc::lchown(c.as_ptr(), uid, uid) };
        assert_eq!(
            r,
            0,
            "lchown {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }

    /// A state directory `nobody` owns (mode 0750, as the packages make
    /// /var/lib/rocewatch the agent's user's), below a directory root owns that anyone
    /// may search.
    fn theirs() -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        assert!(
            crate::util::fs::strict(),
            "this test checks what root does in a state directory another user owns: it needs root (CI runs as root)"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
        chown(&state, NOBODY);
        (dir, state)
    }

    #[test]
    fn root_changes_the_quarantine_of_a_state_directory_another_user_owns_as_that_user() {
        use std::os::unix::fs::MetadataExt;
        let (_dir, state) = theirs();
        let file = QuarantineFile::in_dir(&state);
        let audit = AuditLog::new(state.join("audit.jsonl"));
        let q = Quarantine::now("port DOWN", "health", BTreeMap::new());
        assert!(file.enter(&q, &audit).unwrap());
        // The files are the directory owner's: the agent, running as that user, can
        // still replace and append to them.
        for name in [FILE, "audit.jsonl"] {
            let md = std::fs::symlink_metadata(state.join(name)).unwrap();
            assert_eq!((md.uid(), md.gid()), (NOBODY, NOBODY), "{name}");
        }
        assert_eq!(file.read().unwrap(), Some(q.clone()));
        assert_eq!(file.release("fixed", "operator", &audit).unwrap(), Some(q));
        assert!(!state.join(FILE).exists());
        assert_eq!(records(&state.join("audit.jsonl")).len(), 4);
        // The thread is root again: nothing of the other user's is left on it.
        let mine = tempfile::tempdir().unwrap();
        std::fs::write(mine.path().join("x"), "x").unwrap();
        assert_eq!(std::fs::metadata(mine.path().join("x")).unwrap().uid(), 0);
    }

    #[test]
    fn as_that_user_root_still_refuses_a_directory_others_can_write_and_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, state) = theirs();
        let audit = AuditLog::new(state.join("audit.jsonl"));
        let q = Quarantine::now("r", "operator", BTreeMap::new());
        // A link in place of the file: refused, its target untouched.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, state.join(FILE)).unwrap();
        let e = QuarantineFile::in_dir(&state).read().unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        std::fs::remove_file(state.join(FILE)).unwrap();
        // A directory any user can write.
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = QuarantineFile::in_dir(&state)
            .enter(&q, &audit)
            .unwrap_err();
        assert!(e.to_string().contains("can be written by any user"), "{e}");
        assert!(!state.join(FILE).exists());
        // A third user's directory below theirs: refused, naming it.
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        let below = state.join("below");
        std::fs::create_dir(&below).unwrap();
        chown(&below, NOBODY - 1);
        let e = QuarantineFile::in_dir(&below)
            .enter(&q, &AuditLog::new(below.join("audit.jsonl")))
            .unwrap_err();
        let want = format!("{}: the directory is owned by", state.display());
        assert!(e.to_string().contains(&want), "{e}");
        assert!(!below.join(FILE).exists());
    }

    #[test]
    fn of_many_concurrent_entries_one_changes_the_file_and_is_audited() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().to_path_buf();
        let entered: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..24)
                .map(|i| {
                    let state = state.clone();
                    s.spawn(move || {
                        let q = Quarantine::now(&format!("r{i}"), "operator", BTreeMap::new());
                        QuarantineFile::in_dir(&state)
                            .enter(&q, &AuditLog::new(state.join("audit.jsonl")))
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(entered.iter().filter(|e| **e).count(), 1, "{entered:?}");
        let executing = records(&state.join("audit.jsonl"))
            .iter()
            .filter(|r| r["decision"] == "executing")
            .count();
        assert_eq!(executing, 1);
    }

    #[test]
    fn a_release_on_condition_leaves_a_quarantine_that_does_not_meet_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = QuarantineFile::in_dir(dir.path());
        let audit = AuditLog::new(dir.path().join("audit.jsonl"));
        let rule = Quarantine::now("r", "rule:x", BTreeMap::new());
        assert!(file.enter(&rule, &audit).unwrap());
        let released = file
            .release_if("recovered", "health", &audit, |q| q.origin == "health")
            .unwrap();
        assert_eq!(released, None);
        assert_eq!(file.read().unwrap(), Some(rule));
        assert_eq!(records(&dir.path().join("audit.jsonl")).len(), 2);
    }

    #[test]
    fn a_file_that_is_no_quarantine_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "{\"reason\": 3}").unwrap();
        let e = QuarantineFile::in_dir(dir.path()).read().unwrap_err();
        assert!(
            e.to_string()
                .contains("quarantine.json: not a quarantine record"),
            "{e}"
        );
    }
}
