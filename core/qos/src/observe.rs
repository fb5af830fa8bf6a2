//! Reading the QoS state: every configuration plugin asked, their views of each port merged.

use std::time::Duration;

use rocewatch_plugin_api::{PluginKind, QosState};

use rocewatch_runtime::host::call::{self, CallError};
use rocewatch_runtime::host::registry::Registry;
use rocewatch_runtime::host::registry::{Entry, Instance};
use rocewatch_runtime::selfmetrics::SelfMetrics;

/// The configuration plugins, each with its call timeout.
pub type ConfigPlugins = Vec<(Entry, Duration)>;

/// Every configuration plugin's view of the ports, merged (a port seen by two plugins
/// has the settings of both). Fails when no configuration plugin answered.
pub async fn observe(
    plugins: &ConfigPlugins,
    metrics: &SelfMetrics,
) -> Result<Vec<QosState>, CallError> {
    let mut out: Vec<QosState> = Vec::new();
    let mut last_err = None;
    let mut any_ok = false;
    for (e, timeout) in plugins {
        match call::call(e, *timeout, metrics, |i| match i {
            Instance::Configuration(c) => c.observe(),
            _ => Ok(Vec::new()),
        })
        .await
        {
            Ok(states) => {
                any_ok = true;
                for s in states {
                    match out
                        .iter_mut()
                        .find(|o| o.device == s.device && o.port == s.port)
                    {
                        Some(o) => {
                            o.settings.extend(s.settings);
                            o.settable_unread.extend(s.settable_unread);
                        }
                        None => out.push(s),
                    }
                }
            }
            Err(err) => last_err = Some(err),
        }
    }
    match (any_ok, last_err) {
        (false, Some(e)) => Err(e),
        _ => Ok(out),
    }
}

/// The configuration plugins of `registry` that are loaded.
pub fn config_plugins(registry: &Registry) -> ConfigPlugins {
    registry
        .of_kind(PluginKind::Configuration)
        .map(|e| (e.clone(), e.timeout))
        .collect()
}
