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
use std::time::{Duration, Instant, SystemTime};

use rocewatch_plugin_api::{
    ApplyOutcome, Attributes, Inventory, MetricKind, PluginKind, QosChange, QosState, Sample,
    Setting, Value,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::host::call::{self, CallError};
use crate::host::registry::{Entry, Instance};
use crate::pipeline::Agent;
use crate::qos::{normalize, Change, QosConfig};
use crate::remediation::{AuditLog, AuditRecord, Event};
use crate::selfmetrics::SelfMetrics;

/// The configuration plugins, each with its call timeout.
pub type ConfigPlugins = Vec<(Entry, Duration)>;

/// Every configuration plugin's view of the ports, merged (a port seen by two plugins
/// has the settings of both). Fails when no configuration plugin answered.
pub async fn observe(
    plugins: &ConfigPlugins,
    metrics: &SelfMetrics,
) -> Result<Vec<QosState>, CallError> {
    let mut out: Vec<QosState> = Vec::new();
    let mut last_err = None;
    let mut any_ok = false;
    for (e, timeout) in plugins {
        match call::call(e, *timeout, metrics, |i| match i {
            Instance::Configuration(c) => c.observe(),
            _ => Ok(Vec::new()),
        })
        .await
        {
            Ok(states) => {
                any_ok = true;
                for s in states {
                    match out
                        .iter_mut()
                        .find(|o| o.device == s.device && o.port == s.port)
                    {
                        Some(o) => {
                            o.settings.extend(s.settings);
                            o.settable_unread.extend(s.settable_unread);
                        }
                        None => out.push(s),
                    }
                }
            }
            Err(err) => last_err = Some(err),
        }
    }
    match (any_ok, last_err) {
        (false, Some(e)) => Err(e),
        _ => Ok(out),
    }
}

/// One changed setting in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapChange {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub setting: String,
    /// The value replaced; `None` when it could not be read (a RoCE default whose
    /// configfs directory apply created): rollback leaves such a setting alone.
    pub from: Option<String>,
    pub to: String,
    /// Made (a change that failed, or was not reached, is not).
    pub done: bool,
}

/// What one `qos apply --yes` replaced, as kept under `[qos] snapshot_dir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// RFC 3339, when apply started.
    pub time: String,
    pub host: String,
    /// `qos apply`, or the rule whose remediation applied it.
    pub origin: String,
    /// applying | applied | rolled_back (a failure undid it) | restored (by `qos rollback`)
    pub state: String,
    pub changes: Vec<SnapChange>,
}

impl Snapshot {
    pub fn read(path: &Path) -> Result<Snapshot, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a rocewatch QoS snapshot: {e}", path.display()))
    }

    /// Written whole to a temporary file, flushed, renamed over `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(self).expect("plain data"))?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// The newest snapshot of `dir` that can be rolled back (applied, or cut short while
/// applying).
pub fn latest_snapshot(dir: &Path) -> Result<Option<PathBuf>, String> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut names: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("qos-") && n.ends_with(".json"))
        })
        .collect();
    names.sort();
    for p in names.into_iter().rev() {
        if let Ok(s) = Snapshot::read(&p) {
            if s.state == "applied" || s.state == "applying" {
                return Ok(Some(p));
            }
        }
    }
    Ok(None)
}

/// What happened to one setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub setting: String,
    pub from: String,
    pub to: String,
    /// would (dry run) | done | failed | undone | undo_failed | skipped
    pub outcome: &'static str,
    pub message: String,
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
            crate::qos::port_label(&st.device, st.port, st.netdev.as_deref()),
            st.setting,
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
    /// The desired state (for re-apply on drift).
    pub desired: QosConfig,
}

impl Applier {
    pub fn new(agent: &Agent) -> Self {
        Applier {
            plugins: config_plugins(agent),
            metrics: Arc::clone(&agent.metrics),
            audit: AuditLog::new(agent.cfg.remediation.audit_log.clone()),
            snapshot_dir: agent.cfg.qos.snapshot_dir.clone(),
            host: agent.host_name.clone(),
            desired: agent.cfg.qos.clone(),
        }
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

    #[allow(clippy::too_many_arguments)]
    fn audit(
        &self,
        decision: &'static str,
        origin: &str,
        action: &str,
        c: &SnapChange,
        detail: String,
        outcome: Option<&'static str>,
        started: Option<Instant>,
    ) {
        let mut labels = BTreeMap::new();
        labels.insert(rocewatch_metrics::ATTR_DEVICE.to_string(), c.device.clone());
        labels.insert(rocewatch_metrics::ATTR_PORT.to_string(), c.port.to_string());
        if let Some(n) = &c.netdev {
            labels.insert(rocewatch_metrics::ATTR_NETDEV.to_string(), n.clone());
        }
        labels.insert(ATTR_SETTING.to_string(), c.setting.clone());
        let rec = AuditRecord {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            decision,
            rule: origin.to_string(),
            event: Event::Firing,
            action: Some(action.to_string()),
            labels,
            value: None,
            detail: Some(detail),
            outcome,
            duration_ms: started.map(|s| s.elapsed().as_millis() as u64),
        };
        // Flushed before a change is made; a change that cannot be audited is not made.
        if let Err(e) = self.audit.append(&rec, decision == "executing") {
            tracing::error!(path = %self.audit.path().display(), "cannot write the audit log: {e}");
        }
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
        let detail = format!("{from_text} -> {}: {msg}", qc.to);
        self.audit("dry_run", origin, action, c, detail, None, None);
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
        self.audit("executing", origin, action, c, detail, None, None);
        let r = self.apply_one(qc, false).await;
        let (outcome, msg) = match &r {
            Ok(o) => ("ok", o.message.clone()),
            Err(e) => ("error", e.clone()),
        };
        self.audit("result", origin, action, c, msg, Some(outcome), Some(t0));
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
                    device: c.device.clone(),
                    port: c.port,
                    netdev: c.netdev.clone(),
                    setting: c.setting.clone(),
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
            let qc = QosChange {
                device: c.device.clone(),
                port: c.port,
                setting: c.setting.clone(),
                from: c.from.clone(),
                to: c.to.clone(),
            };
            let from_text = c.from.clone().unwrap_or_else(|| "unknown".into());
            let step = |outcome, message| Step {
                device: c.device.clone(),
                port: c.port,
                netdev: c.netdev.clone(),
                setting: c.setting.clone(),
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
                    Ok(msg) => step("would", msg),
                    Err(e) => {
                        report.failed = true;
                        step("failed", e)
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
                    let mut st = step("done", o.message);
                    if let Some(p) = o.previous {
                        st.from = p;
                    }
                    report.steps.push(st);
                }
                Err(e) => {
                    report.steps.push(step("failed", e));
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
                device: c.device.clone(),
                port: c.port,
                netdev: c.netdev.clone(),
                setting: c.setting.clone(),
                from: c.to.clone(),
                to: c.from.clone().unwrap_or_else(|| "unknown".into()),
                outcome,
                message,
            };
            let Some(from) = c.from.clone() else {
                r.steps.push(step(
                    "skipped",
                    "its value before could not be read; left as set".into(),
                ));
                continue;
            };
            let qc = QosChange {
                device: c.device.clone(),
                port: c.port,
                setting: c.setting.clone(),
                from: Some(c.to.clone()),
                to: from.clone(),
            };
            let origin = format!("{origin} (undo after a failure)");
            match self
                .audited_change(&qc, &c, &origin, "qos_apply", &c.to)
                .await
            {
                Ok(o) => {
                    snap.changes[j].done = false;
                    r.steps.push(step("undone", o.message));
                }
                Err(e) => r.steps.push(step("undo_failed", e)),
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
                .find(|s| s.device == c.device && s.port == c.port)
                .and_then(|s| s.settings.get(&c.setting))
                .cloned()
        };
        let mut r = Report {
            snapshot: Some(path.to_path_buf()),
            ..Report::default()
        };
        for c in snap.changes.iter().rev().filter(|c| c.done) {
            let current = now(c);
            let current_text = crate::qos::setting_text(current.as_ref());
            let step = |outcome, message| Step {
                device: c.device.clone(),
                port: c.port,
                netdev: c.netdev.clone(),
                setting: c.setting.clone(),
                from: current_text.clone(),
                to: c.from.clone().unwrap_or_else(|| "unknown".into()),
                outcome,
                message,
            };
            let Some(from) = &c.from else {
                r.steps.push(step(
                    "skipped",
                    "its value before apply could not be read; left as is".into(),
                ));
                continue;
            };
            let cur = match &current {
                Some(Setting::Value(v)) => Some(normalize(&c.setting, v)),
                _ => None,
            };
            if cur.as_deref() == Some(normalize(&c.setting, from).as_str()) {
                r.steps
                    .push(step("skipped", "already as before apply".into()));
                continue;
            }
            if !force && cur.as_deref() != Some(normalize(&c.setting, &c.to).as_str()) {
                r.steps.push(step(
                    "skipped",
                    format!(
                        "changed since apply set {:?}; left alone (--force restores it anyway)",
                        c.to
                    ),
                ));
                continue;
            }
            let qc = QosChange {
                device: c.device.clone(),
                port: c.port,
                setting: c.setting.clone(),
                from: cur.clone(),
                to: from.clone(),
            };
            let (origin, action) = ("qos rollback", "qos_rollback");
            let done = if dry_run {
                self.audited_dry_run(&qc, c, origin, action, &current_text)
                    .await
                    .map(|msg| ("would", msg))
            } else {
                self.audited_change(&qc, c, origin, action, &current_text)
                    .await
                    .map(|o| ("done", o.message))
            };
            match done {
                Ok((outcome, msg)) => r.steps.push(step(outcome, msg)),
                Err(e) => {
                    r.failed = true;
                    r.steps.push(step("failed", e));
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
        let plan = crate::qos::plan(&self.desired, &observed);
        let sel = |k: &str, v: &str| labels.get(k).is_none_or(|l| l == v);
        let changes: Vec<Change> = plan
            .changes
            .into_iter()
            .filter(|c| {
                sel(rocewatch_metrics::ATTR_DEVICE, &c.device)
                    && sel(rocewatch_metrics::ATTR_PORT, &c.port.to_string())
                    && sel(ATTR_SETTING, &c.setting)
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
                    s.outcome, s.device, s.port, s.setting, s.from, s.to
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

/// The configuration plugins of the agent that are loaded.
pub fn config_plugins(agent: &Agent) -> ConfigPlugins {
    agent
        .registry
        .of_kind(PluginKind::Configuration)
        .map(|e| (e.clone(), e.timeout(&agent.cfg)))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Metrics

/// The setting's name, on `rdma.qos.*`.
pub const ATTR_SETTING: &str = "rdma.qos.setting";
/// The setting's value, on `rdma.qos.setting`.
pub const ATTR_VALUE: &str = "rdma.qos.value";
/// The fingerprint, on `rdma.qos.fingerprint`.
pub const ATTR_FINGERPRINT: &str = "rdma.qos.fingerprint";

/// The pseudo-plugin the configuration metrics are stored under.
pub const PLUGIN: &str = "qos";

/// A stable digest (FNV-1a, 64 bits, hex) of the effective configuration of every port
/// and of every device's driver and firmware: equal on hosts configured alike, whatever
/// their netdev names. Settings that could not be read count as "unknown" (not why).
pub fn fingerprint(states: &[QosState], inventory: &Inventory) -> String {
    let mut lines = Vec::new();
    for s in states {
        for (k, v) in &s.settings {
            let v = match v {
                Setting::Value(v) => normalize(k, v),
                Setting::Unsupported => "unsupported".into(),
                Setting::Unknown(_) => "unknown".into(),
            };
            lines.push(format!("{}/{} {k}={v}", s.device, s.port));
        }
    }
    for d in &inventory.devices {
        lines.push(format!(
            "{} driver={} fw={}",
            d.name,
            d.driver.as_deref().unwrap_or("?"),
            d.fw_ver.as_deref().unwrap_or("?")
        ));
    }
    lines.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for l in &lines {
        for b in l.bytes().chain(std::iter::once(b'\n')) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn qos_sample(name: &'static str, value: f64, attrs: BTreeMap<String, String>) -> Sample {
    let e = rocewatch_metrics::QOS_CATALOG
        .iter()
        .find(|e| e.name == name)
        .expect("qos metric is catalogued");
    Sample {
        name: name.into(),
        unit: e.unit.into(),
        value: Value::F64(value),
        attributes: Attributes::new(attrs),
        source: PLUGIN.into(),
        kind: MetricKind::Gauge,
    }
}

/// The configuration as samples: every setting (value 1, the value as an attribute),
/// drift per desired setting (1 differs, 0 as desired; none where it cannot be
/// compared), and the fingerprint.
pub fn samples(states: &[QosState], desired: &QosConfig, fingerprint: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    let port_attrs = |s: &QosState| {
        let mut a = BTreeMap::new();
        a.insert(rocewatch_metrics::ATTR_DEVICE.to_string(), s.device.clone());
        a.insert(rocewatch_metrics::ATTR_PORT.to_string(), s.port.to_string());
        if let Some(n) = &s.netdev {
            a.insert(rocewatch_metrics::ATTR_NETDEV.to_string(), n.clone());
        }
        a
    };
    for s in states {
        for (k, v) in &s.settings {
            let mut a = port_attrs(s);
            a.insert(ATTR_SETTING.into(), k.clone());
            a.insert(
                ATTR_VALUE.into(),
                match v {
                    Setting::Value(v) => v.clone(),
                    Setting::Unsupported => "unsupported".into(),
                    Setting::Unknown(_) => "unknown".into(),
                },
            );
            out.push(qos_sample("rdma.qos.setting", 1.0, a));
        }
    }
    if !desired.desired.is_empty() {
        let plan = crate::qos::plan(desired, states);
        let mut drift: BTreeMap<(String, u32, String), (Option<String>, bool)> = BTreeMap::new();
        for s in states {
            for k in crate::qos::desired_for(desired, s).keys() {
                drift.insert(
                    (s.device.clone(), s.port, k.clone()),
                    (s.netdev.clone(), false),
                );
            }
        }
        for c in &plan.changes {
            if let Some(d) = drift.get_mut(&(c.device.clone(), c.port, c.setting.clone())) {
                d.1 = true;
            }
        }
        for b in &plan.blocked {
            drift.remove(&(b.device.clone(), b.port, b.setting.clone()));
        }
        for ((device, port, setting), (netdev, differs)) in drift {
            let mut a = port_attrs(&QosState {
                device,
                port,
                netdev,
                ..QosState::default()
            });
            a.insert(ATTR_SETTING.into(), setting);
            out.push(qos_sample(
                "rdma.qos.drift",
                if differs { 1.0 } else { 0.0 },
                a,
            ));
        }
    }
    out.push(qos_sample(
        "rdma.qos.fingerprint",
        1.0,
        [(ATTR_FINGERPRINT.to_string(), fingerprint.to_string())].into(),
    ));
    out
}

/// Read the configuration every `[qos] interval` and store it as metrics, until
/// `shutdown` turns true.
pub async fn watch(agent: Arc<Agent>, mut shutdown: watch::Receiver<bool>) {
    let interval = agent.cfg.qos.interval;
    let plugins = config_plugins(&agent);
    if interval.is_zero() || plugins.iter().all(|(e, _)| e.instance.is_none()) {
        return;
    }
    let mut last_error = String::new();
    loop {
        match observe(&plugins, &agent.metrics).await {
            Ok(states) => {
                let mut inv = agent.inventory();
                if inv.devices.is_empty() {
                    inv = agent.discover().await.unwrap_or_default();
                }
                let fp = fingerprint(&states, &inv);
                agent.store.ingest_at(
                    PLUGIN,
                    &samples(&states, &agent.cfg.qos, &fp),
                    &agent.metrics,
                    SystemTime::now(),
                    Instant::now(),
                );
                agent.evaluate_rules();
                last_error.clear();
            }
            Err(e) if !e.is_unsupported() && e.to_string() != last_error => {
                tracing::warn!("qos: {e}");
                last_error = e.to_string();
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::qos::tests::state as port;

    fn inv(fw: &str) -> Inventory {
        serde_json::from_value(serde_json::json!({"devices": [
            {"name": "mlx5_0", "node_guid": null, "fw_ver": fw, "driver": "mlx5_core", "ports": []}
        ]}))
        .unwrap()
    }

    #[test]
    fn fingerprint_equal_on_hosts_alike_whatever_their_netdev_names_and_reasons() {
        let v = |s: &str| Setting::Value(s.into());
        let a = [port(
            "mlx5_0",
            "ens1f0np0",
            &[
                ("pfc_enabled", v("3,4")),
                ("trust", Setting::Unknown("/host-a/path: EACCES".into())),
            ],
        )];
        let b = [port(
            "mlx5_0",
            "eth2",
            &[
                ("pfc_enabled", v("4,3")),
                ("trust", Setting::Unknown("another reason".into())),
            ],
        )];
        let fa = fingerprint(&a, &inv("28.39.1002"));
        assert_eq!(fa.len(), 16);
        assert_eq!(fa, fingerprint(&b, &inv("28.39.1002")));
        // A different firmware, or a different value, is a different fingerprint.
        assert_ne!(fa, fingerprint(&a, &inv("28.40.1000")));
        let c = [port("mlx5_0", "eth2", &[("pfc_enabled", v("3"))])];
        assert_ne!(fa, fingerprint(&c, &inv("28.39.1002")));
    }

    #[test]
    fn drift_is_one_differs_zero_matches_absent_when_it_cannot_be_compared() {
        let v = |s: &str| Setting::Value(s.into());
        let states = [port(
            "mlx5_0",
            "eth2",
            &[
                ("mtu", v("1500")),
                ("cnp_dscp", v("48")),
                ("trust", Setting::Unsupported),
            ],
        )];
        let desired: QosConfig = toml::from_str(
            "[[desired]]\nsettings = { mtu = \"9000\", cnp_dscp = \"48\", trust = \"dscp\" }\n",
        )
        .unwrap();
        let s = samples(&states, &desired, "00");
        let drift: BTreeMap<String, f64> = s
            .iter()
            .filter(|s| s.name == "rdma.qos.drift")
            .map(|s| (s.attributes[ATTR_SETTING].clone(), s.value.as_f64()))
            .collect();
        assert_eq!(
            drift,
            [("cnp_dscp".to_string(), 0.0), ("mtu".to_string(), 1.0)].into()
        );
        let settings: Vec<(&str, &str)> = s
            .iter()
            .filter(|s| s.name == "rdma.qos.setting")
            .map(|s| {
                (
                    s.attributes[ATTR_SETTING].as_str(),
                    s.attributes[ATTR_VALUE].as_str(),
                )
            })
            .collect();
        assert_eq!(
            settings,
            [
                ("cnp_dscp", "48"),
                ("mtu", "1500"),
                ("trust", "unsupported")
            ]
        );
        assert_eq!(
            s.last().unwrap().attributes[ATTR_FINGERPRINT],
            "00",
            "one fingerprint sample"
        );
        // Without a desired state: no drift series at all.
        assert!(!samples(&states, &QosConfig::default(), "00")
            .iter()
            .any(|s| s.name == "rdma.qos.drift"));
    }

    #[test]
    fn the_newest_applied_snapshot_is_the_one_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(latest_snapshot(&dir.path().join("none")).unwrap(), None);
        let snap = |state: &str| Snapshot {
            time: "t".into(),
            host: "h".into(),
            origin: "qos apply".into(),
            state: state.into(),
            changes: Vec::new(),
        };
        let p = |n: &str| dir.path().join(n);
        snap("applied")
            .write(&p("qos-20261201T000000-000Z.json"))
            .unwrap();
        snap("applied")
            .write(&p("qos-20261202T000000-000Z.json"))
            .unwrap();
        snap("restored")
            .write(&p("qos-20261203T000000-000Z.json"))
            .unwrap();
        std::fs::write(p("qos-20261204T000000-000Z.json"), "not json").unwrap();
        assert_eq!(
            latest_snapshot(dir.path()).unwrap(),
            Some(p("qos-20261202T000000-000Z.json"))
        );
        assert_eq!(
            Snapshot::read(&p("qos-20261202T000000-000Z.json")).unwrap(),
            snap("applied")
        );
        assert!(Snapshot::read(&p("qos-20261204T000000-000Z.json"))
            .unwrap_err()
            .contains("not a rocewatch QoS snapshot"));
    }
}
