//! The agent's runtime: what every command and every component runs on.
//!
//! Direction (each imports only what is to its right): `app`, `quarantine` → `pipeline` →
//! `rules` → `host` → `store` → `selfmetrics`, `audit` → `events` → `util`. The crates above (export, probes, qos,
//! remediation, doctor, the agent) build on this one; the compiler keeps them from
//! reaching back.
//!
//! Where things are:
//! - [`app`]: what every command works with: started plugins, store, pipeline.
//! - [`host`]: the plugin host: the registry of built-in and `.so` plugins (the list of
//!   built-ins is handed in by the agent), guarded calls, discovery, `[plugins]`.
//! - [`store`]: the latest value of every series, rates, counter resets, histograms.
//! - [`rules`]: threshold rules: configuration and engine.
//! - [`pipeline`]: ingest (store, derived signals, rules, subscribers) and the schedules.
//! - [`audit`]: the JSON-lines audit log of remediation and QoS changes.
//! - [`events`]: what the agent decided or saw happen, for OTLP logs: a bounded bus sources
//!   publish to without waiting (the audit log's records once written, rule transitions).
//! - [`quarantine`]: the host's quarantine: the state file that outlives the agent, and
//!   the watcher (rules that quarantine, the export, the recovery policy; the self-test
//!   it waits for is handed in).
//! - [`selfmetrics`]: `rocewatch.*` metrics.
//! - [`util`]: configuration durations and their bounds, shutdown signals, state files
//!   root writes safely, giving freed memory back.

pub mod app;
pub mod audit;
pub mod events;
pub mod host;
pub mod pipeline;
pub mod quarantine;
pub mod rules;
pub mod selfmetrics;
pub mod store;
pub mod util;
