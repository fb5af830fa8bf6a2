//! OTLP encoded straight from the [`Store`], as `/metrics` is rendered from it: one
//! `ExportMetricsServiceRequest` per export, written field by field into buffers kept
//! across exports (no copy of every point in an aggregator, no decoded request).
//!
//! What receivers see (opentelemetry-proto's `metrics/v1`, field numbers from its
//! generated code): one resource (`service.name` = rocewatch, `service.version`,
//! `host.name`, `host.id`, `service.instance.id`, the configured attributes,
//! `OTEL_RESOURCE_ATTRIBUTES`), one scope (`rocewatch` and its version), both with the
//! `schema_url` of the semantic conventions the keys are from; counters as monotonic cumulative sums (`as_int`) whose start time is the
//! series' own (it moves on a counter reset), gauges as gauges (`as_double`), the probes'
//! RTT as explicit-bucket histograms with the bounds `/metrics` uses (one set of buckets in
//! both backends, so one alert rule reads both), plugin call durations as histograms of
//! count and sum alone (no buckets: none is kept). Each point's time is when its value
//! was read.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::SystemTime;

use rocewatch_plugin_api::{MetricDescriptor, MetricKind, Sample, Value};
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::{HistogramFamily, Series, Store};

use super::identity::{SCHEMA_URL, SCOPE_NAME, SCOPE_VERSION};

/// `AggregationTemporality::Cumulative`.
const CUMULATIVE: u64 = 2;

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

#[inline]
fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
fn varint_len(v: usize) -> usize {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

#[inline]
fn tag(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, u64::from(field << 3 | wire));
}

#[inline]
fn string(buf: &mut Vec<u8>, field: u32, s: &str) {
    if s.is_empty() {
        return;
    }
    tag(buf, field, LEN);
    varint(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

#[inline]
fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
fn double(buf: &mut Vec<u8>, field: u32, v: f64) {
    fixed64(buf, field, v.to_bits());
}

#[inline]
fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, VARINT);
    varint(buf, v);
}

/// A length-delimited field whose contents `f` appends. The length goes in front once
/// known: one byte is set aside, and only contents of 128 bytes or more (the length
/// takes more) are moved, once.
fn nested(buf: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    tag(buf, field, LEN);
    let at = buf.len();
    buf.push(0);
    f(buf);
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        let mut v = Vec::with_capacity(10);
        varint(&mut v, len as u64);
        buf.splice(at..at + 1, v);
    }
}

/// `KeyValue { key, value: AnyValue { string_value } }` in field `field`.
fn key_value(buf: &mut Vec<u8>, field: u32, k: &str, v: &str) {
    nested(buf, field, |b| {
        string(b, 1, k);
        nested(b, 2, |b| {
            // An empty string value is still a string value (field present).
            tag(b, 1, LEN);
            varint(b, v.len() as u64);
            b.extend_from_slice(v.as_bytes());
        });
    });
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0)
}

/// A counter's value as OTLP's `as_int` (an sfixed64: a u64 above i64::MAX wraps, as
/// it did through the SDK).
fn as_int(v: Value) -> u64 {
    match v {
        Value::U64(v) => v,
        Value::F64(f) if f.is_finite() && f >= 0.0 => f.round() as u64,
        Value::F64(_) => 0,
    }
}

/// The encoder: the resource encoded once, buffers kept across exports.
pub(super) struct Encoder {
    /// `ResourceMetrics.resource` (field 1) and its `schema_url` (field 3), encoded.
    resource: Vec<u8>,
    /// When the agent started: the start of the self-metrics' cumulative runs.
    started: SystemTime,
    /// The histograms' and the agent's own metrics, encoded before the series are
    /// written (they are small: a family per histogram, a few dozen agent series).
    tail: Vec<u8>,
    /// What is handed to the writer [`CHUNK`] at a time.
    chunk: Vec<u8>,
    /// Each point's length, from the first pass to the second.
    lengths: Vec<u32>,
    /// The store's ingest count at the last export: the next one sends the series read
    /// since (a point read once is sent once, see [`RESEND_ALL_EVERY`]).
    since: u64,
    /// When every series was last sent.
    last_full: Option<SystemTime>,
}

/// Every series is sent at least this often, read since the last export or not: a point
/// sent again carries the time it was read, so a time-series backend keeps it once, but
/// a receiver that expires what it has not been sent for a while (the OpenTelemetry
/// Collector's Prometheus exporter forgets a series after 5 minutes) keeps the series of
/// a view read rarely (the QoS view, `[qos] interval`).
const RESEND_ALL_EVERY: std::time::Duration = std::time::Duration::from_secs(240);

/// The series' encoding goes to the writer in pieces of about this size: at 2000 ports a
/// request is over 20 MB before compression, and never held whole.
const CHUNK: usize = 256 * 1024;

/// The length of field `field < 16` holding `len` bytes, tag and length included.
#[inline]
fn field_len(len: usize) -> usize {
    1 + varint_len(len) + len
}

/// The length of a `string` field (nothing when empty, as [`string`] writes it).
#[inline]
fn string_len(s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        field_len(s.len())
    }
}

/// The length of a data point's contents (without its own tag and length): what
/// [`point`] writes.
fn point_len(sample: &Sample, counter: bool) -> usize {
    let attributes: usize = sample
        .attributes
        .iter()
        .map(|(k, v)| field_len(string_len(k) + field_len(field_len(v.len()))))
        .sum();
    // time and value (fixed64 each, 9 bytes with the tag); a counter's start too.
    attributes + if counter { 27 } else { 18 }
}

/// A `NumberDataPoint`'s contents: a sum's with its start and `as_int`, a gauge's with
/// `as_double`.
fn point(b: &mut Vec<u8>, sample: &Sample, start: SystemTime, time: SystemTime, counter: bool) {
    for (k, v) in sample.attributes.iter() {
        key_value(b, 7, k, v);
    }
    if counter {
        fixed64(b, 2, nanos(start));
    }
    fixed64(b, 3, nanos(time));
    if counter {
        fixed64(b, 6, as_int(sample.value));
    } else {
        double(b, 4, sample.value.as_f64());
    }
}

/// One metric of the store's series, measured in the first pass.
struct Family<'a> {
    /// Its series: `series[from..to]`.
    from: usize,
    to: usize,
    name: &'a str,
    description: &'a str,
    unit: &'a str,
    counter: bool,
    /// The length of its `Sum` or `Gauge`, and of the whole `Metric`.
    data: usize,
    metric: usize,
}

/// `ScopeMetrics.scope` (field 1: `InstrumentationScope { name, version }`) and
/// `ScopeMetrics.schema_url` (field 3), encoded once: what produced the metrics, and the
/// semantic conventions their names and attributes follow.
fn scope_encoded() -> &'static [u8] {
    static SCOPE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SCOPE.get_or_init(|| {
        let mut b = Vec::new();
        nested(&mut b, 1, |b| {
            string(b, 1, SCOPE_NAME);
            string(b, 2, SCOPE_VERSION);
        });
        string(&mut b, 3, SCHEMA_URL);
        b
    })
}

impl Encoder {
    /// `attributes`: the resource's, in order (later keys win over earlier ones).
    pub(super) fn new(attributes: &[(String, String)], started: SystemTime) -> Encoder {
        let mut merged: BTreeMap<&str, &str> = BTreeMap::new();
        for (k, v) in attributes {
            merged.insert(k, v);
        }
        let mut resource = Vec::new();
        nested(&mut resource, 1, |b| {
            for (k, v) in &merged {
                key_value(b, 1, k, v);
            }
        });
        // `ResourceMetrics.schema_url`: the semantic conventions of the resource's keys.
        string(&mut resource, 3, SCHEMA_URL);
        Encoder {
            resource,
            started,
            tail: Vec::new(),
            chunk: Vec::new(),
            lengths: Vec::new(),
            since: 0,
            last_full: None,
        }
    }

    /// One request into `out`: the series of `store` read since the last export (every
    /// series on the first export and every [`RESEND_ALL_EVERY`]: a series not read again
    /// has nothing new, its point would be the same point again), its histograms and the
    /// agent's own metrics, as read now (`now`: the self-metrics' time). Returns its
    /// length.
    ///
    /// Streamed: the series are measured first (every length in front of its contents is
    /// known before the contents are written), then written [`CHUNK`] at a time, so that
    /// a request is never held whole here (a gzip writer holds only its compressed
    /// output). Both passes run under the store's read lock, over the same values, and so
    /// does the compression when `out` compresses: an ingest waits for it, as it waits for
    /// a gzip'd `/metrics` (at 2000 ports about a tenth of a second per export; copying
    /// what the points need out of the lock instead would hold the 11 MB this avoids).
    pub(super) fn encode(
        &mut self,
        store: &Store,
        agent: &SelfMetrics,
        now: SystemTime,
        out: &mut dyn Write,
    ) -> io::Result<usize> {
        let mut tail = std::mem::take(&mut self.tail);
        let mut chunk = std::mem::take(&mut self.chunk);
        let mut lengths = std::mem::take(&mut self.lengths);
        tail.clear();
        chunk.clear();
        lengths.clear();
        // A clock set back makes it due too.
        let full = self.last_full.is_none_or(|t| {
            now.duration_since(t)
                .map_or(true, |d| d >= RESEND_ALL_EVERY)
        });
        let since = if full { 0 } else { self.since };
        let (r, generation) = store.with_series_since(since, |series, descriptors| {
            // The two passes go over the same series: 8 bytes each, for this export.
            let series: Vec<&Series> = series.collect();
            // The histograms' families (under their own lock, taken inside the store's as
            // `/metrics` takes it) and the agent's metrics, encoded first: they are small.
            store.with_histograms(|families| histograms(&mut tail, families, descriptors));
            self.agent_metrics(&mut tail, agent, now);
            // First pass: each metric's length.
            let mut families: Vec<Family<'_>> = Vec::new();
            let mut from = 0;
            while from < series.len() {
                let first = &series[from].sample;
                let to = from
                    + series[from..]
                        .iter()
                        .take_while(|s| s.sample.name == first.name)
                        .count();
                let d = descriptors.get(first.name.as_ref());
                let counter = d.map_or(first.kind, |d| d.kind) == MetricKind::Counter;
                let points: usize = series[from..to]
                    .iter()
                    .map(|s| {
                        let len = point_len(&s.sample, counter);
                        lengths.push(len as u32);
                        field_len(len)
                    })
                    .sum();
                // A sum's temporality and monotonicity, 2 bytes each.
                let data = points + if counter { 4 } else { 0 };
                let (description, unit) =
                    d.map_or(("", first.unit.as_ref()), |d| (&d.description, &d.unit));
                let metric = string_len(&first.name)
                    + string_len(description)
                    + string_len(unit)
                    + field_len(data);
                families.push(Family {
                    from,
                    to,
                    name: &first.name,
                    description,
                    unit,
                    counter,
                    data,
                    metric,
                });
                from = to;
            }
            // InstrumentationScope { name: "rocewatch" }, then every metric.
            let scope = scope_encoded().len();
            let scope_metrics =
                scope + families.iter().map(|f| field_len(f.metric)).sum::<usize>() + tail.len();
            let resource_metrics = self.resource.len() + field_len(scope_metrics);
            let total = field_len(resource_metrics);
            // Second pass: the request, in order.
            // ExportMetricsServiceRequest { resource_metrics: [{ resource, scope_metrics: [..] }] }.
            tag(&mut chunk, 1, LEN);
            varint(&mut chunk, resource_metrics as u64);
            chunk.extend_from_slice(&self.resource);
            tag(&mut chunk, 2, LEN);
            varint(&mut chunk, scope_metrics as u64);
            chunk.extend_from_slice(scope_encoded());
            let mut written = 0;
            for f in &families {
                tag(&mut chunk, 2, LEN);
                varint(&mut chunk, f.metric as u64);
                string(&mut chunk, 1, f.name);
                string(&mut chunk, 2, f.description);
                string(&mut chunk, 3, f.unit);
                tag(&mut chunk, if f.counter { 7 } else { 5 }, LEN);
                varint(&mut chunk, f.data as u64);
                for (s, len) in series[f.from..f.to].iter().zip(&lengths[f.from..f.to]) {
                    tag(&mut chunk, 1, LEN);
                    varint(&mut chunk, u64::from(*len));
                    point(&mut chunk, &s.sample, s.start, s.time, f.counter);
                    if chunk.len() >= CHUNK {
                        out.write_all(&chunk)?;
                        written += chunk.len();
                        chunk.clear();
                    }
                }
                if f.counter {
                    uint(&mut chunk, 2, CUMULATIVE);
                    uint(&mut chunk, 3, 1);
                }
            }
            out.write_all(&chunk)?;
            out.write_all(&tail)?;
            written += chunk.len() + tail.len();
            if written != total {
                // A length in front of its contents would be wrong: the receiver could
                // not decode the request. Never sent.
                return Err(io::Error::other(format!(
                    "OTLP encoder: the request measured {total} bytes and {written} were written"
                )));
            }
            Ok(total)
        });
        self.tail = tail;
        self.chunk = chunk;
        self.lengths = lengths;
        if r.is_ok() {
            self.since = generation;
            if full {
                self.last_full = Some(now);
            }
        }
        r
    }

    /// The agent's counters and gauges (their runs start with the agent) and its plugin
    /// call durations (count and sum, no buckets).
    fn agent_metrics(&self, m: &mut Vec<u8>, agent: &SelfMetrics, now: SystemTime) {
        let mut samples = agent.samples();
        samples.sort_by(|a, b| a.name.cmp(&b.name));
        let mut i = 0;
        while i < samples.len() {
            let j = i + samples[i..]
                .iter()
                .take_while(|s| s.name == samples[i].name)
                .count();
            let first = &samples[i];
            let entry = rocewatch_metrics::SELF_METRICS
                .iter()
                .find(|e| e.name == first.name.as_ref());
            let points = samples[i..j].iter().map(|s| Point {
                sample: s,
                start: self.started,
                time: now,
            });
            let d = entry.map(|e| MetricDescriptor {
                name: e.name.into(),
                unit: e.unit.into(),
                kind: e.kind,
                description: e.description.into(),
            });
            metric(m, first, d.as_ref(), first.kind, points);
            i = j;
        }
        let durations = agent.durations();
        if durations.is_empty() {
            return;
        }
        let entry = rocewatch_metrics::SELF_METRICS
            .iter()
            .find(|e| e.kind == MetricKind::Histogram);
        nested(m, 2, |b| {
            string(b, 1, rocewatch_metrics::names::ROCEWATCH_PLUGIN_DURATION);
            string(b, 2, entry.map_or("", |e| e.description));
            string(b, 3, "s");
            nested(b, 9, |b| {
                for (plugin, kind, count, sum) in &durations {
                    nested(b, 1, |b| {
                        key_value(b, 9, "kind", kind);
                        key_value(b, 9, "plugin", plugin);
                        fixed64(b, 2, nanos(self.started));
                        fixed64(b, 3, nanos(now));
                        fixed64(b, 4, *count);
                        double(b, 5, *sum);
                        packed_fixed64(b, 6, std::iter::once(*count));
                    });
                }
                uint(b, 2, CUMULATIVE);
            });
        });
    }
}

/// The histogram families with series (the probes' RTT): explicit buckets, the bounds
/// `/metrics` uses.
fn histograms(
    m: &mut Vec<u8>,
    families: &BTreeMap<String, HistogramFamily>,
    descriptors: &BTreeMap<String, MetricDescriptor>,
) {
    for (name, fam) in families.iter().filter(|(_, f)| !f.series.is_empty()) {
        let d = descriptors.get(name);
        nested(m, 2, |b| {
            string(b, 1, name);
            string(b, 2, d.map_or("", |d| &d.description));
            string(b, 3, d.map_or("", |d| &d.unit));
            nested(b, 9, |b| {
                for s in fam.series.values() {
                    nested(b, 1, |b| {
                        for (k, v) in s.attributes.iter() {
                            key_value(b, 9, k, v);
                        }
                        fixed64(b, 2, nanos(s.start));
                        fixed64(b, 3, nanos(s.time));
                        fixed64(b, 4, s.count);
                        double(b, 5, s.sum);
                        packed_fixed64(b, 6, s.counts.iter().copied());
                        packed_fixed64(b, 7, fam.bounds.iter().map(|f| f.to_bits()));
                    });
                }
                uint(b, 2, CUMULATIVE);
            });
        });
    }
}

/// One point of a scalar metric.
struct Point<'a> {
    sample: &'a Sample,
    start: SystemTime,
    time: SystemTime,
}

/// `Metric` (field 2 of ScopeMetrics) of one name: a monotonic cumulative sum for a
/// counter, else a gauge.
fn metric<'a>(
    m: &mut Vec<u8>,
    first: &Sample,
    d: Option<&MetricDescriptor>,
    kind: MetricKind,
    points: impl Iterator<Item = Point<'a>>,
) {
    let counter = kind == MetricKind::Counter;
    nested(m, 2, |b| {
        string(b, 1, &first.name);
        string(b, 2, d.map_or("", |d| &d.description));
        string(b, 3, d.map_or(&first.unit, |d| &d.unit));
        nested(b, if counter { 7 } else { 5 }, |b| {
            for p in points {
                nested(b, 1, |b| point(b, p.sample, p.start, p.time, counter));
            }
            if counter {
                uint(b, 2, CUMULATIVE);
                uint(b, 3, 1);
            }
        });
    });
}

/// A packed repeated fixed64 (or double, as its bits) field.
fn packed_fixed64(buf: &mut Vec<u8>, field: u32, values: impl ExactSizeIterator<Item = u64>) {
    tag(buf, field, LEN);
    varint(buf, 8 * values.len() as u64);
    for v in values {
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value as N};
    use prost::Message;
    use rocewatch_plugin_api::{AttrSet, Attributes};
    use std::time::{Duration, Instant};

    fn attrs(pairs: &[(&str, &str)]) -> Attributes {
        let set: AttrSet = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into();
        std::sync::Arc::new(set)
    }

    fn sample(name: &str, v: Value, kind: MetricKind, a: &Attributes) -> Sample {
        Sample {
            name: name.to_string().into(),
            unit: "By".into(),
            value: v,
            attributes: a.clone(),
            source: "counters/x".into(),
            kind,
        }
    }

    fn desc(name: &str, kind: MetricKind) -> MetricDescriptor {
        MetricDescriptor {
            name: name.into(),
            unit: "By".into(),
            kind,
            description: format!("{name} described"),
        }
    }

    /// One request, written as the exporter writes it, decoded by the official protos.
    fn request(
        enc: &mut Encoder,
        store: &Store,
        m: &SelfMetrics,
        now: SystemTime,
    ) -> ExportMetricsServiceRequest {
        let mut body = Vec::new();
        let len = enc.encode(store, m, now, &mut body).expect("encodes");
        assert_eq!(len, body.len(), "the length it returns is what it wrote");
        ExportMetricsServiceRequest::decode(body.as_slice()).expect("our encoding decodes")
    }

    fn kv(a: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Vec<(String, String)> {
        a.iter()
            .map(|k| {
                let v = match k.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(Any::StringValue(s)) => s.clone(),
                    other => panic!("{other:?}"),
                };
                (k.key.clone(), v)
            })
            .collect()
    }

    /// Counters as monotonic cumulative sums whose start moves on a reset, gauges as
    /// gauges, the RTT histogram with the store's bounds, the agent's own metrics; the
    /// resource and scope; all decoded by the official protos.
    #[test]
    // One store and one request, checked field by field: long, and a test.
    #[allow(clippy::too_many_lines)]
    fn the_store_encodes_as_otlp_receivers_read_it() {
        let store = Store::new();
        let m = SelfMetrics::default();
        store.declare(&[
            desc("rdma.port.rx", MetricKind::Counter),
            desc("rdma.port.up", MetricKind::Gauge),
        ]);
        let p0 = attrs(&[("rdma.device", "mlx5_0"), ("rdma.port", "1")]);
        let p1 = attrs(&[("rdma.device", "mlx5_1"), ("rdma.port", "1")]);
        let (t0, i0) = (
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
            Instant::now(),
        );
        let sec = Duration::from_secs(1);
        let round = |v0: u64, v1: u64| {
            vec![
                sample("rdma.port.rx", Value::U64(v0), MetricKind::Counter, &p0),
                sample("rdma.port.rx", Value::U64(v1), MetricKind::Counter, &p1),
                sample("rdma.port.up", Value::F64(1.0), MetricKind::Gauge, &p0),
            ]
        };
        store.ingest_at("c", &round(100, 500), &m, t0, i0);
        // p1 resets (500 -> 7): its start moves to this read; p0's stays.
        store.ingest_at("c", &round(200, 7), &m, t0 + sec, i0 + sec);
        let rtt = MetricDescriptor {
            unit: "s".into(),
            ..desc("rdma.probe.rtt", MetricKind::Histogram)
        };
        store.declare_histogram(&rtt, &[0.001, 0.01]);
        let peer = attrs(&[("rdma.probe.peer", "10.0.0.2")]);
        store.observe(
            "rdma.probe.rtt",
            [(&peer, 0.0005), (&peer, 0.005), (&peer, 5.0)],
        );
        m.call_duration("counters-sysfs", "collect", Duration::from_millis(3));
        m.exporter_sent("otlp", 2);
        let started = t0 - 10 * sec;
        let mut enc = Encoder::new(
            &[
                ("service.name".into(), "rocewatch".into()),
                ("host.name".into(), "gpu-1".into()),
                ("deployment.environment".into(), "prod".into()),
            ],
            started,
        );
        let now = t0 + 2 * sec;
        let req = request(&mut enc, &store, &m, now);
        assert_eq!(req.resource_metrics.len(), 1);
        let rm = &req.resource_metrics[0];
        assert_eq!(
            kv(&rm.resource.as_ref().unwrap().attributes),
            [
                ("deployment.environment".to_string(), "prod".to_string()),
                ("host.name".into(), "gpu-1".into()),
                ("service.name".into(), "rocewatch".into()),
            ]
        );
        let sm = &rm.scope_metrics[0];
        let scope = sm.scope.as_ref().unwrap();
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("rocewatch", env!("CARGO_PKG_VERSION"))
        );
        // The semantic conventions the resource's keys are from, on both.
        assert_eq!(sm.schema_url, "https://opentelemetry.io/schemas/1.42.0");
        assert_eq!(rm.schema_url, sm.schema_url);
        let by_name = |n: &str| {
            sm.metrics
                .iter()
                .find(|x| x.name == n)
                .unwrap_or_else(|| panic!("no {n}"))
        };
        let ns = |t: SystemTime| nanos(t);
        let rx = by_name("rdma.port.rx");
        assert_eq!(
            (rx.unit.as_str(), rx.description.as_str()),
            ("By", "rdma.port.rx described")
        );
        let Some(Data::Sum(sum)) = &rx.data else {
            panic!("{rx:?}")
        };
        assert!(sum.is_monotonic);
        assert_eq!(sum.aggregation_temporality, CUMULATIVE as i32);
        let pts: Vec<_> = sum
            .data_points
            .iter()
            .map(|p| {
                (
                    kv(&p.attributes)[0].1.clone(),
                    p.value,
                    p.start_time_unix_nano,
                    p.time_unix_nano,
                )
            })
            .collect();
        assert_eq!(
            pts,
            [
                (
                    "mlx5_0".to_string(),
                    Some(N::AsInt(200)),
                    ns(t0),
                    ns(t0 + sec)
                ),
                (
                    "mlx5_1".to_string(),
                    Some(N::AsInt(7)),
                    ns(t0 + sec),
                    ns(t0 + sec)
                ),
            ]
        );
        let Some(Data::Gauge(g)) = &by_name("rdma.port.up").data else {
            panic!()
        };
        assert_eq!(g.data_points[0].value, Some(N::AsDouble(1.0)));
        assert_eq!(g.data_points[0].start_time_unix_nano, 0);
        let Some(Data::Histogram(h)) = &by_name("rdma.probe.rtt").data else {
            panic!()
        };
        let p = &h.data_points[0];
        assert_eq!(h.aggregation_temporality, CUMULATIVE as i32);
        assert_eq!((p.count, p.sum), (3, Some(5.0055)));
        assert_eq!(p.explicit_bounds, [0.001, 0.01]);
        assert_eq!(p.bucket_counts, [1, 1, 1]);
        assert!(p.start_time_unix_nano > 0 && p.start_time_unix_nano <= p.time_unix_nano);
        let Some(Data::Sum(sent)) = &by_name("rocewatch.exporter.sent").data else {
            panic!()
        };
        assert_eq!(sent.data_points[0].value, Some(N::AsInt(2)));
        assert_eq!(sent.data_points[0].start_time_unix_nano, ns(started));
        assert_eq!(sent.data_points[0].time_unix_nano, ns(now));
        let Some(Data::Histogram(d)) = &by_name("rocewatch.plugin.duration").data else {
            panic!()
        };
        let p = &d.data_points[0];
        assert_eq!(
            kv(&p.attributes),
            [
                ("kind".to_string(), "collect".to_string()),
                ("plugin".into(), "counters-sysfs".into())
            ]
        );
        assert_eq!(
            (p.count, p.bucket_counts.clone(), p.explicit_bounds.len()),
            (1, vec![1], 0)
        );
        // The next export sends what was read since (nothing of the store's series here:
        // the same points again would be duplicates), the histograms and the agent's own.
        let names = |r: &ExportMetricsServiceRequest| -> Vec<String> {
            r.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .map(|x| x.name.clone())
                .collect()
        };
        let next = request(&mut enc, &store, &m, now + sec);
        assert!(
            !names(&next).iter().any(|n| n.starts_with("rdma.port")),
            "{:?}",
            names(&next)
        );
        assert!(names(&next).contains(&"rdma.probe.rtt".to_string()));
        assert!(names(&next).contains(&"rocewatch.exporter.sent".to_string()));
        // Every series after RESEND_ALL_EVERY, read or not: the buffers are kept, and the
        // store's metrics come out as the first time, with no leftovers.
        let full = request(&mut enc, &store, &m, now + RESEND_ALL_EVERY);
        let store_part = |r: &ExportMetricsServiceRequest| {
            r.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .filter(|x| !x.name.starts_with("rocewatch."))
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(store_part(&full), store_part(&req));
    }

    /// A point is sent once: an export carries the series read since the last one (a
    /// collector's every collection, a view read rarely only when it was), every series
    /// again every RESEND_ALL_EVERY, and after a failed encoding nothing is skipped.
    #[test]
    fn an_export_sends_what_was_read_since_the_last() {
        let store = Store::new();
        let m = SelfMetrics::default();
        store.declare(&[
            desc("rdma.port.rx", MetricKind::Counter),
            desc("rdma.qos.setting", MetricKind::Gauge),
        ]);
        let port = attrs(&[("rdma.device", "mlx5_0")]);
        let rx = |v| {
            vec![sample(
                "rdma.port.rx",
                Value::U64(v),
                MetricKind::Counter,
                &port,
            )]
        };
        let qos = vec![sample(
            "rdma.qos.setting",
            Value::F64(1.0),
            MetricKind::Gauge,
            &port,
        )];
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(5_000);
        let sec = Duration::from_secs(1);
        let mut enc = Encoder::new(&[], t0);
        let points = |r: &ExportMetricsServiceRequest| -> Vec<(String, usize)> {
            r.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .filter(|x| !x.name.starts_with("rocewatch."))
                .map(|x| {
                    let n = match &x.data {
                        Some(Data::Sum(d)) => d.data_points.len(),
                        Some(Data::Gauge(d)) => d.data_points.len(),
                        other => panic!("{other:?}"),
                    };
                    (x.name.clone(), n)
                })
                .collect()
        };
        store.ingest("collector", &rx(1), &m);
        store.ingest("qos", &qos, &m);
        let both = vec![
            ("rdma.port.rx".to_string(), 1),
            ("rdma.qos.setting".to_string(), 1),
        ];
        assert_eq!(
            points(&request(&mut enc, &store, &m, t0)),
            both,
            "the first: all"
        );
        store.ingest("collector", &rx(2), &m);
        let rx_only = vec![("rdma.port.rx".to_string(), 1)];
        assert_eq!(points(&request(&mut enc, &store, &m, t0 + sec)), rx_only);
        assert_eq!(
            points(&request(&mut enc, &store, &m, t0 + 2 * sec)),
            vec![],
            "nothing read"
        );
        store.ingest("qos", &qos, &m);
        store.ingest("collector", &rx(3), &m);
        assert_eq!(
            points(&request(&mut enc, &store, &m, t0 + 3 * sec)),
            both,
            "read again"
        );
        store.ingest("collector", &rx(4), &m);
        // A writer that fails: the next export still has what this one would have sent.
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("receiver gone"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        assert!(enc.encode(&store, &m, t0 + 4 * sec, &mut Broken).is_err());
        assert_eq!(
            points(&request(&mut enc, &store, &m, t0 + 5 * sec)),
            rx_only
        );
        let due = t0 + RESEND_ALL_EVERY;
        assert_eq!(
            points(&request(&mut enc, &store, &m, due)),
            both,
            "all, when due"
        );
        assert_eq!(points(&request(&mut enc, &store, &m, due + sec)), vec![]);
        // A clock set back: all again rather than never.
        assert_eq!(points(&request(&mut enc, &store, &m, t0)), both);
    }

    /// Lengths of 128 bytes and more (a varint of two bytes and up) are placed in front of
    /// their contents correctly, at every size up to three bytes.
    #[test]
    fn long_fields_keep_their_lengths() {
        for len in [0usize, 1, 127, 128, 129, 16_383, 16_384, 70_000] {
            let text = "x".repeat(len);
            let mut b = Vec::new();
            key_value(&mut b, 1, "k", &text);
            let r = opentelemetry_proto::tonic::common::v1::KeyValueList::decode(b.as_slice())
                .unwrap_or_else(|e| panic!("{len}: {e}"));
            assert_eq!(kv(&r.values), [("k".to_string(), text)], "{len}");
        }
    }

    /// A store larger than a chunk is written in pieces, as one request: the gzip stream
    /// the exporter writes decodes to every series, with values of every length class.
    #[test]
    fn a_large_store_streams_into_one_request() {
        struct Pieces(Vec<u8>, usize);
        impl Write for Pieces {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.extend_from_slice(b);
                self.1 += 1;
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let store = Store::new();
        let m = SelfMetrics::default();
        store.declare(&[
            desc("rdma.port.rx", MetricKind::Counter),
            desc("rdma.qos.setting", MetricKind::Gauge),
        ]);
        let mut samples = Vec::new();
        for i in 0..6000u64 {
            let long = "v".repeat((i % 300) as usize);
            let a = attrs(&[("rdma.device", &format!("mlx5_{i}")), ("value", &long)]);
            samples.push(sample(
                "rdma.port.rx",
                Value::U64(i),
                MetricKind::Counter,
                &a,
            ));
            samples.push(sample(
                "rdma.qos.setting",
                Value::F64(1.0),
                MetricKind::Gauge,
                &a,
            ));
        }
        store.ingest("c", &samples, &m);
        let mut enc = Encoder::new(&[("host.name".into(), "h".into())], SystemTime::now());
        let mut w = Pieces(Vec::new(), 0);
        let len = enc.encode(&store, &m, SystemTime::now(), &mut w).unwrap();
        assert!(
            len > 2 * CHUNK,
            "{len} bytes: the test needs several chunks"
        );
        assert!(w.1 >= 3, "written in {} pieces", w.1);
        assert_eq!(w.0.len(), len);
        // Through gzip, as sent (a new encoder: the first export sends every series).
        let mut enc = Encoder::new(&[("host.name".into(), "h".into())], SystemTime::now());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.encode(&store, &m, SystemTime::now(), &mut gz).unwrap();
        let mut raw = Vec::new();
        io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&gz.finish().unwrap()[..]),
            &mut raw,
        )
        .unwrap();
        let req = ExportMetricsServiceRequest::decode(raw.as_slice()).expect("decodes");
        let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
        let points = |n: &str| match &metrics.iter().find(|x| x.name == n).unwrap().data {
            Some(Data::Sum(d)) => d.data_points.len(),
            Some(Data::Gauge(d)) => d.data_points.len(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (points("rdma.port.rx"), points("rdma.qos.setting")),
            (6000, 6000)
        );
        assert_eq!(req.resource_metrics.len(), 1);
    }

    proptest::proptest! {
        /// Any names, units, attribute keys and values (any Unicode) and values encode
        /// into a request the official protos decode, with every point as given.
        #[test]
        fn any_series_round_trip(
            series in proptest::collection::vec(
                ("[a-z.]{1,12}", "\\PC{0,20}", "\\PC{0,200}", proptest::num::u64::ANY, proptest::bool::ANY),
                1..20,
            )
        ) {
            let store = Store::new();
            let m = SelfMetrics::default();
            let samples: Vec<Sample> = series
                .iter()
                .enumerate()
                .map(|(i, (name, k, v, value, counter))| {
                    let a = attrs(&[("i", &i.to_string()), (k.as_str(), v.as_str())]);
                    let kind = if *counter { MetricKind::Counter } else { MetricKind::Gauge };
                    sample(&format!("{name}.{i}"), Value::U64(*value), kind, &a)
                })
                .collect();
            store.ingest("c", &samples, &m);
            let mut enc = Encoder::new(&[], SystemTime::now());
            let req = request(&mut enc, &store, &m, SystemTime::now());
            let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
            for s in &samples {
                let x = metrics.iter().find(|x| x.name == s.name.as_ref()).expect("every series");
                let (pts, want) = match &x.data {
                    Some(Data::Sum(d)) => (&d.data_points, N::AsInt(as_int(s.value) as i64)),
                    Some(Data::Gauge(d)) => (&d.data_points, N::AsDouble(s.value.as_f64())),
                    other => panic!("{other:?}"),
                };
                proptest::prop_assert_eq!(pts.len(), 1);
                proptest::prop_assert_eq!(pts[0].value, Some(want));
                let got = kv(&pts[0].attributes);
                let mut expect: Vec<(String, String)> = s.attributes.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                expect.sort();
                let mut got_sorted = got.clone();
                got_sorted.sort();
                proptest::prop_assert_eq!(got_sorted, expect);
            }
        }
    }
}
