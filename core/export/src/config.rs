//! `[exporters]`: which exporters run; each exporter's own section lives in its folder.

use super::collectd::config::CollectdConfig;
use super::otlp::config::OtlpConfig;
use super::prometheus::config::PrometheusConfig;
use serde::Deserialize;

/// `[exporters]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportersConfig {
    #[serde(default)]
    pub stdout: StdoutConfig,
    /// OTLP export; absent: no OTLP.
    #[serde(default)]
    pub otlp: Option<OtlpConfig>,
    /// The Prometheus `/metrics` endpoint; absent: none.
    #[serde(default)]
    pub prometheus: Option<PrometheusConfig>,
    /// Send to a collectd server (binary network protocol); absent: none.
    #[serde(default)]
    pub collectd: Option<CollectdConfig>,
}

/// `[exporters.stdout]`: every collection as JSON lines on standard output.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {
    #[serde(default)]
    pub enabled: bool,
}
