//! The scheduled prober on any host, through a probe plugin without RDMA
//! (`integration-tests/fake-probe`, answering by the peer's name): a round has every
//! probe in flight at once, the RTT histogram reaches Prometheus (checked by promtool)
//! and OTLP (a histogram with the configured buckets), failures are counted by cause,
//! peers beyond `max_peers` are counted and not probed. The verbs plugin itself is tested
//! in the soft-RoCE lab (`lab.rs`).

use std::time::Duration;

use opentelemetry_proto::tonic::metrics::v1::{metric::Data, AggregationTemporality};

use crate::otlp::grpc::attr;
use crate::prometheus::{get, promtool_check};
use crate::support::*;

/// The value of the sample line starting with `series` (name and labels, exactly).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn scheduled_probes_histograms_causes_and_limits() {
    let rt = runtime();
    let (otlp_port, exported) = grpc_receiver::start(&rt, 0, None);
    let dir = tempfile::tempdir().unwrap();
    let dead: Vec<String> = (1..=8).map(|i| format!("\"dead-{i}\"")).collect();
    let peers = format!(
        "\"ok-100us-a\", \"ok-100us-b\", \"ok-2000us-c\", {}, \"refused-1\", \"nowhere-1\", \"ok-100us-x\", \"ok-100us-y\"",
        dead.join(", ")
    );
    let cfg = dir.path().join("probes.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\ninterval = \"1s\"\n\n[exporters.otlp]\nendpoint = \"http://127.0.0.1:{otlp_port}\"\nprotocol = \"grpc\"\ninterval = \"1h\"\n\n[probes]\npeers = [{peers}]\nplugin = {:?}\ninterval = \"500ms\"\ntimeout = \"300ms\"\nmax_peers = 13\nserve = false\n",
            fixture("mlx5-roce-dual-port"),
            artifacts().fake_probe_so,
        ),
    )
    .unwrap();
    let mut agent = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--prometheus-listen",
        "127.0.0.1:0",
    ]);
    let base = agent.prometheus_url();
    // Several rounds (every 500 ms) to count.
    std::thread::sleep(Duration::from_secs(3));
    let (_, text) = get(&format!("{base}/metrics"), None).unwrap();
    let log_text = || agent.stderr();
    let v =
        |s: &str| value(&text, s).unwrap_or_else(|| panic!("no {s} in\n{text}\n{}", log_text()));

    // Eight dead peers with a 300 ms timeout: one after another a round would take 2.4 s
    // (at most two rounds in 3 s); in flight together it takes 0.3 s, every 500 ms.
    let dead_sent = v(r#"rdma_probe_sent_total{rdma_probe_peer="dead-8"}"#);
    assert!(
        dead_sent >= 4.0,
        "rounds are not concurrent: {dead_sent} probes of dead-8 in 3 s"
    );
    assert_eq!(
        v(r#"rdma_probe_timeouts_total{rdma_probe_peer="dead-8"}"#),
        dead_sent
    );
    // The histogram: 100 µs lands in the bucket le=0.0001 (bounds are inclusive), 2 ms in
    // le=0.0025; sum and count agree with the received counter.
    let a = r#"rdma_probe_peer="ok-100us-a""#;
    let received = v(&format!("rdma_probe_received_total{{{a}}}"));
    assert!(received >= 4.0, "{received}");
    assert_eq!(
        v(&format!(
            "rdma_probe_rtt_seconds_bucket{{{a},le=\"0.00005\"}}"
        )),
        0.0
    );
    assert_eq!(
        v(&format!(
            "rdma_probe_rtt_seconds_bucket{{{a},le=\"0.0001\"}}"
        )),
        received
    );
    assert_eq!(
        v(&format!("rdma_probe_rtt_seconds_bucket{{{a},le=\"+Inf\"}}")),
        received
    );
    assert_eq!(v(&format!("rdma_probe_rtt_seconds_count{{{a}}}")), received);
    let sum = v(&format!("rdma_probe_rtt_seconds_sum{{{a}}}"));
    assert!((sum - received * 100e-6).abs() < 1e-9, "{sum}");
    let c = r#"rdma_probe_peer="ok-2000us-c""#;
    assert_eq!(
        v(&format!(
            "rdma_probe_rtt_seconds_bucket{{{c},le=\"0.001\"}}"
        )),
        0.0
    );
    assert!(
        v(&format!(
            "rdma_probe_rtt_seconds_bucket{{{c},le=\"0.0025\"}}"
        )) >= 4.0
    );
    assert_eq!(v(&format!("rdma_probe_rtt_last_seconds{{{c}}}")), 0.002);
    // Failures by cause.
    assert!(
        v(r#"rdma_probe_failures_total{rdma_probe_cause="rejected",rdma_probe_peer="refused-1"}"#)
            >= 4.0
    );
    assert!(
        v(
            r#"rdma_probe_failures_total{rdma_probe_cause="address_resolution",rdma_probe_peer="nowhere-1"}"#
        ) >= 4.0
    );
    // max_peers = 13 of 15 listed: the last two are counted, not probed.
    assert_eq!(v(r#"rdma_probe_peers{rdma_probe_state="probed"}"#), 13.0);
    assert_eq!(v(r#"rdma_probe_peers{rdma_probe_state="over_limit"}"#), 2.0);
    assert!(
        !text.contains("ok-100us-x"),
        "a peer over the limit was probed"
    );
    assert_eq!(v("rdma_probe_interval_seconds"), 0.5);
    assert!(text.contains("# TYPE rdma_probe_rtt_seconds histogram"));
    if let Some(promtool) = crate::prometheus::promtool() {
        promtool_check(&promtool, &text);
    }

    // OTLP: the final export carries the histogram with the configured (default) bounds.
    let (st, log, _) = agent.proc.stop();
    assert!(st.success(), "{log}");
    assert!(
        log.contains("no NIC-measured RTT split: fake-probe has no NIC"),
        "the missing NIC timestamps are said once: {log}"
    );
    let reqs = exported.lock().unwrap();
    let rtt = reqs
        .iter()
        .flat_map(|(_, r)| &r.resource_metrics)
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .find(|m| m.name == "rdma.probe.rtt")
        .expect("rdma.probe.rtt exported over OTLP");
    assert_eq!(rtt.unit, "s");
    let Some(Data::Histogram(h)) = &rtt.data else {
        panic!("rdma.probe.rtt must be an OTLP histogram: {rtt:?}")
    };
    assert_eq!(
        h.aggregation_temporality,
        AggregationTemporality::Cumulative as i32
    );
    let p = h
        .data_points
        .iter()
        .find(|p| attr(&p.attributes, "rdma.probe.peer") == Some("ok-100us-a"))
        .expect("a data point for ok-100us-a");
    assert_eq!(p.explicit_bounds.len(), 16);
    assert_eq!(p.explicit_bounds[3], 100e-6);
    assert!(p.count as f64 >= received, "{} < {received}", p.count);
    assert_eq!(p.bucket_counts[3], p.count, "every 100 µs RTT in le=0.0001");
    rt.shutdown_background();
}

/// `rocewatch bandwidth` on a host without RDMA devices (this one, in CI): the test
/// cannot run, exit status 2, and the message says why (the verbs plugin did not start:
/// no RDMA device), not a number. Refusals and unreachable peers are tested with real
/// devices in the soft-RoCE lab (`lab.rs`) and against a fake responder in the plugin's
/// unit tests.
#[test]
fn bandwidth_without_an_rdma_device_fails_with_the_cause() {
    let o = rocewatch(
        &[
            "bandwidth",
            "127.0.0.1",
            "--duration",
            "1s",
            "--timeout",
            "1s",
        ],
        &[],
    );
    let err = stderr(&o);
    if std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some())
    {
        panic!("this host has RDMA devices: this test expects none (the lab tests the real thing)\n{err}");
    }
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout: {}\nstderr: {err}",
        stdout(&o)
    );
    assert!(
        err.contains("rocewatch bandwidth: the verbs probe plugin is not loaded")
            && err.contains("no RDMA device"),
        "{err}"
    );
    // --json says it too, as JSON.
    let o = rocewatch(
        &["bandwidth", "127.0.0.1", "--duration", "1s", "--json"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("no RDMA device"),
        "{v}"
    );
}

/// The command line refuses what cannot be a test before anything starts.
#[test]
fn bandwidth_arguments_are_checked() {
    let o = rocewatch(&["bandwidth", "10.0.0.2", "--op", "atomic"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("invalid value 'atomic'"),
        "{}",
        stderr(&o)
    );
    let o = rocewatch(&["doctor", "--bandwidth"], &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--peer"), "{}", stderr(&o));
    let o = rocewatch(&["bandwidth", "--help"], &[]);
    let help = stdout(&o);
    assert!(
        help.contains("ib_write_bw -s 65536 -q 4 -D 10 -t 32 -u 18 PEER"),
        "{help}"
    );
}
