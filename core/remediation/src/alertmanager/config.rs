//! `[alertmanager]`: listener, token, limits and the routes from alert labels to actions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use globset::Glob;
use serde::Deserialize;

use rocewatch_web::server::{Web, WebListener};

pub(super) fn default_listen() -> SocketAddr {
    "127.0.0.1:9465".parse().expect("static address")
}

pub(super) fn default_max_body() -> usize {
    1 << 20
}

pub(super) fn default_max_connections() -> usize {
    64
}

pub(super) fn default_rate() -> u32 {
    20
}

/// `[alertmanager]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerConfig {
    /// Where the webhook listens (POST /alertmanager). Loopback by default.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// A file holding the bearer token Alertmanager sends
    /// (`http_config.authorization.credentials_file` on its side).
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
    /// The token itself (prefer the file, or `ROCEWATCH_ALERTMANAGER__BEARER_TOKEN`).
    #[serde(default)]
    pub bearer_token: Option<String>,
    /// Accept requests without a token. Off by default: anyone who can reach the port
    /// could otherwise trigger remediation.
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// Larger bodies get a 413.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Requests per second (a token bucket with one second of burst); beyond it, a 429.
    #[serde(default = "default_rate")]
    pub max_requests_per_second: u32,
    /// Connections served at once (default 64); past it a new one is closed at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// TLS and basic authentication: a web configuration file in the format of
    /// Prometheus's exporter-toolkit. Its `basic_auth_users` (or client certificates it
    /// requires and verifies) authenticate Alertmanager in place of the bearer token.
    #[serde(default)]
    pub web_config_file: Option<PathBuf>,
    /// Which alerts trigger which actions.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

/// `[[alertmanager.routes]]`: every label matcher (a glob) must match the alert's labels.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    #[serde(default, rename = "match")]
    pub matchers: BTreeMap<String, String>,
    pub actions: Vec<String>,
}

impl AlertmanagerConfig {
    /// The listener's web configuration (TLS, basic auth), when one is set.
    pub fn web(&self) -> Result<Option<Arc<WebListener>>, (String, String)> {
        self.web_config_file
            .as_ref()
            .map(|p| {
                WebListener::load(p)
                    .map_err(|e| ("alertmanager.web_config_file".to_string(), e.to_string()))
            })
            .transpose()
    }

    /// The token requests must carry, or `None` when the web configuration authenticates
    /// requests or unauthenticated access is allowed.
    pub fn token(&self, web: Option<&Web>) -> Result<Option<String>, (String, String)> {
        let token = if let Some(t) = &self.bearer_token {
            // As an empty token file: a blank token would be compared with what clients
            // send, and an `Authorization: Bearer ` header would pass.
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err((
                    "alertmanager.bearer_token".into(),
                    "is empty (or only spaces): set the token, or remove the key".into(),
                ));
            }
            Some(t)
        } else if let Some(f) = &self.bearer_token_file {
            let t = std::fs::read_to_string(f).map_err(|e| {
                (
                    "alertmanager.bearer_token_file".to_string(),
                    format!("{}: {e}", f.display()),
                )
            })?;
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err((
                    "alertmanager.bearer_token_file".into(),
                    format!("{} is empty", f.display()),
                ));
            }
            Some(t)
        } else {
            None
        };
        if token.is_some() && web.is_some_and(|w| w.users.is_some()) {
            return Err((
                "alertmanager.web_config_file".into(),
                "its basic_auth_users and a bearer token cannot both be required (Alertmanager sends one Authorization header): keep one".into(),
            ));
        }
        if token.is_some() || web.is_some_and(Web::authenticates) || self.allow_unauthenticated {
            return Ok(token);
        }
        Err((
            "alertmanager".into(),
            "set bearer_token_file (or bearer_token), or a web_config_file with basic_auth_users or required client certificates, or allow_unauthenticated = true to accept anyone who can reach the port".into(),
        ))
    }
}

/// Checks the section against the configured actions.
pub fn validate(
    cfg: &AlertmanagerConfig,
    actions: &BTreeMap<String, crate::ActionConfig>,
) -> Result<(), (String, String)> {
    // What the receiver checks at start, checked here too (a token file that is missing
    // or empty, no token at all without allow_unauthenticated): `config check` refuses
    // what `run` would.
    let web = cfg.web()?;
    cfg.token(web.map(|w| w.current("alertmanager webhook")).as_ref())?;
    if cfg.max_requests_per_second == 0 {
        return Err((
            "alertmanager.max_requests_per_second".into(),
            "must be at least 1".into(),
        ));
    }
    for (i, r) in cfg.routes.iter().enumerate() {
        for (k, v) in &r.matchers {
            Glob::new(v)
                .map_err(|e| (format!("alertmanager.routes[{i}].match.{k}"), e.to_string()))?;
        }
        for a in &r.actions {
            match actions.get(a).map(|c| &c.kind) {
                None => {
                    return Err((
                        format!("alertmanager.routes[{i}].actions"),
                        format!("no action {a:?} under [remediation.actions]"),
                    ))
                }
                // An alert can be about any host, and Alertmanager sends it to every
                // receiver its route names: the drain would hit this node, whichever
                // the alert names.
                Some(crate::ActionKind::SlurmDrain { .. }) => {
                    return Err((
                        format!("alertmanager.routes[{i}].actions"),
                        format!("{a:?} is a slurm_drain action, which drains this node: an alert may be about another host (use a rule on this host, or an exec action that drains the node the alert names)"),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_may_not_drain_this_node_for_an_alert_about_any_host() {
        let actions: BTreeMap<String, crate::ActionConfig> =
            toml::from_str("[drain]\ntype = \"slurm_drain\"\n[note]\ntype = \"log\"\n").unwrap();
        let cfg = |action: &str| -> AlertmanagerConfig {
            toml::from_str(&format!(
                "allow_unauthenticated = true\n[[routes]]\nmatch = {{ alertname = \"RoceDown\" }}\nactions = [\"{action}\"]\n"
            ))
            .unwrap()
        };
        assert_eq!(validate(&cfg("note"), &actions), Ok(()));
        let (key, why) = validate(&cfg("drain"), &actions).unwrap_err();
        assert_eq!(key, "alertmanager.routes[0].actions");
        assert!(why.contains("drains this node"), "{why}");
        let (_, why) = validate(&cfg("nope"), &actions).unwrap_err();
        assert!(why.contains("no action \"nope\""), "{why}");
    }
}
