//! The agent's configuration: TOML through the `config` crate, with environment
//! overrides, decoded strictly (unknown keys are errors) with the key path of every error.
//!
//! Environment overrides: `ROCEWATCH_<SECTION>__<KEY>` (double underscore between
//! levels), e.g. `ROCEWATCH_AGENT__INTERVAL=5s`, `ROCEWATCH_EXPORTERS__OTLP__ENDPOINT=...`.
//! List keys (`devices.include`, `devices.exclude`) take comma-separated values.
//! Variables without a double underscore (`ROCEWATCH_PLUGIN_DIR`, ...) are not config keys
//! and are ignored here. In a header name set this way (`ROCEWATCH_EXPORTERS__OTLP__HEADERS__
//! X_SCOPE_ORGID`) `_` is `-`: a variable's name cannot hold the `-` header names have.
//!
//! `[exporters.otlp]` also takes the OpenTelemetry variables (`OTEL_EXPORTER_OTLP_*`, ...:
//! `otel_env.rs` reads them), under the file and `ROCEWATCH_*`; `otlp_sources.rs` says
//! why in that order and records where each OTLP value came from, for `config check`.

mod env;
pub mod host;
pub mod otel_env;
pub mod otlp_sources;
use env::env_overrides;
pub use env::EnvKeys;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rocewatch_export::collectd::config::SecurityLevel;
use rocewatch_export::config::ExportersConfig;
use rocewatch_runtime::host::settings::PluginsConfig;
use rocewatch_runtime::util::duration::{
    de_duration, Bounds, COOLDOWN, DISCOVERY_INTERVAL, EXPORT_TIMEOUT, INTERVAL, JITTER,
    PROBE_INTERVAL, PROBE_TIMEOUT, QOS_INTERVAL, RECONNECT_BACKOFF, RETRY, RULE_FOR, RULE_WINDOW,
    TIMEOUT,
};
use rocewatch_sysfs::inventory::DeviceSelection;
use serde::Deserialize;

/// Why a configuration could not be loaded. Every message names the file and key path.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {path}: {message}")]
    Invalid {
        file: String,
        path: String,
        message: String,
    },
    /// An environment variable's value (an OpenTelemetry one), named rather than the file.
    #[error("{var}: {message}")]
    Env { var: String, message: String },
}

impl From<otel_env::EnvError> for ConfigError {
    fn from(e: otel_env::EnvError) -> Self {
        ConfigError::Env {
            var: e.var,
            message: e.message,
        }
    }
}

fn default_sysfs_root() -> PathBuf {
    PathBuf::from("/sys")
}

fn default_interval() -> Duration {
    Duration::from_secs(10)
}

fn default_jitter() -> Duration {
    Duration::from_secs(1)
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_discovery_interval() -> Duration {
    Duration::from_secs(60)
}

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Agent-wide settings.
    #[serde(default)]
    pub agent: AgentConfig,
    /// Which RDMA devices to read (globs); applies to the built-in sysfs plugins.
    #[serde(default)]
    pub devices: DeviceSelection,
    /// Built-in and external plugins.
    #[serde(default)]
    pub plugins: PluginsConfig,
    /// Where metrics go.
    #[serde(default)]
    pub exporters: ExportersConfig,
    /// Threshold rules (`[[rules]]`), evaluated after every collection.
    #[serde(default)]
    pub rules: Vec<rocewatch_runtime::rules::RuleConfig>,
    /// What rules may do when they fire or clear (`[remediation]`).
    #[serde(default)]
    pub remediation: rocewatch_remediation::RemediationConfig,
    /// The Alertmanager webhook receiver (`[alertmanager]`), off unless present.
    #[serde(default)]
    pub alertmanager: Option<rocewatch_remediation::alertmanager::AlertmanagerConfig>,
    /// Scheduled verbs probes (`[probes]`), off unless present.
    #[serde(default)]
    pub probes: Option<rocewatch_probes::ProbesConfig>,
    /// This host in the fleet (`[fleet]`): the map, the NIC info series, and with
    /// `[probes]` the pinglist probed instead of its peer list. Off unless present.
    #[serde(default)]
    pub fleet: Option<rocewatch_probes::fleet::FleetConfig>,
    /// The desired RoCE/PFC/ECN state (`[[qos.desired]]`), for `rocewatch qos plan`.
    #[serde(default)]
    pub qos: rocewatch_qos::QosConfig,
    /// What `rocewatch health` expects (`[health]`).
    #[serde(default)]
    pub health: rocewatch_health::HealthConfig,
    /// What `rocewatch doctor` holds the host to (`[doctor]`).
    #[serde(default)]
    pub doctor: rocewatch_doctor::DoctorConfig,
    /// Where each `[exporters.otlp]` value came from (not a key: filled in by [`Config::load`]).
    #[serde(skip)]
    pub otlp_sources: otlp_sources::OtlpSources,
    /// The keys `ROCEWATCH_*` variables set (not a key: filled in by [`Config::load`]).
    #[serde(skip)]
    pub env_keys: EnvKeys,
}

/// Log output format.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[agent]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Root of the sysfs tree (default `/sys`).
    #[serde(default = "default_sysfs_root")]
    pub sysfs_root: PathBuf,
    /// Default collection interval of every collector (default `10s`).
    #[serde(default = "default_interval", deserialize_with = "de_duration")]
    pub interval: Duration,
    /// Each collection is delayed by a random amount up to this (default `1s`), so a
    /// fleet does not read and export in lockstep.
    #[serde(default = "default_jitter", deserialize_with = "de_duration")]
    pub jitter: Duration,
    /// Default per-call timeout of a plugin (default `5s`).
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// How often discovery runs again (default `60s`).
    #[serde(
        default = "default_discovery_interval",
        deserialize_with = "de_duration"
    )]
    pub discovery_interval: Duration,
    /// Host name to report (default: the system's).
    #[serde(default)]
    pub host_name: Option<String>,
    /// `text` (default) or `json`.
    #[serde(default)]
    pub log_format: LogFormat,
    /// A tracing filter (default `info`).
    #[serde(default)]
    pub log_level: Option<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            sysfs_root: default_sysfs_root(),
            interval: default_interval(),
            jitter: default_jitter(),
            timeout: default_timeout(),
            discovery_interval: default_discovery_interval(),
            host_name: None,
            log_format: LogFormat::Text,
            log_level: None,
        }
    }
}

/// The first float that is NaN or infinite, with its key path (`health.min_rate_gbps`,
/// `rules[0].threshold`): JSON has no such number, so on the way to the structs it became
/// null, the key as if unset (`min_rate_gbps = nan` turned the rate check off).
fn non_finite(v: &config::Value, path: String) -> Option<(String, f64)> {
    match &v.kind {
        config::ValueKind::Float(f) if !f.is_finite() => Some((path, *f)),
        config::ValueKind::Table(t) => t.iter().find_map(|(k, v)| {
            non_finite(
                v,
                if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                },
            )
        }),
        config::ValueKind::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| non_finite(v, format!("{path}[{i}]"))),
        _ => None,
    }
}

/// Why a configuration is refused: the key path at fault and what is wrong with it.
type Refusal = (String, String);

/// The error for a refused key: naming the variable its value came from (`ROCEWATCH_*` or
/// OpenTelemetry), if it did, else the file.
fn refusal(
    file: &str,
    sources: &otlp_sources::OtlpSources,
    env: &EnvKeys,
    path: String,
    message: String,
) -> ConfigError {
    match env.var(&path).or_else(|| {
        path.strip_prefix("exporters.otlp.")
            .and_then(|k| sources.otel_var(k))
    }) {
        Some(var) => ConfigError::Env {
            var: var.to_string(),
            message: format!("{path}: {message}"),
        },
        None => ConfigError::Invalid {
            file: file.to_string(),
            path,
            message,
        },
    }
}

/// One check of [`Config::validate`].
type Check = fn(&Config) -> Result<(), Refusal>;

impl Config {
    /// Load `file` (or only defaults and environment when `None`).
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let otel = otel_env::read(&|var| std::env::var(var).ok());
        Self::load_from(file, &env_overrides(), &otel)
    }

    /// Load `file` with these `ROCEWATCH_*` overrides and OpenTelemetry variables.
    fn load_from(
        file: Option<&Path>,
        overrides: &[(String, String)],
        otel: &otel_env::OtelEnv,
    ) -> Result<Config, ConfigError> {
        let name = file.map_or_else(|| "<defaults>".to_string(), |f| f.display().to_string());
        let mut b = config::Config::builder();
        if let Some(f) = file {
            if !f.is_file() {
                return Err(ConfigError::Parse {
                    file: name,
                    message: "no such file".into(),
                });
            }
            b = b.add_source(config::File::from(f).format(config::FileFormat::Toml));
        }
        b = b.add_source(
            config::Environment::with_prefix("ROCEWATCH")
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true)
                .list_separator(",")
                .with_list_parse_key("devices.include")
                .with_list_parse_key("devices.exclude")
                // Headers are put in by `OtlpSources::apply`: names with `-`, values
                // always strings.
                .source(Some(
                    overrides
                        .iter()
                        .filter(|(k, _)| otlp_sources::header_var(k).is_none())
                        .cloned()
                        .collect(),
                )),
        );
        let raw = b.build().map_err(|e| ConfigError::Parse {
            file: name.clone(),
            message: e.to_string(),
        })?;
        if let Some((path, f)) = non_finite(&raw.cache, String::new()) {
            return Err(ConfigError::Invalid {
                file: name,
                path,
                message: format!("{f} is not a number this key takes (a nan or inf would be read as the key left out)"),
            });
        }
        let mut value: serde_json::Value =
            raw.try_deserialize().map_err(|e| ConfigError::Parse {
                file: name.clone(),
                message: e.to_string(),
            })?;
        let mut sources = otlp_sources::OtlpSources::apply(&mut value, &name, overrides, otel)?;
        let env = EnvKeys::new(overrides);
        let mut cfg = Self::decode(&name, value, &sources, &env)?;
        cfg.env_keys = env;
        if let Some(o) = cfg.exporters.otlp.as_mut() {
            sources.resolve_endpoint(o);
        }
        if !sources.ignored.is_empty() {
            static SAID_IGNORED: std::sync::Once = std::sync::Once::new();
            SAID_IGNORED.call_once(|| {
                for w in &sources.ignored {
                    tracing::warn!("{w}");
                }
            });
        }
        if let Some(why) = &sources.disabled {
            // The environment is the process's own: said once, not at every reload.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::info!("OTLP export off ({why}): [exporters.otlp] is not used")
            });
        }
        cfg.otlp_sources = sources;
        cfg.validate(&name)?;
        Ok(cfg)
    }

    /// Decode an already-parsed document; errors carry the key path.
    pub fn from_value(name: &str, value: serde_json::Value) -> Result<Config, ConfigError> {
        let cfg = Self::decode(
            name,
            value,
            &otlp_sources::OtlpSources::default(),
            &EnvKeys::default(),
        )?;
        cfg.validate(name)?;
        Ok(cfg)
    }

    fn decode(
        name: &str,
        value: serde_json::Value,
        sources: &otlp_sources::OtlpSources,
        env: &EnvKeys,
    ) -> Result<Config, ConfigError> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            refusal(
                name,
                sources,
                env,
                e.path().to_string(),
                e.inner().to_string(),
            )
        })
    }

    /// `--otlp-endpoint`, `--otlp-protocol` and `--export-interval` over everything else
    /// (without `[exporters.otlp]`, the endpoint turns OTLP on with the OpenTelemetry
    /// variables' values), checked as the file is.
    pub fn apply_otlp_flags(
        &mut self,
        endpoint: Option<&str>,
        protocol: Option<rocewatch_export::otlp::config::OtlpProtocol>,
        interval: Option<Duration>,
    ) -> Result<(), ConfigError> {
        if endpoint.is_none() && protocol.is_none() && interval.is_none() {
            return Ok(());
        }
        self.otlp_sources
            .apply_flags(&mut self.exporters.otlp, endpoint, protocol, interval)?;
        self.validate("<command line>")
    }

    /// Every check of a loaded configuration, in order; the first refusal is the error.
    fn validate(&self, name: &str) -> Result<(), ConfigError> {
        let checks: [Check; 8] = [
            Config::check_durations,
            Config::check_listeners,
            Config::check_web_config,
            Config::check_rules_and_actions,
            Config::check_builtin_plugins,
            Config::check_external_plugins,
            Config::check_exporters,
            Config::check_health,
        ];
        for check in checks {
            check(self).map_err(|(path, message)| {
                refusal(name, &self.otlp_sources, &self.env_keys, path, message)
            })?;
        }
        Ok(())
    }

    /// What `rocewatch health` reads, as this configuration says (the quarantine in
    /// `state_dir`).
    pub fn health_options(&self, state_dir: PathBuf) -> rocewatch_health::Options {
        rocewatch_health::Options {
            // The host's sysfs (also bind-mounted, as /host/sys in a pod), not a tree.
            live: rocewatch_sysfs::read::is_sysfs(&self.agent.sysfs_root),
            sysfs_root: self.agent.sysfs_root.clone(),
            kernel_log: self
                .plugins
                .builtin
                .get(crate::builtins::KERNEL_LOG)
                .map(|p| p.options.clone())
                .unwrap_or_else(|| serde_json::json!({})),
            devices: self.devices.clone(),
            state_dir,
            procfs_root: "/proc".into(),
            // Read at each run, by `rocewatch health` (cli::rails) and the quarantine's
            // self-test: this host's rows of `[fleet] topology`.
            rail_rows: Ok(None),
        }
    }

    /// `[health]`, as `rocewatch health` reads it.
    fn check_health(&self) -> Result<(), Refusal> {
        self.health
            .validate()
            .map_err(|e| (format!("health.{}", e.key), e.why))
    }

    fn check_durations(&self) -> Result<(), Refusal> {
        for (path, value, bounds) in self.durations() {
            bounds.check(value).map_err(|m| (path, m))?;
        }
        Ok(())
    }

    /// The Prometheus exporter's web configuration, read as the listener will read it.
    fn check_web_config(&self) -> Result<(), Refusal> {
        if let Some(f) = self
            .exporters
            .prometheus
            .as_ref()
            .and_then(|p| p.web_config_file.as_ref())
        {
            rocewatch_web::server::WebListener::load(f).map_err(|e| {
                (
                    "exporters.prometheus.web_config_file".to_string(),
                    e.to_string(),
                )
            })?;
        }
        Ok(())
    }

    /// Rules, remediation, probes, QoS and the Alertmanager receiver, each with what it
    /// needs of the others.
    fn check_rules_and_actions(&self) -> Result<(), Refusal> {
        if let Err((i, message)) =
            rocewatch_runtime::rules::validate(&self.rules, rocewatch_metrics::kind_of)
        {
            let rule = &self.rules[i].name;
            return Err((format!("rules[{i}] ({rule})"), message));
        }
        rocewatch_remediation::validate(&self.remediation, &self.rules)?;
        if let Some(p) = &self.probes {
            p.validate()?;
        }
        if let Some(f) = &self.fleet {
            f.validate()?;
            if let Some(key) = self
                .probes
                .as_ref()
                .and_then(rocewatch_probes::ProbesConfig::peer_list_key)
            {
                return Err((
                    format!("probes.{key}"),
                    "with [fleet] the peers are this host's pinglist from the fleet's map; remove the peer list".into(),
                ));
            }
        }
        rocewatch_qos::validate(&self.qos)?;
        for (name, a) in &self.remediation.actions {
            if matches!(a.kind, rocewatch_remediation::ActionKind::QosApply {})
                && self.qos.desired.is_empty()
            {
                return Err((
                    format!("remediation.actions.{name}"),
                    "type \"qos_apply\" re-applies [[qos.desired]], and there is none".into(),
                ));
            }
        }
        if let Some(am) = &self.alertmanager {
            rocewatch_remediation::alertmanager::validate(am, &self.remediation.actions)?;
            if self.remediation.actions.is_empty() {
                return Err((
                    "alertmanager".into(),
                    "routes alerts to [remediation.actions], and there is none".into(),
                ));
            }
        }
        Ok(())
    }

    /// Each built-in plugin exists and takes its options, decoded as it will at start.
    fn check_builtin_plugins(&self) -> Result<(), Refusal> {
        for (name_, p) in &self.plugins.builtin {
            let Some(builtin) = crate::builtins::builtin(name_) else {
                return Err((
                    format!("plugins.builtin.{name_}"),
                    format!(
                        "no built-in plugin named {name_:?}; built-ins are {}",
                        crate::builtins::builtin_names().join(", ")
                    ),
                ));
            };
            if !p.options.is_object() {
                return Err((
                    format!("plugins.builtin.{name_}.options"),
                    "must be a table".into(),
                ));
            }
            // The plugin's own options, decoded as it will at start: a typo is refused here
            // with its key, not ignored.
            if let Err(e) = (builtin.check_options)(&p.options) {
                let message = match e {
                    rocewatch_plugin_api::PluginError::InvalidOptions(m) => m,
                    other => other.to_string(),
                };
                let (key, message) = match message.split_once(": ") {
                    Some((k, m)) if !k.contains(' ') => (format!(".{k}"), m.to_string()),
                    _ => (String::new(), message),
                };
                return Err((format!("plugins.builtin.{name_}.options{key}"), message));
            }
        }
        Ok(())
    }

    fn check_external_plugins(&self) -> Result<(), Refusal> {
        for (i, p) in self.plugins.external.iter().enumerate() {
            if !p.options.is_object() {
                return Err((
                    format!("plugins.external[{i}].options"),
                    "must be a table".into(),
                ));
            }
        }
        Ok(())
    }

    /// What the exporters' own types cannot say: collectd's address and signing
    /// credentials, OTLP's queue, retry and endpoint.
    fn check_exporters(&self) -> Result<(), Refusal> {
        if let Some(c) = &self.exporters.collectd {
            if !c.server.contains(':') {
                return Err((
                    "exporters.collectd.server".into(),
                    format!(
                        "{:?} is not HOST:PORT (collectd listens on 25826 by default)",
                        c.server
                    ),
                ));
            }
            if c.security_level == SecurityLevel::Sign {
                if c.username.is_empty() {
                    return Err((
                        "exporters.collectd.username".into(),
                        "required with security_level = \"sign\"".into(),
                    ));
                }
                if c.password.is_empty() {
                    return Err((
                        "exporters.collectd.password".into(),
                        "required with security_level = \"sign\"".into(),
                    ));
                }
            }
        }
        if let Some(o) = &self.exporters.otlp {
            if o.queue_size == Some(0) {
                return Err((
                    "exporters.otlp.queue_size".into(),
                    "must be at least 1".into(),
                ));
            }
            if o.retry_initial.is_zero() || o.retry_max < o.retry_initial {
                return Err((
                    "exporters.otlp.retry_max".into(),
                    "retry_initial must be > 0 and retry_max >= retry_initial".into(),
                ));
            }
            if !(o.endpoint.starts_with("http://") || o.endpoint.starts_with("https://")) {
                return Err((
                    "exporters.otlp.endpoint".into(),
                    format!("{:?} is not an http:// or https:// URL", o.endpoint),
                ));
            }
        }
        Ok(())
    }

    /// Every duration of the configuration with its key and its bounds
    /// ([`rocewatch_runtime::util::duration`], shared with the flags that set them): shorter runs
    /// something back to back, longer stops making sense, and far beyond time arithmetic
    /// overflows.
    fn durations(&self) -> Vec<(String, Duration, Bounds)> {
        let mut out = vec![
            ("agent.interval".to_string(), self.agent.interval, INTERVAL),
            ("agent.jitter".to_string(), self.agent.jitter, JITTER),
            ("agent.timeout".to_string(), self.agent.timeout, TIMEOUT),
            (
                "agent.discovery_interval".to_string(),
                self.agent.discovery_interval,
                DISCOVERY_INTERVAL,
            ),
            ("qos.interval".to_string(), self.qos.interval, QOS_INTERVAL),
        ];
        for (name, p) in &self.plugins.builtin {
            let key = format!("plugins.builtin.{name}");
            out.extend(p.interval.map(|d| (format!("{key}.interval"), d, INTERVAL)));
            out.extend(p.timeout.map(|d| (format!("{key}.timeout"), d, TIMEOUT)));
        }
        for (i, p) in self.plugins.external.iter().enumerate() {
            let key = format!("plugins.external[{i}]");
            out.extend(p.interval.map(|d| (format!("{key}.interval"), d, INTERVAL)));
            out.extend(p.timeout.map(|d| (format!("{key}.timeout"), d, TIMEOUT)));
        }
        for (i, r) in self.rules.iter().enumerate() {
            let key = format!("rules[{i}] ({})", r.name);
            out.extend(r.window.map(|d| (format!("{key}.window"), d, RULE_WINDOW)));
            out.extend(r.for_.map(|d| (format!("{key}.for"), d, RULE_FOR)));
        }
        for (name, a) in &self.remediation.actions {
            let key = format!("remediation.actions.{name}");
            out.push((format!("{key}.timeout"), a.timeout, TIMEOUT));
            out.push((format!("{key}.cooldown"), a.cooldown, COOLDOWN));
        }
        if let Some(o) = &self.exporters.otlp {
            out.push(("exporters.otlp.interval".into(), o.interval, INTERVAL));
            out.push(("exporters.otlp.timeout".into(), o.timeout, EXPORT_TIMEOUT));
            out.push((
                "exporters.otlp.retry_initial".into(),
                o.retry_initial,
                RETRY,
            ));
            out.push(("exporters.otlp.retry_max".into(), o.retry_max, RETRY));
        }
        if let Some(p) = &self.probes {
            out.push(("probes.interval".into(), p.interval, PROBE_INTERVAL));
            out.push(("probes.timeout".into(), p.timeout, PROBE_TIMEOUT));
            out.push((
                "probes.reconnect_backoff".into(),
                p.reconnect_backoff,
                RECONNECT_BACKOFF,
            ));
        }
        out
    }

    /// Two listeners on one port (the same address, or one of them on every address) would
    /// fail at start; say so now.
    fn check_listeners(&self) -> Result<(), Refusal> {
        let (Some(p), Some(am)) = (&self.exporters.prometheus, &self.alertmanager) else {
            return Ok(());
        };
        let (a, b) = (p.listen, am.listen);
        let overlap = a.port() == b.port()
            && a.port() != 0
            && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified());
        if overlap {
            return Err((
                "alertmanager.listen".into(),
                format!("{b} is the port of exporters.prometheus.listen ({a}): give each listener its own port"),
            ));
        }
        Ok(())
    }

    /// What the plugin host is built from, for a command that needs plugins of `kinds`
    /// (`None`: every kind).
    pub fn host_settings<'a>(
        &'a self,
        kinds: Option<&'a [rocewatch_plugin_api::PluginKind]>,
    ) -> rocewatch_runtime::host::registry::HostSettings<'a> {
        rocewatch_runtime::host::registry::HostSettings {
            builtins: crate::builtins::BUILTINS,
            plugins: &self.plugins,
            devices: &self.devices,
            defaults: rocewatch_runtime::host::registry::Defaults {
                interval: self.agent.interval,
                timeout: self.agent.timeout,
            },
            kinds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, toml_text).unwrap();
        Config::load(Some(&f))
    }

    /// Issue 26: counters-sysfs and discovery-sysfs read their options key by key, so a
    /// typo (`keep_file_open`) was silently ignored. Every built-in's options are typed and
    /// a mistake is named with its key path.
    #[test]
    fn a_misspelt_plugin_option_is_named_with_its_key_path() {
        for (plugin, options, key) in [
            (
                "counters-sysfs",
                "keep_file_open = \"never\"",
                "plugins.builtin.counters-sysfs.options.keep_file_open",
            ),
            (
                "counters-sysfs",
                "keep_files_open = \"nevr\"",
                "plugins.builtin.counters-sysfs.options.keep_files_open",
            ),
            (
                "counters-sysfs",
                "device_timeout = \"0s\"",
                "plugins.builtin.counters-sysfs.options.device_timeout",
            ),
            (
                "discovery-sysfs",
                "includ = [\"mlx5_*\"]",
                "plugins.builtin.discovery-sysfs.options.includ",
            ),
            (
                "discovery-sysfs",
                "include = [\"[bad\"]",
                "plugins.builtin.discovery-sysfs.options.include",
            ),
            (
                "qos-linux",
                "priority = 3",
                "plugins.builtin.qos-linux.options.priority",
            ),
            (
                "kernel-log",
                "pattern = {}",
                "plugins.builtin.kernel-log.options.pattern",
            ),
            (
                "resources",
                "max_workloads = 0",
                "plugins.builtin.resources.options",
            ),
            (
                "counters-ethtool",
                "raw_include = \"[\"",
                "plugins.builtin.counters-ethtool.options.raw_include",
            ),
        ] {
            let e = parse(&format!("[plugins.builtin.{plugin}.options]\n{options}\n"))
                .expect_err(options)
                .to_string();
            assert!(e.contains(key), "{plugin} {options}: {e}");
        }
        parse("[plugins.builtin.counters-sysfs.options]\nkeep_files_open = \"never\"\ndevice_timeout = \"2s\"\n").unwrap();
    }

    #[test]
    fn defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.agent.sysfs_root, PathBuf::from("/sys"));
        assert_eq!(c.agent.interval, Duration::from_secs(10));
        assert!(c.exporters.otlp.is_none());
    }

    #[test]
    fn durations_and_nested_keys() {
        let c = parse(
            r#"
            [agent]
            interval = "500ms"
            [exporters.otlp]
            endpoint = "http://127.0.0.1:4318/v1/metrics"
            resource = { "deployment.environment" = "prod" }
            [[plugins.external]]
            path = "/x.so"
            options = { output = "/tmp/o", step = 2 }
            "#,
        )
        .unwrap();
        assert_eq!(c.agent.interval, Duration::from_millis(500));
        let o = c.exporters.otlp.unwrap();
        assert_eq!(o.resource["deployment.environment"], "prod");
        assert_eq!(c.plugins.external[0].options["step"], 2);
    }

    #[test]
    fn errors_name_the_key_path() {
        let e = parse("[agent]\nintervall = \"5s\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("agent") && e.contains("intervall"), "{e}");
        let e = parse("[agent]\ninterval = \"5 parsecs\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("agent.interval") && e.contains("invalid duration"),
            "{e}"
        );
        let e = parse("[exporters.otlp]\nendpoint = \"localhost:4318\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exporters.otlp.endpoint"), "{e}");
        let e = parse("[plugins.builtin.nope]\n").unwrap_err().to_string();
        assert!(e.contains("plugins.builtin.nope"), "{e}");
        let e = parse("[[plugins.external]]\npath = \"/x.so\"\ninterval = 5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("plugins.external[0].interval"), "{e}");
        let e = parse("[agent\n").unwrap_err().to_string();
        assert!(e.contains("c.toml"), "{e}");
    }

    #[test]
    fn an_empty_inline_bearer_token_is_refused_as_an_empty_token_file_is() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("token");
        std::fs::write(&empty, " \n").unwrap();
        let am = "[remediation.actions.l]\ntype = \"log\"\n[alertmanager]\n";
        for (line, key) in [
            (
                "bearer_token = \" \"".to_string(),
                "alertmanager.bearer_token",
            ),
            (
                "bearer_token = \"\"".to_string(),
                "alertmanager.bearer_token",
            ),
            (
                format!("bearer_token_file = {empty:?}"),
                "alertmanager.bearer_token_file",
            ),
        ] {
            let e = parse(&format!("{am}{line}\n")).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("empty"), "{line}: {e}");
        }
        parse(&format!("{am}bearer_token = \" t0ken \"\n")).unwrap();
    }

    #[test]
    fn durations_too_short_to_be_anything_but_a_busy_loop_are_refused_with_the_bound() {
        let otlp = "[exporters.otlp]\nendpoint = \"http://127.0.0.1:4318/v1/metrics\"\n";
        let cases = [
            ("[agent]\ninterval = \"0s\"\n".to_string(), "agent.interval"),
            ("[agent]\ninterval = \"1ns\"\n".into(), "agent.interval"),
            (
                "[agent]\ndiscovery_interval = \"1ms\"\n".into(),
                "agent.discovery_interval",
            ),
            ("[agent]\ntimeout = \"0s\"\n".into(), "agent.timeout"),
            ("[qos]\ninterval = \"1ms\"\n".into(), "qos.interval"),
            (
                "[plugins.builtin.counters-sysfs]\ninterval = \"1ms\"\n".into(),
                "plugins.builtin.counters-sysfs.interval",
            ),
            (
                format!("{otlp}interval = \"0s\"\n"),
                "exporters.otlp.interval",
            ),
            (
                "[probes]\npeers = [\"a\"]\nreconnect_backoff = \"0s\"\n".into(),
                "probes.reconnect_backoff",
            ),
        ];
        for (text, key) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("at least"), "{key}: {e}");
        }
        // 0 where it says "off" or "none".
        parse("[qos]\ninterval = \"0s\"\n").unwrap();
        parse("[agent]\njitter = \"0s\"\n").unwrap();
    }

    #[test]
    fn what_run_cannot_survive_is_refused_with_the_key() {
        let cases = [
            ("[agent]\ninterval = \"18446744073709551615s\"\n", "agent.interval"),
            ("[agent]\njitter = \"2h\"\n", "agent.jitter"),
            (
                "[[rules]]\nname = \"w\"\nmetric = \"rdma.port.io\"\ncondition = \"rate\"\nthreshold = 1.0\nwindow = \"100000000d\"\n",
                "rules[0] (w).window",
            ),
            ("[probes]\npeers = [\"a\"]\ntimeout = \"3h\"\n", "probes.timeout"),
        ];
        for (text, key) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("at most"), "{key}: {e}");
        }
        let e = parse(
            "[exporters.prometheus]\nlisten = \"0.0.0.0:9464\"\n[remediation.actions.l]\ntype = \"log\"\n\
             [alertmanager]\nlisten = \"127.0.0.1:9464\"\nallow_unauthenticated = true\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("alertmanager.listen") && e.contains("own port"),
            "{e}"
        );
        let e = parse("[alertmanager]\nallow_unauthenticated = true\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("alertmanager") && e.contains("there is none"),
            "{e}"
        );
        let e = parse(
            "[remediation.actions.l]\ntype = \"log\"\n[alertmanager]\nbearer_token_file = \"/nonexistent/token\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("/nonexistent/token"), "{e}");
    }

    /// A TOML `nan` or `inf` came through the `config` crate into JSON as null, the key
    /// unset: `[health] min_rate_gbps = nan` held ports to their siblings' rate instead of
    /// failing. Refused with the key, as is `checks = []` (no check: every host passes).
    #[test]
    fn a_float_that_is_not_a_number_and_no_health_check_are_refused_by_key() {
        for v in ["nan", "inf", "-inf", "-1.0"] {
            let e = parse(&format!("[health]\nmin_rate_gbps = {v}\n"))
                .expect_err(v)
                .to_string();
            assert!(e.contains("health.min_rate_gbps"), "{v}: {e}");
        }
        let e = parse("[[rules]]\nname = \"x\"\nmetric = \"rdma.port.link_downed\"\ncondition = \"value\"\nop = \">\"\nthreshold = nan\n")
            .expect_err("threshold = nan")
            .to_string();
        assert!(e.contains("rules[0].threshold"), "{e}");
        let e = parse("[health]\nchecks = []\n")
            .expect_err("checks = []")
            .to_string();
        assert!(e.contains("health.checks"), "{e}");
        parse("[health]\nmin_rate_gbps = 400.0\nchecks = [\"ports\"]\n").unwrap();
    }

    /// `[doctor] pre_fec_ber_warn`: read for doctor, refused by key outside (0, 1).
    #[test]
    fn doctor_pre_fec_ber_warn_is_a_bit_error_rate() {
        let c = parse("[doctor]\npre_fec_ber_warn = 1e-5\n").unwrap();
        assert_eq!(c.doctor.pre_fec_ber_warn, Some(1e-5));
        assert_eq!(parse("").unwrap().doctor.pre_fec_ber_warn, None);
        for v in ["0.0", "1.5", "nan"] {
            let e = parse(&format!("[doctor]\npre_fec_ber_warn = {v}\n"))
                .expect_err(v)
                .to_string();
            assert!(e.contains("doctor.pre_fec_ber_warn"), "{v}: {e}");
        }
        assert!(parse("[doctor]\nno_such_key = 1\n").is_err());
    }
}
