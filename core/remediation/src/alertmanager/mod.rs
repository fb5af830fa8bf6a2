//! A receiver for Prometheus Alertmanager's webhook (payload version 4): alerts are routed
//! to remediation actions by label matchers, resolved alerts clear. Everything goes
//! through the same remediation dispatcher as the agent's own rules (dry runs, cooldowns,
//! limits, kill switch, audit log).
//!
//! Safe by default: loopback bind, a bearer token required unless
//! `allow_unauthenticated = true`, a maximum body size (413), a maximum request rate
//! (429), and a malformed payload gets a 400 with the reason, never a crash.

mod config;
mod payload;
mod receiver;
mod router;

pub use config::{validate, AlertmanagerConfig, RouteConfig};
pub use payload::{parse, Alert, Payload};
pub use receiver::{serve, Receiver};
pub use router::Router;
