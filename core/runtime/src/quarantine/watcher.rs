//! The watcher: a rule with `quarantine = true` that fires puts the host in quarantine
//! (the state file, audited); the state is exported as `rocewatch.quarantine`, read again
//! every interval (an operator's `rocewatch quarantine release` is another process; a
//! file that cannot be read is exported as a quarantine of origin `unreadable`, as
//! `health` counts it); and, where `[health] release_after` is set, a quarantine a rule
//! set ends once that rule has been clear that long and the self-test passes (handed in:
//! the agent's is `rocewatch health`'s checks). A restart ends nothing. The file is read
//! at the agent's interval but at most once a second ([`MIN_TICK`]): at 5 Hz reading it
//! every collection was 2 % of the scrape path's CPU, and a quarantine is a state an
//! operator changes by hand, for which a second is soon enough.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::file::{Quarantine, QuarantineFile};
use crate::audit::AuditLog;
use crate::events::{self, Event};
use crate::pipeline::Pipeline;
use crate::rules::{Phase, Transition};
use crate::selfmetrics::SelfMetrics;
use tokio::sync::watch;

/// The watcher's shortest period: a shorter agent interval does not read the file more
/// often than this.
pub const MIN_TICK: Duration = Duration::from_secs(1);

/// The origin exported for a quarantine file that cannot be read.
const UNREADABLE: &str = "unreadable";

/// What the recovery waits for before it ends a quarantine a rule set: a self-test of
/// the host (the agent's: `rocewatch health` without the quarantine and agent checks).
pub trait SelfTest: Send + Sync {
    /// An earlier run's reads are still blocked (a wedged NIC): none is started.
    fn in_flight(&self) -> bool;
    /// One run: whether the host passed, and the line that says why.
    fn run(&self) -> Pin<Box<dyn Future<Output = SelfTestReport> + Send + '_>>;
}

/// What a self-test said.
pub struct SelfTestReport {
    pub passed: bool,
    /// The verdict's one line (said once while it keeps the quarantine).
    pub line: String,
}

/// The watcher's settings.
pub struct Settings {
    pub file: QuarantineFile,
    pub audit: AuditLog,
    /// The rules that quarantine when they fire.
    pub rules: BTreeSet<String>,
    /// How long a quarantining rule must be clear before the self-test may end its
    /// quarantine; `None`: only an operator ends it.
    pub release_after: Option<Duration>,
    /// How often the file is read, exported and judged (the agent's interval; at most
    /// once per [`MIN_TICK`]).
    pub interval: Duration,
}

/// Quarantines on the rules' firing, exports the state and runs the recovery policy.
pub struct Watcher {
    file: QuarantineFile,
    audit: AuditLog,
    /// The rules that quarantine when they fire.
    rules: BTreeSet<String>,
    release_after: Option<Duration>,
    self_test: Box<dyn SelfTest>,
    interval: Duration,
    /// Since when the quarantining rule has had no firing series.
    clear_since: Option<Instant>,
    /// The last self-test line that kept the quarantine (said once).
    kept_by: Option<String>,
}

impl Watcher {
    pub fn new(settings: Settings, self_test: Box<dyn SelfTest>) -> Watcher {
        let Settings {
            file,
            audit,
            rules,
            release_after,
            interval,
        } = settings;
        Watcher {
            file,
            audit,
            rules,
            release_after,
            self_test,
            interval: interval.max(MIN_TICK),
            clear_since: None,
            kept_by: None,
        }
    }

    /// Until `stop`: quarantine on the rules' firing, export, recover.
    pub async fn run(
        mut self,
        pipeline: Arc<Pipeline>,
        metrics: Arc<SelfMetrics>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut rx = pipeline.transitions();
        let mut tick = tokio::time::interval(self.interval);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                t = rx.recv() => match t {
                    Ok(t) => self.transition(&t),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
                _ = tick.tick() => self.tick(&pipeline, &metrics).await,
            }
        }
    }

    /// A quarantining rule fired: into quarantine (kept as it is when already in one).
    fn transition(&mut self, t: &Transition) {
        if t.firing && self.rules.contains(&t.rule) {
            self.enter(&t.rule, t.labels.to_map(), t.value);
        }
    }

    /// Into quarantine for `rule` firing on `labels` (kept as it is when already in one).
    fn enter(&mut self, rule: &str, labels: BTreeMap<String, String>, value: f64) {
        let on: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let reason = format!("rule {rule} firing ({}) at {value}", on.join(","));
        let q = Quarantine::now(&reason, &format!("rule:{rule}"), labels);
        match self.file.enter(&q, &self.audit) {
            Ok(true) => tracing::warn!(path = %self.file.path().display(), "quarantine: {reason}"),
            Ok(false) => {}
            Err(e) => tracing::error!("quarantine: {e}; the host is NOT in quarantine ({reason})"),
        }
        self.clear_since = None;
    }

    /// Export what the file says, and end a rule's quarantine that has recovered. A
    /// quarantining rule found firing enters it too (a transition can be missed: the
    /// receiver lagged, or the rule fired before the watcher listened).
    async fn tick(&mut self, pipeline: &Pipeline, metrics: &SelfMetrics) {
        let status = pipeline.rule_status();
        if let Some(s) = status
            .iter()
            .find(|s| self.rules.contains(&s.rule) && s.phase == Phase::Firing)
        {
            if matches!(self.file.read(), Ok(None)) {
                self.enter(
                    &s.rule.clone(),
                    s.labels.clone(),
                    s.value.unwrap_or(f64::NAN),
                );
            }
        }
        let q = match self.file.read() {
            Ok(q) => q,
            Err(e) => {
                tracing::error!("quarantine: {e}");
                // `health` counts a file it cannot read as a quarantine (fail closed): so
                // does the metric, rather than keep the last value it read.
                metrics.set_quarantine(Some(BTreeMap::from([
                    ("reason".to_string(), e.to_string()),
                    ("origin".to_string(), UNREADABLE.to_string()),
                    ("since".to_string(), "unknown".to_string()),
                ])));
                self.clear_since = None;
                return;
            }
        };
        metrics.set_quarantine(q.as_ref().map(|q| {
            BTreeMap::from([
                ("reason".to_string(), q.reason.clone()),
                ("origin".to_string(), q.origin.clone()),
                ("since".to_string(), q.since.clone()),
            ])
        }));
        let (Some(q), Some(after)) = (q, self.release_after) else {
            self.clear_since = None;
            return;
        };
        let Some(rule) = q.rule() else { return };
        // Clear: the rule is there, with series, none of them firing or pending. A rule
        // renamed or removed by a reload, or without data, keeps the quarantine.
        let series: Vec<_> = status.iter().filter(|s| s.rule == rule).collect();
        let clear = !series.is_empty()
            && series
                .iter()
                .all(|s| matches!(s.phase, Phase::Inactive | Phase::Cleared));
        if !clear {
            self.clear_since = None;
            return;
        }
        let since = *self.clear_since.get_or_insert_with(Instant::now);
        if since.elapsed() < after {
            return;
        }
        // A self-test whose reads are still blocked (a wedged NIC) is not started again:
        // each run would leave one more thread blocked in the kernel, at every tick.
        if self.self_test.in_flight() {
            return;
        }
        let report = self.self_test.run().await;
        if !report.passed {
            if self.kept_by.as_deref() != Some(report.line.as_str()) {
                tracing::warn!(
                    "quarantine kept: rule {rule} is clear, but the self-test does not pass: {}",
                    report.line
                );
                events::publish(Event::health_verdict(false, &report.line));
                self.kept_by = Some(report.line);
            }
            return;
        }
        if self.kept_by.is_some() {
            events::publish(Event::health_verdict(true, &report.line));
        }
        let clear = humantime::format_duration(Duration::from_secs(since.elapsed().as_secs()));
        let why =
            format!("recovered: rule {rule} clear for {clear} and the health self-test passed");
        // Only the quarantine judged: another may have replaced it meanwhile.
        match self
            .file
            .release_if(&why, "recovery", &self.audit, |now| *now == q)
        {
            Ok(Some(_)) => {
                tracing::warn!("quarantine released: {why}");
                metrics.set_quarantine(None);
            }
            Ok(None) => {}
            Err(e) => tracing::error!("quarantine: {e}"),
        }
        self.clear_since = None;
        self.kept_by = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    struct NeverRuns;

    impl SelfTest for NeverRuns {
        fn in_flight(&self) -> bool {
            false
        }
        fn run(&self) -> Pin<Box<dyn Future<Output = SelfTestReport> + Send + '_>> {
            Box::pin(async {
                SelfTestReport {
                    passed: false,
                    line: "not run in this test".into(),
                }
            })
        }
    }

    /// The exported quarantine: `None` before the first read, else whether there is one.
    fn exported(metrics: &SelfMetrics) -> Option<bool> {
        metrics
            .samples()
            .iter()
            .find(|s| s.name == rocewatch_metrics::names::ROCEWATCH_QUARANTINE)
            .map(|s| s.value.as_f64() == 1.0)
    }

    /// Advances the paused clock by `d` in small steps, letting the watcher run.
    async fn advance(d: Duration) {
        let step = Duration::from_millis(10);
        let mut left = d;
        while !left.is_zero() {
            let s = step.min(left);
            tokio::time::advance(s).await;
            tokio::task::yield_now().await;
            left -= s;
        }
    }

    /// At a 5 Hz agent interval the watcher still reads its file at most once a second
    /// (the read was 2 % of the scrape path's CPU), and an operator's change shows
    /// within that second.
    #[tokio::test(start_paused = true)]
    async fn reads_the_file_at_most_once_a_second_and_sees_a_change_within_one() {
        let dir = tempfile::tempdir().unwrap();
        let audit = AuditLog::new(dir.path().join("audit.jsonl"));
        let file = QuarantineFile::in_dir(dir.path());
        let metrics = Arc::new(SelfMetrics::default());
        let pipeline = Pipeline::new(Arc::new(Store::new()), Arc::clone(&metrics), &[]);
        let settings = Settings {
            file: QuarantineFile::in_dir(dir.path()),
            audit: AuditLog::new(dir.path().join("audit.jsonl")),
            rules: BTreeSet::new(),
            release_after: None,
            interval: Duration::from_millis(200),
        };
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(Watcher::new(settings, Box::new(NeverRuns)).run(
            pipeline,
            Arc::clone(&metrics),
            stop,
        ));
        advance(Duration::from_millis(50)).await;
        assert_eq!(
            exported(&metrics),
            Some(false),
            "the first tick reads at once"
        );
        let q = Quarantine::now("operator test", "operator", BTreeMap::new());
        assert!(file.enter(&q, &audit).unwrap());
        // Four agent intervals later the file has not been read again ...
        advance(Duration::from_millis(800)).await;
        assert_eq!(
            exported(&metrics),
            Some(false),
            "read again before a second"
        );
        // ... and within the second it has.
        advance(Duration::from_millis(200)).await;
        assert_eq!(
            exported(&metrics),
            Some(true),
            "the change not seen in ~1 s"
        );
        stop_tx.send(true).unwrap();
        task.await.unwrap();
    }
}
