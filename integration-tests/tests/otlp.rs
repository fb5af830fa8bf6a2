//! OTLP/HTTP to a real VictoriaMetrics on loopback: the agent reads a fixture tree, is
//! stopped with SIGTERM (its export interval is longer than its life, so what arrives is
//! the final export of the graceful shutdown), and the values queried back from
//! VictoriaMetrics match the fixture files, with the ×4 conversion of data counters.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

pub(crate) struct Vm {
    _proc: Spawned,
    /// `HOST:PORT` it listens on.
    pub(crate) addr: String,
    _data: Option<tempfile::TempDir>,
}

impl Vm {
    pub(crate) fn port(&self) -> u16 {
        self.addr.rsplit(':').next().unwrap().parse().unwrap()
    }
}

fn http_get(url: &str) -> Option<String> {
    reqwest::blocking::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .ok()?
        .text()
        .ok()
}

pub(crate) fn vm_bin() -> Option<std::path::PathBuf> {
    require(
        "victoria-metrics",
        receiver(
            "ROCEWATCH_VICTORIA_METRICS",
            ".cache/victoria-metrics/usr/bin/victoria-metrics",
            "victoria-metrics",
        ),
    )
}

/// A fresh VictoriaMetrics, or `None` when it is absent and skipping was asked for.
fn victoria_metrics() -> Option<Vm> {
    let bin = vm_bin()?;
    let data = tempfile::tempdir().unwrap();
    let mut vm = start_vm(&bin, "127.0.0.1:0", data.path(), &[]);
    vm._data = Some(data);
    Some(vm)
}

/// VictoriaMetrics on `listen` (port 0: the kernel chooses, VictoriaMetrics says which in
/// its log) with its data in `data`, once its listener is up; its log is printed when the
/// test fails.
pub(crate) fn start_vm(
    bin: &std::path::Path,
    listen: &str,
    data: &std::path::Path,
    extra: &[String],
) -> Vm {
    let mut proc = Spawned::start(
        "victoria-metrics",
        Command::new(bin)
            .arg(format!("-httpListenAddr={listen}"))
            .arg(format!("-storageDataPath={}", data.display()))
            .args([
                "-retentionPeriod=1d",
                "-search.latencyOffset=1s",
                "-search.disableCache",
                "-opentelemetry.usePrometheusNaming",
            ])
            .args(extra),
        None,
    );
    // "started server at http://127.0.0.1:43745/"
    let addr = proc.wait_log("its listener", Duration::from_secs(30), |log| {
        let rest = log.split("started server at http").nth(1)?;
        let rest = rest.strip_prefix("s").unwrap_or(rest).strip_prefix("://")?;
        Some(rest.split('/').next()?.to_string())
    });
    Vm {
        _proc: proc,
        addr,
        _data: None,
    }
}

/// `series → value` for a PromQL query (instant).
pub(crate) fn query(vm: &Vm, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let url = format!("http://{}/api/v1/query", vm.addr);
    let body = reqwest::blocking::Client::new()
        .get(url)
        .query(&[("query", promql)])
        .send()
        .unwrap()
        .text()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|r| {
            (
                r["metric"].clone(),
                r["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

fn wait_for(vm: &Vm, promql: &str, n: usize) -> Vec<(serde_json::Value, f64)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = query(vm, promql);
        if r.len() >= n || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn otlp_http_to_victoriametrics_matches_the_fixture() {
    let Some(vm) = victoria_metrics() else {
        return;
    };
    let endpoint = format!("http://{}/opentelemetry/v1/metrics", vm.addr);
    let root = fixture("mlx5-roce-dual-port");
    let mut agent = RunningAgent::start_with(
        &[
            "--sysfs-root",
            root.to_str().unwrap(),
            "--interval",
            "500ms",
            "--otlp-endpoint",
            &endpoint,
            "--export-interval",
            "1h",
            "--prometheus-listen",
            "127.0.0.1:0",
        ],
        &[("ROCEWATCH_AGENT__HOST_NAME", "fixture-host")],
        None,
    );
    wait_collected(&agent);
    let (status, log, _) = agent.proc.stop();
    assert!(status.success(), "agent exit: {status:?}\n{log}");
    assert!(log.contains("final OTLP export done"), "{log}");

    let io = wait_for(&vm, "rdma_port_io_bytes_total", 4);
    assert_eq!(io.len(), 4, "two ports × two directions: {io:?}");
    for (labels, value) in &io {
        let dev = labels["rdma_device"].as_str().unwrap();
        let file = match labels["network_io_direction"].as_str().unwrap() {
            "transmit" => "counters/port_xmit_data",
            _ => "counters/port_rcv_data",
        };
        assert_eq!(*value, 4.0 * (mlx5_counter(dev, file) as f64), "{labels}");
        assert_eq!(labels["host_name"], "fixture-host");
        assert_eq!(labels["service_name"], "rocewatch");
    }
    let cnp = wait_for(&vm, "rdma_port_cnp_sent_total{rdma_device=\"mlx5_1\"}", 1);
    assert_eq!(
        cnp[0].1,
        (mlx5_counter("mlx5_1", "hw_counters/np_cnp_sent") as f64)
    );
    let rate = wait_for(&vm, "rdma_port_rate_bit_per_second", 2);
    assert!(rate.iter().all(|(_, v)| *v == 100e9), "{rate:?}");
    let emitted = wait_for(&vm, "rocewatch_samples_emitted_total", 1);
    assert!(
        emitted
            .iter()
            .any(|(l, v)| l["plugin"] == "counters-sysfs" && *v > 0.0),
        "{emitted:?}"
    );
}

#[test]
fn demo_exports_moving_counters_over_otlp() {
    let Some(vm) = victoria_metrics() else {
        return;
    };
    let endpoint = format!("http://{}/opentelemetry/v1/metrics", vm.addr);
    let o = rocewatch(
        &[
            "demo",
            "--no-tui",
            "--interval",
            "500ms",
            "--duration",
            "4s",
            "--otlp-endpoint",
            &endpoint,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("export: OTLP HttpProtobuf to {endpoint}")),
        "{}",
        stdout(&o)
    );
    // Samples exported every second: the transmit counter of mlx5_0 took several values.
    let url = format!("http://{}/api/v1/export", vm.addr);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut values: Vec<f64> = Vec::new();
    while Instant::now() < deadline {
        let body = reqwest::blocking::Client::new()
            .post(&url)
            .form(&[("match[]", "rdma_port_io_bytes_total{rdma_device=\"mlx5_0\",network_io_direction=\"transmit\"}")])
            .send()
            .unwrap()
            .text()
            .unwrap();
        if let Some(line) = body.lines().next() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            values = v["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            if values.len() >= 3 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        values.len() >= 3,
        "several exports of the demo's counters: {values:?}"
    );
    assert!(
        values.windows(2).all(|w| w[1] >= w[0]) && values.last() > values.first(),
        "a growing counter: {values:?}"
    );
}

/// Wait until the agent's /metrics carries a collection of the fixture (its data
/// counters): what a final export must then carry.
pub(crate) fn wait_collected(agent: &RunningAgent) {
    let url = format!("{}/metrics", agent.prometheus_url());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !http_get(&url).is_some_and(|b| b.contains("rdma_port_io_bytes_total{")) {
        assert!(Instant::now() < deadline, "no collection within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) mod grpc {
    //! OTLP/gRPC to a receiver built here from the OTLP proto definitions (no real gRPC
    //! receiver is installable on this machine): checks the data model itself (cumulative
    //! monotonic sums, units, resource) as well as the values.

    use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
    use opentelemetry_proto::tonic::common::v1::KeyValue;
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality,
    };

    use crate::support::*;

    pub(crate) fn attr<'a>(kvs: &'a [KeyValue], key: &str) -> Option<&'a str> {
        kvs.iter().find(|kv| kv.key == key).and_then(|kv| {
            match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => Some(s.as_str()),
                _ => None,
            }
        })
    }

    #[test]
    fn otlp_grpc_final_export_has_cumulative_monotonic_sums() {
        let rt = runtime();
        let (port, received) = grpc_receiver::start(&rt, 0, None);
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("grpc.toml");
        std::fs::write(
            &cfg,
            format!(
                "[agent]\nsysfs_root = {:?}\ninterval = \"500ms\"\nhost_name = \"grpc-host\"\n\n[exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}\"\nprotocol = \"grpc\"\ninterval = \"1h\"\n\n[exporters.otlp.resource]\n\"deployment.environment.name\" = \"ci\"\n",
                fixture("mlx5-roce-dual-port")
            ),
        )
        .unwrap();
        let mut agent = RunningAgent::start(&[
            "--config",
            cfg.to_str().unwrap(),
            "--prometheus-listen",
            "127.0.0.1:0",
        ]);
        super::wait_collected(&agent);
        let (status, log, _) = agent.proc.stop();
        assert!(
            status.success() && log.contains("final OTLP export done"),
            "{log}"
        );

        let reqs: Vec<_> = received
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| r.clone())
            .collect();
        assert_eq!(reqs.len(), 1, "only the final export (interval 1h)");
        let rm = &reqs[0].resource_metrics[0];
        let res = &rm.resource.as_ref().unwrap().attributes;
        assert_eq!(attr(res, "service.name"), Some("rocewatch"));
        assert_eq!(attr(res, "host.name"), Some("grpc-host"));
        assert_eq!(attr(res, "deployment.environment.name"), Some("ci"));
        let metrics: Vec<_> = rm.scope_metrics.iter().flat_map(|s| &s.metrics).collect();
        let io = metrics
            .iter()
            .find(|m| m.name == "rdma.port.io")
            .expect("rdma.port.io exported");
        assert_eq!(io.unit, "By");
        let Some(Data::Sum(sum)) = &io.data else {
            panic!("rdma.port.io must be a sum: {io:?}")
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        let point = sum
            .data_points
            .iter()
            .find(|p| {
                attr(&p.attributes, "rdma.device") == Some("mlx5_1")
                    && attr(&p.attributes, "network.io.direction") == Some("receive")
            })
            .unwrap();
        let value = match point.value {
            Some(number_data_point::Value::AsInt(v)) => v,
            other => panic!("integer value expected, got {other:?}"),
        };
        assert_eq!(
            value,
            4 * mlx5_counter("mlx5_1", "counters/port_rcv_data") as i64
        );
        assert!(
            point.start_time_unix_nano > 0 && point.start_time_unix_nano <= point.time_unix_nano
        );
        let mtu = metrics
            .iter()
            .find(|m| m.name == "rdma.netdev.mtu")
            .unwrap();
        assert!(matches!(mtu.data, Some(Data::Gauge(_))));
        assert!(
            metrics
                .iter()
                .any(|m| m.name == "rocewatch.plugin.duration"),
            "self-metric histogram exported"
        );
        rt.shutdown_background();
    }
}

/// `temporality = "delta"` through the binary: a fixture counter moved between reads
/// (collection every 200 ms, export every second), exported over gRPC. Each point covers
/// (the previous point's time, its own], the first says nothing of before (start equal to
/// time, 0), and the deltas add up to the counter's increase: none sent twice, none lost.
#[test]
fn otlp_delta_points_add_up_to_the_counters_increase() {
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality,
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    let st = Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(st.success());
    let file = root.join("class/infiniband/mlx5_1/ports/1/counters/port_rcv_data");
    let first: u64 = mlx5_counter("mlx5_1", "counters/port_rcv_data");
    let rt = runtime();
    let (port, received) = grpc_receiver::start(&rt, 0, None);
    let cfg = dir.path().join("delta.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {root:?}\ninterval = \"200ms\"\n\n[exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}\"\nprotocol = \"grpc\"\ninterval = \"1s\"\ntemporality = \"delta\"\n"
        ),
    )
    .unwrap();
    let mut agent = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--prometheus-listen",
        "127.0.0.1:0",
    ]);
    // (start, time, value) of mlx5_1's receive bytes in every request so far.
    let points = || -> Vec<(u64, u64, i64)> {
        let reqs = received.lock().unwrap();
        let mut out = Vec::new();
        for (_, r) in reqs.iter() {
            for m in r
                .resource_metrics
                .iter()
                .flat_map(|rm| &rm.scope_metrics)
                .flat_map(|s| &s.metrics)
                .filter(|m| m.name == "rdma.port.io")
            {
                let Some(Data::Sum(sum)) = &m.data else {
                    panic!("rdma.port.io must be a sum: {m:?}")
                };
                assert_eq!(
                    sum.aggregation_temporality,
                    AggregationTemporality::Delta as i32
                );
                for p in sum.data_points.iter().filter(|p| {
                    grpc::attr(&p.attributes, "rdma.device") == Some("mlx5_1")
                        && grpc::attr(&p.attributes, "network.io.direction") == Some("receive")
                }) {
                    let Some(number_data_point::Value::AsInt(v)) = p.value else {
                        panic!("{p:?}")
                    };
                    out.push((p.start_time_unix_nano, p.time_unix_nano, v));
                }
            }
        }
        out
    };
    // The series' first point arrives before the counter moves.
    let deadline = Instant::now() + Duration::from_secs(20);
    while points().is_empty() {
        assert!(
            Instant::now() < deadline,
            "no export within 20 s\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut value = first;
    for step in [1_000u64, 250_000, 7, 40_000, 3] {
        value += step;
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, format!("{value}\n")).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        std::thread::sleep(Duration::from_millis(450));
    }
    // Read by the agent (on /metrics, in bytes), then the final export on SIGTERM.
    let url = format!("{}/metrics", agent.prometheus_url());
    let want = format!(" {}", 4 * value);
    let line = |b: &str| {
        b.lines()
            .find(|l| {
                l.starts_with("rdma_port_io_bytes_total{")
                    && l.contains("network_io_direction=\"receive\"")
                    && l.contains("rdma_device=\"mlx5_1\"")
            })
            .map(str::to_string)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = None;
    loop {
        seen = reqwest::blocking::get(&url)
            .ok()
            .and_then(|r| r.text().ok())
            .and_then(|b| line(&b))
            .or(seen);
        if seen.as_deref().is_some_and(|l| l.ends_with(&want)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not read within 20 s: {want}, /metrics says {seen:?}\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, log, _) = agent.proc.stop();
    assert!(
        status.success() && log.contains("final OTLP export done"),
        "{log}"
    );
    let p = points();
    assert!(p.len() >= 3, "several exports: {p:?}\n{log}");
    assert_eq!(
        (p[0].0, p[0].2),
        (p[0].1, 0),
        "the first: nothing of before"
    );
    for w in p.windows(2) {
        assert_eq!(w[1].0, w[0].1, "each from the last one's time: {p:?}");
        assert!(w[1].1 > w[1].0, "a read is sent once: {p:?}");
    }
    let sum: i64 = p.iter().map(|x| x.2).sum();
    assert_eq!(
        sum,
        4 * (value - first) as i64,
        "the deltas add up to the increase (in bytes): {p:?}\n{log}"
    );
    rt.shutdown_background();
}
