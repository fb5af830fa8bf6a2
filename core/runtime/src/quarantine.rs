//! The host's quarantine: a host that must take no jobs until an operator (or the recovery
//! policy the operator configured) says otherwise. One file in the state directory,
//! `quarantine.json`, so it outlives the agent, a `kill -9` and a reboot; entering and
//! leaving it are audited. An agent's restart never ends it.
//!
//! The file is root's when root writes it: read and replaced as every state file root
//! acts on ([`crate::util::fs`]: no link followed, no predictable temporary name).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::audit::{AuditKind, AuditLog, AuditRecord, Decision};
use crate::util::fs::{read_trusted, write_atomic, FsError};

/// The file's name in the state directory.
pub const FILE: &str = "quarantine.json";

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
}

/// The quarantine file of a state directory.
#[derive(Debug, Clone)]
pub struct QuarantineFile {
    path: PathBuf,
}

impl QuarantineFile {
    /// The quarantine of the state directory `dir`.
    pub fn in_dir(dir: &Path) -> QuarantineFile {
        QuarantineFile {
            path: dir.join(FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The quarantine in force, if any.
    pub fn read(&self) -> Result<Option<Quarantine>, QuarantineError> {
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

    /// Put the host in quarantine, audited first (nothing changes unless the audit log
    /// takes it). A quarantine already in force is kept as it is (its reason and since):
    /// `Ok(false)`.
    pub fn enter(&self, q: &Quarantine, audit: &AuditLog) -> Result<bool, QuarantineError> {
        if self.read()?.is_some() {
            return Ok(false);
        }
        let detail = format!("{} (by {})", q.reason, q.origin);
        self.audited(audit, ACTION_ENTER, &q.origin, detail, &q.labels, || {
            let json = serde_json::to_vec_pretty(q).expect("plain data");
            write_atomic(&self.path, &json, 0o644).map_err(QuarantineError::from)
        })?;
        Ok(true)
    }

    /// End the quarantine, audited with `why` and `by`; `Ok(None)` when there was none.
    pub fn release(
        &self,
        why: &str,
        by: &str,
        audit: &AuditLog,
    ) -> Result<Option<Quarantine>, QuarantineError> {
        let Some(q) = self.read()? else {
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
    }

    /// `executing` flushed before the change, `result` after it.
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
        audit
            .append_to(&d, rec, true)
            .map_err(|e| QuarantineError::Audit {
                path: audit.path().display().to_string(),
                why: e.to_string(),
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
        let _ = audit.append_to(&d, rec, false);
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
