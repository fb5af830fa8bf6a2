//! `[remediation]`: the audit log, the kill switch, the limits, and the actions rules name
//! (`[remediation.actions.NAME]`), validated with the key named.

pub use rocewatch_runtime::audit::Event;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

pub(super) fn default_true() -> bool {
    true
}

/// `audit.jsonl` in the state directory (`$STATE_DIRECTORY`, else `/var/lib/rocewatch`),
/// beside `quarantine.json`.
pub(super) fn default_audit_log() -> PathBuf {
    rocewatch_runtime::audit::state_dir().join("audit.jsonl")
}

pub(super) fn default_audit_max_bytes() -> u64 {
    rocewatch_runtime::audit::Rotation::default().max_bytes
}

pub(super) fn default_audit_keep() -> usize {
    rocewatch_runtime::audit::Rotation::default().keep
}

pub(super) fn default_kill_switch() -> PathBuf {
    PathBuf::from("/etc/rocewatch/remediation.disabled")
}

pub(super) fn default_per_hour() -> u32 {
    20
}

pub(super) fn default_concurrent() -> usize {
    2
}

pub(super) fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

pub(super) fn default_cooldown() -> Duration {
    Duration::from_secs(600)
}

pub(super) fn default_events() -> Vec<Event> {
    vec![Event::Firing, Event::Clearing]
}

pub(super) fn default_retries() -> u32 {
    3
}

/// `[remediation]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemediationConfig {
    /// Where every decision is appended, one JSON object per line.
    #[serde(default = "default_audit_log")]
    pub audit_log: PathBuf,
    /// Rotate the audit log past this size: it becomes `audit_log.1`, and so on (default
    /// 64 MiB; 0: never).
    #[serde(default = "default_audit_max_bytes")]
    pub audit_max_bytes: u64,
    /// Rotated audit logs kept (default 5).
    #[serde(default = "default_audit_keep")]
    pub audit_keep: usize,
    /// While this file exists, no action runs (each one is audited as suppressed).
    #[serde(default = "default_kill_switch")]
    pub kill_switch: PathBuf,
    /// Actions started (dry runs included) in any hour, over all actions.
    #[serde(default = "default_per_hour")]
    pub max_actions_per_hour: u32,
    /// Actions running at once. A reload that lowers it lets the running ones end: a new
    /// one starts only while fewer than this run.
    #[serde(default = "default_concurrent")]
    pub max_concurrent: usize,
    /// The actions rules name, by name.
    #[serde(default)]
    pub actions: BTreeMap<String, ActionConfig>,
}

impl RemediationConfig {
    /// The audit log this section describes.
    pub fn audit(&self) -> rocewatch_runtime::audit::AuditLog {
        rocewatch_runtime::audit::AuditLog::with_rotation(
            self.audit_log.clone(),
            rocewatch_runtime::audit::Rotation {
                max_bytes: self.audit_max_bytes,
                keep: self.audit_keep,
            },
        )
    }
}

impl Default for RemediationConfig {
    fn default() -> Self {
        RemediationConfig {
            audit_log: default_audit_log(),
            audit_max_bytes: default_audit_max_bytes(),
            audit_keep: default_audit_keep(),
            kill_switch: default_kill_switch(),
            max_actions_per_hour: default_per_hour(),
            max_concurrent: default_concurrent(),
            actions: BTreeMap::new(),
        }
    }
}

/// What an action does.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ActionKind {
    /// Log the breach (and audit it).
    Log {},
    /// Run a command: `command = ["/usr/local/sbin/drain", "--node"]`.
    Exec { command: Vec<String> },
    /// Call an external remediation plugin (a `.so` under `[[plugins.external]]`) by name.
    Plugin { plugin: String },
    /// Re-apply `[[qos.desired]]` to what the rule's labels select (`rdma.device`,
    /// `rdma.port`, `rdma.qos.setting`), as `rocewatch qos apply --yes` would: snapshot,
    /// audit, undo on a half-way failure. For a rule on `rdma.qos.drift`; acts when
    /// the rule fires only.
    #[serde(rename = "qos_apply")]
    QosApply {},
    /// Drain this node in Slurm when the rule fires, as `rocewatch health --slurm` does
    /// (the same code): `scontrol update nodename=NODE state=drain reason="rocewatch:
    /// rule RULE fired: LABELS"`, unless an administrator drained it (their reason
    /// stays). Acts when the rule fires only: the drain ends when `health --slurm` finds
    /// the host healthy, so pair it with the rule's `quarantine = true` for a drain that
    /// lasts until the quarantine is released.
    #[serde(rename = "slurm_drain")]
    SlurmDrain {
        /// This node's name in Slurm (default: `$SLURMD_NODENAME`, else the host name
        /// up to its first dot).
        #[serde(default)]
        node: Option<String>,
        /// The `scontrol` to run (default: `scontrol` on the agent's PATH); it reads
        /// `SLURM_CONF` from the agent's environment, else `/etc/slurm/slurm.conf`.
        #[serde(default = "default_scontrol")]
        scontrol: String,
    },
    /// POST the breach as JSON.
    Webhook {
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
        #[serde(default = "default_retries")]
        retries: u32,
    },
}

impl ActionKind {
    /// Whether the action acts when a rule fires only: a re-apply has nothing to do when
    /// the drift clears; a drain ends through `health --slurm` (or the quarantine's
    /// release), not a clear.
    pub fn firing_only(&self) -> bool {
        matches!(
            self,
            ActionKind::SlurmDrain { .. } | ActionKind::QosApply {}
        )
    }
}

fn default_scontrol() -> String {
    "scontrol".into()
}

/// `[remediation.actions.NAME]`
#[derive(Debug, Clone, Deserialize)]
pub struct ActionConfig {
    #[serde(flatten)]
    pub kind: ActionKind,
    /// Only describe what would be done (default): set `dry_run = false` to act.
    #[serde(default = "default_true")]
    pub dry_run: bool,
    /// Per run.
    #[serde(
        default = "default_timeout",
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
    )]
    pub timeout: Duration,
    /// Minimum time between two runs for the same target (rule labels) and event.
    #[serde(
        default = "default_cooldown",
        deserialize_with = "rocewatch_runtime::util::duration::de_duration"
    )]
    pub cooldown: Duration,
    /// On which events (default both).
    #[serde(default = "default_events")]
    pub on: Vec<Event>,
}

/// The time a supervisor commonly gives the agent to stop before it kills it: Kubernetes'
/// default `terminationGracePeriodSeconds`. An action still running at shutdown is waited
/// for up to its `timeout`; past this grace it is killed with the agent, its result unwritten.
pub const SUPERVISOR_STOP_GRACE: Duration = Duration::from_secs(30);

/// What is accepted but likely wrong in `[remediation]`: (key, why). Each action whose
/// `timeout` exceeds [`SUPERVISOR_STOP_GRACE`].
pub fn warnings(
    cfg: &RemediationConfig,
    rules: &[rocewatch_runtime::rules::RuleConfig],
) -> Vec<(String, String)> {
    // A drain a rule sets without quarantine lasts until the next healthy `health
    // --slurm`, which resumes every drain of rocewatch's.
    let drains = rules.iter().enumerate().filter_map(|(i, r)| {
        let drain = r.actions.iter().find(|a| {
            cfg.actions
                .get(*a)
                .is_some_and(|c| matches!(c.kind, ActionKind::SlurmDrain { .. }))
        })?;
        (!r.quarantine).then(|| {
            (
                format!("rules[{i}] ({}).quarantine", r.name),
                format!(
                    "the rule drains the node ({drain:?}) without quarantine = true: the next healthy `rocewatch health --slurm` resumes it; set quarantine = true for a drain that lasts until `rocewatch quarantine release`"
                ),
            )
        })
    });
    let slow = cfg
        .actions
        .iter()
        .filter(|(_, a)| a.timeout > SUPERVISOR_STOP_GRACE)
        .map(|(name, a)| {
            (
                format!("remediation.actions.{name}.timeout"),
                format!(
                    "{}s exceeds the {}s a supervisor commonly gives the agent to stop (Kubernetes' default terminationGracePeriodSeconds): \
                     at shutdown the action would be killed with the agent, its result not audited; \
                     give the agent a longer stop grace (terminationGracePeriodSeconds, systemd TimeoutStopSec) than the longest action timeout",
                    a.timeout.as_secs_f64(),
                    SUPERVISOR_STOP_GRACE.as_secs()
                ),
            )
        });
    slow.chain(drains).collect()
}

/// Checks `[remediation]` and the actions the rules name (their durations are checked with
/// every other one of the configuration: `Config::durations`).
pub fn validate(
    cfg: &RemediationConfig,
    rules: &[rocewatch_runtime::rules::RuleConfig],
) -> Result<(), (String, String)> {
    for (name, a) in &cfg.actions {
        let path = format!("remediation.actions.{name}");
        match &a.kind {
            ActionKind::Exec { command } if command.is_empty() || command[0].is_empty() => {
                return Err((format!("{path}.command"), "must name a program".into()))
            }
            ActionKind::SlurmDrain { scontrol, .. } if scontrol.is_empty() => {
                return Err((format!("{path}.scontrol"), "must name a program".into()))
            }
            ActionKind::SlurmDrain {
                node: Some(node), ..
            } if node.is_empty() || node.contains(|c: char| c.is_whitespace() || c == '=') => {
                return Err((
                    format!("{path}.node"),
                    format!("{node:?} is not a Slurm node name"),
                ))
            }
            ActionKind::Webhook { url, .. }
                if !(url.starts_with("http://") || url.starts_with("https://")) =>
            {
                return Err((
                    format!("{path}.url"),
                    format!("{url:?} is not an http(s) URL"),
                ))
            }
            _ => {}
        }
        if a.kind.firing_only() && !a.on.contains(&Event::Firing) {
            return Err((
                format!("{path}.on"),
                "this action acts when a rule fires only: `on` must include \"firing\"".into(),
            ));
        }
        if a.on.is_empty() {
            return Err((
                format!("{path}.on"),
                "names no event (firing, clearing)".into(),
            ));
        }
    }
    if cfg.audit_keep == 0 {
        return Err((
            "remediation.audit_keep".into(),
            "must be at least 1 (rotated files kept)".into(),
        ));
    }
    if cfg.max_concurrent == 0 {
        return Err((
            "remediation.max_concurrent".into(),
            "must be at least 1".into(),
        ));
    }
    for (i, r) in rules.iter().enumerate() {
        for a in &r.actions {
            if !cfg.actions.contains_key(a) {
                let known: Vec<&str> = cfg.actions.keys().map(String::as_str).collect();
                return Err((
                    format!("rules[{i}] ({}).actions", r.name),
                    format!(
                        "no action {a:?} under [remediation.actions] (known: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}
