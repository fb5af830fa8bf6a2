//! One series as the store keeps it: its reading, times, rate and what was published.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use rocewatch_plugin_api::{Attributes, MetricKind, Name, Sample, Value};

/// A series' identity and latest value: what of a [`Sample`] a series needs. Not its unit
/// (the metric's descriptor has it) nor its source (an ingest reads the new sample's).
#[derive(Debug, Clone)]
pub struct Reading {
    pub name: Name,
    pub value: Value,
    pub attributes: Attributes,
    pub kind: MetricKind,
}

impl From<&Sample> for Reading {
    fn from(s: &Sample) -> Reading {
        Reading {
            name: s.name.clone(),
            value: s.value,
            attributes: Arc::clone(&s.attributes),
            kind: s.kind,
        }
    }
}

impl Reading {
    /// A stable identity of the series: name plus sorted attributes, as
    /// [`Sample::series_key`].
    pub fn series_key(&self) -> String {
        let mut key = self.name.to_string();
        for (k, v) in self.attributes.iter() {
            key.push('|');
            key.push_str(k);
            key.push('=');
            key.push_str(v);
        }
        key
    }
}

/// One series as last seen: 152 bytes (a whole `Sample` with its unit and source, and
/// its times as `SystemTime`s and an `Instant`, made it 208).
#[derive(Debug, Clone)]
pub struct Series {
    pub sample: Reading,
    /// The plugin that produced it (shared by all of its series).
    pub plugin: Arc<str>,
    /// Start of the current cumulative run (Unix nanoseconds): while no point of the run
    /// has been published, the time of its latest read; then that published point's
    /// time, until a reset.
    pub(super) start: u64,
    /// When the value was read (Unix nanoseconds).
    pub(super) time: u64,
    /// When the value was read, monotonic: nanoseconds from the store's first ingest
    /// (rates and increases are over the time between two reads).
    pub(super) read_at: i64,
    /// Increase since the previous read, for counters, where `has_increase`: none on the
    /// first read, across a reset and while the counter rests at its top (saturated).
    pub(super) increase: f64,
    pub(super) has_increase: bool,
    /// Seconds between the previous read and this one (the span of `increase`).
    pub interval: f32,
    /// Resting at the top of a counter that stops there (counted in
    /// `rocewatch.counter.saturated` while it does).
    pub saturated: bool,
    /// The ingest that last saw this series (series a plugin stops emitting are dropped).
    pub(super) generation: u64,
    /// Its Prometheus label set (`{k="v",...}`), rendered once when it appeared and
    /// shared by the series that appeared with the same attributes `Arc` in one ingest
    /// (a collector's port: 52 series, one string); `None` for a series whose set is its
    /// own (the QoS view's: a set per setting and value), rendered when read instead.
    pub(super) labels: Option<Arc<str>>,
    /// What the OTLP exporter published of it.
    pub(super) published: Publication,
}

/// What was published of a series: written by the OTLP exporter through
/// [`Series::mark_published`] under the store's read lock (atomics, since readers share
/// it; an ingest, which alone changes them otherwise, holds the write lock).
#[derive(Debug, Default)]
pub(super) struct Publication {
    /// Unix nanoseconds of the read last published (0: none).
    pub(super) time: AtomicU64,
    /// The increases read since that point (`f64` bits): summed across wraps, none across
    /// a reset or while saturated, as [`Series::increase`].
    pub(super) unpublished: AtomicU64,
}

impl Clone for Publication {
    fn clone(&self) -> Self {
        Publication {
            time: AtomicU64::new(self.time.load(Ordering::Relaxed)),
            unpublished: AtomicU64::new(self.unpublished.load(Ordering::Relaxed)),
        }
    }
}

pub(super) fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

fn from_unix_nanos(n: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(n)
}

impl Series {
    /// Per-second rate since the previous read, for counters (never negative): `None` on
    /// the first read, across a reset and while saturated.
    pub fn rate(&self) -> Option<f64> {
        self.increase()
            .filter(|_| self.interval > 0.0)
            .map(|d| d / f64::from(self.interval))
    }

    /// Increase since the previous read, for counters: `None` on the first read, across
    /// a reset and while the counter rests at its top (saturated).
    pub fn increase(&self) -> Option<f64> {
        self.has_increase.then_some(self.increase)
    }

    /// Start of the current cumulative run: while no point of the run has been
    /// published, the time of its latest read; then that published point's time, until
    /// a reset.
    pub fn start(&self) -> SystemTime {
        from_unix_nanos(self.start)
    }

    /// When the value was read.
    pub fn time(&self) -> SystemTime {
        from_unix_nanos(self.time)
    }

    /// Its Prometheus label set, `{k="v",...}` (empty without attributes).
    pub fn labels(&self) -> std::borrow::Cow<'_, str> {
        match &self.labels {
            Some(l) => std::borrow::Cow::Borrowed(l),
            None => rocewatch_metrics::naming::prometheus_labels(&self.sample.attributes).into(),
        }
    }

    /// [`Series::labels`] appended to `out`.
    pub fn write_labels(&self, out: &mut String) {
        match &self.labels {
            Some(l) => out.push_str(l),
            None => {
                rocewatch_metrics::naming::write_prometheus_labels(out, &self.sample.attributes)
            }
        }
    }

    /// The ingest that last read it: a series whose count is no higher than at a reader's
    /// last visit has not changed since (the store's ingests only count up).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// When the point last published of this series was read (`None`: none was).
    pub fn last_published(&self) -> Option<SystemTime> {
        match self.published.time.load(Ordering::Relaxed) {
            0 => None,
            n => Some(from_unix_nanos(n)),
        }
    }

    /// Whether this read is the one last published (a delta point is sent once).
    pub fn is_published(&self) -> bool {
        self.published.time.load(Ordering::Relaxed) == self.time.max(1)
    }

    /// The increases read since the point last published (since the series appeared when
    /// none was): a delta point's value.
    pub fn unpublished_increase(&self) -> f64 {
        f64::from_bits(self.published.unpublished.load(Ordering::Relaxed))
    }

    /// Record that this read was published: the run's start stays where it is from now on
    /// (see the module doc), and the increases since start again from zero.
    pub fn mark_published(&self) {
        let p = &self.published;
        p.time.store(self.time.max(1), Ordering::Relaxed);
        p.unpublished.store(0f64.to_bits(), Ordering::Relaxed);
    }
}
