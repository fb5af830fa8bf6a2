//! The HTTP receiver: bearer token, body size and request-rate limits, then the router.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::config::AlertmanagerConfig;
use super::payload::parse;
use super::router::Router;
use crate::Dispatcher;

/// Shared by the connections.
pub struct Receiver {
    token: Option<String>,
    max_body: usize,
    router: Router,
    bucket: rocewatch_web::token_bucket::TokenBucket,
    dispatcher: Arc<Dispatcher>,
    metrics: Arc<rocewatch_runtime::selfmetrics::SelfMetrics>,
    max_connections: usize,
    /// Refused requests are said at most once a minute, with their count.
    refused: rocewatch_web::http::Throttle,
    web: Option<Arc<rocewatch_web::server::WebListener>>,
}

impl Receiver {
    pub fn new(
        cfg: &AlertmanagerConfig,
        dispatcher: Arc<Dispatcher>,
        metrics: Arc<rocewatch_runtime::selfmetrics::SelfMetrics>,
    ) -> Result<Arc<Self>, (String, String)> {
        let web = cfg.web()?;
        Ok(Arc::new(Receiver {
            token: cfg.token(
                web.as_ref()
                    .map(|w| w.current("alertmanager webhook"))
                    .as_ref(),
            )?,
            web,
            max_body: cfg.max_body_bytes,
            router: Router::new(cfg),
            bucket: rocewatch_web::token_bucket::TokenBucket::per_second(
                cfg.max_requests_per_second,
            ),
            dispatcher,
            metrics,
            max_connections: cfg.max_connections,
            refused: rocewatch_web::http::Throttle::new(Duration::from_secs(60)),
        }))
    }

    /// Whether a request must prove who sent it (a token, a password, a verified
    /// certificate).
    pub fn authenticated(&self) -> bool {
        self.token.is_some()
            || self
                .web
                .as_ref()
                .is_some_and(|w| w.current("alertmanager webhook").authenticates())
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
                // One line per minute however many come (a scanner, a misconfigured
                // Alertmanager); every one is counted in rocewatch.alertmanager.requests.
                if let Some(n) = self.refused.hit() {
                    tracing::warn!(status = status.as_u16(), "alertmanager webhook: {n} request(s) refused since the last report; latest: {msg}");
                }
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
        if !self.bucket.allow() {
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

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serve the webhook until `shutdown` turns true.
/// Serve the webhook on `listener` until `shutdown` turns true.
pub async fn serve(listener: TcpListener, rx: Arc<Receiver>, shutdown: watch::Receiver<bool>) {
    let opts = rocewatch_web::http::ServeOptions {
        name: "alertmanager webhook",
        max_connections: rx.max_connections,
        writev: false,
        web: rx.web.clone(),
        // Refused by the web configuration (basic auth, rate_limit): counted with the
        // receiver's own refusals.
        on_refused: Some({
            let metrics = Arc::clone(&rx.metrics);
            Arc::new(move |status: StatusCode| {
                metrics.alertmanager_request(if status == StatusCode::UNAUTHORIZED {
                    "unauthorized"
                } else {
                    "rate_limited"
                })
            })
        }),
    };
    rocewatch_web::http::serve(
        listener,
        opts,
        move |req| Arc::clone(&rx).handle(req),
        shutdown,
    )
    .await;
}
