//! The `plugin` action: a remediation plugin (a `.so` under `[[plugins.external]]`, through
//! the C ABI) called by name with the breach as a `RemediationRequest`.

use std::sync::Arc;
use std::time::Duration;

use super::breach::Breach;
use crate::config::Event;
use rocewatch_runtime::host::registry::{Entry, Instance};
use rocewatch_runtime::selfmetrics::SelfMetrics;

/// What `plugin` would do.
pub(super) fn describe(plugin: &str) -> String {
    format!("call remediation plugin {plugin:?}")
}

/// Call the loaded remediation plugin named `plugin` (among `loaded`) for `b`; `timeout`
/// is the action's.
pub(super) async fn run(
    plugin: &str,
    timeout: Duration,
    b: &Breach,
    loaded: &[Entry],
    metrics: &SelfMetrics,
) -> Result<String, String> {
    let entry = loaded
        .iter()
        .find(|e| e.name == plugin)
        .ok_or_else(|| format!("no remediation plugin named {plugin:?} is loaded"))?;
    let req = rocewatch_plugin_api::RemediationRequest {
        action: b.action.clone(),
        rule: b.rule.clone(),
        event: match b.event {
            Event::Firing => rocewatch_plugin_api::RemediationEvent::Firing,
            Event::Clearing => rocewatch_plugin_api::RemediationEvent::Clearing,
        },
        labels: b.labels.clone(),
        samples: b
            .recent
            .iter()
            .map(|(ago, v)| rocewatch_plugin_api::Sample {
                name: b.metric.clone().into(),
                unit: "".into(),
                value: rocewatch_plugin_api::Value::F64(*v),
                attributes: Arc::new(rocewatch_plugin_api::AttrSet::from(&b.labels)),
                source: format!("{ago:.0}s ago").into(),
                kind: rocewatch_plugin_api::MetricKind::Gauge,
            })
            .collect(),
        dry_run: b.dry_run,
    };
    // The dispatcher's own timeout (the same) ends the wait and audits a timeout; the
    // runner's, a second later, marks the plugin busy until its call returns.
    let runner_timeout = timeout + Duration::from_secs(1);
    let out =
        rocewatch_runtime::host::call::call(entry, runner_timeout, metrics, move |i| match i {
            Instance::Remediation(r) => r.remediate(&req),
            _ => Err(rocewatch_plugin_api::PluginError::failed(
                "not a remediation plugin",
            )),
        })
        .await
        .map_err(|e| e.to_string())?;
    Ok(out.message)
}
