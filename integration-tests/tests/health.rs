//! `rocewatch health` as a scheduler runs it: exit status, the one line and its bound,
//! JSON, a running agent's firing rule, and node-problem-detector's custom-plugin
//! contract as deploy/kubernetes/node-problem-detector.yaml configures it.

use std::time::{Duration, Instant};

use crate::support::*;

fn health(args: &[&str]) -> (i32, String, String) {
    // A state directory without a quarantine, whatever this machine's holds.
    let state = fresh_state_dir();
    let o = rocewatch(
        &[&["health"], args].concat(),
        &[("STATE_DIRECTORY", state.to_str().unwrap())],
    );
    (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
}

#[test]
fn exit_status_and_one_line_per_tree() {
    let cases = [
        ("mlx5-roce-dual-port", 0, "healthy: 2 RDMA ports checked"),
        (
            "gpu-two-socket",
            1,
            "mlx5_2: PCIe 0000:9d:00.0 trained at x8 at 16 GT/s of x16 at 16 GT/s",
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

/// The `what` of health's finding of `check` about `device`, and its status.
fn finding_of<'a>(
    report: &'a serde_json::Value,
    check: &str,
    device: &str,
) -> &'a serde_json::Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check && f["device"] == device)
        .unwrap_or_else(|| panic!("no {check} finding about {device} in {report}"))
}

/// One verdict per fact: health and doctor judge each PCIe link of one tree alike
/// (fixtures/pcie-slots, see its SOURCE.md). A card at the most its slot allows is how
/// the host was built, a fault to neither; a link below what both ends allow, or down, is
/// a fault to both; an unreadable one cannot be told by either.
#[test]
fn health_and_doctor_give_one_verdict_on_each_pcie_link() {
    let root = fixture("pcie-slots");
    let r = root.to_str().unwrap();
    let (_, out, err) = health(&["--json", "--sysfs-root", r]);
    let h: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let o = rocewatch(
        &["doctor", "--json", "--window", "300ms", "--sysfs-root", r],
        &[],
    );
    let d: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    // (device, case, health's status, doctor's status) for one verdict each.
    let cases = [
        ("mlx5_0", "full", "ok", "pass"),
        ("mlx5_1", "narrow slot", "warning", "warn"),
        ("mlx5_2", "degraded", "unhealthy", "fail"),
        ("mlx5_3", "unreadable", "unknown", "skip"),
        ("mlx5_4", "down", "unhealthy", "fail"),
    ];
    let pcie_link = |dev: &str| {
        d["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "pcie-link" && c["subject"] == dev)
            .unwrap_or_else(|| panic!("no pcie-link {dev} in {d}"))
            .clone()
    };
    // Every case at once, so a difference shows them all.
    let got: Vec<String> = cases
        .iter()
        .map(|(dev, case, ..)| {
            let said = finding_of(&h, "pcie", dev)["status"].clone();
            format!("{case}: {said} / {}", pcie_link(dev)["status"])
        })
        .collect();
    let want: Vec<String> = cases
        .iter()
        .map(|(_, case, hs, ds)| format!("{case}: \"{hs}\" / \"{ds}\""))
        .collect();
    assert_eq!(got, want, "health / doctor");
    for (dev, case, _, _) in cases {
        // In the same words: health's is doctor's evidence, or its first part.
        let said = finding_of(&h, "pcie", dev)["what"].as_str().unwrap();
        let link = said.strip_prefix("PCIe ").unwrap_or(said);
        let evidence = pcie_link(dev)["evidence"].as_str().unwrap().to_string();
        assert!(
            evidence.starts_with(link),
            "{case}: health {said:?}, doctor {evidence:?}"
        );
    }
    assert!(
        finding_of(&h, "pcie", "mlx5_1")["what"]
            .as_str()
            .unwrap()
            .contains("the most its slot allows (the card can x16 at 16 GT/s)"),
        "{h}"
    );
    // Checked alone, the card in the narrow slot leaves the host in service.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("narrow.toml");
    std::fs::write(&cfg, "[health]\nports = [\"mlx5_1/1\"]\n").unwrap();
    let (c, out, err) = health(&["--config", cfg.to_str().unwrap(), "--sysfs-root", r]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(
        out.starts_with("healthy: 1 RDMA port checked, "),
        "{out}{err}"
    );
}

/// One verdict per fact: a port's state, half unreadable. A port whose readable half says
/// it is down is down to both; one whose readable half says up and the other cannot be
/// read cannot be told by either (health said unknown for both, doctor failed both).
#[test]
fn health_and_doctor_give_one_verdict_on_a_port_state() {
    let (_dir, root) = dual_port_copy();
    let port = |dev: &str| root.join("class/infiniband").join(dev).join("ports/1");
    std::fs::write(port("mlx5_0").join("state"), "1: DOWN\n").unwrap();
    std::fs::remove_file(port("mlx5_0").join("phys_state")).unwrap();
    std::fs::remove_file(port("mlx5_1").join("state")).unwrap();
    let (h, d) = health_and_doctor(&root);
    let doctor_port = |subject: &str| doctor_check(&d, "port", subject);
    let cases = [
        ("mlx5_0", "DOWN, phys_state unreadable", "unhealthy", "fail"),
        ("mlx5_1", "state unreadable, LinkUp", "unknown", "skip"),
    ];
    let got: Vec<String> = cases
        .iter()
        .map(|(dev, case, ..)| {
            let said = finding_of(&h, "ports", dev)["status"].clone();
            let port = doctor_port(&format!("{dev}/1"));
            format!("{case}: {said} / {}", port["status"])
        })
        .collect();
    let want: Vec<String> = cases
        .iter()
        .map(|(_, case, hs, ds)| format!("{case}: \"{hs}\" / \"{ds}\""))
        .collect();
    assert_eq!(got, want, "health / doctor");
    // In the same words: doctor's verdict (before its comment) opens health's finding.
    for (dev, case, ..) in cases {
        let said = finding_of(&h, "ports", dev)["what"].clone();
        let evidence = doctor_port(&format!("{dev}/1"))["evidence"].clone();
        let verdict = evidence.as_str().unwrap().split(':').next().unwrap();
        assert!(
            said.as_str().unwrap().starts_with(verdict),
            "{case}: health {said}, doctor {evidence}"
        );
    }
}

/// A copy of fixtures/mlx5-roce-dual-port to edit, and its `sys` root.
fn dual_port_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(st.success());
    (dir, root)
}

/// health's report and doctor's on one tree.
fn health_and_doctor(root: &std::path::Path) -> (serde_json::Value, serde_json::Value) {
    let r = root.to_str().unwrap();
    let (_, out, err) = health(&["--json", "--sysfs-root", r]);
    let h = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let o = rocewatch(
        &["doctor", "--json", "--window", "300ms", "--sysfs-root", r],
        &[],
    );
    let d = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (h, d)
}

/// doctor's `check` about `subject`.
fn doctor_check(d: &serde_json::Value, check: &str, subject: &str) -> serde_json::Value {
    d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == check && c["subject"] == subject)
        .unwrap_or_else(|| panic!("no {check} {subject} in {d}"))
        .clone()
}

/// One verdict per fact: the MTU. What RDMA uses is the RoCE MTU: netdevs at 4200 and
/// 9000 both give 4096, a note to both (health drained the node on it, doctor warned);
/// a netdev whose RoCE MTU is below the other's is a fault to both (doctor warned), in
/// the same words.
#[test]
fn health_and_doctor_give_one_verdict_on_the_mtu() {
    let (_dir, root) = dual_port_copy();
    let mtu = |nd: &str, m: &str| std::fs::write(root.join("class/net").join(nd).join("mtu"), m);
    let cases = [
        (
            "4200",
            [
                ("mlx5_0", "ens1f0np0", "warning", "warn"),
                ("mlx5_1", "ens1f1np1", "warning", "warn"),
            ],
        ),
        (
            "1500",
            [
                ("mlx5_0", "ens1f0np0", "unhealthy", "fail"),
                ("mlx5_1", "ens1f1np1", "ok", "pass"),
            ],
        ),
    ];
    for (first, want) in cases {
        mtu("ens1f0np0", &format!("{first}\n")).unwrap();
        let (h, d) = health_and_doctor(&root);
        for (dev, nd, hs, ds) in want {
            let said = finding_of(&h, "mtu", dev).clone();
            let check = doctor_check(&d, "mtu", nd);
            assert_eq!(
                (first, nd, &said["status"], &check["status"]),
                (first, nd, &hs.into(), &ds.into()),
                "health / doctor: {said} / {check}"
            );
            assert_eq!(said["what"], check["evidence"], "in the same words");
        }
    }
}

/// One verdict per fact: the MTU against `[health] min_mtu`, read by both from one file.
/// Both netdevs at 4000 (RoCE MTU 2048) agree with each other, but `min_mtu = 9000` asks
/// for 4096: unhealthy to health, and doctor fails them too (it passed them, reading no
/// `min_mtu`).
#[test]
fn health_and_doctor_hold_the_mtu_to_one_min_mtu() {
    let (dir, root) = dual_port_copy();
    for nd in ["ens1f0np0", "ens1f1np1"] {
        std::fs::write(root.join("class/net").join(nd).join("mtu"), "4000\n").unwrap();
    }
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(&cfg, "[health]\nmin_mtu = 9000\n").unwrap();
    let (c, r) = (cfg.to_str().unwrap(), root.to_str().unwrap());
    let (_, out, err) = health(&["--json", "--config", c, "--sysfs-root", r]);
    let h: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let o = rocewatch(
        &[
            "doctor",
            "--json",
            "--window",
            "300ms",
            "-c",
            c,
            "--sysfs-root",
            r,
        ],
        &[],
    );
    let d: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    for (dev, nd) in [("mlx5_0", "ens1f0np0"), ("mlx5_1", "ens1f1np1")] {
        let said = finding_of(&h, "mtu", dev).clone();
        let check = doctor_check(&d, "mtu", nd);
        assert_eq!(
            (nd, &said["status"], &check["status"]),
            (nd, &"unhealthy".into(), &"fail".into()),
            "health / doctor: {said} / {check}"
        );
        assert_eq!(said["what"], check["evidence"], "in the same words");
    }
}

/// One verdict per fact: a RoCE port with no RoCE v2 GID holding an address. Nothing
/// explains mlx5_0's: a fault to both; mlx5_1's function is an SR-IOV PF with VFs, whose
/// VFs carry the traffic: a note to both (both failed it); then ens1f0np0 enslaved to a
/// bond, whose master holds the addresses: a note to both.
#[test]
fn health_and_doctor_give_one_verdict_on_a_port_without_an_address() {
    let (_dir, root) = dual_port_copy();
    for dev in ["mlx5_0", "mlx5_1"] {
        let port = root.join("class/infiniband").join(dev).join("ports/1");
        // The IPv4 GIDs (slots 2 and 3) emptied as the kernel empties a slot: all zeros,
        // no type, no netdev.
        for slot in ["2", "3"] {
            std::fs::write(
                port.join("gids").join(slot),
                "0000:0000:0000:0000:0000:0000:0000:0000\n",
            )
            .unwrap();
            for attr in ["types", "ndevs"] {
                std::fs::remove_file(port.join("gid_attrs").join(attr).join(slot)).unwrap();
            }
        }
    }
    std::fs::write(
        root.join("class/infiniband/mlx5_1/device/sriov_numvfs"),
        "4\n",
    )
    .unwrap();
    let check = |want: &[(&str, &str, &str)]| {
        let (h, d) = health_and_doctor(&root);
        for (dev, hs, ds) in want {
            let said = finding_of(&h, "gid", dev).clone();
            let ip = doctor_check(&d, "ip", &format!("{dev}/1"));
            assert_eq!(
                (dev, &said["status"], &ip["status"]),
                (dev, &(*hs).into(), &(*ds).into()),
                "health / doctor: {said} / {ip}"
            );
            assert_eq!(said["what"], ip["evidence"], "in the same words");
        }
    };
    check(&[
        ("mlx5_0", "unhealthy", "fail"),
        ("mlx5_1", "warning", "warn"),
    ]);
    let bond = root.join("devices/virtual/net/bond0");
    std::fs::create_dir_all(&bond).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/virtual/net/bond0",
        root.join("class/net/bond0"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&bond, root.join("class/net/ens1f0np0/master")).unwrap();
    check(&[("mlx5_0", "warning", "warn"), ("mlx5_1", "warning", "warn")]);
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
    // Both mlx5 ports of the tree run at 100 Gb/s: the rule fires on both. Critical: a
    // rule of severity warning (the default) only warns.
    std::fs::write(
        &cfg,
        "[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = { \"rdma.device\" = \"mlx5_0\" }\nop = \"<\"\nthreshold = 200e9\nseverity = \"critical\"\n",
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
        // The tree as the host's sysfs; the host's root (rootfs) is judged in the pod
        // itself (the test below), not on a tree that has no file system with it.
        let toml = cm["data"]["rocewatch.toml"]
            .as_str()
            .unwrap()
            .replace("/host/sys", fixture(tree).to_str().unwrap());
        assert!(toml.contains("rootfs = \"/host\"\n"), "{toml}");
        let toml = toml.replace("rootfs = \"/host\"\n", "");
        std::fs::write(&cfg, toml).unwrap();
        let mut run: Vec<&str> = args.clone();
        run[config_at] = cfg.to_str().unwrap();
        // The binary is found (and the test's artifacts built) before the clock starts.
        let _ = artifacts();
        let t = Instant::now();
        let state = fresh_state_dir();
        let o = rocewatch(&run, &[("STATE_DIRECTORY", state.to_str().unwrap())]);
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

/// Single-quoted for sh (the paths here hold no quote).
fn sh_quote(p: &std::path::Path) -> String {
    let s = p.to_str().unwrap();
    assert!(!s.contains('\''), "{s}");
    format!("'{s}'")
}

/// The files the dynamic loader needs to start `bin` (`ldd`): the container image's C
/// library, and nothing of rdma-core.
fn loader_files(bin: &std::path::Path) -> Vec<std::path::PathBuf> {
    let o = std::process::Command::new("ldd").arg(bin).output().unwrap();
    assert!(o.status.success(), "ldd: {}", stderr(&o));
    stdout(&o)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = l.split("=> ").nth(1).unwrap_or(l);
            let path = path.split(" (").next()?.trim();
            path.starts_with('/').then(|| path.into())
        })
        .collect()
}

/// A character device node `path` of `major:minor`, mode 0666 as the kernel makes the
/// RDMA ones.
fn mknod(path: &std::path::Path, major: u32, minor: u32, mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let r = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | mode,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        r,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    unsafe { libc::chmod(c.as_ptr(), mode) };
}

/// A healthy RDMA host's root built here: the mlx5 tree with its uverbs and rdma_cm class
/// devices (`uverbs_main.c`, `ucma.c`) as its sysfs, rdma-core 44.0's libibverbs and the
/// mlx5 provider, the device files as udev makes them, `/dev/kmsg` (1:11, the kernel's
/// own log), an empty state directory. Its `sys` is filled by the pod script.
fn healthy_host(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let fix = dir.join("fixture-sys");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&fix)
        .status()
        .unwrap();
    assert!(st.success());
    for (n, dev, minor) in [(0, "mlx5_0", 192), (1, "mlx5_1", 193)] {
        let d = fix.join(format!("class/infiniband_verbs/uverbs{n}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("ibdev"), format!("{dev}\n")).unwrap();
        std::fs::write(d.join("dev"), format!("231:{minor}\n")).unwrap();
    }
    std::fs::create_dir_all(fix.join("class/misc/rdma_cm")).unwrap();
    std::fs::write(fix.join("class/misc/rdma_cm/dev"), "10:58\n").unwrap();
    let host = dir.join("host");
    let lib = host.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(lib.join("libibverbs")).unwrap();
    std::fs::write(lib.join("libibverbs.so.1.14.44.0"), "").unwrap();
    std::fs::write(lib.join("libibverbs/libmlx5-rdmav34.so"), "").unwrap();
    std::fs::create_dir_all(host.join("etc/libibverbs.d")).unwrap();
    std::fs::write(host.join("etc/libibverbs.d/mlx5.driver"), "driver mlx5\n").unwrap();
    mknod(&host.join("dev/infiniband/uverbs0"), 231, 192, 0o666);
    mknod(&host.join("dev/infiniband/uverbs1"), 231, 193, 0o666);
    mknod(&host.join("dev/infiniband/rdma_cm"), 10, 58, 0o666);
    mknod(&host.join("dev/kmsg"), 1, 11, 0o644);
    std::fs::create_dir_all(host.join("var/lib/rocewatch")).unwrap();
    std::fs::create_dir_all(host.join("sys")).unwrap();
    (host, fix)
}

/// What the kubelet and the container runtime do for the DaemonSet's first container, as
/// a script for a private mount namespace: each of its volumeMounts bound (recursively,
/// parents first, read-only where it says) from the host built here (hostPath), the
/// ConfigMap's files (configMap) or a directory the init container filled (emptyDir);
/// then `command` run in the container's root with the container's environment.
fn pod_script(
    ds: &serde_yaml::Value,
    cm: &serde_yaml::Value,
    host: &std::path::Path,
    fix: &std::path::Path,
    dir: &std::path::Path,
    command: &[&str],
) -> String {
    let pod = &ds["spec"]["template"]["spec"];
    let ctr_spec = &pod["containers"][0];
    let ctr = dir.join("container");
    // The container's image: the C library rocewatch needs, no rdma-core.
    for f in loader_files(&artifacts().rocewatch) {
        let to = ctr.join(f.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&f, &to).unwrap();
    }
    // The init containers fill their emptyDir volumes: each copies rocewatch there.
    let mut empty: std::collections::BTreeMap<String, std::path::PathBuf> = Default::default();
    for init in pod["initContainers"].as_sequence().into_iter().flatten() {
        let cmd: Vec<&str> = init["command"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(cmd[0], "cp", "{cmd:?}: an init container this test knows");
        for m in init["volumeMounts"].as_sequence().unwrap() {
            let at = m["mountPath"].as_str().unwrap();
            let rel = cmd[2].strip_prefix(at).unwrap().trim_start_matches('/');
            let vol = dir.join("empty").join(m["name"].as_str().unwrap());
            std::fs::create_dir_all(&vol).unwrap();
            std::fs::copy(&artifacts().rocewatch, vol.join(rel)).unwrap();
            empty.insert(m["name"].as_str().unwrap().into(), vol);
        }
    }
    let cm_dir = dir.join("configmap");
    std::fs::create_dir_all(&cm_dir).unwrap();
    for (k, v) in cm["data"].as_mapping().unwrap() {
        std::fs::write(cm_dir.join(k.as_str().unwrap()), v.as_str().unwrap()).unwrap();
    }
    let volumes = pod["volumes"].as_sequence().unwrap();
    let mut mounts: Vec<&serde_yaml::Value> = ctr_spec["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .collect();
    mounts.sort_by_key(|m| m["mountPath"].as_str().unwrap().matches('/').count());
    let mut s = String::from("set -e\n");
    // The host's /sys: a sysfs mount (so health takes it as live) showing the tree.
    s += &format!("mount --bind /sys {}\n", sh_quote(&host.join("sys")));
    for e in std::fs::read_dir(fix).unwrap() {
        let name = e.unwrap().file_name();
        s += &format!(
            "mount --bind {} {}\n",
            sh_quote(&fix.join(&name)),
            sh_quote(&host.join("sys").join(&name))
        );
    }
    for m in mounts {
        let name = m["name"].as_str().unwrap();
        let vol = volumes.iter().find(|v| v["name"] == name).unwrap();
        let mut src = if let Some(p) = vol["hostPath"]["path"].as_str() {
            host.join(p.trim_start_matches('/'))
        } else if vol.get("configMap").is_some() {
            cm_dir.clone()
        } else if vol.get("emptyDir").is_some() {
            empty[name].clone()
        } else {
            panic!("volume {name}: a kind this test does not know");
        };
        if let Some(sub) = m["subPath"].as_str() {
            src = src.join(sub);
        }
        assert!(
            src.exists(),
            "volume {name}: {} is not on the host built here",
            src.display()
        );
        let dst = ctr.join(m["mountPath"].as_str().unwrap().trim_start_matches('/'));
        s += &if src.is_dir() {
            format!("mkdir -p {}\n", sh_quote(&dst))
        } else {
            format!(
                "mkdir -p {}; : > {}\n",
                sh_quote(dst.parent().unwrap()),
                sh_quote(&dst)
            )
        };
        s += &format!("mount --rbind {} {}\n", sh_quote(&src), sh_quote(&dst));
        if m["readOnly"].as_bool() == Some(true) {
            s += &format!("mount -o remount,bind,ro {}\n", sh_quote(&dst));
        }
    }
    let mut env = String::new();
    for e in ctr_spec["env"].as_sequence().into_iter().flatten() {
        let value = e["value"].as_str().unwrap_or("node-1");
        env += &format!("{}='{value}' ", e["name"].as_str().unwrap());
    }
    let words: Vec<String> = command.iter().map(|w| format!("'{w}'")).collect();
    s += &format!(
        "exec env -i {env}\"$(command -v chroot)\" {} {}\n",
        sh_quote(&ctr),
        words.join(" ")
    );
    s
}

/// Whether this kernel answers RDMA netlink (ib_core loaded): where it does not, the
/// `qps` check cannot tell on any host, and says so.
fn rdma_netlink_here() -> bool {
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 20) };
    if fd >= 0 {
        unsafe { libc::close(fd) };
    }
    fd >= 0
}

/// node-problem-detector's pod, as deploy/kubernetes/node-problem-detector.yaml makes it,
/// on a healthy host built here whose rdma-core and device files are the host's, not the
/// container's: in a private mount namespace, a container root with only the C library,
/// every volume of the DaemonSet mounted where it says, and the monitor's command run
/// there with the ConfigMap's configuration. Health must judge the host: healthy, and
/// its userspace check found rdma-core under the host's root.
#[test]
fn the_node_problem_detector_pod_judges_the_host_not_its_container() {
    let tools = ["unshare", "chroot", "mount", "ldd"].map(|t| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if unsafe { libc::geteuid() } != 0 || tools.contains(&false) {
        missing(
            "root with unshare, chroot, mount and ldd (util-linux, coreutils)",
            "run the suite as root (CI does) on a host with util-linux",
        );
        return;
    }
    let docs = yaml_docs("deploy/kubernetes/node-problem-detector.yaml");
    let cm = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let monitor: serde_json::Value = serde_json::from_str(
        cm["data"]["rocewatch-health-monitor.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let rule = &monitor["rules"][0];
    let mut command = vec![rule["path"].as_str().unwrap()];
    command.extend(
        rule["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap()),
    );
    let dir = tempfile::tempdir().unwrap();
    let (host, fix) = healthy_host(dir.path());
    let run = |extra: &[&str]| {
        let cmd: Vec<&str> = command.iter().chain(extra).copied().collect();
        let script = pod_script(ds, cm, &host, &fix, dir.path(), &cmd);
        let o = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            stdout(&o),
            stderr(&o),
            script,
        )
    };
    let (code, line, err, script) = run(&[]);
    let (_, json, _, _) = run(&["--json"]);
    let report: serde_json::Value = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("{e}: {json}\n(the line: {line}{err})\nthe pod:\n{script}"));
    let findings = report["findings"].as_array().unwrap();
    let say = format!("exit {code}: {line}{err}\nfindings: {findings:#?}\nthe pod:\n{script}");
    // The userspace check read the host's root: rdma-core and the mlx5 provider there, the
    // device files there; none of it is in the container.
    let userspace: Vec<&serde_json::Value> = findings
        .iter()
        .filter(|f| f["check"] == "userspace")
        .collect();
    assert!(
        userspace.iter().any(|f| f["status"] == "ok"
            && f["what"]
                .as_str()
                .unwrap()
                .contains("rdma-core 44.0 (/host/")),
        "{say}"
    );
    for f in &userspace {
        assert!(f["status"] == "ok", "{say}");
    }
    // The kernel log read is the host's device (the kernel's own log).
    let klog = findings
        .iter()
        .find(|f| f["check"] == "kernel-log")
        .unwrap();
    assert!(
        klog["what"]
            .as_str()
            .unwrap()
            .contains("/dev/kmsg (/dev/kmsg records)"),
        "{say}"
    );
    if rdma_netlink_here() {
        assert_eq!(
            (code, line.as_str()),
            (0, "healthy: 2 RDMA ports checked\n"),
            "{say}"
        );
    } else {
        eprintln!(
            "NOTE: this kernel has no RDMA netlink (ib_core not loaded): qps cannot tell on \
             any host here; every other check must pass"
        );
        assert_eq!(code, 2, "{say}");
        assert!(line.starts_with("cannot tell: qps: RDMA netlink"), "{say}");
        for f in findings.iter().filter(|f| f["check"] != "qps") {
            assert!(
                matches!(f["status"].as_str(), Some("ok" | "skipped" | "warning")),
                "{say}"
            );
        }
    }
}

/// A stand-in for `scontrol` keeping node `n1`'s state and reason in `dir` (a drain sets
/// both, a resume clears them), logging each call: what `health --slurm` asked of Slurm.
pub(crate) fn fake_scontrol(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = sh_quote(dir);
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
    path
}

/// `rocewatch ARGS` with `env`, killed after `within`: exit status (None when killed),
/// standard output and error, and how long it ran.
fn rocewatch_within(
    args: &[&str],
    env: &[(&str, &str)],
    within: Duration,
) -> (Option<i32>, String, String, Duration) {
    use std::io::Read;
    // Built first: the clock is the binary's, not cargo's.
    let bin = &artifacts().rocewatch;
    let started = Instant::now();
    let mut c = std::process::Command::new(bin);
    c.args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (code, out, err, took)
}

fn mkfifo(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o644) },
        0,
        "mkfifo {path:?}"
    );
}

/// Reads that never answer (a FIFO in place of a netdev's flags and of the rdma_cm
/// class device's `dev`) on a host with a port DOWN: `health --slurm` answers within
/// `[health] timeout` and drains the node on what it knows; run again on the same
/// fault, the drain's reason is the same and Slurm is not asked again.
#[test]
fn health_slurm_drains_within_its_timeout_when_reads_never_answer() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("sys");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(cp.success());
    let port = tree.join("class/infiniband/mlx5_1/ports/1");
    std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
    std::fs::write(port.join("phys_state"), "3: Disabled\n").unwrap();
    mkfifo(&tree.join("class/net/ens1f0np0/flags"));
    std::fs::create_dir_all(tree.join("class/misc/rdma_cm")).unwrap();
    mkfifo(&tree.join("class/misc/rdma_cm/dev"));
    let state = dir.path().join("state");
    let slurm = dir.path().join("slurm");
    std::fs::create_dir(&state).unwrap();
    std::fs::create_dir(&slurm).unwrap();
    let scontrol = fake_scontrol(&slurm);
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[remediation]\naudit_log = {:?}\n\n[health]\ntimeout = \"1s\"\nrootfs = {:?}\n",
            state.join("audit.jsonl"),
            dir.path().join("root"),
        ),
    )
    .unwrap();
    let args = [
        "health",
        "--slurm",
        "--slurm-node",
        "n1",
        "--scontrol",
        scontrol.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        tree.to_str().unwrap(),
    ];
    let env = [("STATE_DIRECTORY", state.to_str().unwrap())];
    let updates = || {
        std::fs::read_to_string(slurm.join("log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("update"))
            .count()
    };
    let (code, out, err, took) = rocewatch_within(&args, &env, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{took:?}\n{out}{err}");
    assert!(took < Duration::from_secs(5), "{took:?}\n{out}{err}");
    assert!(
        out.starts_with("mlx5_1/1 ens1f1np1: port DOWN (Disabled)"),
        "{out}{err}"
    );
    let reason = std::fs::read_to_string(slurm.join("reason")).unwrap_or_default();
    assert_eq!(reason, format!("rocewatch: {}", out.trim_end()), "{err}");
    assert_eq!(updates(), 1, "{err}");
    // The same fault again: the same line, no second update.
    let (code, again, err, _) = rocewatch_within(&args, &env, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{again}{err}");
    assert_eq!(again, out, "{err}");
    assert_eq!(updates(), 1, "{err}");
}

/// Microseconds since boot on the clock the kernel-log window is measured on
/// (`CLOCK_MONOTONIC`, as rocewatch_klog reads it).
fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) },
        0
    );
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// A kernel log kept across a reboot (issue 49): the firmware command timeout of
/// fixtures/kernel-log/kmsg.txt dated after this boot's uptime is another boot's, so a
/// one-minute window holds nothing of it: healthy, and the finding says so. The same
/// message dated ten seconds ago is this boot's: unhealthy.
#[test]
fn a_kernel_log_record_of_another_boot_is_not_recent() {
    // Built before the log is written: its times are relative to now.
    artifacts();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kmsg");
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[health]\nkernel_log_window = \"1m\"\n\n[plugins.builtin.kernel-log.options]\npath = {:?}\n",
            log.to_str().unwrap()
        ),
    )
    .unwrap();
    let root = fixture("mlx5-roce-dual-port");
    let timeout_at = |us: u64| {
        std::fs::write(
            &log,
            format!(
                "6,1,{},-;mlx5_core 0000:3b:00.0 ens1f0np0: Link up\n\
                 3,2,{us},-;mlx5_core 0000:3b:00.0: wait_func:1189:(pid 72061): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n",
                monotonic_us().saturating_sub(30_000_000)
            ),
        )
        .unwrap();
        let args = [
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            root.to_str().unwrap(),
        ];
        let (code, line, err) = health(&args);
        let (_, json, _) = health(&[&args[..], &["--json"]].concat());
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}{err}"));
        (code, line, err, v)
    };
    let kernel_log = |v: &serde_json::Value| -> Vec<(String, String)> {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "kernel-log")
            .map(|f| {
                (
                    f["status"].as_str().unwrap().to_string(),
                    f["what"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    // Twice the uptime and an hour more: after this boot's uptime, whatever the clocks'
    // drift allowance (1 s and 1000 ppm).
    let now = monotonic_us();
    let (code, line, err, v) = timeout_at(2 * now + 3_600_000_000);
    let found = kernel_log(&v);
    assert_eq!(
        code, 0,
        "another boot's timeout made the host unhealthy: {line}{err}{found:?}"
    );
    assert!(
        found.iter().any(|(_, what)| what.contains(
            "from another boot: not counted (matching there: access_reg 1, cmd_timeout 1)"
        )),
        "{found:?}"
    );
    // This boot's link flap within the minute is still counted.
    assert!(
        found
            .iter()
            .any(|(s, what)| s == "warning" && what.starts_with("link_flap")),
        "{found:?}"
    );
    // The same message ten seconds ago: this boot's, in the window.
    let (code, line, err, v) = timeout_at(monotonic_us().saturating_sub(10_000_000));
    assert_eq!(code, 1, "{line}{err}{}", v);
    assert!(line.contains("cmd_timeout"), "{line}");
    assert!(
        kernel_log(&v)
            .iter()
            .all(|(_, what)| !what.contains("another boot")),
        "{v}"
    );
    // Ten seconds ago too, but followed by a record whose time and sequence number go
    // back (a file of two boots, the previous one's timeout first): not this boot's.
    timeout_at(monotonic_us().saturating_sub(10_000_000));
    let kmsg = std::fs::read_to_string(&log).unwrap();
    let (flap, timeout) = kmsg.split_once('\n').unwrap();
    let two_boots = format!("{}{flap}\n", timeout.replacen("3,2,", "3,9,", 1));
    std::fs::write(&log, &two_boots).unwrap();
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        root.to_str().unwrap(),
        "--json",
    ];
    let (code, json, err) = health(&args);
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}{err}"));
    assert_eq!(
        code, 0,
        "the boot before's timeout made the host unhealthy: {two_boots}{v}{err}"
    );
    assert!(
        kernel_log(&v).iter().any(|(_, what)| what
            .contains("1 record logged before the log's last boot (line 2: ")
            && what.contains(
                "from another boot: not counted (matching there: access_reg 1, cmd_timeout 1)"
            )),
        "{v}"
    );
}

/// The host-reading flags take effect (issue 49: health had no --procfs-root or
/// --rootfs, doctor had both): --procfs-root's `uptime` is where the kernel-log window
/// ends (a recorded dmesg judged against the uptime it was recorded at), and --rootfs is
/// the file system the userspace check reads, in place of [health] rootfs.
#[test]
fn procfs_root_and_rootfs_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let (proc_root, rootfs) = (dir.path().join("proc"), dir.path().join("host"));
    std::fs::create_dir(&proc_root).unwrap();
    std::fs::create_dir(&rootfs).unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    let dmesg = root().join("integration-tests/fixtures/kernel-log/dmesg.txt");
    std::fs::write(
        &cfg,
        format!(
            "[health]\nkernel_log_window = \"1m\"\n\n[plugins.builtin.kernel-log.options]\npath = {:?}\n",
            dmesg.to_str().unwrap()
        ),
    )
    .unwrap();
    let sys = fixture("mlx5-roce-dual-port");
    let run = |extra: &[&str]| {
        let args = [
            &[
                "--json",
                "-c",
                cfg.to_str().unwrap(),
                "--sysfs-root",
                sys.to_str().unwrap(),
            ],
            extra,
        ]
        .concat();
        let (code, json, err) = health(&args);
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}{err}"));
        let of = |check: &str| -> Vec<(String, String)> {
            v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["check"] == check)
                .map(|f| {
                    (
                        f["status"].as_str().unwrap().into(),
                        f["what"].as_str().unwrap().into(),
                    )
                })
                .collect()
        };
        (code, of("kernel-log"), of("userspace"), err)
    };
    let p = proc_root.to_str().unwrap();
    // Recorded 1021-1030 s after boot, read at 1040 s: in the last minute.
    std::fs::write(proc_root.join("uptime"), "1040.00 3.00\n").unwrap();
    let (code, klog, _, err) = run(&["--procfs-root", p]);
    assert_eq!(code, 1, "{klog:?}{err}");
    assert!(
        klog.iter().any(|(s, w)| s == "unhealthy"
            && w.contains("cmd_timeout")
            && w.contains("in the last 1m")),
        "{klog:?}{err}"
    );
    // Read at 5000 s: nothing of the last minute.
    std::fs::write(proc_root.join("uptime"), "5000.00 3.00\n").unwrap();
    let (code, klog, _, err) = run(&["--procfs-root", p]);
    assert_eq!(code, 0, "{klog:?}{err}");
    assert!(klog.iter().all(|(s, _)| s != "unhealthy"), "{klog:?}");
    assert!(
        klog.iter().any(|(_, w)| w.contains("is from the last 1m")),
        "{klog:?}"
    );

    // Without --rootfs, a tree's userspace is not judged by this host's files.
    let (_, _, us, err) = run(&[]);
    assert!(
        us.len() == 1 && us[0].0 == "skipped" && us[0].1.contains("give --rootfs"),
        "{us:?}{err}"
    );
    // With it, that root is read: an empty one has no rdma-core.
    let (code, _, us, err) = run(&["--rootfs", rootfs.to_str().unwrap()]);
    assert_eq!(code, 1, "{us:?}{err}");
    assert!(
        us.iter().any(|(s, w)| s == "unhealthy"
            && w.contains(&format!("no libibverbs.so.1.* under {}", rootfs.display()))),
        "{us:?}{err}"
    );
}
