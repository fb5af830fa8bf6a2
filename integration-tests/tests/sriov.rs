//! `discover` on SR-IOV trees: the PF→VF tree on a hypervisor (fixture sriov-host), a VF
//! without its PF inside a guest (sriov-guest), nothing said on a host without SR-IOV.

use serde_json::Value;

use crate::support::*;

fn discover_json(root: &std::path::Path) -> Value {
    let o = rocewatch(
        &["discover", "--sysfs-root", root.to_str().unwrap(), "--json"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn discover_text(root: &std::path::Path) -> String {
    let o = rocewatch(&["discover", "--sysfs-root", root.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

fn device<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name} in {doc}"))
}

#[test]
fn sriov_json_on_a_hypervisor_gives_the_pf_its_vfs_and_each_vf_its_pf() {
    let d = discover_json(&fixture("sriov-host"));
    let pf = &device(&d, "mlx5_0")["sriov"];
    assert_eq!(pf["role"], "pf", "{pf}");
    assert_eq!(pf["totalvfs"], 8);
    assert_eq!(pf["numvfs"], 4);
    assert_eq!(pf["vf_device"], "0x101e");
    assert_eq!(
        pf["vfs"],
        serde_json::json!([
            "0000:3b:00.2",
            "0000:3b:00.3",
            "0000:3b:00.4",
            "0000:3b:00.5"
        ])
    );
    // The VFs handed to VMs are listed under their PF, with no RDMA device on the host.
    let vm = &pf["vf_functions"][2];
    assert_eq!(vm["pci"], "0000:3b:00.4");
    assert_eq!(vm["driver"], "vfio-pci");
    assert_eq!(vm["assigned_to_vm"], true);
    assert_eq!(vm["rdma_devices"], serde_json::json!([]));
    assert_eq!(
        pf["vf_functions"][0]["rdma_devices"],
        serde_json::json!(["mlx5_2"])
    );
    let vf = &device(&d, "mlx5_3")["sriov"];
    assert_eq!(
        *vf,
        serde_json::json!({"role": "vf", "pf": "0000:3b:00.0", "index": 1})
    );
}

#[test]
fn sriov_text_on_a_hypervisor_is_the_pf_to_vf_tree() {
    let t = discover_text(&fixture("sriov-host"));
    let tree = &t[t
        .find("\nSR-IOV\n")
        .unwrap_or_else(|| panic!("no SR-IOV section:\n{t}"))..];
    let lines: Vec<&str> = tree.lines().skip(2).collect();
    assert!(
        lines[0].starts_with("mlx5_0 0000:3b:00.0 ens1f0np0: PF, 4 of 8 VFs"),
        "{tree}"
    );
    let vf = |i: usize| -> Vec<&str> { lines[1 + i].split_whitespace().collect() };
    assert_eq!(
        vf(0),
        ["vf", "0", "0000:3b:00.2", "mlx5_core", "ens1f0v0", "mlx5_2"]
    );
    assert_eq!(vf(3)[..4], ["vf", "3", "0000:3b:00.5", "vfio-pci"]);
    assert!(lines[4].ends_with("(vfio-pci: assigned to a VM)"), "{tree}");
    // mlx5_2 and mlx5_3 are shown under their PF, not again on their own.
    assert_eq!(lines.len(), 5, "{tree}");
}

#[test]
fn sriov_in_a_guest_is_a_vf_whose_pf_is_null() {
    let root = fixture("sriov-guest");
    let d = discover_json(&root);
    let vf = &device(&d, "mlx5_0")["sriov"];
    assert_eq!(vf["role"], "vf", "{vf}");
    assert!(vf["pf"].is_null(), "{vf}");
    assert_eq!(vf["model"], "ConnectX Family mlx5Gen VF");
    let t = discover_text(&root);
    assert!(
        t.contains(
            "mlx5_0 0000:01:00.0 enp1s0: VF (ConnectX Family mlx5Gen VF), its PF not visible here"
        ),
        "{t}"
    );
}

#[test]
fn sriov_is_not_said_on_a_host_without_it() {
    let root = fixture("mlx5-roce-dual-port");
    let d = discover_json(&root);
    for dev in d["devices"].as_array().unwrap() {
        assert!(dev.get("sriov").is_none(), "{dev}");
    }
    assert!(!discover_text(&root).contains("SR-IOV"));
}

#[test]
fn sriov_an_unreadable_file_costs_that_role_only_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let copy = std::process::Command::new("cp")
        .args(["-a", fixture("sriov-host").to_str().unwrap()])
        .arg(dir.path().join("sys"))
        .status()
        .unwrap();
    assert!(copy.success());
    let root = dir.path().join("sys");
    let pf = root.join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
    std::fs::write(pf.join("sriov_numvfs"), "four\n").unwrap();
    let o = rocewatch(
        &["discover", "--sysfs-root", root.to_str().unwrap(), "--json"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("mlx5_0") && err.contains("sriov_numvfs"),
        "{err}"
    );
    let d: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(device(&d, "mlx5_0").get("sriov").is_none());
    assert_eq!(device(&d, "mlx5_2")["sriov"]["role"], "vf");
}
