//! rocewatch: an agent that keeps RDMA/RoCEv2 networks healthy.
//!
//! Layout:
//! - [`config`]: the TOML configuration, environment overrides, strict decoding.
//! - [`registry`]: the explicit list of built-in plugins, `.so` loading, plugin status.
//! - [`runner`]: calling a plugin on a blocking thread with a timeout and a panic guard.
//! - [`agent`]: the pipeline: start, per-plugin schedules with jitter, shutdown.
//! - [`derive`]: pause ratio, throughput and error rates computed from counter rates.
//! - [`store`]: latest value per series, counter resets, rates.
//! - [`selfmetrics`]: `rocewatch.*` metrics.
//! - [`export`]: OTLP and stdout exporters.
//! - [`qos`], [`qosapply`]: desired QoS state and plans; apply, rollback, snapshots,
//!   audit, and the configuration as metrics.
//! - [`doctor`]: the troubleshooting guide as checks.
//! - [`show`]: human and JSON renderings for the command line.
//! - [`demo`]: the simulated fabric behind `rocewatch demo`.
//! - [`cli`]: the commands.

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
