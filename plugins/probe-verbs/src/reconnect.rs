//! When to try connecting a peer again after it could not be connected.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A peer that could not be connected: the last cause, the next attempt, the wait.
pub(crate) struct Backoff {
    cause: String,
    next: Instant,
    wait: Duration,
}

/// When to try connecting a peer again after failures: 1 s, doubling up to `max`.
#[derive(Default)]
pub(crate) struct Reconnects {
    max: Duration,
    pub(crate) peers: HashMap<String, Backoff>,
}

impl Reconnects {
    pub(crate) fn new(max: Duration) -> Self {
        Reconnects {
            max,
            peers: HashMap::new(),
        }
    }

    /// `Err(cause)` while the peer waits for its next attempt.
    pub(crate) fn due(&self, peer: &str, now: Instant) -> Result<(), String> {
        match self.peers.get(peer) {
            Some(b) if b.next > now => Err(format!(
                "{} (next attempt in {:.0?})",
                b.cause,
                b.next.saturating_duration_since(now)
            )),
            _ => Ok(()),
        }
    }

    /// The next attempt after `wait` plus up to a quarter of it, at random: peers that
    /// failed together (a responder restarting, a burst of new peers) do not all come
    /// back in the same instant again.
    pub(crate) fn failed(&mut self, peer: &str, cause: &str, now: Instant) {
        if self.max.is_zero() {
            return;
        }
        let wait = self
            .peers
            .get(peer)
            .map_or(Duration::from_secs(1), |b| b.wait * 2)
            .min(self.max);
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos() as u64
            ^ peer.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            });
        let jitter = (seed % 1000) as f64 / 4000.0;
        self.peers.insert(
            peer.to_string(),
            Backoff {
                cause: cause.to_string(),
                next: now + wait.mul_f64(1.0 + jitter),
                wait,
            },
        );
    }

    pub(crate) fn succeeded(&mut self, peer: &str) {
        self.peers.remove(peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_back_off_doubling_to_the_maximum() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut r = Reconnects::new(s(5));
        assert!(r.due("a", t0).is_ok());
        r.failed("a", "route: 10.0.0.9:18516 did not answer within 1s", t0);
        let e = r.due("a", t0).unwrap_err();
        assert!(
            e.starts_with("route: 10.0.0.9") && e.contains("(next attempt in 1"),
            "{e}"
        );
        // Each wait plus up to a quarter of it (jitter).
        let ms = Duration::from_millis;
        assert!(r.due("a", t0 + ms(999)).is_err() && r.due("a", t0 + ms(1250)).is_ok());
        r.failed("a", "route: again", t0);
        assert!(
            r.due("a", t0 + ms(1999)).is_err() && r.due("a", t0 + ms(2500)).is_ok(),
            "then 2 s"
        );
        r.failed("a", "x", t0);
        r.failed("a", "x", t0);
        assert!(
            r.due("a", t0 + ms(4999)).is_err() && r.due("a", t0 + ms(6250)).is_ok(),
            "4 s, then capped at 5 s"
        );
        assert!(r.due("b", t0).is_ok(), "per peer");
        r.succeeded("a");
        assert!(r.due("a", t0).is_ok());
        // 0 s: every probe tries (the CLI).
        let mut none = Reconnects::new(Duration::ZERO);
        none.failed("a", "x", t0);
        assert!(none.due("a", t0).is_ok());
    }
}
