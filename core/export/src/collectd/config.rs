//! `[exporters.collectd]`: collectd's network protocol, plain or signed.

use serde::Deserialize;

/// collectd's `SecurityLevel` of the network plugin.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SecurityLevel {
    /// Plain packets.
    #[default]
    None,
    /// HMAC-SHA-256 signed packets (`SecurityLevel Sign` on the server).
    Sign,
}

/// `[exporters.collectd]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectdConfig {
    /// `HOST:PORT` of collectd's network plugin (`Listen`), usually port 25826.
    pub server: String,
    /// `none` (default) or `sign`.
    #[serde(default)]
    pub security_level: SecurityLevel,
    /// User name for `sign` (must be in the server's AuthFile).
    #[serde(default)]
    pub username: String,
    /// Password for `sign`. Prefer the environment: ROCEWATCH_EXPORTERS__COLLECTD__PASSWORD.
    #[serde(default)]
    pub password: String,
    /// Host part of the identifiers (default: the agent's host name).
    #[serde(default)]
    pub host_name: Option<String>,
}
