//! The gate as a broken or hostile host attacks it: reads that never answer (a FIFO in
//! place of a netdev's flags or of the kernel log) bounded by `[health] timeout`, a
//! device whose ports cannot be listed, an attribute that cannot be read, and
//! `--slurm`'s recovery acting on the verdict it judged.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rocewatch_health::{run, HealthConfig, Options, Report, Status, Verdict};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration-tests/fixtures")
}

/// A copy of the dual-port mlx5 tree to break (links kept as links); its `sys` is
/// `dir/sys`.
fn dual_port() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixtures().join("mlx5-roce-dual-port/sys"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "cp -a");
    dir
}

fn options(sys: &Path, kernel_log: Option<&Path>, state_dir: &Path) -> Options {
    Options {
        sysfs_root: sys.to_path_buf(),
        live: false,
        kernel_log: match kernel_log {
            Some(p) => serde_json::json!({ "path": p }),
            None => serde_json::json!({}),
        },
        devices: Default::default(),
        state_dir: state_dir.to_path_buf(),
        procfs_root: "/proc".into(),
        rail_rows: Ok(None),
    }
}

/// `health` on a thread of its own, waited for at most `within`: `None` when it has
/// not answered by then (the thread is left blocked).
fn health_within(opts: Options, cfg: HealthConfig, within: Duration) -> Option<Report> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(run(&opts, &cfg)));
    });
    rx.recv_timeout(within).ok()
}

fn health(sys: &Path, cfg: HealthConfig) -> Report {
    let opts = options(sys, None, &common::fresh_state_dir());
    health_within(opts, cfg, Duration::from_secs(30)).expect("health answered")
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", path.display());
}

fn dump(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap()
}

fn port_down(sys: &Path) {
    let port = sys.join("class/infiniband/mlx5_1/ports/1");
    std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
    std::fs::write(port.join("phys_state"), "3: Disabled\n").unwrap();
}

/// A FIFO nobody writes in place of `class/net/X/flags` and of `class/misc/rdma_cm/dev`
/// (which the userspace check reads): the reads must not wait on them past `[health]
/// timeout`, and the DOWN port of the other device still makes the host unhealthy (a
/// scheduler's gate that never answers never drains). What did not finish is a finding
/// naming what it was reading.
#[test]
fn reads_that_never_answer_end_at_the_deadline_and_the_down_port_still_counts() {
    let t = dual_port();
    let sys = t.path().join("sys");
    port_down(&sys);
    mkfifo(&sys.join("class/net/ens1f0np0/flags"));
    std::fs::create_dir_all(sys.join("class/misc/rdma_cm")).unwrap();
    mkfifo(&sys.join("class/misc/rdma_cm/dev"));
    let cfg = HealthConfig {
        timeout: Duration::from_secs(1),
        rootfs: t.path().join("root"),
        ..Default::default()
    };
    let opts = options(&sys, None, &t.path().join("no-state"));
    let started = Instant::now();
    let r = health_within(opts, cfg, Duration::from_secs(20))
        .expect("health did not answer within 20 s: a read blocks it");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}: {}", dump(&r));
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert!(
        r.line
            .starts_with("mlx5_1/1 ens1f1np1: port DOWN (Disabled)"),
        "{}",
        r.line
    );
    // The netdev's flags are refused at once (not a regular file): its port is checked.
    assert!(
        r.findings.iter().any(|f| f.check == "ports"
            && f.device.as_deref() == Some("mlx5_0")
            && f.status == Status::Ok),
        "{}",
        dump(&r)
    );
    // The userspace check did not finish: it reads the host's files, not the NIC, so
    // cannot tell (the port DOWN above is what drains), naming what it read.
    let us = r
        .findings
        .iter()
        .find(|f| f.check == "userspace")
        .unwrap_or_else(|| panic!("{}", dump(&r)));
    assert_eq!(us.status, Status::Unknown, "{}", dump(&r));
    assert!(
        us.what.contains("did not finish within 1s") && us.what.contains("verbs stack"),
        "{}",
        dump(&r)
    );
}

/// The kernel gives every registered RDMA device its ports (`ib_setup_port_attrs()` in
/// drivers/infiniband/core/sysfs.c): a device whose `ports/` is gone, empty or not a
/// directory carries nothing, and the host is not healthy with the other device's ports.
#[test]
fn a_device_without_a_readable_port_is_unhealthy() {
    type Break = fn(&Path);
    let cases: [(&str, Break); 3] = [
        ("missing", |p| std::fs::remove_dir_all(p).unwrap()),
        ("empty", |p| {
            std::fs::remove_dir_all(p).unwrap();
            std::fs::create_dir(p).unwrap();
        }),
        ("a plain file", |p| {
            std::fs::remove_dir_all(p).unwrap();
            std::fs::write(p, "").unwrap();
        }),
    ];
    for (case, break_it) in cases {
        let t = dual_port();
        let sys = t.path().join("sys");
        break_it(&sys.join("class/infiniband/mlx5_1/ports"));
        let r = health(&sys, HealthConfig::default());
        assert_eq!(r.verdict, Verdict::Unhealthy, "{case}: {}", dump(&r));
        assert!(r.line.starts_with("mlx5_1: no port"), "{case}: {}", r.line);
    }
}

/// An attribute that cannot be read (a directory in place of `fw_ver`) was dropped
/// with the inventory's partial errors: it is a finding naming the file, and the host's
/// health cannot be told.
#[test]
fn an_attribute_that_cannot_be_read_is_named_not_dropped() {
    let t = dual_port();
    let sys = t.path().join("sys");
    let fw = sys.join("class/infiniband/mlx5_0/fw_ver");
    std::fs::remove_file(&fw).unwrap();
    std::fs::create_dir(&fw).unwrap();
    let r = health(&sys, HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unknown, "{}", dump(&r));
    let f = r
        .findings
        .iter()
        .find(|f| f.status == Status::Unknown)
        .unwrap();
    assert!(f.what.contains("mlx5_0/fw_ver"), "{}", dump(&r));
}

/// A stand-in for `scontrol` that keeps node `n1`'s state and reason in `dir` (as Slurm
/// would: a drain sets both, a resume clears them) and logs each call's arguments.
fn fake_scontrol(dir: &Path) -> rocewatch_slurm::Scontrol {
    use std::os::unix::fs::PermissionsExt;
    let d = dir.display();
    let script = format!(
        r#"#!/bin/sh
echo "$*" >> {d}/log
case "$1" in
show)
  printf 'NodeName=n1 Arch=x86_64\n   State=%s\n' "$(cat {d}/state)"
  r=$(cat {d}/reason 2>/dev/null)
  [ -n "$r" ] && printf '   Reason=%s [root@2024-01-01T00:00:00]\n' "$r"
  exit 0;;
update)
  case "$3" in
  state=drain) echo IDLE+DRAIN > {d}/state; printf '%s' "${{4#reason=}}" > {d}/reason;;
  state=resume) echo IDLE > {d}/state; rm -f {d}/reason;;
  esac;;
esac
"#
    );
    let path = dir.join("scontrol");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("state"), "IDLE\n").unwrap();
    rocewatch_slurm::Scontrol::new(path)
}

/// `health --slurm` once: the report after, what was done.
fn act(
    sys: &Path,
    state: &Path,
    slurm: &Path,
    audit: &rocewatch_runtime::audit::AuditLog,
) -> (Report, Vec<String>) {
    let opts = options(sys, None, state);
    let cfg = HealthConfig::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = rocewatch_health::slurm::SlurmNode {
        scontrol: fake_scontrol_keep(slurm),
        name: "n1".into(),
    };
    rt.block_on(async {
        let report = run(&opts, &cfg).await;
        rocewatch_health::slurm::act(report, &opts, audit, &node)
            .await
            .unwrap_or_else(|e| panic!("act: {e}"))
    })
}

/// The stand-in already written in `dir`.
fn fake_scontrol_keep(dir: &Path) -> rocewatch_slurm::Scontrol {
    rocewatch_slurm::Scontrol::new(dir.join("scontrol"))
}

fn updates(slurm: &Path) -> Vec<String> {
    std::fs::read_to_string(slurm.join("log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("update"))
        .map(str::to_string)
        .collect()
}

/// The same fault, judged twice: the second run's quarantine (its own, entered by the
/// first) is no new finding, so the drain's reason stays as it was and Slurm is not
/// asked to change it (it read "(+1 more)" the second time: a second `update`).
#[test]
fn the_drain_reason_is_the_same_for_the_same_fault() {
    let t = dual_port();
    let sys = t.path().join("sys");
    let (state, slurm) = (t.path().join("state"), t.path().join("slurm"));
    std::fs::create_dir(&state).unwrap();
    std::fs::create_dir(&slurm).unwrap();
    fake_scontrol(&slurm);
    let audit = rocewatch_runtime::audit::AuditLog::new(state.join("audit.jsonl"));
    port_down(&sys);
    let (first, done) = act(&sys, &state, &slurm, &audit);
    assert_eq!(first.verdict, Verdict::Unhealthy, "{done:?}");
    assert_eq!(updates(&slurm).len(), 1, "{done:?}");
    let (second, done) = act(&sys, &state, &slurm, &audit);
    assert_eq!(second.verdict, Verdict::Unhealthy, "{done:?}");
    assert_eq!(second.line, first.line, "{done:?}");
    assert_eq!(updates(&slurm).len(), 1, "{:?} {done:?}", updates(&slurm));
}

/// health's own quarantine released on a verdict that passed: the run acts on that
/// verdict (the node resumed, the report healthy); it does not judge again and leave
/// a released quarantine, an audited "recovered" and a node drained on a second verdict
/// it did not act on (a port that flapped in between).
#[test]
fn a_release_acts_on_the_verdict_it_judged() {
    use rocewatch_runtime::quarantine::{Quarantine, QuarantineFile};
    let t = dual_port();
    let sys = t.path().join("sys");
    let (state, slurm) = (t.path().join("state"), t.path().join("slurm"));
    std::fs::create_dir(&state).unwrap();
    std::fs::create_dir(&slurm).unwrap();
    fake_scontrol(&slurm);
    let audit = rocewatch_runtime::audit::AuditLog::new(state.join("audit.jsonl"));
    let q = Quarantine::now("mlx5_1/1: port DOWN", "health", Default::default());
    assert!(QuarantineFile::in_dir(&state).enter(&q, &audit).unwrap());
    std::fs::write(slurm.join("state"), "IDLE+DRAIN\n").unwrap();
    std::fs::write(slurm.join("reason"), "rocewatch: mlx5_1/1: port DOWN").unwrap();
    let opts = options(&sys, None, &state);
    let cfg = HealthConfig::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = rocewatch_health::slurm::SlurmNode {
        scontrol: fake_scontrol_keep(&slurm),
        name: "n1".into(),
    };
    let (after, done) = rt.block_on(async {
        let report = run(&opts, &cfg).await;
        assert_eq!(report.verdict, Verdict::Unhealthy, "{}", dump(&report));
        // The port flaps down after the verdict was given.
        port_down(&sys);
        rocewatch_health::slurm::act(report, &opts, &audit, &node)
            .await
            .unwrap_or_else(|e| panic!("act: {e}"))
    });
    let audited = std::fs::read_to_string(state.join("audit.jsonl")).unwrap();
    assert!(audited.contains("recovered: health passes"), "{audited}");
    assert_eq!(
        after.verdict,
        Verdict::Healthy,
        "{done:?}\n{}",
        dump(&after)
    );
    assert_eq!(
        std::fs::read_to_string(slurm.join("state")).unwrap().trim(),
        "IDLE",
        "{done:?}"
    );
}
