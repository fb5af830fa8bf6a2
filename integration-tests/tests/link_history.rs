//! The link history through the binary on a real kernel: a veth pair read by the
//! ethtool plugin with the live `/sys` as its root, so the carrier files come from sysfs
//! and the link state, FEC and module requests go to this kernel's ethtool netlink. A
//! veth has a carrier but no FEC, no down reason while up, and no module: those
//! requests answer EOPNOTSUPP, which is no series and no error (what a NIC without
//! them gives too). The FEC and module decoding itself is tested against replies laid
//! out as the kernel's (rocewatch-netlink, counters-ethtool's tests): no NIC here has them.

use crate::ethtool::Veth;
use crate::support::*;

#[test]
fn a_veth_has_carrier_counts_and_no_fec_or_module_series_and_no_error() {
    if !std::path::Path::new("/sys/class/net").is_dir() {
        eprintln!("SKIPPED: no /sys/class/net");
        return;
    }
    let veth = Veth::create();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rw.toml");
    std::fs::write(
        &cfg,
        format!(
            "[plugins.builtin.counters-ethtool.options]\ninterfaces = [\"{}\"]\nraw_include = \"^peer_ifindex$\"\n",
            veth.0
        ),
    )
    .unwrap();
    let o = rocewatch(
        &[
            "collect",
            "--once",
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            "/sys",
        ],
        &[],
    );
    assert!(o.status.success(), "stderr:\n{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let samples = v["samples"].as_array().unwrap();
    let mine: Vec<&serde_json::Value> = samples
        .iter()
        .filter(|s| s["attributes"]["network.interface.name"] == veth.0.as_str())
        .collect();
    let named = |n: &str| mine.iter().filter(|s| s["name"] == n).count();
    let changes: u64 =
        std::fs::read_to_string(format!("/sys/class/net/{}/carrier_changes", veth.0))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    let got = mine
        .iter()
        .find(|s| s["name"] == "rdma.link.carrier_changes")
        .unwrap_or_else(|| panic!("no carrier_changes sample; stderr:\n{}", stderr(&o)));
    // Read before or after the agent's read: the veth is idle, so the same.
    assert_eq!(got["value"], changes, "{got}");
    assert_eq!(named("rdma.link.carrier_up_events"), 1);
    for absent in [
        "rdma.link.fec.active",
        "rdma.link.fec.corrected_blocks",
        "rdma.link.down_reason",
        "rdma.optics.info",
    ] {
        assert_eq!(
            named(absent),
            0,
            "{absent} on a veth; stderr:\n{}",
            stderr(&o)
        );
    }
    let errors = v["errors"].to_string();
    assert!(
        !errors.contains(&veth.0),
        "errors about the veth: {errors}\nstderr:\n{}",
        stderr(&o)
    );
}
