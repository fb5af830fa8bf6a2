//! Host-side SR-IOV VFs are not rails: on a hypervisor (fixture sriov-host: the PF mlx5_0
//! and its VFs mlx5_2, mlx5_3 bound on the host) `env` and `doctor` count the PF as the
//! one rail, and with a fleet topology a rail no port carries is not blamed on the VFs;
//! inside a guest (sriov-guest) the VF is the rail.

use std::path::Path;

use serde_json::Value;

use crate::support::*;

fn json(args: &[&str], root: &Path) -> Value {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--sysfs-root", root.to_str().unwrap()]);
    let o = rocewatch(&all, &[]);
    assert!(
        o.status.code().is_some_and(|c| c <= 1),
        "{all:?}: {:?}\n{}",
        o.status,
        stderr(&o)
    );
    serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{all:?}: {e}\n{}\n{}", stdout(&o), stderr(&o)))
}

fn rails_line(doctor: &Value) -> &str {
    doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "rails" && c["subject"] == "")
        .unwrap_or_else(|| panic!("no rails check: {doctor}"))["evidence"]
        .as_str()
        .unwrap()
}

#[test]
fn sriov_rails_env_on_a_hypervisor_names_the_pf_not_its_vfs() {
    let j = json(&["env", "--json"], &fixture("sriov-host"));
    assert_eq!(j["variables"]["NCCL_IB_HCA"], "=mlx5_0:1", "{j}");
    assert_eq!(j["variables"]["UCX_NET_DEVICES"], "mlx5_0:1", "{j}");
    let ports: Vec<&Value> = j["ports"].as_array().unwrap().iter().collect();
    assert_eq!(ports.len(), 1, "{j}");
    assert_eq!(j["rails"]["ports"][0]["device"], "mlx5_0");
    assert_eq!(j["rails"]["ports"][0]["rail"], 0);
    let vfs: Vec<(&str, &str)> = j["rails"]["host_vfs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["device"].as_str().unwrap(), v["pf"].as_str().unwrap()))
        .collect();
    assert_eq!(
        vfs,
        [("mlx5_2", "0000:3b:00.0"), ("mlx5_3", "0000:3b:00.0")]
    );
    let warnings = j["warnings"].to_string();
    assert!(
        warnings.contains("mlx5_2:1, mlx5_3:1 left out: SR-IOV VFs"),
        "{warnings}"
    );
}

#[test]
fn sriov_rails_env_in_a_guest_names_its_vf() {
    let j = json(&["env", "--json"], &fixture("sriov-guest"));
    assert_eq!(j["variables"]["NCCL_IB_HCA"], "=mlx5_0:1", "{j}");
    assert_eq!(j["rails"]["ports"][0]["rail"], 0, "{j}");
    assert_eq!(j["rails"]["host_vfs"], serde_json::json!([]), "{j}");
}

#[test]
fn sriov_rails_doctor_on_a_hypervisor_has_one_rail() {
    let j = json(
        &["doctor", "--json", "--window", "100ms"],
        &fixture("sriov-host"),
    );
    let line = rails_line(&j);
    assert!(
        line.starts_with(
            "rail 0 mlx5_0:1, not rails (SR-IOV VFs of 0000:3b:00.0 on this host): mlx5_2:1 mlx5_3:1; "
        ),
        "{line}"
    );
    let g = json(
        &["doctor", "--json", "--window", "100ms"],
        &fixture("sriov-guest"),
    );
    assert!(rails_line(&g).starts_with("rail 0 mlx5_0:1; "), "{g}");
}

/// With a topology row for this host that no port carries (the fixture's ports hold no
/// IPv4 address): the PF is the port without its address; the VFs are not named.
#[test]
fn sriov_rails_doctor_with_a_topology_blames_the_pf_not_the_vfs() {
    let dir = tempfile::tempdir().unwrap();
    let topology = dir.path().join("topology.csv");
    std::fs::write(
        &topology,
        "host,rail,addr,tor,tor_port\nhv001,0,10.0.0.1,leaf-rail0,Ethernet1/1\n",
    )
    .unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!("[fleet]\ntopology = {topology:?}\nhost = \"hv001\"\n"),
    )
    .unwrap();
    let j = json(
        &[
            "doctor",
            "--json",
            "--window",
            "100ms",
            "--config",
            cfg.to_str().unwrap(),
        ],
        &fixture("sriov-host"),
    );
    let rail0 = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "rails" && c["subject"] == "rail 0")
        .unwrap_or_else(|| panic!("no rail 0 check: {j}"));
    let evidence = rail0["evidence"].as_str().unwrap();
    assert!(evidence.contains("mlx5_0:1 (ens1f0np0)"), "{evidence}");
    assert!(!evidence.contains("ens1f0v"), "{evidence}");
    let line = rails_line(&j);
    assert!(line.contains("mlx5_0:1 on no rail"), "{line}");
    assert!(!line.contains("mlx5_2:1 on no rail"), "{line}");
}
