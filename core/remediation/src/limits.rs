//! The limits an action passes before it runs, as one pure decision: the cooldown per
//! action, target and event, and the starts of the last hour. Time is handed in, so the
//! decision is tested without waiting; the concurrency slot is the dispatcher's (it is
//! held for as long as the action runs), asked for only once these limits admit.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::config::Event;

/// How long a start counts against `max_actions_per_hour`.
const HOUR: Duration = Duration::from_secs(3600);
/// Targets remembered before the ones whose every cooldown is over are forgotten (alerts
/// with unique labels must not pile up).
const REMEMBERED: usize = 4096;

/// Which action, for which target (the transition's labels), on which event.
pub(super) type Key = (String, String, Event);

/// When each action last started for each target, and the starts of the last hour.
#[derive(Default)]
pub(super) struct Limits {
    last: HashMap<Key, Instant>,
    starts: VecDeque<Instant>,
}

/// Why an action may not start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// It started `since` ago for this target and event; its cooldown is `cooldown`.
    Cooldown { since: Duration, cooldown: Duration },
    /// `max` actions started in the last hour.
    Hourly { max: u32 },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Cooldown { since, cooldown } => write!(
                f,
                "cooldown: ran {} ago for this target, cooldown {}",
                humantime::format_duration(Duration::from_secs(since.as_secs())),
                humantime::format_duration(*cooldown)
            ),
            Refusal::Hourly { max } => write!(
                f,
                "rate limit: {max} actions in the last hour (max_actions_per_hour)"
            ),
        }
    }
}

impl Limits {
    /// Whether `key` may start at `now` under `cooldown` and `max_per_hour`. Nothing is
    /// counted: a start that goes ahead is [`Limits::count`]ed. `longest` is the longest
    /// cooldown of any action, past which a target is forgotten.
    pub(super) fn admit(
        &mut self,
        key: &Key,
        cooldown: Duration,
        max_per_hour: u32,
        now: Instant,
        longest: Duration,
    ) -> Result<(), Refusal> {
        if self.last.len() > REMEMBERED {
            self.last.retain(|_, t| now.duration_since(*t) < longest);
        }
        if let Some(last) = self.last.get(key) {
            let since = now.duration_since(*last);
            if since < cooldown {
                return Err(Refusal::Cooldown { since, cooldown });
            }
        }
        while self
            .starts
            .front()
            .is_some_and(|s| now.duration_since(*s) >= HOUR)
        {
            self.starts.pop_front();
        }
        if self.starts.len() >= max_per_hour as usize {
            return Err(Refusal::Hourly { max: max_per_hour });
        }
        Ok(())
    }

    /// Count a start of `key` at `now`: its cooldown begins, the hour counts it.
    pub(super) fn count(&mut self, key: Key, now: Instant) {
        self.last.insert(key, now);
        self.starts.push_back(now);
    }

    /// Take back the last [`Limits::count`] of `key` (its action did not run after all).
    pub(super) fn uncount(&mut self, key: &Key) {
        self.last.remove(key);
        self.starts.pop_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn key(target: &str, event: Event) -> Key {
        ("restart".to_string(), target.to_string(), event)
    }

    #[test]
    fn a_cooldown_holds_per_target_and_event_and_ends_on_time() {
        let mut l = Limits::default();
        let t0 = Instant::now();
        let a = key("device=mlx5_0", Event::Firing);
        assert_eq!(l.admit(&a, 10 * MIN, 100, t0, 10 * MIN), Ok(()));
        l.count(a.clone(), t0);
        let refused = l.admit(&a, 10 * MIN, 100, t0 + 9 * MIN, 10 * MIN);
        assert_eq!(
            refused,
            Err(Refusal::Cooldown {
                since: 9 * MIN,
                cooldown: 10 * MIN
            })
        );
        assert_eq!(
            refused.unwrap_err().to_string(),
            "cooldown: ran 9m ago for this target, cooldown 10m"
        );
        // Another target, or the same target clearing, is not held by it.
        let b = key("device=mlx5_1", Event::Firing);
        assert_eq!(l.admit(&b, 10 * MIN, 100, t0 + MIN, 10 * MIN), Ok(()));
        let c = key("device=mlx5_0", Event::Clearing);
        assert_eq!(l.admit(&c, 10 * MIN, 100, t0 + MIN, 10 * MIN), Ok(()));
        assert_eq!(l.admit(&a, 10 * MIN, 100, t0 + 10 * MIN, 10 * MIN), Ok(()));
    }

    #[test]
    fn the_hour_counts_starts_and_forgets_them_after_an_hour() {
        let mut l = Limits::default();
        let t0 = Instant::now();
        for i in 0..3u32 {
            let k = key(&format!("device=mlx5_{i}"), Event::Firing);
            assert_eq!(l.admit(&k, MIN, 3, t0 + MIN * i, MIN), Ok(()));
            l.count(k, t0 + MIN * i);
        }
        let k = key("device=mlx5_9", Event::Firing);
        let refused = l.admit(&k, MIN, 3, t0 + 30 * MIN, MIN);
        assert_eq!(refused, Err(Refusal::Hourly { max: 3 }));
        assert_eq!(
            refused.unwrap_err().to_string(),
            "rate limit: 3 actions in the last hour (max_actions_per_hour)"
        );
        // The first start leaves the hour at t0 + 60 min.
        assert_eq!(l.admit(&k, MIN, 3, t0 + 60 * MIN, MIN), Ok(()));
    }

    #[test]
    fn admitting_counts_nothing_and_uncount_takes_a_start_back() {
        let mut l = Limits::default();
        let t0 = Instant::now();
        let a = key("device=mlx5_0", Event::Firing);
        for _ in 0..5 {
            assert_eq!(l.admit(&a, MIN, 1, t0, MIN), Ok(()));
        }
        l.count(a.clone(), t0);
        assert!(l.admit(&a, MIN, 1, t0, MIN).is_err());
        l.uncount(&a);
        assert_eq!(l.admit(&a, MIN, 1, t0, MIN), Ok(()));
    }

    #[test]
    fn targets_past_every_cooldown_are_forgotten_when_many() {
        let mut l = Limits::default();
        let t0 = Instant::now();
        for i in 0..=REMEMBERED {
            l.count(key(&format!("alert={i}"), Event::Firing), t0);
        }
        let late = t0 + 2 * MIN;
        let k = key("alert=new", Event::Firing);
        assert_eq!(l.admit(&k, MIN, u32::MAX, late, MIN), Ok(()));
        assert!(l.last.is_empty(), "{} targets kept", l.last.len());
        // Under the bound nothing is forgotten: a cooldown still holds.
        let mut l = Limits::default();
        let a = key("alert=0", Event::Firing);
        l.count(a.clone(), t0);
        assert!(l.admit(&a, 10 * MIN, u32::MAX, late, MIN).is_err());
    }
}
