//! `rocewatch qos show` on fixture trees: configfs RoCE defaults read under the sysfs
//! root, mlx5 ECN knobs, MTUs, and the three kinds of answer (a value, `unsupported`,
//! `unknown` with the reason). The live kernel's configfs and DCB netlink are checked in
//! the soft-RoCE lab (`lab.rs`).

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
    assert!(text.contains("  ecn_np_enabled  unsupported\n"), "{text}");
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
    assert!(
        text.ends_with("1 to change, 3 that cannot be compared, 4 already as desired\n"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&args(true))).unwrap();
    assert_eq!(v["changes"].as_array().unwrap().len(), 1);
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
        [
            ("mlx5_0", "traffic_class"),
            ("mlx5_1", "roce_mode"),
            ("mlx5_1", "traffic_class")
        ]
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
