//! Routes: an alert's labels matched against globs, turned into the rule transition the
//! remediation dispatcher takes.

use globset::{Glob, GlobMatcher};

use rocewatch_plugin_api::Attributes;

use super::config::AlertmanagerConfig;
use super::payload::Alert;
use rocewatch_runtime::rules::Transition;

pub(super) struct Route {
    matchers: Vec<(String, GlobMatcher)>,
    actions: Vec<String>,
}

/// Turns alerts into transitions.
pub struct Router {
    routes: Vec<Route>,
}

impl Router {
    pub fn new(cfg: &AlertmanagerConfig) -> Self {
        Router {
            routes: cfg
                .routes
                .iter()
                .map(|r| Route {
                    matchers: r
                        .matchers
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                Glob::new(v).expect("validated").compile_matcher(),
                            )
                        })
                        .collect(),
                    actions: r.actions.clone(),
                })
                .collect(),
        }
    }

    /// The transition for one alert: the actions of every route that matches (each once).
    pub fn transition(&self, a: &Alert) -> Transition {
        let mut actions: Vec<String> = Vec::new();
        for r in &self.routes {
            if r.matchers
                .iter()
                .all(|(k, g)| a.labels.get(k).is_some_and(|v| g.is_match(v)))
            {
                for x in &r.actions {
                    if !actions.contains(x) {
                        actions.push(x.clone());
                    }
                }
            }
        }
        let name = a
            .labels
            .get("alertname")
            .map(String::as_str)
            .unwrap_or("unnamed");
        Transition {
            rule: format!("alertmanager/{name}"),
            metric: String::new(),
            firing: a.status == "firing",
            labels: Attributes::new((&a.labels).into()),
            value: f64::NAN,
            recent: Vec::new(),
            actions,
            severity: a
                .labels
                .get("severity")
                .cloned()
                .unwrap_or_else(|| "warning".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::receiver::constant_time_eq;
    use super::*;

    #[test]
    fn routes_and_tokens() {
        let cfg: AlertmanagerConfig = toml::from_str(
            r#"
bearer_token = "s3cret"
[[routes]]
match = { alertname = "RoCE*", severity = "critical" }
actions = ["drain", "page"]
[[routes]]
match = { alertname = "RoCEPauseStorm" }
actions = ["page", "log"]
"#,
        )
        .unwrap();
        let router = Router::new(&cfg);
        let alert = |name: &str, sev: &str| Alert {
            status: "firing".into(),
            labels: [
                ("alertname".to_string(), name.to_string()),
                ("severity".to_string(), sev.to_string()),
            ]
            .into(),
            annotations: BTreeMap::new(),
            fingerprint: None,
        };
        assert_eq!(
            router
                .transition(&alert("RoCEPauseStorm", "critical"))
                .actions,
            ["drain", "page", "log"]
        );
        assert_eq!(
            router.transition(&alert("RoCELinkDown", "warning")).actions,
            Vec::<String>::new()
        );
        assert_eq!(
            router.transition(&alert("RoCEPauseStorm", "critical")).rule,
            "alertmanager/RoCEPauseStorm"
        );
        assert_eq!(cfg.token(None).unwrap().as_deref(), Some("s3cret"));
        let open: AlertmanagerConfig = toml::from_str("").unwrap();
        assert!(open
            .token(None)
            .unwrap_err()
            .1
            .contains("allow_unauthenticated"));
        assert!(
            constant_time_eq(b"abc", b"abc")
                && !constant_time_eq(b"abc", b"abd")
                && !constant_time_eq(b"ab", b"abc")
        );
    }
}
