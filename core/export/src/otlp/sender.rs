//! The sender thread: it takes the queue's oldest requests (merged after an outage), sends
//! them, and does what the answer says: counted as sent, retried after a wait, cut for a
//! receiver that refuses them as too large, or dropped and counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_metrics::labels::ExporterDropReason;
use rocewatch_runtime::selfmetrics::SelfMetrics;

use super::config::{OtlpConfig, OtlpProtocol};
use super::limit::{Learnt, Limit, Raised, Refused, CUT_FLOOR};
use super::queue::{Batch, Queue};
use super::transport::{PartialSuccess, SendError, Transport};

pub(super) fn jittered(d: Duration) -> Duration {
    // ±20 %, from the clock's nanoseconds: enough to spread a fleet's retries.
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let f = 0.8 + 0.4 * (n % 1000) as f64 / 1000.0;
    d.mul_f64(f)
}

/// The longest a receiver's `Retry-After` or `RetryInfo` is honoured: a longer one (a
/// mistake, a clock far off) waits this long, so an exporter is never silenced for
/// hours (the queue holds 10 minutes by default).
pub(super) const RETRY_AFTER_MAX: Duration = Duration::from_secs(300);

/// What the sender says once per change, not once per export.
#[derive(Default)]
struct Said {
    /// The last partial success's message said.
    partial: Option<String>,
    /// The last rejection said.
    rejected: Option<String>,
    /// A request was cut in two for the receiver (said once, then at debug level).
    halved: bool,
    /// A request of one point was too large and dropped (said once, then at debug level).
    dropped_too_large: bool,
    /// The size of the smallest request refused at the floor, said: said again once the
    /// receiver takes a request as large (its limit went up), and then refuses again.
    floor: Option<usize>,
}

/// The sender thread: until the queue closes and is drained (or given up).
pub(super) fn sender(queue: Arc<Queue>, transport: Transport, cfg: OtlpConfig, limit: Limit) {
    Sender {
        queue,
        transport,
        backoff: cfg.retry_initial,
        cfg,
        failing: false,
        said: Said::default(),
        limit,
    }
    .run();
}

struct Sender {
    queue: Arc<Queue>,
    transport: Transport,
    cfg: OtlpConfig,
    backoff: Duration,
    /// The last try failed and is being retried.
    failing: bool,
    said: Said,
    /// The bound on a request's size (`max_request_bytes`, or what the receiver taught)
    /// and on the requests merged into one.
    limit: Limit,
}

impl Sender {
    fn run(mut self) {
        while let Some(batch) = self.next() {
            // A request over a bound learnt since it was encoded: cut here rather than
            // refused there.
            if batch.parts.len() == 1 && batch.raw() > self.limit.bound() {
                if let Some(halves) = batch.halve() {
                    self.queue.push_front(halves);
                    continue;
                }
            }
            let parts = batch.parts.len();
            let sent = match batch.request() {
                Ok(body) => self.transport.send(&body, batch.gzip),
                Err(e) => Err(SendError::Permanent(format!("queued snapshots: gzip: {e}"))),
            };
            match sent {
                Ok(partial) => self.sent(&batch, partial),
                Err(SendError::TooLarge(e)) if parts > 1 => {
                    let merge = self.limit.merged_refused(parts);
                    tracing::info!(
                        "OTLP receiver refused {parts} requests merged ({} bytes) as too large: sent again split, at most {merge} a request from now on (more again after exports without a refusal): {e}",
                        batch.body.len(),
                    );
                    self.queue.push_front(batch);
                }
                Err(SendError::TooLarge(e)) => self.too_large(batch, &e),
                Err(SendError::Permanent(e)) => self.rejected(&batch, e),
                Err(SendError::Retryable(e, after)) => {
                    if !self.retry(batch, &e, after) {
                        return;
                    }
                }
            }
        }
    }

    /// The next batch to send, once there is one; `None` when the queue is closed and
    /// drained (said to whoever waits for it).
    fn next(&self) -> Option<Batch> {
        let queue = &self.queue;
        let mut st = queue.lock();
        while st.batches.is_empty() && !st.closing {
            st = queue.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.batches.is_empty() {
            st.done = true;
            queue.cv.notify_all();
            return None;
        }
        // While the endpoint fails, one request per try: a merged request would be
        // built (and, gzip'd, compressed) again for every retry.
        let merge = if self.failing { 1 } else { self.limit.merge() };
        Some(queue.take(&mut st, merge, self.limit.bound()))
    }

    fn sent(&mut self, batch: &Batch, partial: Option<PartialSuccess>) {
        let mut st = self.queue.lock();
        let delivered = st.delivered(&batch.parts);
        st.landed();
        drop(st);
        if self.failing {
            tracing::info!(endpoint = %self.cfg.endpoint, "OTLP export recovered; queued data sent");
        }
        self.failing = false;
        self.backoff = self.cfg.retry_initial;
        self.queue.metrics.exporter_sent("otlp", delivered);
        let raw = batch.raw();
        self.limit.taken(raw);
        if self.said.floor.is_some_and(|r| raw >= r) {
            self.said.floor = None;
        }
        if let Some(raised) = self.limit.clean(&batch.parts) {
            self.raised(&raised);
        }
        if let Some(learnt) = self.limit.ended(&batch.parts) {
            self.learnt(&learnt);
        }
        if let Some(p) = partial {
            partial_success(&self.queue.metrics, &mut self.said, &self.cfg.endpoint, p);
        }
    }

    /// A request of one part refused as too large: cut in two and sent again, or at the
    /// floor dropped with the rest of its snapshot, or (one point) dropped.
    fn too_large(&mut self, batch: Batch, e: &str) {
        if self.limit.refused(&batch.parts[0]) == Refused::Floor {
            return self.floor(&batch, e);
        }
        let Some(halves) = batch.halve() else {
            return self.one_point(&batch, e);
        };
        let how = format!(
            "OTLP receiver refused a request of {} bytes ({} uncompressed) as too large: sent again in two, and so on while a piece is refused (the largest piece it takes bounds the next exports; exporters.otlp.max_request_bytes at the receiver's limit avoids the refusals): {e}",
            batch.body.len(),
            batch.raw()
        );
        if std::mem::replace(&mut self.said.halved, true) {
            tracing::debug!(endpoint = %self.cfg.endpoint, "{how}");
        } else {
            tracing::info!(endpoint = %self.cfg.endpoint, "{how}");
        }
        self.queue.push_front(halves);
    }

    /// A request of [`CUT_FLOOR`] or less refused as too large: no receiver in use has a
    /// limit so low, so it is not cut further; it is dropped with what is queued of its
    /// snapshot, counted once in `dropped{reason="too_large"}`, said once per change.
    fn floor(&mut self, batch: &Batch, e: &str) {
        let raw = batch.raw();
        let dropped = self
            .queue
            .drop_with_rest(batch, ExporterDropReason::TooLarge);
        self.queue.metrics.exporter_error("otlp");
        let what = format!(
            "OTLP export: one request of {} bytes ({raw} uncompressed) is too large for the receiver, dropped with the rest of its snapshot ({} request(s) not sent; counted in rocewatch.exporter.dropped{{reason=\"too_large\"}}): a receiver that refuses {} KiB or less is not cut for, as it would take a request a data point. Raise the receiver's limit ({}, or a proxy's in front of it); exporters.otlp.max_request_bytes cannot go under 64 KiB: {e}",
            batch.body.len(),
            dropped.len() - 1,
            CUT_FLOOR >> 10,
            receiver_setting(self.cfg.protocol),
        );
        if self.said.floor.is_some() {
            tracing::debug!(endpoint = %self.cfg.endpoint, "{what}");
        } else {
            tracing::warn!(endpoint = %self.cfg.endpoint, "{what}");
        }
        self.said.floor = Some(self.said.floor.map_or(raw, |r| r.min(raw)));
        if let Some(learnt) = self.limit.ended(&dropped) {
            self.learnt(&learnt);
        }
    }

    /// A request the receiver refuses as too large that cannot be cut (one point):
    /// dropped, its snapshot counted in `dropped{reason="too_large"}`, said once.
    fn one_point(&mut self, batch: &Batch, e: &str) {
        let mut st = self.queue.lock();
        st.lost(
            &batch.parts[0],
            ExporterDropReason::TooLarge,
            &self.queue.metrics,
        );
        st.landed();
        drop(st);
        self.queue.metrics.exporter_error("otlp");
        let what = format!(
            "OTLP export: one request of {} bytes ({} uncompressed) is too large for the receiver, dropped (it holds one data point, and cannot be cut further; raise the receiver's limit, {}): {e}",
            batch.body.len(),
            batch.raw(),
            receiver_setting(self.cfg.protocol),
        );
        if std::mem::replace(&mut self.said.dropped_too_large, true) {
            tracing::debug!(endpoint = %self.cfg.endpoint, "{what}");
        } else {
            tracing::warn!(endpoint = %self.cfg.endpoint, "{what}");
        }
        if let Some(learnt) = self.limit.ended(&batch.parts) {
            self.learnt(&learnt);
        }
    }

    /// A bound learnt from the pieces the receiver took: said when it changes.
    fn learnt(&self, l: &Learnt) {
        tracing::warn!(
            endpoint = %self.cfg.endpoint,
            "OTLP receiver refused a request of {} bytes (uncompressed) as too large, and took pieces of up to {} bytes: requests are kept under {} bytes from now on (larger again, step by step, after exports without a refusal). To send them so from the start, set exporters.otlp.max_request_bytes = {} (or raise the receiver's limit: {})",
            l.refused,
            l.bound,
            l.bound,
            l.bound,
            receiver_setting(self.cfg.protocol),
        );
    }

    /// A learnt bound or merge raised after exports without a refusal: said once it is
    /// back where it was configured, each step at debug level.
    fn raised(&self, r: &Raised) {
        if r.recovered {
            tracing::info!(
                endpoint = %self.cfg.endpoint,
                "OTLP receiver took every request for a while: requests are back to exporters.otlp.max_request_bytes ({} bytes uncompressed), {} merged at most after an outage",
                r.bound,
                r.merge,
            );
        } else {
            tracing::debug!(
                endpoint = %self.cfg.endpoint,
                "OTLP receiver took every request for a while: requests of up to {} bytes uncompressed tried, {} merged at most",
                r.bound,
                r.merge,
            );
        }
    }

    /// Not retryable: dropped and counted, said once per change.
    fn rejected(&mut self, batch: &Batch, e: String) {
        let mut st = self.queue.lock();
        for p in &batch.parts {
            st.lost(p, ExporterDropReason::Rejected, &self.queue.metrics);
        }
        st.landed();
        drop(st);
        self.queue.metrics.exporter_error("otlp");
        if let Some(learnt) = self.limit.ended(&batch.parts) {
            self.learnt(&learnt);
        }
        // Said once per change: a receiver that rejects every export would otherwise
        // fill the log.
        if self.said.rejected.as_deref() != Some(e.as_str()) {
            tracing::warn!(
                "OTLP export rejected, not retried (the OTLP specification: not a retryable failure), {} request(s) dropped: {e}",
                batch.parts.len()
            );
            self.said.rejected = Some(e);
        } else {
            tracing::debug!("OTLP export rejected again: {e}");
        }
    }

    /// Retryable: back to the queue, and a wait (`after`, the receiver's, or the
    /// backoff). `false` when the exporter is closing: what is left was given up.
    fn retry(&mut self, batch: Batch, e: &str, after: Option<Duration>) -> bool {
        let queue = &self.queue;
        queue.metrics.exporter_error("otlp");
        let wait = match after {
            Some(after) => after.min(RETRY_AFTER_MAX),
            None => jittered(self.backoff),
        };
        if !self.failing {
            tracing::warn!(
                "OTLP export failed, will retry in {} (queue {} of {}): {e}",
                humantime::format_duration(Duration::from_millis(wait.as_millis() as u64)),
                queue.len() + batch.snapshots(),
                queue.capacity
            );
        } else {
            tracing::debug!("OTLP export still failing: {e}");
        }
        self.failing = true;
        // Back to the queue as it is, where it is counted.
        queue.push_front(batch);
        self.backoff = (self.backoff * 2).min(self.cfg.retry_max);
        let st = queue.lock();
        if st.closing {
            queue.give_up(st);
            return false;
        }
        drop(st);
        // The retry waits its time: snapshots queued meanwhile do not hurry it (a
        // shutdown does: one last try, then what is left is given up).
        drop(queue.wait_until(Instant::now() + wait));
        true
    }
}

/// The receiver's setting that bounds a request, named for the transport (the
/// OpenTelemetry Collector's OTLP receiver; a proxy has its own).
fn receiver_setting(protocol: OtlpProtocol) -> &'static str {
    match protocol {
        OtlpProtocol::HttpProtobuf => {
            "the OpenTelemetry Collector's max_request_body_size for OTLP/HTTP, 20 MiB by default"
        }
        OtlpProtocol::Grpc => {
            "the OpenTelemetry Collector's max_recv_msg_size_mib for OTLP/gRPC, 4 by default"
        }
    }
}

/// A receiver took a request but rejected some of its points (or warns): counted, and
/// said when its message changes.
fn partial_success(metrics: &SelfMetrics, said: &mut Said, endpoint: &str, p: PartialSuccess) {
    if p.rejected > 0 {
        metrics.exporter_rejected_points("otlp", p.rejected.unsigned_abs());
    }
    if said.partial.as_deref() != Some(p.message.as_str()) {
        tracing::warn!(
            endpoint,
            "OTLP receiver took the export but rejected {} data point(s) (partial success; not retried): {}",
            p.rejected,
            p.message
        );
        said.partial = Some(p.message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
