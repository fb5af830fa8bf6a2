//! The Prometheus endpoint: served without a config file, valid for `promtool check
//! metrics` in both formats, and scraped by a real Prometheus whose query results match
//! the fixture.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

pub(crate) fn get(url: &str, accept: Option<&str>) -> Option<(String, String)> {
    let mut r = reqwest::blocking::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5));
    if let Some(a) = accept {
        r = r.header("accept", a);
    }
    let resp = r.send().ok()?;
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    Some((ctype, resp.text().ok()?))
}

/// promtool, beside the prometheus binary the tests use (`None`: skipped knowingly, see
/// [`require`]).
pub(crate) fn promtool() -> Option<std::path::PathBuf> {
    prometheus_binary().map(|p| p.with_file_name("promtool"))
}

pub(crate) fn promtool_check(promtool: &std::path::Path, body: &str) {
    use std::io::Write;
    let mut c = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    let msgs = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success() && msgs.trim().is_empty(),
        "promtool check metrics: {msgs}"
    );
}

#[test]
fn collect_once_prometheus_passes_promtool() {
    let Some(prom) = prometheus_binary() else {
        return;
    };
    let promtool = prom.with_file_name("promtool");
    for case in ["mlx5-roce-dual-port", "rxe-soft-roce", "ib-hca"] {
        let o = rocewatch(
            &[
                "collect",
                "--once",
                "--format",
                "prometheus",
                "--sysfs-root",
                fixture(case).to_str().unwrap(),
            ],
            &[],
        );
        assert!(o.status.success());
        let body = stdout(&o);
        assert!(
            body.contains("# TYPE ") && body.contains("# HELP ") && body.contains("# UNIT "),
            "{body}"
        );
        promtool_check(&promtool, &body);
    }
}

#[test]
fn a_real_prometheus_scrapes_the_agent() {
    let Some(prom) = prometheus_binary() else {
        return;
    };
    let promtool = prom.with_file_name("promtool");
    let root = fixture("mlx5-roce-dual-port");
    // No config file: flags only.
    let agent = RunningAgent::start(&[
        "--prometheus-listen",
        "127.0.0.1:0",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--interval",
        "500ms",
    ]);
    let agent_addr = agent.addr("prometheus");
    let base = agent.prometheus_url();
    // At least one collection.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !get(&format!("{base}/metrics"), None)
        .is_some_and(|(_, b)| b.contains("rdma_port_io_bytes_total{"))
    {
        assert!(Instant::now() < deadline, "no collection within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ctype, text) = get(&format!("{base}/metrics"), None).unwrap();
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    assert!(
        text.contains("# TYPE rdma_port_io_bytes_total counter"),
        "{text}"
    );
    assert!(text.contains("# UNIT rdma_port_io_bytes_total bytes"));
    assert!(
        text.contains("rocewatch_plugin_duration_seconds_count{"),
        "self-metrics are exposed"
    );
    promtool_check(&promtool, &text);
    let (ctype, om) = get(
        &format!("{base}/metrics"),
        Some("application/openmetrics-text;version=1.0.0"),
    )
    .unwrap();
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    assert!(
        om.contains("# TYPE rdma_port_io_bytes counter") && om.ends_with("# EOF\n"),
        "{om}"
    );
    assert!(get(&format!("{base}/nope"), None)
        .unwrap()
        .1
        .contains("not found"));

    // A real Prometheus scrapes it every second.
    let data = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(
        &prom,
        data.path(),
        &format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: rocewatch\n    static_configs:\n      - targets: ['{agent_addr}']\n"),
    );
    let q = |promql: &str| prom.query(promql);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut io = vec![];
    while Instant::now() < deadline {
        io = q("rdma_port_io_bytes_total");
        if io.len() == 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        io.len(),
        4,
        "two ports × two directions scraped: {io:?}\n--- agent:\n{}",
        agent.stderr()
    );
    for (labels, value) in &io {
        let dev = labels["rdma_device"].as_str().unwrap();
        let f = if labels["network_io_direction"] == "transmit" {
            "counters/port_xmit_data"
        } else {
            "counters/port_rcv_data"
        };
        assert_eq!(*value, 4.0 * (mlx5_counter(dev, f) as f64), "{labels}");
        assert_eq!(labels["job"], "rocewatch");
    }
    let up = q("up{job=\"rocewatch\"}");
    assert_eq!(up[0].1, 1.0);
    let rate = q("rdma_port_rate_bit_per_second{rdma_device=\"mlx5_1\"}");
    assert_eq!(rate[0].1, 100e9);
}

#[test]
fn a_taken_prometheus_port_is_a_clear_error() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let o = rocewatch(
        &[
            "run",
            "--prometheus-listen",
            &addr,
            "--sysfs-root",
            fixture("no-devices").to_str().unwrap(),
            "--duration",
            "5s",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("cannot listen on {addr}")),
        "{}",
        stderr(&o)
    );
}
