//! The OpenTelemetry environment variables through the binary: each one set, and an
//! in-test receiver (OTLP/HTTP on 127.0.0.1:0, recording path, headers and body; the
//! gRPC one of `support` with mutual TLS) gets what it says, logs at the logs endpoint. Their precedence against the
//! file and `ROCEWATCH_*`, the switches that turn OTLP off, and `config check` saying
//! where each OTLP value came from.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;

use crate::support::*;

/// One request as the receiver read it.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    /// Header names lowercased.
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
    at: Instant,
}

impl Request {
    fn decode(&self) -> ExportMetricsServiceRequest {
        assert!(
            !self.headers.contains_key("content-encoding"),
            "asked for uncompressed requests: {:?}",
            self.headers
        );
        ExportMetricsServiceRequest::decode(self.body.as_slice()).expect("an OTLP metrics request")
    }
}

type Seen = Arc<Mutex<Vec<Request>>>;

/// An OTLP/HTTP receiver on 127.0.0.1:0 answering 200 to every request (`answer`
/// false: it reads requests and never answers, as a receiver that hangs). HTTP/1.1 with
/// keep-alive, bodies by content-length (what the agent sends).
mod http_receiver {
    use std::io::{BufRead, BufReader, Read, Write};

    use super::{Request, Seen};

    fn serve(sock: std::net::TcpStream, answer: bool, seen: &Seen) -> std::io::Result<()> {
        let mut r = BufReader::new(sock.try_clone()?);
        let mut w = sock;
        loop {
            let mut first = String::new();
            if r.read_line(&mut first)? == 0 {
                return Ok(());
            }
            let mut parts = first.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let path = parts.next().unwrap_or_default().to_string();
            let mut headers = std::collections::BTreeMap::new();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line)? == 0 {
                    return Ok(());
                }
                if line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                }
            }
            let len: usize = headers
                .get("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            r.read_exact(&mut body)?;
            seen.lock().unwrap().push(Request {
                method,
                path,
                headers,
                body,
                at: std::time::Instant::now(),
            });
            if answer {
                w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")?;
            }
        }
    }

    /// Its port and what it has seen.
    pub fn start(answer: bool) -> (u16, Seen) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Seen::default();
        let s = seen.clone();
        std::thread::spawn(move || {
            for sock in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = serve(sock, answer, &s);
                });
            }
        });
        (port, seen)
    }
}

/// The agent on the dual-port fixture with `args` and `env`, and a configuration file
/// `toml` when given.
fn agent(
    toml: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> (RunningAgent, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("mlx5-roce-dual-port");
    let mut all = vec![
        "--sysfs-root".to_string(),
        root.display().to_string(),
        "--interval".into(),
        "200ms".into(),
    ];
    if let Some(t) = toml {
        let f = dir.path().join("rw.toml");
        std::fs::write(&f, t).unwrap();
        all.extend(["--config".to_string(), f.display().to_string()]);
    }
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    (RunningAgent::start_with(&all, env, None), dir)
}

/// Wait until `seen` holds `n` requests (or `within` passes); what it holds.
fn wait_for(seen: &Seen, n: usize, within: Duration) -> Vec<Request> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && seen.lock().unwrap().len() < n {
        std::thread::sleep(Duration::from_millis(50));
    }
    seen.lock().unwrap().clone()
}

fn resource(r: &ExportMetricsServiceRequest) -> BTreeMap<String, String> {
    r.resource_metrics[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some((kv.key.clone(), s.clone())),
            _ => None,
        })
        .collect()
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT` alone (no `[exporters.otlp]`) turns OTLP on, with
/// `/v1/metrics` appended to the base URL; headers percent-decoded, compression,
/// interval, service name and resource attributes (a user's `host.name` wins over
/// rocewatch's) and the cumulative temporality arrive as the variables say.
#[test]
fn otel_endpoint_alone_exports_to_v1_metrics_as_the_variables_say() {
    let (port, seen) = http_receiver::start(true);
    let base = format!("http://127.0.0.1:{port}");
    let (mut rw, _dir) = agent(
        None,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &base),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "X-Scope-OrgID=tenant%201, dd-api-key=k3y%3D",
            ),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
            ("OTEL_SERVICE_NAME", "rdma-fabric"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "host.name=node-7,deployment.environment.name=prod",
            ),
            (
                "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                "Cumulative",
            ),
        ],
    );
    let got = wait_for(&seen, 4, Duration::from_secs(15));
    let (status, log, _) = rw.proc.stop();
    assert!(got.len() >= 4, "{} requests\n{log}", got.len());
    // Every 300 ms, not the default 10 s: four requests within 3 s of the first.
    assert!(
        got[3].at.duration_since(got[0].at) < Duration::from_secs(3),
        "{:?}",
        got.iter().map(|r| r.at).collect::<Vec<_>>()
    );
    let r = &got[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/metrics")
    );
    assert_eq!(r.headers["x-scope-orgid"], "tenant 1");
    assert_eq!(r.headers["dd-api-key"], "k3y=");
    let req = r.decode();
    let res = resource(&req);
    assert_eq!(res["service.name"], "rdma-fabric", "{res:?}");
    assert_eq!(res["host.name"], "node-7", "{res:?}");
    assert_eq!(res["deployment.environment.name"], "prod", "{res:?}");
    let sums: Vec<i32> = req.resource_metrics[0]
        .scope_metrics
        .iter()
        .flat_map(|s| &s.metrics)
        .filter_map(|m| match &m.data {
            Some(Data::Sum(s)) => Some(s.aggregation_temporality),
            _ => None,
        })
        .collect();
    assert!(!sums.is_empty() && sums.iter().all(|t| *t == 2), "{sums:?}");
    assert!(status.success(), "{log}");
}

/// The signal-specific endpoint is used as is and wins over the general one; gzip as
/// the variable asks.
#[test]
fn the_metrics_endpoint_is_used_as_is_and_wins_over_the_general_one() {
    let (port, seen) = http_receiver::start(true);
    let (other, other_seen) = http_receiver::start(true);
    let (mut rw, _dir) = agent(
        None,
        &[],
        &[
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                &format!("http://127.0.0.1:{port}/tenant/a"),
            ),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("http://127.0.0.1:{other}"),
            ),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
        ],
    );
    let got = wait_for(&seen, 2, Duration::from_secs(15));
    let (status, log, _) = rw.proc.stop();
    assert!(got.len() >= 2, "{log}");
    assert!(got.iter().all(|r| r.path == "/tenant/a"), "{got:?}");
    assert_eq!(got[0].headers["content-encoding"], "gzip");
    assert_eq!(&got[0].body[..2], &[0x1f, 0x8b], "a gzip stream");
    // No metrics at the general one (it is the logs' base, as the specification has it).
    let other = other_seen.lock().unwrap();
    assert!(other.iter().all(|r| r.path != "/v1/metrics"), "{other:?}");
    assert!(status.success(), "{log}");
}

/// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` is where logs go, used as is (the agent's own logs
/// here), beside a signal-specific metrics endpoint; `config check` says where it came
/// from. With the metrics' endpoint alone, of a path that is not `.../v1/metrics`, no logs
/// URL is invented (it was `.../tenant/a/v1/logs`): `config check` says none with the
/// fix, and `agent_logs = true` is refused at start, naming the variable and the key.
#[test]
fn the_logs_endpoint_variable_is_where_logs_go() {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    let (port, seen) = http_receiver::start(true);
    let metrics = format!("http://127.0.0.1:{port}/tenant/a");
    let logs = format!("http://127.0.0.1:{port}/ingest/logs");
    let toml =
        "[exporters.otlp]\nagent_logs = true\ncompression = \"none\"\ninterval = \"300ms\"\n";
    let vars = [
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", metrics.as_str()),
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", logs.as_str()),
    ];
    let (mut rw, dir) = agent(Some(toml), &[], &vars);
    let deadline = Instant::now() + Duration::from_secs(20);
    let paths = || -> Vec<String> {
        seen.lock()
            .unwrap()
            .iter()
            .map(|r| r.path.clone())
            .collect()
    };
    while Instant::now() < deadline
        && !(paths().iter().any(|p| p == "/ingest/logs")
            && paths().iter().any(|p| p == "/tenant/a"))
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, log, _) = rw.proc.stop();
    let got = seen.lock().unwrap().clone();
    let records: usize = got
        .iter()
        .filter(|r| r.path == "/ingest/logs")
        .map(|r| {
            ExportLogsServiceRequest::decode(r.body.as_slice())
                .expect("an OTLP logs request")
                .resource_logs
                .iter()
                .flat_map(|rl| &rl.scope_logs)
                .map(|sl| sl.log_records.len())
                .sum::<usize>()
        })
        .sum();
    assert!(
        records > 0,
        "no log records at /ingest/logs: {:?}\n{log}",
        paths()
    );
    assert!(
        got.iter()
            .all(|r| r.path == "/ingest/logs" || r.path == "/tenant/a"),
        "{:?}",
        paths()
    );
    assert!(status.success(), "{log}");

    let f = dir.path().join("rw.toml");
    let file = f.to_str().unwrap();
    let o = rocewatch(&["config", "check", file], &vars);
    assert!(o.status.success(), "{}", stderr(&o));
    let want =
        format!("exporters.otlp.logs_endpoint = {logs:?} (OTEL_EXPORTER_OTLP_LOGS_ENDPOINT)");
    assert!(
        stdout(&o).lines().any(|l| l == want),
        "{want}\n{}",
        stdout(&o)
    );

    // The metrics' endpoint alone: none, and the fix.
    let alone = [vars[0]];
    let o = rocewatch(&["config", "check", file], &alone);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("exporters.otlp.logs_endpoint = none (")
                && l.contains("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")),
        "{out}"
    );
    let root = fixture("mlx5-roce-dual-port");
    let o = rocewatch(
        &[
            "run",
            "--config",
            file,
            "--sysfs-root",
            root.to_str().unwrap(),
            "--duration",
            "5s",
        ],
        &alone,
    );
    let e = stderr(&o);
    assert!(
        !o.status.success(),
        "agent_logs with no logs endpoint ran\n{e}"
    );
    assert!(
        e.contains("exporters.otlp.agent_logs: where logs go is not known")
            && e.contains("exporters.otlp.logs_endpoint or OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"),
        "{e}"
    );
    assert!(
        !seen
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.path.ends_with("/v1/logs")),
        "a logs path invented: {:?}",
        paths()
    );
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` with the certificate variables: mutual TLS to a
/// gRPC receiver that requires a client certificate, the header as gRPC metadata.
#[test]
fn grpc_with_mutual_tls_and_headers_from_the_variables() {
    let rt = runtime();
    let pki = pki();
    let (port, received) =
        grpc_receiver::start(&rt, 0, Some((&pki.ca, &pki.server_cert, &pki.server_key)));
    let (mut rw, _dir) = agent(
        None,
        &[],
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("https://127.0.0.1:{port}"),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.ca.to_str().unwrap()),
            (
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                pki.client_cert.to_str().unwrap(),
            ),
            (
                "OTEL_EXPORTER_OTLP_CLIENT_KEY",
                pki.client_key.to_str().unwrap(),
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t0ken"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && received.lock().unwrap().is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, log, _) = rw.proc.stop();
    let got = received.lock().unwrap().clone();
    assert!(!got.is_empty(), "nothing arrived over mutual TLS: {log}");
    assert!(
        got.iter()
            .all(|(auth, _)| auth.as_deref() == Some("Bearer t0ken")),
        "{:?}",
        got.iter().map(|(a, _)| a).collect::<Vec<_>>()
    );
    assert!(status.success(), "{log}");
    rt.shutdown_background();
}

/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds) bounds each request: a receiver that never
/// answers sees the request again after the timeout and the retry delay (1 s), where the
/// default 10 s timeout would leave it one request in this time.
#[test]
fn the_timeout_variable_bounds_each_request() {
    let (port, seen) = http_receiver::start(false);
    let (rw, _dir) = agent(
        None,
        &[],
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("http://127.0.0.1:{port}"),
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "400"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
        ],
    );
    let first = wait_for(&seen, 1, Duration::from_secs(15));
    assert!(!first.is_empty(), "{}", rw.stderr());
    let got = wait_for(&seen, 3, Duration::from_secs(6));
    let log = rw.stderr();
    drop(rw);
    assert!(got.len() >= 3, "{} requests in 6 s\n{log}", got.len());
}

/// The file wins over `OTEL_*` (its base URL gets `/v1/metrics`), `ROCEWATCH_*` over the
/// file, and header names from `ROCEWATCH_` variables have `-` for `_`
/// (`X-Scope-OrgID`, `dd-api-key`); OTEL headers the file does not name are added.
#[test]
fn the_file_wins_over_otel_and_rocewatch_variables_over_the_file() {
    let (port, seen) = http_receiver::start(true);
    let (otel_port, otel_seen) = http_receiver::start(true);
    let toml = format!(
        "[exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}\"\ninterval = \"300ms\"\ncompression = \"none\"\n\
         headers = {{ x-scope-orgid = \"from-file\", x-kept = \"file\" }}\n"
    );
    let (mut rw, _dir) = agent(
        Some(&toml),
        &[],
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("http://127.0.0.1:{otel_port}"),
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-kept=otel,x-extra=otel"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "60000"),
            (
                "ROCEWATCH_EXPORTERS__OTLP__HEADERS__X_SCOPE_ORGID",
                "from-env",
            ),
            ("ROCEWATCH_EXPORTERS__OTLP__HEADERS__DD_API_KEY", "42"),
        ],
    );
    let got = wait_for(&seen, 2, Duration::from_secs(15));
    let (status, log, _) = rw.proc.stop();
    assert!(
        got.len() >= 2,
        "the file's interval (300ms), not OTEL's (60s)\n{log}"
    );
    let h = &got[0].headers;
    assert_eq!(got[0].path, "/v1/metrics");
    assert_eq!(h["x-scope-orgid"], "from-env");
    assert_eq!(h["dd-api-key"], "42");
    assert!(!h.contains_key("x_scope_orgid"), "{h:?}");
    assert_eq!(h["x-kept"], "file");
    assert_eq!(h["x-extra"], "otel");
    got[0].decode();
    assert!(otel_seen.lock().unwrap().is_empty());
    assert!(status.success(), "{log}");
}

/// `OTEL_SDK_DISABLED=true` and `OTEL_METRICS_EXPORTER=none` turn off the OTLP export the
/// file turns on, said once; `--otlp-endpoint` turns it on again.
#[test]
fn the_switches_turn_otlp_off_and_a_flag_on_again() {
    for switch in [
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ] {
        let (port, seen) = http_receiver::start(true);
        let toml = format!(
            "[exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}/v1/metrics\"\ninterval = \"200ms\"\n\
             [exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n"
        );
        let (mut rw, _dir) = agent(Some(&toml), &[], &[switch]);
        std::thread::sleep(Duration::from_secs(2));
        let (status, log, _) = rw.proc.stop();
        assert!(seen.lock().unwrap().is_empty(), "{switch:?}\n{log}");
        let said = format!("OTLP export off ({}={})", switch.0, switch.1);
        assert_eq!(log.matches(&said).count(), 1, "{said}\n{log}");
        assert!(status.success(), "{log}");

        let (flag_port, flag_seen) = http_receiver::start(true);
        let url = format!("http://127.0.0.1:{flag_port}");
        let (mut rw, _dir) = agent(
            Some(&toml),
            &["--otlp-endpoint", &url, "--export-interval", "200ms"],
            &[switch],
        );
        let got = wait_for(&flag_seen, 1, Duration::from_secs(15));
        let (status, log, _) = rw.proc.stop();
        assert_eq!(
            got.first().map(|r| r.path.as_str()),
            Some("/v1/metrics"),
            "{log}"
        );
        assert!(status.success(), "{log}");
    }
}

/// `config check` prints each OTLP value with where it came from, header values not
/// shown; a value that cannot be used names its variable.
#[test]
fn config_check_says_where_each_otlp_value_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rw.toml");
    std::fs::write(
        &f,
        "[exporters.otlp]\nendpoint = \"http://collector:4318/\"\nqueue_size = 30\n",
    )
    .unwrap();
    let file = f.to_str().unwrap();
    let o = rocewatch(
        &["config", "check", file],
        &[
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20secret",
            ),
            ("ROCEWATCH_EXPORTERS__OTLP__INTERVAL", "30s"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        format!("exporters.otlp.endpoint = \"http://collector:4318/v1/metrics\" ({file}, /v1/metrics appended)"),
        "exporters.otlp.timeout = \"2500ms\" (OTEL_EXPORTER_OTLP_TIMEOUT)".into(),
        "exporters.otlp.interval = \"30s\" (ROCEWATCH_EXPORTERS__OTLP__INTERVAL)".into(),
        "exporters.otlp.protocol = \"http/protobuf\" (default)".into(),
        format!("exporters.otlp.queue_size = 30 ({file})"),
        "exporters.otlp.headers.authorization = <13 bytes, not shown> (OTEL_EXPORTER_OTLP_HEADERS)".into(),
    ] {
        assert!(out.lines().any(|l| l == line), "{line}\n{out}");
    }
    assert!(!out.contains("secret"), "{out}");

    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let o = rocewatch(
        &["config", "check", empty.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")],
    );
    assert!(stdout(&o).contains(
        "exporters.otlp.endpoint = \"http://c:4318/v1/metrics\" (OTEL_EXPORTER_OTLP_ENDPOINT, /v1/metrics appended)"
    ), "{}", stdout(&o));
    for (var, value, says) in [
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "http/json",
            "use http/protobuf",
        ),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-a=1,broken",
            "header 2 has no '='",
        ),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "milliseconds"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
            "sometimes",
            "cumulative, delta or lowmemory",
        ),
    ] {
        let o = rocewatch(&["config", "check", file], &[(var, value)]);
        assert_eq!(o.status.code(), Some(1), "{var}={value}: {}", stdout(&o));
        let e = stderr(&o);
        assert!(
            e.starts_with(&format!("rocewatch: {var}: ")) && e.contains(says),
            "{var}={value}: {e}"
        );
    }
    // A switch with a value rocewatch cannot use (set for another process of the pod) is
    // warned about and ignored, as the specification has it: the file's OTLP stands.
    for (var, value) in [
        ("OTEL_METRICS_EXPORTER", "prometheus"),
        ("OTEL_SDK_DISABLED", "yes"),
    ] {
        let o = rocewatch(&["config", "check", file], &[(var, value)]);
        let out = stdout(&o);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{var}={value}: {out}{}",
            stderr(&o)
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("warning: {var}: ")) && l.ends_with(": ignored")),
            "{var}={value}: {out}"
        );
        assert!(
            out.contains("exporters.otlp.endpoint = "),
            "{var}={value}: {out}"
        );
    }
}
