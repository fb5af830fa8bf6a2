//! `[exporters.prometheus]`: the `/metrics` listener.

use serde::Deserialize;

pub(super) fn default_prometheus_listen() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 9464))
}

/// `[exporters.prometheus]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// Address of `/metrics` and `/healthz` (default `127.0.0.1:9464`, loopback only; use
    /// `0.0.0.0:9464` to let a remote Prometheus scrape).
    #[serde(default = "default_prometheus_listen")]
    pub listen: std::net::SocketAddr,
    /// Connections served at once (default 64); past it a new one is closed at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// TLS and basic authentication: a web configuration file in the format of
    /// Prometheus's exporter-toolkit (node_exporter's `--web.config.file`).
    #[serde(default)]
    pub web_config_file: Option<std::path::PathBuf>,
}

pub(super) fn default_max_connections() -> usize {
    64
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        PrometheusConfig {
            listen: default_prometheus_listen(),
            max_connections: default_max_connections(),
            web_config_file: None,
        }
    }
}
