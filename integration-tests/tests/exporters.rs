//! Every exporter reads the same store: one agent on the mlx5 fixture with a probe plugin
//! (`fake-probe`) and QoS (the built-in qos-linux on the fixture's configfs and ECN files,
//! one desired setting so drift is exported too) exports to Prometheus, OTLP (an in-test
//! gRPC receiver) and a real collectd (network protocol, CSV written), and
//! `rocewatch collectd-exec` prints PUTVAL lines; the four carry the same set of `rdma.*`
//! metric names, histograms aside (collectd has no type for a distribution; see
//! docs/METRICS.md). Names are mapped back to the catalog through its own naming rules.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use rocewatch_metrics::naming::{collectd_type, prometheus_sample_name};
use rocewatch_metrics::{all_entries, kind_of};
use rocewatch_plugin_api::MetricKind;

use crate::collectd::{collectd_bin, start_listening};
use crate::prometheus::get;
use crate::support::*;

/// The configuration shared by the agent and `collectd-exec` (without exporters).
fn base_config() -> String {
    format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"500ms\"\njitter = \"0s\"\n\n\
         [probes]\npeers = [\"ok-100us-a\", \"ok-100us-b\"]\nplugin = {:?}\ninterval = \"500ms\"\ntimeout = \"300ms\"\nserve = false\n\n\
         [qos]\ninterval = \"1s\"\n\n[[qos.desired]]\nsettings = {{ mtu = \"9000\" }}\n",
        fixture("mlx5-roce-dual-port"),
        artifacts().fake_probe_so,
    )
}

fn is_histogram(name: &str) -> bool {
    kind_of(name) == Some(MetricKind::Histogram)
}

/// `rdma.*` names of the scalar samples in a Prometheus exposition.
fn prometheus_names(text: &str) -> BTreeSet<String> {
    let by_sample: BTreeMap<String, &str> = all_entries()
        .filter(|e| e.kind != MetricKind::Histogram)
        .map(|e| (prometheus_sample_name(e.name, e.unit, e.kind), e.name))
        .collect();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| by_sample.get(l.split(['{', ' ']).next().unwrap_or("")))
        .map(|n| n.to_string())
        .filter(|n| n.starts_with("rdma."))
        .collect()
}

/// The catalog name of a collectd type (`rdma_port_io`).
fn collectd_names(types: impl Iterator<Item = String>) -> BTreeSet<String> {
    let by_type: BTreeMap<String, &str> = all_entries()
        .map(|e| (collectd_type(e.name), e.name))
        .collect();
    types
        .filter_map(|t| by_type.get(&t).map(|n| n.to_string()))
        .filter(|n| n.starts_with("rdma."))
        .collect()
}

fn diff(a: &BTreeSet<String>, b: &BTreeSet<String>) -> String {
    format!(
        "only in the first: {:?}\nonly in the second: {:?}",
        a.difference(b).collect::<Vec<_>>(),
        b.difference(a).collect::<Vec<_>>()
    )
}

#[test]
fn prometheus_otlp_and_collectd_carry_the_same_metrics() {
    let Some(bin) = collectd_bin() else { return };
    let rt = runtime();
    let (otlp_port, exported) = grpc_receiver::start(&rt, 0, None);
    let (c, collectd_port) = start_listening(&bin, "same-host", |_, collectd_port| {
        format!("LoadPlugin network\n<Plugin network>\n  Listen \"127.0.0.1\" \"{collectd_port}\"\n</Plugin>\n")
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}\n[exporters.otlp]\nendpoint = \"http://127.0.0.1:{otlp_port}\"\nprotocol = \"grpc\"\ninterval = \"1s\"\n\n\
             [exporters.collectd]\nserver = \"127.0.0.1:{collectd_port}\"\nhost_name = \"same-host\"\n",
            base_config()
        ),
    )
    .unwrap();
    let exec_cfg = dir.path().join("exec.toml");
    std::fs::write(&exec_cfg, base_config()).unwrap();

    let agent = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--prometheus-listen",
        "127.0.0.1:0",
    ]);
    let mut exec = Spawned::start(
        "rocewatch collectd-exec",
        Command::new(&artifacts().rocewatch)
            .args(["collectd-exec", "--config", exec_cfg.to_str().unwrap()])
            .env("COLLECTD_INTERVAL", "0.5")
            .env("COLLECTD_HOSTNAME", "exec-host"),
        Some(Stdio::piped()),
    );
    let mut exec_out = exec.child.stdout.take().unwrap();
    let exec_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = exec_out.read_to_string(&mut s);
        s
    });
    let base = agent.prometheus_url();
    // Several collections, probe rounds and QoS reads; two OTLP exports at least.
    std::thread::sleep(Duration::from_secs(5));
    let (_, text) = get(&format!("{base}/metrics"), None).unwrap();
    exec.signal("TERM");
    // Bounded: a collectd-exec that ignored SIGTERM is killed (closing its stdout) before
    // its output is joined, so the test cannot hang on it.
    if exec.wait_exit(Duration::from_secs(20)).is_none() {
        exec.signal("KILL");
        let _ = exec.wait_exit(Duration::from_secs(5));
    }
    let exec_text = exec_reader.join().unwrap();
    let logs = || {
        format!(
            "--- agent stderr:\n{}\n--- collectd-exec stderr:\n{}\n--- collectd log:\n{}",
            agent.stderr(),
            exec.log(),
            c.log()
        )
    };

    let prometheus = prometheus_names(&text);
    let otlp: BTreeSet<String> = exported
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(_, req)| req.resource_metrics.iter())
        .flat_map(|rm| rm.scope_metrics.iter())
        .flat_map(|sm| sm.metrics.iter())
        .filter(|m| !matches!(m.data, Some(Data::Histogram(_))))
        .map(|m| m.name.clone())
        .filter(|n| n.starts_with("rdma.") && !is_histogram(n))
        .collect();
    let mut csv_types = Vec::new();
    for host_dir in std::fs::read_dir(c.csv().join("same-host"))
        .into_iter()
        .flatten()
    {
        for file in std::fs::read_dir(host_dir.unwrap().path())
            .into_iter()
            .flatten()
        {
            let name = file.unwrap().file_name().to_string_lossy().into_owned();
            csv_types.push(name.split('-').next().unwrap_or("").to_string());
        }
    }
    let collectd = collectd_names(csv_types.into_iter());
    let exec_types = exec_text.lines().filter_map(|l| {
        // PUTVAL "host/plugin-instance/type-instance" interval=... time:value
        let id = l.strip_prefix("PUTVAL \"")?.split('"').next()?;
        Some(id.split('/').nth(2)?.split('-').next()?.to_string())
    });
    let collectd_exec = collectd_names(exec_types);

    // What was missing from collectd before: derived, probe and QoS series.
    for name in [
        "rdma.port.throughput",
        "rdma.probe.sent",
        "rdma.qos.setting",
        "rdma.qos.drift",
    ] {
        assert!(
            prometheus.contains(name),
            "{name} not in /metrics:\n{text}\n{}",
            logs()
        );
    }
    assert!(
        !prometheus.contains("rdma.probe.rtt"),
        "histograms are compared aside"
    );
    assert_eq!(
        prometheus,
        otlp,
        "Prometheus vs OTLP:\n{}\n{}",
        diff(&prometheus, &otlp),
        logs()
    );
    assert_eq!(
        prometheus,
        collectd,
        "Prometheus vs collectd (network):\n{}\n{}",
        diff(&prometheus, &collectd),
        logs()
    );
    assert_eq!(
        prometheus,
        collectd_exec,
        "Prometheus vs collectd-exec:\n{}\n{}",
        diff(&prometheus, &collectd_exec),
        logs()
    );
}
