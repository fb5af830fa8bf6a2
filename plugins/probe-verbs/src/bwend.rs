//! When the responder's side of a bandwidth test ends, and why (pure: what the prober said
//! on the side channel and the time in, a decision out; `bwserve` feeds it, `bwverbs`
//! asks it every few milliseconds).
//!
//! - The prober's done ends the test as before: at once, or once this side's own
//!   messages are over (bidirectional tests).
//! - Its abort (a failed test, protocol revision 2), or its side channel closing, ends
//!   the test at once, whatever this side was doing: the queue pairs go to error and the
//!   test's memory is freed within [`LINGER`].
//! - Nothing said by [`SILENCE`] after the test should have ended (a prober whose host
//!   or side channel is gone without a close) ends it too.

use std::time::Duration;

use crate::bwproto::ABORT;

/// How long after the end of its test a prober may take to say done: its messages still
/// in flight drain for up to 5 s (`bwverbs`'s DRAIN), a bidirectional test lingers 1.5 s
/// more for the responder's messages, and the rest is margin.
pub const SILENCE: Duration = Duration::from_secs(10);
/// The most a responder takes, once the test ended early, to free its queue pairs: the
/// report to an aborting prober is written within it.
pub const LINGER: Duration = Duration::from_secs(1);

/// What the responder heard from the prober.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    Done,
    Abort,
    /// The side channel closed or failed.
    Closed,
}

impl Heard {
    /// A byte the prober sent after its test: abort, else done (any other word ended a
    /// test before revision 2, and still does).
    pub fn from_byte(b: u8) -> Heard {
        if b == ABORT {
            Heard::Abort
        } else {
            Heard::Done
        }
    }
}

/// Why the responder's side of a test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The prober said done (and this side's own messages are over).
    Done,
    /// The prober said its test failed.
    Abort,
    /// The side channel closed before the prober said done.
    Closed,
    /// Nothing from the prober for [`SILENCE`] after the test should have ended.
    Silent,
}

impl End {
    /// Whether the test ended early: its queue pairs go to error at once, the prober's
    /// being gone or going.
    pub fn releases(self) -> bool {
        self != End::Done
    }

    /// Why, for the responder's log and its report.
    pub fn why(self) -> String {
        match self {
            End::Done => "the prober said done".into(),
            End::Abort => "the prober aborted its test".into(),
            End::Closed => "the prober closed the side channel before saying done".into(),
            End::Silent => format!(
                "the prober said nothing within {} s of the end of the test",
                SILENCE.as_secs()
            ),
        }
    }
}

/// The responder's view of one test: how long it lasts and what the prober said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    duration: Duration,
    heard: Option<Heard>,
}

impl Ending {
    /// A test of `duration`, from when the responder said it was ready.
    pub fn new(duration: Duration) -> Ending {
        Ending {
            duration,
            heard: None,
        }
    }

    /// The prober said `h`: an abort or a close is never undone by a later word.
    pub fn hear(&mut self, h: Heard) {
        if !matches!(self.heard, Some(Heard::Abort | Heard::Closed)) {
            self.heard = Some(h);
        }
    }

    /// Whether the test ends `elapsed` after it began, this side's own messages being
    /// over (`own_done`: always, for a side that only answers) or not.
    pub fn decide(&self, elapsed: Duration, own_done: bool) -> Option<End> {
        match self.heard {
            Some(Heard::Abort) => Some(End::Abort),
            Some(Heard::Closed) => Some(End::Closed),
            Some(Heard::Done) => own_done.then_some(End::Done),
            None => (elapsed >= self.duration + SILENCE).then_some(End::Silent),
        }
    }

    /// The responder's bound, whatever happens: the silence, then the linger.
    pub fn hard_stop(&self) -> Duration {
        self.duration + SILENCE + LINGER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: Duration = Duration::from_secs(10);
    /// How often `bwverbs` asks.
    const CHECK: Duration = Duration::from_millis(10);

    /// The first time at or after `from` (asked every `CHECK`) that the test ends, and why.
    fn first_end(e: &Ending, from: Duration, own_done: bool) -> (Duration, End) {
        let mut t = from;
        loop {
            if let Some(end) = e.decide(t, own_done) {
                return (t, end);
            }
            assert!(t < e.hard_stop(), "no end by the hard stop");
            t += CHECK;
        }
    }

    #[test]
    fn an_abort_ends_the_test_at_once_and_releases_within_the_linger() {
        for own_done in [false, true] {
            let mut e = Ending::new(TEST);
            assert_eq!(e.decide(Duration::from_secs(2), own_done), None);
            let heard_at = Duration::from_secs(2);
            e.hear(Heard::from_byte(ABORT));
            let (at, end) = first_end(&e, heard_at, own_done);
            assert_eq!(end, End::Abort);
            assert!(end.releases());
            // Decided at the first check: the queue pairs are freed LINGER after it.
            assert!(at <= heard_at + CHECK, "{at:?}");
            // A done that follows (an old habit) changes nothing.
            e.hear(Heard::Done);
            assert_eq!(e.decide(heard_at, own_done), Some(End::Abort));
        }
    }

    #[test]
    fn a_closed_side_channel_ends_the_test_as_an_abort_does() {
        let mut e = Ending::new(TEST);
        e.hear(Heard::Done);
        // Bidirectional: the done waits for this side's messages...
        assert_eq!(e.decide(Duration::from_secs(9), false), None);
        // ...but the prober leaving does not.
        e.hear(Heard::Closed);
        let (at, end) = first_end(&e, Duration::from_secs(9), false);
        assert_eq!((at, end), (Duration::from_secs(9), End::Closed));
        assert!(end.releases());
        assert!(end.why().contains("closed the side channel"));
    }

    #[test]
    fn a_silent_prober_is_given_up_long_before_the_old_30_s() {
        let e = Ending::new(TEST);
        let (at, end) = first_end(&e, Duration::ZERO, true);
        assert_eq!(end, End::Silent);
        assert!(end.releases());
        assert_eq!(at, TEST + SILENCE);
        assert!(e.hard_stop() < TEST + Duration::from_secs(30));
        assert!(e.hard_stop() >= at + LINGER);
    }

    #[test]
    fn a_done_is_the_normal_end_once_this_sides_messages_are_over() {
        let mut e = Ending::new(TEST);
        for t in [0, 5, 10, 15] {
            assert_eq!(e.decide(Duration::from_secs(t), true), None, "{t} s");
        }
        e.hear(Heard::from_byte(b'D'));
        assert_eq!(e.decide(Duration::from_secs(10), false), None);
        let (at, end) = first_end(&e, Duration::from_secs(10), true);
        assert_eq!((at, end), (Duration::from_secs(10), End::Done));
        assert!(!end.releases());
        // Any other word ends a test as a done, as it did before revision 2.
        assert_eq!(Heard::from_byte(b'x'), Heard::Done);
    }
}
