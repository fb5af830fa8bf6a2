//! The OTLP transports: OTLP/HTTP (protobuf, optionally gzip) and OTLP/gRPC, with TLS,
//! sending an encoded `ExportMetricsServiceRequest` and classifying failures.

use hyper::body::Bytes;
use std::time::Duration;

use super::config::{Compression, OtlpConfig, OtlpProtocol};

/// Why a send failed.
#[derive(Debug)]
pub(super) enum SendError {
    /// Worth trying again later (endpoint down, slow, overloaded).
    Retryable(String),
    /// The receiver rejected the data; sending it again would not help.
    Permanent(String),
    /// The receiver refused the request as too large (HTTP 413): fewer snapshots a
    /// request may be taken.
    TooLarge(String),
}

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
    },
}

fn read_file(path: &std::path::Path, key: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))
}

impl Transport {
    pub(super) fn build(cfg: &OtlpConfig) -> Result<Transport, String> {
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
                Ok(Transport::Http {
                    client,
                    url: cfg.endpoint.clone(),
                })
            }
            OtlpProtocol::Grpc => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("runtime for gRPC: {e}"))?;
                let mut endpoint = tonic::transport::Endpoint::from_shared(cfg.endpoint.clone())
                    .map_err(|e| format!("exporters.otlp.endpoint: {e}"))?
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
                })
            }
        }
    }

    /// Send an encoded `ExportMetricsServiceRequest`, gzip'd (one stream) when `gzip`.
    pub(super) fn send(&mut self, encoded: &Bytes, gzip: bool) -> Result<(), SendError> {
        match self {
            Transport::Http { client, url } => {
                let mut r = client
                    .post(url.as_str())
                    .header("content-type", "application/x-protobuf");
                if gzip {
                    r = r.header("content-encoding", "gzip");
                }
                match r.body(encoded.clone()).send() {
                    Ok(resp) if resp.status().is_success() => Ok(()),
                    Ok(resp) => {
                        let status = resp.status();
                        let text: String = error_body(resp).chars().take(200).collect();
                        let msg = format!("{url}: HTTP {status}: {}", text.trim());
                        if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
                            Err(SendError::Retryable(msg))
                        } else if status.as_u16() == 413 {
                            Err(SendError::TooLarge(msg))
                        } else {
                            Err(SendError::Permanent(msg))
                        }
                    }
                    Err(e) => Err(SendError::Retryable(format!("{url}: {e}"))),
                }
            }
            Transport::Grpc {
                rt,
                client,
                headers,
                timeout,
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
                        tonic::Status::unavailable(format!("the channel is not ready: {e}"))
                    })?;
                    client
                        .unary(
                            request,
                            tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT_PATH),
                            RawCodec,
                        )
                        .await
                };
                match rt.block_on(call) {
                    Ok(_) => Ok(()),
                    Err(status) => Err(grpc_failure(&status)),
                }
            }
        }
    }
}

/// What a gRPC status says of a failed send.
fn grpc_failure(status: &tonic::Status) -> SendError {
    use tonic::Code::*;
    let msg = format!("gRPC {:?}: {}", status.code(), status.message());
    // grpc-go's servers (rpc_util.go) and tonic's (codec/decode.rs) say so in these words.
    let m = status.message();
    let too_large = m.contains("larger than max") || m.contains("message length too large");
    match status.code() {
        ResourceExhausted | OutOfRange if too_large => SendError::TooLarge(msg),
        Cancelled | DeadlineExceeded | ResourceExhausted | Aborted | OutOfRange | Unavailable
        | DataLoss | Unknown => SendError::Retryable(msg),
        _ => SendError::Permanent(msg),
    }
}

/// The most of a rejection's body that is read: its start says why; a receiver (broken
/// or hostile) that sends an endless body must not make the agent hold it.
const ERROR_BODY_MAX: u64 = 64 << 10;

/// The start of a rejection's body, as text (at most [`ERROR_BODY_MAX`] bytes are read;
/// the rest is not: the connection is closed, never reused, when the response drops).
fn error_body(resp: reqwest::blocking::Response) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    // A read error keeps what came before it.
    let _ = resp.take(ERROR_BODY_MAX).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// The OTLP/gRPC metrics method (`opentelemetry.proto.collector.metrics.v1.MetricsService`,
/// `Export`).
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// A gRPC codec of bytes already encoded: the request goes out as queued (no decode
/// and encode again per send); the response (`ExportMetricsServiceResponse`: at most a
/// partial-success note) is read and let go.
#[derive(Clone, Copy, Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ();
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
    type Item = ();
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        use bytes::Buf;
        src.advance(src.remaining());
        Ok(Some(()))
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
        let quota = tonic::Status::resource_exhausted("quota exceeded");
        assert!(matches!(grpc_failure(&quota), SendError::Retryable(_)));
        let down = tonic::Status::unavailable("connection refused");
        assert!(matches!(grpc_failure(&down), SendError::Retryable(_)));
        let bad = tonic::Status::invalid_argument("bad");
        assert!(matches!(grpc_failure(&bad), SendError::Permanent(_)));
    }
}
