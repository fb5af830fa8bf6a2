//! What a sweep tells its caller while it runs ([`Tell`]: a progress line, notes that
//! explain a wait), and the phrases it says them in.

use std::time::Duration;

/// What the sweep tells its caller while it runs: what it waits on (a progress line on a
/// terminal) and why a step took long or ended early (said whatever the log level).
pub trait Tell: Send + Sync {
    /// Now waiting on `what` (a phrase naming the round and the partner), until `until`
    /// when that is known.
    fn waiting(&self, what: String, until: Option<std::time::Instant>);
    /// A line that explains a wait or an early end (a partner that never came).
    fn note(&self, line: String);
}

/// The phrase of a step's round and phase: "round 0 first".
pub(super) fn step_name(round: usize, phase: crate::Phase) -> String {
    let phase = match phase {
        crate::Phase::Forward => "first",
        crate::Phase::Reverse => "then",
    };
    format!("round {round} {phase}")
}

/// `d` from now, as the caller's clock reads it.
pub(super) fn from_now(d: Duration) -> Option<std::time::Instant> {
    std::time::Instant::now().checked_add(d)
}
