//! `rocewatch demo` shows moving numbers, then the error burst.

use crate::support::*;

#[test]
fn demo_numbers_move_and_the_burst_shows() {
    let o = rocewatch(
        &[
            "demo",
            "--no-tui",
            "--interval",
            "250ms",
            "--duration",
            "4s",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let frames: Vec<&str> = out
        .split("rocewatch demo: ")
        .filter(|f| f.contains("DEVICE"))
        .collect();
    assert!(
        frames.len() >= 8,
        "expected a frame per tick, got {}:\n{out}",
        frames.len()
    );
    // TX Gb/s of mlx5_0 across frames: present after the first and not constant.
    let tx: Vec<f64> = frames
        .iter()
        .filter_map(|f| f.lines().find(|l| l.starts_with("mlx5_0")))
        .filter_map(|l| l.split_whitespace().nth(4)?.parse().ok())
        .collect();
    assert!(tx.len() >= 5, "{out}");
    assert!(
        tx.iter().all(|v| *v > 10.0 && *v < 150.0),
        "plausible rates for a 100G port: {tx:?}"
    );
    assert!(
        tx.windows(2).any(|w| w[0] != w[1]),
        "numbers must move: {tx:?}"
    );
    // The burst: errors per second on mlx5_1 at some point.
    assert!(out.contains("ERROR BURST on mlx5_1"), "{out}");
    let burst_line = frames
        .iter()
        .filter_map(|f| f.lines().find(|l| l.starts_with("mlx5_1")))
        .find(|l| l.contains("<-- errors"));
    assert!(
        burst_line.is_some(),
        "an mlx5_1 line flagged with errors: {out}"
    );
}

#[test]
fn demo_json_lines_are_collections() {
    let o = rocewatch(
        &[
            "demo",
            "--format",
            "json",
            "--interval",
            "200ms",
            "--duration",
            "1s",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 3);
    assert!(lines
        .iter()
        .all(|l| l["plugin"] == "counters-sysfs" && !l["samples"].as_array().unwrap().is_empty()));
}
