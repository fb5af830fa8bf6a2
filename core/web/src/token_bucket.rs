//! A token bucket: `burst` requests at once, one more every `interval`. The Alertmanager
//! receiver's `max_requests_per_second` and a web configuration's `rate_limit` both use it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TokenBucket {
    burst: f64,
    interval: Duration,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// Full at first.
    pub fn new(burst: u32, interval: Duration) -> TokenBucket {
        TokenBucket {
            burst: burst as f64,
            interval,
            state: Mutex::new((burst as f64, Instant::now())),
        }
    }

    /// `per_second` requests a second, with one second of burst.
    pub fn per_second(per_second: u32) -> TokenBucket {
        let n = per_second.max(1);
        TokenBucket::new(n, Duration::from_secs(1) / n)
    }

    /// Take a token now; `false` when there is none (answer 429).
    pub fn allow(&self) -> bool {
        self.allow_at(Instant::now())
    }

    /// Take a token at `now`.
    pub fn allow_at(&self, now: Instant) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let refill =
            now.saturating_duration_since(st.1).as_secs_f64() / self.interval.as_secs_f64();
        st.0 = (st.0 + refill).min(self.burst);
        st.1 = st.1.max(now);
        if st.0 >= 1.0 {
            st.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_one_token_per_interval() {
        let b = TokenBucket::per_second(2);
        let t0 = Instant::now() + Duration::from_millis(1);
        assert!(b.allow_at(t0) && b.allow_at(t0));
        assert!(!b.allow_at(t0));
        assert!(b.allow_at(t0 + Duration::from_millis(500)));
        assert!(!b.allow_at(t0 + Duration::from_millis(500)));
        let b = TokenBucket::new(2, Duration::from_secs(3600));
        assert!(
            b.allow() && b.allow() && !b.allow(),
            "burst 2, then one an hour"
        );
    }
}
