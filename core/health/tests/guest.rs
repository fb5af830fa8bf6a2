//! `health` inside a virtual machine judges what the guest can see. A passed-through
//! SR-IOV VF (integration-tests/fixtures/sriov-guest: an mlx5 VF 0x101e in a QEMU guest,
//! see its SOURCE.md) has no PCIe link of its own to read (a VF's Link Status register
//! is reserved: the PF's link is the VF's) and no DCB operations (mlx5 attaches them to
//! the eswitch manager only): neither makes the guest unhealthy; its port, GIDs and MTU
//! are judged as anywhere.

mod common;

use std::path::{Path, PathBuf};

use rocewatch_health::{run, HealthConfig, Options, Report, Status, Verdict};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration-tests/fixtures/sriov-guest")
}

fn health(tree: &Path) -> Report {
    let root = tree.join("sys");
    let opts = Options {
        sysfs_root: root.clone(),
        live: false,
        kernel_log: serde_json::json!({}),
        devices: Default::default(),
        state_dir: common::fresh_state_dir(),
        procfs_root: tree.join("proc"),
        rail_rows: Ok(None),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(&opts, &HealthConfig::default()))
}

#[test]
fn a_guest_with_a_vf_is_judged_on_what_it_can_see() {
    // The fixture's VF has only its link-local GID; give it the IPv4 one a guest with an
    // address has (slot 1, RoCE v2, on enp1s0) in a copy.
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture().join("sys"))
        .arg(fixture().join("proc"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "cp -a sriov-guest");
    let port = dir.path().join("sys/class/infiniband/mlx5_0/ports/1");
    let w = |rel: &str, text: &str| std::fs::write(port.join(rel), text).unwrap();
    w("gids/1", "0000:0000:0000:0000:0000:ffff:c0a8:010a\n");
    w("gid_attrs/types/1", "RoCE v2\n");
    w("gid_attrs/ndevs/1", "enp1s0\n");

    let r = health(dir.path());
    let dump = serde_json::to_string_pretty(&r).unwrap();
    assert_eq!(r.verdict, Verdict::Healthy, "{dump}");
    let pcie: Vec<_> = r.findings.iter().filter(|f| f.check == "pcie").collect();
    assert!(
        !pcie.is_empty() && pcie.iter().all(|f| f.status == Status::Skipped),
        "a VF's PCIe link is the PF's, not judged here: {dump}"
    );
    for check in ["ports", "gid", "mtu"] {
        assert!(
            r.findings
                .iter()
                .any(|f| f.check == check && f.status == Status::Ok),
            "the VF's {check} is judged: {dump}"
        );
    }
}
