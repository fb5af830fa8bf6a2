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

use rocewatch_process::run_bounded;
use rocewatch_slurm::harness::{HealthCheck, LocalCluster, Options};

use crate::support::*;

/// One cluster at a time: each picks its loopback ports by binding and letting go, and
/// both register this host's name (`packages` starts one too).
pub(crate) static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
    health_slurm_on(c, cfg, state, &fixture("mlx5-roce-dual-port"))
}

/// The same on the sysfs tree `tree`.
fn health_slurm_on(c: &LocalCluster, cfg: &Path, state: &Path, tree: &Path) -> (i32, String) {
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
            tree.to_str().unwrap(),
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

/// A copy of the dual-port mlx5 tree in `dir/sys`, and a configuration whose audit log is
/// in `state`.
fn tree_and_config(dir: &Path, state: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let tree = dir.join("sys");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(cp.success());
    let cfg = dir.join("rocewatch.toml");
    let audit = state.join("audit.jsonl");
    std::fs::write(&cfg, format!("[remediation]\naudit_log = {audit:?}\n")).unwrap();
    (tree, cfg)
}

fn port(tree: &Path, state: &str, phys: &str) {
    set(tree, "class/infiniband/mlx5_1/ports/1/state", state);
    set(tree, "class/infiniband/mlx5_1/ports/1/phys_state", phys);
}

fn drain_reason(c: &LocalCluster) -> Option<String> {
    let n = c.scontrol().show_node(c.node_name()).unwrap();
    n.state
        .is_drain()
        .then(|| n.reason.map(|r| r.text).unwrap_or_default())
}

/// The packages give /var/lib/rocewatch to the agent's user (mode 0750) and Slurm runs
/// its HealthCheckProgram as root: `health --slurm` still drains the unhealthy node, and
/// puts the host in quarantine as that user (the file stays the agent's); fixed, it
/// releases that quarantine and resumes the node.
#[test]
fn health_slurm_drains_and_resumes_in_a_state_directory_the_agents_user_owns() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
    let (tree, cfg) = tree_and_config(dir.path(), &state);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = LocalCluster::start_or_skip(Options::default()) else {
        return;
    };
    let chown = std::process::Command::new("chown")
        .arg("nobody:nogroup")
        .arg(&state)
        .status()
        .unwrap();
    assert!(chown.success());

    port(&tree, "1: DOWN\n", "3: Disabled\n");
    let (rc, said) = health_slurm_on(&c, &cfg, &state, &tree);
    assert_eq!(rc, 1, "{said}");
    let reason = drain_reason(&c).unwrap_or_else(|| panic!("not drained: {said}\n{}", c.logs()));
    assert!(
        reason.starts_with("rocewatch: mlx5_1/1 ens1f1np1: port DOWN"),
        "{reason}\n{said}"
    );
    for f in ["quarantine.json", "audit.jsonl"] {
        let md = std::fs::metadata(state.join(f)).unwrap_or_else(|e| panic!("{f}: {e}: {said}"));
        assert_eq!(md.uid(), 65534, "{f} is not the directory owner's: {said}");
    }

    port(&tree, "4: ACTIVE\n", "5: LinkUp\n");
    let (rc, said) = health_slurm_on(&c, &cfg, &state, &tree);
    assert_eq!(rc, 0, "{said}");
    assert!(said.contains("resumed"), "{said}");
    assert!(!state.join("quarantine.json").exists(), "{said}");
    assert_eq!(drain_reason(&c), None, "{said}");

    // Their directory made writable by their group: root may not act there (another
    // user could swap a file for a link), so the quarantine cannot be read safely and
    // counts as in force: drained, saying why, and unhealthy.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o770)).unwrap();
    let (rc, said) = health_slurm_on(&c, &cfg, &state, &tree);
    assert_eq!(rc, 1, "{said}");
    assert!(said.contains("can be written by group"), "{said}");
    let reason = drain_reason(&c).unwrap_or_else(|| panic!("not drained: {said}"));
    assert!(
        reason.starts_with("rocewatch: quarantine: "),
        "{reason}\n{said}"
    );
}

/// Fail closed: a port whose state turns unreadable ("cannot tell") does not end the
/// quarantine health set for it (nothing was seen healthy); a quarantine file that
/// cannot be read keeps the node drained, and drains a node that was not; a quarantine
/// that cannot be entered does not keep an unhealthy node from being drained.
#[test]
fn health_slurm_keeps_the_drain_when_it_cannot_tell_or_cannot_read_the_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let (tree, cfg) = tree_and_config(dir.path(), &state);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = LocalCluster::start_or_skip(Options::default()) else {
        return;
    };
    let audit = || std::fs::read_to_string(state.join("audit.jsonl")).unwrap_or_default();

    port(&tree, "1: DOWN\n", "3: Disabled\n");
    let (rc, said) = health_slurm_on(&c, &cfg, &state, &tree);
    assert_eq!(rc, 1, "{said}");
    assert!(drain_reason(&c).is_some(), "not drained: {said}");

    // The port's state unreadable: cannot tell; the quarantine and the drain stay.
    std::fs::remove_file(tree.join("class/infiniband/mlx5_1/ports/1/state")).unwrap();
    let (_, said) = health_slurm_on(&c, &cfg, &state, &tree);
    assert!(state.join("quarantine.json").exists(), "released: {said}");
    assert!(!audit().contains("quarantine-release"), "{}", audit());
    assert!(drain_reason(&c).is_some(), "resumed: {said}");

    // Healthy, but a quarantine file that is no quarantine: drained, never resumed.
    port(&tree, "4: ACTIVE\n", "5: LinkUp\n");
    let (rc, said) = health_slurm_on(&c, &cfg, &state, &tree);
    assert_eq!(rc, 0, "{said}");
    assert_eq!(drain_reason(&c), None, "{said}");
    std::fs::write(state.join("quarantine.json"), "{not json").unwrap();
    for _ in 0..2 {
        let (rc, said) = health_slurm_on(&c, &cfg, &state, &tree);
        assert_eq!(rc, 1, "{said}");
        let reason = drain_reason(&c).unwrap_or_else(|| panic!("not drained: {said}"));
        assert!(
            reason.starts_with("rocewatch: quarantine"),
            "{reason}\n{said}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(state.join("quarantine.json")).unwrap(),
        "{not json"
    );

    // The quarantine cannot be entered (its audit log's directory is gone): said, and
    // the node drained all the same.
    std::fs::remove_file(state.join("quarantine.json")).unwrap();
    let (rc, said) = health_slurm_on(&c, &cfg, &state, &tree);
    assert_eq!(rc, 0, "{said}");
    assert_eq!(drain_reason(&c), None, "{said}");
    let no_audit = dir.path().join("no-audit.toml");
    let gone = dir.path().join("gone/audit.jsonl");
    std::fs::write(&no_audit, format!("[remediation]\naudit_log = {gone:?}\n")).unwrap();
    port(&tree, "1: DOWN\n", "3: Disabled\n");
    let (rc, said) = health_slurm_on(&c, &no_audit, &state, &tree);
    assert_eq!(rc, 1, "{said}");
    assert!(said.contains("not in quarantine"), "{said}");
    assert!(!state.join("quarantine.json").exists(), "{said}");
    let reason = drain_reason(&c).unwrap_or_else(|| panic!("not drained: {said}"));
    assert!(
        reason.starts_with("rocewatch: mlx5_1/1 ens1f1np1: port DOWN"),
        "{reason}\n{said}"
    );
}
