//! What the sender learns of a receiver's limit on a request's size, and where it stops
//! cutting for it.
//!
//! A receiver whose limit is below `max_request_bytes` refuses a request as too large
//! (HTTP 413, gRPC's "message larger than max"); the request is cut in two and sent again
//! (`halve`). The pieces it then takes say how large a request it takes: when the snapshot
//! being cut ends, the largest of them (under the smallest refused) becomes the bound of
//! the exports after it, for their encoding, the merging of a backlog, and the requests
//! queued before it was learnt (cut before they are sent), so the next export is not
//! refused first. The largest size *taken*, not a guess between it and the smallest
//! refused: a bound above the receiver's limit would be refused at every export. It is
//! never under [`MIN_LEARNT`] (64 KiB, the least `max_request_bytes` takes): a receiver
//! whose limit is lower still gets its data, each request cut by a refusal.
//!
//! The bound is not for ever: a refusal may be transient (one collector of several behind
//! a load balancer, with a lower limit, during a rollout). After [`RECOVER_AFTER`]
//! snapshots in a row sent without a refusal, the bound doubles (up to
//! `max_request_bytes`), and so does the number of requests merged after an outage (up to
//! [`MAX_MERGE`]); a request taken at or over the smallest size refused forgets that
//! refusal. A receiver whose limit is real refuses the doubled bound and teaches it again:
//! each time it does, the number of clean snapshots before the next try doubles (up to
//! [`RECOVER_AFTER_MAX`]), so a real limit costs a refused request rarely.
//!
//! Cutting stops at [`CUT_FLOOR`]: a receiver that refuses a request that small is not
//! one with a limit to fit but a misconfigured one, and cutting for it down to single
//! points cost two requests a data point (at 2000 ports, 144 000 requests an export).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::queue::Part;
/// At most this many queued snapshots go into one request.
pub const MAX_MERGE: usize = 10;

/// `max_request_bytes` is taken as at least this: a request holds a resource, a scope and
/// a metric's head besides its points.
pub(super) const MIN_REQUEST_BYTES: usize = 64 << 10;

/// The least bound learnt: `max_request_bytes`'s own least.
pub(super) const MIN_LEARNT: usize = MIN_REQUEST_BYTES;

/// Snapshots sent in a row without a refusal before a learnt bound (or merge) doubles.
pub(super) const RECOVER_AFTER: u32 = 16;

/// The most snapshots waited for before a try, after tries refused again and again.
pub(super) const RECOVER_AFTER_MAX: u32 = 1024;

/// A request refused as too large at this size or under (uncompressed) is not cut again:
/// what is left of its snapshot is dropped. No receiver in use refuses so little (gRPC's
/// and the OpenTelemetry Collector's defaults are 4 MiB for gRPC and 20 MiB for HTTP,
/// nginx's 1 MiB; none below 64 KiB), and a receiver refusing everything gets at most
/// `1 + log2(max_request_bytes / CUT_FLOOR)` requests a snapshot (9 at the default 4 MiB),
/// half-way each time.
pub(super) const CUT_FLOOR: usize = 16 << 10;

/// What to do with a request refused as too large.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Cut it in two and send both again.
    Cut,
    /// It is [`CUT_FLOOR`] or under: drop what is left of its snapshot.
    Floor,
}

/// A bound learnt, to say.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Learnt {
    /// The bound from now on (uncompressed).
    pub bound: usize,
    /// The smallest request refused (uncompressed).
    pub refused: usize,
}

/// A learnt bound or merge raised after clean exports, to say.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Raised {
    /// The bound from now on (uncompressed).
    pub bound: usize,
    /// Requests merged into one at most from now on.
    pub merge: usize,
    /// Both are back at `max_request_bytes` and [`MAX_MERGE`].
    pub recovered: bool,
}

/// The sender's knowledge of the receiver's limit.
pub(super) struct Limit {
    /// `max_request_bytes`.
    configured: usize,
    /// The bound in force: `configured`, or what was learnt. Read by the encoding thread.
    bound: Arc<AtomicUsize>,
    /// The smallest request refused as too large, once one was.
    refused: Option<usize>,
    /// The largest request taken since the last refusal, under `refused`.
    taken: usize,
    /// The snapshot being cut: what it taught is used when it ends.
    cutting: Option<u64>,
    /// Requests merged into one at most: halved by each merged request refused.
    merge: usize,
    /// Snapshots sent in a row since the last refusal.
    clean: u32,
    /// Snapshots in a row that raise the bound: doubled each time a raise is refused.
    patience: u32,
    /// The bound or merge was raised and no refusal came since.
    raised: bool,
}

impl Limit {
    pub(super) fn new(configured: usize) -> Limit {
        Limit {
            configured,
            bound: Arc::new(AtomicUsize::new(configured)),
            refused: None,
            taken: 0,
            cutting: None,
            merge: MAX_MERGE,
            clean: 0,
            patience: RECOVER_AFTER,
            raised: false,
        }
    }

    /// Requests merged into one at most.
    pub(super) fn merge(&self) -> usize {
        self.merge
    }

    /// A request of `parts` merged requests refused as too large: half as many from now
    /// on; returned.
    pub(super) fn merged_refused(&mut self, parts: usize) -> usize {
        self.setback();
        self.merge = (parts / 2).max(1);
        self.merge
    }

    /// A refusal: the clean run starts again, and a raise refused makes the next wait
    /// longer.
    fn setback(&mut self) {
        self.clean = 0;
        if std::mem::take(&mut self.raised) {
            self.patience = (self.patience * 2).min(RECOVER_AFTER_MAX);
        }
    }

    /// `parts` sent: the snapshots they end, with nothing being cut, count toward a
    /// clean run; at its end a learnt bound and merge double. Returned when raised.
    pub(super) fn clean(&mut self, parts: &[Part]) -> Option<Raised> {
        if self.cutting.is_some() {
            return None;
        }
        self.clean += parts.iter().filter(|p| p.last).count() as u32;
        if self.clean < self.patience {
            return None;
        }
        // A run without a refusal: the last raise held.
        self.clean = 0;
        self.raised = false;
        let bound = self.bound();
        if bound >= self.configured && self.merge >= MAX_MERGE {
            return None;
        }
        self.raised = true;
        let bound = bound.saturating_mul(2).min(self.configured);
        self.bound.store(bound, Ordering::Relaxed);
        self.merge = (self.merge * 2).min(MAX_MERGE);
        Some(Raised {
            bound,
            merge: self.merge,
            recovered: bound >= self.configured && self.merge >= MAX_MERGE,
        })
    }

    /// The bound, for the encoding thread to read at each export.
    pub(super) fn shared(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.bound)
    }

    /// The bound in force.
    pub(super) fn bound(&self) -> usize {
        self.bound.load(Ordering::Relaxed)
    }

    /// A request of one part (`part`: of `raw` bytes uncompressed) refused as too large.
    pub(super) fn refused(&mut self, part: &Part) -> Refused {
        let raw = part.raw;
        self.setback();
        self.refused = Some(self.refused.map_or(raw, |r| r.min(raw)));
        if self.taken >= raw {
            // Taken before, refused now: the receiver's limit went down. Learnt again.
            self.taken = 0;
        }
        self.cutting.get_or_insert(part.snapshot);
        if raw <= CUT_FLOOR {
            Refused::Floor
        } else {
            Refused::Cut
        }
    }

    /// A request of `raw` bytes uncompressed taken.
    pub(super) fn taken(&mut self, raw: usize) {
        match self.refused {
            Some(r) if raw < r => self.taken = self.taken.max(raw),
            // Taken as large as refused: that refusal no longer holds.
            Some(_) => (self.refused, self.taken) = (None, 0),
            None => {}
        }
    }

    /// `parts` sent or dropped: when they end the snapshot being cut (its last part, or a
    /// later snapshot's: its end went otherwise, dropped from a full queue), the largest
    /// request taken since the refusal is the bound from now on (never under
    /// [`MIN_LEARNT`], never over `max_request_bytes`); returned when it changed.
    pub(super) fn ended(&mut self, parts: &[Part]) -> Option<Learnt> {
        let cutting = self.cutting?;
        let ends = |p: &Part| p.snapshot > cutting || (p.last && p.snapshot == cutting);
        if !parts.iter().any(ends) {
            return None;
        }
        self.cutting = None;
        if self.taken == 0 {
            return None;
        }
        let bound = self.taken.max(MIN_LEARNT).min(self.configured);
        let before = self.bound.swap(bound, Ordering::Relaxed);
        (before != bound).then(|| Learnt {
            bound,
            refused: self.refused.unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(raw: usize, snapshot: u64, last: bool) -> Part {
        Part {
            len: raw,
            raw,
            snapshot,
            last,
        }
    }

    /// (Sizes in units of 16 KiB, over the 64 KiB least.)
    /// Refused at 100 units, pieces of 50 and 40 taken: 50 is the bound once the
    /// snapshot ends (not before: its own pieces are cut by refusals); a later snapshot's
    /// pieces teach nothing without a refusal; refused under the bound, it is learnt again.
    #[test]
    fn the_largest_piece_taken_after_a_refusal_is_the_bound() {
        let mut l = Limit::new(4 << 20);
        l.taken(300 << 14);
        assert_eq!(l.ended(&[part(300 << 14, 0, true)]), None, "no refusal yet");
        assert_eq!(l.refused(&part(100 << 14, 1, true)), Refused::Cut);
        l.taken(40 << 14);
        assert_eq!(l.ended(&[part(40 << 14, 1, false)]), None);
        assert_eq!(l.bound(), 4 << 20, "not before the snapshot ends");
        l.taken(50 << 14);
        let learnt = l.ended(&[part(50 << 14, 1, true)]);
        assert_eq!(
            learnt,
            Some(Learnt {
                bound: 50 << 14,
                refused: 100 << 14
            })
        );
        assert_eq!(l.shared().load(Ordering::Relaxed), 50 << 14);
        // The next snapshot, under the bound: nothing new.
        l.taken(45 << 14);
        assert_eq!(l.ended(&[part(45 << 14, 2, true)]), None);
        // A cut snapshot whose end was dropped elsewhere ends with a later one's part; 50
        // units taken before a refusal of 60 still holds.
        assert_eq!(l.refused(&part(60 << 14, 4, false)), Refused::Cut);
        l.taken(48 << 14);
        assert_eq!(l.ended(&[part(48 << 14, 4, false)]), None);
        assert_eq!(l.cutting, Some(4));
        assert_eq!(l.ended(&[part(1, 5, false)]), None, "50 units still");
        assert_eq!((l.cutting, l.bound()), (None, 50 << 14));
        // The receiver's limit went down: 45 units refused, 30 taken.
        assert_eq!(l.refused(&part(45 << 14, 6, false)), Refused::Cut);
        l.taken(30 << 14);
        assert_eq!(
            l.ended(&[part(20 << 14, 6, true)]),
            Some(Learnt {
                bound: 30 << 14,
                refused: 45 << 14
            })
        );
    }

    /// At the floor a refusal stops the cutting; a bound is never under the floor nor over
    /// `max_request_bytes`, and a snapshot that ends with nothing taken teaches nothing.
    #[test]
    fn the_floor_stops_the_cutting_and_bounds_the_bound() {
        let mut l = Limit::new(4 << 20);
        assert_eq!(l.refused(&part(CUT_FLOOR + 1, 0, false)), Refused::Cut);
        assert_eq!(l.refused(&part(CUT_FLOOR, 0, false)), Refused::Floor);
        assert_eq!(l.ended(&[part(CUT_FLOOR, 0, true)]), None, "nothing taken");
        assert_eq!(l.bound(), 4 << 20);
        assert_eq!(l.refused(&part(12 << 10, 1, false)), Refused::Floor);
        l.taken(8 << 10);
        assert_eq!(
            l.ended(&[part(8 << 10, 1, true)]),
            Some(Learnt {
                bound: MIN_LEARNT,
                refused: 12 << 10
            }),
            "cut to 8 KiB, bounded at 64 KiB"
        );
        let mut small = Limit::new(64 << 10);
        assert_eq!(small.refused(&part(1 << 20, 0, false)), Refused::Cut);
        small.taken(512 << 10);
        assert_eq!(
            small.ended(&[part(1, 0, true)]),
            None,
            "not over the configured"
        );
        assert_eq!(small.bound(), 64 << 10);
    }

    /// `n` snapshots sent whole, one request each: what the last raise said.
    fn clean_run(l: &mut Limit, n: u64, first: u64) -> Option<Raised> {
        let mut said = None;
        for s in first..first + n {
            let raw = l.bound();
            l.taken(raw);
            said = l.clean(&[part(raw, s, true)]).or(said);
            assert_eq!(l.ended(&[part(raw, s, true)]), None);
        }
        said
    }

    /// Transient refusals (one collector of several with a lower limit) ratchet the bound
    /// down to 64 KiB at most, not 16 KiB; runs of clean snapshots double it back to
    /// `max_request_bytes` and the merge back to MAX_MERGE; a raise refused again makes
    /// the next wait twice as long.
    #[test]
    fn a_learnt_bound_recovers_after_clean_exports() {
        let mut l = Limit::new(4 << 20);
        let mut s = 0;
        // The ratchet: each refusal at the bound, a piece of a fifth taken.
        for _ in 0..6 {
            let b = l.bound();
            assert_eq!(l.refused(&part(b, s, false)), Refused::Cut);
            l.taken(b / 5);
            l.ended(&[part(b / 5, s, true)]);
            s += 1;
            // A few clean snapshots between: not enough to raise.
            assert_eq!(clean_run(&mut l, RECOVER_AFTER as u64 - 1, s), None);
            s += RECOVER_AFTER as u64 - 1;
        }
        assert_eq!(l.bound(), MIN_LEARNT, "never under 64 KiB");
        assert_eq!(l.merged_refused(MAX_MERGE), MAX_MERGE / 2);
        // Recovery: 64 KiB doubles six times to 4 MiB, one run of clean snapshots each.
        let mut bounds = vec![];
        let mut last = None;
        for _ in 0..6 {
            last = clean_run(&mut l, RECOVER_AFTER as u64, s);
            s += RECOVER_AFTER as u64;
            bounds.push(l.bound() >> 10);
        }
        assert_eq!(bounds, [128, 256, 512, 1024, 2048, 4096]);
        assert_eq!(
            last,
            Some(Raised {
                bound: 4 << 20,
                merge: MAX_MERGE,
                recovered: true
            })
        );
        assert_eq!(l.merge(), MAX_MERGE);
        assert_eq!(clean_run(&mut l, 100, s), None, "nothing more to raise");
        s += 100;
        // A real limit at 3 MiB: 4 MiB refused, 2 MiB learnt; the raise refused again
        // waits twice as long the next time.
        assert_eq!(l.refused(&part(4 << 20, s, false)), Refused::Cut);
        l.taken(2 << 20);
        assert!(l.ended(&[part(2 << 20, s, true)]).is_some());
        s += 1;
        assert!(clean_run(&mut l, RECOVER_AFTER as u64, s).is_some());
        s += RECOVER_AFTER as u64;
        assert_eq!(l.bound(), 4 << 20);
        assert_eq!(l.refused(&part(4 << 20, s, false)), Refused::Cut);
        l.taken(2 << 20);
        l.ended(&[part(2 << 20, s, true)]);
        s += 1;
        assert_eq!(clean_run(&mut l, RECOVER_AFTER as u64, s), None);
        s += RECOVER_AFTER as u64;
        assert!(clean_run(&mut l, RECOVER_AFTER as u64, s).is_some());
        // Taken as large as the smallest refused: the refusal is forgotten.
        assert_eq!(l.refused(&part(3 << 20, s, false)), Refused::Cut);
        l.taken(3 << 20);
        assert_eq!((l.refused, l.taken), (None, 0));
    }
}
