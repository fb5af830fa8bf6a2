//! OTLP export that survives outages.
//!
//! Every `interval`, a thread of its own encodes the [`Store`]'s series, its histograms
//! and the agent's own metrics into an OTLP request, or several (`encode`: straight from the store,
//! as `/metrics` is rendered, no aggregator holding a second copy of every point;
//! streamed into the gzip stream a chunk at a time, so that the uncompressed request is
//! never held whole) and only enqueues it. A sender thread delivers the queue over OTLP/HTTP (protobuf) or
//! OTLP/gRPC:
//!
//! - bounded queue of snapshots (default: 10 minutes of exports, and `queue_max_bytes`);
//!   when full the oldest is dropped and counted in `rocewatch.exporter.dropped`, so
//!   memory never grows without bound and collection never waits for the network;
//! - each snapshot is encoded once, when it is queued, and held as its protobuf bytes:
//!   a decoded request takes several times its encoded size in memory (at 2000 ports a
//!   queue of decoded snapshots within 64 MiB of encoded bytes held over 500 MB), and a
//!   retry sends the same bytes again instead of encoding again;
//! - a bound on every request (`max_request_bytes`, default [`MAX_REQUEST_BYTES`]
//!   uncompressed): an export larger than it is encoded as several requests under it
//!   (`encode`'s split: by metric, and a larger metric by series), queued together as
//!   one snapshot (counted once: with its last request);
//! - batching: a backlog is sent as up to [`MAX_MERGE`] requests at once, and at most
//!   `max_request_bytes` of them uncompressed, by concatenating their bytes (a protobuf
//!   message's encodings concatenated decode as one message with the repeated fields
//!   appended: one request with every snapshot's resource metrics); a batch that fails
//!   goes back to the queue request by request (slices of its bytes, no copy), so a
//!   bound drops only as many as it must;
//! - a request the receiver refuses as too large (HTTP 413, or gRPC's "message larger
//!   than max") goes back to the queue split, and from then on at most half as many are
//!   merged, down to one; a single request is cut in two (`halve`) and both sent again,
//!   so on until each fits, and the largest piece the receiver took becomes the bound of
//!   the following exports (`limit`: their encoding, merging, and the requests queued
//!   before), said once; a refused request of 16 KiB or less (`limit::CUT_FLOOR`: no
//!   receiver in use refuses so little) is not cut again but dropped with the rest of its
//!   snapshot (counted in `rocewatch.exporter.dropped{reason="too_large"}`, said once per
//!   change), so a receiver that refuses everything gets a few requests a snapshot;
//! - retries as the OTLP specification says (`transport`: what is retryable), with
//!   exponential backoff and jitter, or the receiver's `Retry-After` / `RetryInfo` (up to
//!   [`sender::RETRY_AFTER_MAX`]); a wait holds its deadline however many snapshots are queued
//!   meanwhile. What is not retryable is dropped and counted
//!   (`rocewatch.exporter.dropped{reason="rejected"}`), said once per change;
//! - a `partial_success` (the receiver took the request, rejected some points): the
//!   points counted in `rocewatch.exporter.rejected_points`, the message said once per
//!   change, the request not sent again;
//! - TLS with rustls (custom CA, client certificate), extra headers, gzip.
//!
//! Events (remediation decisions, rule transitions, quarantine changes) go to the same
//! endpoint as OTLP logs (`logs`), with the same transport, resource and configuration.
//!
//! `opentelemetry-otlp`'s own exporters send each snapshot once and forget it, which is
//! what this module exists to avoid; the wire format is the official protos'
//! (`opentelemetry-proto`, which the tests decode it with).

pub mod config;
mod encode;
mod fields;
mod halve;
mod identity;
mod limit;
pub mod logs;
mod queue;
mod sender;
mod transport;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Instant, SystemTime};

#[cfg(test)]
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
#[cfg(test)]
use prost::Message;

use self::config::OtlpConfig;
use self::encode::Encoder;
#[cfg(test)]
use self::queue::{gzip, merge, Batch};
use self::queue::{Queue, QueueState, Requests};
use self::transport::Transport;
use crate::ExportError;
use rocewatch_metrics::labels::ExporterDropReason;
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::Store;

pub use self::limit::MAX_MERGE;
use self::limit::MIN_REQUEST_BYTES;

pub use self::config::MAX_REQUEST_BYTES;

/// The resource of every export, in order (a later key wins): rocewatch's own
/// `service.name` (rocewatch), `service.version`, `host.name`, `host.id` and
/// `service.instance.id` (`identity`: from the machine id), then
/// `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k2=v2`, values percent-decoded, as the OpenTelemetry
/// SDKs read it), then `OTEL_SERVICE_NAME`, then the configured extras: what a user
/// gives wins over rocewatch's defaults, and the file over the environment.
pub fn resource(cfg: &OtlpConfig, host: &str) -> Vec<(String, String)> {
    let mut attrs = identity::own_attributes(cfg, host);
    if let Ok(env) = std::env::var("OTEL_RESOURCE_ATTRIBUTES") {
        attrs.extend(parse_resource_env(&env));
    }
    // Empty is unset (the specification says so of every variable).
    if let Some(name) = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
    {
        attrs.push(("service.name".into(), name.trim().to_string()));
    }
    for (k, v) in &cfg.resource {
        attrs.push((k.clone(), v.clone()));
    }
    attrs
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs separated by commas, values
/// percent-encoded; a pair without `=` or with an empty key is skipped.
fn parse_resource_env(s: &str) -> Vec<(String, String)> {
    fn decode(v: &str) -> String {
        let b = v.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if b[i] == b'%' && i + 2 < b.len() {
                if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
            }
            out.push(b[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    s.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_string(), decode(v.trim())))
        })
        .collect()
}

/// A running OTLP exporter. Call [`OtlpExporter::shutdown`] for the final export.
pub struct OtlpExporter {
    endpoint: String,
    timeout: std::time::Duration,
    queue: Arc<Queue>,
    sender: Option<std::thread::JoinHandle<()>>,
    /// The encoding thread, and how it is told to stop.
    ticker: Option<std::thread::JoinHandle<()>>,
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl OtlpExporter {
    /// Build the exporter and start its sender and encoding threads.
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
        // The bound on a request: `max_request_bytes`, or lower once the receiver taught
        // the sender its limit (`limit`); the encoding thread reads it at each export.
        let limit = limit::Limit::new(cfg.max_request_bytes.max(MIN_REQUEST_BYTES));
        let bound = limit.shared();
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
                        sender::sender(q, t, c, limit)
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
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let ticker = {
            let (q, stop, interval) = (Arc::clone(&queue), Arc::clone(&stop), cfg.interval);
            let gz = cfg.compression == config::Compression::Gzip;
            let mut enc =
                Encoder::new(&resource(cfg, host), SystemTime::now()).temporality(cfg.temporality);
            std::thread::Builder::new()
                .name("rocewatch-otlp-encode".into())
                .spawn(move || {
                    let (lock, cv) = &*stop;
                    let mut next = Instant::now() + interval;
                    // The last body's size: the next one's buffer starts there.
                    let mut last_len = 0;
                    // An encoding that fails is said once, until one succeeds again.
                    let mut failing = false;
                    loop {
                        let mut stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
                        while !*stopped && Instant::now() < next {
                            let left = next.saturating_duration_since(Instant::now());
                            stopped = cv
                                .wait_timeout(stopped, left)
                                .unwrap_or_else(|p| p.into_inner())
                                .0;
                        }
                        let last = *stopped;
                        drop(stopped);
                        // The final export too, when stopped. Encoded straight into
                        // the gzip stream (or a buffer sized from the last request), as
                        // one request or, past `max_request_bytes`, several.
                        let now = SystemTime::now();
                        let max_request = bound.load(std::sync::atomic::Ordering::Relaxed);
                        let mut requests = Requests::new(gz, last_len);
                        let body = enc
                            .encode(&store, &metrics, now, max_request, &mut requests)
                            .and_then(|_| requests.finish());
                        match body {
                            Ok(requests) => {
                                last_len = requests.iter().map(|(b, _)| b.len()).max().unwrap_or(0);
                                q.push_snapshot(requests, gz);
                                failing = false;
                            }
                            Err(e) => {
                                // Lost: counted as the sender counts a failed send.
                                metrics.exporter_error("otlp");
                                metrics.exporter_dropped("otlp", ExporterDropReason::Encode);
                                if !failing {
                                    tracing::warn!("OTLP export: this snapshot is lost: {e}");
                                } else {
                                    tracing::debug!("OTLP export: still failing: {e}");
                                }
                                failing = true;
                            }
                        }
                        if last {
                            return;
                        }
                        // A late tick does not make the next one come early.
                        next = (next + interval).max(Instant::now());
                    }
                })
                .map_err(|e| err(format!("cannot start the encoding thread: {e}")))?
        };
        tracing::debug!(capacity, "OTLP queue");
        Ok(OtlpExporter {
            endpoint: cfg.endpoint.clone(),
            timeout: cfg.timeout,
            queue,
            sender: Some(sender),
            ticker: Some(ticker),
            stop,
        })
    }

    /// The final export: encode once more, then give the sender until the exporter's
    /// timeout to deliver the queue. Returns how many snapshots were given up because the
    /// endpoint was unreachable. Blocking: call it off the runtime's worker threads.
    pub fn shutdown(mut self) -> Result<usize, ExportError> {
        {
            let (lock, cv) = &*self.stop;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cv.notify_all();
        }
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        let deadline = Instant::now() + self.timeout.max(std::time::Duration::from_secs(1));
        let mut st = self.queue.lock();
        st.closing = true;
        self.queue.cv.notify_all();
        while !st.done {
            let now = Instant::now();
            if now >= deadline {
                drop(st);
                return Err(ExportError::Otlp {
                    endpoint: self.endpoint.clone(),
                    message: format!(
                        "the final export was not delivered within {}",
                        humantime::format_duration(self.timeout)
                    ),
                });
            }
            st = self
                .queue
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let dropped = st.dropped_at_shutdown;
        drop(st);
        if let Some(h) = self.sender.take() {
            let _ = h.join();
        }
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        let taken = q.take(&mut q.lock(), MAX_MERGE, MAX_REQUEST_BYTES);
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

    /// gzip'd snapshots are queued compressed (one member each), merged by their bytes,
    /// and sent as one gzip stream of the merged request; a failed batch splits back
    /// into its compressed snapshots.
    #[test]
    fn gzipped_snapshots_merge_into_one_stream() {
        use std::io::Read;
        let metrics = Arc::new(SelfMetrics::default());
        let q = queue(1000, usize::MAX, &metrics);
        let tags_in = ["a", "b", "c"];
        for t in tags_in {
            let raw = req(t).encode_to_vec();
            q.push(Batch::of_bytes(gzip(&[&raw]).unwrap(), raw.len(), true));
        }
        let raw: usize = tags_in.iter().map(|t| req(t).encoded_len()).sum();
        let taken = q.take(&mut q.lock(), MAX_MERGE, MAX_REQUEST_BYTES);
        let body = taken.request().unwrap();
        // One member: a reader that stops after the first member still gets everything.
        let mut one = Vec::new();
        flate2::read::GzDecoder::new(body.as_ref())
            .read_to_end(&mut one)
            .unwrap();
        assert_eq!(one.len(), raw);
        let merged = ExportMetricsServiceRequest::decode(one.as_slice()).unwrap();
        let got: Vec<String> = merged
            .resource_metrics
            .into_iter()
            .map(|r| r.schema_url)
            .collect();
        assert_eq!(got, tags_in);
        q.push_front(taken);
        assert_eq!(q.len(), 3);
        // While failing, one at a time.
        assert_eq!(q.take(&mut q.lock(), 1, MAX_REQUEST_BYTES).snapshots(), 1);
    }

    /// A merge stops at MAX_REQUEST_BYTES of snapshots uncompressed (their gzip'd size
    /// says nothing of what the receiver inflates); one larger snapshot goes alone.
    #[test]
    fn a_merge_is_bounded_by_its_uncompressed_size() {
        let metrics = Arc::new(SelfMetrics::default());
        let q = queue(1000, usize::MAX, &metrics);
        let sizes = [1_500_000, 1_500_000, 1_500_000, 5_000_000, 10, 10];
        for (i, raw) in sizes.into_iter().enumerate() {
            let body = req(&format!("s{i}")).encode_to_vec();
            q.push(Batch::of_bytes(body, raw, false));
        }
        let taken: Vec<usize> = (0..4)
            .map(|_| {
                let b = q.take(&mut q.lock(), MAX_MERGE, MAX_REQUEST_BYTES);
                q.lock().in_flight = 0;
                b.snapshots()
            })
            .collect();
        assert_eq!(taken, [2, 1, 1, 2]);
        assert_eq!(q.len(), 0);
    }

    /// `OTEL_RESOURCE_ATTRIBUTES` as the SDKs read it: pairs split on commas, values
    /// percent-decoded, malformed pairs skipped.
    #[test]
    fn resource_attributes_from_the_environment() {
        assert_eq!(
            parse_resource_env("k8s.cluster.name=train-a, team=rdma%2Cnet ,bad,=x,empty="),
            [
                ("k8s.cluster.name".to_string(), "train-a".to_string()),
                ("team".into(), "rdma,net".into()),
                ("empty".into(), "".into()),
            ]
        );
        assert_eq!(
            parse_resource_env("a=%zz%4"),
            [("a".to_string(), "%zz%4".to_string())]
        );
        assert!(parse_resource_env("").is_empty());
    }

    proptest::proptest! {
        /// Any environment value: no panic, every key non-empty.
        #[test]
        fn any_resource_env_parses(s in "\\PC{0,80}") {
            for (k, _) in parse_resource_env(&s) {
                proptest::prop_assert!(!k.is_empty());
            }
        }
    }

    /// The sender's wait holds its deadline however many snapshots are queued meanwhile
    /// (each wakes the queue's condvar: the wait used to end at the first, and a
    /// receiver's `Retry-After: 20` was retried a second later); a shutdown ends it.
    #[test]
    fn a_retry_wait_is_not_cut_short_by_new_snapshots() {
        let metrics = Arc::new(SelfMetrics::default());
        let q = Arc::new(queue(1000, usize::MAX, &metrics));
        let pusher = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                for i in 0..20 {
                    q.push(Batch::of(&req(&format!("s{i}"))));
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let started = Instant::now();
        drop(q.wait_until(started + Duration::from_millis(300)));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        pusher.join().unwrap();
        assert_eq!(q.len(), 20);
        // Closing ends it at once.
        let closer = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                q.lock().closing = true;
                q.cv.notify_all();
            })
        };
        let started = Instant::now();
        drop(q.wait_until(started + Duration::from_secs(30)));
        assert!(started.elapsed() < Duration::from_secs(10));
        closer.join().unwrap();
    }

    /// A snapshot sent as several requests is one snapshot: queued, counted against the
    /// capacity, dropped and delivered once, its requests dropped together.
    #[test]
    fn a_snapshot_in_several_requests_counts_once() {
        let metrics = Arc::new(SelfMetrics::default());
        let q = queue(2, usize::MAX, &metrics);
        let three = |t: &str| -> Vec<(Vec<u8>, usize)> {
            (0..3)
                .map(|i| {
                    let b = req(&format!("{t}{i}")).encode_to_vec();
                    let raw = b.len();
                    (b, raw)
                })
                .collect()
        };
        q.push_snapshot(three("a"), false);
        q.push_snapshot(three("b"), false);
        assert_eq!(q.len(), 2);
        assert_eq!(q.lock().batches.len(), 6);
        // A third: the oldest goes, its three requests together, counted once.
        q.push_snapshot(three("c"), false);
        assert_eq!(q.len(), 2);
        assert_eq!(tags(&q), [["b0"], ["b1"], ["b2"], ["c0"], ["c1"], ["c2"]]);
        assert_eq!(
            metrics.exporter_dropped_for("otlp", ExporterDropReason::QueueFull),
            1
        );
        // Taken merged: delivered, one snapshot.
        let b = q.take(&mut q.lock(), MAX_MERGE, MAX_REQUEST_BYTES);
        assert_eq!((b.parts.len(), b.snapshots()), (6, 2));
        assert_eq!(q.lock().delivered(&b.parts), 2);
        // A snapshot one request of which is dropped is counted dropped, not delivered.
        let mut st = q.lock();
        st.lost(&b.parts[3], ExporterDropReason::Rejected, &metrics);
        st.lost(&b.parts[4], ExporterDropReason::Rejected, &metrics);
        assert_eq!(st.delivered(&b.parts), 1);
        drop(st);
        assert_eq!(
            metrics.exporter_dropped_for("otlp", ExporterDropReason::Rejected),
            1
        );
    }
}
