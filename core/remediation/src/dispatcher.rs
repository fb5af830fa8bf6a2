//! The dispatcher: for each rule transition, the kill switch, cooldown per target and
//! event, the hourly and concurrency limits, the audit record (with the workloads on the
//! transition's port), and the action run under its timeout (log, exec, webhook, plugin,
//! qos_apply). What outlives a dispatcher (a reload) is its [`Memory`]: the limits, and
//! the actions still running, which the agent waits for when it stops.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::actions::{self, describe, Breach, Targets};
use super::at_exit::Owed;
use super::config::{ActionConfig, ActionKind, Event, RemediationConfig};
use super::limits::Limits;
use super::workloads;
use rocewatch_runtime::audit::{
    now_rfc3339, ActionOutcome, AuditError, AuditKind, AuditLog, AuditRecord, Decision,
};
use rocewatch_runtime::rules::Transition;
use rocewatch_runtime::selfmetrics::SelfMetrics;

/// Decides and runs remediation for rule transitions.
pub struct Dispatcher {
    cfg: RemediationConfig,
    audit: Arc<AuditLog>,
    metrics: Arc<SelfMetrics>,
    memory: Memory,
    http: reqwest::Client,
    targets: Targets,
}

/// What the dispatcher remembers across a configuration reload: when each action last ran
/// for each target (cooldowns), the starts of the last hour, and the actions still
/// running. A reload must not let an action run again before its cooldown, nor more
/// actions run than the new `max_concurrent` allows: the running ones keep their slots
/// (a new action starts only while fewer than the limit run), whatever the new limit.
#[derive(Clone)]
pub struct Memory {
    limits: Arc<Mutex<Limits>>,
    /// How many actions run now (each holds a [`Slot`]).
    running: Arc<watch::Sender<usize>>,
    /// The agent stops for good: no action starts any more.
    stopping: Arc<AtomicBool>,
    /// The agent stops for a reload: the next one takes the running actions over.
    handing_over: Arc<AtomicBool>,
}

impl Default for Memory {
    fn default() -> Self {
        Memory {
            limits: Arc::default(),
            running: Arc::new(watch::Sender::new(0)),
            stopping: Arc::default(),
            handing_over: Arc::default(),
        }
    }
}

/// A running action's place among the `max_concurrent`: given back when dropped.
struct Slot(Arc<watch::Sender<usize>>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Memory {
    /// A slot when fewer than `limit` actions run.
    fn slot(&self, limit: usize) -> Option<Slot> {
        let taken = self.running.send_if_modified(|n| {
            let free = *n < limit;
            if free {
                *n += 1;
            }
            free
        });
        taken.then(|| Slot(Arc::clone(&self.running)))
    }

    /// How many actions run now.
    pub fn running(&self) -> usize {
        *self.running.borrow()
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Whether the agent that stops next hands its running actions over to another (a
    /// reload) rather than ending (then it waits for them: [`Memory::finish`]).
    pub fn set_handing_over(&self, yes: bool) {
        self.handing_over.store(yes, Ordering::SeqCst);
    }

    pub fn handing_over(&self) -> bool {
        self.handing_over.load(Ordering::SeqCst)
    }

    /// The agent stops for good: no action starts any more (each is audited as
    /// suppressed), and this waits for the running ones. Each ends by its own timeout at
    /// the latest: then it is abandoned, a command's process group killed, and its result
    /// audited `killed at shutdown`. A second signal ends the wait at once (`at_exit`).
    pub async fn finish(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let mut rx = self.running.subscribe();
        let n = *rx.borrow_and_update();
        if n > 0 {
            tracing::warn!(
                "waiting for {n} remediation action(s) still running, each up to its timeout (then killed); a second signal kills them now"
            );
            let _ = rx.wait_for(|n| *n == 0).await;
            tracing::info!("remediation actions ended");
        }
    }
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("remediation::Memory")
    }
}

/// One transition being decided: what every audit record and breach of it shares.
struct Decided<'a> {
    t: &'a Transition,
    event: Event,
    /// The rule's value, when finite.
    value: Option<f64>,
    decision: Arc<Decision>,
    labels: BTreeMap<String, String>,
    /// The labels as `k=v,...`: whose cooldown an action is held by.
    target: String,
    /// Who holds QPs on the transition's port.
    on_port: Option<workloads::Workloads>,
}

impl Decided<'_> {
    /// An audit record of this transition, of `kind`, for `action`.
    fn base(&self, kind: AuditKind, action: Option<&str>) -> AuditRecord {
        AuditRecord {
            time: now_rfc3339(),
            decision: kind,
            decision_id: String::new(),
            rule: self.t.rule.clone(),
            event: self.event,
            action: action.map(str::to_string),
            labels: None,
            value: self.value,
            detail: None,
            outcome: None,
            duration_ms: None,
            workloads: None,
            workloads_truncated: None,
        }
    }
}

impl Dispatcher {
    /// A dispatcher for `cfg`; fails when the audit log's directory does not exist (only
    /// the state directory is created).
    pub fn new(
        cfg: RemediationConfig,
        metrics: Arc<SelfMetrics>,
        targets: Targets,
    ) -> Result<Arc<Self>, AuditError> {
        Self::with_memory(cfg, metrics, targets, &Memory::default())
    }

    /// A dispatcher that continues `memory` (the one before a reload).
    pub fn with_memory(
        cfg: RemediationConfig,
        metrics: Arc<SelfMetrics>,
        targets: Targets,
        memory: &Memory,
    ) -> Result<Arc<Self>, AuditError> {
        let audit = cfg.audit();
        audit.prepare()?;
        Ok(Arc::new(Dispatcher {
            audit: Arc::new(audit),
            cfg,
            metrics,
            memory: memory.clone(),
            http: reqwest::Client::new(),
            targets,
        }))
    }

    pub fn audit_path(&self) -> &std::path::Path {
        self.audit.path()
    }

    /// Count and audit a record of `decision`; `Err` with the reason when the record could
    /// not be written (the caller must then not act).
    fn record(&self, decision: &Decision, rec: AuditRecord, sync: bool) -> Result<(), String> {
        let (kind, action) = (rec.decision, rec.action.clone());
        let r = self.audit.append_to(decision, rec, sync).map_err(|e| {
            tracing::error!(path = %self.audit.path().display(), decision = %kind, decision_id = decision.id(), "cannot write the remediation audit log: {e}");
            e.to_string()
        });
        // Counted when it happened: an unwritten `executing` did not (it became
        // `refused`, which is counted even when the log cannot take it either).
        if let (Some(a), true) = (&action, r.is_ok() || kind == AuditKind::Refused) {
            self.metrics.remediation_decision(a, kind);
        }
        r
    }

    /// Whether the kill switch stops actions: only "no such file" means it is not engaged;
    /// a kill switch that cannot be checked (a directory the agent cannot search, an I/O
    /// error) counts as engaged, with the reason.
    fn kill_switch(&self) -> Option<String> {
        let path = self.cfg.kill_switch.display();
        match std::fs::symlink_metadata(&self.cfg.kill_switch) {
            Ok(_) => Some(format!("kill switch {path} exists")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => Some(format!(
                "kill switch {path} cannot be checked ({e}): treated as engaged"
            )),
        }
    }

    /// Handle one transition: audit it, then decide every action it names. Actions that
    /// run are spawned; their results are audited when they end. Returns the handles of
    /// what was spawned (tests wait on them).
    pub fn handle(self: &Arc<Self>, t: &Transition) -> Vec<tokio::task::JoinHandle<()>> {
        let event = if t.firing {
            Event::Firing
        } else {
            Event::Clearing
        };
        let labels: BTreeMap<String, String> = t.labels.to_map();
        // Who holds QPs on the port, as the store has it now: read once per transition.
        let on_port = self
            .targets
            .store
            .as_ref()
            .and_then(|s| workloads::on_port(s, &labels));
        let c = Decided {
            t,
            event,
            value: Some(t.value).filter(|v| v.is_finite()),
            // The transition and what each action did: one decision, its labels written once.
            decision: Arc::new(Decision::new(labels.clone())),
            target: labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            labels,
            on_port,
        };
        // The workloads go on the transition's record only, not on each action's.
        let _ = self.record(
            &c.decision,
            AuditRecord {
                workloads: c
                    .on_port
                    .as_ref()
                    .map(|w| serde_json::to_value(&w.list).expect("plain data")),
                workloads_truncated: c.on_port.as_ref().map(|w| w.truncated).filter(|n| *n > 0),
                ..c.base(
                    if t.firing {
                        AuditKind::Fired
                    } else {
                        AuditKind::Cleared
                    },
                    None,
                )
            },
            false,
        );
        t.actions
            .iter()
            .filter_map(|name| {
                // Validated at load: a rule never names an unknown action.
                let action = self.cfg.actions.get(name)?;
                let firing_only = action.kind.firing_only();
                if !action.on.contains(&event) || (firing_only && event == Event::Clearing) {
                    return None;
                }
                self.decide(&c, name, action)
            })
            .collect()
    }

    /// Decide one action of a transition, in order: the agent stopping, the kill switch,
    /// the limits (cooldown, hourly), a concurrency slot, dry run, and the flushed audit
    /// line. What passes all of them is spawned.
    fn decide(
        self: &Arc<Self>,
        c: &Decided<'_>,
        name: &str,
        action: &ActionConfig,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let suppressed = |why: String| AuditRecord {
            detail: Some(why),
            ..c.base(AuditKind::Suppressed, Some(name))
        };
        let stopped = if self.memory.stopping() {
            Some("the agent is shutting down".to_string())
        } else {
            self.kill_switch()
        };
        if let Some(why) = stopped {
            let _ = self.record(&c.decision, suppressed(why), false);
            return None;
        }
        let now = Instant::now();
        let key = (name.to_string(), c.target.clone(), c.event);
        let mut limits = self.memory.limits.lock().unwrap_or_else(|p| p.into_inner());
        let admitted = limits.admit(
            &key,
            action.cooldown,
            self.cfg.max_actions_per_hour,
            now,
            self.longest_cooldown(),
        );
        if let Err(why) = admitted {
            drop(limits);
            let _ = self.record(&c.decision, suppressed(why.to_string()), false);
            return None;
        }
        let Some(slot) = self.memory.slot(self.cfg.max_concurrent) else {
            drop(limits);
            let why = format!(
                "concurrency: {} actions already running (max_concurrent {})",
                self.memory.running(),
                self.cfg.max_concurrent
            );
            let _ = self.record(&c.decision, suppressed(why), false);
            return None;
        };
        // A dry run counts against the limits as the action would.
        limits.count(key.clone(), now);
        if action.dry_run {
            drop((limits, slot));
            let would = format!("would {}", describe(&action.kind));
            let _ = self.record(
                &c.decision,
                AuditRecord {
                    detail: Some(would.clone()),
                    ..c.base(AuditKind::DryRun, Some(name))
                },
                false,
            );
            tracing::warn!(rule = %c.t.rule, action = %name, "dry run: {would}");
            return None;
        }
        // Flushed to disk before the action starts; an action that cannot be audited
        // does not run (and does not count against its limits).
        let executing = AuditRecord {
            detail: Some(describe(&action.kind)),
            ..c.base(AuditKind::Executing, Some(name))
        };
        if let Err(e) = self.record(&c.decision, executing, true) {
            limits.uncount(&key);
            drop((limits, slot));
            tracing::error!(rule = %c.t.rule, action = %name, "refused: audit unavailable ({e}); the action did not run");
            let refused = AuditRecord {
                detail: Some(format!("audit unavailable: {e}")),
                ..c.base(AuditKind::Refused, Some(name))
            };
            let _ = self.record(&c.decision, refused, true);
            return None;
        }
        drop(limits);
        Some(self.spawn_run(c, name, action.clone(), slot))
    }

    /// The longest cooldown of any action: a target unseen for longer is forgotten.
    fn longest_cooldown(&self) -> Duration {
        self.cfg
            .actions
            .values()
            .map(|a| a.cooldown)
            .max()
            .unwrap_or_default()
    }

    /// Run an admitted action under its timeout; its result is audited when it ends, or
    /// (owed) when a second signal ends the agent first. The slot is given back once the
    /// result is written.
    fn spawn_run(
        self: &Arc<Self>,
        c: &Decided<'_>,
        name: &str,
        action: ActionConfig,
        slot: Slot,
    ) -> tokio::task::JoinHandle<()> {
        let breach = Breach {
            rule: c.t.rule.clone(),
            metric: c.t.metric.clone(),
            event: c.event,
            action: name.to_string(),
            severity: c.t.severity.clone(),
            labels: c.labels.clone(),
            value: c.value,
            recent: c.t.recent.clone(),
            dry_run: action.dry_run,
            workloads: c.on_port.as_ref().map(|w| w.list.clone()),
            workloads_truncated: c.on_port.as_ref().map_or(0, |w| w.truncated),
        };
        let me = Arc::clone(self);
        let result_base = c.base(AuditKind::Result, Some(name));
        let decision = Arc::clone(&c.decision);
        let started = Instant::now();
        // What happened to what the action started, when the agent ended it.
        let ended = if matches!(action.kind, ActionKind::Exec { .. }) {
            "; every process it started was killed"
        } else {
            "; abandoned"
        };
        // Should the agent exit at once (a second signal), this is the result.
        let owed = Owed::new({
            let (me, decision, base) =
                (Arc::clone(&me), Arc::clone(&decision), result_base.clone());
            Box::new(move || {
                let after =
                    humantime::format_duration(Duration::from_secs(started.elapsed().as_secs()));
                let detail = format!("killed at shutdown: a second signal ended the agent {after} after the action started{ended}");
                me.record_result(&decision, base, ActionOutcome::Killed, detail, started);
            })
        });
        tokio::spawn(async move {
            let r = tokio::time::timeout(
                action.timeout,
                actions::run(&action, &breach, &me.targets, &me.metrics, &me.http),
            )
            .await;
            let timeout = humantime::format_duration(action.timeout);
            let (outcome, detail) = match r {
                Ok(Ok(msg)) => (ActionOutcome::Ok, msg),
                Ok(Err(msg)) => (ActionOutcome::Error, msg),
                // The agent waited for it to end, up to its timeout.
                Err(_) if me.memory.stopping() => (
                    ActionOutcome::Killed,
                    format!("killed at shutdown: not done within its timeout of {timeout}{ended}"),
                ),
                Err(_) => (
                    ActionOutcome::Timeout,
                    format!("did not finish within {timeout}; abandoned"),
                ),
            };
            if outcome != ActionOutcome::Ok {
                tracing::warn!(rule = %breach.rule, action = %breach.action, outcome = %outcome, "{detail}");
            }
            owed.settle(|| me.record_result(&decision, result_base, outcome, detail, started));
            // Given back once the result is written: an agent that waits for its actions
            // at shutdown exits with every result on disk.
            drop(slot);
        })
    }

    /// Audit an action's result.
    fn record_result(
        &self,
        decision: &Decision,
        base: AuditRecord,
        outcome: ActionOutcome,
        detail: String,
        started: Instant,
    ) {
        let _ = self.record(
            decision,
            AuditRecord {
                time: now_rfc3339(),
                outcome: Some(outcome),
                detail: Some(detail),
                duration_ms: Some(started.elapsed().as_millis() as u64),
                ..base
            },
            false,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate;
    use rocewatch_plugin_api::Attributes;

    fn cfg(dir: &std::path::Path, actions: &str, extra: &str) -> RemediationConfig {
        let text = format!(
            "audit_log = {:?}\nkill_switch = {:?}\n{extra}\n{actions}",
            dir.join("audit.jsonl"),
            dir.join("STOP")
        );
        toml::from_str(&text).unwrap()
    }

    fn fire(rule: &str, device: &str, firing: bool, action: &str) -> Transition {
        Transition {
            rule: rule.into(),
            metric: "rdma.pfc.pause_ratio".into(),
            firing,
            labels: Attributes::new(
                [
                    ("rdma.device".to_string(), device.to_string()),
                    ("rdma.priority".to_string(), "3".to_string()),
                ]
                .into(),
            ),
            value: 0.42,
            recent: vec![(10.0, 0.3), (0.0, 0.42)],
            actions: vec![action.into()],
            severity: "critical".into(),
        }
    }

    fn audit(dir: &std::path::Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn decisions(dir: &std::path::Path) -> Vec<String> {
        audit(dir)
            .iter()
            .map(|r| {
                let d = r["decision"].as_str().unwrap().to_string();
                match r["detail"].as_str() {
                    Some(why) if d == "suppressed" => {
                        format!("{d}:{}", why.split(':').next().unwrap())
                    }
                    _ => d,
                }
            })
            .collect()
    }

    async fn settle(handles: Vec<tokio::task::JoinHandle<()>>) {
        for h in handles {
            h.await.unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_records_of_a_decision_share_its_id_and_carry_its_labels_once() {
        let dir = tempfile::tempdir().unwrap();
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                "[actions.ok]\ntype = \"exec\"\ncommand = [\"true\"]\ndry_run = false\n\n\
                 [actions.note]\ntype = \"log\"\n",
                "",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        let mut t = fire("storm", "mlx5_0", true, "ok");
        t.actions.push("note".into());
        settle(d.handle(&t)).await;
        settle(d.handle(&fire("storm", "mlx5_1", true, "ok"))).await;
        let rec = audit(dir.path());
        let kinds: Vec<&str> = rec
            .iter()
            .map(|r| r["decision"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "fired",
                "executing",
                "dry_run",
                "result",
                "fired",
                "executing",
                "result"
            ],
            "{rec:#?}"
        );
        let id = |r: &serde_json::Value| r["decision_id"].as_str().unwrap().to_string();
        let (first, second) = rec.split_at(4);
        for records in [first, second] {
            // One id for the records of one decision; the labels on its first record only.
            assert!(!id(&records[0]).is_empty());
            assert!(records.iter().all(|r| id(r) == id(&records[0])), "{rec:#?}");
            assert_eq!(records[0]["labels"]["rdma.priority"], "3");
            assert!(
                records[1..].iter().all(|r| r.get("labels").is_none()),
                "{rec:#?}"
            );
        }
        assert_eq!(first[0]["labels"]["rdma.device"], "mlx5_0");
        assert_eq!(second[0]["labels"]["rdma.device"], "mlx5_1");
        assert_ne!(id(&first[0]), id(&second[0]), "two decisions, two ids");
    }

    #[tokio::test(start_paused = true)]
    async fn dry_run_by_default_then_cooldown_then_again_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                &format!("[actions.touch]\ntype = \"exec\"\ncommand = [\"touch\", {marker:?}]\ncooldown = \"10m\""),
                "",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        settle(d.handle(&fire("storm", "mlx5_0", true, "touch"))).await;
        assert!(!marker.exists(), "dry run: nothing ran");
        let rec = audit(dir.path());
        assert_eq!(rec[1]["decision"], "dry_run");
        assert!(
            rec[1]["detail"]
                .as_str()
                .unwrap()
                .starts_with("would run [\"touch\""),
            "{rec:?}"
        );
        assert_eq!(rec[0]["labels"]["rdma.device"], "mlx5_0");
        // Same target within the cooldown: suppressed; another device is its own target.
        tokio::time::advance(Duration::from_secs(60)).await;
        settle(d.handle(&fire("storm", "mlx5_0", true, "touch"))).await;
        settle(d.handle(&fire("storm", "mlx5_1", true, "touch"))).await;
        // Clearing is its own event: not held back by the firing's cooldown.
        settle(d.handle(&fire("storm", "mlx5_0", false, "touch"))).await;
        tokio::time::advance(Duration::from_secs(600)).await;
        settle(d.handle(&fire("storm", "mlx5_0", true, "touch"))).await;
        assert_eq!(
            decisions(dir.path()),
            [
                "fired",
                "dry_run",
                "fired",
                "suppressed:cooldown",
                "fired",
                "dry_run",
                "cleared",
                "dry_run",
                "fired",
                "dry_run"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn hourly_limit_and_kill_switch() {
        let dir = tempfile::tempdir().unwrap();
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                "[actions.note]\ntype = \"log\"\ndry_run = false",
                "max_actions_per_hour = 2",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        for dev in ["a", "b", "c"] {
            settle(d.handle(&fire("r", dev, true, "note"))).await;
        }
        std::fs::write(dir.path().join("STOP"), "").unwrap();
        tokio::time::advance(Duration::from_secs(3600)).await;
        settle(d.handle(&fire("r", "d", true, "note"))).await;
        std::fs::remove_file(dir.path().join("STOP")).unwrap();
        settle(d.handle(&fire("r", "e", true, "note"))).await;
        assert_eq!(
            decisions(dir.path()),
            [
                "fired",
                "executing",
                "result",
                "fired",
                "executing",
                "result",
                "fired",
                "suppressed:rate limit",
                "fired",
                "suppressed:kill switch /",
                "fired",
                "executing",
                "result"
            ]
            .map(|s| if s.starts_with("suppressed:kill") {
                format!(
                    "suppressed:kill switch {} exists",
                    dir.path().join("STOP").display()
                )
            } else {
                s.to_string()
            })
        );
        let m = d.metrics.samples();
        assert!(m.iter().any(|s| s.name == "rocewatch.remediation.decisions"
            && s.attributes.get("decision") == Some("suppressed")));
    }

    #[tokio::test]
    async fn exec_gets_the_breach_in_env_and_stdin_never_through_a_shell() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = dir.path().join("act.sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\n{{ env | grep ^ROCEWATCH_ | sort; cat; }} > {out:?}\necho done\n"),
        )
        .unwrap();
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                &format!("[actions.drain]\ntype = \"exec\"\ncommand = [\"sh\", {script:?}]\ndry_run = false"),
                "",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        // A label that would do harm if it reached a shell.
        let evil = format!("$(touch {})", dir.path().join("pwned").display());
        settle(d.handle(&fire("storm", &evil, true, "drain"))).await;
        let got = std::fs::read_to_string(&out).unwrap();
        assert!(got.contains("ROCEWATCH_RULE=storm"), "{got}");
        assert!(got.contains("ROCEWATCH_EVENT=firing"));
        assert!(got.contains("ROCEWATCH_VALUE=0.42"));
        assert!(got.contains(&format!("ROCEWATCH_LABEL_RDMA_DEVICE={evil}")));
        assert!(
            got.contains("\"rule\":\"storm\"")
                && got.contains("\"recent\":[[10.0,0.3],[0.0,0.42]]"),
            "{got}"
        );
        assert!(
            !dir.path().join("pwned").exists(),
            "the label was never interpreted"
        );
        let rec = audit(dir.path());
        assert_eq!(rec[1]["decision"], "executing");
        assert_eq!(rec[2]["decision"], "result");
        assert_eq!(rec[2]["outcome"], "ok");
        assert!(rec[2]["detail"].as_str().unwrap().contains("done"));
        assert!(rec[2]["duration_ms"].is_u64());
    }

    #[tokio::test]
    async fn the_workloads_on_the_port_go_to_the_audit_record_the_json_and_the_env() {
        let dir = tempfile::tempdir().unwrap();
        let (stdin, env) = (dir.path().join("stdin.json"), dir.path().join("env"));
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                &format!(
                    "[actions.page]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", \"cat > {}; printenv ROCEWATCH_WORKLOADS > {}\"]\ndry_run = false\ncooldown = \"0s\"\non = [\"firing\", \"clearing\"]",
                    stdin.display(),
                    env.display()
                ),
                "",
            ),
            Arc::default(),
            Targets {
                // Two workloads on mlx5_0/1, the pod also and a unit on mlx5_1/1.
                store: Some(super::workloads::tests::seeded()),
                ..Targets::default()
            },
        )
        .unwrap();
        let mut t = fire("storm", "mlx5_0", true, "page");
        Arc::make_mut(&mut t.labels).insert("rdma.port", "1");
        settle(d.handle(&t)).await;
        let pod = "pod:0f1e2d3c-aaaa-bbbb-cccc-000000000001/trainer";
        let want = serde_json::json!([
            {"workload": "slurm:42.0", "kind": "slurm", "qps": 40,
             "attributes": {"slurm.job.id": "42", "slurm.step.id": "0"}},
            {"workload": pod, "kind": "pod", "qps": 12,
             "attributes": {"k8s.pod.uid": "0f1e2d3c-aaaa-bbbb-cccc-000000000001"}},
        ]);
        let rec = audit(dir.path());
        assert_eq!(rec[0]["decision"], "fired");
        assert_eq!(rec[0]["workloads"], want, "{rec:#?}");
        assert!(rec[0].get("workloads_truncated").is_none());
        assert!(
            rec[1..].iter().all(|r| r.get("workloads").is_none()),
            "on the transition's record only: {rec:#?}"
        );
        let breach: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stdin).unwrap()).unwrap();
        assert_eq!(breach["workloads"], want);
        assert_eq!(breach["labels"]["rdma.port"], "1");
        assert_eq!(
            std::fs::read_to_string(&env).unwrap(),
            format!("slurm:42.0,{pod}\n")
        );
        // Clearing carries them too; a transition naming no port carries none (unknown),
        // and the variable is then unset.
        let mut cleared = t.clone();
        cleared.firing = false;
        settle(d.handle(&cleared)).await;
        let rec = audit(dir.path());
        let last_transition = rec
            .iter()
            .rev()
            .find(|r| r["decision"] == "cleared")
            .unwrap();
        assert_eq!(last_transition["workloads"], want);
        let mut portless = fire("storm", "mlx5_0", true, "page");
        Arc::make_mut(&mut portless.labels).remove("rdma.device");
        settle(d.handle(&portless)).await;
        let breach: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stdin).unwrap()).unwrap();
        assert!(breach.get("workloads").is_none(), "{breach}");
        assert_eq!(std::fs::read_to_string(&env).unwrap(), "");
        let rec = audit(dir.path());
        let fired = rec.iter().rev().find(|r| r["decision"] == "fired").unwrap();
        assert!(fired.get("workloads").is_none(), "{fired}");
    }

    #[tokio::test]
    async fn a_hanging_action_times_out_holds_its_slot_and_the_rest_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                "[actions.hang]\ntype = \"exec\"\ncommand = [\"sleep\", \"30\"]\ndry_run = false\ntimeout = \"500ms\"\n\
                 [actions.fail]\ntype = \"exec\"\ncommand = [\"false\"]\ndry_run = false\n\
                 [actions.missing]\ntype = \"exec\"\ncommand = [\"/nonexistent/rocewatch-action\"]\ndry_run = false",
                "max_concurrent = 1",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let hang = d.handle(&fire("r", "a", true, "hang"));
        // The only slot is taken: the next action is suppressed, not queued forever.
        settle(d.handle(&fire("r", "b", true, "fail"))).await;
        settle(hang).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the hung command was abandoned"
        );
        settle(d.handle(&fire("r", "c", true, "fail"))).await;
        settle(d.handle(&fire("r", "d", true, "missing"))).await;
        let rec = audit(dir.path());
        let results: Vec<(&str, &str)> = rec
            .iter()
            .filter(|r| r["decision"] == "result" || r["decision"] == "suppressed")
            .map(|r| {
                (
                    r["action"].as_str().unwrap(),
                    r["outcome"]
                        .as_str()
                        .unwrap_or(r["decision"].as_str().unwrap()),
                )
            })
            .collect();
        assert_eq!(
            results,
            [
                ("fail", "suppressed"),
                ("hang", "timeout"),
                ("fail", "error"),
                ("missing", "error")
            ]
        );
        let missing = rec
            .iter()
            .rev()
            .find(|r| r["decision"] == "result")
            .unwrap();
        assert!(missing["detail"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/rocewatch-action"));
    }

    /// The drain goes through `scontrol` as `health --slurm`'s does (here a script that
    /// answers `show node` with an IDLE node and records the update), on firing only,
    /// with the rule, labels and value as the reason.
    #[tokio::test]
    async fn slurm_drain_runs_scontrol_on_firing_only_with_the_rule_as_reason() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("scontrol.log");
        let script = dir.path().join("scontrol");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {log:?}\n\
                 [ \"$1\" = show ] && echo 'NodeName=gpu07 Arch=x86_64 CoresPerSocket=1\n   State=IDLE ThreadsPerCore=1'\n\
                 exit 0\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                &format!(
                    "[actions.drain]\ntype = \"slurm_drain\"\nnode = \"gpu07\"\nscontrol = {script:?}\ndry_run = false\n"
                ),
                "",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        settle(d.handle(&fire("storm", "mlx5_0", true, "drain"))).await;
        settle(d.handle(&fire("storm", "mlx5_0", false, "drain"))).await;
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls,
            "show node gpu07\nupdate nodename=gpu07 state=drain reason=rocewatch: rule storm fired: rdma.device=mlx5_0,rdma.priority=3 value 0.42\n"
        );
        let result = audit(dir.path())
            .into_iter()
            .find(|r| r["decision"] == "result")
            .unwrap();
        assert_eq!(result["outcome"], "ok", "{result}");
        assert_eq!(
            result["detail"],
            "gpu07 drained: rocewatch: rule storm fired: rdma.device=mlx5_0,rdma.priority=3 value 0.42"
        );
    }

    #[test]
    fn validation_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path(), "[actions.x]\ntype = \"exec\"\ncommand = []", "");
        assert_eq!(
            validate(&c, &[]).unwrap_err().0,
            "remediation.actions.x.command"
        );
        let c = cfg(
            dir.path(),
            "[actions.x]\ntype = \"webhook\"\nurl = \"ftp://h\"",
            "",
        );
        assert!(validate(&c, &[])
            .unwrap_err()
            .1
            .contains("not an http(s) URL"));
        let c = cfg(
            dir.path(),
            "[actions.x]\ntype = \"slurm_drain\"\nnode = \"gpu 1\"",
            "",
        );
        let e = validate(&c, &[]).unwrap_err();
        assert_eq!(e.0, "remediation.actions.x.node");
        assert!(e.1.contains("not a Slurm node name"), "{}", e.1);
        let c = cfg(
            dir.path(),
            "[actions.x]\ntype = \"slurm_drain\"\non = [\"clearing\"]",
            "",
        );
        let e = validate(&c, &[]).unwrap_err();
        assert_eq!(e.0, "remediation.actions.x.on");
        assert!(e.1.contains("when a rule fires only"), "{}", e.1);
        // A rule that drains without quarantine: a warning, naming the rule.
        let c = cfg(dir.path(), "[actions.x]\ntype = \"slurm_drain\"", "");
        let rule = |q: bool| -> rocewatch_runtime::rules::RuleConfig {
            toml::from_str::<toml::Table>(&format!(
                "name = \"r\"\nmetric = \"m\"\nactions = [\"x\"]\nquarantine = {q}"
            ))
            .unwrap()
            .try_into()
            .unwrap()
        };
        let w = crate::warnings(&c, &[rule(false)]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].0, "rules[0] (r).quarantine");
        assert!(w[0].1.contains("resumes it"), "{}", w[0].1);
        assert!(crate::warnings(&c, &[rule(true)]).is_empty());
        let c = cfg(
            dir.path(),
            "[actions.x]\ntype = \"slurm_drain\"\nscontrol = \"\"",
            "",
        );
        assert_eq!(
            validate(&c, &[]).unwrap_err().0,
            "remediation.actions.x.scontrol"
        );
        let c = cfg(dir.path(), "[actions.x]\ntype = \"log\"", "");
        let rule: rocewatch_runtime::rules::RuleConfig =
            toml::from_str::<toml::Table>("name = \"r\"\nmetric = \"m\"\nactions = [\"y\"]")
                .unwrap()
                .try_into()
                .unwrap();
        let e = validate(&c, &[rule]).unwrap_err();
        assert_eq!(e.0, "rules[0] (r).actions");
        assert!(
            e.1.contains("no action \"y\"") && e.1.contains("known: x"),
            "{}",
            e.1
        );
        let bad: Result<RemediationConfig, _> = toml::from_str("[actions.x]\ntype = \"shell\"");
        assert!(bad.is_err());
    }

    fn alive(pid: &str) -> bool {
        // A killed process reparented to init is reaped at once; a zombie counts as gone.
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    async fn wait_gone(pid: &str) -> bool {
        for _ in 0..50 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    #[tokio::test]
    async fn an_action_that_cannot_be_audited_does_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let c = cfg(
            dir.path(),
            &format!("[actions.touch]\ntype = \"exec\"\ncommand = [\"touch\", {marker:?}]\ndry_run = false\ncooldown = \"0s\""),
            "",
        );
        // The audit log's path is a directory: every write fails (as on a full or
        // read-only file system, or a file the agent's user cannot write).
        std::fs::create_dir(dir.path().join("audit.jsonl")).unwrap();
        let metrics = Arc::new(SelfMetrics::default());
        let d = Dispatcher::new(c, Arc::clone(&metrics), Targets::default()).unwrap();
        settle(d.handle(&fire("storm", "mlx5_0", true, "touch"))).await;
        assert!(!marker.exists(), "an unaudited action ran");
        let refused = metrics
            .samples()
            .iter()
            .filter(|s| {
                s.name == "rocewatch.remediation.decisions"
                    && s.attributes.get("decision") == Some("refused")
            })
            .map(|s| s.value.as_f64())
            .sum::<f64>();
        assert_eq!(refused, 1.0);
        // The log works again: the next decision is audited and the action runs.
        std::fs::remove_dir(dir.path().join("audit.jsonl")).unwrap();
        settle(d.handle(&fire("storm", "mlx5_1", true, "touch"))).await;
        assert!(marker.exists(), "the action runs once it can be audited");
        assert!(decisions(dir.path()).contains(&"executing".to_string()));
    }

    #[test]
    fn a_missing_audit_directory_is_created_only_when_it_is_the_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg(dir.path(), "[actions.l]\ntype = \"log\"", "");
        c.audit_log = dir.path().join("nonexistent/dir/audit.jsonl");
        let e = Dispatcher::new(c, Arc::default(), Targets::default())
            .err()
            .expect("a missing directory is an error at start")
            .to_string();
        assert!(
            e.contains("nonexistent/dir") && e.contains("does not exist"),
            "{e}"
        );
        assert!(
            !dir.path().join("nonexistent").exists(),
            "nothing was created"
        );
    }

    #[tokio::test]
    async fn a_kill_switch_that_cannot_be_checked_stops_actions() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let mut c = cfg(
            dir.path(),
            &format!("[actions.touch]\ntype = \"exec\"\ncommand = [\"touch\", {marker:?}]\ndry_run = false"),
            "",
        );
        // Under a regular file: stat fails with ENOTDIR, not "no such file" (as EACCES
        // does for an agent user that cannot search the directory).
        std::fs::write(dir.path().join("file"), "").unwrap();
        c.kill_switch = dir.path().join("file/remediation.disabled");
        let d = Dispatcher::new(c, Arc::default(), Targets::default()).unwrap();
        settle(d.handle(&fire("storm", "mlx5_0", true, "touch"))).await;
        assert!(
            !marker.exists(),
            "the action ran past an unreadable kill switch"
        );
        let rec = audit(dir.path());
        let why = rec[1]["detail"].as_str().unwrap();
        assert!(
            rec[1]["decision"] == "suppressed" && why.contains("cannot be checked"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn exec_output_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let hwm = || -> u64 {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        };
        let before = hwm();
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                "[actions.loud]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", \"head -c 300000000 /dev/zero | tr '\\\\0' x; echo; echo the end\"]\ndry_run = false\ntimeout = \"60s\"",
                "",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        settle(d.handle(&fire("storm", "mlx5_0", true, "loud"))).await;
        let rec = audit(dir.path());
        let result = rec.iter().find(|r| r["decision"] == "result").unwrap();
        let detail = result["detail"].as_str().unwrap();
        assert_eq!(result["outcome"], "ok", "{detail}");
        assert!(
            detail.ends_with("the end") && detail.contains("bytes not kept"),
            "{detail}"
        );
        let grew_mib = hwm().saturating_sub(before) / 1024;
        assert!(
            grew_mib < 64,
            "300 MB of output raised the peak RSS by {grew_mib} MiB"
        );
    }

    #[tokio::test]
    async fn a_timed_out_or_finished_command_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let bg = dir.path().join("bg.pid");
        let daemon = dir.path().join("daemon.pid");
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                &format!(
                    "[actions.hang]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", \"sleep 300 & echo $! > {}; wait\"]\ndry_run = false\ntimeout = \"1s\"\n\
                     [actions.daemon]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", \"sleep 300 & echo $! > {}; exit 0\"]\ndry_run = false\ntimeout = \"20s\"",
                    bg.display(),
                    daemon.display()
                ),
                "",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        settle(d.handle(&fire("r", "a", true, "hang"))).await;
        let started = std::time::Instant::now();
        settle(d.handle(&fire("r", "b", true, "daemon"))).await;
        let rec = audit(dir.path());
        let outcomes: Vec<(&str, &str)> = rec
            .iter()
            .filter(|r| r["decision"] == "result")
            .map(|r| {
                (
                    r["action"].as_str().unwrap(),
                    r["outcome"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(outcomes, [("hang", "timeout"), ("daemon", "ok")]);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the outcome is the exit status, not the end of the output"
        );
        let bg = std::fs::read_to_string(&bg).unwrap();
        let daemon = std::fs::read_to_string(&daemon).unwrap();
        assert!(
            wait_gone(&bg).await,
            "the timed-out command's child {bg} lives on"
        );
        assert!(
            wait_gone(&daemon).await,
            "the finished command's daemon {daemon} lives on"
        );
    }

    #[tokio::test]
    async fn labels_that_would_share_a_variable_are_refused_and_audited() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let d = Dispatcher::new(
            cfg(
                dir.path(),
                &format!("[actions.touch]\ntype = \"exec\"\ncommand = [\"touch\", {marker:?}]\ndry_run = false"),
                "",
            ),
            Arc::default(),
            Targets::default(),
        )
        .unwrap();
        let mut t = fire("r", "a", true, "touch");
        t.labels = Attributes::new(
            [
                ("a.b".to_string(), "1".to_string()),
                ("a_b".to_string(), "2".to_string()),
            ]
            .into(),
        );
        settle(d.handle(&t)).await;
        assert!(!marker.exists());
        let rec = audit(dir.path());
        let result = rec.iter().find(|r| r["decision"] == "result").unwrap();
        assert_eq!(result["outcome"], "error");
        assert!(result["detail"]
            .as_str()
            .unwrap()
            .contains("both map to ROCEWATCH_LABEL_A_B"));
    }

    #[tokio::test]
    async fn running_actions_keep_their_slots_when_a_reload_lowers_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let c = |limit: usize| {
            cfg(
                dir.path(),
                "[actions.hold]\ntype = \"exec\"\ncommand = [\"sleep\", \"2\"]\ndry_run = false\ntimeout = \"20s\"",
                &format!("max_concurrent = {limit}"),
            )
        };
        let memory = Memory::default();
        let before =
            Dispatcher::with_memory(c(2), Arc::default(), Targets::default(), &memory).unwrap();
        let mut running = before.handle(&fire("r", "a", true, "hold"));
        running.extend(before.handle(&fire("r", "b", true, "hold")));
        assert_eq!(
            running.len(),
            2,
            "two actions run: {:?}",
            decisions(dir.path())
        );
        // The limit is lowered to one while two run: no slot is free until both ended.
        let after =
            Dispatcher::with_memory(c(1), Arc::default(), Targets::default(), &memory).unwrap();
        let third = after.handle(&fire("r", "c", true, "hold"));
        assert!(
            third.is_empty(),
            "a third action started past the lowered limit"
        );
        settle(running).await;
        // Both ended: one slot under the new limit.
        let fourth = after.handle(&fire("r", "d", true, "hold"));
        assert_eq!(fourth.len(), 1, "{:?}", decisions(dir.path()));
        let fifth = after.handle(&fire("r", "e", true, "hold"));
        assert!(
            fifth.is_empty(),
            "the new limit holds: {:?}",
            decisions(dir.path())
        );
        settle(fourth).await;
        let d = decisions(dir.path());
        assert_eq!(
            d.iter().filter(|d| *d == "suppressed:concurrency").count(),
            2,
            "{d:?}"
        );
    }

    #[tokio::test]
    async fn finishing_waits_for_running_actions_up_to_their_timeout_and_starts_none() {
        let dir = tempfile::tempdir().unwrap();
        let memory = Memory::default();
        let d = Dispatcher::with_memory(
            cfg(
                dir.path(),
                "[actions.hang]\ntype = \"exec\"\ncommand = [\"sleep\", \"30\"]\ndry_run = false\ntimeout = \"1s\"\n\
                 [actions.quick]\ntype = \"exec\"\ncommand = [\"true\"]\ndry_run = false",
                "",
            ),
            Arc::default(),
            Targets::default(),
            &memory,
        )
        .unwrap();
        let running = d.handle(&fire("r", "a", true, "hang"));
        assert_eq!(memory.running(), 1);
        let started = std::time::Instant::now();
        let finish = {
            let memory = memory.clone();
            tokio::spawn(async move { memory.finish().await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Stopping: nothing starts any more.
        assert!(d.handle(&fire("r", "b", true, "quick")).is_empty());
        finish.await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(800));
        assert_eq!(memory.running(), 0);
        settle(running).await;
        let rec = audit(dir.path());
        let hang = rec
            .iter()
            .find(|r| r["decision"] == "result")
            .expect("the result is written before finish returns");
        assert_eq!(hang["outcome"], "killed", "{rec:#?}");
        assert!(
            hang["detail"].as_str().unwrap().starts_with(
                "killed at shutdown: not done within its timeout of 1s; every process it started was killed"
            ),
            "{hang}"
        );
        assert_eq!(
            decisions(dir.path()),
            [
                "fired",
                "executing",
                "fired",
                "suppressed:the agent is shutting down",
                "result"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reload_keeps_cooldowns() {
        let dir = tempfile::tempdir().unwrap();
        let c = || {
            cfg(
                dir.path(),
                "[actions.l]\ntype = \"log\"\ndry_run = false\ncooldown = \"10m\"",
                "",
            )
        };
        let memory = Memory::default();
        let before =
            Dispatcher::with_memory(c(), Arc::default(), Targets::default(), &memory).unwrap();
        settle(before.handle(&fire("storm", "mlx5_0", true, "l"))).await;
        // The configuration is reloaded: a new dispatcher, the same memory.
        let after =
            Dispatcher::with_memory(c(), Arc::default(), Targets::default(), &memory).unwrap();
        settle(after.handle(&fire("storm", "mlx5_0", true, "l"))).await;
        let d = decisions(dir.path());
        assert_eq!(
            d,
            [
                "fired",
                "executing",
                "result",
                "fired",
                "suppressed:cooldown"
            ],
            "{d:?}"
        );
    }
}
