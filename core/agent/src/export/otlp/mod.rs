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
//! - bounded queue of snapshots (default: 10 minutes of exports); when full the oldest is
//!   dropped and counted in `rocewatch.exporter.dropped`, so memory never grows without
//!   bound and collection never waits for the network;
//! - batching: a backlog is sent as up to [`MAX_MERGE`] snapshots per request;
//! - retries with exponential backoff and jitter on retryable failures (connection
//!   errors, timeouts, HTTP 429/502/503/504, gRPC UNAVAILABLE and friends); permanent
//!   rejections (HTTP 400...) drop the batch and are counted in `rocewatch.exporter.errors`;
//! - TLS with rustls (custom CA, client certificate), extra headers, gzip.
//!
//! `opentelemetry-otlp`'s own exporters send each snapshot once and forget it, which is
//! what this module exists to avoid; the wire format is the same (the official protos).

pub mod config;

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;
use prost::Message;
use rocewatch_plugin_api::{MetricKind, Sample, Value};

use self::config::{Compression, OtlpConfig, OtlpProtocol};
use crate::export::ExportError;
use crate::selfmetrics::SelfMetrics;
use crate::store::Store;

/// At most this many queued snapshots go into one request.
pub const MAX_MERGE: usize = 10;

fn key_values(s: &Sample) -> Vec<KeyValue> {
    s.attributes
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
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

#[derive(Default)]
struct QueueState {
    /// Each snapshot with its encoded size.
    batches: VecDeque<(ExportMetricsServiceRequest, usize)>,
    /// The encoded size of everything queued.
    bytes: usize,
    /// What the batch being sent holds (its snapshots and their merged request): counted
    /// against `max_bytes` with the queue, since it is in memory as well.
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

    /// Add at the back; drop the oldest beyond capacity or bytes.
    fn push(&self, r: ExportMetricsServiceRequest) {
        let size = prost::Message::encoded_len(&r);
        let mut st = self.lock();
        st.bytes += size;
        st.batches.push_back((r, size));
        self.trim(&mut st);
        drop(st);
        self.cv.notify_all();
    }

    /// Put a failed batch back at the front (it is older than anything queued since).
    fn push_front(&self, rs: Vec<ExportMetricsServiceRequest>) {
        let mut st = self.lock();
        st.in_flight = 0;
        for r in rs.into_iter().rev() {
            let size = prost::Message::encoded_len(&r);
            st.bytes += size;
            st.batches.push_front((r, size));
        }
        self.trim(&mut st);
    }

    /// Drop the oldest snapshots beyond `capacity` or `max_bytes` (the newest one is
    /// always kept), counting each.
    fn trim(&self, st: &mut QueueState) {
        while st.batches.len() > self.capacity
            || (st.bytes + st.in_flight > self.max_bytes && st.batches.len() > 1)
        {
            if let Some((_, size)) = st.batches.pop_front() {
                st.bytes -= size;
            }
            self.metrics.exporter_dropped("otlp");
        }
    }

    pub fn len(&self) -> usize {
        self.lock().batches.len()
    }
}

// ---------------------------------------------------------------------------------------
// Transports

/// Why a send failed.
#[derive(Debug)]
enum SendError {
    /// Worth trying again later (endpoint down, slow, overloaded).
    Retryable(String),
    /// The receiver rejected the data; sending it again would not help.
    Permanent(String),
}

// One transport lives per exporter for the life of the process: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Transport {
    Http {
        client: reqwest::blocking::Client,
        url: String,
        gzip: bool,
    },
    Grpc {
        rt: tokio::runtime::Runtime,
        client: MetricsServiceClient<tonic::transport::Channel>,
        headers: Vec<(
            tonic::metadata::AsciiMetadataKey,
            tonic::metadata::AsciiMetadataValue,
        )>,
        timeout: Duration,
    },
}

fn read_file(path: &std::path::Path, key: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))
}

impl Transport {
    fn build(cfg: &OtlpConfig) -> Result<Transport, String> {
        let tls = cfg.tls.clone().unwrap_or_default();
        let ca = tls
            .ca_file
            .as_deref()
            .map(|p| read_file(p, "exporters.otlp.tls.ca_file"))
            .transpose()?;
        let identity = match (&tls.cert_file, &tls.key_file) {
            (Some(c), Some(k)) => Some((
                read_file(c, "exporters.otlp.tls.cert_file")?,
                read_file(k, "exporters.otlp.tls.key_file")?,
            )),
            (None, None) => None,
            _ => return Err("exporters.otlp.tls: cert_file and key_file go together".into()),
        };
        match cfg.protocol {
            OtlpProtocol::HttpProtobuf => {
                let mut headers = reqwest::header::HeaderMap::new();
                for (k, v) in &cfg.headers {
                    let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| format!("exporters.otlp.headers: {k:?}: {e}"))?;
                    let value = reqwest::header::HeaderValue::from_str(v)
                        .map_err(|e| format!("exporters.otlp.headers.{k}: {e}"))?;
                    headers.insert(name, value);
                }
                let mut b = reqwest::blocking::Client::builder()
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout)
                    .default_headers(headers)
                    .use_rustls_tls();
                if let Some(ca) = &ca {
                    let cert = reqwest::Certificate::from_pem(ca)
                        .map_err(|e| format!("exporters.otlp.tls.ca_file: {e}"))?;
                    b = b.add_root_certificate(cert);
                }
                if let Some((cert, key)) = &identity {
                    let mut pem = cert.clone();
                    pem.push(b'\n');
                    pem.extend_from_slice(key);
                    let id = reqwest::Identity::from_pem(&pem)
                        .map_err(|e| format!("exporters.otlp.tls.cert_file/key_file: {e}"))?;
                    b = b.identity(id);
                }
                let client = b.build().map_err(|e| format!("HTTP client: {e}"))?;
                Ok(Transport::Http {
                    client,
                    url: cfg.endpoint.clone(),
                    gzip: cfg.compression == Compression::Gzip,
                })
            }
            OtlpProtocol::Grpc => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("runtime for gRPC: {e}"))?;
                let mut endpoint = tonic::transport::Endpoint::from_shared(cfg.endpoint.clone())
                    .map_err(|e| format!("exporters.otlp.endpoint: {e}"))?
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout);
                if cfg.endpoint.starts_with("https://") || ca.is_some() || identity.is_some() {
                    let mut t = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
                    if let Some(ca) = &ca {
                        t = t.ca_certificate(tonic::transport::Certificate::from_pem(ca));
                    }
                    if let Some((cert, key)) = &identity {
                        t = t.identity(tonic::transport::Identity::from_pem(cert, key));
                    }
                    endpoint = endpoint
                        .tls_config(t)
                        .map_err(|e| format!("exporters.otlp.tls: {e}"))?;
                }
                let channel = {
                    let _guard = rt.enter();
                    endpoint.connect_lazy()
                };
                let mut client = MetricsServiceClient::new(channel);
                if cfg.compression == Compression::Gzip {
                    client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                }
                let mut headers = Vec::new();
                for (k, v) in &cfg.headers {
                    let key = tonic::metadata::AsciiMetadataKey::from_bytes(
                        k.to_ascii_lowercase().as_bytes(),
                    )
                    .map_err(|e| format!("exporters.otlp.headers: {k:?}: {e}"))?;
                    let value = v
                        .parse()
                        .map_err(|e| format!("exporters.otlp.headers.{k}: {e}"))?;
                    headers.push((key, value));
                }
                Ok(Transport::Grpc {
                    rt,
                    client,
                    headers,
                    timeout: cfg.timeout,
                })
            }
        }
    }

    fn send(&mut self, req: &ExportMetricsServiceRequest) -> Result<(), SendError> {
        match self {
            Transport::Http { client, url, gzip } => {
                let mut body = req.encode_to_vec();
                let mut r = client
                    .post(url.as_str())
                    .header("content-type", "application/x-protobuf");
                if *gzip {
                    use std::io::Write;
                    let mut enc =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    enc.write_all(&body)
                        .map_err(|e| SendError::Permanent(format!("gzip: {e}")))?;
                    body = enc
                        .finish()
                        .map_err(|e| SendError::Permanent(format!("gzip: {e}")))?;
                    r = r.header("content-encoding", "gzip");
                }
                match r.body(body).send() {
                    Ok(resp) if resp.status().is_success() => Ok(()),
                    Ok(resp) => {
                        let status = resp.status();
                        let text: String =
                            resp.text().unwrap_or_default().chars().take(200).collect();
                        let msg = format!("{url}: HTTP {status}: {}", text.trim());
                        if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
                            Err(SendError::Retryable(msg))
                        } else {
                            Err(SendError::Permanent(msg))
                        }
                    }
                    Err(e) => Err(SendError::Retryable(format!("{url}: {e}"))),
                }
            }
            Transport::Grpc {
                rt,
                client,
                headers,
                timeout,
            } => {
                let mut request = tonic::Request::new(req.clone());
                request.set_timeout(*timeout);
                for (k, v) in headers.iter() {
                    request.metadata_mut().insert(k.clone(), v.clone());
                }
                match rt.block_on(client.export(request)) {
                    Ok(_) => Ok(()),
                    Err(status) => {
                        use tonic::Code::*;
                        let msg = format!("gRPC {:?}: {}", status.code(), status.message());
                        match status.code() {
                            Cancelled | DeadlineExceeded | ResourceExhausted | Aborted
                            | OutOfRange | Unavailable | DataLoss | Unknown => {
                                Err(SendError::Retryable(msg))
                            }
                            _ => Err(SendError::Permanent(msg)),
                        }
                    }
                }
            }
        }
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

fn merge(batches: Vec<ExportMetricsServiceRequest>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: batches
            .into_iter()
            .flat_map(|b| b.resource_metrics)
            .collect(),
    }
}

fn sender(queue: Arc<Queue>, mut transport: Transport, cfg: OtlpConfig) {
    let mut backoff = cfg.retry_initial;
    let mut failing = false;
    loop {
        let batches: Vec<ExportMetricsServiceRequest> = {
            let mut st = queue.lock();
            while st.batches.is_empty() && !st.closing {
                st = queue.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.batches.is_empty() {
                st.done = true;
                queue.cv.notify_all();
                return;
            }
            let n = st.batches.len().min(MAX_MERGE);
            let taken: Vec<_> = st.batches.drain(..n).collect();
            let size = taken.iter().map(|(_, size)| size).sum::<usize>();
            st.bytes -= size;
            st.in_flight = 2 * size;
            taken.into_iter().map(|(r, _)| r).collect()
        };
        let count = batches.len();
        let req = merge(batches.clone());
        let sent = transport.send(&req);
        // Not kept through a retry's backoff: the snapshots go back to the queue, where
        // they are counted.
        drop(req);
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
                queue.push_front(batches);
                let wait = jittered(backoff);
                backoff = (backoff * 2).min(cfg.retry_max);
                let st = queue.lock();
                if st.closing {
                    // Shutting down and the endpoint is unreachable: give up now rather
                    // than hold the agent's exit; what is left is counted as dropped.
                    let mut st = st;
                    let left = st.batches.len();
                    st.batches.clear();
                    st.bytes = 0;
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
        self.queue.push(ExportMetricsServiceRequest::from(metrics));
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
                            .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone()))
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

    #[test]
    fn full_queue_drops_the_oldest_and_counts() {
        let metrics = Arc::new(SelfMetrics::default());
        let q = queue(2, usize::MAX, &metrics);
        q.push(req("a"));
        q.push(req("b"));
        q.push(req("c"));
        let tags: Vec<String> = q
            .lock()
            .batches
            .iter()
            .map(|(b, _)| b.resource_metrics[0].schema_url.clone())
            .collect();
        assert_eq!(tags, ["b", "c"]);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 1);
        // A failed batch goes back to the front; the overflow still drops the oldest.
        q.push_front(vec![req("z")]);
        let tags: Vec<String> = q
            .lock()
            .batches
            .iter()
            .map(|(b, _)| b.resource_metrics[0].schema_url.clone())
            .collect();
        assert_eq!(tags, ["b", "c"]);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 2);
    }

    #[test]
    fn the_queue_is_bounded_in_bytes() {
        let metrics = Arc::new(SelfMetrics::default());
        let one = prost::Message::encoded_len(&req("aaaa"));
        let q = queue(1000, 3 * one, &metrics);
        for tag in ["aaaa", "bbbb", "cccc", "dddd", "eeee"] {
            q.push(req(tag));
        }
        let st = q.lock();
        let tags: Vec<&str> = st
            .batches
            .iter()
            .map(|(b, _)| b.resource_metrics[0].schema_url.as_str())
            .collect();
        assert_eq!(tags, ["cccc", "dddd", "eeee"]);
        assert_eq!(st.bytes, 3 * one);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 2);
        drop(st);
        // One snapshot larger than the bound is still kept (the newest always is).
        let tiny = queue(1000, 1, &Arc::default());
        tiny.push(req("big"));
        assert_eq!(tiny.len(), 1);
        // The batch being sent counts too: with two snapshots' worth in flight, one more
        // fits beside it.
        let metrics = Arc::new(SelfMetrics::default());
        let q = queue(1000, 3 * one, &metrics);
        q.lock().in_flight = 2 * one;
        for tag in ["aaaa", "bbbb", "cccc"] {
            q.push(req(tag));
        }
        assert_eq!(q.len(), 1);
        assert_eq!(metrics.exporter_dropped_count("otlp"), 2);
        // Put back after a failure: no longer in flight, and within the bound again.
        q.push_front(vec![req("zzzz")]);
        assert_eq!(q.len(), 2);
        assert_eq!(q.lock().in_flight, 0);
    }

    #[test]
    fn merging_keeps_every_snapshot() {
        let m = merge(vec![req("a"), req("b"), req("c")]);
        assert_eq!(m.resource_metrics.len(), 3);
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
