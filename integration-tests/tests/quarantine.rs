//! Quarantine that sticks: a rule with `quarantine = true` puts the host there; it
//! survives a `kill -9` and a restart whose rule no longer fires; `health` says unhealthy
//! and the agent exports it; only `rocewatch quarantine release` (audited) or the recovery
//! policy ends it.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

/// A configuration with the slow-link rule (both mlx5 ports of the tree run at 100 Gb/s:
/// it fires below `threshold`) that quarantines, its audit log in `state`.
fn config(dir: &Path, state: &Path, threshold: &str, health: &str) -> std::path::PathBuf {
    let cfg = dir.join(format!("q-{threshold}.toml"));
    let audit = state.join("audit.jsonl");
    std::fs::write(
        &cfg,
        format!(
            "[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = {{ \"rdma.device\" = \"mlx5_0\" }}\nop = \"<\"\nthreshold = {threshold}\nquarantine = true\n\n[remediation]\naudit_log = {audit:?}\n\n[health]\n{health}\n"
        ),
    )
    .unwrap();
    cfg
}

fn agent(cfg: &Path, state: &Path) -> RunningAgent {
    RunningAgent::start_with(
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            fixture("mlx5-roce-dual-port").to_str().unwrap(),
            "--interval",
            "300ms",
            "--prometheus-listen",
            "127.0.0.1:0",
        ],
        &[("STATE_DIRECTORY", state.to_str().unwrap())],
        None,
    )
}

fn health(cfg: &Path, state: &Path) -> (i32, String) {
    let o = rocewatch(
        &[
            "health",
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            fixture("mlx5-roce-dual-port").to_str().unwrap(),
        ],
        &[("STATE_DIRECTORY", state.to_str().unwrap())],
    );
    (o.status.code().unwrap_or(-1), stdout(&o))
}

fn until<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn quarantine_metric(url: &str) -> Option<String> {
    let text = reqwest::blocking::get(format!("{url}/metrics"))
        .ok()?
        .text()
        .ok()?;
    text.lines()
        .find(|l| l.starts_with("rocewatch_quarantine"))
        .map(str::to_string)
}

fn audit_actions(state: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(state.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| {
            r["action"]
                .as_str()
                .is_some_and(|a| a.starts_with("quarantine"))
        })
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("decision"), s("action"), s("detail"))
        })
        .collect()
}

#[test]
fn a_quarantine_survives_kill_9_and_a_restart_and_ends_only_by_release() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let firing = config(dir.path(), state.path(), "200e9", "");
    let a = agent(&firing, state.path());
    let file = state.path().join("quarantine.json");
    until("quarantine.json", Duration::from_secs(20), || {
        file.exists().then_some(())
    });
    let url = a.prometheus_url();
    let line = until("rocewatch_quarantine 1", Duration::from_secs(10), || {
        quarantine_metric(&url).filter(|l| l.ends_with(" 1"))
    });
    assert!(line.contains("origin=\"rule:slow-link\""), "{line}");
    let (code, out) = health(&firing, state.path());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("quarantine: rule slow-link firing"),
        "{out}"
    );
    // kill -9, then an agent whose rule no longer fires: the quarantine stays.
    a.proc.signal("KILL");
    drop(a);
    let clear = config(dir.path(), state.path(), "50e9", "");
    let b = agent(&clear, state.path());
    let url = b.prometheus_url();
    let line = until(
        "the metric after the restart",
        Duration::from_secs(10),
        || quarantine_metric(&url),
    );
    assert!(
        line.ends_with(" 1"),
        "a restart released the quarantine: {line}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(file.exists(), "the quarantine ended without a release");
    assert_eq!(health(&clear, state.path()).0, 1);
    // The operator's release, audited with its reason.
    let o = rocewatch(
        &[
            "quarantine",
            "release",
            "--reason",
            "cable replaced, ticket 4711",
            "--config",
            clear.to_str().unwrap(),
        ],
        &[("STATE_DIRECTORY", state.path().to_str().unwrap())],
    );
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(!file.exists());
    let (code, out) = health(&clear, state.path());
    assert_eq!(code, 0, "{out}");
    until("rocewatch_quarantine 0", Duration::from_secs(10), || {
        quarantine_metric(&url).filter(|l| l.ends_with(" 0"))
    });
    let audit = audit_actions(state.path());
    let kinds: Vec<(&str, &str)> = audit
        .iter()
        .map(|(d, a, _)| (d.as_str(), a.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("executing", "quarantine"),
            ("result", "quarantine"),
            ("executing", "quarantine-release"),
            ("result", "quarantine-release")
        ],
        "{audit:?}\nagent: {}",
        b.stderr()
    );
    assert!(
        audit[2]
            .2
            .starts_with("cable replaced, ticket 4711 (in quarantine since "),
        "{audit:?}"
    );
}

#[test]
fn the_recovery_policy_releases_once_the_rule_is_clear_and_health_passes() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let firing = config(dir.path(), state.path(), "200e9", "release_after = \"1s\"");
    let a = agent(&firing, state.path());
    let file = state.path().join("quarantine.json");
    until("quarantine.json", Duration::from_secs(20), || {
        file.exists().then_some(())
    });
    // While the rule fires, the policy keeps it.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        file.exists(),
        "released while the rule fired:\n{}",
        a.stderr()
    );
    // The rule clears (a reload with a threshold it meets): released within a few
    // intervals of release_after, audited as a recovery.
    std::fs::copy(
        config(dir.path(), state.path(), "50e9", "release_after = \"1s\""),
        &firing,
    )
    .unwrap();
    a.proc.signal("HUP");
    until("the recovery", Duration::from_secs(20), || {
        (!file.exists()).then_some(())
    });
    let audit = audit_actions(state.path());
    let release = audit
        .iter()
        .find(|(d, a, _)| d == "executing" && a == "quarantine-release")
        .unwrap_or_else(|| panic!("{audit:?}"));
    assert!(
        release
            .2
            .starts_with("recovered: rule slow-link clear for "),
        "{audit:?}"
    );
    assert!(
        release.2.contains("the health self-test passed"),
        "{audit:?}"
    );
}
