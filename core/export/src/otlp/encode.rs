//! OTLP encoded straight from the [`Store`], as `/metrics` is rendered from it: one
//! `ExportMetricsServiceRequest` per export, written field by field into buffers kept
//! across exports (no copy of every point in an aggregator, no decoded request).
//!
//! What receivers see (opentelemetry-proto's `metrics/v1`, field numbers named in
//! `fields` after the protos' field names): one resource (`service.name` = rocewatch, `service.version`,
//! `host.name`, `host.id`, `service.instance.id`, the configured attributes,
//! `OTEL_RESOURCE_ATTRIBUTES`), one scope (`rocewatch` and its version), both with the
//! `schema_url` of the semantic conventions the keys are from; counters as monotonic cumulative sums (`as_int`) whose start time is the
//! series' own (it moves on a counter reset), gauges as gauges (`as_double`), the probes'
//! RTT as explicit-bucket histograms with the bounds `/metrics` uses (one set of buckets in
//! both backends, so one alert rule reads both), plugin call durations as histograms of
//! count and sum alone (no buckets: none is kept). Each point's time is when its value
//! was read.
//!
//! Start times claim only what was seen: a NIC counter is first read mid-life, so the
//! first point of its run that is published has start equal to time (the data model's
//! unknown start), later ones keep that start (the store keeps it: [`Series::start`]).
//! With `temporality = "delta"` a counter's point is the sum of the increases the store
//! derived (across wraps, none across a reset) since its last published point, which is
//! its start; each read is published once (a series not read again is not sent again).
//! `delta` and `lowmemory` send what the agent counts itself (its own counters, the
//! durations, the probes' RTT) as deltas too ([`delta`]); `lowmemory` keeps the NIC's
//! counters (read, as the specification's asynchronous counters) cumulative.

use std::collections::BTreeMap;
use std::io;
#[cfg(test)]
use std::io::Write;
use std::time::SystemTime;

use rocewatch_plugin_api::{AttrSet, MetricDescriptor, MetricKind, Sample, Value};
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::{HistogramFamily, Series, Store};

use self::delta::Previous;
use super::config::Temporality;
use super::identity::{SCHEMA_URL, SCOPE_NAME, SCOPE_VERSION};

mod delta;
mod split;
mod wire;

pub(super) use self::split::Sink;
#[cfg(test)]
use self::split::CHUNK;
use self::split::{Cut, Family};
use self::wire::{double, field_len, fixed64, nested, string, string_len, tag, uint, varint, LEN};

use super::fields::aggregation_temporality::{CUMULATIVE, DELTA};
use super::fields::{
    any_value, data, histogram_data_point as hdp, instrumentation_scope, key_value as kv,
    metric as metric_field, number_data_point as ndp, resource, resource_metrics, scope_metrics,
};

/// `KeyValue { key, value: AnyValue { string_value } }` in field `field`.
fn key_value(buf: &mut Vec<u8>, field: u32, k: &str, v: &str) {
    nested(buf, field, |b| {
        string(b, kv::KEY, k);
        nested(b, kv::VALUE, |b| {
            // An empty string value is still a string value (field present).
            tag(b, any_value::STRING_VALUE, LEN);
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
    /// `ResourceMetrics.resource` and `ResourceMetrics.schema_url`, encoded.
    resource: Vec<u8>,
    /// When the agent started: the start of the self-metrics' cumulative runs.
    started: SystemTime,
    /// The histograms' and the agent's own metrics, encoded before the series are
    /// written (they are small: a family per histogram, a few dozen agent series).
    tail: Vec<u8>,
    /// What is handed to the writer `split::CHUNK` at a time.
    chunk: Vec<u8>,
    /// Each point's length, from the first pass to the second.
    lengths: Vec<u32>,
    /// The store's ingest count at the last export: the next one sends the series read
    /// since (a point read once is sent once, see [`RESEND_ALL_EVERY`]).
    since: u64,
    /// When every series was last sent.
    last_full: Option<SystemTime>,
    /// The temporality preference (`[exporters.otlp] temporality`).
    temporality: Temporality,
    /// What the last export sent of the agent's own counters and histograms, when they
    /// go as deltas.
    sent: Previous,
}

/// Every series is sent at least this often, read since the last export or not: a point
/// sent again carries the time it was read, so a time-series backend keeps it once, but
/// a receiver that expires what it has not been sent for a while (the OpenTelemetry
/// Collector's Prometheus exporter forgets a series after 5 minutes) keeps the series of
/// a view read rarely (the QoS view, `[qos] interval`).
const RESEND_ALL_EVERY: std::time::Duration = std::time::Duration::from_secs(240);

/// The length of a data point's contents (without its own tag and length): what
/// [`point`] writes.
fn point_len(attributes: &AttrSet, counter: bool) -> usize {
    let attributes: usize = attributes
        .iter()
        .map(|(k, v)| field_len(string_len(k) + field_len(field_len(v.len()))))
        .sum();
    // time and value (a fixed64 field each, with its one-byte tag); a counter's start too.
    const FIXED64_FIELD: usize = 1 + 8;
    attributes + FIXED64_FIELD * if counter { 3 } else { 2 }
}

/// A `NumberDataPoint`'s contents: a sum's with its start and `as_int`, a gauge's with
/// `as_double`; `value`: the sample's, or a delta.
fn point(
    b: &mut Vec<u8>,
    attributes: &AttrSet,
    value: Value,
    start: SystemTime,
    time: SystemTime,
    counter: bool,
) {
    for (k, v) in attributes.iter() {
        key_value(b, ndp::ATTRIBUTES, k, v);
    }
    if counter {
        fixed64(b, ndp::START_TIME_UNIX_NANO, nanos(start));
    }
    fixed64(b, ndp::TIME_UNIX_NANO, nanos(time));
    if counter {
        fixed64(b, ndp::AS_INT, as_int(value));
    } else {
        double(b, ndp::AS_DOUBLE, value.as_f64());
    }
}

/// A store series' point: cumulative, or (`delta`, counters) the increases since its
/// last published point, which is the start. A series published for the first time says
/// nothing of before: start equal to time, no increase.
fn series_point(b: &mut Vec<u8>, s: &Series, counter: bool, delta: bool) {
    let (start, value) = match s.last_published() {
        _ if !(counter && delta) => (s.start(), s.sample.value),
        Some(t) => (t, Value::F64(s.unpublished_increase())),
        None => (s.time(), Value::U64(0)),
    };
    point(b, &s.sample.attributes, value, start, s.time(), counter);
}

/// Whether a series' read was already sent as a delta (it is not sent twice).
fn sent_already(s: &Series, delta: bool) -> bool {
    delta && s.sample.kind == MetricKind::Counter && s.is_published()
}

/// `ScopeMetrics.scope` (`InstrumentationScope { name, version }`) and
/// `ScopeMetrics.schema_url`, encoded once: what produced the metrics, and the
/// semantic conventions their names and attributes follow.
fn scope_encoded() -> &'static [u8] {
    static SCOPE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SCOPE.get_or_init(|| {
        let mut b = Vec::new();
        nested(&mut b, scope_metrics::SCOPE, |b| {
            string(b, instrumentation_scope::NAME, SCOPE_NAME);
            string(b, instrumentation_scope::VERSION, SCOPE_VERSION);
        });
        string(&mut b, scope_metrics::SCHEMA_URL, SCHEMA_URL);
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
        nested(&mut resource, resource_metrics::RESOURCE, |b| {
            for (k, v) in &merged {
                key_value(b, resource::ATTRIBUTES, k, v);
            }
        });
        // `ResourceMetrics.schema_url`: the semantic conventions of the resource's keys.
        string(&mut resource, resource_metrics::SCHEMA_URL, SCHEMA_URL);
        Encoder {
            resource,
            started,
            tail: Vec::new(),
            chunk: Vec::new(),
            lengths: Vec::new(),
            since: 0,
            last_full: None,
            temporality: Temporality::Cumulative,
            sent: Previous::default(),
        }
    }

    /// With the temporality preference `t` (cumulative when not said).
    pub(super) fn temporality(mut self, t: Temporality) -> Encoder {
        self.temporality = t;
        self
    }

    /// Whether the store's counters (the NIC's, read: the specification's asynchronous
    /// counters) go as deltas: only with `delta` (`lowmemory` keeps them cumulative).
    fn read_counters_delta(&self) -> bool {
        self.temporality == Temporality::Delta
    }

    /// Whether what the agent counts itself (synchronous counters and histograms) goes
    /// as deltas: with `delta` and `lowmemory`.
    fn own_delta(&self) -> bool {
        self.temporality != Temporality::Cumulative
    }

    /// One request into `out`: the series of `store` read since the last export (every
    /// series on the first export and every [`RESEND_ALL_EVERY`]: a series not read again
    /// has nothing new, its point would be the same point again), its histograms and the
    /// agent's own metrics, as read now (`now`: the self-metrics' time): one request, or
    /// past `max_request` bytes several, each under it (see `split`; the histograms' and
    /// the agent's metrics in the last). Returns their length together.
    ///
    /// Streamed: the series are measured first (every length in front of its contents is
    /// known before the contents are written), then written `split::CHUNK` at a time, so that
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
        max_request: usize,
        out: &mut dyn Sink,
    ) -> io::Result<usize> {
        let mut sent = std::mem::take(&mut self.sent);
        let own = self.own_delta().then_some(&mut sent);
        let r = self.encode_with(store, agent, now, max_request, out, own);
        sent.settle(r.is_ok());
        self.sent = sent;
        r
    }

    /// [`Encoder::encode`], with what the last export sent of the agent's own metrics when
    /// they go as deltas (`own`).
    fn encode_with(
        &mut self,
        store: &Store,
        agent: &SelfMetrics,
        now: SystemTime,
        max_request: usize,
        out: &mut dyn Sink,
        mut own: Option<&mut Previous>,
    ) -> io::Result<usize> {
        let mut tail = std::mem::take(&mut self.tail);
        let mut chunk = std::mem::take(&mut self.chunk);
        let mut lengths = std::mem::take(&mut self.lengths);
        let delta = self.read_counters_delta();
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
            // The two passes go over the same series: 8 bytes each, for this export. A
            // delta already published (a series not read since) is not sent twice.
            let series: Vec<&Series> = series.filter(|s| !sent_already(s, delta)).collect();
            // The histograms' families (under their own lock, taken inside the store's as
            // `/metrics` takes it) and the agent's metrics, encoded first: they are small.
            store.with_histograms(|f| histograms(&mut tail, f, descriptors, own.as_deref_mut()));
            self.agent_metrics(&mut tail, agent, now, own);
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
                        let len = point_len(&s.sample.attributes, counter);
                        lengths.push(len as u32);
                        field_len(len)
                    })
                    .sum();
                // A sum's temporality and monotonicity.
                let data = points + if counter { split::SUM_TAIL } else { 0 };
                let (description, unit) = d.map_or(("", ""), |d| (&d.description, &d.unit));
                let metric = split::metric_len(&first.name, description, unit, data);
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
            // InstrumentationScope { name: "rocewatch" }, then the metrics: in requests
            // under `max_request` (`split`), each with the resource and scope (their
            // lengths' own bytes, 3 lengths of 5 at most with their tags, set aside).
            let scope = scope_encoded().len();
            let budget = max_request.saturating_sub(self.resource.len() + scope + 18);
            let (requests, tail_at) = split::plan(&families, &lengths, tail.len(), budget);
            let cut = Cut {
                resource: &self.resource,
                scope: scope_encoded(),
                families: &families,
                series: &series,
                lengths: &lengths,
                point: &|b, s, counter| series_point(b, s, counter, delta),
                temporality: if delta { DELTA } else { CUMULATIVE },
            };
            let mut all = 0;
            for (n, pieces) in requests.iter().enumerate() {
                let tail: &[u8] = if n == tail_at { &tail } else { &[] };
                all += cut.write(pieces, tail, &mut chunk, out)?;
            }
            // Written: each series' start stays and its increases count from this point.
            series.iter().for_each(|s| s.mark_published());
            Ok(all)
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
    /// call durations (count and sum, no buckets); with `own`, the counters and durations
    /// as what was added since the last export.
    fn agent_metrics(
        &self,
        m: &mut Vec<u8>,
        agent: &SelfMetrics,
        now: SystemTime,
        mut own: Option<&mut Previous>,
    ) {
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
            let counter = first.kind == MetricKind::Counter;
            let points: Vec<Point<'_>> = samples[i..j]
                .iter()
                .filter_map(|s| {
                    let (start, value) = match own.as_deref_mut().filter(|_| counter) {
                        Some(p) => {
                            let key = s.series_key();
                            let (start, d) =
                                p.delta(key, self.started, now, &[s.value.as_f64()])?;
                            (start, Value::F64(d[0]))
                        }
                        None => (self.started, s.value),
                    };
                    Some(Point {
                        sample: s,
                        value,
                        start,
                        time: now,
                    })
                })
                .collect();
            let d = entry.map(|e| MetricDescriptor {
                name: e.name.into(),
                unit: e.unit.into(),
                kind: e.kind,
                description: e.description.into(),
            });
            let temporality = if counter && own.is_some() {
                DELTA
            } else {
                CUMULATIVE
            };
            number_metric(m, first, d.as_ref(), first.kind, temporality, points);
            i = j;
        }
        let durations = agent.durations();
        if durations.is_empty() {
            return;
        }
        let entry = rocewatch_metrics::SELF_METRICS
            .iter()
            .find(|e| e.kind == MetricKind::Histogram);
        let name = rocewatch_metrics::names::ROCEWATCH_PLUGIN_DURATION;
        let points: Vec<_> = durations
            .iter()
            .filter_map(|(plugin, kind, count, sum)| {
                let totals = [*count as f64, *sum];
                let (start, d) = match own.as_deref_mut() {
                    Some(p) => p.delta(
                        format!("{name}|{plugin}|{kind}"),
                        self.started,
                        now,
                        &totals,
                    )?,
                    None => (self.started, totals.to_vec()),
                };
                Some((plugin, kind, start, d[0] as u64, d[1]))
            })
            .collect();
        let description = entry.map_or("", |e| e.description);
        metric(m, name, description, "s", metric_field::HISTOGRAM, |b| {
            for (plugin, kind, start, count, sum) in &points {
                nested(b, data::DATA_POINTS, |b| {
                    key_value(b, hdp::ATTRIBUTES, "kind", kind);
                    key_value(b, hdp::ATTRIBUTES, "plugin", plugin);
                    fixed64(b, hdp::START_TIME_UNIX_NANO, nanos(*start));
                    fixed64(b, hdp::TIME_UNIX_NANO, nanos(now));
                    fixed64(b, hdp::COUNT, *count);
                    double(b, hdp::SUM, *sum);
                    packed_fixed64(b, hdp::BUCKET_COUNTS, std::iter::once(*count));
                });
            }
            let temporality = if own.is_some() { DELTA } else { CUMULATIVE };
            uint(b, data::AGGREGATION_TEMPORALITY, temporality);
        });
    }
}

/// The histogram families with series (the probes' RTT): explicit buckets, the bounds
/// `/metrics` uses; with `own`, what was observed since the last export (a series with no
/// observation since is not sent).
fn histograms(
    m: &mut Vec<u8>,
    families: &BTreeMap<String, HistogramFamily>,
    descriptors: &BTreeMap<String, MetricDescriptor>,
    mut own: Option<&mut Previous>,
) {
    for (name, fam) in families.iter().filter(|(_, f)| !f.series.is_empty()) {
        let d = descriptors.get(name);
        let points: Vec<_> = fam
            .series
            .values()
            .filter_map(|s| {
                let mut totals: Vec<f64> = s.counts.iter().map(|&c| c as f64).collect();
                totals.extend([s.count as f64, s.sum]);
                let (start, d) = match own.as_deref_mut() {
                    Some(p) => p.delta(format!("{name}{}", s.labels), s.start, s.time, &totals)?,
                    None => (s.start, totals),
                };
                Some((s, start, d))
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        let (description, unit) = d.map_or(("", ""), |d| (&d.description, &d.unit));
        metric(m, name, description, unit, metric_field::HISTOGRAM, |b| {
            for (s, start, d) in &points {
                let (counts, rest) = d.split_at(d.len() - 2);
                nested(b, data::DATA_POINTS, |b| {
                    for (k, v) in s.attributes.iter() {
                        key_value(b, hdp::ATTRIBUTES, k, v);
                    }
                    fixed64(b, hdp::START_TIME_UNIX_NANO, nanos(*start));
                    fixed64(b, hdp::TIME_UNIX_NANO, nanos(s.time));
                    fixed64(b, hdp::COUNT, rest[0] as u64);
                    double(b, hdp::SUM, rest[1]);
                    packed_fixed64(b, hdp::BUCKET_COUNTS, counts.iter().map(|&c| c as u64));
                    let bounds = fam.bounds.iter().map(|f| f.to_bits());
                    packed_fixed64(b, hdp::EXPLICIT_BOUNDS, bounds);
                });
            }
            let temporality = if own.is_some() { DELTA } else { CUMULATIVE };
            uint(b, data::AGGREGATION_TEMPORALITY, temporality);
        });
    }
}

/// One point of a scalar metric.
struct Point<'a> {
    sample: &'a Sample,
    value: Value,
    start: SystemTime,
    time: SystemTime,
}

/// A `Metric` of the tail (small: the histograms, the agent's own metrics): its `data`
/// (`data_field`) written by `contents` first, then the head ([`split::metric_head`], the
/// one writer of a metric's head) with its length, then the contents.
fn metric(
    m: &mut Vec<u8>,
    name: &str,
    description: &str,
    unit: &str,
    data_field: u32,
    contents: impl FnOnce(&mut Vec<u8>),
) {
    let mut body = Vec::new();
    contents(&mut body);
    split::metric_head(m, name, description, unit, data_field, body.len());
    m.extend_from_slice(&body);
}

/// A scalar metric of one name: a monotonic sum of `temporality` for a counter, else a
/// gauge.
fn number_metric(
    m: &mut Vec<u8>,
    first: &Sample,
    d: Option<&MetricDescriptor>,
    kind: MetricKind,
    temporality: u64,
    points: Vec<Point<'_>>,
) {
    let counter = kind == MetricKind::Counter;
    let description = d.map_or("", |d| &d.description);
    let unit = d.map_or(first.unit.as_ref(), |d| d.unit.as_str());
    let data_field = split::number_data(counter);
    metric(m, &first.name, description, unit, data_field, |b| {
        for p in points {
            nested(b, data::DATA_POINTS, |b| {
                point(b, &p.sample.attributes, p.value, p.start, p.time, counter)
            });
        }
        if counter {
            split::sum_tail(b, temporality);
        }
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
        let len = enc
            .encode(store, m, now, usize::MAX, &mut body)
            .expect("encodes");
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
        // p1 resets (500 -> 7). Nothing was published before: both first points have
        // start equal to time (a_counters_first_point_claims_nothing_of_what_came_before
        // follows a run further).
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
                    ns(t0 + sec),
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
        assert!(enc
            .encode(&store, &m, t0 + 4 * sec, usize::MAX, &mut Broken)
            .is_err());
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
        let len = enc
            .encode(&store, &m, SystemTime::now(), usize::MAX, &mut w)
            .unwrap();
        assert!(
            len > 2 * CHUNK,
            "{len} bytes: the test needs several chunks"
        );
        assert!(w.1 >= 3, "written in {} pieces", w.1);
        assert_eq!(w.0.len(), len);
        // Through gzip, as sent (a new encoder: the first export sends every series).
        let mut enc = Encoder::new(&[("host.name".into(), "h".into())], SystemTime::now());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.encode(&store, &m, SystemTime::now(), usize::MAX, &mut gz)
            .unwrap();
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

    /// The points of one counter series in a request: (start, time, value).
    fn counter_points(r: &ExportMetricsServiceRequest, name: &str) -> Vec<(u64, u64, i64)> {
        r.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .filter(|x| x.name == name)
            .flat_map(|x| match &x.data {
                Some(Data::Sum(d)) => d.data_points.clone(),
                other => panic!("{other:?}"),
            })
            .map(|p| match p.value {
                Some(N::AsInt(v)) => (p.start_time_unix_nano, p.time_unix_nano, v),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// Issue 47: a counter read several times before the first export (collection faster
    /// than export) was published with the start of its first read and the NIC's lifetime
    /// total: by the data model all of it happened in that interval. Its first published
    /// point now has start equal to time (nothing claimed), later points keep that start,
    /// and a reset begins a run the same way.
    #[test]
    fn a_counters_first_point_claims_nothing_of_what_came_before() {
        let store = Store::new();
        let m = SelfMetrics::default();
        store.declare(&[desc("rdma.port.rx", MetricKind::Counter)]);
        let port = attrs(&[("rdma.device", "mlx5_0")]);
        let rx = |v| {
            vec![sample(
                "rdma.port.rx",
                Value::U64(v),
                MetricKind::Counter,
                &port,
            )]
        };
        let (t0, i0) = (
            SystemTime::UNIX_EPOCH + Duration::from_secs(9_000),
            Instant::now(),
        );
        let sec = Duration::from_secs(1);
        let read = |v, k: u32| store.ingest_at("c", &rx(v), &m, t0 + k * sec, i0 + k * sec);
        let mut enc = Encoder::new(&[], t0);
        // A NIC that has counted 5e12 bytes, read three times before the first export.
        read(5_000_000_000_000, 0);
        read(5_000_000_000_100, 1);
        read(5_000_000_000_300, 2);
        let first = request(&mut enc, &store, &m, t0 + 2 * sec);
        let t2 = nanos(t0 + 2 * sec);
        assert_eq!(
            counter_points(&first, "rdma.port.rx"),
            [(t2, t2, 5_000_000_000_300)],
            "the first point: start equal to time"
        );
        read(5_000_000_000_600, 3);
        read(5_000_000_001_000, 4);
        let second = request(&mut enc, &store, &m, t0 + 4 * sec);
        assert_eq!(
            counter_points(&second, "rdma.port.rx"),
            [(t2, nanos(t0 + 4 * sec), 5_000_000_001_000)],
            "later points keep the first point's start: 700 bytes in (t2, t4]"
        );
        // A reset (perfquery -R) read twice before the next export: the run starts again
        // at its first published point, never earlier.
        read(40, 5);
        read(90, 6);
        let third = request(&mut enc, &store, &m, t0 + 6 * sec);
        let t6 = nanos(t0 + 6 * sec);
        assert_eq!(counter_points(&third, "rdma.port.rx"), [(t6, t6, 90)]);
        read(150, 7);
        let fourth = request(&mut enc, &store, &m, t0 + 7 * sec);
        assert_eq!(
            counter_points(&fourth, "rdma.port.rx"),
            [(t6, nanos(t0 + 7 * sec), 150)]
        );
    }

    /// The temporality of each metric in a request, by name.
    fn temporalities(r: &ExportMetricsServiceRequest) -> BTreeMap<String, i32> {
        r.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .filter_map(|x| match &x.data {
                Some(Data::Sum(d)) => Some((x.name.clone(), d.aggregation_temporality)),
                Some(Data::Histogram(d)) => Some((x.name.clone(), d.aggregation_temporality)),
                _ => None,
            })
            .collect()
    }

    /// `temporality = "delta"`: a counter's points are the increases the store derived
    /// (across a 32-bit wrap, none across a reset), each over (its last published point,
    /// this read], each sent once (not again with no new read, not at the full resend);
    /// the first says nothing of before. The agent's own counters and the RTT histogram
    /// send what was added since the last export.
    #[test]
    // One run followed export by export: long, and a test.
    #[allow(clippy::too_many_lines)]
    fn delta_points_are_the_increases_each_sent_once() {
        let store = Store::new();
        let m = SelfMetrics::default();
        store.declare(&[desc("rdma.port.drops", MetricKind::Counter)]);
        let rtt = MetricDescriptor {
            unit: "s".into(),
            ..desc("rdma.probe.rtt", MetricKind::Histogram)
        };
        store.declare_histogram(&rtt, &[0.001, 0.01]);
        let peer = attrs(&[("rdma.probe.peer", "10.0.0.2")]);
        let port = attrs(&[("rdma.device", "mlx5_0")]);
        // mlx5's out_of_buffer rolls over at 32 bits (rocewatch_metrics::counter).
        let drops = |v: u64| Sample {
            source: "hw_counters/out_of_buffer".into(),
            ..sample("rdma.port.drops", Value::U64(v), MetricKind::Counter, &port)
        };
        let (t0, i0) = (
            SystemTime::UNIX_EPOCH + Duration::from_secs(7_000),
            Instant::now(),
        );
        let sec = Duration::from_secs(1);
        let at = |k: u32| t0 + k * sec;
        let read = |v, k: u32| store.ingest_at("c", &[drops(v)], &m, at(k), i0 + k * sec);
        let started = t0 - 100 * sec;
        let mut enc = Encoder::new(&[], started).temporality(Temporality::Delta);
        let own = |r: &ExportMetricsServiceRequest, name: &str| -> Vec<(u64, u64, i64)> {
            counter_points(r, name)
        };
        read(4_293_000_000, 0);
        m.exporter_sent("otlp", 2);
        store.observe("rdma.probe.rtt", [(&peer, 0.0005), (&peer, 0.005)]);
        let first = request(&mut enc, &store, &m, at(0));
        assert_eq!(
            counter_points(&first, "rdma.port.drops"),
            [(nanos(at(0)), nanos(at(0)), 0)],
            "the first: nothing of before"
        );
        let t = temporalities(&first);
        assert_eq!(t["rdma.port.drops"], DELTA as i32);
        assert_eq!(t["rdma.probe.rtt"], DELTA as i32);
        assert_eq!(t["rocewatch.exporter.sent"], DELTA as i32);
        assert_eq!(
            own(&first, "rocewatch.exporter.sent"),
            [(nanos(started), nanos(at(0)), 2)],
            "the agent's own: from its true start"
        );
        let hist = |r: &ExportMetricsServiceRequest| {
            r.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .filter(|x| x.name == "rdma.probe.rtt")
                .flat_map(|x| match &x.data {
                    Some(Data::Histogram(h)) => h.data_points.clone(),
                    other => panic!("{other:?}"),
                })
                .map(|p| (p.count, p.bucket_counts))
                .collect::<Vec<_>>()
        };
        assert_eq!(hist(&first), [(2, vec![1, 1, 0])]);
        read(4_294_000_000, 1);
        // Across the top of 32 bits at the same pace: 967_296 + 32_704.
        read(32_704, 2);
        m.exporter_sent("otlp", 3);
        store.observe("rdma.probe.rtt", [(&peer, 5.0)]);
        let second = request(&mut enc, &store, &m, at(2));
        assert_eq!(
            counter_points(&second, "rdma.port.drops"),
            [(nanos(at(0)), nanos(at(2)), 2_000_000)]
        );
        assert_eq!(
            own(&second, "rocewatch.exporter.sent"),
            [(nanos(at(0)), nanos(at(2)), 3)]
        );
        assert_eq!(hist(&second), [(1, vec![0, 0, 1])]);
        // Nothing read or observed since: neither is sent again, at the full resend either.
        for now in [at(3), at(3) + RESEND_ALL_EVERY] {
            let again = request(&mut enc, &store, &m, now);
            assert_eq!(counter_points(&again, "rdma.port.drops"), []);
            assert_eq!(hist(&again), []);
        }
        // A reset between reads: no increase for it.
        read(1_032_704, 4);
        read(5, 5);
        read(105, 6);
        let fourth = request(&mut enc, &store, &m, at(6) + RESEND_ALL_EVERY);
        assert_eq!(
            counter_points(&fourth, "rdma.port.drops"),
            [(nanos(at(2)), nanos(at(6)), 1_000_100)]
        );
        // What the deltas add up to is what the store derived, read by read.
        let total: i64 = [&first, &second, &fourth]
            .iter()
            .flat_map(|r| counter_points(r, "rdma.port.drops"))
            .map(|p| p.2)
            .sum();
        assert_eq!(total, 967_296 + 32_704 + 1_000_000 + 1_000_000 + 100);
        // lowmemory: the NIC's counters (read: asynchronous) stay cumulative, the rest
        // goes as deltas.
        let mut low = Encoder::new(&[], started).temporality(Temporality::LowMemory);
        read(205, 7);
        let r = request(&mut low, &store, &m, at(7));
        let t = temporalities(&r);
        assert_eq!(t["rdma.port.drops"], CUMULATIVE as i32);
        assert_eq!(t["rdma.probe.rtt"], DELTA as i32);
        assert_eq!(t["rocewatch.exporter.sent"], DELTA as i32);
        assert_eq!(counter_points(&r, "rdma.port.drops")[0].2, 205);
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

    /// Each request begun, with the length it was begun with.
    #[derive(Default)]
    struct Collect(Vec<(usize, Vec<u8>)>);

    impl Sink for Collect {
        fn begin(&mut self, len: usize) -> io::Result<&mut dyn Write> {
            self.0.push((len, Vec::new()));
            Ok(&mut self.0.last_mut().expect("begun").1)
        }
    }

    /// An export larger than the bound goes as several requests, each under it, each
    /// with the resource and the scope, that together hold every point once.
    #[test]
    fn a_large_export_is_cut_into_requests_under_the_bound() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let d = |name: &str, kind| MetricDescriptor {
            name: name.into(),
            unit: "By".into(),
            kind,
            description: format!("{name} described"),
        };
        store.declare(&[
            d("rdma.port.rx", MetricKind::Counter),
            d("rdma.port.tx", MetricKind::Counter),
            d("rdma.qos.setting", MetricKind::Gauge),
        ]);
        let mut samples = Vec::new();
        for i in 0..3000u64 {
            let a: rocewatch_plugin_api::AttrSet =
                [("rdma.device".to_string(), format!("mlx5_{i}"))]
                    .into_iter()
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into();
            let a = std::sync::Arc::new(a);
            for (name, kind) in [
                ("rdma.port.rx", MetricKind::Counter),
                ("rdma.port.tx", MetricKind::Counter),
                ("rdma.qos.setting", MetricKind::Gauge),
            ] {
                samples.push(Sample {
                    name: name.to_string().into(),
                    unit: "By".into(),
                    value: Value::U64(i),
                    attributes: a.clone(),
                    source: "counters/x".into(),
                    kind,
                });
            }
        }
        store.ingest("c", &samples, &m);
        let resource = [("host.name".to_string(), "h".to_string())];
        // One request without a bound.
        let mut whole = Collect::default();
        let all = Encoder::new(&resource, SystemTime::now())
            .encode(&store, &m, SystemTime::now(), usize::MAX, &mut whole)
            .unwrap();
        assert_eq!(whole.0.len(), 1);
        let bound = 64 << 10;
        assert!(all > 3 * bound, "{all}: the test needs several requests");
        let mut cut = Collect::default();
        let total = Encoder::new(&resource, SystemTime::now())
            .encode(&store, &m, SystemTime::now(), bound, &mut cut)
            .unwrap();
        assert!(cut.0.len() > 3, "{} requests", cut.0.len());
        assert_eq!(total, cut.0.iter().map(|(_, b)| b.len()).sum::<usize>());
        let mut points: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (len, body) in &cut.0 {
            assert_eq!(*len, body.len(), "begun with its length");
            assert!(body.len() <= bound, "a request of {}", body.len());
            let r = ExportMetricsServiceRequest::decode(body.as_slice()).expect("decodes");
            assert_eq!(r.resource_metrics.len(), 1);
            let rm = &r.resource_metrics[0];
            assert_eq!(rm.resource.as_ref().unwrap().attributes[0].key, "host.name");
            let sm = &rm.scope_metrics[0];
            assert_eq!(sm.scope.as_ref().unwrap().name, "rocewatch");
            for metric in &sm.metrics {
                let devices: Vec<String> = match &metric.data {
                    Some(Data::Sum(s)) => s
                        .data_points
                        .iter()
                        .map(|p| format!("{:?}", p.attributes))
                        .collect(),
                    Some(Data::Gauge(g)) => g
                        .data_points
                        .iter()
                        .map(|p| format!("{:?}", p.attributes))
                        .collect(),
                    _ => continue,
                };
                points
                    .entry(metric.name.clone())
                    .or_default()
                    .extend(devices);
            }
        }
        for name in ["rdma.port.rx", "rdma.port.tx", "rdma.qos.setting"] {
            let got = &points[name];
            let distinct: std::collections::BTreeSet<&String> = got.iter().collect();
            assert_eq!(
                (got.len(), distinct.len()),
                (3000, 3000),
                "{name}: each point once"
            );
        }
    }

    /// The encoder's bytes for a fixed store (counters and gauges, cumulative and delta,
    /// whole and cut by series; the agent's own metrics; an RTT histogram), pinned as hex
    /// in `encode/golden.hex`: a change of the encoder's code that is not meant to change
    /// the wire (naming field numbers, one writer of a metric's head) leaves it byte
    /// for byte. `SNAPSHOTS=overwrite` writes it again after an intended change.
    #[test]
    fn the_wire_bytes_are_pinned() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let i0 = Instant::now();
        let sec = Duration::from_secs(1);
        let build = || {
            let store = Store::new();
            let m = SelfMetrics::default();
            store.declare(&[
                desc("rdma.port.rx", MetricKind::Counter),
                desc("rdma.port.up", MetricKind::Gauge),
            ]);
            let ports: Vec<Attributes> = (0..6)
                .map(|i| attrs(&[("rdma.device", &format!("mlx5_{i}")), ("rdma.port", "1")]))
                .collect();
            let round = |v: u64| -> Vec<Sample> {
                ports
                    .iter()
                    .enumerate()
                    .flat_map(|(i, p)| {
                        [
                            sample(
                                "rdma.port.rx",
                                Value::U64(v * (i as u64 + 1)),
                                MetricKind::Counter,
                                p,
                            ),
                            sample("rdma.port.up", Value::F64(1.0), MetricKind::Gauge, p),
                        ]
                    })
                    .collect()
            };
            store.ingest_at("c", &round(100), &m, t0, i0);
            store.ingest_at("c", &round(250), &m, t0 + sec, i0 + sec);
            m.call_duration("counters-sysfs", "collect", Duration::from_millis(3));
            m.exporter_sent("otlp", 2);
            (store, m)
        };
        let resource = [
            ("service.name".to_string(), "rocewatch".to_string()),
            ("host.name".into(), "gpu-1".into()),
        ];
        let mut out = String::new();
        for (label, temporality, bound) in [
            (
                "cumulative, one request",
                Temporality::Cumulative,
                usize::MAX,
            ),
            ("cumulative, cut by series", Temporality::Cumulative, 900),
            ("delta, one request", Temporality::Delta, usize::MAX),
        ] {
            let (store, m) = build();
            let mut enc = Encoder::new(&resource, t0 - 10 * sec).temporality(temporality);
            for export in 0..2u32 {
                let mut got = Collect::default();
                let now = t0 + (2 + export) * sec;
                enc.encode(&store, &m, now, bound, &mut got).unwrap();
                for (n, (_, body)) in got.0.iter().enumerate() {
                    out.push_str(&format!("# {label}: export {export}, request {n}\n"));
                    out.push_str(&hex(body));
                }
            }
        }
        let mut families = BTreeMap::new();
        let peer = attrs(&[("rdma.probe.peer", "10.0.0.2")]);
        let mut fam = HistogramFamily {
            bounds: vec![0.001, 0.01].into(),
            ..Default::default()
        };
        fam.series.insert(
            peer.clone(),
            rocewatch_runtime::store::HistogramSeries {
                attributes: peer,
                labels: String::new(),
                counts: vec![1, 1, 1].into(),
                sum: 5.0055,
                count: 3,
                start: t0,
                time: t0 + sec,
            },
        );
        families.insert("rdma.probe.rtt".to_string(), fam);
        let descriptors: BTreeMap<String, MetricDescriptor> = [(
            "rdma.probe.rtt".to_string(),
            desc("rdma.probe.rtt", MetricKind::Histogram),
        )]
        .into_iter()
        .collect();
        let mut h = Vec::new();
        histograms(&mut h, &families, &descriptors, None);
        out.push_str("# histograms\n");
        out.push_str(&hex(&h));
        let golden =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/otlp/encode/golden.hex");
        if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
            std::fs::write(&golden, &out).unwrap();
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
            panic!("{}: {e} (SNAPSHOTS=overwrite writes it)", golden.display())
        });
        assert!(
            want == out,
            "the encoder's bytes changed: compare with {}\n{out}",
            golden.display()
        );
    }

    /// Lines of 32 bytes in hex.
    fn hex(b: &[u8]) -> String {
        let mut s = String::new();
        for line in b.chunks(32) {
            for byte in line {
                s.push_str(&format!("{byte:02x}"));
            }
            s.push('\n');
        }
        s
    }
}
