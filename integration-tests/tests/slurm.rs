//! `rocewatch health --slurm` as a real Slurm's HealthCheckProgram (munged, slurmctld and
//! slurmd on loopback, started by `rocewatch_slurm::harness`, as root with
//! proctrack/linuxproc): a port administratively up and DOWN drains the node with
//! rocewatch's reason within two health intervals; fixed, the node is resumed and a job
//! runs; a node an administrator drained for maintenance stays drained.
//!
//! Needs root and the Debian packages `slurmctld slurmd slurm-client munge`
//! (`scripts/install-test-deps.sh`); without them it says SKIPPED (and fails under
//! `ROCEWATCH_REQUIRE_ALL=1`). On failure the daemons' logs are printed.

use std::path::Path;
use std::time::Duration;

use rocewatch_slurm::harness::{HealthCheck, LocalCluster, Options};
use rocewatch_slurm::scontrol::run_bounded;

use crate::support::*;

/// One cluster at a time: each picks its loopback ports by binding and letting go, and
/// both register this host's name.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How often slurmd runs the health program, seconds.
const INTERVAL_S: u32 = 2;

fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    // Written aside and renamed: slurmd may be running the old one.
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn set(tree: &Path, rel: &str, text: &str) {
    std::fs::write(tree.join(rel), text).unwrap();
}

#[test]
fn health_as_slurms_health_check_drains_resumes_and_leaves_maintenance_alone() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("sys");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(cp.success());
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    let audit = state.join("audit.jsonl");
    std::fs::write(&cfg, format!("[remediation]\naudit_log = {audit:?}\n")).unwrap();
    // slurm.conf names the program before the cluster's own files exist: a placeholder
    // until SLURM_CONF is known.
    let program = dir.path().join("rocewatch-healthcheck.sh");
    write_exec(&program, "#!/bin/sh\nexit 0\n");
    let options = Options {
        health_check: Some(HealthCheck {
            program: program.clone(),
            interval_s: INTERVAL_S,
            node_state: Some("ANY".into()),
        }),
        ..Options::default()
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut c) = LocalCluster::start_or_skip(options) else {
        return;
    };
    let node = c.node_name().to_string();
    let scontrol = c.scontrol();
    let log = dir.path().join("health.log");
    write_exec(
        &program,
        &format!(
            "#!/bin/sh\nexport SLURM_CONF={conf:?} STATE_DIRECTORY={state:?}\nexec {bin:?} health --slurm --slurm-node {node:?} --scontrol {sc:?} --config {cfg:?} --sysfs-root {tree:?} >>{log:?} 2>&1\n",
            conf = c.conf(),
            bin = artifacts().rocewatch,
            sc = scontrol.program(),
        ),
    );
    let within = Duration::from_secs(u64::from(INTERVAL_S) * 2 + 8);
    let logs = |c: &LocalCluster| {
        format!(
            "{}\nhealth program's output:\n{}",
            c.logs(),
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    };

    // A port administratively up and DOWN: drained with rocewatch's reason naming it.
    set(&tree, "class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
    set(
        &tree,
        "class/infiniband/mlx5_1/ports/1/phys_state",
        "3: Disabled\n",
    );
    let n = c
        .wait_until(within, "DRAIN by rocewatch", |n| n.state.is_drain())
        .unwrap_or_else(|e| panic!("{e}\n{}", logs(&c)));
    let reason = n.reason.map(|r| r.text).unwrap_or_default();
    assert!(
        reason.starts_with("rocewatch: mlx5_1/1 ens1f1np1: port DOWN (Disabled)"),
        "{reason}\n{}",
        logs(&c)
    );
    assert!(state.join("quarantine.json").exists(), "{}", logs(&c));

    // Fixed: resumed, the quarantine health set released, and a job runs.
    set(
        &tree,
        "class/infiniband/mlx5_1/ports/1/state",
        "4: ACTIVE\n",
    );
    set(
        &tree,
        "class/infiniband/mlx5_1/ports/1/phys_state",
        "5: LinkUp\n",
    );
    c.wait_until(within, "IDLE after the fix", |n| {
        n.state.is_idle() && !n.state.is_drain()
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&c)));
    assert!(!state.join("quarantine.json").exists(), "{}", logs(&c));
    let mut srun = c.srun();
    srun.args(["-N1", "-w", &node, "hostname"]);
    let job = run_bounded(srun, Duration::from_secs(30)).unwrap_or_else(|e| panic!("srun: {e:?}"));
    assert!(
        job.status.success(),
        "srun hostname: {}\n{}",
        job.stderr,
        logs(&c)
    );

    // An administrator's drain stays, healthy host or not.
    scontrol
        .run(&[
            "update",
            &format!("nodename={node}"),
            "state=drain",
            "reason=maintenance",
        ])
        .unwrap();
    std::thread::sleep(Duration::from_secs(u64::from(INTERVAL_S) * 2 + 2));
    let n = scontrol.show_node(&node).unwrap();
    assert!(n.state.is_drain(), "{}\n{}", n.state, logs(&c));
    assert_eq!(n.reason.map(|r| r.text).as_deref(), Some("maintenance"));
    // And the health program did run meanwhile (it said it left the node alone).
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(said.contains("drained by someone else"), "{said}");
}

/// `rocewatch health --slurm` with the test's cluster, state directory and fixture tree:
/// exit status and standard error.
fn health_slurm(c: &LocalCluster, cfg: &Path, state: &Path) -> (i32, String) {
    let sc = c.scontrol();
    let o = rocewatch(
        &[
            "health",
            "--slurm",
            "--slurm-node",
            c.node_name(),
            "--scontrol",
            sc.program().to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            fixture("mlx5-roce-dual-port").to_str().unwrap(),
        ],
        &[
            ("STATE_DIRECTORY", state.to_str().unwrap()),
            ("SLURM_CONF", c.conf().to_str().unwrap()),
        ],
    );
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The `slurm_drain` remediation action against the real cluster: a rule that fires
/// (and quarantines) drains this node with the rule's reason through the agent's
/// scontrol (`SLURM_CONF` from the agent's environment), audited; `health --slurm` keeps
/// it drained while the rule's quarantine holds; released, the next `health --slurm`
/// resumes it (the reason is rocewatch's) and the node is IDLE.
#[test]
fn a_firing_rule_drains_the_node_through_slurm_drain_until_its_quarantine_ends() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut c) = LocalCluster::start_or_skip(Options::default()) else {
        return;
    };
    let node = c.node_name().to_string();
    let sc = c.scontrol();
    let cfg = dir.path().join("rocewatch.toml");
    // Both mlx5 ports of the tree run at 100 Gb/s: the rule fires at once.
    std::fs::write(
        &cfg,
        format!(
            "[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = {{ \"rdma.device\" = \"mlx5_0\" }}\nop = \"<\"\nthreshold = 200e9\nquarantine = true\nactions = [\"drain\"]\n\n\
             [remediation]\naudit_log = {audit:?}\nkill_switch = {ks:?}\n\n\
             [remediation.actions.drain]\ntype = \"slurm_drain\"\nnode = {node:?}\nscontrol = {sc:?}\ndry_run = false\n",
            audit = state.join("audit.jsonl"),
            ks = dir.path().join("remediation.disabled"),
            sc = sc.program(),
        ),
    )
    .unwrap();
    let agent = RunningAgent::start_with(
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
        &[
            ("STATE_DIRECTORY", state.to_str().unwrap()),
            ("SLURM_CONF", c.conf().to_str().unwrap()),
        ],
        None,
    );
    let audit = || std::fs::read_to_string(state.join("audit.jsonl")).unwrap_or_default();
    let n = c
        .wait_until(Duration::from_secs(20), "DRAIN by the rule", |n| {
            n.state.is_drain()
        })
        .unwrap_or_else(|e| panic!("{e}\n{}\naudit:\n{}", c.logs(), audit()));
    let reason = n.reason.map(|r| r.text).unwrap_or_default();
    assert!(
        reason.starts_with("rocewatch: rule slow-link fired: ")
            && reason.contains("rdma.device=mlx5_0"),
        "{reason}"
    );
    // Audited: the action's result names the node and the reason set.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let result = loop {
        let found = audit().lines().find_map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).ok()?;
            (r["action"] == "drain" && r["outcome"].is_string()).then_some(r)
        });
        if let Some(r) = found {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no audited result of the drain:\n{}",
            audit()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(result["outcome"], "ok", "{result}");
    assert_eq!(
        result["detail"].as_str().unwrap(),
        format!("{node} drained: {reason}"),
        "{result}"
    );
    drop(agent);

    // The rule's quarantine holds: health --slurm says unhealthy and keeps the drain.
    let (rc, said) = health_slurm(&c, &cfg, &state);
    assert_eq!(rc, 1, "{said}");
    assert!(said.contains("quarantine"), "{said}");
    let n = sc.show_node(&node).unwrap();
    assert!(n.state.is_drain(), "{}: {said}", n.state);

    // Released by hand: the next health --slurm resumes the node.
    // With the agent's configuration: its audit log is in the state directory (without
    // it, the default /var/lib/rocewatch/audit.jsonl would be needed on the test host).
    let o = rocewatch(
        &[
            "quarantine",
            "release",
            "--reason",
            "cable replaced",
            "--config",
            cfg.to_str().unwrap(),
        ],
        &[("STATE_DIRECTORY", state.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (rc, said) = health_slurm(&c, &cfg, &state);
    assert_eq!(rc, 0, "{said}");
    assert!(said.contains("resumed"), "{said}");
    c.wait_until(Duration::from_secs(10), "IDLE after resume", |n| {
        n.state.is_idle() && !n.state.is_drain()
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
}
