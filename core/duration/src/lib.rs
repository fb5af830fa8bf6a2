//! Durations, wherever they come from: configuration files and `ROCEWATCH_*` variables
//! (`"10s"`, `"500ms"`, `"2m"`, humantime), command-line flags, collectd's
//! `COLLECTD_INTERVAL`. Each setting has its [`Bounds`], defined once here and used by the
//! configuration's validation and by the flag's parser alike, so that a flag refuses what
//! the key refuses, with the same words: no interval so short that something runs back to
//! back, nothing so long that `Instant + d` overflows (a panic).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// What a duration setting may be: at least `min`, at most `max`; 0 as well where
/// `zero_means` says what it means (`"off"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: Duration,
    pub max: Duration,
    pub zero_means: Option<&'static str>,
}

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

const fn bounds(min: Duration, max: Duration) -> Bounds {
    Bounds {
        min,
        max,
        zero_means: None,
    }
}

/// How often something runs again (a collector, discovery, an export, a refresh): shorter
/// than 100 ms runs it back to back.
pub const INTERVAL: Bounds = bounds(Duration::from_millis(100), HOUR);
/// `agent.discovery_interval`.
pub const DISCOVERY_INTERVAL: Bounds = bounds(Duration::from_millis(100), DAY);
/// `qos.interval`: 0 turns the QoS metrics off.
pub const QOS_INTERVAL: Bounds = Bounds {
    min: Duration::from_millis(100),
    max: DAY,
    zero_means: Some("off"),
};
/// `agent.jitter`: 0 is none.
pub const JITTER: Bounds = Bounds {
    min: Duration::ZERO,
    max: HOUR,
    zero_means: None,
};
/// A plugin call's or an action's timeout.
pub const TIMEOUT: Bounds = bounds(MS, HOUR);
/// `exporters.otlp.timeout`.
pub const EXPORT_TIMEOUT: Bounds = bounds(MS, Duration::from_secs(600));
/// `exporters.otlp.retry_initial` and `retry_max`.
pub const RETRY: Bounds = bounds(MS, HOUR);
/// A rule's `window` (rates and increases).
pub const RULE_WINDOW: Bounds = bounds(MS, HOUR);
/// A rule's `for`: 0 fires at once.
pub const RULE_FOR: Bounds = bounds(Duration::ZERO, DAY);
/// An action's `cooldown`: 0 is none.
pub const COOLDOWN: Bounds = bounds(Duration::ZERO, Duration::from_secs(30 * 86_400));
/// `probes.interval`: the time between two probes of a peer (`max_rate` bounds the
/// agent's probes over all peers).
pub const PROBE_INTERVAL: Bounds = bounds(MS, HOUR);
/// A probe's timeout (`probes.timeout`, `probe --timeout`, `bandwidth --timeout`).
pub const PROBE_TIMEOUT: Bounds = bounds(MS, MINUTE);
/// `probes.reconnect_backoff`: the plugin waits 1 s after a failed connection, doubling up
/// to this.
pub const RECONNECT_BACKOFF: Bounds = bounds(SECOND, HOUR);
/// The longest a probe round waits for the next, however low `probes.max_rate` is.
pub const PROBE_ROUND_MAX: Duration = DAY;
/// `probe --interval`: probes one after another (as `ping -i 0`) are allowed, `--count`
/// bounds them.
pub const PROBE_GAP: Bounds = bounds(Duration::ZERO, HOUR);
/// `bandwidth --duration`: a responder serves tests of at most 60 s (probe-verbs'
/// `bwserve::MAX_DURATION`).
pub const BANDWIDTH: Bounds = bounds(SECOND, MINUTE);
/// How long a command runs or watches (`run --duration`, `capture --duration`, `doctor
/// --window`, ...).
pub const RUN_FOR: Bounds = bounds(MS, Duration::from_secs(366 * 86_400));
/// A web configuration's `rate_limit.interval` (one request more per interval).
pub const RATE_INTERVAL: Bounds = bounds(MS, HOUR);
/// `doctor --window`: counters watched for less than 100 ms say nothing.
pub const WATCH: Bounds = bounds(Duration::from_millis(100), HOUR);
/// `doctor --log-window`: how far back the kernel log is read. A recorded `kern.log` or
/// `dmesg` of an old incident is read whole with a long window; 100 years keeps every
/// clock subtraction in range. Years as humantime counts them (365.25 days), so `100y`
/// is taken and the bound reads "100years", as the docs say it.
pub const LOOK_BACK: Bounds = bounds(SECOND, Duration::from_secs(100 * 31_557_600));

impl Bounds {
    /// `Err` with what is wrong and the bound (the caller names the key or flag).
    pub fn check(&self, d: Duration) -> Result<(), String> {
        let f = |d: Duration| humantime::format_duration(d).to_string();
        if d.is_zero() && self.zero_means.is_some() {
            return Ok(());
        }
        if d > self.max {
            return Err(format!(
                "{} is more than this setting allows: at most {}",
                f(d),
                f(self.max)
            ));
        }
        if d < self.min {
            let zero = self
                .zero_means
                .map(|m| format!(" (or 0s: {m})"))
                .unwrap_or_default();
            return Err(format!(
                "{} is less than this setting allows: at least {}{zero}",
                f(d),
                f(self.min)
            ));
        }
        Ok(())
    }

    /// Parse `s` (humantime) and check it: what a flag's parser does.
    pub fn parse(&self, s: &str) -> Result<Duration, String> {
        let d = humantime::parse_duration(s).map_err(|e| {
            format!("invalid duration {s:?} ({e}); write it like \"10s\", \"500ms\", \"2m\"")
        })?;
        self.check(d).map(|()| d)
    }

    /// A clap value parser: `#[arg(value_parser = INTERVAL.flag())]`. The error names the
    /// flag (clap adds it) and the bound.
    pub fn flag(self) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
        move |s: &str| self.parse(s)
    }
}

pub fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {s:?} ({e}); write it like \"10s\", \"500ms\", \"2m\""
        ))
    })
}

pub fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_say_what_is_wrong_and_the_bound() {
        assert_eq!(
            INTERVAL.parse("0s").unwrap_err(),
            "0s is less than this setting allows: at least 100ms"
        );
        assert!(INTERVAL
            .parse("18446744073709551615s")
            .unwrap_err()
            .ends_with(" is more than this setting allows: at most 1h"));
        assert!(INTERVAL
            .parse("ten")
            .unwrap_err()
            .contains("invalid duration"));
        assert_eq!(INTERVAL.parse("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(QOS_INTERVAL.parse("0s"), Ok(Duration::ZERO));
        assert!(QOS_INTERVAL
            .parse("1ms")
            .unwrap_err()
            .ends_with("at least 100ms (or 0s: off)"));
        assert_eq!(JITTER.parse("0s"), Ok(Duration::ZERO));
        // The bound as the docs write it: 100 years, taken, and said so when passed.
        assert_eq!(
            LOOK_BACK.parse("100y"),
            Ok(Duration::from_secs(3_155_760_000))
        );
        assert!(LOOK_BACK
            .parse("101y")
            .unwrap_err()
            .ends_with("at most 100years"));
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics_and_what_passes_adds_to_an_instant(s in "\\PC{0,40}", n in proptest::num::u64::ANY, unit in "(ns|us|ms|s|m|h|d|w|y)") {
            let now = std::time::Instant::now();
            for b in [INTERVAL, QOS_INTERVAL, RUN_FOR, LOOK_BACK, COOLDOWN, PROBE_GAP] {
                for text in [s.clone(), format!("{n}{unit}")] {
                    if let Ok(d) = b.parse(&text) {
                        proptest::prop_assert!(now.checked_add(d).is_some());
                        proptest::prop_assert!(d <= b.max);
                    }
                }
            }
        }
    }
}
