//! The agent's own metrics (`rocewatch.*`): plugin call durations, plugin errors by
//! reason, samples emitted, counter resets and saturated counters.

use rocewatch_metrics::labels::{
    AuditKind, ExporterDropReason, PluginErrorReason, ReloadResult, RuleTransition,
};
use rocewatch_metrics::names;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use rocewatch_plugin_api::{Attributes, MetricKind, Sample, Value};

#[derive(Debug, Default)]
struct Inner {
    errors: BTreeMap<(String, PluginErrorReason), u64>,
    samples: BTreeMap<String, u64>,
    resets: BTreeMap<String, u64>,
    /// Series now resting at the top of a counter that stops there, by metric name.
    saturated: BTreeMap<String, u64>,
    exporter_errors: BTreeMap<String, u64>,
    exporter_dropped: BTreeMap<(String, ExporterDropReason), u64>,
    exporter_sent: BTreeMap<String, u64>,
    /// Data points receivers said they rejected (OTLP `partial_success`), by exporter.
    exporter_rejected_points: BTreeMap<String, u64>,
    /// Events delivered as OTLP log records.
    events_sent: u64,
    /// Events not delivered, by reason.
    events_dropped: BTreeMap<ExporterDropReason, u64>,
    /// result → count
    alertmanager: BTreeMap<String, u64>,
    /// (action, decision) → count
    remediation: BTreeMap<(String, String), u64>,
    /// (rule, "firing" | "cleared") → count
    rule_transitions: BTreeMap<(String, String), u64>,
    /// Configuration reloads by result.
    reloads: BTreeMap<ReloadResult, u64>,
    /// (plugin, kind) → (count, sum of seconds)
    durations: BTreeMap<(String, String), (u64, f64)>,
    /// The host's quarantine as last read: not yet read, none, or its attributes.
    quarantine: Option<Option<BTreeMap<String, String>>>,
    /// (rail, device) → probe rounds skipped while the rail's previous call ran.
    rounds_skipped: BTreeMap<(Option<u8>, String), u64>,
}

fn counter_sample(
    name: &'static str,
    unit: &'static str,
    v: u64,
    a: BTreeMap<String, String>,
) -> Sample {
    Sample {
        name: name.into(),
        unit: unit.into(),
        value: Value::U64(v),
        attributes: Attributes::new(a.into()),
        source: "agent".into(),
        kind: MetricKind::Counter,
    }
}

/// Events sent as OTLP logs and dropped (once there was one or the other).
fn events_samples(inner: &Inner, out: &mut Vec<Sample>) {
    if inner.events_sent > 0 || !inner.events_dropped.is_empty() {
        out.push(counter_sample(
            names::ROCEWATCH_EVENTS_SENT,
            "{log_record}",
            inner.events_sent,
            BTreeMap::new(),
        ));
    }
    for (reason, v) in &inner.events_dropped {
        out.push(counter_sample(
            names::ROCEWATCH_EVENTS_DROPPED,
            "{log_record}",
            *v,
            attrs(&[("reason", reason.as_str())]),
        ));
    }
}

/// Probe rounds skipped, by `device` and, where known, `rail`.
fn probe_samples(inner: &Inner, out: &mut Vec<Sample>) {
    for ((rail, device), v) in &inner.rounds_skipped {
        let mut a = attrs(&[("device", device)]);
        if let Some(r) = rail {
            a.insert("rail".into(), r.to_string());
        }
        out.push(counter_sample(
            names::ROCEWATCH_PROBE_ROUNDS_SKIPPED,
            "{round}",
            *v,
            a,
        ));
    }
}

/// Shared by every task of the agent.
#[derive(Debug, Default)]
pub struct SelfMetrics {
    inner: Mutex<Inner>,
}

fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl SelfMetrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count a failure of `plugin`.
    pub fn plugin_error(&self, plugin: &str, reason: PluginErrorReason) {
        *self
            .lock()
            .errors
            .entry((plugin.into(), reason))
            .or_default() += 1;
    }

    pub fn plugin_errors(&self, plugin: &str, reason: PluginErrorReason) -> u64 {
        self.lock()
            .errors
            .get(&(plugin.to_string(), reason))
            .copied()
            .unwrap_or(0)
    }

    pub fn samples_emitted(&self, plugin: &str, n: usize) {
        *self.lock().samples.entry(plugin.into()).or_default() += n as u64;
    }

    /// Count a failed export of `exporter` (otlp, collectd, prometheus).
    pub fn exporter_error(&self, exporter: &str) {
        *self
            .lock()
            .exporter_errors
            .entry(exporter.into())
            .or_default() += 1;
    }

    /// Count one snapshot dropped by `exporter`, and why.
    pub fn exporter_dropped(&self, exporter: &str, reason: ExporterDropReason) {
        *self
            .lock()
            .exporter_dropped
            .entry((exporter.into(), reason))
            .or_default() += 1;
    }

    /// Snapshots dropped by `exporter`, whatever the reason.
    pub fn exporter_dropped_count(&self, exporter: &str) -> u64 {
        self.lock()
            .exporter_dropped
            .iter()
            .filter(|((e, _), _)| e == exporter)
            .map(|(_, n)| n)
            .sum()
    }

    /// Snapshots dropped by `exporter` for `reason`.
    pub fn exporter_dropped_for(&self, exporter: &str, reason: ExporterDropReason) -> u64 {
        self.lock()
            .exporter_dropped
            .get(&(exporter.to_string(), reason))
            .copied()
            .unwrap_or(0)
    }

    /// Count `n` data points a receiver took the request of but rejected.
    pub fn exporter_rejected_points(&self, exporter: &str, n: u64) {
        let mut g = self.lock();
        let c = g
            .exporter_rejected_points
            .entry(exporter.into())
            .or_default();
        *c = c.saturating_add(n);
    }

    pub fn exporter_rejected_points_count(&self, exporter: &str) -> u64 {
        self.lock()
            .exporter_rejected_points
            .get(exporter)
            .copied()
            .unwrap_or(0)
    }

    /// Count `n` snapshots delivered by `exporter`.
    /// Count `n` events delivered as OTLP log records.
    pub fn events_sent(&self, n: u64) {
        let mut g = self.lock();
        g.events_sent = g.events_sent.saturating_add(n);
    }

    /// Count `n` events not delivered, for `reason`.
    pub fn events_dropped(&self, reason: ExporterDropReason, n: u64) {
        if n > 0 {
            let mut g = self.lock();
            let c = g.events_dropped.entry(reason).or_default();
            *c = c.saturating_add(n);
        }
    }

    /// Events delivered, and not delivered (every reason), so far.
    pub fn events_counts(&self) -> (u64, u64) {
        let g = self.lock();
        (g.events_sent, g.events_dropped.values().sum())
    }

    pub fn exporter_sent(&self, exporter: &str, n: usize) {
        *self
            .lock()
            .exporter_sent
            .entry(exporter.into())
            .or_default() += n as u64;
    }

    pub fn exporter_errors(&self, exporter: &str) -> u64 {
        self.lock()
            .exporter_errors
            .get(exporter)
            .copied()
            .unwrap_or(0)
    }

    pub fn alertmanager_request(&self, result: &str) {
        *self.lock().alertmanager.entry(result.into()).or_default() += 1;
    }

    pub fn remediation_decision(&self, action: &str, decision: AuditKind) {
        *self
            .lock()
            .remediation
            .entry((action.into(), decision.as_str().into()))
            .or_default() += 1;
    }

    /// A configuration reload (SIGHUP) and its result.
    pub fn config_reload(&self, result: ReloadResult) {
        *self.lock().reloads.entry(result).or_default() += 1;
    }

    /// Reload counts, to carry them into the agent that replaces this one.
    pub fn config_reloads(&self) -> BTreeMap<ReloadResult, u64> {
        self.lock().reloads.clone()
    }

    /// Start from the reload counts of the agent this one replaces.
    pub fn set_config_reloads(&self, counts: BTreeMap<ReloadResult, u64>) {
        self.lock().reloads = counts;
    }

    pub fn rule_transition(&self, rule: &str, firing: bool) {
        let what = if firing {
            RuleTransition::Firing
        } else {
            RuleTransition::Cleared
        }
        .as_str();
        *self
            .lock()
            .rule_transitions
            .entry((rule.into(), what.into()))
            .or_default() += 1;
    }

    /// A probe round in which `rail` (where known) on `device` was not probed: its
    /// previous call was still running.
    pub fn probe_round_skipped(&self, rail: Option<u8>, device: &str) {
        *self
            .lock()
            .rounds_skipped
            .entry((rail, device.into()))
            .or_default() += 1;
    }

    pub fn counter_reset(&self, metric: &str) {
        *self.lock().resets.entry(metric.into()).or_default() += 1;
    }

    /// A series of `metric` came to rest at (`true`) or left (`false`) the top of a
    /// counter that stops there.
    pub fn counter_saturated(&self, metric: &str, saturated: bool) {
        let mut g = self.lock();
        let n = g.saturated.entry(metric.into()).or_default();
        *n = if saturated {
            n.saturating_add(1)
        } else {
            n.saturating_sub(1)
        };
    }

    /// The host's quarantine as the agent last read it: `None` when there is none, else
    /// its `reason`, `origin` and `since`.
    pub fn set_quarantine(&self, q: Option<BTreeMap<String, String>>) {
        self.lock().quarantine = Some(q);
    }

    pub fn call_duration(&self, plugin: &str, kind: &str, d: Duration) {
        let e = &mut *self.lock();
        let slot = e.durations.entry((plugin.into(), kind.into())).or_default();
        slot.0 += 1;
        slot.1 += d.as_secs_f64();
    }

    /// Call durations: (plugin, kind, count, sum of seconds).
    pub fn durations(&self) -> Vec<(String, String, u64, f64)> {
        self.lock()
            .durations
            .iter()
            .map(|((p, k), (c, s))| (p.clone(), k.clone(), *c, *s))
            .collect()
    }

    /// The counters as samples (for exporters); durations are in [`Self::durations`].
    pub fn samples(&self) -> Vec<Sample> {
        let inner = self.lock();
        let mut out = Vec::new();
        let counter = counter_sample;
        for ((plugin, reason), v) in &inner.errors {
            out.push(counter(
                names::ROCEWATCH_PLUGIN_ERRORS,
                "{error}",
                *v,
                attrs(&[("plugin", plugin), ("reason", reason.as_str())]),
            ));
        }
        for (plugin, v) in &inner.samples {
            out.push(counter(
                names::ROCEWATCH_SAMPLES_EMITTED,
                "{sample}",
                *v,
                attrs(&[("plugin", plugin)]),
            ));
        }
        for (exporter, v) in &inner.exporter_errors {
            out.push(counter(
                names::ROCEWATCH_EXPORTER_ERRORS,
                "{error}",
                *v,
                attrs(&[("exporter", exporter)]),
            ));
        }
        for ((exporter, reason), v) in &inner.exporter_dropped {
            out.push(counter(
                names::ROCEWATCH_EXPORTER_DROPPED,
                "{snapshot}",
                *v,
                attrs(&[("exporter", exporter), ("reason", reason.as_str())]),
            ));
        }
        for (exporter, v) in &inner.exporter_rejected_points {
            out.push(counter(
                names::ROCEWATCH_EXPORTER_REJECTED_POINTS,
                "{data_point}",
                *v,
                attrs(&[("exporter", exporter)]),
            ));
        }
        for (exporter, v) in &inner.exporter_sent {
            out.push(counter(
                names::ROCEWATCH_EXPORTER_SENT,
                "{snapshot}",
                *v,
                attrs(&[("exporter", exporter)]),
            ));
        }
        events_samples(&inner, &mut out);
        probe_samples(&inner, &mut out);
        for (result, v) in &inner.alertmanager {
            out.push(counter(
                names::ROCEWATCH_ALERTMANAGER_REQUESTS,
                "{request}",
                *v,
                attrs(&[("result", result.as_str())]),
            ));
        }
        for ((action, decision), v) in &inner.remediation {
            out.push(counter(
                names::ROCEWATCH_REMEDIATION_DECISIONS,
                "{decision}",
                *v,
                attrs(&[("action", action), ("decision", decision)]),
            ));
        }
        for ((rule, what), v) in &inner.rule_transitions {
            out.push(counter(
                names::ROCEWATCH_RULE_TRANSITIONS,
                "{transition}",
                *v,
                attrs(&[("rule", rule), ("transition", what)]),
            ));
        }
        for (result, v) in &inner.reloads {
            out.push(counter(
                names::ROCEWATCH_CONFIG_RELOADS,
                "{reload}",
                *v,
                attrs(&[("result", result.as_str())]),
            ));
        }
        for (name, v) in &inner.resets {
            out.push(counter(
                names::ROCEWATCH_COUNTER_RESETS,
                "{reset}",
                *v,
                attrs(&[("name", name)]),
            ));
        }
        for (name, v) in &inner.saturated {
            out.push(Sample {
                kind: MetricKind::Gauge,
                ..counter(
                    names::ROCEWATCH_COUNTER_SATURATED,
                    "{series}",
                    *v,
                    attrs(&[("name", name)]),
                )
            });
        }
        if let Some(q) = &inner.quarantine {
            let (v, a) = q.as_ref().map_or((0, BTreeMap::new()), |a| (1, a.clone()));
            out.push(Sample {
                kind: MetricKind::Gauge,
                ..counter(names::ROCEWATCH_QUARANTINE, "{quarantine}", v, a)
            });
        }
        out
    }
}
