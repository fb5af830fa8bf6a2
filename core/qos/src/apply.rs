//! Applying the desired RoCE/PFC/ECN state and undoing it (`qos apply`, `qos rollback`,
//! the `qos_apply` remediation action), and the configuration as metrics.
//!
//! Safety rules, in the order they act:
//! - a dry run (the default of `qos apply`) asks every plugin what it would write where,
//!   and changes nothing;
//! - before the first change, a snapshot of every value about to be replaced is written
//!   (and flushed) under `[qos] snapshot_dir`; no snapshot, no change;
//! - every change is audited in the remediation audit log before it is made (flushed)
//!   and again with its result;
//! - a change that fails undoes the ones made before it, newest first (also audited),
//!   and the snapshot says `rolled_back`;
//! - `qos rollback` restores a snapshot's values, newest change first, but leaves alone a
//!   setting somebody changed since (unless `--force`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use rocewatch_plugin_api::{ApplyOutcome, QosChange, QosState, Setting};
use serde::Serialize;

use super::metrics::ATTR_SETTING;
use super::observe::{observe, ConfigPlugins};
use super::snapshot::{SnapChange, Snapshot};
use crate::{normalize, Change, QosConfig, SettingAt};
use rocewatch_runtime::audit::{ActionOutcome, AuditKind, AuditLog, AuditRecord, Decision};
use rocewatch_runtime::host::call::{self, CallError};
use rocewatch_runtime::host::registry::Instance;
use rocewatch_runtime::selfmetrics::SelfMetrics;

/// What happened to one setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    #[serde(flatten)]
    pub at: SettingAt,
    pub from: String,
    pub to: String,
    pub outcome: Outcome,
    pub message: String,
}

/// What an apply or a rollback did to one setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A dry run: what it would do.
    Would,
    Done,
    Failed,
    /// Undone after a later change failed.
    Undone,
    UndoFailed,
    Skipped,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Would => "would",
            Outcome::Done => "done",
            Outcome::Failed => "failed",
            Outcome::Undone => "undone",
            Outcome::UndoFailed => "undo_failed",
            Outcome::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The steps of an apply or a rollback.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub steps: Vec<Step>,
    /// The snapshot written (apply) or restored (rollback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<PathBuf>,
    /// A change failed (and what was made before it was undone), or, in a dry run, a
    /// plugin said it could not make one.
    pub failed: bool,
}

/// The report as text, a line per step.
pub fn report_text(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for st in &r.steps {
        let _ = writeln!(
            s,
            "{:<11} {}  {}: {} -> {}  {}",
            st.outcome,
            st.at.port_label(),
            st.at.setting,
            st.from,
            st.to,
            st.message
        );
    }
    if let Some(p) = &r.snapshot {
        let _ = writeln!(s, "snapshot: {}", p.display());
    }
    s
}

/// Applies changes through the configuration plugins, with snapshot, audit and undo.
pub struct Applier {
    plugins: ConfigPlugins,
    metrics: Arc<SelfMetrics>,
    audit: AuditLog,
    snapshot_dir: PathBuf,
    host: String,
    /// Whether a dry run is audited (the agent's dry-run remediation is; `qos apply`
    /// without `--yes` writes nothing).
    audit_dry_runs: bool,
    /// The desired state (for re-apply on drift).
    pub desired: QosConfig,
}

impl Applier {
    /// An applier through `plugins` towards `desired`, auditing to `audit_log`; `host` is
    /// recorded in snapshots.
    pub fn new(
        plugins: ConfigPlugins,
        desired: QosConfig,
        audit: AuditLog,
        host: String,
        metrics: Arc<SelfMetrics>,
    ) -> Self {
        Applier {
            plugins,
            metrics,
            audit,
            snapshot_dir: desired.snapshot_dir.clone(),
            host,
            audit_dry_runs: true,
            desired,
        }
    }

    /// The same applier, whose dry runs write nothing: no audit record (and so no state
    /// directory created), as a command's dry run promises.
    pub fn without_dry_run_audit(mut self) -> Self {
        self.audit_dry_runs = false;
        self
    }

    pub fn audit_path(&self) -> &Path {
        self.audit.path()
    }

    pub async fn observe(&self) -> Result<Vec<QosState>, CallError> {
        observe(&self.plugins, &self.metrics).await
    }

    /// One change through the first configuration plugin that does not answer
    /// "unsupported".
    async fn apply_one(&self, qc: &QosChange, dry_run: bool) -> Result<ApplyOutcome, String> {
        let mut last = format!("no configuration plugin can set {}", qc.setting);
        for (e, timeout) in &self.plugins {
            let c = qc.clone();
            match call::call(e, *timeout, &self.metrics, move |i| match i {
                Instance::Configuration(p) => p.apply(&c, dry_run),
                _ => Err(rocewatch_plugin_api::PluginError::Unsupported(
                    "not a configuration plugin".into(),
                )),
            })
            .await
            {
                Ok(o) => return Ok(o),
                Err(e) if e.is_unsupported() => last = e.to_string(),
                Err(e) => return Err(e.to_string()),
            }
        }
        Err(last)
    }

    /// One change of one setting of one port: a decision, labelled with what it changes.
    fn decision(c: &SnapChange) -> Decision {
        let mut labels = BTreeMap::new();
        let at = &c.at;
        labels.insert(
            rocewatch_metrics::ATTR_DEVICE.to_string(),
            at.device.clone(),
        );
        labels.insert(
            rocewatch_metrics::ATTR_PORT.to_string(),
            at.port.to_string(),
        );
        if let Some(n) = &at.netdev {
            labels.insert(rocewatch_metrics::ATTR_NETDEV.to_string(), n.clone());
        }
        labels.insert(ATTR_SETTING.to_string(), at.setting.clone());
        Decision::new(labels)
    }

    #[allow(clippy::too_many_arguments)]
    fn audit(
        &self,
        d: &Decision,
        kind: AuditKind,
        origin: &str,
        action: &str,
        detail: String,
        outcome: Option<ActionOutcome>,
        started: Option<Instant>,
    ) -> Result<(), String> {
        let rec = AuditRecord::change(kind, origin, action, detail, outcome, started);
        // Flushed before a change is made; a change that cannot be audited is not made.
        self.audit
            .append_to(d, rec, kind == AuditKind::Executing)
            .map_err(|e| {
                tracing::error!(path = %self.audit.path().display(), "cannot write the audit log: {e}");
                format!("refused: the audit log {} cannot be written ({e}); nothing was changed", self.audit.path().display())
            })
    }

    /// A dry run of one change, audited as such: what the plugin would do, or why it
    /// could not.
    async fn audited_dry_run(
        &self,
        qc: &QosChange,
        c: &SnapChange,
        origin: &str,
        action: &str,
        from_text: &str,
    ) -> Result<String, String> {
        let r = self.apply_one(qc, true).await.map(|o| o.message);
        let msg = match &r {
            Ok(m) | Err(m) => m,
        };
        if self.audit_dry_runs {
            let detail = format!("{from_text} -> {}: {msg}", qc.to);
            let d = Self::decision(c);
            let _ = self.audit(&d, AuditKind::DryRun, origin, action, detail, None, None);
        }
        r
    }

    /// One change made: audited before (flushed to disk) and with its result.
    async fn audited_change(
        &self,
        qc: &QosChange,
        c: &SnapChange,
        origin: &str,
        action: &str,
        from_text: &str,
    ) -> Result<ApplyOutcome, String> {
        let t0 = Instant::now();
        let detail = format!("{from_text} -> {}", qc.to);
        let d = Self::decision(c);
        let audited = self.audit(&d, AuditKind::Executing, origin, action, detail, None, None);
        // A new change that cannot be audited is not made. An undo is: it puts back what
        // was there, and leaving a half-applied change in place would be the greater harm.
        if !origin.ends_with("(undo after a failure)") {
            audited?;
        }
        let r = self.apply_one(qc, false).await;
        let (outcome, msg) = match &r {
            Ok(o) => (ActionOutcome::Ok, o.message.clone()),
            Err(e) => (ActionOutcome::Error, e.clone()),
        };
        let _ = self.audit(
            &d,
            AuditKind::Result,
            origin,
            action,
            msg,
            Some(outcome),
            Some(t0),
        );
        r
    }

    /// Apply `changes` (a plan's). `origin` names who asked (`qos apply`, a rule).
    pub async fn apply(
        &self,
        changes: &[Change],
        dry_run: bool,
        origin: &str,
    ) -> Result<Report, String> {
        let mut report = Report::default();
        if changes.is_empty() {
            return Ok(report);
        }
        let started_at = SystemTime::now();
        let mut snap = Snapshot {
            time: humantime::format_rfc3339_millis(started_at).to_string(),
            host: self.host.clone(),
            origin: origin.to_string(),
            state: "applying".into(),
            changes: changes
                .iter()
                .map(|c| SnapChange {
                    at: c.at.clone(),
                    from: (!c.unread).then(|| c.from.clone()),
                    to: c.to.clone(),
                    done: false,
                })
                .collect(),
        };
        let path = self.snapshot_dir.join(format!(
            "qos-{}.json",
            snap.time.replace([':', '-'], "").replace('.', "-")
        ));
        if !dry_run {
            snap.write(&path).map_err(|e| {
                format!(
                    "cannot write the snapshot {} ({e}); nothing was changed (set [qos] snapshot_dir to a writable directory)",
                    path.display()
                )
            })?;
            report.snapshot = Some(path.clone());
        }
        for i in 0..snap.changes.len() {
            let c = snap.changes[i].clone();
            let qc = c.at.change(c.from.clone(), c.to.clone());
            let from_text = c.from.clone().unwrap_or_else(|| "unknown".into());
            let step = |outcome, message| Step {
                at: c.at.clone(),
                from: from_text.clone(),
                to: c.to.clone(),
                outcome,
                message,
            };
            if dry_run {
                let step = match self
                    .audited_dry_run(&qc, &c, origin, "qos_apply", &from_text)
                    .await
                {
                    Ok(msg) => step(Outcome::Would, msg),
                    Err(e) => {
                        report.failed = true;
                        step(Outcome::Failed, e)
                    }
                };
                report.steps.push(step);
                continue;
            }
            match self
                .audited_change(&qc, &c, origin, "qos_apply", &from_text)
                .await
            {
                Ok(o) => {
                    snap.changes[i].done = true;
                    if o.previous.is_some() {
                        snap.changes[i].from = o.previous.clone();
                    }
                    if let Err(e) = snap.write(&path) {
                        tracing::error!("cannot update the snapshot {}: {e}", path.display());
                    }
                    let mut st = step(Outcome::Done, o.message);
                    if let Some(p) = o.previous {
                        st.from = p;
                    }
                    report.steps.push(st);
                }
                Err(e) => {
                    report.steps.push(step(Outcome::Failed, e));
                    report.failed = true;
                    self.undo(&mut snap, i, origin, &mut report).await;
                    snap.state = "rolled_back".into();
                    if let Err(e) = snap.write(&path) {
                        tracing::error!("cannot update the snapshot {}: {e}", path.display());
                    }
                    return Ok(report);
                }
            }
        }
        if !dry_run {
            snap.state = "applied".into();
            snap.write(&path)
                .map_err(|e| format!("cannot update the snapshot {}: {e}", path.display()))?;
        }
        Ok(report)
    }

    /// Undo the changes made before `failed_at`, newest first.
    async fn undo(&self, snap: &mut Snapshot, failed_at: usize, origin: &str, r: &mut Report) {
        for j in (0..failed_at).rev() {
            let c = snap.changes[j].clone();
            if !c.done {
                continue;
            }
            let step = |outcome, message| Step {
                at: c.at.clone(),
                from: c.to.clone(),
                to: c.from.clone().unwrap_or_else(|| "unknown".into()),
                outcome,
                message,
            };
            let Some(from) = c.from.clone() else {
                r.steps.push(step(
                    Outcome::Skipped,
                    "its value before could not be read; left as set".into(),
                ));
                continue;
            };
            let qc = c.at.change(Some(c.to.clone()), from.clone());
            let origin = format!("{origin} (undo after a failure)");
            match self
                .audited_change(&qc, &c, &origin, "qos_apply", &c.to)
                .await
            {
                Ok(o) => {
                    snap.changes[j].done = false;
                    r.steps.push(step(Outcome::Undone, o.message));
                }
                Err(e) => r.steps.push(step(Outcome::UndoFailed, e)),
            }
        }
    }

    /// Restore what the snapshot at `path` replaced, newest change first.
    pub async fn rollback(
        &self,
        path: &Path,
        dry_run: bool,
        force: bool,
    ) -> Result<Report, String> {
        let mut snap = Snapshot::read(path)?;
        if !force && (snap.state == "restored" || snap.state == "rolled_back") {
            return Err(format!(
                "{}: already {} (--force restores it again)",
                path.display(),
                snap.state.replace('_', " ")
            ));
        }
        let observed = self.observe().await.map_err(|e| e.to_string())?;
        let now = |c: &SnapChange| {
            observed
                .iter()
                .find(|s| s.device == c.at.device && s.port == c.at.port)
                .and_then(|s| s.settings.get(&c.at.setting))
                .cloned()
        };
        let mut r = Report {
            snapshot: Some(path.to_path_buf()),
            ..Report::default()
        };
        for c in snap.changes.iter().rev().filter(|c| c.done) {
            let current = now(c);
            let current_text = crate::setting_text(current.as_ref());
            let step = |outcome, message| Step {
                at: c.at.clone(),
                from: current_text.clone(),
                to: c.from.clone().unwrap_or_else(|| "unknown".into()),
                outcome,
                message,
            };
            let Some(from) = &c.from else {
                r.steps.push(step(
                    Outcome::Skipped,
                    "its value before apply could not be read; left as is".into(),
                ));
                continue;
            };
            let cur = match &current {
                Some(Setting::Value(v)) => Some(normalize(&c.at.setting, v)),
                _ => None,
            };
            if cur.as_deref() == Some(normalize(&c.at.setting, from).as_str()) {
                r.steps
                    .push(step(Outcome::Skipped, "already as before apply".into()));
                continue;
            }
            if !force && cur.as_deref() != Some(normalize(&c.at.setting, &c.to).as_str()) {
                r.steps.push(step(
                    Outcome::Skipped,
                    format!(
                        "changed since apply set {:?}; left alone (--force restores it anyway)",
                        c.to
                    ),
                ));
                continue;
            }
            let qc = c.at.change(cur.clone(), from.clone());
            let (origin, action) = ("qos rollback", "qos_rollback");
            let done = if dry_run {
                self.audited_dry_run(&qc, c, origin, action, &current_text)
                    .await
                    .map(|msg| (Outcome::Would, msg))
            } else {
                self.audited_change(&qc, c, origin, action, &current_text)
                    .await
                    .map(|o| (Outcome::Done, o.message))
            };
            match done {
                Ok((outcome, msg)) => r.steps.push(step(outcome, msg)),
                Err(e) => {
                    r.failed = true;
                    r.steps.push(step(Outcome::Failed, e));
                }
            }
        }
        if !dry_run && !r.failed {
            snap.state = "restored".into();
            snap.write(path)
                .map_err(|e| format!("cannot update the snapshot {}: {e}", path.display()))?;
        }
        Ok(r)
    }

    /// Re-apply the desired state to what a rule's labels select (`rdma.device`,
    /// `rdma.port`, `rdma.qos.setting`; absent labels select everything): the
    /// `qos_apply` remediation action.
    pub async fn reapply(
        &self,
        labels: &BTreeMap<String, String>,
        origin: &str,
    ) -> Result<String, String> {
        let observed = self.observe().await.map_err(|e| e.to_string())?;
        let plan = crate::plan(&self.desired, &observed);
        let sel = |k: &str, v: &str| labels.get(k).is_none_or(|l| l == v);
        let changes: Vec<Change> = plan
            .changes
            .into_iter()
            .filter(|c| {
                sel(rocewatch_metrics::ATTR_DEVICE, &c.at.device)
                    && sel(rocewatch_metrics::ATTR_PORT, &c.at.port.to_string())
                    && sel(ATTR_SETTING, &c.at.setting)
            })
            .collect();
        if changes.is_empty() {
            return Ok("nothing differs from the desired state any more".into());
        }
        let r = self.apply(&changes, false, origin).await?;
        let summary = r
            .steps
            .iter()
            .map(|s| {
                format!(
                    "{} {}/{} {}: {} -> {}",
                    s.outcome, s.at.device, s.at.port, s.at.setting, s.from, s.to
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        if r.failed {
            Err(summary)
        } else {
            Ok(summary)
        }
    }
}
