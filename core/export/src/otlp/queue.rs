//! The OTLP exporter's queue: snapshots held as their encoded requests while the
//! endpoint is away, bounded in snapshots and bytes (the oldest dropped and counted),
//! merged into one request after an outage and split back when a request fails; and the
//! encoder's sink of one export's requests, each compressed on its own.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use hyper::body::Bytes;
#[cfg(test)]
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
#[cfg(test)]
use prost::Message;
use rocewatch_metrics::labels::ExporterDropReason;
use rocewatch_runtime::selfmetrics::SelfMetrics;

use super::{encode, halve};

/// Encoded snapshots: one, or several merged into one request.
#[derive(Debug, Clone)]
pub(super) struct Batch {
    /// An `ExportMetricsServiceRequest`, encoded; with `gzip`, each snapshot's encoding
    /// gzip'd on its own, one member after another.
    pub(super) body: Bytes,
    /// Each snapshot's part of `body`, in order.
    pub(super) parts: Vec<Part>,
    /// Each part is gzip'd (compressed once, when queued: the queue holds a tenth of
    /// the bytes and a retry compresses nothing again).
    pub(super) gzip: bool,
}

/// One request's part of a batch: a snapshot, or one of the requests a snapshot larger
/// than `max_request_bytes` was encoded into.
#[derive(Debug, Clone, Copy)]
pub(super) struct Part {
    /// Its length in the batch's body.
    pub(super) len: usize,
    /// Its encoded length uncompressed (`len` when not gzip'd).
    pub(super) raw: usize,
    /// The snapshot it is (part of), numbered as queued.
    pub(super) snapshot: u64,
    /// It ends its snapshot: a snapshot is counted (sent, dropped) with its last part.
    pub(super) last: bool,
}

impl Batch {
    /// One snapshot's encoded request, `gzip`'d or not; `raw` is its length uncompressed.
    #[cfg(test)]
    pub(super) fn of_bytes(body: Vec<u8>, raw: usize, gzip: bool) -> Batch {
        // A number of its own, apart from those the queue gives.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 40);
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Batch::piece(body, raw, gzip, id, true)
    }

    /// One request of snapshot `snapshot` (its last when `last`).
    pub(super) fn piece(body: Vec<u8>, raw: usize, gzip: bool, snapshot: u64, last: bool) -> Batch {
        let len = body.len();
        Batch {
            body: body.into(),
            parts: vec![Part {
                len,
                raw,
                snapshot,
                last,
            }],
            gzip,
        }
    }

    #[cfg(test)]
    pub(super) fn of(r: &ExportMetricsServiceRequest) -> Batch {
        let body = r.encode_to_vec();
        let raw = body.len();
        Batch::of_bytes(body, raw, false)
    }

    /// The request to send: the body, or for several gzip'd snapshots one gzip stream
    /// of their encodings together (a receiver may read only a gzip body's first
    /// member: concatenated members are not sent).
    pub(super) fn request(&self) -> Result<Bytes, std::io::Error> {
        if !self.gzip || self.parts.len() == 1 {
            return Ok(self.body.clone());
        }
        use std::io::Read;
        let mut raw = Vec::new();
        flate2::read::MultiGzDecoder::new(self.body.as_ref()).read_to_end(&mut raw)?;
        gzip(&[&raw]).map(Bytes::from)
    }

    /// One request (a batch of one part) cut in two ([`halve`]), each compressed as it
    /// was, as a batch of two parts of the same snapshot (the second ends it when the
    /// request did); `None` when it holds a single point and cannot be cut.
    pub(super) fn halve(&self) -> Option<Batch> {
        let [part] = self.parts[..] else {
            return None;
        };
        let raw = if self.gzip {
            use std::io::Read;
            let mut raw = Vec::with_capacity(part.raw);
            flate2::read::MultiGzDecoder::new(self.body.as_ref())
                .read_to_end(&mut raw)
                .ok()?;
            raw
        } else {
            self.body.to_vec()
        };
        let (a, b) = halve::halve(&raw)?;
        let piece = |half: Vec<u8>, last: bool| -> Option<Batch> {
            let len = half.len();
            let body = if self.gzip {
                gzip(&[&half]).ok()?
            } else {
                half
            };
            Some(Batch::piece(body, len, self.gzip, part.snapshot, last))
        };
        Some(merge(vec![piece(a, false)?, piece(b, part.last)?]))
    }

    /// The snapshots it ends (a snapshot split in several requests counts once).
    pub(super) fn snapshots(&self) -> usize {
        self.parts.iter().filter(|p| p.last).count()
    }

    /// The snapshots' encoded length, uncompressed.
    pub(super) fn raw(&self) -> usize {
        self.parts.iter().map(|p| p.raw).sum()
    }

    /// Each snapshot on its own again: slices of the same bytes, no copy (the merged
    /// buffer lives until its last slice is sent or dropped).
    pub(super) fn split(self) -> impl DoubleEndedIterator<Item = Batch> {
        let mut at = 0;
        let body = self.body;
        let slices: Vec<Batch> = self
            .parts
            .into_iter()
            .map(|part| {
                let b = Batch {
                    body: body.slice(at..at + part.len),
                    parts: vec![part],
                    gzip: self.gzip,
                };
                at += part.len;
                b
            })
            .collect();
        slices.into_iter()
    }
}

#[derive(Default)]
pub(super) struct QueueState {
    /// Oldest first.
    pub(super) batches: VecDeque<Batch>,
    /// The snapshots of every batch queued.
    pub(super) snapshots: usize,
    /// The encoded size of everything queued.
    pub(super) bytes: usize,
    /// The size of the batch being sent: counted against `max_bytes` with the queue,
    /// since it is in memory as well.
    pub(super) in_flight: usize,
    pub(super) closing: bool,
    /// Set by the sender when it has finished (drained or gave up).
    pub(super) done: bool,
    /// Snapshots given up at shutdown (the endpoint unreachable).
    pub(super) dropped_at_shutdown: usize,
    /// The number of the next snapshot queued.
    pub(super) next_snapshot: u64,
    /// The snapshots a part of which was dropped while others are still queued or in
    /// flight: counted dropped then, and never sent (a snapshot counts once, as dropped
    /// if any part was lost). An id leaves with its snapshot's last part.
    pub(super) lost: HashSet<u64>,
    /// The snapshots of the batch being sent.
    pub(super) flying: Vec<u64>,
    /// Those of them whose last request was dropped from the queue while it was in
    /// flight: counted then, so what comes back of them is dropped unseen (not queued
    /// again, not counted again). Never more than `flying`; emptied when it lands.
    pub(super) ended: HashSet<u64>,
}

impl QueueState {
    /// `part` dropped for `reason`: its snapshot counted once as dropped.
    pub(super) fn lost(&mut self, part: &Part, reason: ExporterDropReason, metrics: &SelfMetrics) {
        let counted = if self.ended.contains(&part.snapshot) {
            // In flight when its end was dropped: counted then.
            true
        } else if part.last {
            // Its snapshot ends here: nothing of it comes again.
            self.lost.remove(&part.snapshot)
        } else {
            !self.lost.insert(part.snapshot)
        };
        if !counted {
            metrics.exporter_dropped("otlp", reason);
        }
    }

    /// `parts` delivered: the snapshots they end, less any with a part dropped.
    pub(super) fn delivered(&mut self, parts: &[Part]) -> usize {
        parts
            .iter()
            .filter(|p| p.last && !self.lost.remove(&p.snapshot))
            .count()
    }

    /// The batch being sent has landed (sent, put back, dropped): nothing is in flight.
    pub(super) fn landed(&mut self) {
        self.in_flight = 0;
        self.flying.clear();
        self.ended.clear();
    }
}

pub(super) struct Queue {
    pub(super) state: Mutex<QueueState>,
    pub(super) cv: Condvar,
    pub(super) capacity: usize,
    /// Bytes queued at most (`queue_max_bytes`).
    pub(super) max_bytes: usize,
    pub(super) metrics: Arc<SelfMetrics>,
}

impl Queue {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Add a snapshot at the back; drop the oldest beyond capacity or bytes.
    #[cfg(test)]
    pub(super) fn push(&self, b: Batch) {
        let body = b.body.to_vec();
        let raw = b.raw();
        self.push_snapshot(vec![(body, raw)], b.gzip);
    }

    /// Add a snapshot, encoded as one request or several (each under
    /// `max_request_bytes`), at the back; drop the oldest beyond capacity or bytes.
    pub(super) fn push_snapshot(&self, requests: Vec<(Vec<u8>, usize)>, gzip: bool) {
        let mut st = self.lock();
        let id = st.next_snapshot;
        st.next_snapshot += 1;
        let n = requests.len();
        for (i, (body, raw)) in requests.into_iter().enumerate() {
            st.bytes += body.len();
            st.batches
                .push_back(Batch::piece(body, raw, gzip, id, i + 1 == n));
        }
        st.snapshots += 1;
        self.trim(&mut st);
        drop(st);
        self.cv.notify_all();
    }

    /// Put a failed batch back at the front (it is older than anything queued since),
    /// snapshot by snapshot: over a bound, only as many of its oldest as needed go.
    pub(super) fn push_front(&self, b: Batch) {
        let mut st = self.lock();
        for one in b.split().rev() {
            if st.ended.contains(&one.parts[0].snapshot) {
                // Its snapshot was dropped (and counted) while it was in flight.
                continue;
            }
            st.bytes += one.body.len();
            // A snapshot counts where its last request is: an earlier request of a
            // split snapshot put back adds none (it did not count when it was taken).
            st.snapshots += one.snapshots();
            st.batches.push_front(one);
        }
        st.landed();
        self.trim(&mut st);
    }

    /// Drop the oldest snapshots beyond `capacity` or `max_bytes` (the newest is always
    /// kept), a snapshot's requests together, counting each snapshot dropped.
    pub(super) fn trim(&self, st: &mut QueueState) {
        while st.snapshots > 1
            && (st.snapshots > self.capacity || st.bytes + st.in_flight > self.max_bytes)
        {
            if st.batches.is_empty() {
                // Nothing left to drop: a count that says otherwise is wrong, and must
                // never hold the lock in this loop.
                st.snapshots = 0;
                break;
            }
            // The queued parts are whole snapshots' requests in order, each group ending
            // with its last (a split snapshot's earlier requests may have gone already).
            while let Some(b) = st.batches.pop_front() {
                st.bytes -= b.body.len();
                st.snapshots -= b.snapshots();
                let mut ended = false;
                for p in &b.parts {
                    st.lost(p, ExporterDropReason::QueueFull, &self.metrics);
                    ended |= p.last;
                    if p.last && st.flying.contains(&p.snapshot) {
                        st.ended.insert(p.snapshot);
                    }
                }
                if ended {
                    break;
                }
            }
        }
    }

    /// Take the oldest batches, up to `max` requests and `max_request` bytes
    /// uncompressed (at least one batch), merged into one.
    pub(super) fn take(&self, st: &mut QueueState, max: usize, max_request: usize) -> Batch {
        let first = st
            .batches
            .pop_front()
            .expect("taken from a non-empty queue");
        let mut taken = vec![first];
        let (mut parts, mut raw) = (taken[0].parts.len(), taken[0].raw());
        while let Some(next) = st.batches.front() {
            if parts + next.parts.len() > max || raw + next.raw() > max_request {
                break;
            }
            parts += next.parts.len();
            raw += next.raw();
            taken.push(st.batches.pop_front().expect("front exists"));
        }
        let b = merge(taken);
        st.bytes -= b.body.len();
        st.snapshots -= b.snapshots();
        st.in_flight = b.body.len();
        st.flying = b.parts.iter().map(|p| p.snapshot).collect();
        b
    }

    /// `batch` (refused, not to be sent again) and what is queued of its snapshots:
    /// dropped for `reason`, each snapshot counted once. The queue holds one request a
    /// batch (merged only when taken), so no other snapshot's request goes with them.
    /// Returns the parts dropped, `batch`'s first.
    pub(super) fn drop_with_rest(&self, batch: &Batch, reason: ExporterDropReason) -> Vec<Part> {
        let mut st = self.lock();
        let of = |p: &Part| batch.parts.iter().any(|b| b.snapshot == p.snapshot);
        let mut dropped = batch.parts.clone();
        let queued = std::mem::take(&mut st.batches);
        for b in queued {
            if b.parts.iter().any(of) {
                st.bytes -= b.body.len();
                st.snapshots -= b.snapshots();
                dropped.extend_from_slice(&b.parts);
            } else {
                st.batches.push_back(b);
            }
        }
        for p in &dropped {
            st.lost(p, reason, &self.metrics);
        }
        st.landed();
        dropped
    }

    /// Shutting down and the endpoint is unreachable: give up now rather than hold the
    /// agent's exit; what is left is counted as dropped.
    pub(super) fn give_up(&self, mut st: std::sync::MutexGuard<'_, QueueState>) {
        let left = st.snapshots;
        let batches = std::mem::take(&mut st.batches);
        for p in batches.iter().flat_map(|b| &b.parts) {
            st.lost(p, ExporterDropReason::Shutdown, &self.metrics);
        }
        st.bytes = 0;
        st.snapshots = 0;
        st.dropped_at_shutdown = left;
        st.done = true;
        self.cv.notify_all();
    }

    /// Snapshots queued.
    pub fn len(&self) -> usize {
        self.lock().snapshots
    }

    /// Wait until `at`, whatever is queued meanwhile (a new snapshot wakes the condvar: it
    /// must not cut a backoff or a receiver's `Retry-After` short), or until the exporter
    /// closes.
    pub(super) fn wait_until(&self, at: Instant) -> std::sync::MutexGuard<'_, QueueState> {
        let mut st = self.lock();
        loop {
            let now = Instant::now();
            if st.closing || now >= at {
                return st;
            }
            st = self
                .cv
                .wait_timeout(st, at - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// One batch of several: their encodings concatenated (an encoded request with every
/// batch's resource metrics, in order).
pub(super) fn merge(batches: Vec<Batch>) -> Batch {
    if batches.len() == 1 {
        return batches.into_iter().next().expect("one batch");
    }
    let len = batches.iter().map(|b| b.body.len()).sum();
    let gzip = batches[0].gzip;
    let mut body = Vec::with_capacity(len);
    let mut parts = Vec::new();
    for b in batches {
        body.extend_from_slice(&b.body);
        parts.extend(b.parts);
    }
    Batch {
        body: body.into(),
        parts,
        gzip,
    }
}

/// The requests of one export, as the encoder writes them (see [`encode::Sink`]): each
/// into its own gzip stream (one member each: it is queued and may be sent alone), or
/// its own buffer.
pub(super) struct Requests {
    pub(super) gzip: bool,
    /// The size a buffer starts at (the last export's largest request).
    pub(super) hint: usize,
    pub(super) done: Vec<(Vec<u8>, usize)>,
    pub(super) current: Option<(Writer, usize)>,
}

pub(super) enum Writer {
    Plain(Vec<u8>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
}

impl Requests {
    pub(super) fn new(gzip: bool, hint: usize) -> Requests {
        Requests {
            gzip,
            hint,
            done: Vec::new(),
            current: None,
        }
    }

    pub(super) fn close(&mut self) -> std::io::Result<()> {
        if let Some((w, raw)) = self.current.take() {
            let body = match w {
                Writer::Plain(v) => v,
                Writer::Gzip(g) => g.finish()?,
            };
            self.done.push((body, raw));
        }
        Ok(())
    }

    /// Each request's bytes and its length uncompressed, in order.
    pub(super) fn finish(mut self) -> std::io::Result<Vec<(Vec<u8>, usize)>> {
        self.close()?;
        Ok(self.done)
    }
}

impl encode::Sink for Requests {
    fn begin(&mut self, len: usize) -> std::io::Result<&mut dyn std::io::Write> {
        self.close()?;
        let w = if self.gzip {
            let cap = self.hint.min(len / 4) + 64;
            Writer::Gzip(flate2::write::GzEncoder::new(
                Vec::with_capacity(cap),
                flate2::Compression::fast(),
            ))
        } else {
            Writer::Plain(Vec::with_capacity(len))
        };
        let (w, _) = self.current.insert((w, len));
        Ok(match w {
            Writer::Plain(v) => v,
            Writer::Gzip(g) => g,
        })
    }
}

/// `pieces`, one after the other, gzip'd at the fastest level (an export's protobuf
/// shrinks about tenfold at it; the best level costs several times the CPU for a few
/// per cent).
pub(super) fn gzip(pieces: &[&[u8]]) -> Result<Vec<u8>, std::io::Error> {
    use std::io::Write;
    let len: usize = pieces.iter().map(|p| p.len()).sum();
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(len / 8 + 64),
        flate2::Compression::fast(),
    );
    for p in pieces {
        enc.write_all(p)?;
    }
    enc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(capacity: usize) -> Queue {
        Queue {
            state: Mutex::new(QueueState::default()),
            cv: Condvar::new(),
            capacity,
            max_bytes: usize::MAX,
            metrics: Arc::new(SelfMetrics::default()),
        }
    }

    /// A split snapshot whose first request fails again and again (an endpoint down, a
    /// 503) stays one snapshot: each retry put back counted one more, until the count
    /// passed the capacity, the trim dropped every real snapshot and then spun with the
    /// lock held (export frozen, shutdown hung).
    #[test]
    fn a_split_snapshot_put_back_again_and_again_stays_one() {
        let q = queue(3);
        let three: Vec<(Vec<u8>, usize)> = (0..3u8).map(|i| (vec![i; 8], 8)).collect();
        q.push_snapshot(three, false);
        assert_eq!(q.len(), 1);
        for _ in 0..10 {
            let mut st = q.lock();
            // One request at a time, as the sender takes them while the endpoint fails.
            let b = q.take(&mut st, 1, usize::MAX);
            drop(st);
            assert_eq!(
                b.snapshots(),
                0,
                "the first request of three ends no snapshot"
            );
            q.push_front(b);
            assert_eq!(q.len(), 1);
            assert_eq!(q.lock().batches.len(), 3);
        }
        assert_eq!(
            q.metrics
                .exporter_dropped_for("otlp", ExporterDropReason::QueueFull),
            0
        );
    }

    /// Each snapshot counts once, dropped if any of its parts was lost, else sent, however
    /// the losses of several split snapshots interleave (one remembered id counted a
    /// snapshot both dropped and sent when another's part was lost in between).
    #[test]
    fn interleaved_losses_of_split_snapshots_count_each_once() {
        let q = queue(10);
        let part = |snapshot, last| Part {
            len: 1,
            raw: 1,
            snapshot,
            last,
        };
        let m = Arc::clone(&q.metrics);
        let mut st = q.lock();
        // a's first part lost, then b's, then a's and b's last parts delivered.
        st.lost(&part(1, false), ExporterDropReason::TooLarge, &m);
        st.lost(&part(2, false), ExporterDropReason::TooLarge, &m);
        st.lost(&part(2, false), ExporterDropReason::TooLarge, &m);
        assert_eq!(st.delivered(&[part(1, true), part(2, true)]), 0);
        // c: its last part lost after its first was: one drop.
        st.lost(&part(3, false), ExporterDropReason::Rejected, &m);
        st.lost(&part(3, true), ExporterDropReason::Rejected, &m);
        // d: whole, delivered; e: one part, lost.
        assert_eq!(st.delivered(&[part(4, false), part(4, true)]), 1);
        st.lost(&part(5, true), ExporterDropReason::Rejected, &m);
        assert!(st.lost.is_empty(), "every ended snapshot forgotten");
        drop(st);
        assert_eq!(
            m.exporter_dropped_for("otlp", ExporterDropReason::TooLarge),
            2
        );
        assert_eq!(
            m.exporter_dropped_for("otlp", ExporterDropReason::Rejected),
            2
        );
        assert_eq!(m.exporter_dropped_count("otlp"), 4);
    }

    /// A request cut in two for a receiver whose bound is below ours: compressed as it
    /// was, both parts of its snapshot (counted once, with the second), each a request
    /// that decodes; a one-point request is not cut.
    #[test]
    fn a_request_halved_stays_one_snapshot_in_two_requests() {
        use opentelemetry_proto::tonic::metrics::v1::{Metric, ResourceMetrics, ScopeMetrics};
        let metric = |name: &str| Metric {
            name: name.into(),
            ..Default::default()
        };
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![metric("a"), metric("b"), metric("c")],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        for gz in [false, true] {
            let q = queue(10);
            let raw = req.encode_to_vec();
            let body = if gz {
                gzip(&[&raw]).unwrap()
            } else {
                raw.clone()
            };
            q.push_snapshot(vec![(body, raw.len())], gz);
            let taken = q.take(&mut q.lock(), 1, usize::MAX);
            let halves = taken.halve().expect("three metrics cut");
            assert_eq!((halves.parts.len(), halves.snapshots()), (2, 1));
            let names: Vec<Vec<String>> = halves
                .clone()
                .split()
                .map(|b| {
                    let bytes = if gz {
                        use std::io::Read;
                        let mut v = Vec::new();
                        flate2::read::GzDecoder::new(b.body.as_ref())
                            .read_to_end(&mut v)
                            .unwrap();
                        v
                    } else {
                        b.body.to_vec()
                    };
                    assert_eq!(bytes.len(), b.raw());
                    ExportMetricsServiceRequest::decode(bytes.as_slice())
                        .unwrap()
                        .resource_metrics[0]
                        .scope_metrics[0]
                        .metrics
                        .iter()
                        .map(|m| m.name.clone())
                        .collect()
                })
                .collect();
            assert_eq!(names, [vec!["a"], vec!["b", "c"]], "gzip {gz}");
            q.push_front(halves);
            assert_eq!((q.len(), q.lock().batches.len()), (1, 2));
            // Delivered: the snapshot once.
            let both = q.take(&mut q.lock(), 10, usize::MAX);
            assert_eq!(q.lock().delivered(&both.parts), 1);
        }
        let one = Batch::of(&ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics::default()],
        });
        assert!(one.halve().is_none(), "nothing to cut");
    }

    /// A request refused at the floor goes with what is queued of its snapshot, counted
    /// once; other snapshots stay, and the counts follow.
    #[test]
    fn a_snapshot_dropped_with_its_rest_counts_once() {
        let q = queue(10);
        let req = |tag: &str| {
            let b = ExportMetricsServiceRequest {
                resource_metrics: vec![opentelemetry_proto::tonic::metrics::v1::ResourceMetrics {
                    schema_url: tag.into(),
                    ..Default::default()
                }],
            }
            .encode_to_vec();
            let raw = b.len();
            (b, raw)
        };
        q.push_snapshot(vec![req("a0"), req("a1"), req("a2")], false);
        q.push_snapshot(vec![req("b0")], false);
        let first = q.take(&mut q.lock(), 1, usize::MAX);
        let kept = q.lock().batches[2].body.len();
        let dropped = q.drop_with_rest(&first, ExporterDropReason::TooLarge);
        assert_eq!(dropped.len(), 3);
        assert!(dropped[2].last, "its last request too");
        let st = q.lock();
        assert_eq!((st.snapshots, st.batches.len(), st.in_flight), (1, 1, 0));
        assert_eq!(st.bytes, kept);
        assert!(st.lost.is_empty(), "nothing of it is left to count");
        drop(st);
        assert_eq!(
            q.metrics
                .exporter_dropped_for("otlp", ExporterDropReason::TooLarge),
            1
        );
        let b = q.take(&mut q.lock(), 1, usize::MAX);
        assert_eq!(
            q.lock().delivered(&b.parts),
            1,
            "the other snapshot still goes"
        );
    }

    /// A split snapshot whose last request is dropped from a full queue while an earlier
    /// one is in flight counts once: the earlier request, put back after a failed send,
    /// is discarded rather than queued again (it was counted dropped twice, its id stayed
    /// in `lost` for ever, and the next trim took the snapshot after it along).
    #[test]
    fn a_snapshot_ended_while_a_request_of_it_is_in_flight_counts_once() {
        let q = queue(2);
        let req = |tag: u8| (vec![tag; 8], 8);
        q.push_snapshot(vec![req(0), req(1)], false);
        // Its first request is being sent (the endpoint is down).
        let first = q.take(&mut q.lock(), 1, usize::MAX);
        assert_eq!(first.snapshots(), 0);
        // Two more snapshots: the queue is full, and the trim drops its last request.
        q.push_snapshot(vec![req(2)], false);
        q.push_snapshot(vec![req(3)], false);
        let dropped = || {
            q.metrics
                .exporter_dropped_for("otlp", ExporterDropReason::QueueFull)
        };
        assert_eq!(dropped(), 1);
        // The send fails: the first request comes back, and is not queued again.
        q.push_front(first);
        assert_eq!((q.len(), q.lock().batches.len()), (2, 2));
        // One more: the oldest whole snapshot goes, and only it.
        q.push_snapshot(vec![req(4)], false);
        assert_eq!(dropped(), 2, "the first snapshot once, the second once");
        let st = q.lock();
        assert!(st.lost.is_empty(), "no id left behind: {:?}", st.lost);
        let left: Vec<u8> = st.batches.iter().map(|b| b.body[0]).collect();
        assert_eq!(left, [3, 4]);
    }

    /// A count that disagrees with what is queued never makes the trim loop.
    #[test]
    fn a_trim_with_nothing_queued_ends() {
        let q = queue(1);
        let mut st = q.lock();
        st.snapshots = 5;
        q.trim(&mut st);
        assert_eq!(st.snapshots, 0);
    }
}
