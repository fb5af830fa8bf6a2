//! `rocewatch qos` on fixture trees: `show` (configfs RoCE defaults read under the sysfs
//! root, mlx5 ECN knobs, MTUs, and the three kinds of answer: a value, `unsupported`,
//! `unknown` with the reason), `plan`, `diff`, `apply` (dry run, snapshot, audit, undo
//! on a half-way failure) and `rollback` on writable copies of the trees; the agent's
//! configuration metrics and re-apply on drift; the shipped Prometheus rules under
//! promtool. The live kernel's configfs and DCB netlink are checked in the soft-RoCE
//! lab (`lab.rs`).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

fn show(case: &str) -> Value {
    let root = fixture(case);
    let o = rocewatch(
        &[
            "qos",
            "show",
            "--json",
            "--sysfs-root",
            root.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn setting<'a>(v: &'a Value, dev: &str, key: &str) -> &'a Value {
    let port = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["device"] == dev)
        .unwrap_or_else(|| panic!("no {dev} in {v}"));
    &port["settings"][key]
}

#[test]
fn qos_show_reads_configfs_ecn_and_mtu_from_the_tree() {
    let v = show("mlx5-roce-dual-port");
    let val = |dev: &str, k: &str| {
        let s = setting(&v, dev, k);
        assert_eq!(s["status"], "value", "{dev} {k}: {s}");
        s["value"].as_str().unwrap().to_string()
    };
    assert_eq!(val("mlx5_0", "roce_mode"), "RoCE v2");
    assert_eq!(val("mlx5_0", "roce_tos"), "106");
    assert_eq!(val("mlx5_0", "ecn_np_enabled"), "3");
    assert_eq!(val("mlx5_0", "ecn_rp_enabled"), "3");
    assert_eq!(val("mlx5_1", "ecn_np_enabled"), "none");
    assert_eq!(val("mlx5_0", "cnp_dscp"), "48");
    assert_eq!(val("mlx5_0", "cnp_802p_prio"), "6");
    assert_eq!(val("mlx5_0", "mtu"), "9000");
    assert_eq!(val("mlx5_0", "rdma_mtu"), "4096");
    // mlx5_1's rdma_cm directory was never created: unknown, saying how to see it.
    let m1 = setting(&v, "mlx5_1", "roce_mode");
    assert_eq!(m1["status"], "unknown");
    assert!(m1["value"].as_str().unwrap().contains("mkdir"), "{m1}");
    // No tc/ directory in this tree: the device has no traffic class setting.
    assert_eq!(
        setting(&v, "mlx5_0", "traffic_class")["status"],
        "unsupported"
    );
    // DCB is netlink on the live kernel only.
    let pfc = setting(&v, "mlx5_0", "pfc_enabled");
    assert_eq!(pfc["status"], "unknown");
    assert!(pfc["value"].as_str().unwrap().contains("live"), "{pfc}");
    assert_eq!(v["ports"][0]["netdev"], "ens1f0np0");
}

#[test]
fn qos_show_on_rxe_and_without_configfs() {
    let v = show("rxe-soft-roce");
    // No configfs in this tree at all.
    let m = setting(&v, "rxe0", "roce_mode");
    assert_eq!(m["status"], "unknown");
    assert!(
        m["value"]
            .as_str()
            .unwrap()
            .contains("configfs not mounted"),
        "{m}"
    );
    for k in ["ecn_np_enabled", "cnp_dscp", "traffic_class"] {
        assert_eq!(setting(&v, "rxe0", k)["status"], "unsupported", "{k}");
    }
    assert_eq!(setting(&v, "rxe0", "rdma_mtu")["value"], "1024");
    // The text form: a block per port, unknowns with their reason.
    let root = fixture("rxe-soft-roce");
    let o = rocewatch(
        &["qos", "show", "--sysfs-root", root.to_str().unwrap()],
        &[],
    );
    let text = stdout(&o);
    assert!(text.starts_with("rxe0/1 (eth0)\n"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("  ecn_np_enabled ") && l.ends_with(" unsupported")),
        "{text}"
    );
    assert!(text.contains("\nfingerprint "), "{text}");
    // A tree without RDMA devices: no ports, said plainly.
    let none = fixture("no-devices");
    let o = rocewatch(
        &["qos", "show", "--sysfs-root", none.to_str().unwrap()],
        &[],
    );
    assert!(
        stdout(&o).contains("no RDMA ports found"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
}

#[test]
fn qos_plan_lists_the_exact_differences() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("qos.toml");
    std::fs::write(
        &cfg,
        "[[qos.desired]]\ndevices = \"mlx5_*\"\nsettings = { roce_mode = \"RoCE v2\", ecn_np_enabled = \"3\", mtu = \"9000\", traffic_class = \"3\" }\n",
    )
    .unwrap();
    let root = fixture("mlx5-roce-dual-port");
    let args = |json: bool| {
        let mut a = vec![
            "qos",
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            root.to_str().unwrap(),
        ];
        if json {
            a.push("--json");
        }
        rocewatch(&a, &[])
    };
    let o = args(false);
    assert_eq!(
        o.status.code(),
        Some(1),
        "differences: exit 1\n{}",
        stderr(&o)
    );
    let text = stdout(&o);
    assert!(
        text.contains("change  mlx5_1/1 (ens1f1np1)  ecn_np_enabled: none -> 3\n"),
        "{text}"
    );
    // mlx5_1's RoCE mode cannot be read (no configfs directory) but can be set:
    // apply creates the directory.
    assert!(
        text.contains("change  mlx5_1/1 (ens1f1np1)  roce_mode: unknown -> RoCE v2\n"),
        "{text}"
    );
    assert!(
        text.ends_with("2 to change, 2 that cannot be compared, 4 already as desired\n"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&args(true))).unwrap();
    assert_eq!(v["changes"].as_array().unwrap().len(), 2);
    assert_eq!(v["changes"][1]["unread"], true);
    assert_eq!(v["in_sync"], 4);
    let blocked: Vec<(&str, &str)> = v["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["device"].as_str().unwrap(),
                b["setting"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        blocked,
        [("mlx5_0", "traffic_class"), ("mlx5_1", "traffic_class")]
    );
    // In sync: exit 0.
    std::fs::write(
        &cfg,
        "[[qos.desired]]\ndevices = \"mlx5_0\"\nsettings = { roce_mode = \"RoCE v2\", ecn_np_enabled = \"3\" }\n",
    )
    .unwrap();
    let o = args(false);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    // A setting that does not exist: a configuration error naming the key, exit 2.
    std::fs::write(&cfg, "[[qos.desired]]\nsettings = { roce_mod = \"x\" }\n").unwrap();
    let o = args(false);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("qos.desired[0].settings.roce_mod"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn qos_diff_compares_two_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let save = |case: &str| {
        let p = dir.path().join(format!("{case}.json"));
        std::fs::write(&p, serde_json::to_string(&show(case)).unwrap()).unwrap();
        p
    };
    let (a, b) = (save("mlx5-roce-dual-port"), save("rxe-soft-roce"));
    let diff = |x: &std::path::Path, y: &std::path::Path, json: bool| {
        let mut args = vec!["qos", "diff", x.to_str().unwrap(), y.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        rocewatch(&args, &[])
    };
    // The same host twice: no difference, exit 0.
    let o = diff(&a, &a, false);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).ends_with("0 differences\n"));
    // Different hosts: the ports of each side only, exit 1.
    let o = diff(&a, &b, true);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let ports: Vec<(&str, &str, &str)> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["setting"] == "port")
        .map(|d| {
            (
                d["port"].as_str().unwrap(),
                d["a"].as_str().unwrap(),
                d["b"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            ("mlx5_0/1", "present", "absent"),
            ("mlx5_1/1", "present", "absent"),
            ("rxe0/1", "absent", "present")
        ]
    );
    // One host with a changed setting: that setting, both values.
    let mut changed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    changed["ports"][0]["settings"]["mtu"]["value"] = "1500".into();
    let c = dir.path().join("changed.json");
    std::fs::write(&c, changed.to_string()).unwrap();
    let o = diff(&a, &c, false);
    let text = stdout(&o);
    assert!(text.contains("mlx5_0/1  mtu: "), "{text}");
    assert!(
        text.contains("= 9000  |  ") && text.ends_with("= 1500\n1 difference\n"),
        "{text}"
    );
    // Not a qos show output: an error naming the file, exit 2.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{}").unwrap();
    let o = diff(&a, &bad, false);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.json"), "{}", stderr(&o));
}

/// Two hosts configured alike whose `unknown` reasons differ (each names its own tree, as
/// a host's names its paths and PCI addresses): the same fingerprint, as the fleet rule
/// compares them, and `qos diff` agrees: no difference, exit 0, the reasons shown apart
/// once each. A changed value changes both (issue 49).
#[test]
fn qos_diff_and_the_fingerprint_agree_on_hosts_alike() {
    let dir = tempfile::tempdir().unwrap();
    let shown = |name: &str, mtu: Option<&str>| -> (std::path::PathBuf, Value) {
        let host = dir.path().join(name);
        std::fs::create_dir(&host).unwrap();
        let root = fixture_copy("mlx5-roce-dual-port", &host);
        if let Some(mtu) = mtu {
            std::fs::write(root.join("class/net/ens1f0np0/mtu"), format!("{mtu}\n")).unwrap();
        }
        let shown = show_at(&root);
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, shown.to_string()).unwrap();
        (path, shown)
    };
    let diff = |x: &std::path::Path, y: &std::path::Path, json: bool| {
        let mut args = vec!["qos", "diff", x.to_str().unwrap(), y.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        rocewatch(&args, &[])
    };
    let ((a, va), (b, vb)) = (shown("node1", None), shown("node2", None));
    // The reasons differ, the values and the fingerprints do not.
    assert_ne!(
        setting(&va, "mlx5_0", "trust"),
        setting(&vb, "mlx5_0", "trust")
    );
    assert_eq!(setting(&va, "mlx5_0", "trust")["status"], "unknown");
    assert_eq!(va["fingerprint"], vb["fingerprint"]);
    let o = diff(&a, &b, false);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    assert!(text.ends_with("\n0 differences\n"), "{text}");
    assert!(
        text.starts_with(
            "unknown on both sides for different reasons, equal as values (not counted):\n"
        ),
        "{text}"
    );
    // Each side's reason once, not once per setting and port.
    let dcb = |host: &str| {
        format!(
            "DCB is read over netlink from the live kernel; {} is not the live /sys",
            dir.path().join(host).join("sys").display()
        )
    };
    for host in ["node1", "node2"] {
        assert_eq!(text.matches(&dcb(host)).count(), 1, "{host}: {text}");
    }
    let o = diff(&a, &b, true);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&o)).unwrap(),
        serde_json::json!([])
    );
    // Another MTU (and so another RDMA MTU): another fingerprint, and exactly those
    // differences.
    let (c, vc) = shown("node3", Some("1500"));
    assert_ne!(va["fingerprint"], vc["fingerprint"]);
    let o = diff(&a, &c, false);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}{}", stderr(&o));
    assert!(text.starts_with("mlx5_0/1  mtu: "), "{text}");
    assert!(text.ends_with("\n2 differences\n"), "{text}");
    let o = diff(&a, &c, true);
    let rows: Vec<(String, String, String)> = serde_json::from_str::<Value>(&stdout(&o))
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap().to_string();
            (s("setting"), s("a"), s("b"))
        })
        .collect();
    let row = |s: &str, a: &str, b: &str| (s.to_string(), a.to_string(), b.to_string());
    assert_eq!(
        rows,
        [row("mtu", "9000", "1500"), row("rdma_mtu", "4096", "1024")]
    );
}

/// `qos show` says each reason a setting could not be read for once, under the ports,
/// not on each of the settings it applies to (issue 49).
#[test]
fn qos_show_says_each_reason_once() {
    let root = fixture("mlx5-roce-dual-port");
    let o = rocewatch(
        &["qos", "show", "--sysfs-root", root.to_str().unwrap()],
        &[],
    );
    let text = stdout(&o);
    assert!(o.status.success(), "{text}{}", stderr(&o));
    let dcb = format!(
        "DCB is read over netlink from the live kernel; {} is not the live /sys",
        root.display()
    );
    let marked: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("  ") && l.ends_with(" unknown [1]"))
        .collect();
    // trust, pfc_enabled, dscp_map... of both ports.
    assert!(marked.len() >= 2 * 9, "{text}");
    assert_eq!(text.matches(dcb.as_str()).count(), 1, "{text}");
    assert!(text.contains(&format!("\n[1] {dcb}\n")), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("  mtu ") && l.ends_with(" 9000")),
        "{text}"
    );
}

/// A writable copy of a fixture tree (apply writes into it).
pub(crate) fn fixture_copy(case: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture(case))
        .arg(dir.join("sys"))
        .status()
        .unwrap();
    assert!(st.success());
    dir.join("sys")
}

fn audit_records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn read_tree(root: &std::path::Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel))
        .unwrap()
        .trim()
        .to_string()
}

/// Runs `rocewatch qos ARGS --config CFG`.
fn qos(cfg: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut a = vec!["qos"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--config", cfg.to_str().unwrap()]);
    rocewatch(&a, &[])
}

#[test]
fn qos_apply_dry_run_then_apply_audit_snapshot_and_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_copy("mlx5-roce-dual-port", dir.path());
    let audit = dir.path().join("audit.jsonl");
    let snaps = dir.path().join("snapshots");
    let cfg = dir.path().join("qos.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {root:?}\n[remediation]\naudit_log = {audit:?}\n[qos]\nsnapshot_dir = {snaps:?}\n\
             [[qos.desired]]\ndevices = \"mlx5_0\"\nsettings = {{ roce_mode = \"v2\", roce_tos = \"24\", ecn_np_enabled = \"4,3\", cnp_dscp = \"46\", mtu = \"1500\" }}\n"
        ),
    )
    .unwrap();
    let tos = "kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos";
    let mtu = "class/net/ens1f0np0/mtu";
    let np4 = "class/net/ens1f0np0/ecn/roce_np/enable/4";
    let before = show_at(&root);

    // Dry run: says what it would write where, changes nothing, writes nothing.
    let o = qos(&cfg, &["apply"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(&format!(
            "would       mlx5_0/1 (ens1f0np0)  roce_tos: 106 -> 24  would write \"24\" to {}",
            root.join(tos).display()
        )),
        "{text}"
    );
    assert!(text.contains("dry run: 4 to change"), "{text}");
    assert_eq!(show_at(&root), before, "a dry run changed something");
    assert!(!snaps.exists(), "a dry run wrote a snapshot");
    assert!(!audit.exists(), "a dry run wrote the audit log");

    // Apply: every change made, audited before and after, snapshot written.
    let o = qos(&cfg, &["apply", "--yes", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["failed"], false);
    assert!(v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["outcome"] == "done"));
    assert_eq!(
        (read_tree(&root, tos), read_tree(&root, mtu)),
        ("24".into(), "1500".into())
    );
    assert_eq!(read_tree(&root, np4), "1");
    let snap_path = std::path::PathBuf::from(v["snapshot"].as_str().unwrap());
    let snap: Value = serde_json::from_str(&std::fs::read_to_string(&snap_path).unwrap()).unwrap();
    assert_eq!(snap["state"], "applied");
    let from: Vec<(&str, &str)> = snap["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["setting"].as_str().unwrap(), c["from"].as_str().unwrap()))
        .collect();
    assert_eq!(
        from,
        [
            ("cnp_dscp", "48"),
            ("ecn_np_enabled", "3"),
            ("mtu", "9000"),
            ("roce_tos", "106")
        ]
    );
    let recs = audit_records(&audit);
    let executing: Vec<&Value> = recs
        .iter()
        .filter(|r| r["decision"] == "executing")
        .collect();
    let results: Vec<&Value> = recs.iter().filter(|r| r["decision"] == "result").collect();
    assert_eq!((executing.len(), results.len()), (4, 4));
    assert!(results
        .iter()
        .all(|r| r["outcome"] == "ok" && r["rule"] == "qos apply"));
    assert_eq!(executing[2]["labels"]["rdma.qos.setting"], "mtu");
    assert_eq!(executing[2]["detail"], "9000 -> 1500");
    // A change and its result are one decision; the result names it and has no labels.
    for e in &executing {
        let r: Vec<&&Value> = results
            .iter()
            .filter(|r| r["decision_id"] == e["decision_id"])
            .collect();
        assert_eq!(r.len(), 1, "{recs:?}");
        assert!(r[0].get("labels").is_none(), "{recs:?}");
    }
    // In sync now.
    assert_eq!(qos(&cfg, &["plan"]).status.code(), Some(0));

    // Rollback: a dry run first, then the values before the apply, newest first.
    let o = qos(&cfg, &["rollback"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("would "), "{}", stdout(&o));
    assert_eq!(read_tree(&root, mtu), "1500");
    let o = qos(&cfg, &["rollback", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        show_at(&root),
        before,
        "rollback did not restore everything"
    );
    let snap: Value = serde_json::from_str(&std::fs::read_to_string(&snap_path).unwrap()).unwrap();
    assert_eq!(snap["state"], "restored");
    assert!(audit_records(&audit)
        .iter()
        .any(|r| r["action"] == "qos_rollback" && r["decision"] == "result"));
    // Nothing left to roll back.
    let o = qos(&cfg, &["rollback", "--yes"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no snapshot to roll back"),
        "{}",
        stderr(&o)
    );

    // A setting someone changed after the apply is left alone (unless --force).
    assert_eq!(qos(&cfg, &["apply", "--yes"]).status.code(), Some(0));
    std::fs::write(root.join(mtu), "4200").unwrap();
    let o = qos(&cfg, &["rollback", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("mtu: 4200 -> 9000  changed since apply set \"1500\"; left alone"),
        "{}",
        stdout(&o)
    );
    assert_eq!(read_tree(&root, mtu), "4200");
    assert_eq!(read_tree(&root, tos), "106");
}

/// DCQCN end to end: the kernel's mlx5 debugfs `cc_params` (laid out from
/// `drivers/infiniband/hw/mlx5/cong.c`, NVIDIA's documented defaults) on a copy of the
/// tree; plan names the difference, apply writes the debugfs file and snapshots it,
/// rollback restores it; a value past the field's width is refused at load, keyed.
#[test]
fn dcqcn_parameters_planned_applied_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_copy("mlx5-roce-dual-port", dir.path());
    let cc = root.join("kernel/debug/mlx5/0000:3b:00.1/cc_params");
    std::fs::create_dir_all(&cc).unwrap();
    for (f, v) in [
        ("rp_ai_rate", "5"),
        ("rp_hai_rate", "50"),
        ("rp_rate_reduce_monitor_period", "4"),
        ("np_min_time_between_cnps", "0"),
    ] {
        std::fs::write(cc.join(f), v).unwrap();
    }
    let snaps = dir.path().join("snapshots");
    let cfg = dir.path().join("qos.toml");
    let write_cfg = |settings: &str| {
        std::fs::write(
            &cfg,
            format!(
                "[agent]\nsysfs_root = {root:?}\n[remediation]\naudit_log = {:?}\n[qos]\nsnapshot_dir = {snaps:?}\n\
                 [[qos.desired]]\ndevices = \"mlx5_1\"\nsettings = {{ {settings} }}\n",
                dir.path().join("audit.jsonl")
            ),
        )
        .unwrap()
    };
    write_cfg("dcqcn_rpg_ai_rate = \"10\", dcqcn_min_time_between_cnps = \"4\"");
    let v = show_at(&root);
    let m1 = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["device"] == "mlx5_1")
        .unwrap();
    assert_eq!(m1["settings"]["dcqcn_rpg_hai_rate"]["value"], "50", "{m1}");
    let o = qos(&cfg, &["plan"]);
    let text = stdout(&o);
    assert!(
        text.contains("change  mlx5_1/1 (ens1f1np1)  dcqcn_rpg_ai_rate: 5 -> 10"),
        "{text}{}",
        stderr(&o)
    );
    assert!(
        text.contains("dcqcn_min_time_between_cnps: 0 -> 4"),
        "{text}"
    );
    let o = qos(&cfg, &["apply", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(read_tree(&cc, "rp_ai_rate"), "10");
    assert_eq!(read_tree(&cc, "np_min_time_between_cnps"), "4");
    assert_eq!(qos(&cfg, &["plan"]).status.code(), Some(0));
    let o = qos(&cfg, &["rollback", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(read_tree(&cc, "rp_ai_rate"), "5");
    assert_eq!(read_tree(&cc, "np_min_time_between_cnps"), "0");
    // The clamp is one bit: 2 would be written as 0 by the driver, so it is refused.
    write_cfg("dcqcn_clamp_tgt_rate = \"2\"");
    let o = qos(&cfg, &["plan"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("qos.desired[0].settings.dcqcn_clamp_tgt_rate"),
        "{}",
        stderr(&o)
    );
}

/// `qos show --json` of a tree.
pub(crate) fn show_at(root: &std::path::Path) -> Value {
    let o = rocewatch(
        &[
            "qos",
            "show",
            "--json",
            "--sysfs-root",
            root.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn qos_apply_failing_half_way_undoes_what_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_copy("mlx5-roce-dual-port", dir.path());
    let audit = dir.path().join("audit.jsonl");
    let cfg = dir.path().join("qos.toml");
    // ECN first (alphabetical), then the RoCE mode: mlx5_1 has no configfs directory;
    // apply creates it, but in a fixture tree nothing makes the port files the kernel
    // would, so the write fails after the ECN changes were made.
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {root:?}\n[remediation]\naudit_log = {audit:?}\n[qos]\nsnapshot_dir = {:?}\n\
             [[qos.desired]]\ndevices = \"mlx5_1\"\nsettings = {{ ecn_np_enabled = \"3\", ecn_rp_enabled = \"3\", roce_mode = \"RoCE v2\" }}\n",
            dir.path().join("snapshots")
        ),
    )
    .unwrap();
    let before = show_at(&root);
    let o = qos(&cfg, &["apply", "--yes", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let outcomes: Vec<(&str, &str)> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["setting"].as_str().unwrap(),
                s["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("ecn_np_enabled", "done"),
            ("ecn_rp_enabled", "done"),
            ("roce_mode", "failed"),
            ("ecn_rp_enabled", "undone"),
            ("ecn_np_enabled", "undone"),
        ]
    );
    // The settings are as before (the created configfs directory stays: it only shows
    // the device's defaults).
    let mut before = before;
    before["ports"][1]
        .as_object_mut()
        .unwrap()
        .remove("settable_unread");
    let mut after = show_at(&root);
    for s in [&before, &after] {
        assert_eq!(setting(s, "mlx5_1", "ecn_np_enabled")["value"], "none");
    }
    assert_eq!(
        setting(&after, "mlx5_1", "roce_mode")["status"],
        "unsupported"
    );
    after["ports"][1]["settings"]["roce_mode"] =
        before["ports"][1]["settings"]["roce_mode"].clone();
    after["ports"][1]["settings"]["roce_tos"] = before["ports"][1]["settings"]["roce_tos"].clone();
    assert_eq!(after["ports"], before["ports"]);
    let snap: Value =
        serde_json::from_str(&std::fs::read_to_string(v["snapshot"].as_str().unwrap()).unwrap())
            .unwrap();
    assert_eq!(snap["state"], "rolled_back");
    let recs = audit_records(&audit);
    let undo: Vec<&Value> = recs
        .iter()
        .filter(|r| r["rule"] == "qos apply (undo after a failure)" && r["decision"] == "result")
        .collect();
    assert_eq!(undo.len(), 2);
    assert!(recs
        .iter()
        .any(|r| r["decision"] == "result" && r["outcome"] == "error"));
    // Nothing to roll back: the failed apply undid itself.
    let o = qos(&cfg, &["rollback"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
}

#[test]
fn qos_values_are_checked_at_load_with_the_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("qos.toml");
    for (settings, key, says) in [
        ("mtu = \"jumbo\"", "settings.mtu", "bytes (68-65535)"),
        (
            "pfc_enabled = \"3,9\"",
            "settings.pfc_enabled",
            "priorities 0-7",
        ),
        (
            "roce_mode = \"v3\"",
            "settings.roce_mode",
            "\"RoCE v2\" or \"IB/RoCE v1\"",
        ),
        ("dscp_map = \"26=3\"", "settings.dscp_map", "DSCP:PRIORITY"),
        ("trust = \"vlan\"", "settings.trust", "\"dscp\" or \"pcp\""),
    ] {
        std::fs::write(
            &cfg,
            format!("[[qos.desired]]\nsettings = {{ {settings} }}\n"),
        )
        .unwrap();
        let o = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
        assert_eq!(o.status.code(), Some(1), "{settings}");
        let e = stderr(&o);
        assert!(
            e.contains(&format!("qos.desired[0].{key}")) && e.contains(says),
            "{settings}: {e}"
        );
    }
    // qos_apply needs a desired state to re-apply.
    std::fs::write(&cfg, "[remediation.actions.fix]\ntype = \"qos_apply\"\n").unwrap();
    let o = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("remediation.actions.fix"),
        "{}",
        stderr(&o)
    );
}

/// The running agent exports the configuration (settings, drift, fingerprint), and a
/// rule on drift with a `qos_apply` action puts a changed setting back (audited, with a
/// snapshot), within the remediation limits.
#[test]
fn agent_exports_the_configuration_and_reapplies_on_drift() {
    use crate::prometheus::get;
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_copy("mlx5-roce-dual-port", dir.path());
    let audit = dir.path().join("audit.jsonl");
    let snaps = dir.path().join("snapshots");
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[qos]\ninterval = \"300ms\"\nsnapshot_dir = {snaps:?}\n\
             [[qos.desired]]\ndevices = \"mlx5_0\"\nsettings = {{ mtu = \"9000\", cnp_dscp = \"48\" }}\n\
             [remediation]\naudit_log = {audit:?}\nkill_switch = {:?}\n\
             [remediation.actions.reapply]\ntype = \"qos_apply\"\ndry_run = false\n\
             [[rules]]\nname = \"qos-drift\"\nmetric = \"rdma.qos.drift\"\nop = \">\"\nthreshold = 0\nactions = [\"reapply\"]\n",
            dir.path().join("STOP")
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
    let scrape_until = |what: &str, ok: &dyn Fn(&str) -> bool| -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = get(&url, None).map(|(_, b)| b).unwrap_or_default();
            if ok(&text) {
                return text;
            }
            assert!(Instant::now() < deadline, "{what} never seen:\n{text}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let drift_mtu = |v: &str| {
        format!(
            "rdma_qos_drift{{network_interface_name=\"ens1f0np0\",rdma_device=\"mlx5_0\",rdma_port=\"1\",rdma_qos_setting=\"mtu\"}} {v}"
        )
    };
    // Each drifting setting is re-applied on its own transition: wait until none drifts, so
    // the fingerprint below is of the same settings `qos show` reads afterwards.
    let text = scrape_until("the configuration metrics, in sync", &|t| {
        t.contains(&drift_mtu("0"))
            && !t
                .lines()
                .any(|l| l.starts_with("rdma_qos_drift{") && l.ends_with(" 1"))
    });
    assert!(
        text.contains("rdma_qos_setting{network_interface_name=\"ens1f0np0\",rdma_device=\"mlx5_0\",rdma_port=\"1\",rdma_qos_setting=\"roce_mode\",rdma_qos_value=\"RoCE v2\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("rdma_qos_value=\"unsupported\"")
            && text.contains("rdma_qos_value=\"unknown\""),
        "{text}"
    );
    // The same fingerprint as `qos show` prints for the tree (once the agent has read the
    // settings as they are now).
    let shown = show_at(&root);
    let want = shown["fingerprint"].as_str().unwrap().to_string();
    let text = scrape_until("the fingerprint of the settings as they are", &|t| {
        t.contains(&format!("rdma_qos_fingerprint=\"{want}\""))
    });
    let fp_line = text
        .lines()
        .find(|l| l.starts_with("rdma_qos_fingerprint{"))
        .unwrap_or_else(|| panic!("no fingerprint:\n{text}"))
        .to_string();
    assert!(
        fp_line.contains(shown["fingerprint"].as_str().unwrap()),
        "{fp_line} vs {}",
        shown["fingerprint"]
    );
    assert!(
        !text.contains("rdma_qos_drift{network_interface_name=\"ens1f1np1\""),
        "only mlx5_0 is desired"
    );
    if let Some(promtool) = crate::prometheus::promtool() {
        crate::prometheus::promtool_check(&promtool, &text);
    }

    // Someone changes the MTU: drift, the rule fires, the action puts it back.
    std::fs::write(root.join("class/net/ens1f0np0/mtu"), "1500").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let recs = loop {
        let recs = audit_records(&audit);
        if recs
            .iter()
            .any(|r| r["action"] == "reapply" && r["decision"] == "result")
        {
            break recs;
        }
        assert!(Instant::now() < deadline, "no re-apply audited: {recs:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let result = recs
        .iter()
        .find(|r| r["action"] == "reapply" && r["decision"] == "result")
        .unwrap();
    assert_eq!(result["outcome"], "ok", "{result}");
    assert_eq!(
        result["detail"], "done mlx5_0/1 mtu: 1500 -> 9000",
        "{result}"
    );
    // The labels are on the decision's first record (the rule's firing).
    let fired = recs
        .iter()
        .find(|r| r["decision_id"] == result["decision_id"] && r["decision"] == "fired")
        .unwrap_or_else(|| panic!("no fired record of the decision: {recs:?}"));
    assert_eq!(fired["labels"]["rdma.qos.setting"], "mtu");
    assert!(result.get("labels").is_none(), "{result}");
    // The change itself is audited under the rule's name, before and after.
    assert!(recs.iter().any(|r| r["rule"] == "qos-drift"
        && r["action"] == "qos_apply"
        && r["decision"] == "executing"
        && r["detail"] == "1500 -> 9000"));
    assert_eq!(
        std::fs::read_to_string(root.join("class/net/ens1f0np0/mtu")).unwrap(),
        "9000"
    );
    assert_eq!(std::fs::read_dir(&snaps).unwrap().count(), 1);
    scrape_until("the drift cleared", &|t| t.contains(&drift_mtu("0")));
}

/// The shipped alert rules: all eight valid for `promtool check rules`, and their unit
/// tests pass under `promtool test rules` (a host whose fingerprint differs from the
/// majority fires, hosts alike do not; drift fires after 10 minutes and clears; pause
/// storm, storm prevention, CNP surge, port down, flapping and probe loss fire); and the
/// fleet's localization rules (a NIC down seen by two fine probers, a failing prober, an
/// overloaded one).
#[test]
fn prometheus_rules_find_the_host_that_differs_from_the_majority() {
    let Some(promtool) = crate::prometheus::promtool() else {
        return;
    };
    let dir = root().join("configs/prometheus");
    let mut said = Vec::new();
    for args in [
        ["check", "rules", "rocewatch.rules.yml"],
        ["test", "rules", "rocewatch.rules.test.yml"],
        ["check", "rules", "rocewatch-fleet.rules.yml"],
        ["test", "rules", "rocewatch-fleet.rules.test.yml"],
    ] {
        let o = std::process::Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "promtool {args:?}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        said.push(stdout(&o));
    }
    assert!(said[0].contains("SUCCESS: 24 rules found"), "{}", said[0]);
    assert!(said[2].contains("SUCCESS: 26 rules found"), "{}", said[2]);
}

#[test]
fn qos_apply_changes_nothing_it_cannot_audit() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_copy("mlx5-roce-dual-port", dir.path());
    // The audit log's path is a directory: no record can be written.
    let audit = dir.path().join("audit.jsonl");
    std::fs::create_dir(&audit).unwrap();
    let snaps = dir.path().join("snapshots");
    let cfg = dir.path().join("qos.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {root:?}\n[remediation]\naudit_log = {audit:?}\n[qos]\nsnapshot_dir = {snaps:?}\n\
             [[qos.desired]]\ndevices = \"mlx5_0\"\nsettings = {{ roce_tos = \"24\", mtu = \"1500\" }}\n"
        ),
    )
    .unwrap();
    let before = show_at(&root);
    let o = qos(&cfg, &["apply", "--yes", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["failed"], true);
    let why = v["steps"].to_string();
    assert!(why.contains("cannot be written"), "{why}");
    assert_eq!(show_at(&root), before, "an unaudited change was made");
}

/// `chown -h UID:UID PATH` (a link itself, not its target).
pub(crate) fn lchown(path: &std::path::Path, uid: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: lchown on a path the test made; the result is checked.
    let r = unsafe { libc::lchown(c.as_ptr(), uid, uid) };
    assert_eq!(
        r,
        0,
        "lchown {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

#[test]
fn qos_apply_as_root_never_writes_through_a_link_or_in_a_directory_another_user_owns() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test checks what `qos apply --yes` refuses as root: it needs root (CI runs as root)"
    );
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_copy("mlx5-roce-dual-port", dir.path());
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let before = show_at(&root);
    let config = |state: &std::path::Path| {
        let cfg = dir.path().join("qos.toml");
        let (audit, snaps) = (state.join("audit.jsonl"), state.join("qos"));
        std::fs::write(
            &cfg,
            format!(
                "[agent]\nsysfs_root = {root:?}\n[remediation]\naudit_log = {audit:?}\n[qos]\nsnapshot_dir = {snaps:?}\n\
                 [[qos.desired]]\ndevices = \"mlx5_0\"\nsettings = {{ roce_tos = \"24\", mtu = \"1500\" }}\n"
            ),
        )
        .unwrap();
        cfg
    };

    // The state directory belongs to user nobody (as systemd's StateDirectory= gives it to
    // the unit's user), who planted a link at the audit log.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::symlink(&victim, theirs.join("audit.jsonl")).unwrap();
    lchown(&theirs.join("audit.jsonl"), 65534);
    lchown(&theirs, 65534);
    let o = qos(&config(&theirs), &["apply", "--yes"]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_ne!(o.status.code(), Some(0), "{said}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "written through the link: {said}"
    );
    assert_eq!(show_at(&root), before, "changed: {said}");
    assert!(
        said.contains(&format!(
            "{}: the directory is owned by user nobody (uid 65534)",
            theirs.display()
        )),
        "the refusal names the directory and its owner: {said}"
    );
    assert!(
        !theirs.join("qos").exists(),
        "root created a directory in theirs"
    );

    // A directory root owns, with a link at the audit log: refused, and nothing changes
    // that cannot be audited.
    let ours = dir.path().join("ours");
    std::fs::create_dir(&ours).unwrap();
    std::os::unix::fs::symlink(&victim, ours.join("audit.jsonl")).unwrap();
    let o = qos(&config(&ours), &["apply", "--yes", "--json"]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "written through the link: {said}"
    );
    assert_eq!(
        show_at(&root),
        before,
        "an unaudited change was made: {said}"
    );
    assert!(
        said.contains(&format!(
            "{} is a symbolic link",
            ours.join("audit.jsonl").display()
        )),
        "{said}"
    );
}

/// Files under `dir`, relative, sorted (an empty or missing directory: none).
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let o = std::process::Command::new("find")
        .arg(dir)
        .args(["-mindepth", "1"])
        .output()
        .unwrap();
    let mut v: Vec<String> = stdout(&o)
        .lines()
        .map(|l| l.trim_start_matches(dir.to_str().unwrap()).to_string())
        .collect();
    v.sort();
    v
}

/// A dry run writes nothing, anywhere (issue 49: a dry run against a fixture created
/// /var/lib/rocewatch/audit.jsonl), and `STATE_DIRECTORY` moves the audit log and the
/// snapshots with `quarantine.json`: with HOME and STATE_DIRECTORY at empty temporary
/// directories and a configuration that names neither path, `qos apply` and `qos
/// rollback` without --yes leave both empty and the default state directory as it was;
/// with --yes, the audit log and the snapshot are in $STATE_DIRECTORY.
#[test]
fn a_dry_run_writes_nothing_and_state_directory_moves_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture_copy("mlx5-roce-dual-port", dir.path());
    let (home, state) = (dir.path().join("home"), dir.path().join("state"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&state).unwrap();
    let cfg = dir.path().join("qos.toml");
    std::fs::write(
        &cfg,
        "[[qos.desired]]\ndevices = \"mlx5_0\"\nsettings = { roce_tos = \"24\", mtu = \"1500\" }\n",
    )
    .unwrap();
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("STATE_DIRECTORY", state.to_str().unwrap()),
    ];
    let run = |args: &[&str]| {
        let mut a = vec!["qos"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-c", cfg.to_str().unwrap(), "--sysfs-root"]);
        a.push(root.to_str().unwrap());
        rocewatch(&a, &env)
    };
    let default_log = std::path::Path::new("/var/lib/rocewatch/audit.jsonl");
    let default_before = std::fs::metadata(default_log).ok().map(|m| m.len());
    let before = show_at(&root);

    let o = run(&["apply"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let audit = state.join("audit.jsonl");
    assert!(
        stdout(&o).contains(&format!(
            "dry run: 2 to change, nothing written; run again with --yes to change them (audited in {})",
            audit.display()
        )),
        "{}",
        stdout(&o)
    );
    assert_eq!(show_at(&root), before, "a dry run changed the tree");
    assert_eq!(files_under(&state), Vec::<String>::new(), "{}", stderr(&o));
    assert_eq!(files_under(&home), Vec::<String>::new(), "{}", stderr(&o));
    assert_eq!(
        std::fs::metadata(default_log).ok().map(|m| m.len()),
        default_before,
        "a dry run wrote {}",
        default_log.display()
    );

    // Made: audited and snapshotted in $STATE_DIRECTORY.
    let o = run(&["apply", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(audit_records(&audit).len(), 4, "{}", stderr(&o));
    let snaps = files_under(&state.join("qos"));
    assert_eq!(snaps.len(), 1, "{snaps:?}");

    // The rollback's dry run writes nothing either.
    let written = files_under(&state);
    let o = run(&["rollback"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("would "), "{}", stdout(&o));
    assert_eq!(files_under(&state), written);
    assert_eq!(audit_records(&audit).len(), 4);
    assert_eq!(files_under(&home), Vec::<String>::new());
}
