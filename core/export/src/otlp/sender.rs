//! The sender thread: it takes the queue's oldest requests (merged after an outage), sends
//! them, and does what the answer says: counted as sent, retried after a wait, cut for a
//! receiver that refuses them as too large, or dropped and counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_metrics::labels::ExporterDropReason;
use rocewatch_runtime::selfmetrics::SelfMetrics;

use super::config::OtlpConfig;
use super::queue::{self, Queue};
use super::transport::{PartialSuccess, SendError, Transport};
use super::MAX_MERGE;

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
}

/// A request the receiver refuses as too large that cannot be cut (one point): dropped,
/// its snapshot counted in `dropped{reason="too_large"}`, said once.
fn too_large(queue: &Queue, batch: &queue::Batch, said: &mut Said, e: &str) {
    let mut st = queue.lock();
    st.in_flight = 0;
    st.lost(
        &batch.parts[0],
        ExporterDropReason::TooLarge,
        &queue.metrics,
    );
    drop(st);
    queue.metrics.exporter_error("otlp");
    let what = format!(
        "OTLP export: one request of {} bytes ({} uncompressed) is too large for the receiver, dropped (it holds one data point, and cannot be cut further; lower exporters.otlp.max_request_bytes to the receiver's limit, or raise the receiver's): {e}",
        batch.body.len(),
        batch.raw()
    );
    if std::mem::replace(&mut said.dropped_too_large, true) {
        tracing::debug!("{what}");
    } else {
        tracing::warn!("{what}");
    }
}

pub(super) fn sender(
    queue: Arc<Queue>,
    mut transport: Transport,
    cfg: OtlpConfig,
    max_request: usize,
) {
    let mut backoff = cfg.retry_initial;
    let mut failing = false;
    let mut said = Said::default();
    // Requests merged into one at most: halved by each request the receiver finds too
    // large, and kept so for the exporter's life (a receiver's bound does not move).
    let mut merge = MAX_MERGE;
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
            // While the endpoint fails, one request per try: a merged request would be
            // built (and, gzip'd, compressed) again for every retry.
            queue.take(&mut st, if failing { 1 } else { merge }, max_request)
        };
        let parts = batch.parts.len();
        let sent = match batch.request() {
            Ok(body) => transport.send(&body, batch.gzip),
            Err(e) => Err(SendError::Permanent(format!("queued snapshots: gzip: {e}"))),
        };
        match sent {
            Ok(partial) => {
                let mut st = queue.lock();
                st.in_flight = 0;
                let delivered = st.delivered(&batch.parts);
                drop(st);
                if failing {
                    tracing::info!(endpoint = %cfg.endpoint, "OTLP export recovered; queued data sent");
                }
                failing = false;
                backoff = cfg.retry_initial;
                queue.metrics.exporter_sent("otlp", delivered);
                if let Some(p) = partial {
                    partial_success(&queue.metrics, &mut said, &cfg.endpoint, p);
                }
            }
            Err(SendError::TooLarge(e)) if parts > 1 => {
                merge = (parts / 2).max(1);
                tracing::info!(
                    "OTLP receiver refused {parts} requests merged ({} bytes) as too large: sent again split, at most {merge} a request from now on: {e}",
                    batch.body.len()
                );
                queue.push_front(batch);
            }
            Err(SendError::TooLarge(e)) => match batch.halve() {
                Some(halves) => {
                    // The receiver's bound is below ours: one request at a time from now
                    // on, and this one again in two (and so on, down to one point).
                    merge = 1;
                    let how = format!(
                        "OTLP receiver refused a request of {} bytes ({} uncompressed) as too large: sent again in two, one request at a time from now on (exporters.otlp.max_request_bytes at the receiver's limit avoids it): {e}",
                        batch.body.len(),
                        batch.raw()
                    );
                    if std::mem::replace(&mut said.halved, true) {
                        tracing::debug!("{how}");
                    } else {
                        tracing::info!("{how}");
                    }
                    queue.push_front(halves);
                }
                None => too_large(&queue, &batch, &mut said, &e),
            },
            Err(SendError::Permanent(e)) => {
                let mut st = queue.lock();
                st.in_flight = 0;
                for p in &batch.parts {
                    st.lost(p, ExporterDropReason::Rejected, &queue.metrics);
                }
                drop(st);
                queue.metrics.exporter_error("otlp");
                // Said once per change: a receiver that rejects every export would
                // otherwise fill the log.
                if said.rejected.as_deref() != Some(e.as_str()) {
                    tracing::warn!(
                        "OTLP export rejected, not retried (the OTLP specification: not a retryable failure), {parts} request(s) dropped: {e}"
                    );
                    said.rejected = Some(e);
                } else {
                    tracing::debug!("OTLP export rejected again: {e}");
                }
            }
            Err(SendError::Retryable(e, after)) => {
                queue.metrics.exporter_error("otlp");
                let wait = match after {
                    Some(after) => after.min(RETRY_AFTER_MAX),
                    None => jittered(backoff),
                };
                if !failing {
                    tracing::warn!(
                        "OTLP export failed, will retry in {} (queue {} of {}): {e}",
                        humantime::format_duration(Duration::from_millis(wait.as_millis() as u64)),
                        queue.len() + batch.snapshots(),
                        queue.capacity
                    );
                } else {
                    tracing::debug!("OTLP export still failing: {e}");
                }
                failing = true;
                // Back to the queue as it is, where it is counted.
                queue.push_front(batch);
                backoff = (backoff * 2).min(cfg.retry_max);
                let st = queue.lock();
                if st.closing {
                    queue.give_up(st);
                    return;
                }
                drop(st);
                // The retry waits its time: snapshots queued meanwhile do not hurry it (a
                // shutdown does: one last try, then what is left is given up).
                drop(queue.wait_until(Instant::now() + wait));
            }
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
