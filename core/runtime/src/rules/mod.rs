//! Threshold rules on any catalogued metric, evaluated after every collection.
//!
//! A rule selects series by metric name and attribute matchers (globs), computes a value
//! per series (`value`, `rate` or `increase` over a window) or checks that nothing
//! matches (`absent`), and compares it with a threshold. A series whose condition holds
//! is *pending*; once it has held for `for`, the rule *fires* for that series. A firing
//! series *clears* when the condition no longer holds against the `clear` threshold
//! (hysteresis: `> 0.2` to fire, stays firing until it is no longer `> 0.1`), or when the
//! series disappears. Firing and clearing are the transitions remediation acts on.
//!
//! Time is passed in (`tokio::time::Instant`), so tests drive it with paused time.

mod config;
mod engine;

pub use config::{validate, Condition, Op, RuleConfig};
pub use engine::{describe, Engine, Phase, RuleStatus, Transition};
