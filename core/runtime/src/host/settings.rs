//! `[plugins]`: settings every plugin accepts (built-in ones by name, external `.so` files
//! by path).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rocewatch_duration::de_opt_duration;
use serde::Deserialize;

pub(super) fn default_true() -> bool {
    true
}

pub(super) fn default_options() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// `[plugins]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    /// Settings of built-in plugins, by name (`[plugins.builtin.counters-sysfs]`).
    #[serde(default)]
    pub builtin: BTreeMap<String, PluginSettings>,
    /// External `.so` plugins (`[[plugins.external]]`).
    #[serde(default)]
    pub external: Vec<ExternalPluginConfig>,
}

/// Settings every plugin accepts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSettings {
    /// Run this plugin (default true).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Collection interval (default: `agent.interval`).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub interval: Option<Duration>,
    /// Per-call timeout (default: `agent.timeout`).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub timeout: Option<Duration>,
    /// Plugin-specific options, passed to the plugin as JSON.
    #[serde(default = "default_options")]
    pub options: serde_json::Value,
}

impl Default for PluginSettings {
    fn default() -> Self {
        PluginSettings {
            enabled: true,
            interval: None,
            timeout: None,
            options: default_options(),
        }
    }
}

/// One `[[plugins.external]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalPluginConfig {
    /// Path of the `.so`.
    pub path: PathBuf,
    /// Run this plugin (default true).
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub interval: Option<Duration>,
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub timeout: Option<Duration>,
    #[serde(default = "default_options")]
    pub options: serde_json::Value,
    /// Load the library even when others could replace it (it, or a directory above it,
    /// writable by others, or owned by someone other than root or the agent's user).
    /// Default false: such a library is refused, in the spirit of sshd's StrictModes.
    #[serde(default)]
    pub allow_insecure_path: bool,
}

impl ExternalPluginConfig {
    pub fn settings(&self) -> PluginSettings {
        PluginSettings {
            enabled: self.enabled,
            interval: self.interval,
            timeout: self.timeout,
            options: self.options.clone(),
        }
    }
}
