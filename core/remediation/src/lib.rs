//! Remediation: what happens when a rule fires or clears, made safe for production hosts.
//!
//! Every action is a dry run unless its configuration says `dry_run = false`: it logs and
//! audits what it would do. Before anything runs, in this order: the kill-switch file
//! (its existence stops every action), the action's cooldown per target (the rule's
//! labels) and event, the maximum number of actions per hour, the maximum of concurrent
//! actions. Every decision (fired, suppressed and why, dry run, executing, result and
//! duration) is appended to the audit log as one JSON line; the line announcing an
//! execution is flushed to disk (`fsync`) before the action starts. Each action runs under
//! its own timeout; one that hangs is abandoned (a command is killed) and the agent goes on.
//! When the agent stops, the running actions are waited for, each up to its timeout, then
//! killed and audited (`killed at shutdown`); a second signal kills them at once
//! (`at_exit`). A reload hands them over: they keep their concurrency slots.
//!
//! Action kinds: `log`, `exec` (a command, never through a shell: the breach is in
//! `ROCEWATCH_*` environment variables and as JSON on standard input), `webhook` (HTTP
//! POST of the same JSON, with retries), `plugin` (a remediation plugin through the C ABI)
//! and `qos_apply` (re-apply `[[qos.desired]]` through the configuration plugins, on firing
//! only). What they act through is handed to the dispatcher when it is built ([`Targets`]).
//!
//! A transition whose labels name an RDMA port carries the workloads holding QPs on it
//! (pods, Slurm jobs, units, commands: the resources collector's `rdma.resource.qps`, read
//! from the store handed over in [`Targets`]) in the breach (`workloads` in the JSON,
//! `ROCEWATCH_WORKLOADS` for `exec`) and in the audit record of the transition.
//!
//! An `exec` command runs in a session of its own, and the agent adopts what it leaves
//! behind (a child subreaper): when the action ends, every process it started is killed,
//! `setsid` or not (`processes`).
//!
//! Files: `config` (the section and its validation), `dispatcher` (gating, audit, running
//! under the timeout, what a reload keeps), `at_exit` (what a second signal must not leave
//! behind), `actions` (one file an action kind, and the breach they receive),
//! `processes` (every process of a command, until it is killed and reaped), `workloads`
//! (who holds QPs on the port). The audit log itself is `rocewatch_runtime::audit`.
//! [`alertmanager`] receives Alertmanager's webhooks (payload, routes, limits) and hands
//! them to the same dispatcher, as rule transitions.

mod actions;
pub mod alertmanager;
mod at_exit;
mod config;
mod dispatcher;
mod limits;
mod processes;
mod workloads;

pub use actions::{describe, Breach, Targets};
pub use config::{
    validate, warnings, ActionConfig, ActionKind, Event, RemediationConfig, SUPERVISOR_STOP_GRACE,
};
pub use dispatcher::{Dispatcher, Memory};
pub use workloads::{on_port, Workload, Workloads, MAX_WORKLOADS};
