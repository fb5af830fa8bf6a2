//! The OTLP transports: OTLP/HTTP (protobuf, optionally gzip) and OTLP/gRPC, with TLS,
//! sending an encoded `ExportMetricsServiceRequest` (or the events' `ExportLogsServiceRequest`,
//! whose response's `partial_success` has the same fields) and classifying what the receiver
//! answers as the OTLP specification does (`opentelemetry-proto`'s
//! `docs/specification.md`, "Failures" and "Throttling" of OTLP/gRPC and OTLP/HTTP):
//!
//! - HTTP: 429, 502, 503 and 504 are retried, honouring `Retry-After` (delta-seconds or an
//!   HTTP-date); 413 is a request too large (split); every other 4xx and 5xx is not
//!   retried. A failure's body is a `google.rpc.Status` whose message is what is said.
//! - gRPC: CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE and DATA_LOSS
//!   are retried; RESOURCE_EXHAUSTED only when the status carries a `google.rpc.RetryInfo`
//!   (the server says it can recover), whose `retry_delay` is honoured on any code; every
//!   other code (UNKNOWN, INVALID_ARGUMENT, INTERNAL...) is not. A "message larger than
//!   max" is a request too large.
//! - No answer at all (connection refused, DNS, TLS, a timeout; a gRPC status the client
//!   made itself, which carries its cause) is retried.
//! - Success may carry a `partial_success`: the receiver took the request and rejected
//!   some points; it is handed back (the specification: never retried).
//!
//! Errors are said with their cause chain (`std::error::Error::source`): a TLS failure
//! names the certificate error, not only "error sending request".

use hyper::body::Bytes;
use std::time::{Duration, SystemTime};

use super::config::{Compression, OtlpConfig, OtlpProtocol};

/// Who sends, as the OTLP exporter specification asks an exporter to say (before a
/// configured `user-agent` header, which wins over HTTP; tonic appends its own over gRPC).
pub(super) const USER_AGENT: &str = concat!("rocewatch/", env!("CARGO_PKG_VERSION"));

/// Why a send failed.
#[derive(Debug)]
pub(super) enum SendError {
    /// Worth trying again later (endpoint down, slow, overloaded); with how long the
    /// receiver asked to wait (`Retry-After`, gRPC `RetryInfo`), when it did.
    Retryable(String, Option<Duration>),
    /// The receiver rejected the data; sending it again would not help.
    Permanent(String),
    /// The receiver refused the request as too large (HTTP 413): fewer snapshots a
    /// request may be taken.
    TooLarge(String),
}

/// What a receiver said of a request it took: `partial_success` of
/// `ExportMetricsServiceResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct PartialSuccess {
    pub rejected: i64,
    pub message: String,
}

/// The messages of a response and of a failure, as opentelemetry-proto and googleapis
/// define them (only the fields read here; prost skips the rest).
mod wire {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportMetricsServiceResponse {
        #[prost(message, optional, tag = "1")]
        pub partial_success: Option<ExportMetricsPartialSuccess>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportMetricsPartialSuccess {
        #[prost(int64, tag = "1")]
        pub rejected_data_points: i64,
        #[prost(string, tag = "2")]
        pub error_message: String,
    }
    /// `google.rpc.Status`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RpcStatus {
        #[prost(int32, tag = "1")]
        pub code: i32,
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(message, repeated, tag = "3")]
        pub details: Vec<Any>,
    }
    /// `google.protobuf.Any`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "1")]
        pub type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
    }
    /// `google.rpc.RetryInfo`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RetryInfo {
        #[prost(message, optional, tag = "1")]
        pub retry_delay: Option<ProtoDuration>,
    }
    /// `google.protobuf.Duration`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProtoDuration {
        #[prost(int64, tag = "1")]
        pub seconds: i64,
        #[prost(int32, tag = "2")]
        pub nanos: i32,
    }
}

/// The `partial_success` of an encoded `ExportMetricsServiceResponse`, when populated
/// (rejected points, or a warning's message); a body that does not decode says nothing.
fn partial_success(body: &[u8]) -> Option<PartialSuccess> {
    let r = <wire::ExportMetricsServiceResponse as prost::Message>::decode(body).ok()?;
    let p = r.partial_success?;
    let some = p.rejected_data_points != 0 || !p.error_message.is_empty();
    some.then_some(PartialSuccess {
        rejected: p.rejected_data_points,
        message: p.error_message,
    })
}

/// The `retry_delay` of the `google.rpc.RetryInfo` among an encoded `google.rpc.Status`'s
/// details (gRPC's `grpc-status-details-bin`).
fn retry_info(details: &[u8]) -> Option<Duration> {
    use prost::Message;
    let status = wire::RpcStatus::decode(details).ok()?;
    let info = status
        .details
        .iter()
        .find(|a| a.type_url.ends_with("/google.rpc.RetryInfo"))?;
    let delay = wire::RetryInfo::decode(info.value.as_slice())
        .ok()?
        .retry_delay
        .unwrap_or_default();
    let secs = u64::try_from(delay.seconds).unwrap_or(0);
    let nanos = u32::try_from(delay.nanos).unwrap_or(0).min(999_999_999);
    Some(Duration::new(secs, nanos))
}

/// `Retry-After`: delta-seconds, or an HTTP-date (the wait until then; zero when past).
fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

pub(super) use rocewatch_runtime::util::error::chain;

// One transport lives per exporter for the life of the process: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Transport {
    Http {
        client: reqwest::blocking::Client,
        url: String,
    },
    Grpc {
        rt: tokio::runtime::Runtime,
        client: tonic::client::Grpc<tonic::transport::Channel>,
        headers: Vec<(
            tonic::metadata::AsciiMetadataKey,
            tonic::metadata::AsciiMetadataValue,
        )>,
        timeout: Duration,
        /// The service method: metrics' or logs' `Export`.
        path: &'static str,
    },
}

fn read_file(path: &std::path::Path, key: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))
}

impl Transport {
    /// The metrics' transport: to `endpoint`, the metrics service over gRPC.
    pub(super) fn build(cfg: &OtlpConfig) -> Result<Transport, String> {
        Self::build_to(cfg, cfg.endpoint.clone(), EXPORT_PATH)
    }

    /// The logs' transport (events): to [`OtlpConfig::logs_url`] (an error when none is
    /// known), the logs service
    /// over gRPC; the same TLS, headers, timeout and compression as the metrics'.
    pub(super) fn build_logs(cfg: &OtlpConfig) -> Result<Transport, String> {
        Self::build_to(cfg, cfg.logs_url()?, LOGS_EXPORT_PATH)
    }

    fn build_to(cfg: &OtlpConfig, url: String, path: &'static str) -> Result<Transport, String> {
        let tls = cfg.tls.clone().unwrap_or_default();
        let ca = tls
            .ca_file
            .as_deref()
            .map(|p| read_file(p, "exporters.otlp.tls.ca_file"))
            .transpose()?;
        let identity = match (&tls.cert_file, &tls.key_file) {
            (Some(c), Some(k)) => Some((
                read_file(c, "exporters.otlp.tls.cert_file")?,
                read_file(k, "exporters.otlp.tls.key_file")?,
            )),
            (None, None) => None,
            _ => return Err("exporters.otlp.tls: cert_file and key_file go together".into()),
        };
        match cfg.protocol {
            OtlpProtocol::HttpProtobuf => {
                let mut headers = reqwest::header::HeaderMap::new();
                for (k, v) in &cfg.headers {
                    let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| format!("exporters.otlp.headers: {k:?}: {e}"))?;
                    let value = reqwest::header::HeaderValue::from_str(v)
                        .map_err(|e| format!("exporters.otlp.headers.{k}: {e}"))?;
                    headers.insert(name, value);
                }
                let mut b = reqwest::blocking::Client::builder()
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout)
                    .user_agent(USER_AGENT)
                    .default_headers(headers)
                    .use_rustls_tls();
                if let Some(ca) = &ca {
                    let cert = reqwest::Certificate::from_pem(ca)
                        .map_err(|e| format!("exporters.otlp.tls.ca_file: {e}"))?;
                    b = b.add_root_certificate(cert);
                }
                if let Some((cert, key)) = &identity {
                    let mut pem = cert.clone();
                    pem.push(b'\n');
                    pem.extend_from_slice(key);
                    let id = reqwest::Identity::from_pem(&pem)
                        .map_err(|e| format!("exporters.otlp.tls.cert_file/key_file: {e}"))?;
                    b = b.identity(id);
                }
                let client = b.build().map_err(|e| format!("HTTP client: {e}"))?;
                Ok(Transport::Http { client, url })
            }
            OtlpProtocol::Grpc => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("runtime for gRPC: {e}"))?;
                let mut endpoint = tonic::transport::Endpoint::from_shared(url)
                    .map_err(|e| format!("exporters.otlp.endpoint: {e}"))?
                    .user_agent(USER_AGENT)
                    .map_err(|e| format!("user agent: {e}"))?
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout);
                if cfg.endpoint.starts_with("https://") || ca.is_some() || identity.is_some() {
                    let mut t = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
                    if let Some(ca) = &ca {
                        t = t.ca_certificate(tonic::transport::Certificate::from_pem(ca));
                    }
                    if let Some((cert, key)) = &identity {
                        t = t.identity(tonic::transport::Identity::from_pem(cert, key));
                    }
                    endpoint = endpoint
                        .tls_config(t)
                        .map_err(|e| format!("exporters.otlp.tls: {e}"))?;
                }
                let channel = {
                    let _guard = rt.enter();
                    endpoint.connect_lazy()
                };
                let mut client = tonic::client::Grpc::new(channel);
                if cfg.compression == Compression::Gzip {
                    client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                }
                let mut headers = Vec::new();
                for (k, v) in &cfg.headers {
                    let key = tonic::metadata::AsciiMetadataKey::from_bytes(
                        k.to_ascii_lowercase().as_bytes(),
                    )
                    .map_err(|e| format!("exporters.otlp.headers: {k:?}: {e}"))?;
                    let value = v
                        .parse()
                        .map_err(|e| format!("exporters.otlp.headers.{k}: {e}"))?;
                    headers.push((key, value));
                }
                Ok(Transport::Grpc {
                    rt,
                    client,
                    headers,
                    timeout: cfg.timeout,
                    path,
                })
            }
        }
    }

    /// Send an encoded `ExportMetricsServiceRequest`, gzip'd (one stream) when `gzip`.
    /// Taken: what the receiver said of it (`partial_success`), if anything.
    pub(super) fn send(
        &mut self,
        encoded: &Bytes,
        gzip: bool,
    ) -> Result<Option<PartialSuccess>, SendError> {
        match self {
            Transport::Http { client, url } => {
                let mut r = client
                    .post(url.as_str())
                    .header("content-type", "application/x-protobuf");
                if gzip {
                    r = r.header("content-encoding", "gzip");
                }
                match r.body(encoded.clone()).send() {
                    Ok(resp) if resp.status().is_success() => {
                        Ok(partial_success(&bounded_body(resp)))
                    }
                    Ok(resp) => Err(http_failure(url, resp)),
                    Err(e) => Err(SendError::Retryable(chain(&e), None)),
                }
            }
            Transport::Grpc {
                rt,
                client,
                headers,
                timeout,
                path,
            } => {
                // The queued bytes as they are: the request is already encoded (gRPC
                // compresses its own frames: a gzip'd body is inflated for it).
                let body = if gzip {
                    use std::io::Read;
                    let mut raw = Vec::new();
                    flate2::read::GzDecoder::new(encoded.as_ref())
                        .read_to_end(&mut raw)
                        .map_err(|e| SendError::Permanent(format!("queued snapshot: gzip: {e}")))?;
                    Bytes::from(raw)
                } else {
                    encoded.clone()
                };
                let mut request = tonic::Request::new(body);
                request.set_timeout(*timeout);
                for (k, v) in headers.iter() {
                    request.metadata_mut().insert(k.clone(), v.clone());
                }
                let call = async {
                    client.ready().await.map_err(|e| {
                        tonic::Status::unavailable(format!(
                            "the channel is not ready: {}",
                            chain(&e)
                        ))
                    })?;
                    client
                        .unary(
                            request,
                            tonic::codegen::http::uri::PathAndQuery::from_static(path),
                            RawCodec,
                        )
                        .await
                };
                match rt.block_on(call) {
                    Ok(response) => Ok(partial_success(response.get_ref())),
                    Err(status) => Err(grpc_failure(&status)),
                }
            }
        }
    }
}

/// What an HTTP failure says: retryable (429, 502, 503, 504, with `Retry-After`), too
/// large (413), or not to be retried (every other status); the message of its
/// `google.rpc.Status` body, or the start of a text one.
fn http_failure(url: &str, resp: reqwest::blocking::Response) -> SendError {
    let status = resp.status();
    let after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after(v, SystemTime::now()));
    let protobuf = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-protobuf"));
    let body = bounded_body(resp);
    let decoded = protobuf
        .then(|| <wire::RpcStatus as prost::Message>::decode(body.as_slice()).ok())
        .flatten()
        .filter(|s| !s.message.is_empty())
        .map(|s| s.message);
    let text: String = decoded
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned())
        .chars()
        .take(200)
        .collect();
    let msg = format!("{url}: HTTP {status}: {}", text.trim());
    match status.as_u16() {
        429 | 502 | 503 | 504 => SendError::Retryable(msg, after),
        413 => SendError::TooLarge(msg),
        _ => SendError::Permanent(msg),
    }
}

/// What a gRPC status says of a failed send, by the specification's table.
fn grpc_failure(status: &tonic::Status) -> SendError {
    use tonic::Code::*;
    let mut msg = format!("gRPC {:?}: {}", status.code(), status.message());
    // A status the client made of its own failure (a connection reset, a timeout, TLS)
    // carries its cause; one the server sent does not. The first is no answer at all,
    // retried whatever its code (hyper's errors come as UNKNOWN).
    if let Some(cause) = std::error::Error::source(status) {
        let cause = chain(cause);
        if !msg.contains(&cause) {
            msg = format!("{msg}: {cause}");
        }
        return SendError::Retryable(msg, None);
    }
    // grpc-go's servers (rpc_util.go) and tonic's (codec/decode.rs) say so in these words.
    let m = status.message();
    let too_large = m.contains("larger than max") || m.contains("message length too large");
    let after = retry_info(status.details());
    match status.code() {
        ResourceExhausted | OutOfRange if too_large => SendError::TooLarge(msg),
        Cancelled | DeadlineExceeded | Aborted | OutOfRange | Unavailable | DataLoss => {
            SendError::Retryable(msg, after)
        }
        ResourceExhausted if after.is_some() => SendError::Retryable(msg, after),
        _ => SendError::Permanent(msg),
    }
}

/// The most of a rejection's body that is read: its start says why; a receiver (broken
/// or hostile) that sends an endless body must not make the agent hold it.
const ERROR_BODY_MAX: u64 = 64 << 10;

/// The start of a response's body (at most [`ERROR_BODY_MAX`] bytes are read; the rest
/// is not: the connection is closed, never reused, when the response drops).
fn bounded_body(resp: reqwest::blocking::Response) -> Vec<u8> {
    use std::io::Read;
    let mut buf = Vec::new();
    // A read error keeps what came before it.
    let _ = resp.take(ERROR_BODY_MAX).read_to_end(&mut buf);
    buf
}

/// The OTLP/gRPC metrics method (`opentelemetry.proto.collector.metrics.v1.MetricsService`,
/// `Export`).
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
const LOGS_EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// A gRPC codec of bytes already encoded: the request goes out as queued (no decode
/// and encode again per send); the response (`ExportMetricsServiceResponse`: at most a
/// partial-success note) is handed back as its bytes.
#[derive(Clone, Copy, Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        // A response is a few bytes (a partial success's message at most): tonic bounds
        // what it decodes at 4 MiB.
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A receiver that answers 400 with an error body it streams without end: the send
    /// reads a bounded start of it and returns at once, with the start in its message,
    /// not after the whole timeout with everything the receiver sent held in memory.
    #[test]
    fn an_endless_error_body_is_read_only_to_a_bound() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            // The request: its head and the body of its content-length.
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = sock.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                req.extend_from_slice(&buf[..n]);
            }
            sock.write_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nbad request: ",
            )
            .unwrap();
            let chunk = vec![b'x'; 64 << 10];
            let mut sent = 0usize;
            while sock.write_all(&chunk).is_ok() {
                sent += chunk.len();
                // A bound on the test itself: far past what a bounded read takes.
                if sent > 4 << 30 {
                    break;
                }
            }
            sent
        });
        let mut cfg = OtlpConfig::new(
            format!("http://127.0.0.1:{port}/v1/metrics"),
            OtlpProtocol::HttpProtobuf,
        );
        cfg.timeout = Duration::from_secs(20);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut t = Transport::build(&cfg).unwrap();
            let started = std::time::Instant::now();
            let r = t.send(&Bytes::from_static(b"\x0a\x00"), false);
            let _ = tx.send((r, started.elapsed()));
        });
        let (r, took) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the send returned");
        let Err(SendError::Permanent(msg)) = r else {
            panic!("a 400 is a permanent rejection: {r:?}")
        };
        assert!(
            msg.contains("HTTP 400 Bad Request: bad request: xxx"),
            "{msg}"
        );
        assert!(msg.len() < 400, "the message keeps 200 characters: {msg}");
        assert!(took < Duration::from_secs(5), "the send took {took:?}");
        let sent = server.join().unwrap();
        assert!(
            sent < 64 << 20,
            "the receiver got {sent} bytes of its error body taken"
        );
    }

    /// A gRPC receiver's "message too large" (grpc-go's servers, the OpenTelemetry
    /// Collector's among them: RESOURCE_EXHAUSTED; tonic's: OUT_OF_RANGE) is a request to
    /// split, not an outage to retry as it is (one snapshot too large would be retried
    /// at the queue's head until the queue's bound dropped it with everything behind);
    /// a quota's RESOURCE_EXHAUSTED is still retried.
    #[test]
    fn a_grpc_message_too_large_is_told_from_an_outage() {
        let too_large = [
            tonic::Status::resource_exhausted(
                "grpc: received message larger than max (5242880 vs. 4194304)",
            ),
            tonic::Status::resource_exhausted(
                "grpc: received message after decompression larger than max (5242880 vs. 4194304)",
            ),
            tonic::Status::out_of_range(
                "Error, decoded message length too large: found 5242880 bytes, the limit is: 4194304 bytes",
            ),
        ];
        for s in &too_large {
            let got = grpc_failure(s);
            assert!(matches!(got, SendError::TooLarge(_)), "{s:?}: {got:?}");
        }
        let down = tonic::Status::unavailable("connection refused");
        assert!(matches!(grpc_failure(&down), SendError::Retryable(_, None)));
        let bad = tonic::Status::invalid_argument("bad");
        assert!(matches!(grpc_failure(&bad), SendError::Permanent(_)));
    }

    /// The specification's table of gRPC codes: retried or not; RESOURCE_EXHAUSTED
    /// retried only with a RetryInfo, whose delay is handed on (on any retried code).
    #[test]
    fn grpc_codes_are_retried_as_the_specification_says() {
        use tonic::Code;
        let retried = [
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unavailable,
            Code::DataLoss,
        ];
        let not = [
            Code::Unknown,
            Code::InvalidArgument,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Unimplemented,
            Code::Internal,
        ];
        for code in retried {
            let got = grpc_failure(&tonic::Status::new(code, "x"));
            assert!(
                matches!(got, SendError::Retryable(_, None)),
                "{code:?}: {got:?}"
            );
        }
        for code in not {
            let got = grpc_failure(&tonic::Status::new(code, "x"));
            assert!(matches!(got, SendError::Permanent(_)), "{code:?}: {got:?}");
        }
        let delay = Duration::new(20, 500_000_000);
        for code in [Code::ResourceExhausted, Code::Unavailable] {
            let got = grpc_failure(&with_retry_info(code, delay));
            assert!(
                matches!(got, SendError::Retryable(_, Some(d)) if d == delay),
                "{code:?}: {got:?}"
            );
        }
        // Details without a RetryInfo say nothing of recovery.
        let other = wire::RpcStatus {
            code: Code::ResourceExhausted as i32,
            message: "quota".into(),
            details: vec![wire::Any {
                type_url: "type.googleapis.com/google.rpc.QuotaFailure".into(),
                value: vec![],
            }],
        };
        let s = tonic::Status::with_details(
            Code::ResourceExhausted,
            "quota",
            prost::Message::encode_to_vec(&other).into(),
        );
        assert!(matches!(grpc_failure(&s), SendError::Permanent(_)));
        // A status the client made of its own failure carries its cause: no answer came,
        // whatever the code says (hyper's errors come as UNKNOWN).
        let local = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        )));
        let got = grpc_failure(&local);
        assert!(
            matches!(&got, SendError::Retryable(m, None) if m.contains("connection reset by peer")),
            "{got:?}"
        );
    }

    fn with_retry_info(code: tonic::Code, delay: Duration) -> tonic::Status {
        use prost::Message;
        let info = wire::RetryInfo {
            retry_delay: Some(wire::ProtoDuration {
                seconds: delay.as_secs() as i64,
                nanos: delay.subsec_nanos() as i32,
            }),
        };
        let status = wire::RpcStatus {
            code: code as i32,
            message: "slow down".into(),
            details: vec![wire::Any {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info.encode_to_vec(),
            }],
        };
        tonic::Status::with_details(code, "slow down", status.encode_to_vec().into())
    }

    /// `Retry-After` as RFC 9110 has it: delta-seconds or an HTTP-date; a date past is
    /// no wait; anything else is not read.
    #[test]
    fn retry_after_is_read_in_both_forms() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(retry_after("20", now), Some(Duration::from_secs(20)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("-3", now), None);
        assert_eq!(retry_after("soon", now), None);
    }

    /// A response's `partial_success`: rejected points or a warning are handed back; an
    /// empty body, an unset field or a body that is not protobuf say nothing.
    #[test]
    fn partial_success_is_read_from_the_response() {
        use prost::Message;
        let body = wire::ExportMetricsServiceResponse {
            partial_success: Some(wire::ExportMetricsPartialSuccess {
                rejected_data_points: 7,
                error_message: "too old".into(),
            }),
        }
        .encode_to_vec();
        assert_eq!(
            partial_success(&body),
            Some(PartialSuccess {
                rejected: 7,
                message: "too old".into()
            })
        );
        let empty = wire::ExportMetricsServiceResponse {
            partial_success: Some(Default::default()),
        }
        .encode_to_vec();
        assert_eq!(partial_success(&empty), None);
        assert_eq!(partial_success(b""), None);
        assert_eq!(partial_success(b"{\"partialSuccess\":{}}"), None);
    }

    /// A refused connection is said with its cause, not only reqwest's "error sending
    /// request for url".
    #[test]
    fn an_unreachable_endpoint_is_said_with_its_cause() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let cfg = OtlpConfig::new(
            format!("http://127.0.0.1:{port}/v1/metrics"),
            OtlpProtocol::HttpProtobuf,
        );
        let mut t = Transport::build(&cfg).unwrap();
        let got = t.send(&Bytes::from_static(b""), false);
        let Err(SendError::Retryable(msg, None)) = got else {
            panic!("{got:?}")
        };
        assert!(msg.contains("error sending request"), "{msg}");
        assert!(msg.to_lowercase().contains("connection refused"), "{msg}");
    }
}
