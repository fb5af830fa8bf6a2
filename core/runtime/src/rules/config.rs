//! `[[rules]]`: a rule's metric, matchers, condition (value, rate, increase, ratio,
//! absent), threshold, `for` and hysteresis; validated against the metric catalog.

use std::collections::BTreeMap;
use std::time::Duration;

use globset::Glob;
use rocewatch_plugin_api::MetricKind;
use serde::{Deserialize, Serialize};

/// How a rule turns a series into a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Condition {
    /// The latest value.
    #[default]
    Value,
    /// Per-second increase of a counter over `window` (a reset or a saturated read adds
    /// nothing; see `rocewatch_metrics::counter`).
    Rate,
    /// Increase of a counter over `window`.
    Increase,
    /// True when no series matches (a port or a probe that stopped reporting).
    Absent,
    /// `rate(metric) / rate(denominator)` over `window`, the denominator series being the
    /// one with the same `join` attributes (out_of_buffer drops per received packet).
    Ratio,
}

/// Comparison of the value with the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Op {
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
}

impl Op {
    pub(crate) fn holds(self, v: f64, t: f64) -> bool {
        match self {
            Op::Gt => v > t,
            Op::Ge => v >= t,
            Op::Lt => v < t,
            Op::Le => v <= t,
            Op::Eq => v == t,
            Op::Ne => v != t,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "==",
            Op::Ne => "!=",
        }
    }
}

pub(super) fn default_op() -> Op {
    Op::Gt
}

pub(super) fn default_severity() -> String {
    "warning".into()
}

/// One `[[rules]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Unique name (it names the rule in logs, the audit log and `rocewatch rules`).
    pub name: String,
    /// A catalogued metric (`rdma.pfc.pause_ratio`), see docs/METRICS.md.
    pub metric: String,
    /// Attribute matchers: every key must be present and match its glob
    /// (`{ "rdma.priority" = "3", "rdma.device" = "mlx5_*" }`).
    #[serde(default, rename = "match")]
    pub matchers: BTreeMap<String, String>,
    #[serde(default)]
    pub condition: Condition,
    /// For `rate` and `increase` (default 1m).
    #[serde(default, deserialize_with = "rocewatch_duration::de_opt_duration")]
    pub window: Option<Duration>,
    #[serde(default = "default_op")]
    pub op: Op,
    #[serde(default)]
    pub threshold: f64,
    /// The threshold that must still hold to stay firing (default: `threshold`).
    #[serde(default)]
    pub clear: Option<f64>,
    /// How long the condition must hold before the rule fires (default 0).
    #[serde(
        default,
        rename = "for",
        deserialize_with = "rocewatch_duration::de_opt_duration"
    )]
    pub for_: Option<Duration>,
    #[serde(default = "default_severity")]
    pub severity: String,
    #[serde(default)]
    pub description: String,
    /// Remediation actions invoked on firing and clearing (names under
    /// `[remediation.actions]`).
    #[serde(default)]
    pub actions: Vec<String>,
    /// When it fires, the host goes into quarantine (`rocewatch health` says unhealthy,
    /// `--slurm` drains the node) until `rocewatch quarantine release` or the recovery
    /// policy (`[health] release_after`) ends it; an agent's restart never does.
    #[serde(default)]
    pub quarantine: bool,
    /// For `ratio`: the metric divided by.
    #[serde(default)]
    pub denominator: Option<String>,
    /// For `ratio`: matchers on the denominator's series.
    #[serde(default)]
    pub denominator_match: BTreeMap<String, String>,
    /// For `ratio`: the attributes a numerator and its denominator share (default
    /// `rdma.device`, `rdma.port`).
    #[serde(default)]
    pub join: Option<Vec<String>>,
}

impl RuleConfig {
    pub(crate) fn join_keys(&self) -> Vec<String> {
        self.join
            .clone()
            .unwrap_or_else(|| vec!["rdma.device".into(), "rdma.port".into()])
    }
}

/// A rule that does not make sense, with the reason.
pub fn validate(
    rules: &[RuleConfig],
    kind_of: impl Fn(&str) -> Option<MetricKind>,
) -> Result<(), (usize, String)> {
    for (i, r) in rules.iter().enumerate() {
        if r.name.trim().is_empty() {
            return Err((i, "name: must not be empty".into()));
        }
        if rules[..i].iter().any(|o| o.name == r.name) {
            return Err((i, format!("name: {:?} is used by another rule", r.name)));
        }
        if kind_of(&r.metric) == Some(MetricKind::Histogram) {
            let last = format!("{}.last", r.metric);
            let instead = match kind_of(&last) {
                Some(_) => format!("; use {last:?} (with `for` to ride out one slow value)"),
                None => String::new(),
            };
            return Err((
                i,
                format!(
                    "metric: {:?} is a histogram, which rules do not read{instead}",
                    r.metric
                ),
            ));
        }
        if kind_of(&r.metric).is_none() {
            return Err((
                i,
                format!(
                    "metric: {:?} is not a catalogued metric (see docs/METRICS.md)",
                    r.metric
                ),
            ));
        }
        let reads_increases = matches!(
            r.condition,
            Condition::Rate | Condition::Increase | Condition::Ratio
        );
        if reads_increases && kind_of(&r.metric) != Some(MetricKind::Counter) {
            return Err((
                i,
                format!(
                    "condition: {:?} reads a counter's increases, and {:?} is a gauge (use condition = \"value\")",
                    format!("{:?}", r.condition).to_lowercase(),
                    r.metric
                ),
            ));
        }
        for (k, v) in &r.matchers {
            Glob::new(v).map_err(|e| (i, format!("match.{k}: {e}")))?;
        }
        if !r.threshold.is_finite() || r.clear.is_some_and(|c| !c.is_finite()) {
            return Err((i, "threshold and clear must be finite numbers".into()));
        }
        if let Some(c) = r.clear {
            // The clear threshold must be on the "still bad" side's far end, or the rule
            // would clear while its firing condition still holds.
            let loose = match r.op {
                Op::Gt | Op::Ge => c <= r.threshold,
                Op::Lt | Op::Le => c >= r.threshold,
                Op::Eq | Op::Ne => c == r.threshold,
            };
            if !loose {
                return Err((
                    i,
                    format!(
                        "clear: {c} must be on the far side of threshold {} for {} (hysteresis)",
                        r.threshold,
                        r.op.as_str()
                    ),
                ));
            }
        }
        match (&r.denominator, r.condition) {
            (None, Condition::Ratio) => {
                return Err((
                    i,
                    "denominator: a ratio rule needs the metric to divide by".into(),
                ))
            }
            (Some(d), Condition::Ratio) if kind_of(d).is_none() => {
                return Err((
                    i,
                    format!("denominator: {d:?} is not a catalogued metric (see docs/METRICS.md)"),
                ))
            }
            (Some(d), Condition::Ratio) if kind_of(d) != Some(MetricKind::Counter) => {
                return Err((
                    i,
                    format!(
                        "denominator: {d:?} is a gauge; a ratio divides the rates of two counters"
                    ),
                ))
            }
            (Some(_), c) if c != Condition::Ratio => {
                return Err((i, "denominator: only for condition = \"ratio\"".into()))
            }
            _ => {}
        }
        for (k, v) in &r.denominator_match {
            Glob::new(v).map_err(|e| (i, format!("denominator_match.{k}: {e}")))?;
        }
        if r.condition == Condition::Absent && r.clear.is_some() {
            return Err((
                i,
                "clear: an absent rule clears when a series reports again".into(),
            ));
        }
    }
    Ok(())
}
