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
    /// fired | cleared | suppressed | dry_run | executing | result
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

    /// Append one line; with `sync`, flushed to disk before returning.
    pub fn append(&self, rec: &AuditRecord, sync: bool) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(rec).expect("plain data");
        line.push(b'\n');
        let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
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
    }
}

pub(super) fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}
