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

/// A configuration whose audit log is in `state` (nothing else).
fn audit_config(dir: &Path, state: &Path) -> std::path::PathBuf {
    let cfg = dir.join("audit-only.toml");
    let audit = state.join("audit.jsonl");
    std::fs::write(&cfg, format!("[remediation]\naudit_log = {audit:?}\n")).unwrap();
    cfg
}

/// One owner for the quarantine: 24 `rocewatch quarantine enter` at once put the host in
/// quarantine once (one says so, the rest find it in force), audit one `executing`, and
/// the file keeps the reason of the one that said so.
#[test]
fn concurrent_entries_change_the_quarantine_once_and_audit_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let cfg = audit_config(dir.path(), state.path());
    let children: Vec<_> = (0..24)
        .map(|i| {
            std::process::Command::new(&artifacts().rocewatch)
                .args(["quarantine", "enter", "--reason", &format!("reason {i}")])
                .arg("--config")
                .arg(&cfg)
                .env("STATE_DIRECTORY", state.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for o in &outs {
        assert!(o.status.success(), "{}{}", stdout(o), stderr(o));
    }
    let entered: Vec<String> = outs
        .iter()
        .map(stdout)
        .filter(|s| s.starts_with("in quarantine: "))
        .collect();
    assert_eq!(entered.len(), 1, "{entered:?}");
    let audit = audit_actions(state.path());
    let executing: Vec<_> = audit.iter().filter(|(d, _, _)| d == "executing").collect();
    assert_eq!(executing.len(), 1, "{audit:?}");
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.path().join("quarantine.json")).unwrap())
            .unwrap();
    assert_eq!(
        format!("in quarantine: {}\n", kept["reason"].as_str().unwrap()),
        entered[0]
    );
}

/// The packages give the state directory to the agent's user (mode 0750); root's
/// commands (an operator's, Slurm's) see and change the quarantine there as that user:
/// `show` shows what `health` reports, `release` and `enter` work and leave the files
/// that user's.
#[test]
fn root_shows_releases_and_enters_the_quarantine_in_the_agents_state_directory() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !std::process::Command::new("id")
        .arg("-u")
        .output()
        .unwrap()
        .stdout
        .starts_with(b"0\n")
    {
        return missing(
            "root (the test acts as root in another user's state directory)",
            "run the tests as root (CI does)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let cfg = audit_config(dir.path(), &state);
    let file = state.join("quarantine.json");
    std::fs::write(
        &file,
        r#"{"reason":"rule slow-link firing","origin":"rule:slow-link","since":"2026-01-01T00:00:00Z","since_unix":1767225600}"#,
    )
    .unwrap();
    let nobody = |p: &Path| {
        let o = std::process::Command::new("chown")
            .args(["nobody:nogroup"])
            .arg(p)
            .output()
            .unwrap();
        assert!(o.status.success(), "chown: {}", stderr(&o));
    };
    nobody(&file);
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
    nobody(&state);
    let env = [("STATE_DIRECTORY", state.to_str().unwrap())];
    let (code, out) = health(&cfg, &state);
    assert_eq!(code, 1, "{out}");
    let o = rocewatch(
        &["quarantine", "show", "--config", cfg.to_str().unwrap()],
        &env,
    );
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).starts_with(
            "in quarantine since 2026-01-01T00:00:00Z (rule:slow-link): rule slow-link firing"
        ),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let o = rocewatch(
        &[
            "quarantine",
            "release",
            "--reason",
            "done",
            "--config",
            cfg.to_str().unwrap(),
        ],
        &env,
    );
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(!file.exists());
    let o = rocewatch(
        &[
            "quarantine",
            "enter",
            "--reason",
            "by hand",
            "--config",
            cfg.to_str().unwrap(),
        ],
        &env,
    );
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    for f in [&file, &state.join("audit.jsonl")] {
        let md = std::fs::metadata(f).unwrap();
        assert_eq!(
            md.uid(),
            65534,
            "{} is not the state directory owner's",
            f.display()
        );
    }
    assert_eq!(
        audit_actions(&state).len(),
        4,
        "{:?}",
        audit_actions(&state)
    );
}

/// A planted `quarantine.json` whose reason, origin and since carry terminal escapes,
/// a carriage return, a NUL, a newline and a bidi override: `quarantine show` prints
/// them on one line as text (nothing that moves the cursor, ends the line or reorders
/// it); `--json` keeps them as they are, escaped.
#[test]
fn quarantine_show_prints_a_planted_reason_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let cfg = audit_config(dir.path(), &state);
    let reason = "port\u{1b}[2J\u{1b}[31mDOWN\r\0\nFAKE: all clear \u{202e}reversed";
    let planted = serde_json::json!({
        "reason": reason,
        "origin": "rule:x\u{1b}]0;title\u{7}",
        "since": "2026-01-01\nT00:00:00Z",
        "since_unix": 1767225600u64,
    });
    std::fs::write(state.join("quarantine.json"), planted.to_string()).unwrap();
    let env = [("STATE_DIRECTORY", state.to_str().unwrap())];
    let o = rocewatch(
        &["quarantine", "show", "--config", cfg.to_str().unwrap()],
        &env,
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert_eq!(out.lines().count(), 1, "{out:?}");
    assert!(
        !out.trim_end_matches('\n')
            .chars()
            .any(|c| c.is_control() || c == '\u{202e}'),
        "{out:?}"
    );
    assert!(out.contains("DOWN"), "{out:?}");
    let o = rocewatch(
        &[
            "quarantine",
            "show",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
        ],
        &env,
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    assert_eq!(v["quarantine"]["reason"], reason);
}

/// A `quarantine.json` the agent cannot read counts as a quarantine for `health` (fail
/// closed): the agent exports it so too (origin `unreadable`, the error as the reason),
/// not the last value it read ("not in quarantine").
#[test]
fn an_unreadable_quarantine_is_exported_as_in_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let clear = config(dir.path(), state.path(), "50e9", "");
    let a = agent(&clear, state.path());
    let url = a.prometheus_url();
    until("rocewatch_quarantine 0", Duration::from_secs(20), || {
        quarantine_metric(&url).filter(|l| l.ends_with(" 0"))
    });
    std::fs::write(state.path().join("quarantine.json"), "{not json").unwrap();
    let (code, out) = health(&clear, state.path());
    assert_eq!(code, 1, "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let l = quarantine_metric(&url).unwrap_or_default();
        if l.ends_with(" 1") {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "still {l:?} with an unreadable quarantine.json\nagent: {}",
            a.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(line.contains("origin=\"unreadable\""), "{line}");
}
