//! The one HTTP accept loop of the agent's listeners (`/metrics`, the Alertmanager
//! receiver): HTTP/1.1 with a header timeout (slow clients are closed) and at most
//! `max_connections` connections at once; past that a new connection is closed at once
//! (it costs nothing to keep), and the refusals are said at most once a minute. With a
//! web configuration ([`crate::server`]): TLS (the handshake bounded like the headers) and
//! basic authentication before the handler sees a request.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// How a listener serves.
#[derive(Clone)]
pub struct ServeOptions {
    /// For logs: "prometheus endpoint", "alertmanager webhook".
    pub name: &'static str,
    /// Connections served at once.
    pub max_connections: usize,
    /// Hand response bodies to the socket as they are (writev) instead of copying them
    /// into hyper's buffer first (large bodies: `/metrics`).
    pub writev: bool,
    /// TLS and authentication (exporter-toolkit's web configuration), when configured.
    pub web: Option<Arc<crate::server::WebListener>>,
    /// Called for each request refused before the handler (credentials, rate limit), so a
    /// listener can count it with its own refusals.
    pub on_refused: Option<Arc<dyn Fn(hyper::StatusCode) + Send + Sync>>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("name", &self.name)
            .field("max_connections", &self.max_connections)
            .field("web", &self.web)
            .finish_non_exhaustive()
    }
}

/// Slow TLS handshakes are closed like slow headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopping listener lets a connection finish the request in progress (a
/// client that never reads its answer does not hold a stopped agent's state).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Say a repeated condition at most once per `every`, with how often it happened.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    count: AtomicU64,
    last: std::sync::Mutex<Option<Instant>>,
}

impl Throttle {
    pub fn new(every: Duration) -> Self {
        Throttle {
            every,
            count: AtomicU64::new(0),
            last: std::sync::Mutex::new(None),
        }
    }

    /// Count one occurrence; `Some(n)` (occurrences since the last time it said so) when
    /// it is time to say it.
    pub fn hit(&self) -> Option<u64> {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < self.every) {
            return None;
        }
        *last = Some(now);
        Some(self.count.swap(0, Ordering::Relaxed))
    }
}

/// Serve `handler` on `listener` until `shutdown` turns true.
pub async fn serve<H, F>(
    listener: TcpListener,
    opts: ServeOptions,
    handler: H,
    mut shutdown: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let refused = Throttle::new(Duration::from_secs(60));
    // Failed handshakes and refused credentials are said apart, each once a minute.
    let failed = Arc::new(Throttle::new(Duration::from_secs(60)));
    let unauthorized = Arc::new(Throttle::new(Duration::from_secs(60)));
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("{}: accept: {e}", opts.name);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream);
            if let Some(n) = refused.hit() {
                tracing::warn!(
                    "{}: {n} connection(s) refused: {} already open (max_connections)",
                    opts.name,
                    opts.max_connections
                );
            }
            continue;
        };
        let handler = handler.clone();
        let opts = opts.clone();
        let failed = Arc::clone(&failed);
        let unauthorized = Arc::clone(&unauthorized);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let tls = opts.web.as_ref().and_then(|w| w.current(opts.name).tls);
            let r = match tls {
                None => connection(stream, &opts, handler, &unauthorized, stop).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => connection(tls, &opts, handler, &unauthorized, stop).await,
                        Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
                        Err(_) => Err(format!("TLS handshake: not done in {HANDSHAKE_TIMEOUT:?}")),
                    }
                }
            };
            if let Err(e) = r {
                if let Some(n) = failed.hit() {
                    tracing::warn!("{}: {n} connection(s) refused since the last report; latest from {peer}: {e}", opts.name);
                }
            }
            drop(permit);
        });
    }
}

/// Serve one connection (plain or TLS): the rate limit and authentication first (the web
/// configuration as it is at each request: a password removed is refused on a kept-alive
/// connection too), then the handler, then the configured response headers. When `shutdown` turns true (the agent stops, or a reload
/// replaces it) the request in progress is answered and the connection closed: a
/// keep-alive client reconnects to what serves now, not to a stopped agent's state.
async fn connection<S, H, F>(
    stream: S,
    opts: &ServeOptions,
    handler: H,
    failed: &Arc<Throttle>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let name = opts.name;
    let failed = Arc::clone(failed);
    let listener = opts.web.clone();
    let on_refused = opts.on_refused.clone();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let handler = handler.clone();
        let web = listener.as_ref().map(|w| w.current(name));
        let failed = Arc::clone(&failed);
        let on_refused = on_refused.clone();
        async move {
            let refuse = |status: hyper::StatusCode, why: &str| {
                if let Some(n) = failed.hit() {
                    tracing::warn!("{name}: {n} request(s) refused since the last report; latest: {} {}: {why}", req.method(), req.uri().path());
                }
                if let Some(f) = &on_refused {
                    f(status);
                }
                let mut r = Response::new(Full::new(Bytes::from(format!(
                    "{}\n",
                    status.canonical_reason().unwrap_or("refused")
                ))));
                *r.status_mut() = status;
                r
            };
            if web
                .as_ref()
                .and_then(|w| w.limiter.as_ref())
                .is_some_and(|l| !l.allow())
            {
                let r = refuse(hyper::StatusCode::TOO_MANY_REQUESTS, "rate_limit");
                return Ok::<_, Infallible>(with_headers(r, web.as_ref()));
            }
            if let Some(users) = web.as_ref().and_then(|w| w.users.as_ref()) {
                let header = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .map(|v| v.as_bytes());
                if !users.allows(header).await {
                    let mut r = refuse(
                        hyper::StatusCode::UNAUTHORIZED,
                        "missing or wrong basic auth credentials",
                    );
                    r.headers_mut().insert(
                        hyper::header::WWW_AUTHENTICATE,
                        hyper::header::HeaderValue::from_static("Basic realm=\"rocewatch\""),
                    );
                    return Ok(with_headers(r, web.as_ref()));
                }
            }
            let r = handler(req).await?;
            Ok(with_headers(r, web.as_ref()))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .writev(opts.writev)
        .serve_connection(io, svc);
    tokio::pin!(conn);
    let r = tokio::select! {
        r = conn.as_mut() => r,
        _ = async { let _ = shutdown.wait_for(|stop| *stop).await; } => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(DRAIN_TIMEOUT, conn.as_mut()).await {
                Ok(r) => r,
                Err(_) => return Ok(()),
            }
        }
    };
    if let Err(e) = r {
        // A client that goes away mid-request is its own business.
        tracing::debug!("{} connection: {e}", opts.name);
    }
    Ok(())
}

fn with_headers(
    mut r: Response<Full<Bytes>>,
    web: Option<&crate::server::Web>,
) -> Response<Full<Bytes>> {
    for (k, v) in web.iter().flat_map(|w| &w.headers) {
        r.headers_mut().insert(k.clone(), v.clone());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener answering "ok" with at most `max_connections`: its address, its stop
    /// switch, its task.
    async fn ok_server(
        max_connections: usize,
    ) -> (
        std::net::SocketAddr,
        watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        let opts = ServeOptions {
            name: "test",
            max_connections,
            writev: false,
            web: None,
            on_refused: None,
        };
        let server = tokio::spawn(serve(
            listener,
            opts,
            |_req| async { Ok(Response::new(Full::new(Bytes::from_static(b"ok")))) },
            rx,
        ));
        (addr, tx, server)
    }

    #[test]
    fn a_throttle_says_once_per_period_with_the_count() {
        let t = Throttle::new(Duration::from_secs(3600));
        assert_eq!(t.hit(), Some(1));
        for _ in 0..999 {
            assert_eq!(t.hit(), None);
        }
        let t = Throttle::new(Duration::ZERO);
        assert_eq!(t.hit(), Some(1));
        assert_eq!(t.hit(), Some(1));
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_closed_at_once() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (addr, tx, server) = ok_server(2).await;
        // Two idle connections hold both slots.
        let _a = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _b = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let mut buf = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut buf))
            .await
            .expect("the third connection is closed, not left waiting");
        assert!(n.unwrap_or(0) == 0, "no answer past the limit");
        // A slot freed: served again.
        drop(_a);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut d = tokio::net::TcpStream::connect(addr).await.unwrap();
        d.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        d.read_to_end(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf).ends_with("ok"));
        tx.send(true).unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_keep_alive_connection_is_closed_when_the_listener_stops() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (addr, tx, server) = ok_server(4).await;
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).ends_with("ok"));
        // Kept alive; the listener stops (a reload): the connection is closed, not left
        // serving the old state.
        tx.send(true).unwrap();
        server.await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .expect("closed by the server")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }
}
