//! The latest value of every series, with what exporters and the live view need:
//! per-series start time (a counter going backwards is a reset and starts a new
//! cumulative series) and the rate since the previous collection (never negative).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use rocewatch_plugin_api::{Attributes, MetricDescriptor, MetricKind, Sample};

use crate::selfmetrics::SelfMetrics;

/// One series as last seen.
#[derive(Debug, Clone)]
pub struct Series {
    pub sample: Sample,
    /// The plugin that produced it.
    pub plugin: String,
    /// Start of the current cumulative run (agent start, or the last reset).
    pub start: SystemTime,
    /// When the value was read.
    pub time: SystemTime,
    /// Per-second rate since the previous read, for counters; `None` on the first read
    /// and right after a reset.
    pub rate: Option<f64>,
    read_at: Instant,
    /// The ingest that last saw this series (series a plugin stops emitting are dropped).
    generation: u64,
    /// Its Prometheus label set (`{k="v",...}`), rendered once when it appeared.
    pub labels: String,
}

#[derive(Debug, Default)]
struct Inner {
    generation: u64,
    series: BTreeMap<String, Series>,
    descriptors: BTreeMap<String, MetricDescriptor>,
}

/// How a counter moved between two reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Delta {
    Increase(f64),
    /// Stuck at the 32-bit maximum (IB PortCounters saturate): the rate is unknown, not 0.
    Saturated,
    /// Went backwards: a reset (driver reload, counter cleared); a new series starts.
    Reset,
}

const U32_SPAN: f64 = 4_294_967_296.0;

/// Classify a counter's move from `old` to `new`.
///
/// - `4294967295` (or 4× that, for data counters in bytes) twice in a row: saturated.
/// - Backwards from the top half of the 32-bit range to the bottom half: a 32-bit wrap
///   (some driver counters are 32 bits wide and wrap), counted as the increase across it.
/// - Any other backwards move: a reset.
pub fn counter_delta(old: f64, new: f64) -> Delta {
    let saturated = |v: f64| v == U32_SPAN - 1.0 || v == 4.0 * (U32_SPAN - 1.0);
    if saturated(old) && saturated(new) {
        return Delta::Saturated;
    }
    if new >= old {
        return Delta::Increase(new - old);
    }
    if (U32_SPAN / 2.0..U32_SPAN).contains(&old) && new < U32_SPAN / 2.0 {
        return Delta::Increase(U32_SPAN - old + new);
    }
    Delta::Reset
}

/// One histogram series: counts per bucket (`bounds.len() + 1` of them, the last for
/// values above every bound), with the sum and the count, cumulative since it appeared.
#[derive(Debug, Clone)]
pub struct HistogramSeries {
    pub attributes: Attributes,
    /// Its Prometheus label set, rendered once.
    pub labels: String,
    pub counts: Box<[u64]>,
    pub sum: f64,
    pub count: u64,
}

/// The histograms of one metric, with their bucket bounds (upper, inclusive, ascending).
#[derive(Default)]
pub struct HistogramFamily {
    pub bounds: Arc<[f64]>,
    /// By attributes (compared by value; a lookup renders no label string).
    pub series: BTreeMap<Attributes, HistogramSeries>,
    /// Who else sees every observation (the OTLP exporter's instrument: the SDK has no
    /// observable histogram to read this family from).
    observers: Vec<Observer>,
}

/// A callback that sees every observation of one histogram metric.
pub type Observer = Box<dyn Fn(&Attributes, f64) + Send + Sync>;

impl std::fmt::Debug for HistogramFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistogramFamily")
            .field("bounds", &self.bounds)
            .field("series", &self.series.len())
            .field("observers", &self.observers.len())
            .finish()
    }
}

/// Shared between collectors (writers) and exporters (readers).
#[derive(Debug, Default)]
pub struct Store {
    inner: RwLock<Inner>,
    /// Histograms by metric name (probe round-trip times), apart from the scalar series.
    histograms: Mutex<BTreeMap<String, HistogramFamily>>,
}

impl Store {
    pub fn new() -> Self {
        Self::default()
    }

    /// Remember what a plugin may emit.
    pub fn declare(&self, descriptors: &[MetricDescriptor]) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        for d in descriptors {
            g.descriptors
                .entry(d.name.clone())
                .or_insert_with(|| d.clone());
        }
    }

    /// Drop the samples whose metric no plugin declared; returns how many were dropped.
    pub fn retain_declared(&self, samples: &mut Vec<Sample>) -> usize {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let before = samples.len();
        samples.retain(|s| g.descriptors.contains_key(s.name.as_ref()));
        before - samples.len()
    }

    /// Whether some plugin declared the metric `name`.
    pub fn is_declared(&self, name: &str) -> bool {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.descriptors.contains_key(name)
    }

    pub fn descriptors(&self) -> Vec<MetricDescriptor> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.descriptors.values().cloned().collect()
    }

    /// Replace everything `plugin` emitted with `samples` (series it no longer emits,
    /// e.g. of a vanished device, are dropped).
    pub fn ingest(&self, plugin: &str, samples: &[Sample], metrics: &SelfMetrics) {
        self.ingest_at(plugin, samples, metrics, SystemTime::now(), Instant::now());
    }

    /// [`Store::ingest`] at a given time. Series already known are updated in place (no
    /// copy of their attributes); only new series are cloned in.
    pub fn ingest_at(
        &self,
        plugin: &str,
        samples: &[Sample],
        metrics: &SelfMetrics,
        now: SystemTime,
        mono: Instant,
    ) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        g.generation += 1;
        let generation = g.generation;
        let mut key = String::with_capacity(128);
        for s in samples {
            s.write_series_key(&mut key);
            match g.series.get_mut(key.as_str()) {
                Some(p) => {
                    let mut rate = None;
                    if s.kind == MetricKind::Counter {
                        let (old, new) = (p.sample.value.as_f64(), s.value.as_f64());
                        let dt = mono.saturating_duration_since(p.read_at).as_secs_f64();
                        match counter_delta(old, new) {
                            Delta::Increase(d) => rate = (dt > 0.0).then(|| d / dt),
                            Delta::Saturated => {}
                            Delta::Reset => {
                                metrics.counter_reset(&s.name);
                                tracing::debug!(series = %key, old, new, "counter reset");
                                p.start = now;
                            }
                        }
                    }
                    p.sample.value = s.value;
                    p.rate = rate;
                    p.time = now;
                    p.read_at = mono;
                    p.generation = generation;
                    if p.plugin != plugin {
                        p.plugin = plugin.to_string();
                    }
                }
                None => {
                    g.series.insert(
                        key.clone(),
                        Series {
                            labels: rocewatch_metrics::naming::prometheus_labels(&s.attributes),
                            sample: s.clone(),
                            plugin: plugin.to_string(),
                            start: now,
                            time: now,
                            rate: None,
                            read_at: mono,
                            generation,
                        },
                    );
                }
            }
        }
        g.series
            .retain(|_, v| v.plugin != plugin || v.generation == generation);
    }

    /// Run `f` over every series, sorted by key, and the declared descriptors by name,
    /// under the read lock (no copies).
    pub fn with_series<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = &Series>, &BTreeMap<String, MetricDescriptor>) -> R,
    ) -> R {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        f(&mut g.series.values(), &g.descriptors)
    }

    /// Every series, sorted by key.
    pub fn snapshot(&self) -> Vec<Series> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.series.values().cloned().collect()
    }

    /// Visit the series of one metric name without copying them. Keys start with the
    /// name followed by `|` (or end there), so this is a range scan.
    pub fn for_each_named(&self, name: &str, mut f: impl FnMut(&Series)) {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        for (k, v) in g
            .series
            .range::<str, _>((std::ops::Bound::Included(name), std::ops::Bound::Unbounded))
        {
            if !k.starts_with(name) {
                break;
            }
            if k.len() == name.len() || k.as_bytes()[name.len()] == b'|' {
                f(v);
            }
        }
    }

    fn histograms(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, HistogramFamily>> {
        self.histograms.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Declare a histogram metric and its bucket bounds (ascending, in the metric's unit).
    pub fn declare_histogram(&self, d: &MetricDescriptor, bounds: &[f64]) {
        debug_assert_eq!(d.kind, MetricKind::Histogram);
        self.declare(std::slice::from_ref(d));
        self.histograms().entry(d.name.clone()).or_default().bounds = bounds.into();
    }

    /// The bucket bounds of a declared histogram.
    pub fn histogram_bounds(&self, name: &str) -> Option<Arc<[f64]>> {
        self.histograms().get(name).map(|f| Arc::clone(&f.bounds))
    }

    /// Let `observer` see every later observation of the histogram `name`.
    pub fn on_observe(&self, name: &str, observer: Observer) {
        if let Some(f) = self.histograms().get_mut(name) {
            f.observers.push(observer);
        }
    }

    /// Record values of the histogram `name`, each with its series' attributes. Values
    /// of an undeclared histogram are ignored.
    pub fn observe<'a>(&self, name: &str, values: impl IntoIterator<Item = (&'a Attributes, f64)>) {
        let mut g = self.histograms();
        let Some(fam) = g.get_mut(name) else {
            return;
        };
        for (attrs, v) in values {
            let buckets = fam.bounds.len() + 1;
            let s = match fam.series.get_mut(attrs) {
                Some(s) => s,
                None => fam
                    .series
                    .entry(Arc::clone(attrs))
                    .or_insert_with(|| HistogramSeries {
                        attributes: Arc::clone(attrs),
                        labels: rocewatch_metrics::naming::prometheus_labels(attrs),
                        counts: vec![0; buckets].into(),
                        sum: 0.0,
                        count: 0,
                    }),
            };
            let b = fam.bounds.partition_point(|&le| le < v);
            s.counts[b] += 1;
            s.sum += v;
            s.count += 1;
            for o in &fam.observers {
                o(attrs, v);
            }
        }
    }

    /// Keep only the histogram series of `name` whose attributes pass `keep`.
    pub fn retain_histogram(&self, name: &str, keep: impl Fn(&Attributes) -> bool) {
        if let Some(f) = self.histograms().get_mut(name) {
            f.series.retain(|_, s| keep(&s.attributes));
        }
    }

    /// Run `f` over the histogram families, by name, under their lock.
    pub fn with_histograms<R>(&self, f: impl FnOnce(&BTreeMap<String, HistogramFamily>) -> R) -> R {
        f(&self.histograms())
    }

    /// Series of one metric name (copies; prefer [`Store::for_each_named`] on hot paths).
    pub fn by_name(&self, name: &str) -> Vec<Series> {
        let mut out = Vec::new();
        self.for_each_named(name, |s| out.push(s.clone()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_plugin_api::Value;
    use std::time::Duration;

    fn counter(v: u64) -> Sample {
        Sample {
            name: "rdma.port.io".into(),
            unit: "By".into(),
            value: Value::U64(v),
            attributes: std::sync::Arc::new(
                [("rdma.device".to_string(), "mlx5_0".to_string())].into(),
            ),
            source: "counters/port_xmit_data".into(),
            kind: MetricKind::Counter,
        }
    }

    #[test]
    fn deltas() {
        assert_eq!(counter_delta(10.0, 15.0), Delta::Increase(5.0));
        assert_eq!(
            counter_delta(4294967290.0, 4.0),
            Delta::Increase(10.0),
            "32-bit wrap"
        );
        assert_eq!(counter_delta(4294967295.0, 4294967295.0), Delta::Saturated);
        assert_eq!(
            counter_delta(17179869180.0, 17179869180.0),
            Delta::Saturated,
            "x4 data counter"
        );
        assert_eq!(counter_delta(1000.0, 3.0), Delta::Reset);
        assert_eq!(
            counter_delta(10_000_000_000.0, 5.0),
            Delta::Reset,
            "64-bit counters do not wrap here"
        );
    }

    #[test]
    fn histograms_bucket_and_forget() {
        let store = Store::new();
        let d = MetricDescriptor {
            name: "rdma.probe.rtt".into(),
            unit: "s".into(),
            kind: MetricKind::Histogram,
            description: "d".into(),
        };
        store.declare_histogram(&d, &[0.001, 0.01]);
        let a: Attributes = Arc::new([("rdma.probe.peer".to_string(), "a".to_string())].into());
        let b: Attributes = Arc::new([("rdma.probe.peer".to_string(), "b".to_string())].into());
        // On a bound: counted in that bucket (bounds are inclusive upper bounds).
        store.observe(
            "rdma.probe.rtt",
            [(&a, 0.0005), (&a, 0.001), (&a, 0.5), (&b, 0.002)],
        );
        store.observe("undeclared", [(&a, 1.0)]);
        store.with_histograms(|h| {
            assert_eq!(h.len(), 1);
            let f = &h["rdma.probe.rtt"];
            let sa = &f.series[&a];
            assert_eq!(sa.labels, r#"{rdma_probe_peer="a"}"#);
            assert_eq!(&*sa.counts, &[2, 0, 1]);
            assert_eq!((sa.count, sa.sum), (3, 0.5015));
            assert_eq!(&*f.series[&b].counts, &[0, 1, 0]);
        });
        store.retain_histogram("rdma.probe.rtt", |x| x["rdma.probe.peer"] == "b");
        store.with_histograms(|h| assert_eq!(h["rdma.probe.rtt"].series.len(), 1));
        assert!(store.is_declared("rdma.probe.rtt"));
    }

    #[test]
    fn rate_reset_and_vanish() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let i0 = Instant::now();
        store.ingest_at("p", &[counter(100)], &m, t0, i0);
        assert_eq!(store.snapshot()[0].rate, None);
        store.ingest_at(
            "p",
            &[counter(300)],
            &m,
            t0 + Duration::from_secs(2),
            i0 + Duration::from_secs(2),
        );
        let s = &store.snapshot()[0];
        assert_eq!(s.rate, Some(100.0));
        assert_eq!(s.start, t0);
        // Backwards: a reset. New start, no (negative) rate, counted.
        let t2 = t0 + Duration::from_secs(4);
        store.ingest_at("p", &[counter(50)], &m, t2, i0 + Duration::from_secs(4));
        let s = &store.snapshot()[0];
        assert_eq!(s.rate, None);
        assert_eq!(s.start, t2);
        assert_eq!(
            m.samples()
                .iter()
                .find(|s| s.name == "rocewatch.counter.resets")
                .unwrap()
                .value,
            Value::U64(1)
        );
        store.ingest_at(
            "p",
            &[counter(150)],
            &m,
            t2 + Duration::from_secs(1),
            i0 + Duration::from_secs(5),
        );
        assert_eq!(store.snapshot()[0].rate, Some(100.0));
        // The plugin stops emitting the series (device gone): it is dropped.
        store.ingest_at("p", &[], &m, t2, i0 + Duration::from_secs(6));
        assert!(store.snapshot().is_empty());
    }
}
