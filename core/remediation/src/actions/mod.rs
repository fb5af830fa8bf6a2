//! The remediation actions, one file each: what an action does for a breach (its `run`)
//! and what it would do (its `describe`, for dry runs and the audit log). Whether an
//! action runs at all is the dispatcher's to decide (`crate::dispatcher`: kill switch,
//! cooldowns, limits, audit); it runs one through [`run`], under the action's timeout.
//!
//! A new action kind is its variant in [`ActionKind`] (`config.rs`: the keys it takes),
//! its file here, and its arms below (`mod`, [`describe`], [`run`]).

mod breach;
mod exec;
mod log;
mod plugin;
mod qos;
mod slurm;
#[cfg(test)]
mod testing;
mod webhook;

use std::sync::Arc;

pub use breach::Breach;

use crate::config::{ActionConfig, ActionKind};
use rocewatch_runtime::selfmetrics::SelfMetrics;

/// What actions act through, handed over when the dispatcher is built.
#[derive(Default)]
pub struct Targets {
    /// Loaded remediation plugins (`type = "plugin"`), by name.
    pub plugins: Vec<rocewatch_runtime::host::registry::Entry>,
    /// What `qos_apply` actions apply through (none without configuration plugins).
    pub qos: Option<Arc<rocewatch_qos::apply::Applier>>,
    /// The agent's store, where the workloads on a transition's port are read (the
    /// resources collector's `rdma.resource.qps`); none: no workloads in breaches.
    pub store: Option<Arc<rocewatch_runtime::store::Store>>,
}

/// What an action would do, for dry runs and the audit log.
pub fn describe(kind: &ActionKind) -> String {
    match kind {
        ActionKind::Log {} => log::describe(),
        ActionKind::QosApply {} => qos::describe(),
        ActionKind::Plugin { plugin } => plugin::describe(plugin),
        ActionKind::Exec { command } => exec::describe(command),
        ActionKind::Webhook { url, .. } => webhook::describe(url),
        ActionKind::SlurmDrain { node, scontrol } => slurm::describe(node.as_deref(), scontrol),
    }
}

/// Run `action` for `b` (the caller bounds it by the action's timeout): `Ok` with what it
/// did, `Err` with why it failed. `metrics` count plugin calls; `http` posts webhooks.
pub(crate) async fn run(
    action: &ActionConfig,
    b: &Breach,
    targets: &Targets,
    metrics: &SelfMetrics,
    http: &reqwest::Client,
) -> Result<String, String> {
    match &action.kind {
        ActionKind::Log {} => log::run(b),
        ActionKind::QosApply {} => qos::run(targets.qos.as_deref(), b).await,
        ActionKind::Plugin { plugin } => {
            plugin::run(plugin, action.timeout, b, &targets.plugins, metrics).await
        }
        ActionKind::Exec { command } => exec::run(command, b).await,
        ActionKind::Webhook {
            url,
            headers,
            retries,
        } => webhook::run(url, headers, *retries, b, http).await,
        ActionKind::SlurmDrain { node, scontrol } => {
            slurm::run(node.as_deref(), scontrol, action.timeout, b).await
        }
    }
}
