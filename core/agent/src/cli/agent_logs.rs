//! The agent's own logs over OTLP, opt-in (`[exporters.otlp] agent_logs = true`), as the
//! OpenTelemetry Collector exports its own logs: every event the agent logs (at its log
//! level: `RUST_LOG` or `--log-level`) still goes to standard error, and also through
//! the `opentelemetry-appender-tracing` bridge to the SDK's batch processor and OTLP log
//! exporter, to the metrics endpoint's `/v1/logs` (HTTP) or the same endpoint (gRPC),
//! with the same TLS, headers, timeout, compression and resource.
//!
//! Why the SDK here and not for metrics: a log line is an event with nothing to
//! aggregate, so the SDK's copy of it is the only one; metrics stay on the store-streamed
//! encoder (docs/ARCHITECTURE.md).
//!
//! Safety of the agent first:
//! - The layer ([`AgentLogsLayer`]) sits in the subscriber from the start and forwards
//!   nothing until [`start`] set the bridge: the configuration is read after logging is
//!   set up. Forwarding is a bounded, non-blocking queue push (the SDK's batch processor,
//!   2048 records by default, `OTEL_BLRP_*`); past it records are dropped, counted by the
//!   SDK and said once.
//! - Events of the exporter's own stack (`opentelemetry*`, hyper, h2, tonic, tower,
//!   reqwest, rustls, want, mio, tokio) are never forwarded: an export failure logged
//!   through `tracing` reaches standard error, never the exporter again (the SDK also
//!   suppresses its own thread's telemetry).
//! - HTTP goes through the reqwest client rocewatch already links (opentelemetry-http's
//!   `HttpClient`), gRPC through a tonic channel built here: no second HTTP or TLS stack.
//! - [`AgentLogs::shutdown`] flushes within [`FLUSH_BOUND`], on a blocking thread (the gRPC
//!   channel needs the runtime's one worker free meanwhile).
//!
//! The setting is read when `run` starts; a reload (SIGHUP) does not change it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, Context as _, Result};
use opentelemetry::logs::LoggerProvider;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_appender_tracing::layer::OpenTelemetryTracingBridge;
use opentelemetry_otlp::{LogExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::logs::{BatchLogProcessor, SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::Resource;
use rocewatch_export::otlp::config::{Compression, OtlpConfig, OtlpProtocol};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// How long the last records may take to leave when the agent stops.
pub const FLUSH_BOUND: Duration = Duration::from_secs(5);

/// A response body read at most this far (a partial success is a few bytes; an error
/// page need not be read whole).
const MAX_RESPONSE_BODY: u64 = 64 << 10;

/// Targets whose events are never forwarded: the exporter's own stack.
const OWN_STACK: &[&str] = &[
    "opentelemetry",
    "hyper",
    "h2",
    "tonic",
    "tower",
    "reqwest",
    "rustls",
    "want",
    "mio",
    "tokio",
];

type Bridge = OpenTelemetryTracingBridge<ScopedProvider, SdkLogger>;

static BRIDGE: OnceLock<Bridge> = OnceLock::new();
static STOPPED: AtomicBool = AtomicBool::new(false);

/// The `tracing` layer: forwards each event the subscriber's filter let through to the
/// bridge, once [`start`] set one.
pub struct AgentLogsLayer;

impl<S> tracing_subscriber::Layer<S> for AgentLogsLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let Some(bridge) = BRIDGE.get() else { return };
        if STOPPED.load(Ordering::Relaxed) || own_stack(event.metadata().target()) {
            return;
        }
        tracing_subscriber::Layer::<S>::on_event(bridge, event, ctx);
    }
}

fn own_stack(target: &str) -> bool {
    OWN_STACK.iter().any(|p| {
        target
            .strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([':', '-', '_']))
    })
}

/// The SDK's provider, giving the bridge's logger rocewatch's scope (the bridge asks for
/// an empty one): the exporter names each record's scope after its target (the module
/// that logged, `rocewatch::app`), and this gives it rocewatch's version.
struct ScopedProvider(SdkLoggerProvider);

impl LoggerProvider for ScopedProvider {
    type Logger = SdkLogger;

    fn logger_with_scope(&self, _scope: InstrumentationScope) -> SdkLogger {
        self.0.logger_with_scope(
            InstrumentationScope::builder("rocewatch")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        )
    }
}

/// The running export of the agent's logs; [`AgentLogs::shutdown`] when `run` ends.
pub struct AgentLogs {
    provider: SdkLoggerProvider,
}

impl AgentLogs {
    /// Stop forwarding and flush what is queued, within [`FLUSH_BOUND`].
    pub async fn shutdown(self) {
        STOPPED.store(true, Ordering::Relaxed);
        let provider = self.provider;
        let r =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_BOUND)).await;
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("OTLP agent logs: the last records were not sent: {e}"),
            Err(e) => tracing::warn!("OTLP agent logs: shutdown: {e}"),
        }
    }
}

/// Start exporting the agent's logs when `[exporters.otlp] agent_logs` says so; `host` is
/// the resource's `host.name`, as for the metrics.
pub async fn start(otlp: Option<&OtlpConfig>, host: &str) -> Result<Option<AgentLogs>> {
    let Some(cfg) = otlp.filter(|c| c.agent_logs) else {
        return Ok(None);
    };
    if BRIDGE.get().is_some() {
        return Err(anyhow!("exporters.otlp.agent_logs: started twice"));
    }
    let resource = Resource::builder_empty()
        .with_attributes(
            rocewatch_export::otlp::resource(cfg, host)
                .into_iter()
                .map(|(k, v)| KeyValue::new(k, v)),
        )
        .build();
    // A blocking thread: the reqwest blocking client must not be built (or dropped) on an
    // async worker; the tonic channel finds the runtime there too.
    let c = cfg.clone();
    let exporter = tokio::task::spawn_blocking(move || exporter(&c))
        .await
        .context("exporters.otlp.agent_logs")??;
    let provider = SdkLoggerProvider::builder()
        .with_resource(resource)
        .with_log_processor(BatchLogProcessor::builder(exporter).build())
        .build();
    let bridge = OpenTelemetryTracingBridge::new(&ScopedProvider(provider.clone()));
    if BRIDGE.set(bridge).is_err() {
        return Err(anyhow!("exporters.otlp.agent_logs: started twice"));
    }
    tracing::info!(
        endpoint = %cfg.logs_endpoint(),
        "the agent's logs go to OTLP as well"
    );
    Ok(Some(AgentLogs { provider }))
}

fn read(path: &std::path::Path, key: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("{key}: cannot read {}", path.display()))
}

/// The TLS files of `[exporters.otlp.tls]`: the CA and the client certificate and key.
type TlsFiles = (Option<Vec<u8>>, Option<(Vec<u8>, Vec<u8>)>);

fn tls_files(cfg: &OtlpConfig) -> Result<TlsFiles> {
    let tls = cfg.tls.clone().unwrap_or_default();
    let ca = tls
        .ca_file
        .as_deref()
        .map(|p| read(p, "exporters.otlp.tls.ca_file"))
        .transpose()?;
    let identity = match (&tls.cert_file, &tls.key_file) {
        (Some(c), Some(k)) => Some((
            read(c, "exporters.otlp.tls.cert_file")?,
            read(k, "exporters.otlp.tls.key_file")?,
        )),
        (None, None) => None,
        _ => {
            return Err(anyhow!(
                "exporters.otlp.tls: cert_file and key_file go together"
            ))
        }
    };
    Ok((ca, identity))
}

fn user_agent() -> String {
    format!("rocewatch/{}", env!("CARGO_PKG_VERSION"))
}

fn exporter(cfg: &OtlpConfig) -> Result<LogExporter> {
    let (ca, identity) = tls_files(cfg)?;
    // Where the events go too ([`OtlpConfig::logs_url`]); none known is refused, with the fix.
    let endpoint = cfg
        .logs_url()
        .map_err(|e| anyhow!("exporters.otlp.agent_logs: {e}"))?;
    let gzip = cfg.compression == Compression::Gzip;
    let built = match cfg.protocol {
        OtlpProtocol::HttpProtobuf => {
            let mut b = LogExporter::builder()
                .with_http()
                .with_http_client(http_client(cfg, ca.as_deref(), identity.as_ref())?)
                .with_endpoint(endpoint)
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_timeout(cfg.timeout)
                // Our client sends these; the exporter's defaults would replace them.
                .with_headers(HashMap::from([("User-Agent".into(), user_agent())]));
            if gzip {
                b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
            }
            b.build()
        }
        OtlpProtocol::Grpc => {
            let mut b = LogExporter::builder()
                .with_tonic()
                .with_channel(grpc_channel(cfg, ca.as_deref(), identity.as_ref())?)
                .with_timeout(cfg.timeout)
                .with_metadata(grpc_metadata(cfg)?);
            if gzip {
                b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
            }
            b.build()
        }
    };
    built.context("exporters.otlp (agent_logs)")
}

/// The reqwest client of the metrics exporter's kind: rustls, the CA and client identity
/// of `[exporters.otlp.tls]`, the configured headers.
fn http_client(
    cfg: &OtlpConfig,
    ca: Option<&[u8]>,
    identity: Option<&(Vec<u8>, Vec<u8>)>,
) -> Result<HttpClient> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (k, v) in &cfg.headers {
        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .with_context(|| format!("exporters.otlp.headers: {k:?}"))?;
        let value = reqwest::header::HeaderValue::from_str(v)
            .with_context(|| format!("exporters.otlp.headers.{k}"))?;
        headers.insert(name, value);
    }
    let mut b = reqwest::blocking::Client::builder()
        .timeout(cfg.timeout)
        .connect_timeout(cfg.timeout)
        .default_headers(headers)
        .user_agent(user_agent())
        .use_rustls_tls();
    if let Some(ca) = ca {
        b = b.add_root_certificate(
            reqwest::Certificate::from_pem(ca).context("exporters.otlp.tls.ca_file")?,
        );
    }
    if let Some((cert, key)) = identity {
        let mut pem = cert.clone();
        pem.push(b'\n');
        pem.extend_from_slice(key);
        b = b.identity(
            reqwest::Identity::from_pem(&pem).context("exporters.otlp.tls.cert_file/key_file")?,
        );
    }
    Ok(HttpClient(
        b.build().context("HTTP client for the agent's logs")?,
    ))
}

fn grpc_channel(
    cfg: &OtlpConfig,
    ca: Option<&[u8]>,
    identity: Option<&(Vec<u8>, Vec<u8>)>,
) -> Result<tonic::transport::Channel> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let mut endpoint = Endpoint::from_shared(cfg.endpoint.clone())
        .with_context(|| format!("exporters.otlp.endpoint {:?}", cfg.endpoint))?
        .timeout(cfg.timeout)
        .connect_timeout(cfg.timeout)
        .user_agent(user_agent())
        .context("user agent")?;
    if cfg.endpoint.starts_with("https://") || ca.is_some() || identity.is_some() {
        let mut t = ClientTlsConfig::new().with_webpki_roots();
        if let Some(ca) = ca {
            t = t.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = identity {
            t = t.identity(Identity::from_pem(cert, key));
        }
        endpoint = endpoint.tls_config(t).context("exporters.otlp.tls")?;
    }
    Ok(endpoint.connect_lazy())
}

fn grpc_metadata(cfg: &OtlpConfig) -> Result<tonic::metadata::MetadataMap> {
    let mut m = tonic::metadata::MetadataMap::new();
    for (k, v) in &cfg.headers {
        let key = tonic::metadata::AsciiMetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .with_context(|| format!("exporters.otlp.headers: {k:?}"))?;
        let value = v
            .parse()
            .with_context(|| format!("exporters.otlp.headers.{k}"))?;
        m.insert(key, value);
    }
    Ok(m)
}

/// opentelemetry-http's client trait on the reqwest (blocking) client rocewatch links:
/// the batch processor exports from its own thread, where blocking is what it expects.
#[derive(Debug)]
struct HttpClient(reqwest::blocking::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for HttpClient {
    async fn send_bytes(
        &self,
        request: http::Request<opentelemetry_http::Bytes>,
    ) -> Result<http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        use std::io::Read;
        let (parts, body) = request.into_parts();
        let resp = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()?;
        let mut out = http::Response::builder().status(resp.status());
        if let Some(h) = out.headers_mut() {
            h.extend(resp.headers().clone());
        }
        let mut bytes = Vec::new();
        resp.take(MAX_RESPONSE_BODY).read_to_end(&mut bytes)?;
        Ok(out.body(bytes.into())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exporters_own_stack_is_never_forwarded() {
        for t in [
            "opentelemetry_sdk",
            "opentelemetry-otlp",
            "opentelemetry",
            "hyper_util::client::legacy",
            "h2::codec",
            "tonic::transport",
            "tower::buffer",
            "reqwest::connect",
            "rustls::client",
            "want",
            "mio::poll",
        ] {
            assert!(own_stack(t), "{t}");
        }
        for t in [
            "rocewatch::app",
            "rocewatch_export::otlp",
            "hyperion",
            "h2o",
            "tokioish",
        ] {
            assert!(!own_stack(t), "{t}");
        }
    }
}
