//! `rocewatch top` on a fixture tree of a host without RDMA netlink (this one): a clear
//! error on standard error naming the cause, exit status 2, nothing on standard output.
//! The attribution itself (QPs per pod/job/unit/command) is checked in the lab.

use crate::support::*;

#[test]
fn top_without_rdma_netlink_says_why_and_exits_2() {
    let root = fixture("mlx5-roce-dual-port");
    for args in [
        &["top", "--once", "--json"][..],
        &["top", "--once"][..],
        &["top"][..],
    ] {
        let mut a = args.to_vec();
        a.extend(["--sysfs-root", root.to_str().unwrap()]);
        let o = rocewatch(&a, &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(stdout(&o), "", "{args:?}: no frame, no JSON");
        // One line that names the collector and why it gives nothing here: not loaded
        // (a build without it), or loaded and unsupported (no RDMA netlink).
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("rocewatch top: "), "{err}");
        assert!(
            err.contains("no resources collector is loaded")
                || err.contains("the resources collector cannot run here"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn top_json_needs_once() {
    let o = rocewatch(&["top", "--json"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--once"), "{}", stderr(&o));
}
