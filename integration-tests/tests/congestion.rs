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
            "6s",
        ])
        .args(extra)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c.spawn().expect("run rocewatch congestion")
    };
    // The first collection reads the file as it is (well within 3 s of the start, even
    // on a loaded machine); halfway through the window it moves: 6 s in which priority
    // 3 was paused 5.85 s and sent 100 bytes, priority 5 sent 7.5 GB. The command
    // divides by the time that really passed (a little over 6 s): the figures below
    // allow for it.
    let moved = stats(1100, 5_850_000, 90_000, 7_500_000_000);
    let text = {
        let child = run(&["--advise"]);
        std::thread::sleep(Duration::from_secs(3));
        put(&nic, &moved);
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let storm = text
        .lines()
        .find(|l| l.starts_with("mlx5_0/1") && l.contains(" 3  "))
        .unwrap_or_else(|| panic!("no row for priority 3:\n{text}"));
    assert!(storm.contains("storm"), "{text}");
    let paused: f64 = storm
        .split_whitespace()
        .find_map(|w| w.strip_suffix('%'))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no PAUSED column:\n{text}"));
    assert!((90.0..=97.5).contains(&paused), "{text}");
    let p5 = text
        .lines()
        .find(|l| l.contains(" 5  ") && l.contains("flowing"))
        .unwrap_or_else(|| panic!("no flowing priority 5:\n{text}"));
    let gbps: f64 = p5.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert!((8.0..=10.0).contains(&gbps), "{text}");
    assert!(text.contains("(1 idle priorities not shown"), "{text}");
    assert!(
        text.contains("ens1f0np0 prio 3: storm\n  rests on: paused by the peer 9"),
        "{text}"
    );
    assert!(text.contains("pfc-prevention-tout"), "{text}");

    // JSON, the file back at its start and moved again.
    put(&nic, &stats(1000, 0, 0, 0));
    let child = run(&["--json"]);
    std::thread::sleep(Duration::from_secs(3));
    put(&nic, &moved);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let w = v["window_s"].as_f64().unwrap();
    assert!((6.0..8.0).contains(&w), "{v}");
    let p3 = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["netdev"] == "ens1f0np0" && p["priority"] == "3")
        .unwrap();
    assert_eq!(p3["state"], "storm", "{v}");
    assert_eq!(p3["device"], "mlx5_0");
    let pauses = p3["rates"]["pause_frames_rx"].as_f64().unwrap();
    assert!((90_000.0 / w - pauses).abs() < 1.0, "{v}");
}

/// `--watch` on a terminal (a pseudo-terminal from util-linux's `script`): one screen
/// redrawn every window in the alternate screen, the host and time on top, and `q` ends
/// it with the terminal as it was.
#[test]
fn congestion_watch_redraws_one_screen_on_a_terminal_and_q_quits() {
    use std::io::Write;
    let script = std::path::Path::new("/usr/bin/script");
    assert!(
        script.exists(),
        "util-linux's script (Debian: bsdutils, essential) is needed for a terminal"
    );
    let cmd = format!(
        "{} congestion --sysfs-root {} --window 1s --watch",
        artifacts().rocewatch.display(),
        fixture("mlx5-roce-dual-port").display()
    );
    let mut child = Command::new(script)
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    std::thread::sleep(Duration::from_millis(3500));
    child.stdin.as_mut().unwrap().write_all(b"q").unwrap();
    let started = std::time::Instant::now();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "q did not end it at once"
    );
    assert!(out.starts_with("\x1b[?1049h\x1b[?25l"), "{out:?}");
    assert!(out.matches("\x1b[H\x1b[2J").count() >= 2, "{out:?}");
    assert!(out.contains("(every 1s; q quits)"), "{out:?}");
    assert!(out.contains("rocewatch congestion over 1s"), "{out:?}");
    assert!(out.trim_end().ends_with("\x1b[?25h\x1b[?1049l"), "{out:?}");
}
