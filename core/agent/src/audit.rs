//! The audit log: one JSON line per decision, appended, flushed to disk before an action
//! runs. Remediation and `qos apply`/`rollback` write it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// A rule transition's direction: what a decision was about, and when an action is
/// invoked (`on = ["firing", "clearing"]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    Firing,
    Clearing,
}

/// One audit log line.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// RFC 3339.
    pub time: String,
    /// fired | cleared | suppressed | dry_run | executing | refused | result
    pub decision: &'static str,
    pub rule: String,
    pub event: Event,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Why suppressed; what a dry run would do; the result's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// ok | error | timeout (results only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// Where rocewatch keeps its state (audit log, QoS snapshots) by default; systemd's
/// `StateDirectory=rocewatch` creates it. The agent creates this directory and no other.
pub const STATE_DIR: &str = "/var/lib/rocewatch";

/// The state directory: systemd's `$STATE_DIRECTORY` (its first entry) when set, else
/// [`STATE_DIR`].
pub fn state_dir() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|v| {
            v.to_string_lossy()
                .split(':')
                .next()
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(STATE_DIR))
}

/// Why the audit log cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit log {path}: the directory {dir} does not exist; rocewatch creates only its state directory {state} (create the directory, or set [remediation] audit_log inside it)")]
    NoDirectory {
        path: String,
        dir: String,
        state: String,
    },
    #[error("audit log {path}: creating the state directory {dir}: {source}")]
    CreateStateDir {
        path: String,
        dir: String,
        source: std::io::Error,
    },
}

/// The append-only audit log.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

impl AuditLog {
    pub fn new(path: PathBuf) -> Self {
        AuditLog {
            path,
            file: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Make sure the log's directory exists: the state directory is created when missing;
    /// any other missing directory is an error (a typo must not create `/nonexistent/dir`
    /// as root).
    pub fn prepare(&self) -> Result<(), AuditError> {
        let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) else {
            return Ok(());
        };
        if dir.is_dir() {
            return Ok(());
        }
        let state = state_dir();
        if dir == state {
            return std::fs::create_dir_all(dir).map_err(|source| AuditError::CreateStateDir {
                path: self.path.display().to_string(),
                dir: dir.display().to_string(),
                source,
            });
        }
        Err(AuditError::NoDirectory {
            path: self.path.display().to_string(),
            dir: dir.display().to_string(),
            state: state.display().to_string(),
        })
    }

    /// Append one line; with `sync`, flushed to disk before returning. A failure leaves
    /// the log closed: the next record opens it again (the disk may have room by then).
    pub fn append(&self, rec: &AuditRecord, sync: bool) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(rec).expect("plain data");
        line.push(b'\n');
        let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let r = (|| {
            if g.is_none() {
                self.prepare().map_err(std::io::Error::other)?;
                *g = Some(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&self.path)?,
                );
            }
            let f = g.as_mut().expect("opened above");
            f.write_all(&line)?;
            if sync {
                f.sync_data()?;
            }
            Ok(())
        })();
        if r.is_err() {
            *g = None;
        }
        r
    }
}

pub(super) fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}
