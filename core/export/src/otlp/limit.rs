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
//! refused: a bound above the receiver's limit would be refused at every export. It lasts
//! as long as the exporter: a restart or a reload starts from `max_request_bytes` again.
//!
//! Cutting stops at [`CUT_FLOOR`]: a receiver that refuses a request that small is not
//! one with a limit to fit but a misconfigured one, and cutting for it down to single
//! points cost two requests a data point (at 2000 ports, 144 000 requests an export).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::queue::Part;

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
}

impl Limit {
    pub(super) fn new(configured: usize) -> Limit {
        Limit {
            configured,
            bound: Arc::new(AtomicUsize::new(configured)),
            refused: None,
            taken: 0,
            cutting: None,
        }
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
        if self.refused.is_some_and(|r| raw < r) {
            self.taken = self.taken.max(raw);
        }
    }

    /// `parts` sent or dropped: when they end the snapshot being cut (its last part, or a
    /// later snapshot's: its end went otherwise, dropped from a full queue), the largest
    /// request taken since the refusal is the bound from now on (never under
    /// [`CUT_FLOOR`], never over `max_request_bytes`); returned when it changed.
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
        let bound = self.taken.clamp(CUT_FLOOR, self.configured);
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

    /// Refused at 100 KiB, pieces of 50 and 40 KiB taken: 50 KiB is the bound once the
    /// snapshot ends (not before: its own pieces are cut by refusals); a later snapshot's
    /// pieces teach nothing without a refusal; refused under the bound, it is learnt again.
    #[test]
    fn the_largest_piece_taken_after_a_refusal_is_the_bound() {
        let mut l = Limit::new(4 << 20);
        l.taken(300 << 10);
        assert_eq!(l.ended(&[part(300 << 10, 0, true)]), None, "no refusal yet");
        assert_eq!(l.refused(&part(100 << 10, 1, true)), Refused::Cut);
        l.taken(40 << 10);
        assert_eq!(l.ended(&[part(40 << 10, 1, false)]), None);
        assert_eq!(l.bound(), 4 << 20, "not before the snapshot ends");
        l.taken(50 << 10);
        let learnt = l.ended(&[part(50 << 10, 1, true)]);
        assert_eq!(
            learnt,
            Some(Learnt {
                bound: 50 << 10,
                refused: 100 << 10
            })
        );
        assert_eq!(l.shared().load(Ordering::Relaxed), 50 << 10);
        // The next snapshot, under the bound: nothing new.
        l.taken(45 << 10);
        assert_eq!(l.ended(&[part(45 << 10, 2, true)]), None);
        // A cut snapshot whose end was dropped elsewhere ends with a later one's part; 50
        // KiB taken before a refusal of 60 still holds.
        assert_eq!(l.refused(&part(60 << 10, 4, false)), Refused::Cut);
        l.taken(48 << 10);
        assert_eq!(l.ended(&[part(48 << 10, 4, false)]), None);
        assert_eq!(l.cutting, Some(4));
        assert_eq!(l.ended(&[part(1, 5, false)]), None, "50 KiB still");
        assert_eq!((l.cutting, l.bound()), (None, 50 << 10));
        // The receiver's limit went down: 45 KiB refused, 30 taken.
        assert_eq!(l.refused(&part(45 << 10, 6, false)), Refused::Cut);
        l.taken(30 << 10);
        assert_eq!(
            l.ended(&[part(20 << 10, 6, true)]),
            Some(Learnt {
                bound: 30 << 10,
                refused: 45 << 10
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
                bound: CUT_FLOOR,
                refused: 12 << 10
            })
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
}
