//! A receiver for Prometheus Alertmanager's webhook (payload version 4): alerts are routed
//! to remediation actions by label matchers, resolved alerts clear. Everything goes
//! through the same remediation dispatcher as the agent's own rules (dry runs, cooldowns,
//! limits, kill switch, audit log).
//!
//! Safe by default: loopback bind, a bearer token required unless
//! `allow_unauthenticated = true`, a maximum body size (413), a maximum request rate
//! (429), and a malformed payload gets a 400 with the reason, never a crash.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use globset::{Glob, GlobMatcher};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use rocewatch_plugin_api::Attributes;

use crate::remediation::Dispatcher;
use crate::rules::Transition;

fn default_listen() -> SocketAddr {
    "127.0.0.1:9465".parse().expect("static address")
}
fn default_max_body() -> usize {
    1 << 20
}
fn default_rate() -> u32 {
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
    /// The token requests must carry, or `None` when unauthenticated access is allowed.
    pub fn token(&self) -> Result<Option<String>, (String, String)> {
        if let Some(t) = &self.bearer_token {
            return Ok(Some(t.trim().to_string()));
        }
        if let Some(f) = &self.bearer_token_file {
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
            return Ok(Some(t));
        }
        if self.allow_unauthenticated {
            return Ok(None);
        }
        Err((
            "alertmanager".into(),
            "set bearer_token_file (or bearer_token), or allow_unauthenticated = true to accept anyone who can reach the port".into(),
        ))
    }
}

/// Checks the section against the configured actions.
pub fn validate(
    cfg: &AlertmanagerConfig,
    actions: &BTreeMap<String, crate::remediation::ActionConfig>,
) -> Result<(), (String, String)> {
    // The token file is read when the receiver starts (it may exist only on the host).
    if cfg.bearer_token.is_none() && cfg.bearer_token_file.is_none() && !cfg.allow_unauthenticated {
        cfg.token()?;
    }
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
            if !actions.contains_key(a) {
                return Err((
                    format!("alertmanager.routes[{i}].actions"),
                    format!("no action {a:?} under [remediation.actions]"),
                ));
            }
        }
    }
    Ok(())
}

/// One alert of the payload.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    pub status: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub fingerprint: Option<String>,
}

/// The webhook payload (version 4).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payload {
    pub version: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub truncated_alerts: u64,
    pub alerts: Vec<Alert>,
}

/// Parse and check a payload; the error is the 400's reason.
pub fn parse(body: &[u8]) -> Result<Payload, String> {
    let p: Payload = serde_json::from_slice(body)
        .map_err(|e| format!("not an Alertmanager webhook payload: {e}"))?;
    if p.version != "4" {
        return Err(format!(
            "payload version {:?}; this receiver speaks version \"4\"",
            p.version
        ));
    }
    for (i, a) in p.alerts.iter().enumerate() {
        if a.status != "firing" && a.status != "resolved" {
            return Err(format!(
                "alerts[{i}].status: {:?} is neither \"firing\" nor \"resolved\"",
                a.status
            ));
        }
    }
    Ok(p)
}

struct Route {
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
            labels: Attributes::new(a.labels.clone()),
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

/// A token bucket: `rate` per second, one second of burst.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self, now: Instant) -> bool {
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Shared by the connections.
pub struct Receiver {
    token: Option<String>,
    max_body: usize,
    router: Router,
    bucket: Mutex<Bucket>,
    dispatcher: Arc<Dispatcher>,
    metrics: Arc<crate::selfmetrics::SelfMetrics>,
}

impl Receiver {
    pub fn new(
        cfg: &AlertmanagerConfig,
        dispatcher: Arc<Dispatcher>,
        metrics: Arc<crate::selfmetrics::SelfMetrics>,
    ) -> Result<Arc<Self>, (String, String)> {
        Ok(Arc::new(Receiver {
            token: cfg.token()?,
            max_body: cfg.max_body_bytes,
            router: Router::new(cfg),
            bucket: Mutex::new(Bucket {
                rate: cfg.max_requests_per_second as f64,
                tokens: cfg.max_requests_per_second as f64,
                at: Instant::now(),
            }),
            dispatcher,
            metrics,
        }))
    }

    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, Infallible> {
        let reply = |status: StatusCode, body: String| {
            Response::builder()
                .status(status)
                .header("content-type", "text/plain; charset=utf-8")
                .body(Full::new(Bytes::from(body + "\n")))
                .expect("static response parts")
        };
        let r = self.handle_inner(req).await;
        let code = match &r {
            Ok(_) => "accepted",
            Err((s, _)) if *s == StatusCode::UNAUTHORIZED => "unauthorized",
            Err((s, _)) if *s == StatusCode::TOO_MANY_REQUESTS => "rate_limited",
            Err((s, _)) if *s == StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            Err(_) => "rejected",
        };
        self.metrics.alertmanager_request(code);
        Ok(match r {
            Ok(msg) => reply(StatusCode::OK, msg),
            Err((status, msg)) => {
                tracing::warn!(status = status.as_u16(), "alertmanager webhook: {msg}");
                reply(status, msg)
            }
        })
    }

    async fn handle_inner(&self, req: Request<Incoming>) -> Result<String, (StatusCode, String)> {
        if req.uri().path() != "/alertmanager" {
            return Err((
                StatusCode::NOT_FOUND,
                "POST Alertmanager webhooks to /alertmanager".into(),
            ));
        }
        if req.method() != Method::POST {
            return Err((StatusCode::METHOD_NOT_ALLOWED, "only POST".into()));
        }
        if let Some(t) = &self.token {
            let got = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            if !got.is_some_and(|g| constant_time_eq(g.as_bytes(), t.as_bytes())) {
                return Err((
                    StatusCode::UNAUTHORIZED,
                    "missing or wrong bearer token".into(),
                ));
            }
        }
        if !self
            .bucket
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(Instant::now())
        {
            return Err((
                StatusCode::TOO_MANY_REQUESTS,
                "too many requests; slow down".into(),
            ));
        }
        let declared = req
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > self.max_body) {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body larger than {} bytes", self.max_body),
            ));
        }
        let body = Limited::new(req.into_body(), self.max_body)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    (
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("body larger than {} bytes", self.max_body),
                    )
                } else {
                    (StatusCode::BAD_REQUEST, format!("reading the body: {e}"))
                }
            })?
            .to_bytes();
        let p = parse(&body).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
        if p.truncated_alerts > 0 {
            tracing::warn!(
                truncated = p.truncated_alerts,
                "alertmanager truncated this group: {} alerts were not sent",
                p.truncated_alerts
            );
        }
        for a in &p.alerts {
            let t = self.router.transition(a);
            self.dispatcher.handle(&t);
        }
        Ok(format!("{} alerts accepted", p.alerts.len()))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serve the webhook until `shutdown` turns true.
pub async fn serve(listener: TcpListener, rx: Arc<Receiver>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("alertmanager webhook: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let rx = Arc::clone(&rx);
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let svc = hyper::service::service_fn(move |req| Arc::clone(&rx).handle(req));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(io, svc);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, "alertmanager webhook connection: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads() {
        assert!(parse(b"{")
            .unwrap_err()
            .contains("not an Alertmanager webhook payload"));
        assert!(parse(br#"{"version":"3","alerts":[]}"#)
            .unwrap_err()
            .contains("version \"3\""));
        assert!(parse(br#"{"version":"4","alerts":[{"status":"odd"}]}"#)
            .unwrap_err()
            .contains("alerts[0].status"));
        let p = parse(br#"{"version":"4","status":"firing","truncatedAlerts":3,"alerts":[{"status":"firing","labels":{"alertname":"X"}}]}"#).unwrap();
        assert_eq!(p.truncated_alerts, 3);
    }

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
        assert_eq!(cfg.token().unwrap().as_deref(), Some("s3cret"));
        let open: AlertmanagerConfig = toml::from_str("").unwrap();
        assert!(open
            .token()
            .unwrap_err()
            .1
            .contains("allow_unauthenticated"));
        assert!(
            constant_time_eq(b"abc", b"abc")
                && !constant_time_eq(b"abc", b"abd")
                && !constant_time_eq(b"ab", b"abc")
        );
    }

    #[test]
    fn bucket_limits_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket {
            rate: 2.0,
            tokens: 2.0,
            at: t0,
        };
        assert!(b.take(t0) && b.take(t0));
        assert!(!b.take(t0));
        assert!(b.take(t0 + Duration::from_millis(500)));
        assert!(!b.take(t0 + Duration::from_millis(500)));
    }
}
