//! The agent's own logs over OTLP (`[exporters.otlp] agent_logs = true`), through the
//! binary: an in-test OTLP/HTTP receiver decodes the `ExportLogsServiceRequest`s that
//! arrive at `/v1/logs` (the metrics endpoint's base) and finds the agent's start and
//! shutdown lines with the metrics' resource; without `agent_logs` nothing arrives there;
//! a receiver that never answers neither holds the agent's shutdown nor makes it log into
//! itself.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

use crate::support::*;

/// What the receiver got: each request's path and body.
pub(crate) type Requests = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on 127.0.0.1:0 that answers 200 to every request (keep-alive,
/// uncompressed bodies: the tests ask for `compression = "none"`); its port and what it
/// got.
pub(crate) fn receiver() -> (u16, Requests) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got: Requests = Arc::default();
    let seen = Arc::clone(&got);
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || serve(sock, &seen));
        }
    });
    (port, got)
}

fn serve(sock: std::net::TcpStream, seen: &Mutex<Vec<(String, Vec<u8>)>>) -> std::io::Result<()> {
    let mut r = BufReader::new(sock.try_clone()?);
    let mut w = sock;
    loop {
        let mut request_line = String::new();
        if r.read_line(&mut request_line)? == 0 {
            return Ok(()); // the client closed its connection
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let mut len = 0;
        loop {
            let mut line = String::new();
            r.read_line(&mut line)?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse::<usize>().unwrap_or(0);
            }
            assert!(
                !lower.starts_with("content-encoding:"),
                "the test asks for uncompressed requests: {line}"
            );
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
        seen.lock().unwrap().push((path, body));
        w.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        )?;
    }
}

/// One log record as the test reads it.
#[derive(Debug)]
struct Record {
    resource: Vec<(String, String)>,
    severity: String,
    body: String,
}

fn strings(attrs: &[KeyValue]) -> Vec<(String, String)> {
    attrs
        .iter()
        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some((kv.key.clone(), s.clone())),
            _ => None,
        })
        .collect()
}

/// Every log record of the requests at `/v1/logs`.
fn log_records(got: &Requests) -> Vec<Record> {
    let mut out = Vec::new();
    for (path, body) in got.lock().unwrap().iter() {
        if path != "/v1/logs" {
            continue;
        }
        let req = ExportLogsServiceRequest::decode(body.as_slice())
            .unwrap_or_else(|e| panic!("an ExportLogsServiceRequest at /v1/logs: {e}"));
        for rl in req.resource_logs {
            let resource = strings(&rl.resource.map(|r| r.attributes).unwrap_or_default());
            for sl in rl.scope_logs {
                for lr in sl.log_records {
                    let body = match lr.body.and_then(|b| b.value) {
                        Some(Value::StringValue(s)) => s,
                        other => format!("{other:?}"),
                    };
                    out.push(Record {
                        resource: resource.clone(),
                        severity: lr.severity_text,
                        body,
                    });
                }
            }
        }
    }
    out
}

fn config(port: u16, extra: &str) -> String {
    format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\nhost_name = \"logs-test-host\"\n\n\
         [exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}/v1/metrics\"\ninterval = \"300ms\"\n\
         compression = \"none\"\n{extra}",
        fixture("mlx5-roce-dual-port")
    )
}

fn start(config: &str) -> (RunningAgent, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rw.toml");
    std::fs::write(&cfg, config).unwrap();
    (
        RunningAgent::start(&["--config", cfg.to_str().unwrap()]),
        dir,
    )
}

#[test]
fn agent_logs_arrive_as_otlp_logs_with_the_metrics_resource() {
    let (port, got) = receiver();
    let (mut rw, _cfg) = start(&config(port, "agent_logs = true\n"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = |records: &[Record]| {
        records
            .iter()
            .any(|r| r.body.contains("exporting over OTLP"))
    };
    while Instant::now() < deadline && !started(&log_records(&got)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, log, took) = rw.proc.stop();
    assert!(status.success(), "{log}");
    let records = log_records(&got);
    let start_line = records
        .iter()
        .find(|r| r.body.contains("exporting over OTLP"))
        .unwrap_or_else(|| panic!("the start line at /v1/logs: {records:#?}\n{log}"));
    assert_eq!(start_line.severity, "INFO", "{start_line:?}");
    for (k, v) in [
        ("service.name", "rocewatch"),
        ("host.name", "logs-test-host"),
    ] {
        assert!(
            start_line
                .resource
                .contains(&(k.to_string(), v.to_string())),
            "{k}={v} in {start_line:?}"
        );
    }
    // Logged while the agent stops: flushed before it exits.
    assert!(
        records
            .iter()
            .any(|r| r.body.contains("final OTLP export done")),
        "the shutdown line at /v1/logs: {records:#?}\n{log}"
    );
    // Still on standard error as well.
    assert!(log.contains("exporting over OTLP"), "{log}");
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    // The metrics still go to their own path.
    assert!(got.lock().unwrap().iter().any(|(p, _)| p == "/v1/metrics"));
}

#[test]
fn without_agent_logs_nothing_arrives_at_v1_logs() {
    let (port, got) = receiver();
    let (mut rw, _cfg) = start(&config(port, ""));
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = || {
        got.lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == "/v1/metrics")
            .count()
    };
    while Instant::now() < deadline && metrics() < 3 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, log, _) = rw.proc.stop();
    assert!(status.success(), "{log}");
    assert!(metrics() >= 3, "metrics exported\n{log}");
    let paths: Vec<String> = got.lock().unwrap().iter().map(|(p, _)| p.clone()).collect();
    assert!(
        paths.iter().all(|p| p == "/v1/metrics"),
        "only metrics without agent_logs: {paths:?}"
    );
}

/// A receiver that takes connections and never answers: the agent runs on, its shutdown
/// is bounded, and the exporter's own failures reach standard error only (never the
/// exporter again, which would be a loop).
#[test]
fn a_receiver_that_never_answers_holds_nothing() {
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = blackhole.local_addr().unwrap().port();
    let (mut rw, _cfg) = start(&config(port, "timeout = \"1s\"\nagent_logs = true\n"));
    std::thread::sleep(Duration::from_secs(4));
    assert!(rw.proc.alive(), "{}", rw.stderr());
    let (status, log, took) = rw.proc.stop();
    assert!(status.success(), "{log}");
    assert!(
        took < Duration::from_secs(15),
        "shutdown took {took:?}\n{log}"
    );
    assert!(
        log.lines().count() < 200,
        "{} lines of log in 4 s: a loop?\n{log}",
        log.lines().count()
    );
    drop(blackhole);
}

mod grpc {
    //! An OTLP/gRPC receiver of logs and metrics on one port, requiring TLS with a client
    //! certificate, recording each logs request with its `authorization` metadata.

    use std::sync::{Arc, Mutex};

    use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
        LogsService, LogsServiceServer,
    };
    use opentelemetry_proto::tonic::collector::logs::v1::{
        ExportLogsServiceRequest, ExportLogsServiceResponse,
    };
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
        MetricsService, MetricsServiceServer,
    };
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    };

    pub type Received = Arc<Mutex<Vec<(Option<String>, ExportLogsServiceRequest)>>>;

    #[derive(Clone, Default)]
    struct Receiver(Received);

    #[tonic::async_trait]
    impl LogsService for Receiver {
        async fn export(
            &self,
            request: tonic::Request<ExportLogsServiceRequest>,
        ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
            let auth = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            self.0.lock().unwrap().push((auth, request.into_inner()));
            Ok(tonic::Response::new(ExportLogsServiceResponse {
                partial_success: None,
            }))
        }
    }

    #[tonic::async_trait]
    impl MetricsService for Receiver {
        async fn export(
            &self,
            _request: tonic::Request<ExportMetricsServiceRequest>,
        ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
            Ok(tonic::Response::new(ExportMetricsServiceResponse {
                partial_success: None,
            }))
        }
    }

    pub fn start(rt: &tokio::runtime::Runtime, pki: &crate::support::Pki) -> (u16, Received) {
        let received = Received::default();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let listener = {
            let _guard = rt.enter();
            tokio::net::TcpListener::from_std(listener).unwrap()
        };
        let port = listener.local_addr().unwrap().port();
        let gz = tonic::codec::CompressionEncoding::Gzip;
        let logs = LogsServiceServer::new(Receiver(received.clone())).accept_compressed(gz);
        let metrics = MetricsServiceServer::new(Receiver(received.clone())).accept_compressed(gz);
        let tls = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                std::fs::read(&pki.server_cert).unwrap(),
                std::fs::read(&pki.server_key).unwrap(),
            ))
            .client_ca_root(tonic::transport::Certificate::from_pem(
                std::fs::read(&pki.ca).unwrap(),
            ));
        let mut builder = tonic::transport::Server::builder().tls_config(tls).unwrap();
        rt.spawn(async move {
            builder
                .add_service(logs)
                .add_service(metrics)
                .serve_with_incoming(
                    tonic::codegen::tokio_stream::wrappers::TcpListenerStream::new(listener),
                )
                .await
                .unwrap();
        });
        (port, received)
    }
}

/// gRPC, with the metrics' TLS (a private CA, a client certificate) and headers: the
/// logs arrive at the same endpoint, gzip-compressed, with the configured metadata.
#[test]
fn agent_logs_over_grpc_with_tls_and_headers() {
    let rt = runtime();
    let pki = pki();
    let (port, got) = grpc::start(&rt, &pki);
    let (mut rw, _cfg) = start(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\nhost_name = \"logs-test-host\"\n\n\
         [exporters.otlp]\nendpoint = \"https://localhost:{port}\"\nprotocol = \"grpc\"\n\
         interval = \"300ms\"\nagent_logs = true\n\
         [exporters.otlp.headers]\nauthorization = \"Bearer logs-token\"\n\
         [exporters.otlp.tls]\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n",
        fixture("mlx5-roce-dual-port"),
        pki.ca,
        pki.client_cert,
        pki.client_key,
    ));
    let bodies = || -> Vec<(Option<String>, String)> {
        let mut out = Vec::new();
        for (auth, req) in got.lock().unwrap().iter() {
            for rl in &req.resource_logs {
                for sl in &rl.scope_logs {
                    for lr in &sl.log_records {
                        if let Some(Value::StringValue(s)) =
                            lr.body.as_ref().and_then(|b| b.value.as_ref())
                        {
                            out.push((auth.clone(), s.clone()));
                        }
                    }
                }
            }
        }
        out
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline
        && !bodies()
            .iter()
            .any(|(_, b)| b.contains("exporting over OTLP"))
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, log, took) = rw.proc.stop();
    assert!(status.success(), "{log}");
    let got_bodies = bodies();
    let start_line = got_bodies
        .iter()
        .find(|(_, b)| b.contains("exporting over OTLP"))
        .unwrap_or_else(|| panic!("the start line over gRPC: {got_bodies:#?}\n{log}"));
    assert_eq!(start_line.0.as_deref(), Some("Bearer logs-token"));
    assert!(
        got_bodies
            .iter()
            .any(|(_, b)| b.contains("final OTLP export done")),
        "the shutdown line over gRPC: {got_bodies:#?}\n{log}"
    );
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
}
