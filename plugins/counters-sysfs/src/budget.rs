//! How long a collection may read: the collection budget (the host's call timeout less a
//! margin: a call that outlasts its timeout delivers nothing, one that stops before it
//! delivers what it read) and the deadline of each device (a device whose driver answers
//! slowly costs only its own counters, and is read last next time).
//!
//! Deadlines are checked before each file is read: a single read is not interrupted (a
//! sysfs `show()` runs to its end in the kernel), so one read that never returns still
//! holds the call, and the host's timeout applies.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rocewatch_plugin_api::{PartialError, PluginContext};

/// Option `device_timeout`'s default: a device's counters take well under a millisecond
/// on a healthy mlx5 host; a second means its driver is stuck on something.
pub(crate) const DEFAULT_DEVICE_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest margin left to the host before its timeout.
const MAX_MARGIN: Duration = Duration::from_millis(500);

/// The most `device_timeout` may be (the agent's plugin `timeout` is at most an hour too).
const MAX_DEVICE_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Default)]
pub(crate) struct Budget {
    /// The host's call timeout, when it said one.
    timeout: Option<Duration>,
    /// How long a collection reads: the timeout less a fifth of it, at most 500 ms less.
    collection: Option<Duration>,
    device: Duration,
}

impl Budget {
    /// The budget of `ctx`'s call timeout, with each device given `device` (the option;
    /// default [`DEFAULT_DEVICE_TIMEOUT`]).
    pub(crate) fn new(ctx: &PluginContext, device: Option<Duration>) -> Self {
        let timeout = ctx.call_timeout_ms.map(Duration::from_millis);
        Budget {
            timeout,
            collection: timeout.map(|t| t - (t / 5).min(MAX_MARGIN)),
            device: device.unwrap_or(DEFAULT_DEVICE_TIMEOUT),
        }
    }
}

/// `device_timeout`: a duration such as `"1s"` or `"500ms"`, more than 0 and at most an
/// hour (it is added to the time each device starts: far beyond it would overflow).
pub(crate) fn de_device_timeout<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    use serde::de::Error;
    let s = <String as serde::Deserialize>::deserialize(d)?;
    let t = humantime::parse_duration(&s)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| {
            D::Error::custom(format!(
                "expected a duration such as \"1s\" or \"500ms\", got {s:?}"
            ))
        })?;
    if t > MAX_DEVICE_TIMEOUT {
        return Err(D::Error::custom(format!(
            "{} is more than this setting allows: at most {}",
            humantime::format_duration(t),
            humantime::format_duration(MAX_DEVICE_TIMEOUT)
        )));
    }
    Ok(Some(t))
}

/// One collection's clock: the budget's deadline, each device's, and the devices that
/// were cut short (read last next time, so that the healthy ones are read first).
#[derive(Debug)]
pub(crate) struct Clock<'a> {
    budget: &'a Budget,
    end: Option<Instant>,
    device_end: Instant,
}

impl<'a> Clock<'a> {
    pub(crate) fn start(budget: &'a Budget, started: Instant) -> Self {
        Clock {
            budget,
            end: budget.collection.map(|b| started + b),
            device_end: started,
        }
    }

    /// Whether the collection's budget is spent.
    pub(crate) fn spent(&self) -> bool {
        self.end.is_some_and(|e| Instant::now() >= e)
    }

    /// A device starts: its deadline from now (never past the collection's).
    pub(crate) fn device_starts(&mut self) {
        let d = Instant::now() + self.budget.device;
        self.device_end = self.end.map_or(d, |e| e.min(d));
    }

    /// The deadline of the device being read.
    pub(crate) fn device_deadline(&self) -> Instant {
        self.device_end
    }

    /// Whether the device's own deadline (not the collection's) ran out.
    pub(crate) fn device_deadline_is_its_own(&self) -> bool {
        self.end.is_none_or(|e| self.device_end < e)
    }

    /// The partial error of a collection stopped at its budget: what was read, what not.
    pub(crate) fn stopped(
        &self,
        done: usize,
        ports_done: usize,
        left: &[&str],
        ports: usize,
    ) -> PartialError {
        let total = done + left.len();
        let shown: Vec<&str> = left.iter().take(3).copied().collect();
        let more = if left.len() > shown.len() {
            format!(" and {} more", left.len() - shown.len())
        } else {
            String::new()
        };
        PartialError {
            target: "collection budget".into(),
            message: format!(
                "stopped after {done} of {total} devices ({ports_done} of {ports} ports): collection budget {} of the {} call timeout spent; not read: {}{more}",
                humantime::format_duration(self.budget.collection.unwrap_or_default()),
                humantime::format_duration(self.budget.timeout.unwrap_or_default()),
                shown.join(", "),
            ),
        }
    }

    /// The partial error of a device stopped at its own deadline.
    pub(crate) fn device_stopped(&self, device: &str, read: usize, total: usize) -> PartialError {
        PartialError {
            target: device.to_string(),
            message: format!(
                "stopped after {read} of its {total} files: device deadline {} spent (its driver answers slowly); the rest skipped this time, and it is read last next time",
                humantime::format_duration(self.budget.device)
            ),
        }
    }
}

/// Devices cut short by their deadline last time: read after the others.
pub(crate) type Slow = HashSet<String>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_timeout_past_an_hour_is_refused_not_a_panic_at_the_first_device() {
        let ctx = PluginContext::new("/nonexistent");
        let opts = serde_json::json!({"device_timeout": "18446744073709551615s"});
        let Err(e) = crate::Options::from_json(&opts) else {
            panic!("a device_timeout of 584 billion years was accepted");
        };
        let e = e.to_string();
        assert!(
            e.contains("device_timeout") && e.contains("at most 1h"),
            "{e}"
        );
        let opts = crate::Options::from_json(&serde_json::json!({"device_timeout": "1h"})).unwrap();
        let b = Budget::new(&ctx, opts.device_timeout);
        Clock::start(&b, Instant::now()).device_starts();
    }
}
