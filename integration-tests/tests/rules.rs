//! Threshold rules in a running agent: a rule fires on a fixture, `rocewatch rules` shows
//! it firing with its value, the agent logs it and counts it in /metrics; the default rule
//! set parses and evaluates on every fixture.

use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn a_rule_fires_in_a_running_agent_and_rocewatch_rules_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rules.toml");
    std::fs::write(
        &cfg,
        r#"
[[rules]]
name = "slow-link"
metric = "rdma.port.rate"
match = { "rdma.device" = "mlx5_*" }
op = "<"
threshold = 200e9
severity = "warning"

[[rules]]
name = "never"
metric = "rdma.port.up"
op = "=="
threshold = 0
for = "1h"
"#,
    )
    .unwrap();
    let mut agent = agent_on_mlx5(&cfg);
    let url = agent.prometheus_url();
    let deadline = Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let out = rocewatch(&["rules", "--url", &url, "--json"], &[]);
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
            let rows = v["rules"].as_array().unwrap().clone();
            if rows.iter().any(|r| r["phase"] == "firing") {
                break rows;
            }
        }
        assert!(Instant::now() < deadline, "no rule fired: {}", stderr(&out));
        std::thread::sleep(Duration::from_millis(200));
    };
    // Both mlx5 ports run at 100 Gb/s: two firing series with the value, and the rule
    // with a 1 h `for` never fires.
    let firing: Vec<_> = rows.iter().filter(|r| r["rule"] == "slow-link").collect();
    assert_eq!(firing.len(), 2, "{rows:?}");
    for r in &firing {
        assert_eq!(r["phase"], "firing");
        assert_eq!(r["value"], 100e9);
        assert!(r["labels"]["rdma.device"]
            .as_str()
            .unwrap()
            .starts_with("mlx5_"));
    }
    assert!(rows
        .iter()
        .filter(|r| r["rule"] == "never")
        .all(|r| r["phase"] == "inactive"));
    let table = rocewatch(&["rules", "--url", &url], &[]);
    let text = stdout(&table);
    assert!(
        text.contains("slow-link") && text.contains("firing"),
        "{text}"
    );
    assert!(text.contains("rdma.port.rate < 200 Gb/s"), "{text}");
    let metrics = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains(
            r#"rocewatch_rule_transitions_total{rule="slow-link",transition="firing"} 2"#
        ),
        "{metrics}"
    );
    let (_, logged, _) = agent.proc.stop();
    assert!(
        logged.contains("rule firing") && logged.contains("slow-link"),
        "{logged}"
    );
}

#[test]
fn the_default_rule_set_evaluates_on_every_fixture() {
    for case in [
        "mlx5-roce-dual-port",
        "rxe-soft-roce",
        "ib-hca",
        "no-pma-restricted",
    ] {
        let root = fixture(case);
        let out = rocewatch(
            &[
                "rules",
                "--once",
                "--json",
                "--config",
                "configs/rules.toml",
                "--sysfs-root",
                root.to_str().unwrap(),
            ],
            &[],
        );
        assert!(out.status.success(), "{case}: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let rows = v["rules"].as_array().unwrap();
        assert!(
            rows.iter().any(|r| r["rule"] == "pfc-pause-storm"),
            "{case}"
        );
        // Nothing is firing on a quiet fixture at first sight, except what `for` = 0 allows.
        assert!(
            rows.iter().all(|r| r["phase"] != "firing"),
            "{case}: {rows:?}"
        );
    }
    // ib-hca has a port down and slow links: pending (the rules wait 30 s / 1 m).
    let out = rocewatch(
        &[
            "rules",
            "--once",
            "--json",
            "--config",
            "configs/rules.toml",
            "--sysfs-root",
            fixture("ib-hca").to_str().unwrap(),
        ],
        &[],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["rule"] == "port-down"
            && r["phase"] == "pending"
            && r["labels"]["rdma.port"] == "2"));
    // Without a config, the default set is evaluated, and said.
    let out = rocewatch(
        &[
            "rules",
            "--once",
            "--json",
            "--sysfs-root",
            fixture("ib-hca").to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("configs/rules.toml"),
        "{}",
        stderr(&out)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["rule"] == "port-down"));
    // A config without rules says where the default set is.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let out = rocewatch(
        &[
            "rules",
            "--once",
            "--config",
            empty.to_str().unwrap(),
            "--sysfs-root",
            fixture("ib-hca").to_str().unwrap(),
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("configs/rules.toml"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_firing_rule_runs_its_actions_in_a_running_agent_with_an_audit_trail() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("action.out");
    let records = run_until(
        dir.path(),
        r#"["record", "drain"]"#,
        &format!(
            r#"
[remediation.actions.record]
type = "exec"
command = ["sh", "-c", "env | grep ^ROCEWATCH_LABEL_ > \"$0\"", {out:?}]
dry_run = false

[remediation.actions.drain]
type = "exec"
command = ["/usr/local/sbin/drain-this-node"]
"#
        ),
        |r| r.iter().any(|r| r["decision"] == "result") && out.exists(),
    );
    let decisions: Vec<(&str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["decision"].as_str().unwrap(),
                r["action"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        &decisions[..4],
        [
            ("fired", "-"),
            ("executing", "record"),
            ("dry_run", "drain"),
            ("result", "record")
        ],
        "{records:?}"
    );
    assert_eq!(records[3]["outcome"], "ok");
    assert!(records[2]["detail"]
        .as_str()
        .unwrap()
        .contains("/usr/local/sbin/drain-this-node"));
    let env = std::fs::read_to_string(&out).unwrap();
    assert!(env.contains("ROCEWATCH_LABEL_RDMA_DEVICE=mlx5_0"), "{env}");
    assert_eq!(
        records.len(),
        4,
        "one firing, one set of decisions: {records:?}"
    );
}

#[test]
fn a_rule_naming_an_unknown_action_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[[rules]]\nname = \"r\"\nmetric = \"rdma.port.up\"\nactions = [\"reboot\"]\n",
    )
    .unwrap();
    let out = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
    assert!(!out.status.success());
    let e = stderr(&out) + &stdout(&out);
    assert!(
        e.contains("rules[0] (r).actions") && e.contains("no action \"reboot\""),
        "{e}"
    );
}

/// `rocewatch run` with `cfg` on the mlx5 fixture, collecting every 300 ms, serving
/// Prometheus on a port of the kernel's choosing.
fn agent_on_mlx5(cfg: &std::path::Path) -> RunningAgent {
    RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        fixture("mlx5-roce-dual-port").to_str().unwrap(),
        "--interval",
        "300ms",
        "--prometheus-listen",
        "127.0.0.1:0",
    ])
}

/// Starts the agent on the mlx5 fixture with `extra` config appended to a rule that fires
/// at once and names `actions`; returns the audit records once `done` holds.
fn run_until(
    dir: &std::path::Path,
    actions: &str,
    extra: &str,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let audit = dir.join("audit.jsonl");
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = {{ \"rdma.device\" = \"mlx5_0\" }}\nop = \"<\"\nthreshold = 200e9\nactions = {actions}\n\n[remediation]\naudit_log = {audit:?}\nkill_switch = {stop:?}\n{extra}",
            stop = dir.join("STOP"),
        ),
    )
    .unwrap();
    let check = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
    assert!(check.status.success(), "{}", stderr(&check));
    let _agent = agent_on_mlx5(&cfg);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        let recs: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if done(&recs) {
            // A second more: what happens after (a rule that stays firing decides once).
            std::thread::sleep(Duration::from_millis(1000));
            let text = std::fs::read_to_string(&audit).unwrap();
            return text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        }
        assert!(Instant::now() < deadline, "not done: {text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_remediation_plugin_loaded_through_the_c_abi_is_invoked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plugin.jsonl");
    let recs = run_until(
        dir.path(),
        r#"["plug"]"#,
        &format!(
            "[remediation.actions.plug]\ntype = \"plugin\"\nplugin = \"example\"\ndry_run = false\n\n[[plugins.external]]\npath = {:?}\noptions = {{ output = {out:?} }}\n",
            artifacts().example_so
        ),
        |r| r.iter().any(|r| r["decision"] == "result"),
    );
    let result = recs.iter().find(|r| r["decision"] == "result").unwrap();
    assert_eq!(result["outcome"], "ok", "{recs:?}");
    assert!(
        result["detail"].as_str().unwrap().contains("recorded"),
        "{result}"
    );
    let req: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(req["rule"], "slow-link");
    assert_eq!(req["event"], "firing");
    assert_eq!(req["dry_run"], false);
    assert_eq!(req["labels"]["rdma.device"], "mlx5_0");
    assert_eq!(req["samples"][0]["name"], "rdma.port.rate");
    assert_eq!(req["samples"][0]["value"], 100e9);
}

#[test]
fn a_webhook_action_retries_until_the_receiver_answers() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    // The receiver fails the first request with a 503, then accepts.
    let server = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        for status in ["503 Service Unavailable", "200 OK"] {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let n = s.read(&mut chunk).unwrap();
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some(h) = text.find("\r\n\r\n") {
                    let len: usize = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if buf.len() >= h + 4 + len {
                        bodies.push(text);
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            .unwrap();
        }
        bodies
    });
    let dir = tempfile::tempdir().unwrap();
    let recs = run_until(
        dir.path(),
        r#"["hook"]"#,
        &format!("[remediation.actions.hook]\ntype = \"webhook\"\nurl = {url:?}\nheaders = {{ authorization = \"Bearer t0k\" }}\ndry_run = false\n"),
        |r| r.iter().any(|r| r["decision"] == "result"),
    );
    let result = recs.iter().find(|r| r["decision"] == "result").unwrap();
    assert_eq!(result["outcome"], "ok", "{recs:?}");
    assert!(
        result["detail"].as_str().unwrap().contains("attempt 2"),
        "{result}"
    );
    let bodies = server.join().unwrap();
    assert_eq!(bodies.len(), 2);
    assert!(bodies[1].starts_with("POST /hook"), "{}", bodies[1]);
    assert!(bodies[1]
        .to_ascii_lowercase()
        .contains("authorization: bearer t0k"));
    assert!(
        bodies[1].contains("\"rule\":\"slow-link\"") && bodies[1].contains("\"event\":\"firing\"")
    );
}

#[test]
fn a_remediation_plugin_that_panics_or_hangs_is_contained_and_the_agent_goes_on() {
    for (mode, outcome, detail) in [
        ("panic", "error", "panic"),
        ("hang", "timeout", "did not finish"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let recs = run_until(
            dir.path(),
            r#"["bad", "note"]"#,
            &format!(
                "[remediation.actions.bad]\ntype = \"plugin\"\nplugin = \"fault\"\ndry_run = false\ntimeout = \"1s\"\n\n\
                 [remediation.actions.note]\ntype = \"log\"\ndry_run = false\n\n\
                 [[plugins.external]]\npath = {:?}\noptions = {{ mode = \"{mode}\" }}\n",
                artifacts().fault_so
            ),
            |r| r.iter().filter(|r| r["decision"] == "result").count() == 2,
        );
        let bad = recs
            .iter()
            .find(|r| r["decision"] == "result" && r["action"] == "bad")
            .unwrap();
        assert_eq!(bad["outcome"], outcome, "{mode}: {recs:#?}");
        assert!(
            bad["detail"].as_str().unwrap().contains(detail),
            "{mode}: {bad}"
        );
        let note = recs
            .iter()
            .find(|r| r["decision"] == "result" && r["action"] == "note")
            .unwrap();
        assert_eq!(note["outcome"], "ok", "the other action ran: {recs:#?}");
    }
}

#[test]
fn each_decision_has_its_own_id_across_a_restart_and_its_labels_once() {
    // A rule that fires on both mlx5 ports: two decisions per run; two runs on one log.
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = {{ \"rdma.device\" = \"mlx5_*\" }}\nop = \"<\"\nthreshold = 200e9\nactions = [\"ok\"]\n\n\
             [remediation]\naudit_log = {audit:?}\nkill_switch = {:?}\n\n\
             [remediation.actions.ok]\ntype = \"exec\"\ncommand = [\"true\"]\ndry_run = false\n",
            dir.path().join("STOP"),
        ),
    )
    .unwrap();
    let records = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    for run in 1..=2 {
        let agent = agent_on_mlx5(&cfg);
        let deadline = Instant::now() + Duration::from_secs(20);
        while records()
            .iter()
            .filter(|r| r["decision"] == "result")
            .count()
            < 2 * run
        {
            assert!(
                Instant::now() < deadline,
                "run {run}: no two results: {:?}\n{}",
                records(),
                agent.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let recs = records();
    let mut by_id: std::collections::BTreeMap<&str, Vec<&serde_json::Value>> = Default::default();
    for r in &recs {
        let id = r["decision_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id: {r}"));
        by_id.entry(id).or_default().push(r);
    }
    // Four decisions (two ports, two runs): four ids, none repeated by the restart.
    assert_eq!(by_id.len(), 4, "{recs:#?}");
    for (id, records) in &by_id {
        let kinds: Vec<&str> = records
            .iter()
            .map(|r| r["decision"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["fired", "executing", "result"], "{id}: {recs:#?}");
        assert!(
            records[0]["labels"]["rdma.device"]
                .as_str()
                .is_some_and(|d| d.starts_with("mlx5_")),
            "{id}: the labels on the first record: {recs:#?}"
        );
        assert!(
            records[1..].iter().all(|r| r.get("labels").is_none()),
            "{id}: labels once: {recs:#?}"
        );
    }
}

/// Issue 27: a 64-bit counter going 3 000 000 000 → 100 (after `perfquery -R`, a driver
/// reload, a VF reset) was taken for a 32-bit wrap, a rate of 4.3e8/s for one interval; a
/// rate rule fired and its non-dry-run exec action ran. A reset is no traffic.
#[test]
fn a_counter_reset_fires_no_rule_and_runs_no_action() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    let copy = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(copy.success());
    let counter = root.join("class/infiniband/mlx5_0/ports/1/hw_counters/rp_cnp_handled");
    assert!(counter.exists(), "{}", counter.display());
    let write = |v: u64| std::fs::write(&counter, format!("{v}\n")).unwrap();
    write(2_999_999_000);
    let fired = dir.path().join("FIRED");
    let audit = dir.path().join("audit.jsonl");
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[[rules]]
name = "cnp-storm"
metric = "rdma.port.cnp.handled"
match = {{ "rdma.device" = "mlx5_0", "rdma.port" = "1" }}
condition = "rate"
window = "2s"
threshold = 1000000
actions = ["drain"]

[remediation]
audit_log = {audit:?}
kill_switch = {stop:?}

[remediation.actions.drain]
type = "exec"
command = ["touch", {fired:?}]
dry_run = false
"#,
            stop = dir.path().join("STOP"),
        ),
    )
    .unwrap();
    let check = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
    assert!(check.status.success(), "{}", stderr(&check));
    let agent = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        root.to_str().unwrap(),
        "--interval",
        "300ms",
        "--prometheus-listen",
        "127.0.0.1:0",
    ]);
    let url = format!("{}/metrics", agent.prometheus_url());
    let scrape = || reqwest::blocking::get(&url).unwrap().text().unwrap();
    let wait_for = |what: &str, f: &dyn Fn(&str) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = scrape();
            if f(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{what} never showed:\n{text}\n{}",
                agent.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let series = |v: &'static str| {
        move |t: &str| {
            t.lines().any(|l| {
                l.starts_with("rdma_port_cnp_handled_total{")
                    && l.contains("rdma_device=\"mlx5_0\"")
                    && l.contains("rdma_port=\"1\"")
                    && l.ends_with(&format!(" {v}"))
            })
        }
    };
    wait_for("2999999000", &series("2999999000"));
    // 1000 over a few collections: a few thousand per second, below the threshold.
    write(3_000_000_000);
    wait_for("3000000000", &series("3000000000"));
    std::thread::sleep(Duration::from_millis(700));
    // The reset.
    write(100);
    wait_for("the reset", &series("100"));
    // Two windows more of collections after it.
    std::thread::sleep(Duration::from_secs(4));
    let records = std::fs::read_to_string(&audit).unwrap_or_default();
    assert!(
        !fired.exists() && !records.contains("\"fired\""),
        "a counter reset fired the rule and ran its action:\n{records}\n{}",
        agent.stderr()
    );
    wait_for("the reset counted as one", &|t: &str| {
        t.lines().any(|l| {
            l.starts_with("rocewatch_counter_resets_total{")
                && l.contains("name=\"rdma.port.cnp.handled\"")
        })
    });
}

/// Whether process `pid` lives (a zombie is gone: it only waits to be reaped).
pub(crate) fn process_alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Kills the processes of a pid file when dropped: a failing test leaves nothing behind.
pub(crate) struct KillPids(pub(crate) std::path::PathBuf);

impl Drop for KillPids {
    fn drop(&mut self) {
        for pid in std::fs::read_to_string(&self.0).unwrap_or_default().lines() {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: kill only sends a signal.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// An agent on the mlx5 fixture whose rule fires at once and runs `hang` (a command that
/// writes its pid and its child's to `pids`, then waits for the child) with `timeout`, and
/// `short` (2 s); returns once both run.
fn agent_with_a_hanging_action(
    dir: &std::path::Path,
    timeout: &str,
) -> (RunningAgent, std::path::PathBuf, KillPids) {
    let pids = dir.join("pids");
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = {{ \"rdma.device\" = \"mlx5_0\" }}\nop = \"<\"\nthreshold = 200e9\nactions = [\"hang\", \"short\"]\n\n\
             [remediation]\naudit_log = {audit:?}\nkill_switch = {stop:?}\n\n\
             [remediation.actions.hang]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", \"echo $$ > {pids}; sleep 300 & echo $! >> {pids}; wait\"]\ndry_run = false\ntimeout = \"{timeout}\"\n\n\
             [remediation.actions.short]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", \"sleep 2; echo done\"]\ndry_run = false\ntimeout = \"20s\"\n",
            audit = dir.join("audit.jsonl"),
            stop = dir.join("STOP"),
            pids = pids.display(),
        ),
    )
    .unwrap();
    let guard = KillPids(pids.clone());
    let mut agent = agent_on_mlx5(&cfg);
    agent
        .proc
        .wait_log("the action's pids", Duration::from_secs(20), |_| {
            (std::fs::read_to_string(&pids)
                .unwrap_or_default()
                .lines()
                .count()
                == 2)
                .then_some(())
        });
    (agent, pids, guard)
}

fn audit_results(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["decision"] == "result")
        .collect()
}

#[test]
fn at_shutdown_running_actions_are_waited_for_then_killed_and_every_outcome_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, pids, _guard) = agent_with_a_hanging_action(dir.path(), "4s");
    let (st, log, took) = agent.proc.stop();
    assert!(st.success(), "{st}\n{log}");
    // The short action ended on its own (2 s); the hanging one was waited for up to its
    // timeout (4 s from its start), then its group was killed.
    assert!(took < Duration::from_secs(15), "took {took:?}\n{log}");
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        assert!(
            !process_alive(pid),
            "process {pid} of the action outlived the agent\n{log}"
        );
    }
    let results = audit_results(dir.path());
    let outcome = |action: &str| {
        results
            .iter()
            .find(|r| r["action"] == action)
            .unwrap_or_else(|| panic!("no result for {action}: {results:#?}\n{log}"))
            .clone()
    };
    assert_eq!(outcome("short")["outcome"], "ok", "{results:#?}");
    let hang = outcome("hang");
    assert_eq!(hang["outcome"], "killed", "{hang}");
    assert!(
        hang["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("killed at shutdown")),
        "{hang}"
    );
    assert!(log.contains("waiting for 2 remediation action"), "{log}");
}

#[test]
fn a_second_signal_kills_running_actions_at_once_and_audits_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, pids, _guard) = agent_with_a_hanging_action(dir.path(), "60s");
    agent.proc.signal("TERM");
    assert!(
        agent.proc.wait_exit(Duration::from_millis(2500)).is_none(),
        "the agent did not wait for its running actions: {}",
        agent.stderr()
    );
    let second = Instant::now();
    agent.proc.signal("TERM");
    let st = agent
        .proc
        .wait_exit(Duration::from_secs(5))
        .expect("a second signal did not end the agent");
    assert!(second.elapsed() < Duration::from_secs(5));
    assert_eq!(st.code(), Some(130));
    let log = agent.stderr();
    std::thread::sleep(Duration::from_millis(200));
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        assert!(
            !process_alive(pid),
            "process {pid} of the action outlived the agent\n{log}"
        );
    }
    let results = audit_results(dir.path());
    let hang = results
        .iter()
        .find(|r| r["action"] == "hang")
        .unwrap_or_else(|| panic!("no result for hang: {results:#?}\n{log}"));
    assert_eq!(hang["outcome"], "killed", "{hang}");
    assert!(
        hang["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("killed at shutdown")),
        "{hang}"
    );
    assert_eq!(results.len(), 2, "one result each: {results:#?}");
}

/// A command that leaves its process group and session (`setsid`) with a sleeper that
/// writes its pid to `pids`: once while the command runs (its parent lives on), once
/// through a subshell that ends at once (the sleeper is orphaned while the action runs).
fn escaping(pids: &std::path::Path, then: &str) -> String {
    let p = pids.display();
    format!(
        "(setsid sh -c 'echo $$ >> {p}; exec sleep 302' &); setsid sh -c 'echo $$ >> {p}; exec sleep 301' & {then}"
    )
}

/// An agent on the mlx5 fixture whose rule fires at once and runs `actions` (TOML of
/// `[remediation.actions.*]`, named in `names`); returns once `sleepers` pids are written.
fn agent_with_escaping_actions(
    dir: &std::path::Path,
    names: &[&str],
    actions: &str,
    pids: &std::path::Path,
    sleepers: usize,
) -> (RunningAgent, KillPids) {
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = {{ \"rdma.device\" = \"mlx5_0\" }}\nop = \"<\"\nthreshold = 200e9\nactions = {names:?}\n\n\
             [remediation]\naudit_log = {audit:?}\nkill_switch = {stop:?}\n\n{actions}",
            audit = dir.join("audit.jsonl"),
            stop = dir.join("STOP"),
        ),
    )
    .unwrap();
    let guard = KillPids(pids.to_path_buf());
    let mut agent = agent_on_mlx5(&cfg);
    agent
        .proc
        .wait_log("the sleepers' pids", Duration::from_secs(20), |_| {
            (std::fs::read_to_string(pids)
                .unwrap_or_default()
                .lines()
                .count()
                == sleepers)
                .then_some(())
        });
    (agent, guard)
}

/// Fails naming every process of `pids` still alive a few seconds on.
fn assert_all_gone(pids: &std::path::Path, when: &str, log: &str) {
    let pids = std::fs::read_to_string(pids).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let alive: Vec<&str> = pids.lines().filter(|p| process_alive(p)).collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{when}: process(es) {alive:?} that the action started (setsid) live on\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_action_that_calls_setsid_leaves_nothing_behind_at_its_timeout_or_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let actions = format!(
        "[remediation.actions.hang]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", {hang:?}]\ndry_run = false\ntimeout = \"3s\"\n\n\
         [remediation.actions.daemon]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", {daemon:?}]\ndry_run = false\ntimeout = \"20s\"\n",
        hang = escaping(&pids, "sleep 300"),
        daemon = escaping(&pids, "sleep 1; exit 0"),
    );
    let (mut agent, _guard) =
        agent_with_escaping_actions(dir.path(), &["hang", "daemon"], &actions, &pids, 4);
    agent
        .proc
        .wait_log("both results", Duration::from_secs(20), |_| {
            (audit_results(dir.path()).len() == 2).then_some(())
        });
    let log = agent.stderr();
    let results = audit_results(dir.path());
    let outcome = |action: &str| {
        results
            .iter()
            .find(|r| r["action"] == action)
            .map(|r| r["outcome"].clone())
    };
    assert_eq!(
        outcome("hang"),
        Some("timeout".into()),
        "{results:#?}\n{log}"
    );
    assert_eq!(outcome("daemon"), Some("ok".into()), "{results:#?}\n{log}");
    // The agent runs on: what the actions started is gone because they ended.
    assert_all_gone(&pids, "after the actions ended", &log);
    let (st, log, _) = agent.proc.stop();
    assert!(st.success(), "{st}\n{log}");
}

#[test]
fn at_shutdown_an_action_that_calls_setsid_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let actions = format!(
        "[remediation.actions.hang]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", {hang:?}]\ndry_run = false\ntimeout = \"4s\"\n",
        hang = escaping(&pids, "sleep 300"),
    );
    let (mut agent, _guard) =
        agent_with_escaping_actions(dir.path(), &["hang"], &actions, &pids, 2);
    let (st, log, _) = agent.proc.stop();
    assert!(st.success(), "{st}\n{log}");
    assert_all_gone(&pids, "after SIGTERM", &log);
    let hang = audit_results(dir.path());
    assert!(
        hang.len() == 1 && hang[0]["outcome"] == "killed",
        "{hang:#?}\n{log}"
    );
}

#[test]
fn a_second_signal_leaves_nothing_behind_of_an_action_that_calls_setsid() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let actions = format!(
        "[remediation.actions.hang]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", {hang:?}]\ndry_run = false\ntimeout = \"60s\"\n",
        hang = escaping(&pids, "sleep 300"),
    );
    let (mut agent, _guard) =
        agent_with_escaping_actions(dir.path(), &["hang"], &actions, &pids, 2);
    agent.proc.signal("TERM");
    std::thread::sleep(Duration::from_millis(500));
    agent.proc.signal("TERM");
    let st = agent
        .proc
        .wait_exit(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("a second signal did not end the agent\n{}", agent.stderr()));
    assert_eq!(st.code(), Some(130), "{}", agent.stderr());
    assert_all_gone(&pids, "after a second signal", &agent.stderr());
}

/// The `rules` table (issue 49: `retransmission-timeout-growth inactive` ran into its
/// neighbour, `pending   40000000000.0000`): every column starts where its header does,
/// and a 40 Gb/s link reads `40 Gb/s`, in the value and in the threshold; `--json` keeps
/// the raw number.
#[test]
fn the_rules_table_is_aligned_and_reads_as_operators_read() {
    let root = fixture("ib-hca");
    let args = [
        "rules",
        "--once",
        "--config",
        "configs/rules.toml",
        "--sysfs-root",
        root.to_str().unwrap(),
    ];
    let out = rocewatch(&args, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 10, "{text}{}", stderr(&out));
    for name in ["PHASE", "FOR", "LABELS", "CONDITION"] {
        let at = lines[0]
            .find(&format!("  {name}"))
            .unwrap_or_else(|| panic!("{name} in {}", lines[0]))
            + 2;
        for l in &lines[1..] {
            if name == "FOR" {
                // Right-aligned: the seconds end under the header's end.
                let end = at + name.len();
                assert_eq!(
                    l.get(end - 1..end + 2),
                    Some("s  "),
                    "{name} in {l:?}\n{text}"
                );
            } else {
                assert_eq!(l.get(at - 2..at), Some("  "), "{name} in {l:?}\n{text}");
                assert_ne!(l.get(at..=at), Some(" "), "{name} in {l:?}\n{text}");
            }
        }
    }
    let timeouts = lines
        .iter()
        .find(|l| l.starts_with("retransmission-timeout-growth "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(timeouts.contains("growth  inactive"), "{timeouts}");
    let slow = lines
        .iter()
        .find(|l| l.starts_with("link-speed-below-nominal") && l.contains("ib0"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(slow.contains("  pending   40 Gb/s  "), "{slow}");
    assert!(slow.ends_with("rdma.port.rate < 100 Gb/s for 1m"), "{slow}");
    assert!(!text.contains("0000000"), "{text}");

    let out = rocewatch(&[&args[..], &["--json"]].concat(), &[]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let raw: Vec<f64> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["rule"] == "link-speed-below-nominal")
        .filter_map(|r| r["value"].as_f64())
        .collect();
    assert!(raw.contains(&40_000_000_000.0), "{raw:?}");
}
