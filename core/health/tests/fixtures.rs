//! `health` on the fixture trees (integration-tests/fixtures/*, each with its SOURCE.md):
//! what each says, and trees changed the way hosts break (a port down, PCIe downtrained,
//! a kernel log with a failing firmware command).

mod common;

use std::path::{Path, PathBuf};

use rocewatch_health::{run, HealthConfig, Options, Report, Status, Verdict, LINE_MAX};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration-tests/fixtures")
}

fn options(root: &Path, kernel_log: Option<&Path>) -> Options {
    Options {
        sysfs_root: root.to_path_buf(),
        live: false,
        kernel_log: match kernel_log {
            Some(p) => serde_json::json!({ "path": p }),
            None => serde_json::json!({}),
        },
        devices: Default::default(),
        // No quarantine: a state directory that does not exist.
        state_dir: common::fresh_state_dir(),
        procfs_root: "/proc".into(),
        rail_rows: Ok(None),
    }
}

fn health(root: &Path, cfg: &HealthConfig) -> Report {
    health_with(options(root, None), cfg)
}

fn health_with(opts: Options, cfg: &HealthConfig) -> Report {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(&opts, cfg))
}

/// A copy of a fixture tree to break (symbolic links kept as links).
fn copy_of(tree: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixtures().join(tree).join("sys"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {tree}");
    dir
}

fn dump(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap()
}

#[test]
fn every_fixture_tree_gets_a_verdict_and_a_bounded_line() {
    for tree in [
        "mlx5-roce-dual-port",
        "gpu-two-socket",
        "ib-hca",
        "no-pma-restricted",
        "rxe-soft-roce",
        "no-devices",
    ] {
        let r = health(&fixtures().join(tree).join("sys"), &HealthConfig::default());
        println!("{tree}: {:?} {}", r.verdict, r.line);
        assert!(r.line.len() <= LINE_MAX, "{tree}: {}", r.line);
        assert!(!r.findings.is_empty(), "{tree}");
    }
}

#[test]
fn a_dual_port_host_with_both_ports_up_is_healthy() {
    let r = health(
        &fixtures().join("mlx5-roce-dual-port/sys"),
        &HealthConfig::default(),
    );
    assert_eq!(r.verdict, Verdict::Healthy, "{}", dump(&r));
    assert_eq!(r.verdict.exit_code(), 0);
    assert_eq!(r.line, "healthy: 2 RDMA ports checked");
    // What a fixture tree cannot say is said, not passed.
    let skipped: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.status == Status::Skipped)
        .map(|f| f.check)
        .collect();
    assert!(
        skipped.contains(&"qps") && skipped.contains(&"kernel-log"),
        "{skipped:?}"
    );
}

fn write(tree: &Path, rel: &str, text: &str) {
    std::fs::write(tree.join("sys").join(rel), text).unwrap();
}

#[test]
fn a_port_down_under_an_up_netdev_is_unhealthy_and_named_in_the_line() {
    let t = copy_of("mlx5-roce-dual-port");
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/state",
        "1: DOWN\n",
    );
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/phys_state",
        "3: Disabled\n",
    );
    let r = health(&t.path().join("sys"), &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert_eq!(r.verdict.exit_code(), 1);
    assert_eq!(
        r.line,
        "mlx5_1/1 ens1f1np1: port DOWN (Disabled), ens1f1np1 is up"
    );
    // The same port under a netdev taken down on purpose is not the scheduler's concern.
    write(t.path(), "class/net/ens1f1np1/flags", "0x1002\n");
    let r = health(&t.path().join("sys"), &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Healthy, "{}", dump(&r));
    assert_eq!(r.line, "healthy: 1 RDMA port checked");
    // Named in [health] ports, it must be up whatever its netdev.
    let cfg: HealthConfig = toml::from_str("ports = [\"mlx5_0/1\", \"mlx5_1/1\"]").unwrap();
    let r = health(&t.path().join("sys"), &cfg);
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
}

#[test]
fn a_port_slower_than_its_siblings_or_the_configured_rate_is_unhealthy() {
    let t = copy_of("mlx5-roce-dual-port");
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/rate",
        "50 Gb/sec (2X HDR)\n",
    );
    let r = health(&t.path().join("sys"), &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert_eq!(
        r.line,
        "mlx5_1/1 ens1f1np1: ACTIVE at 50 Gb/s, 100 expected (its siblings)"
    );
    let cfg: HealthConfig = toml::from_str("min_rate_gbps = 200").unwrap();
    let r = health(&fixtures().join("mlx5-roce-dual-port/sys"), &cfg);
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert_eq!(
        r.line,
        "mlx5_0/1 ens1f0np0: ACTIVE at 100 Gb/s, 200 expected (min_rate_gbps) (+1 more)"
    );
}

#[test]
fn pcie_below_what_card_and_slot_allow_is_unhealthy() {
    // gpu-two-socket's mlx5_2 runs at x8 of its x16 (its SOURCE.md).
    let r = health(
        &fixtures().join("gpu-two-socket/sys"),
        &HealthConfig::default(),
    );
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert_eq!(
        r.line,
        "mlx5_2: PCIe 0000:9d:00.0 trained at x8 at 16 GT/s of x16 at 16 GT/s"
    );
    let pcie: Vec<_> = r.findings.iter().filter(|f| f.check == "pcie").collect();
    assert!(
        pcie.iter().filter(|f| f.status == Status::Ok).count() >= 1,
        "{pcie:?}"
    );
}

#[test]
fn an_infiniband_port_down_is_unhealthy_with_no_netdev_to_excuse_it() {
    let r = health(&fixtures().join("ib-hca/sys"), &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert_eq!(r.line, "mlx4_0/2: port DOWN (Disabled)");
}

#[test]
fn a_host_without_rdma_devices_is_unhealthy_unless_none_are_expected() {
    let root = fixtures().join("no-devices/sys");
    let r = health(&root, &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert_eq!(
        r.line,
        "devices: no RDMA device in class/infiniband (did the driver load?)"
    );
    let cfg: HealthConfig = toml::from_str("min_devices = 0").unwrap();
    assert_eq!(health(&root, &cfg).verdict, Verdict::Healthy);
}

#[test]
fn unreadable_state_is_cannot_tell_not_healthy() {
    let t = copy_of("mlx5-roce-dual-port");
    std::fs::remove_file(t.path().join("sys/class/infiniband/mlx5_0/ports/1/state")).unwrap();
    let r = health(&t.path().join("sys"), &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unknown, "{}", dump(&r));
    assert_eq!(r.verdict.exit_code(), 2);
    assert!(
        r.line.starts_with("cannot tell: mlx5_0/1 ens1f0np0: "),
        "{}",
        r.line
    );
}

#[test]
fn a_port_whose_netdev_flags_cannot_be_read_is_checked_anyway() {
    // A netdev in another network namespace, or a name the path cannot hold: the port's
    // own state decides.
    let t = copy_of("mlx5-roce-dual-port");
    std::fs::remove_file(t.path().join("sys/class/net/ens1f1np1/flags")).unwrap();
    let r = health(&t.path().join("sys"), &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Healthy, "{}", dump(&r));
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/state",
        "1: DOWN\n",
    );
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/phys_state",
        "3: Disabled\n",
    );
    let r = health(&t.path().join("sys"), &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert!(
        r.line.starts_with("mlx5_1/1 ens1f1np1: port DOWN"),
        "{}",
        r.line
    );
}

#[test]
fn no_port_in_scope_is_unhealthy_not_healthy() {
    let t = copy_of("mlx5-roce-dual-port");
    write(t.path(), "class/net/ens1f0np0/flags", "0x1002\n");
    write(t.path(), "class/net/ens1f1np1/flags", "0x1002\n");
    let r = health(&t.path().join("sys"), &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert!(r.line.contains("no RDMA port to check"), "{}", r.line);
}

#[test]
fn a_quarantine_file_that_cannot_be_read_counts_as_a_quarantine() {
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("quarantine.json"), "not json").unwrap();
    let mut opts = options(&fixtures().join("mlx5-roce-dual-port/sys"), None);
    opts.state_dir = state.path().to_path_buf();
    let r = health_with(opts, &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert!(r.line.starts_with("quarantine: "), "{}", r.line);
}

#[test]
fn a_failing_firmware_command_in_the_kernel_log_is_unhealthy() {
    let log = fixtures().join("kernel-log/dmesg-T.txt");
    let opts = options(&fixtures().join("mlx5-roce-dual-port/sys"), Some(&log));
    // The recorded boot is of 2025: a window reaching back to it.
    let cfg: HealthConfig = toml::from_str("kernel_log_window = \"36500d\"").unwrap();
    let r = health_with(opts, &cfg);
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert!(r.line.starts_with("mlx5_0: "), "{}", r.line);
    let bad: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.status == Status::Unhealthy)
        .map(|f| f.what.as_str())
        .collect();
    assert!(
        bad.iter().any(|w| w.contains("health_compromised")),
        "{bad:?}"
    );
    assert!(r.line.len() <= LINE_MAX);
}

#[test]
fn builds_other_than_expected_are_unhealthy() {
    let cfg: HealthConfig = toml::from_str("firmware = \"28.39.1002\"").unwrap();
    let r = health(&fixtures().join("mlx5-roce-dual-port/sys"), &cfg);
    let builds: Vec<_> = r.findings.iter().filter(|f| f.check == "builds").collect();
    assert!(!builds.is_empty(), "{}", dump(&r));
    // The tree's fw_ver is 22.39.1002.
    assert!(
        builds.iter().all(|f| f.status == Status::Unhealthy),
        "{builds:?}"
    );
    assert_eq!(builds[0].what, "firmware 22.39.1002 (28.39.1002 expected)");
}

#[test]
fn a_quarantined_host_is_unhealthy_whatever_else_holds() {
    use rocewatch_runtime::audit::AuditLog;
    use rocewatch_runtime::quarantine::{Quarantine, QuarantineFile};
    let state = tempfile::tempdir().unwrap();
    let audit = AuditLog::new(state.path().join("audit.jsonl"));
    let q = Quarantine::now("flapping cable on mlx5_1", "operator", Default::default());
    assert!(QuarantineFile::in_dir(state.path())
        .enter(&q, &audit)
        .unwrap());
    let mut opts = options(&fixtures().join("mlx5-roce-dual-port/sys"), None);
    opts.state_dir = state.path().to_path_buf();
    let r = health_with(opts, &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert!(
        r.line
            .starts_with("quarantine: flapping cable on mlx5_1 (operator since "),
        "{}",
        r.line
    );
    assert!(r.line.len() <= LINE_MAX);
}

/// The userspace stack with a root file system given: a device without its uverbs
/// device file, or without the provider of its driver, keeps jobs off the host; the tree
/// alone (no `[health] rootfs`) is skipped, saying why.
#[test]
fn a_missing_provider_or_device_file_is_unhealthy() {
    let tree = copy_of("mlx5-roce-dual-port");
    let sys = tree.path().join("sys");
    for (n, dev) in [(0, "mlx5_0"), (1, "mlx5_1")] {
        let d = sys.join(format!("class/infiniband_verbs/uverbs{n}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("ibdev"), dev).unwrap();
        std::fs::write(d.join("dev"), format!("231:{}", 192 + n)).unwrap();
    }
    let userspace = |r: &Report| -> Vec<(Status, String)> {
        r.findings
            .iter()
            .filter(|f| f.check == "userspace")
            .map(|f| (f.status, f.what.clone()))
            .collect()
    };
    let r = health(&sys, &HealthConfig::default());
    let u = userspace(&r);
    assert_eq!(u.len(), 1, "{}", dump(&r));
    assert_eq!(u[0].0, Status::Skipped);
    assert!(
        u[0].1.contains("give --rootfs or [health] rootfs"),
        "{}",
        dump(&r)
    );
    // An empty root file system: no rdma-core, no provider, no device files.
    let rootfs = tempfile::tempdir().unwrap();
    let cfg = HealthConfig {
        rootfs: rootfs.path().to_path_buf(),
        ..HealthConfig::default()
    };
    let r = health(&sys, &cfg);
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    let u = userspace(&r);
    assert!(
        u.iter().any(|(s, w)| *s == Status::Unhealthy
            && w.starts_with("provider: driver mlx5_core needs libibverbs provider mlx5")),
        "{u:?}"
    );
    assert!(
        u.iter().any(|(s, w)| *s == Status::Unhealthy
            && w.contains("uverbs0")
            && w.contains("is not there")),
        "{u:?}"
    );
}

/// A root file system whose rdma-core is complete but for one thing, done by a link.
fn rootfs_with_rdma_core(sys: &Path) -> tempfile::TempDir {
    for (n, dev) in [(0, "mlx5_0"), (1, "mlx5_1")] {
        let d = sys.join(format!("class/infiniband_verbs/uverbs{n}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("ibdev"), dev).unwrap();
        std::fs::write(d.join("dev"), format!("231:{}", 192 + n)).unwrap();
    }
    let rootfs = tempfile::tempdir().unwrap();
    let lib = rootfs.path().join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(lib.join("libibverbs")).unwrap();
    std::fs::write(lib.join("libibverbs.so.1.14.44.0"), "").unwrap();
    std::os::unix::fs::symlink("libibverbs.so.1.14.44.0", lib.join("libibverbs.so.1")).unwrap();
    // As the packages lay it out: the provider a relative link to its library.
    std::fs::write(lib.join("libmlx5.so.1.25.44.0"), "").unwrap();
    std::os::unix::fs::symlink(
        "../libmlx5.so.1.25.44.0",
        lib.join("libibverbs/libmlx5-rdmav34.so"),
    )
    .unwrap();
    std::fs::create_dir_all(rootfs.path().join("etc/libibverbs.d")).unwrap();
    std::fs::write(
        rootfs.path().join("etc/libibverbs.d/mlx5.driver"),
        "driver mlx5\n",
    )
    .unwrap();
    rootfs
}

/// A provider library that is a link to nothing (or a loop of links) is a missing
/// provider, named with its target; so is a libibverbs.so.1 that leads nowhere. A link
/// whose absolute target lies under `[health] rootfs` (a pod's /host) is followed there.
#[test]
fn a_provider_or_libibverbs_that_is_a_dangling_link_is_missing() {
    let tree = copy_of("mlx5-roce-dual-port");
    let sys = tree.path().join("sys");
    let rootfs = rootfs_with_rdma_core(&sys);
    let lib = rootfs.path().join("usr/lib/x86_64-linux-gnu");
    let cfg = HealthConfig {
        rootfs: rootfs.path().to_path_buf(),
        ..HealthConfig::default()
    };
    let provider = |r: &Report| -> Vec<(Status, String)> {
        r.findings
            .iter()
            .filter(|f| f.check == "userspace" && f.what.starts_with("provider:"))
            .map(|f| (f.status, f.what.clone()))
            .collect()
    };
    let rdma_core = |r: &Report| -> (Status, String) {
        let f = r
            .findings
            .iter()
            .find(|f| f.check == "userspace" && f.what.starts_with("rdma-core:"))
            .expect("an rdma-core finding");
        (f.status, f.what.clone())
    };
    let r = health(&sys, &cfg);
    let p = provider(&r);
    assert_eq!(p.len(), 2, "{}", dump(&r));
    assert!(p.iter().all(|(s, _)| *s == Status::Ok), "{p:?}");
    assert_eq!(rdma_core(&r).0, Status::Ok, "{}", dump(&r));

    // An absolute target is read under the root file system, not the agent's own.
    let link = lib.join("libibverbs/libmlx5-rdmav34.so");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("/usr/lib/x86_64-linux-gnu/libmlx5.so.1.25.44.0", &link).unwrap();
    let r = health(&sys, &cfg);
    assert!(
        provider(&r).iter().all(|(s, _)| *s == Status::Ok),
        "{}",
        dump(&r)
    );

    // The library it names is gone: the link dangles.
    std::fs::remove_file(lib.join("libmlx5.so.1.25.44.0")).unwrap();
    let r = health(&sys, &cfg);
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    let p = provider(&r);
    assert!(
        p.iter().all(|(s, w)| *s == Status::Unhealthy
            && w.contains("libmlx5-rdmav34.so")
            && w.contains("libmlx5.so.1.25.44.0")),
        "{p:?}"
    );

    // A loop of links.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("libmlx5-rdmav34.so", &link).unwrap();
    let r = health(&sys, &cfg);
    let p = provider(&r);
    assert!(
        p.iter()
            .all(|(s, w)| *s == Status::Unhealthy && w.contains("loop")),
        "{p:?}"
    );

    // libibverbs.so.1, the name every verbs application is linked against, leads nowhere.
    let rootfs = rootfs_with_rdma_core(&sys);
    let lib = rootfs.path().join("usr/lib/x86_64-linux-gnu");
    let cfg = HealthConfig {
        rootfs: rootfs.path().to_path_buf(),
        ..HealthConfig::default()
    };
    std::fs::remove_file(lib.join("libibverbs.so.1")).unwrap();
    std::os::unix::fs::symlink("libibverbs.so.1.14.40.0", lib.join("libibverbs.so.1")).unwrap();
    let r = health(&sys, &cfg);
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    let (s, w) = rdma_core(&r);
    assert_eq!(s, Status::Unhealthy, "{w}");
    assert!(
        w.contains("libibverbs.so.1") && w.contains("libibverbs.so.1.14.40.0"),
        "{w}"
    );
}

/// The second port's netdev gone (its driver's Ethernet side unbound or failed): its GID
/// table empty, no netdev under its PCI function or in class/net, the port DOWN.
fn without_the_second_netdev() -> tempfile::TempDir {
    let t = copy_of("mlx5-roce-dual-port");
    let sys = t.path().join("sys");
    let gids = sys.join("class/infiniband/mlx5_1/ports/1/gids");
    for e in std::fs::read_dir(&gids).unwrap() {
        std::fs::write(
            e.unwrap().path(),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        )
        .unwrap();
    }
    std::fs::remove_dir_all(sys.join("devices/pci0000:00/0000:3b:00.1/net/ens1f1np1")).unwrap();
    std::fs::remove_file(sys.join("class/net/ens1f1np1")).unwrap();
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/state",
        "1: DOWN\n",
    );
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/phys_state",
        "3: Disabled\n",
    );
    t
}

/// A RoCE port whose netdev is gone is not "an Ethernet port without a netdev: not
/// checked": it carries no RoCE traffic, so the host is unhealthy, DOWN or not. A port
/// left unused on purpose is said so in `[health] ignore_ports`.
#[test]
fn a_roce_port_that_lost_its_netdev_is_unhealthy_unless_ignored() {
    let t = without_the_second_netdev();
    let sys = t.path().join("sys");
    let r = health(&sys, &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert!(
        r.line
            .starts_with("mlx5_1/1: port DOWN (Disabled), no netdev"),
        "{}",
        r.line
    );
    // ACTIVE without a netdev still carries nothing.
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/state",
        "4: ACTIVE\n",
    );
    write(
        t.path(),
        "class/infiniband/mlx5_1/ports/1/phys_state",
        "5: LinkUp\n",
    );
    let r = health(&sys, &HealthConfig::default());
    assert_eq!(r.verdict, Verdict::Unhealthy, "{}", dump(&r));
    assert!(
        r.line.contains("mlx5_1/1") && r.line.contains("no netdev"),
        "{}",
        r.line
    );
    // Deliberately unused: skipped, saying why; the other port decides.
    let cfg: HealthConfig = toml::from_str("ignore_ports = [\"mlx5_1/1\"]").unwrap();
    cfg.validate().unwrap();
    let r = health(&sys, &cfg);
    assert_eq!(r.verdict, Verdict::Healthy, "{}", dump(&r));
    assert!(
        r.findings.iter().any(|f| f.status == Status::Skipped
            && f.device.as_deref() == Some("mlx5_1")
            && f.what.contains("ignore_ports")),
        "{}",
        dump(&r)
    );
    assert_eq!(r.line, "healthy: 1 RDMA port checked");
}
