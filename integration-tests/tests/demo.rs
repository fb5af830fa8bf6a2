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
    // A frame reads 0.0 when the machine delayed the simulator past a collection (two
    // reads with no advance between them: the agent reports what it read); seen once
    // under the suite's full load, with both lab guests running. At most one such frame.
    let stalled = tx.iter().filter(|v| **v == 0.0).count();
    assert!(
        stalled <= 1
            && tx
                .iter()
                .filter(|v| **v != 0.0)
                .all(|v| *v > 10.0 && *v < 150.0),
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
    // Port counters, and the simulated NICs' driver statistics through the ethtool plugin.
    assert!(lines.iter().all(|l| (l["plugin"] == "counters-sysfs"
        || l["plugin"] == "counters-ethtool")
        && !l["samples"].as_array().unwrap().is_empty()));
    for p in ["counters-sysfs", "counters-ethtool"] {
        assert!(lines.iter().any(|l| l["plugin"] == p), "{p}");
    }
}

#[test]
fn demo_pfc_storm_is_detected_by_the_default_rule_and_remediated_in_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let o = rocewatch(
        &[
            "demo",
            "--scenario",
            "pfc-storm",
            "--no-tui",
            "--duration",
            "60s",
            "--audit-log",
            audit.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("PFC PAUSE STORM on mlx5_0 port 1 priority 3"),
        "{out}"
    );
    assert!(
        out.contains("pfc-pause-storm") && out.contains("FIRING"),
        "{out}"
    );
    assert!(
        out.contains("CLEARED"),
        "the storm ends and the rule clears:\n{out}"
    );
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seq: Vec<&str> = recs
        .iter()
        .map(|r| r["decision"].as_str().unwrap())
        .collect();
    assert_eq!(seq, ["fired", "dry_run", "cleared", "dry_run"], "{recs:#?}");
    for r in &recs {
        assert_eq!(r["rule"], "pfc-pause-storm");
    }
    // Two decisions (the firing, the clearing), each its transition and its dry run: one
    // id each, the labels on the transition's record only.
    for (transition, dry_run) in [(&recs[0], &recs[1]), (&recs[2], &recs[3])] {
        assert_eq!(transition["labels"]["rdma.device"], "mlx5_0");
        assert_eq!(transition["labels"]["rdma.priority"], "3");
        assert!(dry_run.get("labels").is_none(), "{dry_run}");
        assert_eq!(transition["decision_id"], dry_run["decision_id"]);
    }
    assert_ne!(recs[0]["decision_id"], recs[2]["decision_id"]);
    let ratio = recs[0]["value"].as_f64().unwrap();
    assert!(
        (0.5..0.7).contains(&ratio),
        "paused about 60 % of the time: {ratio}"
    );
    assert!(recs[1]["detail"].as_str().unwrap().starts_with("would run"));
    // Nothing ran for real: the command does not exist on this machine, and a real run
    // would have left an "executing" record.
    assert!(!recs.iter().any(|r| r["decision"] == "executing"));
}

/// The congestion scenarios: priority 3 of mlx5_0 shows the state each one is about
/// (the agent's own derived `rdma.priority.congestion`, in the live view's CONGESTION
/// column), the event says what is simulated, and 802.3x pause fires the default
/// `global-pause` rule.
#[test]
fn demo_congestion_scenarios_show_their_state() {
    for (scenario, state, event) in [
        ("storm", "3:storm", "PAUSE STORM"),
        ("pfc", "3:pfc_dominated", "PFC-DOMINATED"),
        ("lossy", "3:lossy", "LOSSES WITHOUT PAUSES"),
        ("global-pause", "", "802.3x GLOBAL PAUSE"),
    ] {
        let o = rocewatch(
            &[
                "demo",
                "--scenario",
                scenario,
                "--no-tui",
                "--interval",
                "300ms",
                "--duration",
                "3s",
            ],
            &[],
        );
        assert!(o.status.success(), "{scenario}: {}", stderr(&o));
        let out = stdout(&o);
        // The last frame.
        let last = &out[out.rfind("rocewatch demo:").unwrap()..];
        let mlx5_0 = last
            .lines()
            .find(|l| l.starts_with("mlx5_0"))
            .unwrap_or_else(|| panic!("{scenario}: no mlx5_0 row:\n{last}"));
        if !state.is_empty() {
            assert!(mlx5_0.ends_with(state), "{scenario}:\n{last}");
        }
        assert!(last.contains(event), "{scenario}:\n{last}");
        if scenario == "global-pause" {
            assert!(
                last.lines()
                    .any(|l| l.trim_start().starts_with("global-pause") && l.contains("FIRING")),
                "{scenario}:\n{last}"
            );
        }
    }
}

/// On a terminal the demo redraws its screen in place; its log lines (the WARN of a rule
/// firing) wait and follow the last frame instead of being drawn over the screen (issue
/// 49), and the screen says they are waiting. Run under `script`, which gives it a
/// pseudo-terminal.
#[test]
fn on_a_terminal_the_demo_logs_follow_its_screen() {
    let Some(script) = ["/usr/bin/script", "/bin/script"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
    else {
        missing(
            "script (util-linux), for a pseudo-terminal",
            "apt-get install bsdutils",
        );
        return;
    };
    let bin = artifacts().rocewatch.display().to_string();
    let o = std::process::Command::new(script)
        .args([
            "-qec",
            &format!("{bin} demo --duration 8s --interval 200ms"),
            "/dev/null",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{}{}",
        text,
        String::from_utf8_lossy(&o.stderr)
    );
    let last_clear = text
        .rfind("\x1b[2J")
        .unwrap_or_else(|| panic!("no screen drawn: {text}"));
    let firing: Vec<usize> = text.match_indices("rule firing").map(|(i, _)| i).collect();
    assert!(!firing.is_empty(), "no rule fired in 8 s: {text}");
    assert!(
        firing.iter().all(|&i| i > last_clear),
        "a log line was drawn over the screen (at {firing:?}, last redraw at {last_clear}):\n{text}"
    );
    assert!(text.contains("held, shown when the demo ends"), "{text}");
}
