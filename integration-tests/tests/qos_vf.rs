//! `rocewatch qos` on SR-IOV virtual functions, through the binary on the fixture trees
//! `sriov-guest` (an mlx5 VF 0x101e passed to a QEMU guest, no `physfn`) and `sriov-host`
//! (a PF with VFs on the host): `show` marks what the physical function owns, `plan` and
//! `apply` refuse it (exit 1, nothing written) and say what to set on the hypervisor; what
//! the VF sets itself (its RoCE ToS) still applies; on the hypervisor the PF's own entry
//! covers its VFs (the PF's and the VFs' own changes apply), and an entry of VFs only is
//! refused with one line per PF.

use serde_json::Value;

use crate::qos::{fixture_copy, show_at};
use crate::support::*;

const PF_OWNED: &str = "owned by the physical function (set on the hypervisor)";

fn port<'a>(v: &'a Value, dev: &str) -> &'a Value {
    v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["device"] == dev)
        .unwrap_or_else(|| panic!("no {dev} in {v}"))
}

/// `rocewatch qos ARGS --config CFG --sysfs-root ROOT`, `cfg` holding `desired` (TOML
/// lines of `[[qos.desired]]`) and the state paths under `dir`.
fn qos_with(
    dir: &std::path::Path,
    root: &std::path::Path,
    desired: &str,
    args: &[&str],
) -> std::process::Output {
    let cfg = dir.join("qos.toml");
    let (audit, snaps) = (dir.join("audit.jsonl"), dir.join("snapshots"));
    std::fs::write(
        &cfg,
        format!(
            "[remediation]\naudit_log = {audit:?}\n[qos]\nsnapshot_dir = {snaps:?}\n[[qos.desired]]\n{desired}\n"
        ),
    )
    .unwrap();
    let mut a = vec!["qos"];
    a.extend_from_slice(args);
    a.extend_from_slice(&[
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        root.to_str().unwrap(),
    ]);
    rocewatch(&a, &[])
}

#[test]
fn qos_show_on_a_vf_says_the_physical_function_owns_pfc_trust_and_ecn() {
    let v = show_at(&fixture("sriov-guest"));
    let p = port(&v, "mlx5_0");
    assert_eq!(p["sriov"]["role"], "vf", "{p}");
    // Inside the guest the PF is not visible.
    assert_eq!(p["sriov"]["pf"], Value::Null, "{p}");
    let owned: Vec<&str> = p["sriov"]["pf_owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for k in ["pfc_enabled", "trust", "dscp_map", "ecn_np_enabled"] {
        assert!(owned.contains(&k), "{k} not in {owned:?}");
        assert_eq!(p["settings"][k]["value"], PF_OWNED, "{k}: {p}");
    }
    // The VF's own settings are not the PF's.
    for k in ["roce_tos", "mtu"] {
        assert!(!owned.contains(&k), "{k} in {owned:?}");
    }
    let root = fixture("sriov-guest");
    let o = rocewatch(
        &["qos", "show", "--sysfs-root", root.to_str().unwrap()],
        &[],
    );
    let text = stdout(&o);
    assert!(
        text.starts_with(
            "mlx5_0/1 (enp1s0)  virtual function (its physical function is on the hypervisor"
        ),
        "{text}{}",
        stderr(&o)
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("  pfc_enabled ") && l.ends_with(&format!(" {PF_OWNED}"))),
        "{text}"
    );

    // On the host: the VF names its PF and index; the PF has no `sriov` here.
    let v = show_at(&fixture("sriov-host"));
    let vf = port(&v, "mlx5_2");
    assert_eq!(
        (&vf["sriov"]["pf"], &vf["sriov"]["index"]),
        (&Value::from("0000:3b:00.0"), &Value::from(0)),
        "{vf}"
    );
    let pf = port(&v, "mlx5_0");
    assert!(pf.get("sriov").is_none(), "{pf}");
    assert_ne!(pf["settings"]["pfc_enabled"]["value"], PF_OWNED, "{pf}");
}

#[test]
fn qos_plan_on_a_guest_vf_refuses_pfc_and_trust_and_says_what_to_set_on_the_hypervisor() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("sriov-guest");
    let desired = "settings = { pfc_enabled = \"3\", trust = \"dscp\" }";
    let o = qos_with(dir.path(), &root, desired, &["plan"]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}{}", stderr(&o));
    for line in [
        format!("refused mlx5_0/1 (enp1s0)  pfc_enabled -> 3: {PF_OWNED}"),
        format!("refused mlx5_0/1 (enp1s0)  trust -> dscp: {PF_OWNED}"),
        "mlx5_0/1 (enp1s0) is a virtual function: pfc_enabled, trust are owned by the physical function".into(),
        "  PF: the physical function's netdev on the hypervisor (the one whose `ip link show` lists a vf with this VF's MAC, 52:54:00:c1:2b:00)".into(),
        "  mlnx_qos -i PF --pfc 0,0,0,1,0,0,0,0 --trust dscp".into(),
        "  ip link set dev PF vf N vlan VLAN qos 3".into(),
        "    settings = { pfc_enabled = \"3\", trust = \"dscp\" }".into(),
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(&line)),
            "no line {line:?} in:\n{text}"
        );
    }
    assert!(
        text.contains("0 to change, 0 that cannot be compared, 0 already as desired, 2 refused"),
        "{text}"
    );
    let o = qos_with(dir.path(), &root, desired, &["plan", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let refused: Vec<&str> = v["pf_owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["setting"].as_str().unwrap())
        .collect();
    assert_eq!(refused, ["pfc_enabled", "trust"], "{v}");
    assert_eq!(v["blocked"].as_array().unwrap().len(), 0, "{v}");
    let steps = &v["on_hypervisor"][0];
    assert_eq!(steps["vfs"][0]["device"], "mlx5_0", "{v}");
    assert_eq!(
        steps["commands"][1], "ip link set dev PF vf N vlan VLAN qos 3",
        "{v}"
    );
}

/// A writable copy of the guest tree whose VF has its configfs `rdma_cm` directory (as
/// `mkdir` makes it: the layout of the mlx5-roce-dual-port fixture,
/// drivers/infiniband/core/cma_configfs.c).
fn guest_with_configfs(dir: &std::path::Path) -> std::path::PathBuf {
    let root = fixture_copy("sriov-guest", dir);
    let from = fixture("mlx5-roce-dual-port").join("kernel/config/rdma_cm/mlx5_0/ports/1");
    let to = root.join("kernel/config/rdma_cm/mlx5_0/ports/1");
    std::fs::create_dir_all(&to).unwrap();
    for f in ["default_roce_mode", "default_roce_tos"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    root
}

#[test]
fn qos_apply_on_a_guest_vf_refuses_the_pf_settings_and_writes_nothing_but_sets_its_own_tos() {
    let dir = tempfile::tempdir().unwrap();
    let root = guest_with_configfs(dir.path());
    let tos = root.join("kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos");
    let before = std::fs::read_to_string(&tos).unwrap();
    assert_ne!(before.trim(), "24");
    let desired = "settings = { pfc_enabled = \"3\", roce_tos = \"24\" }";
    for args in [&["apply", "--yes"][..], &["apply"][..]] {
        let o = qos_with(dir.path(), &root, desired, args);
        let out = format!("{}{}", stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(1), "{args:?}: {out}");
        assert!(
            out.contains("mlx5_0/1 (enp1s0)") && out.contains("owned by the physical function"),
            "{out}"
        );
        assert!(out.contains("nothing written"), "{out}");
        assert!(
            out.contains("mlnx_qos -i PF --pfc 0,0,0,1,0,0,0,0"),
            "{out}"
        );
        assert_eq!(std::fs::read_to_string(&tos).unwrap(), before, "{out}");
        assert!(!dir.path().join("snapshots").exists(), "{out}");
        assert!(!dir.path().join("audit.jsonl").exists(), "{out}");
    }
    // What the VF sets itself still applies.
    let o = qos_with(
        dir.path(),
        &root,
        "settings = { roce_tos = \"24\" }",
        &["apply", "--yes"],
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(std::fs::read_to_string(&tos).unwrap().trim(), "24");
}

#[test]
fn qos_plan_on_a_hypervisor_takes_a_vf_s_pf_settings_as_covered_by_the_pf_in_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("sriov-host");
    let o = qos_with(
        dir.path(),
        &root,
        "settings = { pfc_enabled = \"3\" }",
        &["plan"],
    );
    let text = stdout(&o);
    // The PF's DCB cannot be compared (read from the live kernel only): exit 1 for it.
    assert_eq!(o.status.code(), Some(1), "{text}{}", stderr(&o));
    assert!(
        text.lines().any(|l| l
            .starts_with("cannot  mlx5_0/1 (ens1f0np0)  pfc_enabled -> 3: unknown: DCB is read over netlink from the live kernel")),
        "{text}"
    );
    // Its VFs on the host: the PF's own entry sets it for them; nothing refused, no advice.
    for vf in ["mlx5_2/1 (ens1f0v0)", "mlx5_3/1 (ens1f0v1)"] {
        assert!(
            text.lines().any(|l| l
                == format!("covered {vf}  pfc_enabled -> 3: covered by the PF ens1f0np0 (set there for every VF of it)")),
            "{text}"
        );
    }
    assert!(!text.contains("refused"), "{text}");
    assert!(!text.contains("mlnx_qos"), "{text}");
    assert!(
        text.contains("1 that cannot be compared, 0 already as desired, 2 covered by the PF"),
        "{text}"
    );
}

/// A writable copy of the hypervisor's tree with configfs `rdma_cm` directories for the PF
/// (mlx5_0) and its VFs on the host (mlx5_2, mlx5_3), as `mkdir` makes them.
fn host_with_configfs(dir: &std::path::Path) -> std::path::PathBuf {
    let root = fixture_copy("sriov-host", dir);
    let from = fixture("mlx5-roce-dual-port").join("kernel/config/rdma_cm/mlx5_0/ports/1");
    for dev in ["mlx5_0", "mlx5_2", "mlx5_3"] {
        let to = root.join(format!("kernel/config/rdma_cm/{dev}/ports/1"));
        std::fs::create_dir_all(&to).unwrap();
        for f in ["default_roce_mode", "default_roce_tos"] {
            std::fs::copy(from.join(f), to.join(f)).unwrap();
        }
    }
    root
}

#[test]
fn qos_apply_on_a_hypervisor_applies_the_pf_and_its_vfs_changes() {
    let dir = tempfile::tempdir().unwrap();
    let root = host_with_configfs(dir.path());
    let tos = |dev: &str| {
        let f = root.join(format!(
            "kernel/config/rdma_cm/{dev}/ports/1/default_roce_tos"
        ));
        std::fs::read_to_string(f).unwrap().trim().to_string()
    };
    assert_ne!(tos("mlx5_0"), "24");
    let desired = "devices = \"mlx5_*\"\nsettings = { pfc_enabled = \"3\", roce_tos = \"24\" }";
    let o = qos_with(dir.path(), &root, desired, &["apply", "--yes"]);
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(!out.contains("refused"), "{out}");
    assert!(
        out.contains(
            "covered     mlx5_2/1 (ens1f0v0)  pfc_enabled -> 3: covered by the PF ens1f0np0"
        ),
        "{out}"
    );
    // The PF's and the VFs' own changes were made.
    for dev in ["mlx5_0", "mlx5_2", "mlx5_3"] {
        assert_eq!(tos(dev), "24", "{dev}: {out}");
    }
}

#[test]
fn qos_apply_of_vfs_only_on_a_hypervisor_refuses_and_says_to_set_it_on_the_pf_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = host_with_configfs(dir.path());
    let tos = root.join("kernel/config/rdma_cm/mlx5_2/ports/1/default_roce_tos");
    let before = std::fs::read_to_string(&tos).unwrap();
    let desired = "devices = \"mlx5_[23]\"\nsettings = { pfc_enabled = \"3\", roce_tos = \"24\" }";
    for args in [&["plan"][..], &["apply", "--yes"][..]] {
        let o = qos_with(dir.path(), &root, desired, args);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {text}{}", stderr(&o));
        for vf in ["mlx5_2/1 (ens1f0v0)", "mlx5_3/1 (ens1f0v1)"] {
            assert!(
                text.lines().any(|l| l.starts_with(&format!(
                    "refused {vf}  pfc_enabled -> 3: owned by the physical function: set it on the PF ens1f0np0 (this host)"
                ))),
                "{text}"
            );
        }
        // One line per PF, not per VF; the VLAN priority per VF.
        let mlnx: Vec<&str> = text.lines().filter(|l| l.contains("mlnx_qos")).collect();
        assert_eq!(
            mlnx,
            ["  mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0,0"],
            "{text}"
        );
        for n in [0, 1] {
            assert!(
                text.lines()
                    .any(|l| l == format!("  ip link set dev ens1f0np0 vf {n} vlan VLAN qos 3")),
                "{text}"
            );
        }
        assert!(
            text.contains("set it on the PF ens1f0np0 (this host)"),
            "{text}"
        );
        assert!(text.contains("    netdevs = \"ens1f0np0\""), "{text}");
        assert!(!text.contains("hypervisor"), "{text}");
    }
    assert_eq!(std::fs::read_to_string(&tos).unwrap(), before);
    assert!(!dir.path().join("snapshots").exists());
    assert!(!dir.path().join("audit.jsonl").exists());
}

#[test]
fn the_vlan_priority_is_advised_only_for_pfc_or_trust_and_only_where_the_pf_tags() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("sriov-guest");
    let o = qos_with(
        dir.path(),
        &root,
        "settings = { ecn_np_enabled = \"3\" }",
        &["plan"],
    );
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}{}", stderr(&o));
    assert!(
        text.contains("refused mlx5_0/1 (enp1s0)  ecn_np_enabled -> 3"),
        "{text}"
    );
    assert!(!text.contains("ip link set"), "{text}");
    assert!(!text.contains("VLAN"), "{text}");
    let o = qos_with(
        dir.path(),
        &root,
        "settings = { pfc_enabled = \"3\" }",
        &["plan"],
    );
    let text = stdout(&o);
    assert!(
        text.contains("  ip link set dev PF vf N vlan VLAN qos 3"),
        "{text}"
    );
    assert!(
        text.contains("only where the PF inserts a VLAN for the VF: if the VF has no VLAN, the guest must tag its RoCE traffic with priority 3 (`rocewatch doctor` on the hypervisor, its sriov check, says which)"),
        "{text}"
    );
}

/// `qos show` on a VF prints the fingerprint the agent exports (`rdma.qos.fingerprint`):
/// the settings as read, before they are marked the PF's.
#[test]
fn qos_show_on_a_vf_prints_the_agent_s_fingerprint() {
    use crate::prometheus::get;
    use std::time::{Duration, Instant};
    let root = fixture("sriov-guest");
    let shown = show_at(&root);
    let want = shown["fingerprint"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(&cfg, "[qos]\ninterval = \"300ms\"\n").unwrap();
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
    let deadline = Instant::now() + Duration::from_secs(20);
    let line = loop {
        let text = get(&url, None).map(|(_, b)| b).unwrap_or_default();
        if let Some(l) = text
            .lines()
            .find(|l| l.starts_with("rdma_qos_fingerprint{"))
        {
            break l.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no fingerprint exported:\n{text}\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        line.contains(&format!("rdma_qos_fingerprint=\"{want}\"")),
        "qos show says {want}, the agent {line}"
    );
}
