//! What receivers key a host on, through the binary: the resource (`service.instance.id`
//! from the machine id, `host.id`, the semantic conventions' `schema_url`), the scope's
//! version, the User-Agent over OTLP/HTTP and gRPC, the DaemonSet's `k8s.*` attributes;
//! two agents with different machine ids kept apart by VictoriaMetrics, and by
//! Prometheus's own OTLP receiver (`instance` from `service.instance.id`, `target_info`
//! with the resource), with the names our `/metrics` uses. That last test is `#[ignore]`d:
//! Debian builds Prometheus without its OTLP receiver (bug #1080354), so it needs an
//! upstream binary in `ROCEWATCH_PROMETHEUS_OTLP`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;

use crate::otlp::grpc::attr;
use crate::support::*;

/// A machine id and the `service.instance.id` the semantic conventions' UUID v5 makes of
/// it (`python3 -c "import uuid; print(uuid.uuid5(uuid.UUID(
/// '4d63009a-8d0f-11ee-aad7-4c796ed8e320'), '0123456789abcdef0123456789abcdef'))"`).
const MACHINE_A: (&str, &str) = (
    "0123456789abcdef0123456789abcdef",
    "2f1423a8-dc20-5c0e-839d-70474f2dc393",
);
const MACHINE_B: (&str, &str) = (
    "b08dfa6083e7567a1921a715000001fb",
    "9d8987cf-62e7-5c7e-90d6-cd284b1fc479",
);

/// The fixture with PCIe links (`rdma.pcie.link.*`) as well as ports.
const CASE: &str = "gpu-two-socket";

/// An agent on [`CASE`] exporting to `endpoint` once, at its graceful stop (interval 1h),
/// with `machine_id` in its machine-id file and `otlp_extra` in `[exporters.otlp]`; it
/// is stopped here, and its log returned.
fn run_once(
    host: &str,
    machine_id: &str,
    endpoint: &str,
    otlp_extra: &str,
    env: &[(&str, &str)],
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mid = dir.path().join("machine-id");
    std::fs::write(&mid, format!("{machine_id}\n")).unwrap();
    let cfg = dir.path().join("rw.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\ninterval = \"300ms\"\nhost_name = \"{host}\"\n\n\
             [exporters.otlp]\nendpoint = \"{endpoint}\"\ninterval = \"1h\"\n\
             machine_id_file = {mid:?}\n{otlp_extra}\n",
            fixture(CASE)
        ),
    )
    .unwrap();
    let mut agent = RunningAgent::start_with(
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--prometheus-listen",
            "127.0.0.1:0",
        ],
        env,
        None,
    );
    wait_for_pcie(&agent);
    let (status, log, _) = agent.proc.stop();
    assert!(
        status.success() && log.contains("final OTLP export done"),
        "{log}"
    );
    log
}

/// Until the agent's `/metrics` shows the PCIe link (a collection has run).
fn wait_for_pcie(agent: &RunningAgent) {
    let url = format!("{}/metrics", agent.prometheus_url());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = reqwest::blocking::get(&url)
            .ok()
            .and_then(|r| r.text().ok())
            .unwrap_or_default();
        if body.contains("rdma_pcie_link_speed_per_second{") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no PCIe link within 20 s: {}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An OTLP/HTTP receiver on loopback keeping each request's headers (names lowercased)
/// and body, answering 200 with an empty `ExportMetricsServiceResponse`.
type Seen = Arc<Mutex<Vec<(Vec<(String, String)>, Vec<u8>)>>>;

fn http_receiver() -> (u16, Seen) {
    fn serve(sock: std::net::TcpStream, seen: &Seen) -> std::io::Result<()> {
        let mut w = sock.try_clone()?;
        let mut r = BufReader::new(sock);
        loop {
            let mut headers = Vec::new();
            let mut line = String::new();
            if r.read_line(&mut line)? == 0 {
                return Ok(());
            }
            loop {
                line.clear();
                r.read_line(&mut line)?;
                let l = line.trim_end();
                if l.is_empty() {
                    break;
                }
                if let Some((k, v)) = l.split_once(':') {
                    headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                }
            }
            let len: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            r.read_exact(&mut body)?;
            seen.lock().unwrap().push((headers, body));
            w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")?;
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Seen::default();
    let s = seen.clone();
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let s = s.clone();
            std::thread::spawn(move || {
                let _ = serve(sock, &s);
            });
        }
    });
    (port, seen)
}

/// The resource, scope and units receivers see, decoded by the official protos: the
/// instance and host ids from the machine id, the schema URL, the scope's version, a
/// valid UCUM unit for the PCIe speed (no `GT/s`); the User-Agent names rocewatch; the
/// DaemonSet's downward-API variables become the `k8s.*` attributes.
#[test]
fn otlp_http_resource_scope_and_user_agent() {
    let (port, seen) = http_receiver();
    // The DaemonSet's environment as the kubelet hands it over: the downward API's values,
    // then `$(VAR)` expanded in OTEL_RESOURCE_ATTRIBUTES.
    let env = daemonset_env(&[
        ("spec.nodeName", "node-7"),
        ("metadata.name", "rocewatch-x2k9f"),
        ("metadata.namespace", "rocewatch"),
    ]);
    let env: Vec<(&str, &str)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("OTEL_") || k.starts_with("K8S_"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    run_once(
        "gpu-a",
        MACHINE_A.0,
        &format!("http://127.0.0.1:{port}/v1/metrics"),
        "compression = \"none\"",
        &env,
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "the final export alone");
    let (headers, body) = &seen[0];
    let ua = headers
        .iter()
        .find(|(k, _)| k == "user-agent")
        .map(|(_, v)| v.as_str());
    assert_eq!(
        ua,
        Some(concat!("rocewatch/", env!("CARGO_PKG_VERSION"))),
        "{headers:?}"
    );
    let req = ExportMetricsServiceRequest::decode(&body[..]).unwrap();
    let rm = &req.resource_metrics[0];
    let res = &rm.resource.as_ref().unwrap().attributes;
    assert_eq!(attr(res, "service.instance.id"), Some(MACHINE_A.1));
    assert_eq!(attr(res, "host.id"), Some(MACHINE_A.0));
    assert_eq!(attr(res, "host.name"), Some("gpu-a"));
    assert_eq!(attr(res, "service.name"), Some("rocewatch"));
    assert_eq!(
        attr(res, "service.version"),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(attr(res, "k8s.node.name"), Some("node-7"));
    assert_eq!(attr(res, "k8s.pod.name"), Some("rocewatch-x2k9f"));
    assert_eq!(attr(res, "k8s.namespace.name"), Some("rocewatch"));
    assert!(
        rm.schema_url
            .starts_with("https://opentelemetry.io/schemas/1."),
        "{:?}",
        rm.schema_url
    );
    let sm = &rm.scope_metrics[0];
    let scope = sm.scope.as_ref().unwrap();
    assert_eq!(
        (scope.name.as_str(), scope.version.as_str()),
        ("rocewatch", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(sm.schema_url, rm.schema_url);
    let metrics: Vec<_> = rm.scope_metrics.iter().flat_map(|s| &s.metrics).collect();
    let speed = metrics
        .iter()
        .find(|m| m.name == "rdma.pcie.link.speed")
        .expect("rdma.pcie.link.speed exported");
    assert_eq!(speed.unit, "{transfer}/s");
    assert!(
        metrics.iter().all(|m| !m.unit.contains("GT")),
        "a unit that is not UCUM"
    );
}

/// The DaemonSet's container environment with the downward API's `fieldRef`s answered
/// from `fields` and `$(VAR)` expanded as the kubelet does (variables defined earlier).
fn daemonset_env(fields: &[(&str, &str)]) -> Vec<(String, String)> {
    let docs = yaml_docs("deploy/kubernetes/rocewatch-daemonset.yaml");
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let env = ds["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap();
    let mut out: Vec<(String, String)> = Vec::new();
    for e in env {
        let name = e["name"].as_str().unwrap().to_string();
        let value = if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            fields
                .iter()
                .find(|(f, _)| *f == path)
                .unwrap_or_else(|| panic!("no value for the field {path}"))
                .1
                .to_string()
        } else {
            let mut v = e["value"].as_str().unwrap().to_string();
            for (k, val) in &out {
                v = v.replace(&format!("$({k})"), val);
            }
            v
        };
        out.push((name, value));
    }
    out
}

/// An OTLP/gRPC receiver (tonic's) keeping each request's `user-agent` metadata.
mod ua_grpc {
    use std::sync::{Arc, Mutex};

    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
        MetricsService, MetricsServiceServer,
    };
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    };

    pub type Agents = Arc<Mutex<Vec<Option<String>>>>;

    struct Receiver(Agents);

    #[tonic::async_trait]
    impl MetricsService for Receiver {
        async fn export(
            &self,
            request: tonic::Request<ExportMetricsServiceRequest>,
        ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
            let ua = request
                .metadata()
                .get("user-agent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            self.0.lock().unwrap().push(ua);
            Ok(tonic::Response::new(ExportMetricsServiceResponse {
                partial_success: None,
            }))
        }
    }

    pub fn start(rt: &tokio::runtime::Runtime) -> (u16, Agents) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let listener = {
            let _guard = rt.enter();
            tokio::net::TcpListener::from_std(listener).unwrap()
        };
        let port = listener.local_addr().unwrap().port();
        let agents = Agents::default();
        let svc = MetricsServiceServer::new(Receiver(agents.clone()))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        rt.spawn(async move {
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(
                    tonic::codegen::tokio_stream::wrappers::TcpListenerStream::new(listener),
                )
                .await
                .unwrap();
        });
        (port, agents)
    }
}

/// Over gRPC the `user-agent` names rocewatch and its version first (tonic adds its own).
#[test]
fn otlp_grpc_user_agent_names_rocewatch() {
    let rt = runtime();
    let (port, agents) = ua_grpc::start(&rt);
    run_once(
        "gpu-a",
        MACHINE_A.0,
        &format!("http://127.0.0.1:{port}"),
        "protocol = \"grpc\"",
        &[],
    );
    let agents = agents.lock().unwrap();
    assert_eq!(agents.len(), 1);
    let ua = agents[0].as_deref().unwrap_or_default();
    assert!(
        ua.starts_with(concat!("rocewatch/", env!("CARGO_PKG_VERSION"), " ")),
        "{ua:?}"
    );
}

/// A Prometheus whose OTLP receiver can be turned on, and the flag that does it
/// (`--enable-feature=otlp-write-receiver` from 2.47, `--web.enable-otlp-receiver` in 3.x).
/// Debian's packages (bookworm, trixie, sid) build it without the receiver (Debian bug
/// #1080354), so it is `ROCEWATCH_PROMETHEUS_OTLP`, an upstream build.
fn prometheus_otlp() -> Option<(PathBuf, &'static str)> {
    let found = std::env::var_os("ROCEWATCH_PROMETHEUS_OTLP").map(PathBuf::from);
    let usable = found.and_then(|p| {
        let o = std::process::Command::new(&p).arg("--help").output().ok()?;
        let help = stdout(&o) + &stderr(&o);
        let flag = if help.contains("web.enable-otlp-receiver") {
            "--web.enable-otlp-receiver"
        } else if help.contains("otlp-write-receiver") {
            "--enable-feature=otlp-write-receiver"
        } else {
            return None;
        };
        Some((p, flag))
    });
    if usable.is_none() {
        missing(
            "a Prometheus with its OTLP receiver (Debian's packages disable it, Debian bug #1080354)",
            "set ROCEWATCH_PROMETHEUS_OTLP to an upstream prometheus (2.47 or later)",
        );
    }
    usable
}

/// Two agents with different machine ids into Prometheus's own OTLP receiver: two
/// `instance`s (the two `service.instance.id`s), `job` from `service.name`, `target_info`
/// carrying each resource, and the series named as our `/metrics` names them.
#[test]
#[ignore = "needs an upstream Prometheus with its OTLP receiver, which no package this \
            machine can install has (Debian bug #1080354): ROCEWATCH_PROMETHEUS_OTLP=PATH \
            cargo test -p rocewatch-integration-tests --test integration -- --ignored \
            otlp_prometheus_receiver"]
fn otlp_prometheus_receiver_keys_two_hosts_apart() {
    let Some((bin, flag)) = prometheus_otlp() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prom = Prometheus::start_with(
        &bin,
        dir.path(),
        "global:\n  scrape_interval: 1h\n",
        &[flag],
    );
    let endpoint = format!("http://{}/api/v1/otlp/v1/metrics", prom.addr);
    for (host, (mid, _)) in [("gpu-a", MACHINE_A), ("gpu-b", MACHINE_B)] {
        run_once(host, mid, &endpoint, "", &[]);
    }
    let info = wait_query(|| prom.query("target_info"), 2);
    let mut seen: Vec<(String, String, String, String)> = info
        .iter()
        .map(|(l, _)| {
            let s = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (s("instance"), s("job"), s("host_id"), s("host_name"))
        })
        .collect();
    seen.sort();
    let mut want = vec![
        (
            MACHINE_A.1.to_string(),
            "rocewatch".to_string(),
            MACHINE_A.0.to_string(),
            "gpu-a".to_string(),
        ),
        (
            MACHINE_B.1.into(),
            "rocewatch".into(),
            MACHINE_B.0.into(),
            "gpu-b".into(),
        ),
    ];
    want.sort();
    assert_eq!(seen, want, "{info:?}\n{}", prom.proc.log());
    // Each host's series under its own instance, named as /metrics names them.
    let per_instance = wait_query(
        || prom.query(&format!("count by (instance) ({})", speed_name())),
        2,
    );
    assert_eq!(per_instance.len(), 2, "{per_instance:?}");
    let io = wait_query(
        || prom.query("count by (instance) (rdma_port_io_bytes_total)"),
        2,
    );
    assert_eq!(io.len(), 2, "{io:?}");
}

/// The PCIe speed's name in Prometheus as the catalog translates it (`{transfer}/s` →
/// `_per_second`, the annotation dropped).
fn speed_name() -> String {
    rocewatch_metrics::naming::prometheus_family(
        "rdma.pcie.link.speed",
        "{transfer}/s",
        rocewatch_plugin_api::MetricKind::Gauge,
    )
}

/// The same two hosts into VictoriaMetrics (`-opentelemetry.usePrometheusNaming`, the
/// translation Prometheus uses): each resource's `service_instance_id` and `host_id` on
/// the series, two hosts apart, the PCIe speed under the name `/metrics` gives it and in
/// transfers per second.
#[test]
fn otlp_victoria_metrics_keeps_two_hosts_apart() {
    let Some(bin) = crate::otlp::vm_bin() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let vm = crate::otlp::start_vm(&bin, "127.0.0.1:0", data.path(), &[]);
    let endpoint = format!("http://{}/opentelemetry/v1/metrics", vm.addr);
    for (host, (mid, _)) in [("gpu-a", MACHINE_A), ("gpu-b", MACHINE_B)] {
        run_once(host, mid, &endpoint, "", &[]);
    }
    let q = format!("max by (service_instance_id, host_id) ({})", speed_name());
    let mut got: Vec<(String, String, f64)> = wait_query(|| crate::otlp::query(&vm, &q), 2)
        .iter()
        .map(|(l, v)| {
            let s = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (s("service_instance_id"), s("host_id"), *v)
        })
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want = vec![
        (MACHINE_A.1.to_string(), MACHINE_A.0.to_string(), 16e9),
        (MACHINE_B.1.to_string(), MACHINE_B.0.to_string(), 16e9),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want, "a Gen4 link (16 GT/s) on each host");
}

/// The query's results once there are `n` of them (within 15 s).
fn wait_query(
    query: impl Fn() -> Vec<(serde_json::Value, f64)>,
    n: usize,
) -> Vec<(serde_json::Value, f64)> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = query();
        if r.len() >= n || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
