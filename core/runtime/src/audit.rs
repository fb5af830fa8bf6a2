//! The audit log: one JSON line per record, appended, flushed to disk before an action
//! runs. Remediation and `qos apply`/`rollback` write it. The records of one decision (a
//! transition and what each of its actions did; one QoS change and its result) share a
//! `decision_id`; the first record written of a decision carries its labels, the later
//! ones only the id ([`Decision`]).
//!
//! Every line is a whole record. A write cut short (a full disk: ENOSPC after part of the
//! record) is taken back: the file is cut to its length before the record, when nothing
//! else was appended after it since. A line left without its newline anyway (another
//! process's record cut short, a crash part way) gets one before the next record, so that
//! record is a line of its own rather than glued onto the half one.

use std::collections::BTreeMap;
use std::io::Write;
#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::events::Event as LogEvent;

pub use rocewatch_metrics::labels::{ActionOutcome, AuditKind};

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
    pub decision: AuditKind,
    /// The decision this record belongs to; set by [`AuditLog::append_to`].
    pub decision_id: String,
    pub rule: String,
    pub event: Event,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The decision's labels: on its first record written only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Why suppressed; what a dry run would do; the result's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Results only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ActionOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The workloads holding QPs on the transition's port (remediation's list, most QPs
    /// first): on the fired/cleared record of a transition that names a port, when they
    /// are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workloads: Option<serde_json::Value>,
    /// Workloads on the port beyond that list, left out (when there are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workloads_truncated: Option<usize>,
}

impl AuditRecord {
    /// A record of a change the agent makes on the host (a QoS setting, a counter mode):
    /// `kind` (executing, result, dry_run, refused) of `action`, made for `origin`, now;
    /// `started` gives the duration of a result.
    pub fn change(
        kind: AuditKind,
        origin: &str,
        action: &str,
        detail: String,
        outcome: Option<ActionOutcome>,
        started: Option<std::time::Instant>,
    ) -> AuditRecord {
        AuditRecord {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            decision: kind,
            decision_id: String::new(),
            rule: origin.to_string(),
            event: Event::Firing,
            action: Some(action.to_string()),
            labels: None,
            value: None,
            detail: Some(detail),
            outcome,
            duration_ms: started.map(|s| s.elapsed().as_millis() as u64),
            workloads: None,
            workloads_truncated: None,
        }
    }
}

/// One decision: its id, and its labels until a record of it carrying them is written
/// (again after a rotation, so the current file has them too).
#[derive(Debug)]
pub struct Decision {
    id: String,
    labels: BTreeMap<String, String>,
    /// 1 + the log file generation its labels were written to; 0: not yet.
    labels_in: std::sync::atomic::AtomicU64,
}

impl Decision {
    /// A new decision about `labels`, with an id no other decision has (see
    /// [`next_decision_id`]).
    pub fn new(labels: BTreeMap<String, String>) -> Decision {
        Decision {
            id: next_decision_id(),
            labels,
            labels_in: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }
}

/// `PREFIX-N`: N counts the decisions of this process from 1; PREFIX is when this process
/// made its first one (Unix milliseconds, hex) and its pid (hex), so that a restarted
/// agent, or two `qos apply` at once, never repeat an id. A reload keeps counting.
pub fn next_decision_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let prefix = PREFIX.get_or_init(|| {
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("{ms:x}.{:x}", std::process::id())
    });
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
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
        source: crate::util::fs::FsError,
    },
    #[error("audit log {path}: {source}")]
    Refused {
        path: String,
        source: crate::util::fs::FsError,
    },
}

/// When the log is rotated: past `max_bytes` the file becomes `PATH.1` (`PATH.1` becomes
/// `PATH.2`, ...), and `keep` rotated files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// 0: never rotate.
    pub max_bytes: u64,
    pub keep: usize,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_bytes: 64 << 20,
            keep: 5,
        }
    }
}

/// The audit log file as created (mode, less the umask).
const LOG_MODE: u32 = 0o644;

/// The live log as opened: the file, its size, and which file it is (to notice that the
/// path no longer names it).
#[derive(Debug)]
struct Live {
    file: std::fs::File,
    size: u64,
    dev: u64,
    ino: u64,
}

/// The append-only audit log.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    rotation: Rotation,
    /// The open live log.
    file: Mutex<Option<Live>>,
    /// A rotation failed and was said (a directory the agent may not write): records go
    /// on into the live log past the bound rather than fail (which would refuse every
    /// action), and each later record tries the rotation again; a success is said too.
    rotation_failing: std::sync::atomic::AtomicBool,
    /// Files begun so far (rotations, and a live log that was removed or moved away): the
    /// generation of the file written now.
    rotations: std::sync::atomic::AtomicU64,
}

impl AuditLog {
    pub fn new(path: PathBuf) -> Self {
        Self::with_rotation(path, Rotation::default())
    }

    pub fn with_rotation(path: PathBuf, rotation: Rotation) -> Self {
        AuditLog {
            path,
            rotation,
            file: Mutex::new(None),
            rotation_failing: std::sync::atomic::AtomicBool::new(false),
            rotations: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `PATH.n`
    fn rotated(&self, n: usize) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    }

    /// Rotate; on failure, keep appending to the file as it is (said once until a rotation
    /// succeeds again; the next record tries again).
    fn try_rotate(&self) {
        use std::sync::atomic::Ordering;
        match self.rotate() {
            Ok(()) => {
                self.rotations.fetch_add(1, Ordering::AcqRel);
                if self.rotation_failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(path = %self.path.display(), "the audit log rotates again");
                }
            }
            Err(e) => {
                if !self.rotation_failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(path = %self.path.display(), "cannot rotate the audit log ({e}); records go on into it past audit_max_bytes, and each one tries the rotation again");
                }
            }
        }
    }

    /// Shift `PATH` to `PATH.1`, `PATH.1` to `PATH.2`, ... up to the first missing one;
    /// when none is missing, `PATH.keep` is the one dropped (renamed over). A rotation cut
    /// short leaves a gap, so trying again shifts only below it and drops nothing more.
    /// (A rename acts on a link itself, never on what it points at.) A live log that is
    /// gone has nothing to rotate.
    fn rotate(&self) -> std::io::Result<()> {
        let keep = self.rotation.keep.max(1);
        let gap = (1..=keep)
            .find(|&n| std::fs::symlink_metadata(self.rotated(n)).is_err())
            .unwrap_or(keep);
        for n in (1..gap).rev() {
            std::fs::rename(self.rotated(n), self.rotated(n + 1))?;
        }
        match std::fs::rename(&self.path, self.rotated(1)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    /// Opens the live log (created when missing), never through a link; for reading too,
    /// to see whether it ends in a newline ([`write_whole`]).
    fn open(&self) -> std::io::Result<Live> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        self.prepare().map_err(std::io::Error::other)?;
        let file = crate::util::fs::open_nofollow(
            &self.path,
            std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(LOG_MODE),
        )?;
        let m = file.metadata()?;
        Ok(Live {
            file,
            size: m.len(),
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// Whether the path still names the file `live` holds: an operator's `rm`, or
    /// logrotate renaming it without `create`, leaves the agent holding a file no one
    /// reads. One `lstat` per record (records are per decision, not per collection).
    fn is_live(&self, live: &Live) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.dev() == live.dev && m.ino() == live.ino)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Make sure the log's directory exists: the state directory is created when missing;
    /// any other missing directory is an error (a typo must not create `/nonexistent/dir`
    /// as root).
    pub fn prepare(&self) -> Result<(), AuditError> {
        let dir = crate::util::fs::parent_of(&self.path);
        let state = state_dir();
        if !dir.is_dir() {
            if dir != state {
                return Err(AuditError::NoDirectory {
                    path: self.path.display().to_string(),
                    dir: dir.display().to_string(),
                    state: state.display().to_string(),
                });
            }
            return crate::util::fs::create_trusted_dir(dir).map_err(|source| {
                AuditError::CreateStateDir {
                    path: self.path.display().to_string(),
                    dir: dir.display().to_string(),
                    source,
                }
            });
        }
        // As root, only a directory no other user can swap a file in.
        crate::util::fs::trusted_dir(dir).map_err(|source| AuditError::Refused {
            path: self.path.display().to_string(),
            source,
        })
    }

    /// Append a record of `decision`: its id always, its labels until they are written
    /// once to the file written now (a first record that could not be written leaves them
    /// to the next one; after a rotation the decision's next record carries them again,
    /// so a decision's labels are in every file holding its records).
    pub fn append_to(
        &self,
        decision: &Decision,
        mut rec: AuditRecord,
        sync: bool,
    ) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        rec.decision_id.clone_from(&decision.id);
        let build = |generation: u64| {
            let mut r = rec.clone();
            let written = decision.labels_in.load(Ordering::Acquire) == generation + 1;
            r.labels = (!written).then(|| decision.labels.clone());
            r
        };
        let (generation, labelled) = self.append_built(&build, sync)?;
        if labelled {
            decision.labels_in.store(generation + 1, Ordering::Release);
        }
        publish_event(&rec, &decision.labels);
        Ok(())
    }

    /// Append one line; with `sync`, flushed to disk before returning. A failure leaves
    /// the log closed: the next record opens it again (the disk may have room by then).
    pub fn append(&self, rec: &AuditRecord, sync: bool) -> std::io::Result<()> {
        self.append_built(&|_| rec.clone(), sync)?;
        publish_event(rec, rec.labels.as_ref().unwrap_or(&BTreeMap::new()));
        Ok(())
    }

    /// Append the record `build` makes for the file generation it lands in (built again
    /// when the file rotates first); returns that generation and whether it has labels.
    fn append_built(
        &self,
        build: &dyn Fn(u64) -> AuditRecord,
        sync: bool,
    ) -> std::io::Result<(u64, bool)> {
        use std::sync::atomic::Ordering;
        let line_of = |generation: u64| {
            let rec = build(generation);
            let mut line = serde_json::to_vec(&rec).expect("plain data");
            line.push(b'\n');
            (line, rec.labels.is_some())
        };
        let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut generation = self.rotations.load(Ordering::Acquire);
        let (mut line, mut labelled) = line_of(generation);
        let r = (|| {
            let full = |size: u64| {
                self.rotation.max_bytes > 0
                    && size > 0
                    && size + line.len() as u64 > self.rotation.max_bytes
            };
            if g.as_ref().is_some_and(|l| !self.is_live(l)) {
                // A new file begins: decisions' labels go with their next record again.
                *g = None;
                self.rotations.fetch_add(1, Ordering::AcqRel);
                tracing::warn!(path = %self.path.display(), "the audit log was removed or moved away; records go to a new one");
            }
            if g.is_none() {
                *g = Some(self.open()?);
            }
            if g.as_ref().is_some_and(|l| full(l.size)) {
                *g = None;
                self.try_rotate();
                *g = Some(self.open()?);
            }
            let now = self.rotations.load(Ordering::Acquire);
            if now != generation {
                // Rotated just now: this record opens a new file.
                generation = now;
                (line, labelled) = line_of(generation);
            }
            let live = g.as_mut().expect("opened above");
            write_whole(live, &line, sync, &self.path)
        })();
        if r.is_err() {
            *g = None;
        }
        r.map(|()| (generation, labelled))
    }
}

/// The `action` of the quarantine's records (`quarantine::ACTION_ENTER`, `ACTION_RELEASE`:
/// that module builds on this one).
const QUARANTINE_ENTER: &str = "quarantine";
const QUARANTINE_RELEASE: &str = "quarantine-release";

/// The event of a record written (`events`: the OTLP copy of the audit log), with the
/// labels of its decision. Transitions (`fired`, `cleared`) are left to the pipeline's,
/// which sees every rule's; a quarantine is an event once changed (its `result`).
pub fn event_of(rec: &AuditRecord, labels: &BTreeMap<String, String>) -> Option<LogEvent> {
    use crate::events::{names, Severity};
    let action = rec.action.as_deref().unwrap_or("");
    let failed = rec.outcome.is_some_and(|o| o != ActionOutcome::Ok);
    let quarantine = action == QUARANTINE_ENTER || action == QUARANTINE_RELEASE;
    // `qos_apply` / `qos_rollback` (`rocewatch_qos::apply`), whoever asked: a rule's action
    // or `qos apply`.
    let qos = action.starts_with("qos_");
    let (name, severity) = match rec.decision {
        AuditKind::Fired | AuditKind::Cleared => return None,
        AuditKind::Executing if quarantine => return None,
        AuditKind::Result if quarantine => {
            let entered = action == QUARANTINE_ENTER;
            let name = if entered {
                names::QUARANTINE_ENTERED
            } else {
                names::QUARANTINE_RELEASED
            };
            let sev = match (failed, entered) {
                (true, _) => Severity::Error,
                (false, true) => Severity::Warn,
                (false, false) => Severity::Info,
            };
            (name, sev)
        }
        AuditKind::Result => {
            let name = if qos {
                names::QOS_RESULT
            } else {
                names::REMEDIATION_RESULT
            };
            (
                name,
                if failed {
                    Severity::Error
                } else {
                    Severity::Info
                },
            )
        }
        kind => {
            let name = if qos {
                names::QOS_DECISION
            } else {
                names::REMEDIATION_DECISION
            };
            let sev = match kind {
                AuditKind::Executing => Severity::Warn,
                AuditKind::Refused => Severity::Error,
                _ => Severity::Info,
            };
            (name, sev)
        }
    };
    let mut attributes = labels.clone();
    let mut put = |k: &str, v: String| {
        attributes.insert(k.to_string(), v);
    };
    put("rocewatch.decision_id", rec.decision_id.clone());
    put("rocewatch.decision", rec.decision.as_str().to_string());
    put("rocewatch.origin", rec.rule.clone());
    if !action.is_empty() {
        put("rocewatch.action", action.to_string());
    }
    if let Some(o) = rec.outcome {
        put("rocewatch.outcome", o.as_str().to_string());
    }
    if let Some(ms) = rec.duration_ms {
        put("rocewatch.duration_ms", ms.to_string());
    }
    let on = crate::events::describe(labels);
    let detail = rec.detail.as_deref().unwrap_or("");
    let outcome = rec.outcome.map(|o| format!(" ({o})")).unwrap_or_default();
    Some(LogEvent {
        time: SystemTime::now(),
        name,
        severity,
        body: format!(
            "{} {action} for {}{on}{outcome}: {detail}",
            rec.decision, rec.rule
        ),
        attributes,
    })
}

fn publish_event(rec: &AuditRecord, labels: &BTreeMap<String, String>) {
    if crate::events::enabled() {
        if let Some(e) = event_of(rec, labels) {
            crate::events::publish(e);
        }
    }
}

/// Append `line` (one record and its newline) to `live`, flushed to disk with `sync`:
/// whole, or taken back (see the module doc). A newline goes first when the file does not
/// end in one.
fn write_whole(
    live: &mut Live,
    line: &[u8],
    sync: bool,
    path: &std::path::Path,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let start = live.file.metadata()?.len();
    let mut last = [0u8; 1];
    // Unreadable: written as it is (the newline is a repair, not a condition).
    let glued =
        start > 0 && live.file.read_at(&mut last, start - 1).ok() == Some(1) && last[0] != b'\n';
    let buf: std::borrow::Cow<[u8]> = if glued {
        tracing::warn!(path = %path.display(), "the audit log ends in a record cut short; the next record begins on a line of its own");
        [b"\n".as_slice(), line].concat().into()
    } else {
        line.into()
    };
    let mut written = 0usize;
    let r = (|| {
        while written < buf.len() {
            match live.file.write(&buf[written..]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if sync {
            live.file.sync_data()?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => {
            live.size = start + written as u64;
            Ok(())
        }
        Err(e) => {
            take_back(live, start, written as u64, path);
            Err(e)
        }
    }
}

/// Cut the file back to `start` after a failed record of which `written` bytes landed,
/// when those bytes are still its end (nothing else was appended after them since).
fn take_back(live: &Live, start: u64, written: u64, path: &std::path::Path) {
    if written == 0 {
        return;
    }
    match live.file.metadata() {
        Ok(m) if m.len() == start + written => {
            if let Err(t) = live.file.set_len(start) {
                tracing::error!(path = %path.display(), "a record cut short stays in the audit log ({t}); the next record begins on a line of its own");
            }
        }
        _ => {
            tracing::warn!(path = %path.display(), "a record cut short stays in the audit log (written after, or unreadable); the next record begins on a line of its own")
        }
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: usize) -> AuditRecord {
        AuditRecord {
            time: "t".into(),
            decision: AuditKind::Fired,
            decision_id: String::new(),
            rule: format!("rule-{n}"),
            event: Event::Firing,
            action: None,
            labels: None,
            value: None,
            detail: None,
            outcome: None,
            duration_ms: None,
            workloads: None,
            workloads_truncated: None,
        }
    }

    #[test]
    fn a_decision_and_its_result_are_published_once_written_with_one_id() {
        let bus = crate::events::install(crate::events::BUS_CAPACITY);
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path().join("audit.jsonl"));
        let labels: BTreeMap<String, String> = [("rdma.device", "mlx5_events"), ("rdma.port", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let d = Decision::new(labels);
        let mut dry = AuditRecord::change(
            AuditKind::DryRun,
            "pfc-storm",
            "drain",
            "would drain".into(),
            None,
            None,
        );
        dry.event = Event::Firing;
        log.append_to(&d, dry, true).unwrap();
        let result = AuditRecord::change(
            AuditKind::Result,
            "pfc-storm",
            "drain",
            "exit 1".into(),
            Some(ActionOutcome::Error),
            None,
        );
        log.append_to(&d, result, false).unwrap();
        // A record that could not be written is no event.
        let gone = AuditLog::new(dir.path().join("no-such-dir/audit.jsonl"));
        let lost = AuditRecord::change(AuditKind::DryRun, "x", "drain", "".into(), None, None);
        assert!(gone.append_to(&d, lost, true).is_err());
        let ours: Vec<_> = bus
            .take(usize::MAX, std::time::Instant::now())
            .into_iter()
            .filter(|e| {
                e.attributes
                    .get("rocewatch.decision_id")
                    .map(String::as_str)
                    == Some(d.id())
            })
            .collect();
        assert_eq!(ours.len(), 2, "{ours:?}");
        assert_eq!(ours[0].name, crate::events::names::REMEDIATION_DECISION);
        assert_eq!(ours[0].attributes["rocewatch.decision"], "dry_run");
        assert_eq!(ours[0].attributes["rdma.device"], "mlx5_events");
        assert_eq!(ours[1].name, crate::events::names::REMEDIATION_RESULT);
        assert_eq!(ours[1].severity, crate::events::Severity::Error);
        assert_eq!(
            ours[1].attributes["rdma.port"], "1",
            "labels on every event"
        );
        assert!(ours[1].body.contains("exit 1"), "{}", ours[1].body);
    }

    #[test]
    fn qos_changes_and_quarantines_are_events_of_their_own_and_transitions_are_not() {
        use crate::events::{names, Severity};
        let none = BTreeMap::new();
        let rec = |kind, action: &str, outcome| {
            AuditRecord::change(kind, "pfc-rule", action, "d".into(), outcome, None)
        };
        let e = event_of(&rec(AuditKind::Executing, "qos_apply", None), &none).unwrap();
        assert_eq!((e.name, e.severity), (names::QOS_DECISION, Severity::Warn));
        let ok = Some(ActionOutcome::Ok);
        let e = event_of(&rec(AuditKind::Result, "qos_rollback", ok), &none).unwrap();
        assert_eq!((e.name, e.severity), (names::QOS_RESULT, Severity::Info));
        let e = event_of(&rec(AuditKind::Result, "quarantine", ok), &none).unwrap();
        assert_eq!(
            (e.name, e.severity),
            (names::QUARANTINE_ENTERED, Severity::Warn)
        );
        let failed = Some(ActionOutcome::Error);
        let e = event_of(&rec(AuditKind::Result, "quarantine-release", failed), &none).unwrap();
        assert_eq!(
            (e.name, e.severity),
            (names::QUARANTINE_RELEASED, Severity::Error)
        );
        assert!(event_of(&rec(AuditKind::Executing, "quarantine", None), &none).is_none());
        assert!(
            event_of(&record(1), &none).is_none(),
            "fired: the pipeline's"
        );
    }

    #[test]
    fn after_a_rotation_a_decisions_next_record_carries_its_labels_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        // Room for about two records per file.
        let log = AuditLog::with_rotation(
            path.clone(),
            Rotation {
                max_bytes: 400,
                keep: 3,
            },
        );
        let d = Decision::new(BTreeMap::from([("rdma.device".into(), "mlx5_0".into())]));
        for n in 0..6 {
            log.append_to(&d, record(n), false).unwrap();
        }
        // Every file that holds a record of the decision holds its labels.
        let files: Vec<PathBuf> = [path.clone(), log.rotated(1), log.rotated(2), log.rotated(3)]
            .into_iter()
            .filter(|f| f.exists())
            .collect();
        assert!(files.len() >= 2, "the log rotated: {files:?}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let recs: Vec<serde_json::Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert!(!recs.is_empty(), "{}", file.display());
            assert_eq!(
                recs[0]["labels"]["rdma.device"],
                "mlx5_0",
                "{}: {text}",
                file.display()
            );
            assert!(
                recs[1..].iter().all(|r| r.get("labels").is_none()),
                "{text}"
            );
        }
    }

    #[test]
    fn a_decisions_labels_go_with_its_first_record_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::new(path.clone());
        let d = Decision::new(BTreeMap::from([("rdma.device".into(), "mlx5_0".into())]));
        // The first record cannot be written (a directory in the log's place): the labels
        // go with the next one that is.
        std::fs::create_dir(&path).unwrap();
        assert!(log.append_to(&d, record(1), false).is_err());
        std::fs::remove_dir(&path).unwrap();
        log.append_to(&d, record(2), false).unwrap();
        log.append_to(&d, record(3), false).unwrap();
        let other = Decision::new(BTreeMap::new());
        log.append_to(&other, record(4), false).unwrap();
        let recs: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(recs[0]["labels"]["rdma.device"], "mlx5_0");
        assert!(recs[1].get("labels").is_none(), "{recs:?}");
        assert_eq!(recs[0]["decision_id"], d.id());
        assert_eq!(recs[1]["decision_id"], d.id());
        assert_eq!(recs[2]["decision_id"], other.id());
        assert_ne!(d.id(), other.id());
    }

    fn size(p: &Path) -> u64 {
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    }

    #[test]
    fn a_removed_live_log_is_recreated_and_the_bound_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        const SMALL: Rotation = Rotation {
            max_bytes: 1000,
            keep: 2,
        };
        let log = AuditLog::with_rotation(path.clone(), SMALL);
        for n in 0..3 {
            log.append(&record(n), false).unwrap();
        }
        // An operator's `rm` (or logrotate without `create`): the next record goes to a
        // new live log, not to the file the agent still holds open.
        std::fs::remove_file(&path).unwrap();
        log.append(&record(3), false).unwrap();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text.contains("\"rule\":\"rule-3\""),
            "the live log: {text:?}"
        );
        for n in 4..200 {
            log.append(&record(n), false).unwrap();
        }
        for p in [path.clone(), log.rotated(1), log.rotated(2)] {
            assert!(
                size(&p) > 0 && size(&p) <= 1000,
                "{}: {}",
                p.display(),
                size(&p)
            );
        }
        assert!(!log.rotated(3).exists());
        // Moved away (logrotate's rename) rather than removed: the same.
        std::fs::rename(&path, dir.path().join("moved")).unwrap();
        log.append(&record(200), false).unwrap();
        assert!(std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains("\"rule\":\"rule-200\""));
    }

    /// A disk that fills up part way through a record (ENOSPC after a short write):
    /// here the file-size limit (`RLIMIT_FSIZE`), which cuts a write short and fails the
    /// next one the same way, without root or a small file system. The log keeps whole
    /// lines only, and once there is room the next record is a line of its own (a half
    /// record left behind would glue it into one line that is not JSON). The limit is the
    /// process's, so the test runs itself again as a child process with it.
    #[test]
    fn a_record_cut_short_by_a_full_disk_leaves_no_half_line() {
        const CHILD: &str = "ROCEWATCH_AUDIT_TEST_FSIZE_DIR";
        const NAME: &str = "audit::tests::a_record_cut_short_by_a_full_disk_leaves_no_half_line";
        if let Some(dir) = std::env::var_os(CHILD) {
            return fill_up_in_a_child(Path::new(&dir));
        }
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, dir.path())
            .output()
            .unwrap();
        let said = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "the child failed: {said}");
        assert!(
            dir.path().join("done").exists(),
            "the child did not run: {said}"
        );
        let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
        let rules: Vec<String> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("a line that is not JSON ({e}): {l:?} in {text:?}"));
                v["rule"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(rules, ["rule-1", "rule-3", "rule-4"], "{text:?}");
    }

    /// A half record left by someone else (another process cut short, a crash part way)
    /// is not glued to: the next record begins on a line of its own.
    #[test]
    fn a_record_after_a_half_line_left_by_another_is_a_line_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, "{\"time\":\"t\",\"decisio").unwrap();
        let log = AuditLog::new(path.clone());
        log.append(&record(1), false).unwrap();
        log.append(&record(2), false).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text:?}");
        assert_eq!(lines[0], "{\"time\":\"t\",\"decisio");
        for (l, rule) in lines[1..].iter().zip(["rule-1", "rule-2"]) {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["rule"], rule, "{text:?}");
        }
    }

    /// The child of the test above: one record; a limit that cuts the next short (an
    /// error, and nothing of it left); room again: two more.
    fn fill_up_in_a_child(dir: &Path) {
        let path = dir.join("audit.jsonl");
        let log = AuditLog::new(path.clone());
        log.append(&record(1), true).unwrap();
        let set_limit = |soft: libc::rlim_t| {
            // SAFETY: getrlimit/setrlimit on this (child) process's own limits.
            unsafe {
                let mut l: libc::rlimit = std::mem::zeroed();
                assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut l), 0);
                l.rlim_cur = soft.min(l.rlim_max);
                assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &l), 0);
            }
        };
        // SAFETY: ignoring SIGXFSZ makes a write past the limit fail with EFBIG.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        set_limit(size(&path) + 20);
        let e = log.append(&record(2), true).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
        set_limit(libc::RLIM_INFINITY);
        log.append(&record(3), true).unwrap();
        log.append(&record(4), true).unwrap();
        std::fs::write(dir.join("done"), "").unwrap();
    }

    #[test]
    fn a_failed_rotation_is_tried_again_on_later_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::with_rotation(
            path.clone(),
            Rotation {
                max_bytes: 1000,
                keep: 1,
            },
        );
        // A directory where the rotated file goes: the rotation fails; nothing is lost.
        let blocker = log.rotated(1);
        std::fs::create_dir(&blocker).unwrap();
        std::fs::write(blocker.join("x"), "").unwrap();
        for n in 0..20 {
            log.append(&record(n), false).unwrap();
        }
        assert!(size(&path) > 1000, "the records went on: {}", size(&path));
        // Once it can, the log rotates again and the bound holds.
        std::fs::remove_dir_all(&blocker).unwrap();
        for n in 20..60 {
            log.append(&record(n), false).unwrap();
        }
        assert!(size(&path) <= 1000, "not rotated again: {}", size(&path));
        assert!(log.rotated(1).is_file());
    }

    #[test]
    fn a_rotation_cut_short_and_tried_again_drops_no_rotated_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::with_rotation(
            path.clone(),
            Rotation {
                max_bytes: 1000,
                keep: 3,
            },
        );
        // What a rotation cut short after its first rename leaves: a gap at PATH.2.
        std::fs::write(&path, "live\n").unwrap();
        std::fs::write(log.rotated(1), "one\n").unwrap();
        std::fs::write(log.rotated(3), "three\n").unwrap();
        log.rotate().unwrap();
        let read = |n: usize| std::fs::read_to_string(log.rotated(n)).unwrap();
        assert_eq!(
            (read(1), read(2), read(3)),
            ("live\n".into(), "one\n".into(), "three\n".into())
        );
        // No gap: the oldest goes.
        std::fs::write(&path, "newer\n").unwrap();
        log.rotate().unwrap();
        assert_eq!(
            (read(1), read(2), read(3)),
            ("newer\n".into(), "live\n".into(), "one\n".into())
        );
    }

    #[test]
    fn a_link_in_place_of_the_audit_log_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let path = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let log = AuditLog::new(path.clone());
        let e = log.append(&record(1), true).unwrap_err();
        assert!(
            e.to_string().contains(&path.display().to_string())
                && e.to_string().contains("symbolic link"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    }

    #[test]
    fn the_log_rotates_by_size_and_keeps_n_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        const SMALL: Rotation = Rotation {
            max_bytes: 1000,
            keep: 2,
        };
        let log = AuditLog::with_rotation(path.clone(), SMALL);
        for n in 0..100 {
            log.append(&record(n), false).unwrap();
        }
        let (cur, one, two) = (size(&path), size(&log.rotated(1)), size(&log.rotated(2)));
        assert!(
            cur > 0 && cur <= 1000 && one > 900 && one <= 1000 && two > 900,
            "{cur} {one} {two}"
        );
        assert!(!log.rotated(3).exists(), "only `keep` rotated files");
        let last = std::fs::read_to_string(&path).unwrap();
        assert!(
            last.trim_end()
                .ends_with("\"rule\":\"rule-99\",\"event\":\"firing\"}"),
            "{last}"
        );
        // A new log on the same path continues the file and rotates it when full.
        let again = AuditLog::with_rotation(path.clone(), SMALL);
        for n in 100..120 {
            again.append(&record(n), false).unwrap();
        }
        assert!(size(&path) <= 1000);
    }
}
