//! OTLP export that survives outages.
//!
//! The OpenTelemetry SDK (`opentelemetry`, `opentelemetry_sdk`) aggregates: every catalog
//! metric (and every metric an external collector declares) is an observable instrument
//! whose callback reads the latest values from the [`Store`]; the SDK's periodic reader
//! collects them with cumulative temporality on its own thread and hands each snapshot
//! to [`QueuedExporter`], which converts it to an OTLP request (`opentelemetry-proto`) and
//! only enqueues it. A sender thread delivers the queue over OTLP/HTTP (protobuf) or
//! OTLP/gRPC:
//!
//! - bounded queue of snapshots (default: 10 minutes of exports, and `queue_max_bytes`);
//!   when full the oldest is dropped and counted in `rocewatch.exporter.dropped`, so
//!   memory never grows without bound and collection never waits for the network;
//! - each snapshot is encoded once, when it is queued, and held as its protobuf bytes:
//!   a decoded request takes several times its encoded size in memory (at 2000 ports a
//!   queue of decoded snapshots within 64 MiB of encoded bytes held over 500 MB), and a
//!   retry sends the same bytes again instead of encoding again;
//! - batching: a backlog is sent as up to [`MAX_MERGE`] snapshots per request, by
//!   concatenating their bytes (a protobuf message's encodings concatenated decode as
//!   one message with the repeated fields appended: one request with every snapshot's
//!   resource metrics); a batch that fails goes back to the queue snapshot by snapshot
//!   (slices of its bytes, no copy), so a bound drops only as many as it must;
//! - retries with exponential backoff and jitter on retryable failures (connection
//!   errors, timeouts, HTTP 429/502/503/504, gRPC UNAVAILABLE and friends); permanent
//!   rejections (HTTP 400...) drop the batch and are counted in `rocewatch.exporter.errors`;
//! - TLS with rustls (custom CA, client certificate), extra headers, gzip.
//!
//! `opentelemetry-otlp`'s own exporters send each snapshot once and forget it, which is
//! what this module exists to avoid; the wire format is the same (the official protos).

pub mod config;
mod transport;

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;
use prost::Message;
use rocewatch_plugin_api::{MetricKind, Sample, Value};

use self::config::OtlpConfig;
use self::transport::{SendError, Transport};
use crate::ExportError;
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::Store;

/// At most this many queued snapshots go into one request.
pub const MAX_MERGE: usize = 10;

fn key_values(s: &Sample) -> Vec<KeyValue> {
    s.attributes
        .iter()
        .map(|(k, v)| KeyValue::new(k.to_string(), v.to_string()))
        .collect()
}

fn u64_of(v: Value) -> u64 {
    match v {
        Value::U64(v) => v,
        Value::F64(f) if f.is_finite() && f >= 0.0 => f.round() as u64,
        Value::F64(_) => 0,
    }
}

/// The resource of every export: `service.name`, `service.version`, `host.name`, plus
/// the configured extras.
pub fn resource(cfg: &OtlpConfig, host: &str) -> Resource {
    let mut attrs = vec![
        KeyValue::new("host.name", host.to_string()),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    ];
    for (k, v) in &cfg.resource {
        attrs.push(KeyValue::new(k.clone(), v.clone()));
    }
    Resource::builder()
        .with_service_name("rocewatch")
        .with_attributes(attrs)
        .build()
}

// ---------------------------------------------------------------------------------------
// The queue

/// Encoded snapshots: one, or several merged into one request.
#[derive(Debug, Clone)]
struct Batch {
    /// An `ExportMetricsServiceRequest`, encoded.
    body: Bytes,
    /// The encoded length of each snapshot it holds, in order.
    parts: Vec<usize>,
}

impl Batch {
    fn of(r: &ExportMetricsServiceRequest) -> Batch {
        Batch {
            body: r.encode_to_vec().into(),
            parts: vec![r.encoded_len()],
        }
    }

    fn snapshots(&self) -> usize {
        self.parts.len()
    }

    /// Each snapshot on its own again: slices of the same bytes, no copy (the merged
    /// buffer lives until its last slice is sent or dropped).
    fn split(self) -> impl DoubleEndedIterator<Item = Batch> {
        let mut at = 0;
        let body = self.body;
        let slices: Vec<Batch> = self
            .parts
            .into_iter()
            .map(|len| {
                let b = Batch {
                    body: body.slice(at..at + len),
                    parts: vec![len],
                };
                at += len;
                b
            })
            .collect();
        slices.into_iter()
    }
}

#[derive(Default)]
struct QueueState {
    /// Oldest first.
    batches: VecDeque<Batch>,
    /// The snapshots of every batch queued.
    snapshots: usize,
    /// The encoded size of everything queued.
    bytes: usize,
    /// The size of the batch being sent: counted against `max_bytes` with the queue,
    /// since it is in memory as well.
    in_flight: usize,
    closing: bool,
    /// Set by the sender when it has finished (drained or gave up).
    done: bool,
    /// Snapshots given up at shutdown (the endpoint unreachable).
    dropped_at_shutdown: usize,
}

struct Queue {
    state: Mutex<QueueState>,
    cv: Condvar,
    capacity: usize,
    /// Bytes queued at most (`queue_max_bytes`).
    max_bytes: usize,
    metrics: Arc<SelfMetrics>,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Add a snapshot at the back; drop the oldest beyond capacity or bytes.
    fn push(&self, b: Batch) {
        let mut st = self.lock();
        st.bytes += b.body.len();
        st.snapshots += b.snapshots();
        st.batches.push_back(b);
        self.trim(&mut st);
        drop(st);
        self.cv.notify_all();
    }

    /// Put a failed batch back at the front (it is older than anything queued since),
    /// snapshot by snapshot: over a bound, only as many of its oldest as needed go.
    fn push_front(&self, b: Batch) {
        let mut st = self.lock();
        st.in_flight = 0;
        for one in b.split().rev() {
            st.bytes += one.body.len();
            st.snapshots += 1;
            st.batches.push_front(one);
        }
        self.trim(&mut st);
    }

    /// Drop the oldest batches beyond `capacity` snapshots or `max_bytes` (the newest
    /// batch is always kept), counting each snapshot dropped.
    fn trim(&self, st: &mut QueueState) {
        while st.batches.len() > 1
            && (st.snapshots > self.capacity || st.bytes + st.in_flight > self.max_bytes)
        {
            if let Some(b) = st.batches.pop_front() {
                st.bytes -= b.body.len();
                st.snapshots -= b.snapshots();
                for _ in 0..b.snapshots() {
                    self.metrics.exporter_dropped("otlp");
                }
            }
        }
    }

    /// Take the oldest batches, up to [`MAX_MERGE`] snapshots (at least one batch),
    /// merged into one.
    fn take(&self, st: &mut QueueState) -> Batch {
        let first = st
            .batches
            .pop_front()
            .expect("taken from a non-empty queue");
        let mut taken = vec![first];
        let mut snapshots = taken[0].snapshots();
        while let Some(next) = st.batches.front() {
            if snapshots + next.snapshots() > MAX_MERGE {
                break;
            }
            snapshots += next.snapshots();
            taken.push(st.batches.pop_front().expect("front exists"));
        }
        let b = merge(taken);
        st.bytes -= b.body.len();
        st.snapshots -= b.snapshots();
        st.in_flight = b.body.len();
        b
    }

    /// Snapshots queued.
    pub fn len(&self) -> usize {
        self.lock().snapshots
    }
}

// ---------------------------------------------------------------------------------------
// The sender thread

fn jittered(d: Duration) -> Duration {
    // ±20 %, from the clock's nanoseconds: enough to spread a fleet's retries.
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let f = 0.8 + 0.4 * (n % 1000) as f64 / 1000.0;
    d.mul_f64(f)
}

/// One batch of several: their encodings concatenated (an encoded request with every
/// batch's resource metrics, in order).
fn merge(batches: Vec<Batch>) -> Batch {
    if batches.len() == 1 {
        return batches.into_iter().next().expect("one batch");
    }
    let len = batches.iter().map(|b| b.body.len()).sum();
    let mut body = Vec::with_capacity(len);
    let mut parts = Vec::new();
    for b in batches {
        body.extend_from_slice(&b.body);
        parts.extend(b.parts);
    }
    Batch {
        body: body.into(),
        parts,
    }
}

fn sender(queue: Arc<Queue>, mut transport: Transport, cfg: OtlpConfig) {
    let mut backoff = cfg.retry_initial;
    let mut failing = false;
    loop {
        let batch = {
            let mut st = queue.lock();
            while st.batches.is_empty() && !st.closing {
                st = queue.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.batches.is_empty() {
                st.done = true;
                queue.cv.notify_all();
                return;
            }
            queue.take(&mut st)
        };
        let count = batch.snapshots();
        let sent = transport.send(&batch.body);
        match sent {
            Ok(()) => {
                queue.lock().in_flight = 0;
                if failing {
                    tracing::info!(endpoint = %cfg.endpoint, "OTLP export recovered; queued data sent");
                }
                failing = false;
                backoff = cfg.retry_initial;
                queue.metrics.exporter_sent("otlp", count);
            }
            Err(SendError::Permanent(e)) => {
                queue.lock().in_flight = 0;
                queue.metrics.exporter_error("otlp");
                tracing::warn!("OTLP export rejected, {count} snapshot(s) dropped: {e}");
            }
            Err(SendError::Retryable(e)) => {
                queue.metrics.exporter_error("otlp");
                if !failing {
                    tracing::warn!(
                        "OTLP export failed, will retry with backoff (queue {} of {}): {e}",
                        queue.len() + count,
                        queue.capacity
                    );
                } else {
                    tracing::debug!("OTLP export still failing: {e}");
                }
                failing = true;
                // Back to the queue as it is, where it is counted.
                queue.push_front(batch);
                let wait = jittered(backoff);
                backoff = (backoff * 2).min(cfg.retry_max);
                let st = queue.lock();
                if st.closing {
                    // Shutting down and the endpoint is unreachable: give up now rather
                    // than hold the agent's exit; what is left is counted as dropped.
                    let mut st = st;
                    let left = st.snapshots;
                    st.batches.clear();
                    st.bytes = 0;
                    st.snapshots = 0;
                    for _ in 0..left {
                        queue.metrics.exporter_dropped("otlp");
                    }
                    st.dropped_at_shutdown = left;
                    st.done = true;
                    queue.cv.notify_all();
                    return;
                }
                let _unused = queue
                    .cv
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

/// The SDK's exporter: converts and enqueues, never waits for the network.
pub struct QueuedExporter {
    queue: Arc<Queue>,
}

impl PushMetricExporter for QueuedExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        // Encoded here, on the SDK's thread; the decoded request is dropped at once.
        self.queue
            .push(Batch::of(&ExportMetricsServiceRequest::from(metrics)));
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let deadline = Instant::now() + timeout;
        let mut st = self.queue.lock();
        st.closing = true;
        self.queue.cv.notify_all();
        while !st.done {
            let now = Instant::now();
            if now >= deadline {
                return Err(OTelSdkError::Timeout(timeout));
            }
            st = self
                .queue
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// A running OTLP exporter. Call [`OtlpExporter::shutdown`] for the final export.
pub struct OtlpExporter {
    provider: SdkMeterProvider,
    endpoint: String,
    queue: Arc<Queue>,
    sender: Option<std::thread::JoinHandle<()>>,
}

impl OtlpExporter {
    /// Build the exporter, start its sender thread and register every instrument.
    pub fn start(
        cfg: &OtlpConfig,
        host: &str,
        store: Arc<Store>,
        metrics: Arc<SelfMetrics>,
    ) -> Result<OtlpExporter, ExportError> {
        let err = |message: String| ExportError::Otlp {
            endpoint: cfg.endpoint.clone(),
            message,
        };
        let capacity = cfg.queue_capacity();
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState::default()),
            cv: Condvar::new(),
            capacity,
            max_bytes: cfg.queue_max_bytes,
            metrics: Arc::clone(&metrics),
        });
        // The clients are built on the sender thread: the blocking HTTP client and the gRPC
        // runtime must not be created or dropped on the agent's async workers.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let sender = {
            let (q, c) = (Arc::clone(&queue), cfg.clone());
            std::thread::Builder::new()
                .name("rocewatch-otlp".into())
                .spawn(move || match Transport::build(&c) {
                    Ok(t) => {
                        let _ = ready_tx.send(Ok(()));
                        sender(q, t, c)
                    }
                    Err(e) => {
                        q.lock().done = true;
                        let _ = ready_tx.send(Err(e));
                    }
                })
                .map_err(|e| err(format!("cannot start the sender thread: {e}")))?
        };
        ready_rx
            .recv()
            .map_err(|_| err("the sender thread died while starting".into()))?
            .map_err(err)?;
        let exporter = QueuedExporter {
            queue: Arc::clone(&queue),
        };
        let reader = PeriodicReader::builder(exporter)
            .with_interval(cfg.interval)
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource(cfg, host))
            .build();
        let meter = provider.meter("rocewatch");
        register_store_instruments(&meter, &store);
        register_self_metrics(&meter, &metrics);
        tracing::debug!(capacity, "OTLP queue");
        Ok(OtlpExporter {
            provider,
            endpoint: cfg.endpoint.clone(),
            queue,
            sender: Some(sender),
        })
    }

    /// The final export: collect once more, then give the sender until the exporter's
    /// timeout to deliver the queue. Returns how many snapshots were given up because the
    /// endpoint was unreachable. Blocking: call it off the runtime's worker threads.
    pub fn shutdown(mut self) -> Result<usize, ExportError> {
        let r = self.provider.shutdown().map_err(|e| ExportError::Otlp {
            endpoint: self.endpoint.clone(),
            message: e.to_string(),
        });
        if let Some(h) = self.sender.take() {
            if self.queue.lock().done {
                let _ = h.join();
            }
        }
        let dropped = self.queue.lock().dropped_at_shutdown;
        r.map(|()| dropped)
    }
}

fn register_store_instruments(meter: &Meter, store: &Arc<Store>) {
    for d in store.descriptors() {
        let name = d.name.clone();
        let s = Arc::clone(store);
        match d.kind {
            MetricKind::Counter => {
                meter
                    .u64_observable_counter(d.name.clone())
                    .with_unit(d.unit.clone())
                    .with_description(d.description.clone())
                    .with_callback(move |obs| {
                        for series in s.by_name(&name) {
                            obs.observe(u64_of(series.sample.value), &key_values(&series.sample));
                        }
                    })
                    .build();
            }
            MetricKind::Histogram => {
                // Recorded by the store as observations come (no observable histogram in
                // the SDK), with the store's own bucket bounds.
                let Some(bounds) = store.histogram_bounds(&d.name) else {
                    continue;
                };
                let h = meter
                    .f64_histogram(d.name.clone())
                    .with_unit(d.unit.clone())
                    .with_description(d.description.clone())
                    .with_boundaries(bounds.to_vec())
                    .build();
                store.on_observe(
                    &d.name,
                    Box::new(move |attrs, v| {
                        let kv: Vec<opentelemetry::KeyValue> = attrs
                            .iter()
                            .map(|(k, v)| {
                                opentelemetry::KeyValue::new(k.to_string(), v.to_string())
                            })
                            .collect();
                        h.record(v, &kv);
                    }),
                );
            }
            MetricKind::Gauge => {
                meter
                    .f64_observable_gauge(d.name.clone())
                    .with_unit(d.unit.clone())
                    .with_description(d.description.clone())
                    .with_callback(move |obs| {
                        for series in s.by_name(&name) {
                            obs.observe(series.sample.value.as_f64(), &key_values(&series.sample));
                        }
                    })
                    .build();
            }
        }
    }
}

fn register_self_metrics(meter: &Meter, metrics: &Arc<SelfMetrics>) {
    for entry in rocewatch_metrics::SELF_METRICS {
        match entry.kind {
            MetricKind::Histogram => {
                let h = meter
                    .f64_histogram(entry.name)
                    .with_unit(entry.unit)
                    .with_description(entry.description)
                    .build();
                let _ = metrics.otel_duration.set(h);
            }
            _ => {
                let m = Arc::clone(metrics);
                let name = entry.name;
                meter
                    .u64_observable_counter(entry.name)
                    .with_unit(entry.unit)
                    .with_description(entry.description)
                    .with_callback(move |obs| {
                        for s in m.samples().iter().filter(|s| s.name == name) {
                            obs.observe(u64_of(s.value), &key_values(s));
                        }
                    })
                    .build();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(tag: &str) -> ExportMetricsServiceRequest {
        use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics as R;
        ExportMetricsServiceRequest {
            resource_metrics: vec![R {
                schema_url: tag.into(),
                ..Default::default()
            }],
        }
    }

    fn queue(capacity: usize, max_bytes: usize, metrics: &Arc<SelfMetrics>) -> Queue {
        Queue {
            state: Mutex::new(QueueState::default()),
            cv: Condvar::new(),
            capacity,
            max_bytes,
            metrics: Arc::clone(metrics),
        }
    }

    /// The tag of each queued batch's snapshots, decoded from the queued bytes.
    fn tags(q: &Queue) -> Vec<Vec<String>> {
        q.lock()
            .batches
            .iter()
            .map(|b| {
                ExportMetricsServiceRequest::decode(b.body.as_ref())
                    .expect("queued bytes decode")
                    .resource_metrics
                    .into_iter()
                    .map(|r| r.schema_url)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn full_queue_drops_the_oldest_and_counts() {
        let metrics = Arc::new(SelfMetrics::default());
        let q = queue(2, usize::MAX, &metrics);
        q.push(Batch::of(&req("a")));
        q.push(Batch::of(&req("b")));
        q.push(Batch::of(&req("c")));
        assert_eq!(tags(&q), [["b"], ["c"]]);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 1);
        // A failed batch goes back to the front; the overflow still drops the oldest.
        q.push_front(Batch::of(&req("z")));
        assert_eq!(tags(&q), [["b"], ["c"]]);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 2);
    }

    #[test]
    fn the_queue_is_bounded_in_bytes() {
        let metrics = Arc::new(SelfMetrics::default());
        let one = prost::Message::encoded_len(&req("aaaa"));
        let q = queue(1000, 3 * one, &metrics);
        for tag in ["aaaa", "bbbb", "cccc", "dddd", "eeee"] {
            q.push(Batch::of(&req(tag)));
        }
        assert_eq!(tags(&q), [["cccc"], ["dddd"], ["eeee"]]);
        assert_eq!(q.lock().bytes, 3 * one);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 2);
        // One snapshot larger than the bound is still kept (the newest always is).
        let tiny = queue(1000, 1, &Arc::default());
        tiny.push(Batch::of(&req("big")));
        assert_eq!(tiny.len(), 1);
        // The batch being sent counts too: with two snapshots' worth in flight, one more
        // fits beside it.
        let metrics = Arc::new(SelfMetrics::default());
        let q = queue(1000, 3 * one, &metrics);
        q.lock().in_flight = 2 * one;
        for tag in ["aaaa", "bbbb", "cccc"] {
            q.push(Batch::of(&req(tag)));
        }
        assert_eq!(q.len(), 1);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 2);
        // Put back after a failure: no longer in flight, and within the bound again.
        q.push_front(Batch::of(&req("zzzz")));
        assert_eq!(q.len(), 2);
        assert_eq!(q.lock().in_flight, 0);
    }

    #[test]
    fn a_backlog_is_sent_merged_and_goes_back_whole() {
        let metrics = Arc::new(SelfMetrics::default());
        let q = queue(1000, usize::MAX, &metrics);
        let tags_in: Vec<String> = (0..MAX_MERGE + 2).map(|i| format!("s{i}")).collect();
        for t in &tags_in {
            q.push(Batch::of(&req(t)));
        }
        let one = q.lock().batches[0].body.len();
        let taken = q.take(&mut q.lock());
        // The merged bytes decode as one request holding the first MAX_MERGE snapshots,
        // in order.
        let merged = ExportMetricsServiceRequest::decode(taken.body.as_ref()).unwrap();
        let got: Vec<String> = merged
            .resource_metrics
            .into_iter()
            .map(|r| r.schema_url)
            .collect();
        assert_eq!(got, tags_in[..MAX_MERGE]);
        assert_eq!(taken.snapshots(), MAX_MERGE);
        assert_eq!(q.len(), 2);
        assert_eq!(q.lock().in_flight, taken.body.len());
        // Back after a failure: its snapshots at the front, each on its own again, in
        // order.
        q.push_front(taken);
        assert_eq!(q.len(), MAX_MERGE + 2);
        let back: Vec<Vec<String>> = tags_in.iter().map(|t| vec![t.clone()]).collect();
        assert_eq!(tags(&q), back);
        let all: usize = tags_in.iter().map(|t| req(t).encoded_len()).sum();
        assert_eq!(q.lock().bytes, all);
        // Over the byte bound, only as many of a failed batch's oldest snapshots go as
        // needed, each counted.
        let bounded = queue(1000, 3 * one, &metrics);
        bounded.push(Batch::of(&req("s0")));
        let big = merge((0..5).map(|i| Batch::of(&req(&format!("m{i}")))).collect());
        bounded.push_front(big);
        assert_eq!(tags(&bounded), [["m3"], ["m4"], ["s0"]]);
        bounded.push(Batch::of(&req("s1")));
        assert_eq!(tags(&bounded), [["m4"], ["s0"], ["s1"]]);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 4);
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        for _ in 0..100 {
            let j = jittered(Duration::from_secs(10));
            assert!(
                j >= Duration::from_secs(8) && j <= Duration::from_secs(12),
                "{j:?}"
            );
        }
    }
}
