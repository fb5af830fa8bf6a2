//! rocewatch: an agent that keeps RDMA/RoCEv2 networks healthy.
//!
//! Direction (each imports only what is to its right): `cli` → `doctor`, `demo` → `app` →
//! `config` → `alertmanager` → `remediation` → `probes`, `qos` → `export` → `pipeline` →
//! `rules` → `host` → `store` → `selfmetrics`, `audit` → `util`. Plugins and `core/*` crates
//! sit below all of them. `tests/architecture.rs` checks it (and that no two files import
//! each other); docs/ARCHITECTURE.md draws it.
//!
//! Where things are:
//! - [`cli`]: the command line; `args` is the grammar, one file per command.
//! - [`doctor`]: the RoCE troubleshooting guide as checks, one file per topic; what
//!   NCCL/UCX need (`appenv`); RoCE v2 in packet captures (`pcap`, `roce_decode`).
//! - [`demo`]: the simulated fabric behind `rocewatch demo`, and its live view.
//! - [`app`]: the one place the agent is wired (`App` for every command, `Agent` for `run`,
//!   `demo` and `collectd-exec`).
//! - [`config`]: the configuration file: loading, environment overrides, `[agent]`, and the
//!   checks across sections; every other section belongs to its component.
//! - [`alertmanager`]: the webhook receiver (payload, routes, limits).
//! - [`remediation`]: what a firing rule may do (kill switch, cooldowns, limits, actions).
//! - [`probes`]: scheduled verbs probes of peers through the probe plugin.
//! - [`qos`]: desired RoCE/PFC/ECN state: plan, apply, rollback, snapshots, QoS metrics.
//! - [`export`]: OTLP, Prometheus, collectd, stdout; each exporter in its folder.
//! - [`pipeline`]: ingest (store, derived signals, rules, subscribers) and the schedules.
//! - [`rules`]: threshold rules: configuration and engine.
//! - [`host`]: the plugin host: registry of built-in and `.so` plugins, guarded calls,
//!   discovery.
//! - [`store`]: the latest value of every series, rates, counter resets, histograms.
//! - [`audit`]: the JSON-lines audit log of remediation and QoS changes.
//! - [`selfmetrics`]: `rocewatch.*` metrics.
//! - [`util`]: configuration durations, shutdown signals, the listeners' HTTP loop and web
//!   configuration (TLS, basic auth), giving freed memory back.
//!
//! Where a metric is defined: the catalog in `core/metrics`. Where PFC is read:
//! `plugins/qos-linux/src/dcb.rs` (settings) and the counters plugins (pause frames).

pub mod alertmanager;
pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod demo;
pub mod doctor;
pub mod export;
pub mod host;
pub mod pipeline;
pub mod probes;
pub mod qos;
pub mod remediation;
pub mod rules;
pub mod selfmetrics;
pub mod store;
pub mod util;
