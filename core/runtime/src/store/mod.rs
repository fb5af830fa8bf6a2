//! The latest value of every series, with what exporters and the live view need:
//! per-series start time (a counter going backwards is a reset and starts a new
//! cumulative series) and the rate since the previous collection (never negative; none
//! across a reset or while a counter rests at its top). How a counter moved is decided by
//! `rocewatch_metrics::counter`, the one definition every reader of counters uses.
//!
//! A counter's start is what OTLP publishes as `start_time_unix_nano`, and it claims
//! only what was seen: a counter is first read mid-life (the NIC counted long before the
//! agent), so until a point of its run is published ([`Series::mark_published`]) its
//! start follows its latest read, and the first point a receiver gets has start equal to
//! time (the data model's "unknown start time": no rate for that point). From then on the
//! start stays, until a reset begins a new run the same way. The increases read since the
//! last published point are summed per series (across wraps, none across a reset), for
//! delta temporality.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use rocewatch_plugin_api::{Attributes, MetricDescriptor, MetricKind, Sample};

use crate::selfmetrics::SelfMetrics;

mod inner;
mod series;

use inner::{same_series, same_str, update, At, Emitted, Inner};
use series::unix_nanos;
pub use series::{Reading, Series};

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
    /// When it appeared: the start of its cumulative run.
    pub start: SystemTime,
    /// The last observation's time.
    pub time: SystemTime,
}

/// The histograms of one metric, with their bucket bounds (upper, inclusive, ascending).
#[derive(Default)]
pub struct HistogramFamily {
    pub bounds: Arc<[f64]>,
    /// By attributes (compared by value; a lookup renders no label string).
    pub series: BTreeMap<Attributes, HistogramSeries>,
}

impl std::fmt::Debug for HistogramFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistogramFamily")
            .field("bounds", &self.bounds)
            .field("series", &self.series.len())
            .finish()
    }
}

/// Shared between collectors (writers) and exporters (readers).
#[derive(Debug, Default)]
pub struct Store {
    inner: RwLock<Inner>,
    /// Histograms by metric name (probe round-trip times), apart from the scalar series.
    histograms: Mutex<BTreeMap<String, HistogramFamily>>,
    /// What readers keep of this store between visits (see [`Store::attached`]).
    attached: Attached,
}

/// One value of each type readers hang on a store, by type.
#[derive(Default)]
struct Attached(Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().unwrap_or_else(|p| p.into_inner()).len();
        write!(f, "Attached({n})")
    }
}

impl Store {
    pub fn new() -> Self {
        Self::default()
    }

    /// The `T` hung on this store (made with `T::default()` at the first call): what a
    /// reader keeps of it between visits (the text of a family that did not change),
    /// freed with the store when a reload replaces it.
    pub fn attached<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut all = self.attached.0.lock().unwrap_or_else(|p| p.into_inner());
        let any = all
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        Arc::clone(any)
            .downcast::<T>()
            .expect("filed under its own type")
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

    /// [`Store::retain_declared`] for what `plugin` emitted: a sample in the place of a
    /// series `plugin` emitted last time under the same name passed this check then (a
    /// name stays declared), so only the others are looked up.
    pub fn retain_declared_from(&self, plugin: &str, samples: &mut Vec<Sample>) -> usize {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let Some(last) = g.emitted.get(plugin) else {
            drop(g);
            return self.retain_declared(samples);
        };
        let before = samples.len();
        let mut i = 0;
        samples.retain(|s| {
            let known = last
                .slots
                .get(i)
                .and_then(|&slot| g.slots[slot as usize].as_ref())
                .is_some_and(|p| {
                    Arc::ptr_eq(&p.plugin, &last.plugin) && same_str(&p.sample.name, &s.name)
                });
            i += 1;
            known || g.descriptors.contains_key(s.name.as_ref())
        });
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
    ///
    /// While `plugin` emits the same series in the same order as last time, each sample
    /// updates the slot at its position (checked: same name and attributes, by pointer
    /// first). From the first sample that differs on, series are looked up by key, new
    /// ones added, and those `plugin` no longer emits dropped; the new order is
    /// remembered for the next time.
    pub fn ingest_at(
        &self,
        plugin: &str,
        samples: &[Sample],
        metrics: &SelfMetrics,
        now: SystemTime,
        mono: Instant,
    ) {
        let mut guard = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let g = &mut *guard;
        g.generation += 1;
        let generation = g.generation;
        let at = At {
            now: unix_nanos(now),
            mono: g.mono_nanos(mono),
        };
        if !g.emitted.contains_key(plugin) {
            g.emitted.insert(
                plugin.to_string(),
                Emitted {
                    plugin: plugin.into(),
                    slots: Vec::new(),
                },
            );
        }
        let emitted = g.emitted.get_mut(plugin).expect("inserted above");
        let owner = Arc::clone(&emitted.plugin);
        let mut order = std::mem::take(&mut emitted.slots);
        // By position.
        let mut same = 0;
        for (s, &slot) in samples.iter().zip(order.iter()) {
            let Some(p) = g.slots[slot as usize].as_mut() else {
                break;
            };
            if !same_series(&p.sample, s) {
                break;
            }
            // Equal content in another `Arc` (an emitter that builds its attributes anew
            // each time): the series keeps the one it appeared with, not a second copy.
            update(p, s, &owner, generation, metrics, at);
            same += 1;
        }
        if same < samples.len() || same < order.len() {
            let gone = order.split_off(same);
            g.by_key(
                &samples[same..],
                &owner,
                generation,
                metrics,
                at,
                &mut order,
            );
            g.drop_gone(gone, &owner, generation, metrics);
        }
        g.emitted.get_mut(plugin).expect("inserted above").slots = order;
    }

    /// Run `f` over every series, sorted by key, and the declared descriptors by name,
    /// under the read lock (no copies).
    pub fn with_series<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = &Series>, &BTreeMap<String, MetricDescriptor>) -> R,
    ) -> R {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut g.sorted(), &g.descriptors);
        r
    }

    /// [`Store::with_series`] with the store's ingest count at that moment, over the series
    /// read since `since` (an earlier count; 0: all): a reader that wants only what was
    /// read since its last visit keeps the count (it never goes back, unlike the wall
    /// clock).
    pub fn with_series_since<R>(
        &self,
        since: u64,
        f: impl FnOnce(&mut dyn Iterator<Item = &Series>, &BTreeMap<String, MetricDescriptor>) -> R,
    ) -> (R, u64) {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let r = f(
            &mut g.sorted().filter(|s| s.generation > since),
            &g.descriptors,
        );
        (r, g.generation)
    }

    /// Every series, sorted by key.
    pub fn snapshot(&self) -> Vec<Series> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.sorted().cloned().collect()
    }

    /// Visit the series of one metric name without copying them. Keys are ordered by
    /// name first, so this is a range scan.
    pub fn for_each_named(&self, name: &str, mut f: impl FnMut(&Series)) {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let from = g
            .index
            .partition_point(|&i| g.slot(i).sample.name.as_ref() < name);
        for &slot in &g.index[from..] {
            let s = g.slot(slot);
            if s.sample.name != name {
                break;
            }
            f(s);
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

    /// Record values of the histogram `name`, each with its series' attributes. Values
    /// of an undeclared histogram are ignored.
    pub fn observe<'a>(&self, name: &str, values: impl IntoIterator<Item = (&'a Attributes, f64)>) {
        let mut g = self.histograms();
        let Some(fam) = g.get_mut(name) else {
            return;
        };
        let now = SystemTime::now();
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
                        start: now,
                        time: now,
                    }),
            };
            s.time = now;
            let b = fam.bounds.partition_point(|&le| le < v);
            s.counts[b] += 1;
            s.sum += v;
            s.count += 1;
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

    fn counter_from(v: u64, source: &str) -> Sample {
        Sample {
            source: source.into(),
            ..counter(v)
        }
    }

    fn resets(m: &SelfMetrics) -> Option<Value> {
        m.samples()
            .iter()
            .find(|s| s.name == "rocewatch.counter.resets")
            .map(|s| s.value)
    }

    /// The defect of issue 27: a 64-bit counter going 3 000 000 000 → 100 (perfquery -R,
    /// a driver reload) was read as a 32-bit wrap, a rate of 4.3e8/s for one interval.
    #[test]
    fn a_64_bit_counter_going_back_is_a_reset_with_no_rate() {
        for source in [
            "counters_ext/port_xmit_data_64",
            "hw_counters/rp_cnp_handled",
            "netlink:hw_counters/np_cnp_sent",
            "ethtool:rx_prio3_pause",
            "probe",
        ] {
            let store = Store::new();
            let m = SelfMetrics::default();
            let (t0, i0) = (SystemTime::UNIX_EPOCH, Instant::now());
            let sec = Duration::from_secs(1);
            store.ingest_at("p", &[counter_from(2_990_000_000, source)], &m, t0, i0);
            store.ingest_at(
                "p",
                &[counter_from(3_000_000_000, source)],
                &m,
                t0 + sec,
                i0 + sec,
            );
            assert_eq!(store.snapshot()[0].rate(), Some(1e7), "{source}");
            store.ingest_at(
                "p",
                &[counter_from(100, source)],
                &m,
                t0 + 2 * sec,
                i0 + 2 * sec,
            );
            let s = &store.snapshot()[0];
            assert_eq!(s.rate(), None, "{source}: a reset has no rate");
            assert_eq!(s.start(), t0 + 2 * sec, "{source}: a new series starts");
            assert_eq!(resets(&m), Some(Value::U64(1)), "{source}");
        }
    }

    #[test]
    fn an_mlx5_queue_counter_wraps_at_32_bits_at_its_pace() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let (t0, i0) = (SystemTime::UNIX_EPOCH, Instant::now());
        let sec = Duration::from_secs(1);
        let src = "hw_counters/out_of_buffer";
        store.ingest_at("p", &[counter_from(4_293_000_000, src)], &m, t0, i0);
        store.ingest_at(
            "p",
            &[counter_from(4_294_000_000, src)],
            &m,
            t0 + sec,
            i0 + sec,
        );
        // 967 296 to the top and 1 000 000 past it: the same pace, a wrap.
        store.ingest_at(
            "p",
            &[counter_from(1_000_000, src)],
            &m,
            t0 + 2 * sec,
            i0 + 2 * sec,
        );
        assert_eq!(store.snapshot()[0].rate(), Some(1_967_296.0));
        assert_eq!(resets(&m), None);
        // Far faster than its pace: a reset, not a wrap.
        store.ingest_at(
            "p",
            &[counter_from(2_000_000, src)],
            &m,
            t0 + 3 * sec,
            i0 + 3 * sec,
        );
        store.ingest_at(
            "p",
            &[counter_from(1_000, src)],
            &m,
            t0 + 4 * sec,
            i0 + 4 * sec,
        );
        assert_eq!(store.snapshot()[0].rate(), None);
        assert_eq!(resets(&m), Some(Value::U64(1)));
    }

    #[test]
    fn a_saturated_counter_has_no_rate_and_is_counted_until_cleared() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let (t0, i0) = (SystemTime::UNIX_EPOCH, Instant::now());
        let sec = Duration::from_secs(1);
        let src = "counters/symbol_error";
        let saturated = |m: &SelfMetrics| {
            m.samples()
                .iter()
                .find(|s| s.name == "rocewatch.counter.saturated")
                .map(|s| (s.value, s.kind))
        };
        store.ingest_at("p", &[counter_from(65_000, src)], &m, t0, i0);
        store.ingest_at("p", &[counter_from(65_535, src)], &m, t0 + sec, i0 + sec);
        assert_eq!(
            store.snapshot()[0].rate(),
            None,
            "not 535/s: it stopped there"
        );
        assert!(store.snapshot()[0].saturated);
        assert_eq!(saturated(&m), Some((Value::U64(1), MetricKind::Gauge)));
        store.ingest_at(
            "p",
            &[counter_from(65_535, src)],
            &m,
            t0 + 2 * sec,
            i0 + 2 * sec,
        );
        assert_eq!(
            store.snapshot()[0].rate(),
            None,
            "resting at the top is not idle"
        );
        assert_eq!(saturated(&m), Some((Value::U64(1), MetricKind::Gauge)));
        // Cleared (perfquery -R): a reset, and no longer saturated.
        store.ingest_at("p", &[counter_from(2, src)], &m, t0 + 3 * sec, i0 + 3 * sec);
        assert!(!store.snapshot()[0].saturated);
        assert_eq!(saturated(&m), Some((Value::U64(0), MetricKind::Gauge)));
        assert_eq!(resets(&m), Some(Value::U64(1)));
        store.ingest_at("p", &[counter_from(7, src)], &m, t0 + 4 * sec, i0 + 4 * sec);
        assert_eq!(store.snapshot()[0].rate(), Some(5.0));
        // A saturated series that vanishes is no longer counted.
        store.ingest_at(
            "p",
            &[counter_from(65_535, src)],
            &m,
            t0 + 5 * sec,
            i0 + 5 * sec,
        );
        assert_eq!(saturated(&m), Some((Value::U64(1), MetricKind::Gauge)));
        store.ingest_at("p", &[], &m, t0 + 6 * sec, i0 + 6 * sec);
        assert_eq!(saturated(&m), Some((Value::U64(0), MetricKind::Gauge)));
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
        store.retain_histogram("rdma.probe.rtt", |x| &x["rdma.probe.peer"] == "b");
        store.with_histograms(|h| assert_eq!(h["rdma.probe.rtt"].series.len(), 1));
        assert!(store.is_declared("rdma.probe.rtt"));
    }

    /// A series slot holds what a series needs (issue 53): at 180 000 series (2000 ports)
    /// each 8 bytes here are 1.4 MB. A whole `Sample` with its unit, source, two
    /// `SystemTime`s and an `Instant` made it 208 bytes.
    #[test]
    fn a_series_slot_is_152_bytes_and_its_index_entry_4() {
        assert_eq!(std::mem::size_of::<Option<Series>>(), 152);
        let store = Store::new();
        let m = SelfMetrics::default();
        store.ingest("p", &[counter(1)], &m);
        let g = store.inner.read().unwrap();
        assert_eq!(std::mem::size_of_val(&g.index[0]), 4);
    }

    #[test]
    fn rate_reset_and_vanish() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let i0 = Instant::now();
        store.ingest_at("p", &[counter(100)], &m, t0, i0);
        assert_eq!(store.snapshot()[0].rate(), None);
        store.ingest_at(
            "p",
            &[counter(300)],
            &m,
            t0 + Duration::from_secs(2),
            i0 + Duration::from_secs(2),
        );
        let s = &store.snapshot()[0];
        assert_eq!(s.rate(), Some(100.0));
        // Nothing published yet: the start follows the reads (see the next tests).
        assert_eq!(s.start(), s.time());
        // Backwards: a reset. New start, no (negative) rate, counted.
        let t2 = t0 + Duration::from_secs(4);
        store.ingest_at("p", &[counter(50)], &m, t2, i0 + Duration::from_secs(4));
        let s = &store.snapshot()[0];
        assert_eq!(s.rate(), None);
        assert_eq!(s.start(), t2);
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
        assert_eq!(store.snapshot()[0].rate(), Some(100.0));
        // The plugin stops emitting the series (device gone): it is dropped.
        store.ingest_at("p", &[], &m, t2, i0 + Duration::from_secs(6));
        assert!(store.snapshot().is_empty());
    }

    fn series(name: &'static str, attrs: &Attributes, v: u64) -> Sample {
        Sample {
            name: name.into(),
            unit: "1".into(),
            value: Value::U64(v),
            attributes: Arc::clone(attrs),
            source: "s".into(),
            kind: MetricKind::Counter,
        }
    }

    fn attrs(pairs: &[(&str, &str)]) -> Attributes {
        Arc::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    type Seen = (
        String,
        Value,
        Option<f64>,
        SystemTime,
        SystemTime,
        String,
        String,
    );

    /// What readers see of the store, in their order.
    fn seen(store: &Store) -> Vec<Seen> {
        store
            .snapshot()
            .into_iter()
            .map(|s| {
                (
                    s.sample.series_key(),
                    s.sample.value,
                    s.rate(),
                    s.start(),
                    s.time(),
                    s.plugin.to_string(),
                    s.labels().to_string(),
                )
            })
            .collect()
    }

    fn at(secs: u64) -> (SystemTime, Duration) {
        (
            SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + secs),
            Duration::from_secs(secs),
        )
    }

    /// Ingest `samples` by `plugin` `secs` after `i0`.
    fn put(
        store: &Store,
        m: &SelfMetrics,
        plugin: &str,
        samples: &[Sample],
        i0: Instant,
        secs: u64,
    ) {
        let (t, d) = at(secs);
        store.ingest_at(plugin, samples, m, t, i0 + d);
    }

    #[test]
    fn by_position_is_the_keyed_result() {
        let (a, b) = (
            attrs(&[("d", "x"), ("p", "1")]),
            attrs(&[("d", "y"), ("p", "1")]),
        );
        let step = |v: u64| {
            vec![
                series("m.b", &a, v),
                series("m.a", &b, 2 * v),
                series("m.a", &a, 3 * v),
                series("m.c", &a, 4 * v),
            ]
        };
        let m = SelfMetrics::default();
        let i0 = Instant::now();
        // `fast` gets the same order every time (by position from the second ingest on);
        // `keyed` gets it reversed every other time (every sample looked up by key).
        let (fast, keyed) = (Store::new(), Store::new());
        for (n, v) in [10, 20, 5, 40].into_iter().enumerate() {
            put(&fast, &m, "p", &step(v), i0, n as u64);
            let mut r = step(v);
            if n % 2 == 1 {
                r.reverse();
            }
            put(&keyed, &m, "p", &r, i0, n as u64);
            assert_eq!(seen(&fast), seen(&keyed), "after ingest {n}");
        }
        let s = seen(&fast);
        let keys: Vec<&str> = s.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(
            keys,
            ["m.a|d=x|p=1", "m.a|d=y|p=1", "m.b|d=x|p=1", "m.c|d=x|p=1"]
        );
        // The last ingest: 5 -> 40 is an increase of 35 in 1 s, for m.b.
        assert_eq!(s[2].2, Some(35.0));
        // 10 -> 20 -> 5: the third ingest was a reset of every series; nothing was
        // published, so the start is the last read's.
        assert_eq!(s[2].3, at(3).0);
        let resets = |m: &SelfMetrics| {
            m.samples()
                .iter()
                .filter(|s| s.name == "rocewatch.counter.resets")
                .map(|s| s.value.as_f64())
                .sum::<f64>()
        };
        assert_eq!(resets(&m), 8.0, "4 series, 2 stores");
        let mut n = 0;
        fast.for_each_named("m.a", |_| n += 1);
        assert_eq!(n, 2);
    }

    #[test]
    fn changed_order_new_and_vanished_series() {
        let m = SelfMetrics::default();
        let i0 = Instant::now();
        let store = Store::new();
        let x: Vec<Attributes> = (0..4).map(|i| attrs(&[("i", &i.to_string())])).collect();
        let all = |v: u64| x.iter().map(|a| series("m", a, v)).collect::<Vec<_>>();
        put(&store, &m, "p", &all(0), i0, 0);
        put(&store, &m, "q", &[series("n", &x[0], 1)], i0, 0);
        // One series gone from the middle, one new at the end.
        let y = attrs(&[("i", "9")]);
        let mut s = all(10);
        s.remove(1);
        s.push(series("m", &y, 10));
        put(&store, &m, "p", &s, i0, 1);
        let keys: Vec<String> = seen(&store).into_iter().map(|s| s.0).collect();
        assert_eq!(keys, ["m|i=0", "m|i=2", "m|i=3", "m|i=9", "n|i=0"]);
        // The new order is remembered: by position again, rates from the last ingest.
        s.iter_mut().for_each(|s| s.value = Value::U64(30));
        put(&store, &m, "p", &s, i0, 2);
        let now = seen(&store);
        assert_eq!(now[0].2, Some(20.0));
        assert_eq!(now[3].2, Some(20.0), "the new series");
        // Reordered, and one vanished at the end.
        s.reverse();
        s.pop();
        put(&store, &m, "p", &s, i0, 3);
        let keys: Vec<String> = seen(&store).into_iter().map(|s| s.0).collect();
        assert_eq!(keys, ["m|i=2", "m|i=3", "m|i=9", "n|i=0"]);
        // Nothing from `p`: only `q`'s series stays. A freed slot is reused.
        put(&store, &m, "p", &[], i0, 4);
        assert_eq!(seen(&store).len(), 1);
        put(&store, &m, "p", &all(1), i0, 5);
        assert_eq!(seen(&store).len(), 5);
        assert_eq!(store.inner.read().unwrap().slots.len(), 6);
    }

    /// A label set shared by a port's series is rendered once and kept; one that is a
    /// series' own (the QoS view's) is not kept but rendered when read, the same text.
    #[test]
    fn labels_kept_for_a_shared_set_and_rendered_per_read_for_a_lone_one() {
        let m = SelfMetrics::default();
        let store = Store::new();
        let (port, own) = (attrs(&[("p", "1")]), attrs(&[("s", "pfc"), ("v", "0,1")]));
        let samples = [
            series("a", &port, 1),
            series("b", &port, 1),
            series("q", &own, 1),
        ];
        store.ingest("p", &samples, &m);
        let g = store.inner.read().unwrap();
        let s: Vec<&Series> = g.sorted().collect();
        let (a, b, q) = (s[0].labels.as_ref(), s[1].labels.as_ref(), &s[2]);
        assert!(
            Arc::ptr_eq(a.unwrap(), b.unwrap()),
            "one string for the port"
        );
        assert!(q.labels.is_none(), "not kept");
        assert_eq!(q.labels(), r#"{s="pfc",v="0,1"}"#);
        let mut out = String::from("q");
        q.write_labels(&mut out);
        assert_eq!(out, r#"q{s="pfc",v="0,1"}"#);
    }

    #[test]
    fn equal_attributes_in_another_arc_are_the_same_series() {
        let m = SelfMetrics::default();
        let i0 = Instant::now();
        let store = Store::new();
        let first = attrs(&[("a", "1"), ("b", "2")]);
        put(&store, &m, "p", &[series("m", &first, 1)], i0, 0);
        // Built in another order, another `Arc`: a set sorts, so the same series.
        let again = attrs(&[("b", "2"), ("a", "1")]);
        put(&store, &m, "p", &[series("m", &again, 3)], i0, 1);
        let s = store.snapshot();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].rate(), Some(2.0));
        assert_eq!(s[0].labels(), r#"{a="1",b="2"}"#);
        assert!(
            Arc::ptr_eq(&s[0].sample.attributes, &first),
            "the first Arc kept (its index key holds it), the new one not stored beside it"
        );
        assert_eq!(Arc::strong_count(&again), 1, "the new set is not held");
        // A name built at run time (not the same pointer) compares by content.
        let mut owned = series("m", &again, 4);
        owned.name = String::from("m").into();
        put(&store, &m, "p", &[owned], i0, 2);
        assert_eq!(store.snapshot()[0].rate(), Some(1.0));
        // Other attributes: another series, the old one gone.
        put(
            &store,
            &m,
            "p",
            &[series("m", &attrs(&[("a", "1")]), 5)],
            i0,
            3,
        );
        let s = seen(&store);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].0.as_str(), s[0].2), ("m|a=1", None));
    }

    /// New series go into the index at the end of an ingest: one named twice in it is
    /// still one series (the second read updates the first), and the index stays sorted.
    #[test]
    fn a_new_series_named_twice_in_one_ingest_is_one_series() {
        let m = SelfMetrics::default();
        let i0 = Instant::now();
        let store = Store::new();
        let (a, b) = (attrs(&[("a", "1")]), attrs(&[("a", "2")]));
        put(&store, &m, "p", &[series("m", &b, 1)], i0, 0);
        let twice = [series("m", &a, 5), series("n", &a, 1), series("m", &a, 7)];
        put(&store, &m, "p", &twice, i0, 1);
        let s = seen(&store);
        let keys: Vec<&str> = s.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(keys, ["m|a=1", "n|a=1"]);
        assert_eq!(s[0].1, Value::U64(7));
        // By position the next time: both places are the one series.
        put(&store, &m, "p", &twice, i0, 2);
        assert_eq!(seen(&store).len(), 2);
    }

    #[test]
    fn a_series_taken_over_stays_with_its_new_plugin() {
        let m = SelfMetrics::default();
        let i0 = Instant::now();
        let store = Store::new();
        let a = attrs(&[("a", "1")]);
        put(&store, &m, "p", &[series("m", &a, 1)], i0, 0);
        put(&store, &m, "q", &[series("m", &a, 2)], i0, 1);
        assert_eq!(seen(&store)[0].5, "q");
        // `p` stops emitting it: it is `q`'s now, so it stays.
        put(&store, &m, "p", &[], i0, 2);
        assert_eq!(seen(&store).len(), 1);
        // `p` emits it again: by key; then `q` stops: it is `p`'s, so it stays.
        put(&store, &m, "p", &[series("m", &a, 3)], i0, 3);
        put(&store, &m, "q", &[], i0, 4);
        let s = seen(&store);
        assert_eq!((s.len(), s[0].5.as_str(), s[0].2), (1, "p", Some(0.5)));
        put(&store, &m, "p", &[], i0, 5);
        assert!(seen(&store).is_empty());
    }

    #[test]
    fn declared_check_by_position() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let d = |name: &str| MetricDescriptor {
            name: name.into(),
            unit: "1".into(),
            kind: MetricKind::Counter,
            description: "d".into(),
        };
        store.declare(&[d("m")]);
        let a = attrs(&[("a", "1")]);
        let mut s = vec![series("m", &a, 1), series("undeclared", &a, 1)];
        assert_eq!(store.retain_declared_from("p", &mut s), 1);
        store.ingest("p", &s, &m);
        let mut s = vec![
            series("m", &a, 2),
            series("undeclared", &a, 2),
            series("m", &a, 3),
        ];
        assert_eq!(store.retain_declared_from("p", &mut s), 1);
        assert_eq!(s.len(), 2);
        // Another plugin's order says nothing about this one's samples.
        let mut s = vec![series("undeclared", &a, 2)];
        assert_eq!(store.retain_declared_from("q", &mut s), 1);
    }

    /// A counter first read mid-life claims nothing of before: until a point of its run is
    /// published its start is its latest read; once published it stays; a reset begins a
    /// run that floats again until published.
    #[test]
    fn a_run_starts_at_its_first_published_point() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let i0 = Instant::now();
        let start = |store: &Store| store.snapshot()[0].start();
        put(&store, &m, "p", &[counter(1_000_000)], i0, 0);
        put(&store, &m, "p", &[counter(1_000_500)], i0, 1);
        assert_eq!(start(&store), at(1).0, "unpublished: the latest read");
        store.with_series(|s, _| s.for_each(Series::mark_published));
        assert_eq!(store.snapshot()[0].last_published(), Some(at(1).0));
        put(&store, &m, "p", &[counter(1_000_900)], i0, 2);
        put(&store, &m, "p", &[counter(1_001_000)], i0, 3);
        assert_eq!(start(&store), at(1).0, "published: it stays");
        // A reset: a new run, floating until published.
        put(&store, &m, "p", &[counter(10)], i0, 4);
        assert_eq!(start(&store), at(4).0);
        put(&store, &m, "p", &[counter(30)], i0, 5);
        assert_eq!(start(&store), at(5).0);
        store.with_series(|s, _| s.for_each(Series::mark_published));
        put(&store, &m, "p", &[counter(60)], i0, 6);
        assert_eq!(start(&store), at(5).0);
        // A snapshot carries what was published: a read since, 30 more.
        let s = store.snapshot();
        assert!(!s[0].is_published(), "read since");
        assert_eq!(s[0].unpublished_increase(), 30.0);
    }

    /// The increases read since the last published point, for delta temporality: summed
    /// across a 32-bit wrap (at the counter's pace), none across a reset, zero again once
    /// published.
    #[test]
    fn unpublished_increases_follow_wraps_and_resets() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let i0 = Instant::now();
        let src = "hw_counters/out_of_buffer";
        let read = |v: u64, secs| put(&store, &m, "p", &[counter_from(v, src)], i0, secs);
        let unpublished = || store.snapshot()[0].unpublished_increase();
        read(4_293_000_000, 0);
        assert_eq!(unpublished(), 0.0, "a first read has no increase");
        read(4_294_000_000, 1);
        // Across the top of 32 bits at the same pace: 967_296 + 32_704 = 1_000_000.
        read(32_704, 2);
        assert_eq!(unpublished(), 2_000_000.0);
        store.with_series(|s, _| s.for_each(Series::mark_published));
        assert_eq!(unpublished(), 0.0);
        assert!(store.snapshot()[0].is_published());
        read(1_032_704, 3);
        // Back far below the pace: a reset, no increase for it.
        read(5, 4);
        read(105, 5);
        assert_eq!(unpublished(), 1_000_100.0);
    }

    /// What a reader hangs on a store is one value per type, and goes with the store.
    #[test]
    fn attached_values_are_one_per_type_and_go_with_the_store() {
        let store = Store::new();
        let a = store.attached::<Mutex<Vec<u8>>>();
        a.lock().unwrap().push(7);
        assert_eq!(*store.attached::<Mutex<Vec<u8>>>().lock().unwrap(), [7]);
        assert_eq!(*store.attached::<Mutex<String>>().lock().unwrap(), "");
        let weak = Arc::downgrade(&a);
        drop(a);
        assert!(weak.upgrade().is_some(), "held by the store");
        drop(store);
        assert!(weak.upgrade().is_none(), "freed with the store");
    }
}
