//! `rocewatch health` as a scheduler runs it: exit status, the one line and its bound,
//! JSON, a running agent's firing rule, and node-problem-detector's custom-plugin
//! contract as deploy/kubernetes/node-problem-detector.yaml configures it.

use std::time::{Duration, Instant};

use crate::support::*;

/// A state directory without a quarantine, whatever this machine's holds.
const NO_STATE: (&str, &str) = ("STATE_DIRECTORY", "/nonexistent/rocewatch-health-test");

fn health(args: &[&str]) -> (i32, String, String) {
    let o = rocewatch(&[&["health"], args].concat(), &[NO_STATE]);
    (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
}

#[test]
fn exit_status_and_one_line_per_tree() {
    let cases = [
        ("mlx5-roce-dual-port", 0, "healthy: 2 RDMA ports checked"),
        (
            "gpu-two-socket",
            1,
            "mlx5_2: PCIe 0000:9d:00.0 x8 16 GT/s, its maximum x16 16 GT/s",
        ),
        ("ib-hca", 1, "mlx4_0/2: port DOWN (Disabled)"),
        (
            "no-devices",
            1,
            "devices: no RDMA device in class/infiniband (did the driver load?)",
        ),
    ];
    for (tree, code, line) in cases {
        let root = fixture(tree);
        let (c, out, err) = health(&["--sysfs-root", root.to_str().unwrap()]);
        assert_eq!(c, code, "{tree}: {out}{err}");
        assert_eq!(out, format!("{line}\n"), "{tree}: {err}");
        assert!(out.len() <= 81, "{tree}: {} bytes", out.len());
    }
}

#[test]
fn json_has_every_finding_and_all_adds_them_after_the_line() {
    let root = fixture("ib-hca");
    let (c, out, err) = health(&["--json", "--sysfs-root", root.to_str().unwrap()]);
    assert_eq!(c, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "unhealthy");
    assert_eq!(v["line"], "mlx4_0/2: port DOWN (Disabled)");
    let down = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["status"] == "unhealthy")
        .unwrap();
    assert_eq!(
        (&down["check"], &down["device"], &down["port"]),
        (&"ports".into(), &"mlx4_0".into(), &2.into())
    );
    let (_, text, _) = health(&["--all", "--sysfs-root", root.to_str().unwrap()]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "mlx4_0/2: port DOWN (Disabled)");
    assert!(
        lines.contains(&"UNHEALTHY ports      mlx4_0/2: port DOWN (Disabled)"),
        "{text}"
    );
}

#[test]
fn a_configuration_that_does_not_load_is_cannot_tell() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[health]\nports = [\"mlx5_0\"]\n").unwrap();
    let (c, out, err) = health(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(c, 2, "{out}{err}");
    assert!(out.starts_with("cannot tell: "), "{out}");
    assert_eq!(out.lines().count(), 1);
    assert!(out.len() <= 81, "{out}");
    assert!(err.contains("health.ports"), "{err}");
}

#[test]
fn a_firing_rule_of_a_running_agent_makes_the_host_unhealthy() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rules.toml");
    // Both mlx5 ports of the tree run at 100 Gb/s: the rule fires on both.
    std::fs::write(
        &cfg,
        "[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = { \"rdma.device\" = \"mlx5_0\" }\nop = \"<\"\nthreshold = 200e9\n",
    )
    .unwrap();
    let root = fixture("mlx5-roce-dual-port");
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
    let url = agent.prometheus_url();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (c, out, err) = loop {
        let r = health(&["--agent", &url, "--sysfs-root", root.to_str().unwrap()]);
        if r.0 != 0 || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(c, 1, "{out}{err}\nagent: {}", agent.stderr());
    assert!(
        out.starts_with("mlx5_0/1") && out.contains("rule slow-link firing at 100000000000"),
        "{out}"
    );
    // An agent that does not answer weighs nothing: the tree is healthy without it.
    drop(agent);
    let (c, out, err) = health(&[
        "--all",
        "--agent",
        &url,
        "--sysfs-root",
        root.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("WARNING   agent") && l.contains("/rules: ")),
        "{out}"
    );
}

/// node-problem-detector cannot run here (no API server, no image): its configuration is
/// read as NPD's own validation reads it, and the plugin is run as NPD runs it.
#[test]
fn the_node_problem_detector_monitor_runs_health_within_its_contract() {
    eprintln!(
        "NOTE: node-problem-detector itself cannot run here; this test checks its \
         configuration (as NPD's Validate does) and runs the plugin command it names"
    );
    let docs = yaml_docs("deploy/kubernetes/node-problem-detector.yaml");
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    let monitor: serde_json::Value = serde_json::from_str(
        cm["data"]["rocewatch-health-monitor.json"]
            .as_str()
            .unwrap(),
    )
    .expect("the monitor is JSON");
    assert_eq!(monitor["plugin"], "custom");
    let pc = &monitor["pluginConfig"];
    assert_eq!(pc["max_output_length"], 80);
    assert_eq!(
        pc["skip_initial_status"], true,
        "not healthy before the first check"
    );
    let global = humantime::parse_duration(pc["timeout"].as_str().unwrap()).unwrap();
    let conditions: Vec<&str> = monitor["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    let rules = monitor["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    // NPD's Validate: a permanent rule's condition has a default; no rule timeout above
    // the global one.
    assert_eq!(rule["type"], "permanent");
    assert!(conditions.contains(&rule["condition"].as_str().unwrap()));
    let timeout = humantime::parse_duration(rule["timeout"].as_str().unwrap()).unwrap();
    assert!(timeout <= global);
    let args: Vec<&str> = rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "health");
    // The DaemonSet mounts the binary where the rule runs it, and the configuration
    // where its --config points.
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let npd = &ds["spec"]["template"]["spec"]["containers"][0];
    let mounts: Vec<&str> = npd["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    let path = rule["path"].as_str().unwrap();
    assert!(
        mounts.iter().any(|m| path.starts_with(m)),
        "{path} in {mounts:?}"
    );
    let config_at = args.iter().position(|a| *a == "--config").unwrap() + 1;
    assert!(mounts.contains(&args[config_at]), "{mounts:?}");
    // The quarantine is where health looks for it: the agent's state directory mounted
    // and named.
    assert!(mounts.contains(&"/var/lib/rocewatch"), "{mounts:?}");
    let env_state = npd["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "STATE_DIRECTORY")
        .map(|e| e["value"].as_str().unwrap());
    assert_eq!(env_state, Some("/var/lib/rocewatch"));
    // The plugin as NPD runs it, on trees healthy and not: exit status in {0, 1, 2},
    // output within max_output_length, within the rule's timeout.
    let dir = tempfile::tempdir().unwrap();
    for (tree, want) in [("mlx5-roce-dual-port", 0), ("ib-hca", 1)] {
        let cfg = dir.path().join(format!("{tree}.toml"));
        let toml = cm["data"]["rocewatch.toml"]
            .as_str()
            .unwrap()
            .replace("/host/sys", fixture(tree).to_str().unwrap());
        std::fs::write(&cfg, toml).unwrap();
        let mut run: Vec<&str> = args.clone();
        run[config_at] = cfg.to_str().unwrap();
        // The binary is found (and the test's artifacts built) before the clock starts.
        let _ = artifacts();
        let t = Instant::now();
        let o = rocewatch(&run, &[NO_STATE]);
        let took = t.elapsed();
        assert_eq!(
            o.status.code(),
            Some(want),
            "{tree}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(stdout(&o).trim_end().len() <= 80, "{tree}: {}", stdout(&o));
        assert!(took < timeout, "{tree}: {took:?}");
    }
}
