//! The rule engine: per-series state (history, pending, firing), evaluated on the store
//! after every collection; transitions out, status for `/rules` and `rocewatch rules`.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use globset::{Glob, GlobMatcher};
use serde::Serialize;
use tokio::time::Instant;

use rocewatch_plugin_api::Attributes;

use super::config::{Condition, RuleConfig};
use crate::store::{Reading, Store};

/// Where a rule stands for one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Inactive,
    Pending,
    Firing,
    /// Was firing; cleared at the last change (shown until the next one).
    Cleared,
}

/// A change remediation acts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub rule: String,
    /// The rule's metric.
    pub metric: String,
    pub firing: bool,
    pub labels: Attributes,
    /// The value that made it change (NaN for absent series).
    pub value: f64,
    /// The recent values of the series, oldest first (seconds ago, value).
    pub recent: Vec<(f64, f64)>,
    pub actions: Vec<String>,
    pub severity: String,
}

#[derive(Debug)]
pub(super) struct SeriesState {
    labels: Attributes,
    phase: Phase,
    since: Instant,
    value: f64,
    /// For rates, increases and the samples handed to remediation.
    history: VecDeque<Point>,
    seen: bool,
    /// When the store last read the series: a point is added only for a new read (rules
    /// are evaluated after every collector's collection, not only this series').
    read_at: Option<std::time::SystemTime>,
}

#[derive(Debug)]
pub(super) struct Rule {
    cfg: RuleConfig,
    matchers: Vec<(String, GlobMatcher)>,
    series: BTreeMap<String, SeriesState>,
    /// For ratios: the denominator's matchers and histories by join key.
    den_matchers: Vec<(String, GlobMatcher)>,
    den: BTreeMap<Vec<String>, SeriesState>,
}

pub(super) fn compile(m: &BTreeMap<String, String>) -> Vec<(String, GlobMatcher)> {
    m.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                Glob::new(v).expect("validated glob").compile_matcher(),
            )
        })
        .collect()
}

pub(super) fn join_key(keys: &[String], s: &Reading) -> Vec<String> {
    keys.iter()
        .map(|k| s.attributes.get(k).map(str::to_string).unwrap_or_default())
        .collect()
}

/// One read of a series as a rule saw it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    at: Instant,
    value: f64,
    /// The increase since the read before, as the store judged it (the one definition
    /// of a counter's move, `rocewatch_metrics::counter`): `None` for a gauge, a first
    /// read, a reset or a saturated counter.
    increase: Option<f64>,
}

/// Record a new read of `st` in `s` (once per read), trimming to two windows.
pub(super) fn record(
    s: &mut SeriesState,
    st: &crate::store::Series,
    now: Instant,
    window: Duration,
) {
    s.seen = true;
    if s.read_at == Some(st.time()) {
        return;
    }
    s.read_at = Some(st.time());
    s.history.push_back(Point {
        at: now,
        value: st.sample.value.as_f64(),
        increase: st.increase(),
    });
    let keep = window.max(Duration::from_secs(1)) * 2;
    while s.history.len() > RECENT
        && (s.history.len() > RECENT * 64 || now.duration_since(s.history[0].at) > keep)
    {
        s.history.pop_front();
    }
}

pub(super) fn new_state(labels: Attributes, now: Instant) -> SeriesState {
    SeriesState {
        labels,
        phase: Phase::Inactive,
        since: now,
        value: f64::NAN,
        history: VecDeque::new(),
        seen: false,
        read_at: None,
    }
}

pub(super) fn per_second(history: &VecDeque<Point>, now: Instant, window: Duration) -> Option<f64> {
    increase(history, now, window).and_then(|(inc, span)| (span > 0.0).then(|| inc / span))
}

/// One row of `rocewatch rules`.
#[derive(Debug, Clone, Serialize)]
pub struct RuleStatus {
    pub rule: String,
    pub metric: String,
    pub condition: String,
    pub labels: BTreeMap<String, String>,
    pub phase: Phase,
    pub value: Option<f64>,
    /// Seconds in the current phase.
    pub for_seconds: f64,
    pub severity: String,
}

/// How much history a series keeps beyond its window.
pub(super) const RECENT: usize = 32;

/// Every rule and its per-series state.
#[derive(Debug, Default)]
pub struct Engine {
    rules: Vec<Rule>,
}

impl Engine {
    /// Build from validated rules.
    pub fn new(rules: &[RuleConfig]) -> Self {
        Engine {
            rules: rules
                .iter()
                .map(|r| Rule {
                    matchers: r
                        .matchers
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                Glob::new(v).expect("validated glob").compile_matcher(),
                            )
                        })
                        .collect(),
                    den_matchers: compile(&r.denominator_match),
                    den: BTreeMap::new(),
                    cfg: r.clone(),
                    series: BTreeMap::new(),
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Evaluate every rule against the store at `now`; returns what fired and cleared.
    pub fn evaluate(&mut self, store: &Store, now: Instant) -> Vec<Transition> {
        let mut out = Vec::new();
        for rule in &mut self.rules {
            for s in rule.series.values_mut() {
                s.seen = false;
            }
            let window = rule.cfg.window.unwrap_or(Duration::from_secs(60));
            if let (Condition::Ratio, Some(den)) = (rule.cfg.condition, &rule.cfg.denominator) {
                let keys = rule.cfg.join_keys();
                let (dm, dens) = (&rule.den_matchers, &mut rule.den);
                for d in dens.values_mut() {
                    d.seen = false;
                }
                store.for_each_named(den, |st| {
                    if matches(dm, &st.sample) {
                        let d = dens
                            .entry(join_key(&keys, &st.sample))
                            .or_insert_with(|| new_state(st.sample.attributes.clone(), now));
                        record(d, st, now, window);
                    }
                });
                dens.retain(|_, d| d.seen);
            }
            let mut matched = 0usize;
            let (matchers, series) = (&rule.matchers, &mut rule.series);
            store.for_each_named(&rule.cfg.metric, |st| {
                if !matches(matchers, &st.sample) {
                    return;
                }
                matched += 1;
                if rule.cfg.condition == Condition::Absent {
                    return;
                }
                let key = st.sample.series_key();
                let s = series
                    .entry(key)
                    .or_insert_with(|| new_state(st.sample.attributes.clone(), now));
                record(s, st, now, window);
            });
            if rule.cfg.condition == Condition::Absent {
                let labels: BTreeMap<String, String> = rule.cfg.matchers.clone();
                let s = rule
                    .series
                    .entry(String::new())
                    .or_insert_with(|| new_state(Attributes::new(labels.into()), now));
                s.seen = true;
                s.value = matched as f64;
                step(&rule.cfg, s, matched == 0, matched == 0, now, &mut out);
                continue;
            }
            let cfg = &rule.cfg;
            let (den, keys) = (&rule.den, cfg.join_keys());
            rule.series.retain(|_, s| {
                if !s.seen {
                    // The series is gone (device removed, plugin stopped): a firing rule
                    // clears, everything else is forgotten.
                    if s.phase == Phase::Firing {
                        out.push(transition(cfg, s, false, now));
                    }
                    return false;
                }
                let v = match cfg.condition {
                    Condition::Value => s.history.back().map(|x| x.value),
                    Condition::Rate | Condition::Increase => {
                        increase(&s.history, now, window).map(|(inc, span)| {
                            if cfg.condition == Condition::Rate {
                                if span > 0.0 {
                                    inc / span
                                } else {
                                    f64::NAN
                                }
                            } else {
                                inc
                            }
                        })
                    }
                    Condition::Ratio => {
                        let jk: Vec<String> = keys
                            .iter()
                            .map(|k| s.labels.get(k).map(str::to_string).unwrap_or_default())
                            .collect();
                        match (
                            per_second(&s.history, now, window),
                            den.get(&jk)
                                .and_then(|d| per_second(&d.history, now, window)),
                        ) {
                            (Some(n), Some(d)) if d > 0.0 => Some(n / d),
                            _ => None,
                        }
                    }
                    Condition::Absent => unreachable!("handled above"),
                };
                let v = v.unwrap_or(f64::NAN);
                s.value = v;
                let bad = v.is_finite() && cfg.op.holds(v, cfg.threshold);
                let still_bad =
                    v.is_finite() && cfg.op.holds(v, cfg.clear.unwrap_or(cfg.threshold));
                step(cfg, s, bad, still_bad, now, &mut out);
                true
            });
        }
        out
    }

    /// Every rule's series with their phase and value (rules without series show once).
    pub fn status(&self, now: Instant) -> Vec<RuleStatus> {
        let mut out = Vec::new();
        for r in &self.rules {
            let row = |labels: BTreeMap<String, String>,
                       phase,
                       value: Option<f64>,
                       since: Instant| RuleStatus {
                rule: r.cfg.name.clone(),
                metric: r.cfg.metric.clone(),
                condition: describe(&r.cfg),
                labels,
                phase,
                value: value.filter(|v| v.is_finite()),
                for_seconds: now.duration_since(since).as_secs_f64(),
                severity: r.cfg.severity.clone(),
            };
            if r.series.is_empty() {
                out.push(row(r.cfg.matchers.clone(), Phase::Inactive, None, now));
            }
            for s in r.series.values() {
                out.push(row(s.labels.to_map(), s.phase, Some(s.value), s.since));
            }
        }
        out
    }
}

/// `rate(rdma.pfc.pause_ratio[1m]) > 0.2 for 30s` style summary.
pub fn describe(r: &RuleConfig) -> String {
    let w = humantime::format_duration(r.window.unwrap_or(Duration::from_secs(60)));
    let what = match r.condition {
        Condition::Value => r.metric.clone(),
        Condition::Rate => format!("rate({}[{w}])", r.metric),
        Condition::Increase => format!("increase({}[{w}])", r.metric),
        Condition::Absent => return format!("absent({})", r.metric),
        Condition::Ratio => format!(
            "rate({}[{w}]) / rate({}[{w}])",
            r.metric,
            r.denominator.as_deref().unwrap_or("?")
        ),
    };
    let mut s = format!("{what} {} {}", r.op.as_str(), r.threshold);
    if let Some(c) = r.clear {
        s.push_str(&format!(" (clears at {} {c})", r.op.as_str()));
    }
    if let Some(f) = r.for_.filter(|f| !f.is_zero()) {
        s.push_str(&format!(" for {}", humantime::format_duration(f)));
    }
    s
}

pub(super) fn matches(matchers: &[(String, GlobMatcher)], s: &Reading) -> bool {
    matchers
        .iter()
        .all(|(k, g)| s.attributes.get(k).is_some_and(|v| g.is_match(v)))
}

/// Increase of a counter over the last `window` of `history` and the seconds it spans:
/// the increases of the reads in the window, each since the read before it (the last
/// read before the window starts it). An interval whose increase is unknown (a reset, a
/// counter resting at its top) is left out of both, so it neither reads as idle nor
/// dilutes the rate; `None` when no interval of the window is known.
pub(super) fn increase(
    history: &VecDeque<Point>,
    now: Instant,
    window: Duration,
) -> Option<(f64, f64)> {
    let start = now.checked_sub(window).unwrap_or(now);
    let first = history.iter().position(|p| p.at >= start)?;
    // Include the last point before the window so a window always has a start value.
    let from = first.saturating_sub(1);
    let pts: Vec<&Point> = history.iter().skip(from).collect();
    let mut known = None;
    for w in pts.windows(2) {
        if let Some(d) = w[1].increase {
            let (inc, span) = known.get_or_insert((0.0, 0.0));
            *inc += d;
            *span += w[1].at.duration_since(w[0].at).as_secs_f64();
        }
    }
    known
}

pub(super) fn transition(
    cfg: &RuleConfig,
    s: &SeriesState,
    firing: bool,
    now: Instant,
) -> Transition {
    Transition {
        rule: cfg.name.clone(),
        metric: cfg.metric.clone(),
        firing,
        labels: s.labels.clone(),
        value: s.value,
        recent: s
            .history
            .iter()
            .rev()
            .take(RECENT)
            .rev()
            .map(|p| (now.duration_since(p.at).as_secs_f64(), p.value))
            .collect(),
        actions: cfg.actions.clone(),
        severity: cfg.severity.clone(),
    }
}

/// One evaluation of one series: `bad` is the firing condition, `still_bad` the one that
/// keeps it firing (hysteresis).
pub(super) fn step(
    cfg: &RuleConfig,
    s: &mut SeriesState,
    bad: bool,
    still_bad: bool,
    now: Instant,
    out: &mut Vec<Transition>,
) {
    let hold = cfg.for_.unwrap_or_default();
    match s.phase {
        Phase::Inactive | Phase::Cleared if bad => {
            s.phase = Phase::Pending;
            s.since = now;
            if hold.is_zero() {
                s.phase = Phase::Firing;
                out.push(transition(cfg, s, true, now));
            }
        }
        Phase::Pending if !bad => {
            s.phase = Phase::Inactive;
            s.since = now;
        }
        Phase::Pending if now.duration_since(s.since) >= hold => {
            s.phase = Phase::Firing;
            s.since = now;
            out.push(transition(cfg, s, true, now));
        }
        Phase::Firing if !still_bad => {
            s.phase = Phase::Cleared;
            s.since = now;
            out.push(transition(cfg, s, false, now));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::validate;
    use crate::selfmetrics::SelfMetrics;
    use rocewatch_plugin_api::Sample;
    use serde::Deserialize;

    use rocewatch_plugin_api::{MetricKind, Value};

    use std::time::SystemTime;

    struct Rig {
        store: Store,
        engine: Engine,
        t0: Instant,
        m: SelfMetrics,
    }

    impl Rig {
        fn new(r: RuleConfig) -> Rig {
            // Rates, increases and ratios read counters; the rest read gauges here.
            let kind = match r.condition {
                Condition::Value | Condition::Absent => MetricKind::Gauge,
                _ => MetricKind::Counter,
            };
            validate(std::slice::from_ref(&r), |_| Some(kind)).unwrap();
            Rig {
                store: Store::new(),
                engine: Engine::new(&[r]),
                t0: Instant::now(),
                m: SelfMetrics::default(),
            }
        }

        /// Ingest `samples` at t0 + `secs` and evaluate: (firing?, value) per transition.
        async fn at(&mut self, secs: u64, samples: &[Sample]) -> Vec<(bool, f64)> {
            // Paused tokio time: move the clock to t0 + secs.
            let target = self.t0 + Duration::from_secs(secs);
            tokio::time::advance(target.saturating_duration_since(Instant::now())).await;
            let now = Instant::now();
            self.store.ingest_at(
                "p",
                samples,
                &self.m,
                SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
                std::time::Instant::now(),
            );
            self.engine
                .evaluate(&self.store, now)
                .into_iter()
                .map(|t| (t.firing, t.value))
                .collect()
        }

        fn phase(&self) -> Vec<Phase> {
            self.engine
                .status(self.t0)
                .into_iter()
                .map(|s| s.phase)
                .collect()
        }
    }

    fn rule(toml_text: &str) -> RuleConfig {
        #[derive(Deserialize)]
        struct W {
            rules: Vec<RuleConfig>,
        }
        let w: W = toml::from_str(toml_text).unwrap();
        w.rules.into_iter().next().unwrap()
    }

    fn sample(name: &'static str, v: Value, kind: MetricKind, prio: &str) -> Sample {
        Sample {
            name: name.into(),
            unit: "1".into(),
            value: v,
            attributes: Attributes::new(
                [
                    ("rdma.device".to_string(), "mlx5_0".to_string()),
                    ("rdma.priority".to_string(), prio.to_string()),
                ]
                .into(),
            ),
            source: "test".into(),
            kind,
        }
    }

    fn ratio(v: f64, prio: &str) -> Sample {
        sample(
            "rdma.pfc.pause_ratio",
            Value::F64(v),
            MetricKind::Gauge,
            prio,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn pending_for_then_firing_then_hysteresis_then_cleared() {
        let mut r = Rig::new(rule(
            r#"[[rules]]
name = "pfc-storm"
metric = "rdma.pfc.pause_ratio"
match = { "rdma.priority" = "3" }
op = ">"
threshold = 0.2
clear = 0.1
for = "30s""#,
        ));
        // Priority 0 never matches.
        assert_eq!(r.at(0, &[ratio(0.3, "3"), ratio(0.9, "0")]).await, vec![]);
        assert_eq!(r.phase(), vec![Phase::Pending]);
        assert_eq!(r.at(20, &[ratio(0.3, "3")]).await, vec![], "not yet 30 s");
        assert_eq!(r.at(30, &[ratio(0.25, "3")]).await, vec![(true, 0.25)]);
        assert_eq!(r.phase(), vec![Phase::Firing]);
        assert_eq!(
            r.at(40, &[ratio(0.15, "3")]).await,
            vec![],
            "above clear: still firing"
        );
        assert_eq!(r.at(50, &[ratio(0.05, "3")]).await, vec![(false, 0.05)]);
        assert_eq!(r.phase(), vec![Phase::Cleared]);
        // A blip shorter than `for` never fires.
        assert_eq!(r.at(60, &[ratio(0.5, "3")]).await, vec![]);
        assert_eq!(r.at(70, &[ratio(0.0, "3")]).await, vec![]);
        assert_eq!(r.phase(), vec![Phase::Inactive]);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_over_a_window_survives_a_counter_reset() {
        let mut r = Rig::new(rule(
            r#"[[rules]]
name = "cnp-surge"
metric = "rdma.port.cnp.handled"
condition = "rate"
window = "30s"
threshold = 50"#,
        ));
        let c = |v| {
            sample(
                "rdma.port.cnp.handled",
                Value::U64(v),
                MetricKind::Counter,
                "3",
            )
        };
        assert_eq!(r.at(0, &[c(1000)]).await, vec![], "one point: no rate");
        assert_eq!(r.at(10, &[c(1100)]).await, vec![], "10/s");
        // 100/s: fires at once (no `for`).
        let t = r.at(20, &[c(2100)]).await;
        assert_eq!(t.len(), 1);
        assert!(t[0].0 && (t[0].1 - 55.0).abs() < 1e-9, "{t:?}");
        // The counter resets (driver reload) and restarts from 0: the drop is no negative
        // rate, and the interval across it is unknown: it neither adds nor dilutes. Over
        // the 30 s window: 1100 in the 20 s known, 55/s, still firing.
        assert_eq!(r.at(30, &[c(10)]).await, vec![], "still firing");
        assert_eq!(r.phase(), vec![Phase::Firing]);
        // 10 over the 30 s after it: 0.33/s, cleared.
        let t = r.at(60, &[c(20)]).await;
        assert_eq!(t.len(), 1);
        assert!(!t[0].0 && (t[0].1 - 10.0 / 30.0).abs() < 1e-9, "{t:?}");
        assert_eq!(r.phase(), vec![Phase::Cleared]);
    }

    /// Issue 27: a 64-bit counter going 3 000 000 000 → 100 (perfquery -R, a driver
    /// reload) was taken for a 32-bit wrap, a rate of 4.3e8/s, and a rate rule fired.
    #[tokio::test(start_paused = true)]
    async fn a_reset_of_a_64_bit_counter_fires_no_rate_or_increase_rule() {
        for condition in ["rate", "increase"] {
            let mut r = Rig::new(rule(&format!(
                "[[rules]]\nname = \"cnp-surge\"\nmetric = \"rdma.port.cnp.handled\"\ncondition = \"{condition}\"\nwindow = \"30s\"\nthreshold = 1000"
            )));
            let c = |v| {
                let mut s = sample(
                    "rdma.port.cnp.handled",
                    Value::U64(v),
                    MetricKind::Counter,
                    "3",
                );
                s.source = "hw_counters/rp_cnp_handled".into();
                s
            };
            assert_eq!(r.at(0, &[c(2_999_999_900)]).await, vec![]);
            assert_eq!(r.at(10, &[c(3_000_000_000)]).await, vec![], "10/s");
            assert_eq!(
                r.at(20, &[c(100)]).await,
                vec![],
                "{condition}: a reset is no traffic"
            );
            assert_eq!(
                r.at(30, &[c(200)]).await,
                vec![],
                "{condition}: 10/s after it"
            );
            assert_eq!(r.phase(), vec![Phase::Inactive], "{condition}");
        }
    }

    /// A counter resting at its top (IB PortCounters stop there) moves by an unknown
    /// amount: a rule reads no value from it, neither idle (`<` would fire) nor busy.
    #[tokio::test(start_paused = true)]
    async fn a_saturated_counter_reads_neither_idle_nor_busy() {
        for op in ["<", ">"] {
            let mut r = Rig::new(rule(&format!(
                "[[rules]]\nname = \"r\"\nmetric = \"rdma.port.io\"\ncondition = \"rate\"\nwindow = \"30s\"\nop = \"{op}\"\nthreshold = 1000"
            )));
            let top = 4 * 4_294_967_295;
            let c = |v| {
                let mut s = sample("rdma.port.io", Value::U64(v), MetricKind::Counter, "3");
                s.source = "counters/port_xmit_data".into();
                s
            };
            assert_eq!(r.at(0, &[c(top - 1_000_000)]).await, vec![]);
            assert_eq!(r.at(10, &[c(top)]).await, vec![], "{op}");
            assert_eq!(r.at(20, &[c(top)]).await, vec![], "{op}");
            assert_eq!(
                r.at(50, &[c(top)]).await,
                vec![],
                "{op}: pegged for a whole window"
            );
            assert_eq!(r.phase(), vec![Phase::Inactive], "{op}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn absent_fires_when_nothing_matches_and_clears_when_it_returns() {
        let mut r = Rig::new(rule(
            r#"[[rules]]
name = "port-missing"
metric = "rdma.port.up"
match = { "rdma.device" = "mlx5_*" }
condition = "absent"
for = "10s""#,
        ));
        let up = sample("rdma.port.up", Value::U64(1), MetricKind::Gauge, "0");
        assert_eq!(r.at(0, std::slice::from_ref(&up)).await, vec![]);
        assert_eq!(r.at(5, &[]).await, vec![], "pending");
        assert_eq!(r.at(15, &[]).await, vec![(true, 0.0)]);
        assert_eq!(r.at(20, &[up]).await, vec![(false, 1.0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_firing_series_that_vanishes_clears() {
        let mut r = Rig::new(rule(
            r#"[[rules]]
name = "port-down"
metric = "rdma.pfc.pause_ratio"
op = ">="
threshold = 1"#,
        ));
        assert_eq!(r.at(0, &[ratio(1.0, "3")]).await, vec![(true, 1.0)]);
        let t = r.at(10, &[]).await;
        assert_eq!(t.len(), 1);
        assert!(!t[0].0);
        assert!(r.engine.status(r.t0)[0].phase == Phase::Inactive);
    }

    #[tokio::test(start_paused = true)]
    async fn ratio_of_two_rates_joined_on_device_and_port() {
        let mut r = Rig::new(rule(
            r#"[[rules]]
name = "drops-per-packet"
metric = "rdma.port.out_of_buffer"
condition = "ratio"
denominator = "rdma.port.packets"
denominator_match = { "rdma.priority" = "3" }
window = "30s"
threshold = 0.01"#,
        ));
        let c = |name: &'static str, v: u64, dev: &str| {
            let mut s = sample(name, Value::U64(v), MetricKind::Counter, "3");
            std::sync::Arc::make_mut(&mut s.attributes).insert("rdma.device", dev);
            s
        };
        let at = |oob0: u64, pk0: u64, pk1: u64| {
            vec![
                c("rdma.port.out_of_buffer", oob0, "mlx5_0"),
                c("rdma.port.packets", pk0, "mlx5_0"),
                c("rdma.port.packets", pk1, "mlx5_1"),
            ]
        };
        assert_eq!(r.at(0, &at(0, 0, 0)).await, vec![]);
        // 1 drop per 1000 packets: below 1 %.
        assert_eq!(r.at(10, &at(10, 10_000, 0)).await, vec![]);
        // 500 more drops per 10 000 more packets over the window: 510 / 20 000 = 2.55 %.
        let t = r.at(20, &at(510, 20_000, 1_000_000)).await;
        assert_eq!(t.len(), 1, "{t:?}");
        assert!(t[0].0 && (t[0].1 - 0.0255).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn validation_names_the_problem() {
        let known = |m: &str| (m == "rdma.pfc.pause_ratio").then_some(MetricKind::Gauge);
        let base = r#"[[rules]]
name = "x"
metric = "rdma.pfc.pause_ratio"
threshold = 0.2
"#;
        let err = |extra: &str, metric_ok: bool| {
            let r = rule(&format!("{base}{extra}"));
            validate(&[r], |m| known(m).filter(|_| metric_ok))
                .unwrap_err()
                .1
        };
        assert!(err("", false).contains("not a catalogued metric"));
        let hist = rule("[[rules]]\nname = \"x\"\nmetric = \"rdma.probe.rtt\"\nthreshold = 0.01");
        assert!(validate(&[hist], rocewatch_metrics::kind_of)
            .unwrap_err()
            .1
            .contains("rdma.probe.rtt.last"));
        assert!(err("clear = 0.3", true).contains("hysteresis"));
        assert!(err("match = { \"rdma.device\" = \"[x\" }", true).contains("match.rdma.device"));
        assert!(err("condition = \"ratio\"", true).contains("is a gauge"));
        // Rates and increases read counters: a gauge is named, not read as one.
        assert!(err("condition = \"rate\"", true).contains(
            "\"rate\" reads a counter's increases, and \"rdma.pfc.pause_ratio\" is a gauge"
        ));
        let counters = |m: &str| {
            Some(if m == "rdma.pfc.pause_ratio" {
                MetricKind::Gauge
            } else {
                MetricKind::Counter
            })
        };
        let ratio = rule("[[rules]]\nname = \"x\"\nmetric = \"rdma.port.out_of_buffer\"\ncondition = \"ratio\"\nthreshold = 1");
        assert!(validate(std::slice::from_ref(&ratio), counters)
            .unwrap_err()
            .1
            .contains("denominator"));
        let mut ratio = ratio;
        ratio.denominator = Some("rdma.pfc.pause_ratio".into());
        assert!(validate(&[ratio], counters)
            .unwrap_err()
            .1
            .contains("denominator: \"rdma.pfc.pause_ratio\" is a gauge"));
        assert!(err("denominator = \"rdma.pfc.pause_ratio\"", true).contains("only for condition"));
        let r = rule(base);
        let e = validate(&[r.clone(), r], known).unwrap_err();
        assert_eq!(e.0, 1);
        assert!(e.1.contains("used by another rule"));
    }
}
