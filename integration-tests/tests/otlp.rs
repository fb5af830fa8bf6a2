//! OTLP/HTTP to a real VictoriaMetrics on loopback: the agent reads a fixture tree, is
//! stopped with SIGTERM (its export interval is longer than its life, so what arrives is
//! the final export of the graceful shutdown), and the values queried back from
//! VictoriaMetrics match the fixture files, with the ×4 conversion of data counters.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

struct Vm {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

fn start_vm(bin: &std::path::Path) -> Vm {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = Command::new(bin)
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
        .arg(format!("-storageDataPath={}", data.path().display()))
        .args([
            "-retentionPeriod=1d",
            "-search.latencyOffset=1s",
            "-search.disableCache",
            "-opentelemetry.usePrometheusNaming",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start victoria-metrics");
    let vm = Vm {
        child,
        port,
        _data: data,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if http_get(&format!("http://127.0.0.1:{port}/health")).is_some_and(|b| b.contains("OK")) {
            return vm;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("victoria-metrics did not become ready on 127.0.0.1:{port}");
}

/// `series → value` for a PromQL query (instant).
fn query(vm: &Vm, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let url = format!("http://127.0.0.1:{}/api/v1/query", vm.port);
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

fn raw(dev: &str, file: &str) -> f64 {
    let p = fixture("mlx5-roce-dual-port")
        .join("class/infiniband")
        .join(dev)
        .join("ports/1")
        .join(file);
    std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

#[test]
fn otlp_http_to_victoriametrics_matches_the_fixture() {
    let Some(bin) = require(
        "victoria-metrics",
        receiver(
            "ROCEWATCH_VICTORIA_METRICS",
            ".cache/victoria-metrics/usr/bin/victoria-metrics",
            "victoria-metrics",
        ),
    ) else {
        return;
    };
    let vm = start_vm(&bin);
    let endpoint = format!("http://127.0.0.1:{}/opentelemetry/v1/metrics", vm.port);
    let root = fixture("mlx5-roce-dual-port");
    let agent = Command::new(&artifacts().rocewatch)
        .args([
            "run",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--interval",
            "500ms",
        ])
        .args(["--otlp-endpoint", &endpoint, "--export-interval", "1h"])
        .env("ROCEWATCH_AGENT__HOST_NAME", "fixture-host")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    sigterm(agent.id());
    let out = agent.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "agent exit: {:?}\n{log}", out.status);
    assert!(log.contains("final OTLP export done"), "{log}");

    let io = wait_for(&vm, "rdma_port_io_bytes_total", 4);
    assert_eq!(io.len(), 4, "two ports × two directions: {io:?}");
    for (labels, value) in &io {
        let dev = labels["rdma_device"].as_str().unwrap();
        let file = match labels["network_io_direction"].as_str().unwrap() {
            "transmit" => "counters/port_xmit_data",
            _ => "counters/port_rcv_data",
        };
        assert_eq!(*value, 4.0 * raw(dev, file), "{labels}");
        assert_eq!(labels["host_name"], "fixture-host");
        assert_eq!(labels["service_name"], "rocewatch");
    }
    let cnp = wait_for(&vm, "rdma_port_cnp_sent_total{rdma_device=\"mlx5_1\"}", 1);
    assert_eq!(cnp[0].1, raw("mlx5_1", "hw_counters/np_cnp_sent"));
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

fn sigterm(pid: u32) {
    let st = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}
