//! Events as OTLP logs: the process's event bus (`rocewatch_runtime::events`: remediation
//! decisions and results, quarantine changes, published by the audit log once a record is
//! written; configuration reloads; rule transitions and link up/down, taken here from the
//! pipeline) sent as log records to the
//! metrics endpoint's `/v1/logs` (HTTP) or the logs service of the same endpoint (gRPC).
//!
//! One configuration with the metrics (`[exporters.otlp]`: endpoint, TLS, headers,
//! timeout, compression, retry), the same resource, and the same transport (`transport`:
//! what is retryable, `Retry-After` and `RetryInfo`, `partial_success`). Events are few
//! (a decision, a transition), so they are encoded with the official protos
//! (`opentelemetry-proto`), off the hot path, and the bus itself is the queue: bounded,
//! its oldest dropped when full (counted in `rocewatch.events.dropped{reason="queue_full"}`),
//! a failed batch put back at its front to wait out the backoff. Each record carries its
//! event name (`event_name`, and the `event.name` attribute receivers of older protos
//! read), a severity, a one-line body and the RDMA labels of what it is about.
//!
//! The audit log stays the record: written and flushed before an action runs, while this
//! copy is best effort (counted: `rocewatch.events.sent`, `rocewatch.events.dropped`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hyper::body::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use super::config::{Compression, OtlpConfig, OtlpProtocol};
use super::identity::{SCHEMA_URL, SCOPE_NAME, SCOPE_VERSION};
use super::transport::{SendError, Transport};
use crate::ExportError;
use rocewatch_metrics::labels::ExporterDropReason;
use rocewatch_runtime::events::{self, Event, EventBus};
use rocewatch_runtime::pipeline::{Collection, Pipeline};
use rocewatch_runtime::rules::Transition;
use rocewatch_runtime::selfmetrics::SelfMetrics;

/// Events in one request at most.
const MAX_BATCH: usize = 512;

/// How long the sender gives what is left at shutdown.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(5);

/// The events' `ExportLogsServiceRequest`, with `resource` on its one `ResourceLogs`.
pub fn encode(resource: &[(String, String)], events: &[Event]) -> Vec<u8> {
    let kv = |k: &str, v: &str| KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..Default::default()
    };
    let nanos = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    };
    let observed = nanos(SystemTime::now());
    let records = events
        .iter()
        .map(|e| {
            let mut attributes = vec![kv("event.name", e.name)];
            attributes.extend(e.attributes.iter().map(|(k, v)| kv(k, v)));
            LogRecord {
                time_unix_nano: nanos(e.time),
                observed_time_unix_nano: observed,
                severity_number: e.severity.number(),
                severity_text: e.severity.text().to_string(),
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(e.body.clone())),
                }),
                attributes,
                event_name: e.name.to_string(),
                ..Default::default()
            }
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: resource.iter().map(|(k, v)| kv(k, v)).collect(),
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.to_string(),
                    version: SCOPE_VERSION.to_string(),
                    ..Default::default()
                }),
                log_records: records,
                schema_url: SCHEMA_URL.to_string(),
            }],
            schema_url: SCHEMA_URL.to_string(),
        }],
    }
    .encode_to_vec()
}

/// A rule transition as an event (`rocewatch.rule.transition`).
pub fn transition_event(t: &Transition) -> Event {
    let labels: BTreeMap<String, String> = t
        .labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Event::rule_transition(&t.rule, &t.metric, t.firing, t.value, &t.severity, &labels)
}

/// Hand each message of `rx` to `f` until the pipeline closes it (a thread's loop: the
/// messages are few, the pipeline's broadcast is bounded).
fn follow<T: Clone>(mut rx: tokio::sync::broadcast::Receiver<T>, what: &str, mut f: impl FnMut(T)) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match rx.blocking_recv() {
            Ok(m) => f(m),
            Err(RecvError::Lagged(n)) => {
                tracing::warn!("OTLP events: {n} {what} missed (too many at once)")
            }
            Err(RecvError::Closed) => break,
        }
    }
}

/// Each port's `rdma.port.up` as last read: a change is an event (the first read is
/// none: nothing changed that the agent saw).
#[derive(Default)]
struct Links {
    up: std::collections::HashMap<rocewatch_plugin_api::Attributes, bool>,
}

impl Links {
    fn seen(&mut self, c: &Collection, publish: &dyn Fn(Event)) {
        for s in &c.result.samples {
            if s.name != rocewatch_metrics::names::PORT_UP {
                continue;
            }
            let up = s.value.as_f64() >= 1.0;
            // Every collection reads every port: the attributes are copied only for a
            // port seen the first time.
            let was = match self.up.get_mut(&s.attributes) {
                Some(w) => Some(std::mem::replace(w, up)),
                None => {
                    self.up.insert(s.attributes.clone(), up);
                    None
                }
            };
            if was.is_some_and(|was| was != up) {
                let labels = s
                    .attributes
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                publish(Event::link(up, &labels));
            }
        }
    }
}

/// The running events exporter; [`EventsExporter::shutdown`] sends what is left.
pub struct EventsExporter {
    stop: Arc<AtomicBool>,
    bus: Arc<EventBus>,
    sender: Option<std::thread::JoinHandle<()>>,
}

impl EventsExporter {
    /// Install the process's event bus and start the sender; rule transitions and link
    /// changes are taken from `pipeline` until it closes.
    pub fn start(
        cfg: &OtlpConfig,
        host: &str,
        metrics: Arc<SelfMetrics>,
        pipeline: &Pipeline,
    ) -> Result<EventsExporter, ExportError> {
        let err = |message: String| ExportError::Otlp {
            endpoint: cfg.logs_endpoint(),
            message,
        };
        // No logs endpoint known (a metrics URL that is not .../v1/metrics): said with the
        // fix, and no bus filled for nobody.
        cfg.logs_url().map_err(&err)?;
        let bus = events::install(events::BUS_CAPACITY);
        let stop = Arc::new(AtomicBool::new(false));
        // Dropped on any error below: the bus taken out again, what started stopped.
        let mut exporter = EventsExporter {
            stop: Arc::clone(&stop),
            bus: Arc::clone(&bus),
            sender: None,
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        exporter.sender = Some({
            let (cfg, bus, stop) = (cfg.clone(), Arc::clone(&bus), Arc::clone(&stop));
            let resource = super::resource(&cfg, host);
            std::thread::Builder::new()
                .name("otlp-events".into())
                .spawn(move || {
                    // Built here: the blocking client and gRPC runtime stay off the
                    // agent's async workers.
                    let transport = match Transport::build_logs(&cfg) {
                        Ok(t) => {
                            let _ = ready_tx.send(Ok(()));
                            t
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    Sender::new(cfg, resource, bus, metrics, transport).run(&stop);
                })
                .map_err(|e| err(format!("cannot start the events' sender: {e}")))?
        });
        ready_rx
            .recv()
            .map_err(|_| err("the events' sender ended".into()))?
            .map_err(err)?;
        // The pipeline's events go to this exporter's bus while it runs, never to one a
        // later agent installs (this pipeline's last messages may come after a reload).
        let to_bus = |bus: &Arc<EventBus>, stop: &Arc<AtomicBool>| {
            let (bus, stop) = (Arc::clone(bus), Arc::clone(stop));
            move |e: Event| {
                if !stop.load(Ordering::Acquire) {
                    bus.publish(e);
                }
            }
        };
        let transitions = pipeline.transitions();
        let publish = to_bus(&bus, &stop);
        std::thread::Builder::new()
            .name("otlp-events-rules".into())
            .spawn(move || {
                follow(transitions, "rule transitions", |t| {
                    publish(transition_event(&t))
                })
            })
            .map_err(|e| err(format!("cannot start the rules' events: {e}")))?;
        let collections = pipeline.collections();
        let publish = to_bus(&bus, &stop);
        std::thread::Builder::new()
            .name("otlp-events-links".into())
            .spawn(move || {
                let mut links = Links::default();
                follow(collections, "collections", |c| links.seen(&c, &publish))
            })
            .map_err(|e| err(format!("cannot start the links' events: {e}")))?;
        Ok(exporter)
    }

    /// Send what is queued (within a few seconds), then stop. Blocking. The bus is taken
    /// out first: what happens from now on is not published (a reload that turns `events`
    /// off must not leave it filling, nor a later exporter send it).
    pub fn shutdown(mut self) {
        events::uninstall(&self.bus);
        self.stop.store(true, Ordering::Release);
        self.bus.wake();
        if let Some(h) = self.sender.take() {
            let _ = h.join();
        }
    }
}

impl Drop for EventsExporter {
    /// An exporter dropped without [`shutdown`](EventsExporter::shutdown) (a start
    /// abandoned half-way) still stops its sender.
    fn drop(&mut self) {
        events::uninstall(&self.bus);
        self.stop.store(true, Ordering::Release);
        self.bus.wake();
    }
}

/// The sender thread's state.
struct Sender {
    cfg: OtlpConfig,
    resource: Vec<(String, String)>,
    bus: Arc<EventBus>,
    metrics: Arc<SelfMetrics>,
    transport: Transport,
    /// Events a request may carry: halved by a request refused as too large.
    batch: usize,
    backoff: Duration,
    /// What was last said of a failure (said once per change).
    said: Option<String>,
}

impl Sender {
    fn new(
        cfg: OtlpConfig,
        resource: Vec<(String, String)>,
        bus: Arc<EventBus>,
        metrics: Arc<SelfMetrics>,
        transport: Transport,
    ) -> Sender {
        let backoff = cfg.retry_initial;
        Sender {
            cfg,
            resource,
            bus,
            metrics,
            transport,
            batch: MAX_BATCH,
            backoff,
            said: None,
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        let mut stopping_since: Option<Instant> = None;
        loop {
            self.metrics
                .events_dropped(ExporterDropReason::QueueFull, self.bus.take_dropped());
            if stop.load(Ordering::Acquire) {
                let since = *stopping_since.get_or_insert_with(Instant::now);
                if self.bus.is_empty() || since.elapsed() > SHUTDOWN_BOUND {
                    let left = self.bus.take(usize::MAX, Instant::now()).len() as u64;
                    self.metrics
                        .events_dropped(ExporterDropReason::Shutdown, left);
                    return;
                }
            }
            let batch = self
                .bus
                .take(self.batch, Instant::now() + events::TAKE_WAIT);
            if batch.is_empty() {
                continue;
            }
            if let Some(wait) = self.send(batch) {
                if stop.load(Ordering::Acquire) {
                    // Stopping, and the endpoint fails: no retry loop to the bound.
                    let left = self.bus.take(usize::MAX, Instant::now()).len() as u64;
                    self.metrics
                        .events_dropped(ExporterDropReason::Shutdown, left);
                    return;
                }
                self.wait(wait, stop);
            }
        }
    }

    /// Send one batch; how long to wait before the next try, when it is to be retried.
    fn send(&mut self, batch: Vec<Event>) -> Option<Duration> {
        let n = batch.len() as u64;
        let raw = encode(&self.resource, &batch);
        // Over HTTP the body is gzip'd here; gRPC compresses its own frames.
        let gzip = self.cfg.compression == Compression::Gzip
            && self.cfg.protocol == OtlpProtocol::HttpProtobuf;
        let body = if gzip {
            match super::queue::gzip(&[&raw]) {
                Ok(b) => b,
                Err(e) => {
                    self.say(format!("cannot compress events: {e}"));
                    self.metrics.events_dropped(ExporterDropReason::Encode, n);
                    return None;
                }
            }
        } else {
            raw
        };
        match self.transport.send(&Bytes::from(body), gzip) {
            Ok(partial) => {
                let rejected = partial.as_ref().map_or(0, |p| p.rejected.max(0) as u64);
                if let Some(p) = partial.filter(|p| p.rejected > 0 || !p.message.is_empty()) {
                    self.say(format!(
                        "the receiver rejected {} of {n} event(s): {}",
                        p.rejected, p.message
                    ));
                } else if self.said.take().is_some() {
                    tracing::info!(endpoint = %self.cfg.logs_endpoint(), "OTLP events delivered again");
                }
                self.metrics.events_sent(n.saturating_sub(rejected));
                self.metrics
                    .events_dropped(ExporterDropReason::Rejected, rejected.min(n));
                self.backoff = self.cfg.retry_initial;
                None
            }
            Err(SendError::Retryable(msg, after)) => {
                self.say(format!("{msg}; retrying"));
                self.bus.put_back(batch);
                let wait = after.unwrap_or_else(|| super::sender::jittered(self.backoff));
                self.backoff = (self.backoff * 2).min(self.cfg.retry_max);
                Some(wait.min(super::sender::RETRY_AFTER_MAX))
            }
            Err(SendError::TooLarge(msg)) if n > 1 => {
                self.batch = (batch.len() / 2).max(1);
                self.say(format!(
                    "{msg}; at most {} events a request now",
                    self.batch
                ));
                self.bus.put_back(batch);
                None
            }
            Err(SendError::TooLarge(msg)) => {
                self.say(msg);
                self.metrics.events_dropped(ExporterDropReason::TooLarge, n);
                None
            }
            Err(SendError::Permanent(msg)) => {
                self.say(format!("{msg}; {n} event(s) dropped"));
                self.metrics.events_dropped(ExporterDropReason::Rejected, n);
                None
            }
        }
    }

    /// Sleep `d`, or until the exporter stops (then what is queued gets one more try).
    fn wait(&self, d: Duration, stop: &AtomicBool) {
        let until = Instant::now() + d;
        while Instant::now() < until && !stop.load(Ordering::Acquire) {
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
    }

    fn say(&mut self, msg: String) {
        if self.said.as_deref() != Some(msg.as_str()) {
            tracing::warn!(endpoint = %self.cfg.logs_endpoint(), "OTLP events: {msg}");
            self.said = Some(msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use rocewatch_runtime::events::{names, Severity};

    fn string(v: &Option<AnyValue>) -> &str {
        match v.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(s)) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    /// An OTLP/HTTP receiver answering each request (one a connection) with the next of
    /// `answers` (status line and headers); the paths and events it got.
    fn receiver(answers: Vec<&'static str>) -> (u16, std::sync::mpsc::Receiver<(String, usize)>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for answer in answers {
                let (sock, _) = listener.accept().unwrap();
                let mut r = BufReader::new(sock.try_clone().unwrap());
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                let mut len = 0;
                loop {
                    let mut h = String::new();
                    r.read_line(&mut h).unwrap();
                    if h == "\r\n" || h.is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let n = ExportLogsServiceRequest::decode(body.as_slice())
                    .unwrap()
                    .resource_logs[0]
                    .scope_logs[0]
                    .log_records
                    .len();
                let _ = tx.send((path, n));
                let mut w = sock;
                let _ = w.write_all(
                    format!("{answer}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .as_bytes(),
                );
            }
        });
        (port, rx)
    }

    fn sender(port: u16) -> (Sender, Arc<EventBus>, Arc<SelfMetrics>) {
        let mut cfg = OtlpConfig::new(
            format!("http://127.0.0.1:{port}/v1/metrics"),
            OtlpProtocol::HttpProtobuf,
        );
        cfg.compression = Compression::None;
        let bus = Arc::new(EventBus::new(64));
        let metrics = Arc::new(SelfMetrics::default());
        let transport = Transport::build_logs(&cfg).unwrap();
        let s = Sender::new(
            cfg,
            vec![],
            Arc::clone(&bus),
            Arc::clone(&metrics),
            transport,
        );
        (s, bus, metrics)
    }

    fn batch(n: usize) -> Vec<Event> {
        (0..n)
            .map(|i| Event::config_reload(true, format!("event {i}")))
            .collect()
    }

    #[test]
    fn a_503_with_retry_after_puts_the_batch_back_for_that_long_then_it_is_delivered() {
        let (port, got) = receiver(vec![
            "HTTP/1.1 503 Service Unavailable\r\nretry-after: 7",
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf",
        ]);
        let (mut s, bus, metrics) = sender(port);
        let wait = s.send(batch(3));
        assert_eq!(wait, Some(Duration::from_secs(7)), "Retry-After honoured");
        assert_eq!(got.recv().unwrap(), ("/v1/logs".to_string(), 3));
        assert_eq!(bus.len(), 3, "the batch waits in the bus");
        assert_eq!(metrics.events_counts(), (0, 0));
        let again = bus.take(10, Instant::now());
        assert_eq!(again[0].body, "event 0", "in order");
        assert_eq!(s.send(again), None);
        assert_eq!(got.recv().unwrap().1, 3);
        assert_eq!(metrics.events_counts(), (3, 0));
    }

    #[test]
    fn a_400_drops_the_batch_counted_and_a_413_halves_it() {
        let (port, got) = receiver(vec![
            "HTTP/1.1 400 Bad Request",
            "HTTP/1.1 413 Payload Too Large",
        ]);
        let (mut s, bus, metrics) = sender(port);
        assert_eq!(s.send(batch(2)), None);
        assert_eq!(got.recv().unwrap().1, 2);
        assert!(bus.is_empty(), "a rejection is not retried");
        assert_eq!(metrics.events_counts(), (0, 2));
        assert_eq!(s.send(batch(4)), None);
        assert_eq!(got.recv().unwrap().1, 4);
        assert_eq!(bus.len(), 4, "put back, to go in smaller requests");
        assert_eq!(s.batch, 2);
    }

    #[test]
    fn events_decode_as_log_records_with_name_severity_body_and_labels() {
        let labels: BTreeMap<String, String> = [("rdma.device", "mlx5_0"), ("rdma.port", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let e = Event::rule_transition("pfc", "rdma.port.pfc", true, 3.0, "warning", &labels);
        let resource = vec![("service.name".to_string(), "rocewatch".to_string())];
        let bytes = encode(&resource, std::slice::from_ref(&e));
        let req = ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap();
        let rl = &req.resource_logs[0];
        let attr = &rl.resource.as_ref().unwrap().attributes[0];
        assert_eq!(
            (attr.key.as_str(), string(&attr.value)),
            ("service.name", "rocewatch")
        );
        assert_eq!(rl.schema_url, SCHEMA_URL);
        let sl = &rl.scope_logs[0];
        assert_eq!(sl.scope.as_ref().unwrap().name, "rocewatch");
        assert_eq!(sl.scope.as_ref().unwrap().version, SCOPE_VERSION);
        let r = &sl.log_records[0];
        assert_eq!(r.event_name, names::RULE_TRANSITION);
        assert_eq!(r.severity_number, Severity::Warn.number());
        assert_eq!(r.severity_text, "WARN");
        assert_eq!(string(&r.body), e.body);
        let attrs: BTreeMap<&str, &str> = r
            .attributes
            .iter()
            .map(|kv| (kv.key.as_str(), string(&kv.value)))
            .collect();
        assert_eq!(attrs["event.name"], names::RULE_TRANSITION);
        assert_eq!(attrs["rdma.device"], "mlx5_0");
        assert_eq!(attrs["rdma.port"], "1");
        assert_eq!(attrs["rocewatch.rule"], "pfc");
        assert!(r.time_unix_nano > 0 && r.observed_time_unix_nano >= r.time_unix_nano);
    }
}
