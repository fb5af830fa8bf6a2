//! Derived signals end to end: a copy of the mlx5 fixture whose transmit counter moves at
//! a known rate, read by the agent, served on /metrics as throughput.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn throughput_and_error_rate_from_moving_counters() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    copy_tree(&fixture("mlx5-roce-dual-port"), &root);
    let file = root.join("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data");
    let sym = root.join("class/infiniband/mlx5_0/ports/1/counters/symbol_error");
    let agent = RunningAgent::start(&[
        "--sysfs-root",
        root.to_str().unwrap(),
        "--interval",
        "400ms",
        "--prometheus-listen",
        "127.0.0.1:0",
    ]);
    let url = format!("{}/metrics", agent.prometheus_url());
    // 1.25e9 words (5 GB) every 500 ms: 10 GB/s; 2 symbol errors every 500 ms: 4/s.
    // /metrics is sampled every 100 ms: averaged over time, the derived throughput must
    // be the writer's pace, whatever the phase between writer and agent.
    let scrape = || {
        reqwest::blocking::get(&url)
            .ok()
            .and_then(|r| r.text().ok())
    };
    let value = |body: &str, prefix: &str| -> Option<f64> {
        body.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let tp_key = "rdma_port_throughput_bytes_per_second{network_interface_name=\"ens1f0np0\",network_io_direction=\"transmit\",rdma_device=\"mlx5_0\"";
    let er_key = "rdma_port_error_rate_per_second{network_interface_name=\"ens1f0np0\",rdma_device=\"mlx5_0\"";
    let (mut words, mut errors): (u64, u64) = (100_000, 0);
    let (mut tps, mut ers) = (Vec::new(), Vec::new());
    let mut body = String::new();
    let started = Instant::now();
    for tick in 0..60 {
        if tick % 5 == 0 {
            words += 1_250_000_000;
            errors += 2;
            for (f, v) in [(&file, words), (&sym, errors)] {
                let tmp = f.with_extension("tmp");
                std::fs::write(&tmp, format!("{v}\n")).unwrap();
                std::fs::rename(&tmp, f).unwrap();
            }
        }
        if let Some(b) = scrape() {
            // Skip the first second: the agent needs two reads for a rate.
            if started.elapsed() > Duration::from_secs(1) {
                tps.extend(value(&b, tp_key));
                ers.extend(value(&b, er_key));
            }
            body = b;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(agent);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    assert!(tps.len() >= 20, "{tps:?}");
    assert!(
        (mean(&tps) - 10e9).abs() < 0.3 * 10e9,
        "mean throughput {} from {tps:?}",
        mean(&tps)
    );
    assert!(tps.iter().all(|v| *v >= 0.0), "{tps:?}");
    assert!(
        (mean(&ers) - 4.0).abs() < 1.5,
        "mean error rate {} from {ers:?}",
        mean(&ers)
    );
    let get =
        |prefix: &str| value(&body, prefix).unwrap_or_else(|| panic!("no {prefix} in\n{body}"));
    assert!(body.contains("# TYPE rdma_port_throughput_bytes_per_second gauge"));
    // The idle port has a throughput of exactly zero, not absent.
    assert_eq!(get("rdma_port_throughput_bytes_per_second{network_interface_name=\"ens1f1np1\",network_io_direction=\"transmit\",rdma_device=\"mlx5_1\""), 0.0);
}
