//! rocewatch: an agent that keeps RDMA/RoCEv2 networks healthy. This crate is the wiring
//! and the command line; the components are crates of their own, in layers the compiler
//! keeps: docs/ARCHITECTURE.md's layer table ("The layers") states them, and
//! `tests/architecture.rs` checks the crate graph against the same list (`CRATE_LAYERS`).
//!
//! Only [`builtins`] names the built-in plugin crates.
//!
//! Direction inside this crate (each imports only what is to its right): `cli` → `demo`
//! → `supervisor` → `app` → `quarantine` → `config` → `builtins`. `tests/architecture.rs` checks it, the crate graph
//! and that no two files import each other.
//!
//! Where things are:
//! - [`cli`]: the command line: one file per command, its arguments at the top; `args`
//!   is the top level.
//! - [`demo`]: the simulated fabric behind `rocewatch demo`, and its live view.
//! - [`supervisor`]: `run`'s lifecycle: start, reload on SIGHUP, shutdown, what a reload
//!   carries over, the host changes put back, the ready file.
//! - [`app`]: the one place the agent is wired (`App` for every command, `Agent` for `run`,
//!   `demo` and `collectd-exec`).
//! - [`quarantine`]: the quarantine watcher's wiring: which rules quarantine, and the
//!   health self-test its recovery waits for (the file, the watcher and the policy are
//!   `rocewatch_runtime::quarantine`).
//! - [`builtins`]: the explicit list of built-in plugins.
//! - [`config`]: the configuration file: loading, environment overrides, `[agent]`, and the
//!   checks across sections; every other section belongs to its component's crate.
//!
//! Where a metric is defined: the catalog in `core/metrics`. Where PFC is read:
//! `plugins/qos-linux/src/dcb.rs` (settings) and the counters plugins (pause frames).

pub mod app;
pub mod builtins;
pub mod cli;
pub mod config;
pub mod demo;
pub mod quarantine;
pub mod supervisor;
