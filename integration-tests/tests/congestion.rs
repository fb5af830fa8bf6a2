//! `rocewatch congestion` through the binary on a fixture tree whose NIC driver
//! statistics (`ethtool -S` text, the counters-ethtool `stats_dir` seam) move between its
//! two collections: priority 3 of ens1f0np0 paused by its peer nearly all of the window
//! while it sends nothing (a storm), priority 5 flowing; the advice names the storm's
//! knob and the JSON carries the rates.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

/// mlx5 driver statistics (names from en_stats.c) at one instant.
fn stats(tx3: u64, paused3_us: u64, pauses3: u64, tx5: u64) -> String {
    format!(
        "NIC statistics:\n     tx_prio3_bytes: {tx3}\n     rx_prio3_bytes: 0\n     rx_prio3_pause: {pauses3}\n     rx_prio3_pause_duration: {paused3_us}\n     tx_prio5_bytes: {tx5}\n     rx_prio5_bytes: 0\n     tx_prio0_bytes: 0\n"
    )
}

/// Replace the statistics file whole (a collection never reads half of it).
fn put(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn congestion_names_a_storm_and_its_knob_over_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let stats_dir = dir.path().join("ethtool");
    std::fs::create_dir_all(&stats_dir).unwrap();
    let nic = stats_dir.join("ens1f0np0");
    std::fs::write(&nic, stats(1000, 0, 0, 0)).unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\n\n[plugins.builtin.counters-ethtool.options]\nstats_dir = {:?}\n",
            fixture("mlx5-roce-dual-port"),
            stats_dir
        ),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut c = Command::new(&artifacts().rocewatch);
        c.args([
            "congestion",
            "--config",
            cfg.to_str().unwrap(),
            "--window",
            "4s",
        ])
        .args(extra)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c.spawn().expect("run rocewatch congestion")
    };
    // The first collection reads the file as it is; halfway through the window it moves:
    // 4 s in which priority 3 was paused 3.9 s and sent 100 bytes, priority 5 sent 5 GB.
    let moved = stats(1100, 3_900_000, 60_000, 5_000_000_000);
    let text = {
        let child = run(&["--advise"]);
        std::thread::sleep(Duration::from_secs(2));
        put(&nic, &moved);
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let storm = text
        .lines()
        .find(|l| l.starts_with("mlx5_0/1") && l.contains(" 3  "))
        .unwrap_or_else(|| panic!("no row for priority 3:\n{text}"));
    assert!(storm.contains("storm") && storm.contains("97.5%"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(" 5  ") && l.contains("flowing") && l.contains("10.00")),
        "{text}"
    );
    assert!(text.contains("(1 idle priorities not shown"), "{text}");
    assert!(
        text.contains("ens1f0np0 prio 3: storm\n  rests on: paused by the peer 98 %"),
        "{text}"
    );
    assert!(text.contains("pfc-prevention-tout"), "{text}");

    // JSON, the file back at its start and moved again.
    put(&nic, &stats(1000, 0, 0, 0));
    let child = run(&["--json"]);
    std::thread::sleep(Duration::from_secs(2));
    put(&nic, &moved);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["window_s"], 4.0);
    let p3 = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["netdev"] == "ens1f0np0" && p["priority"] == "3")
        .unwrap();
    assert_eq!(p3["state"], "storm", "{v}");
    assert_eq!(p3["device"], "mlx5_0");
    assert_eq!(p3["rates"]["pause_frames_rx"], 15_000.0);
}
