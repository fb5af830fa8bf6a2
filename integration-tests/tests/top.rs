//! `rocewatch top` where it has nothing to show: on a fixture tree (not the live /sys, so
//! the resources collector, which reads the live kernel over RDMA netlink, cannot run) and
//! with the collector disabled. One line on standard error naming the cause, exit status
//! 2, nothing on standard output. The attribution itself (QPs per pod/job/unit/command) is
//! checked in the lab.

use crate::support::*;

#[test]
fn top_without_the_resources_collector_says_why_and_exits_2() {
    let root = fixture("mlx5-roce-dual-port");
    let dir = tempfile::tempdir().unwrap();
    let off = dir.path().join("off.toml");
    std::fs::write(&off, "[plugins.builtin.resources]\nenabled = false\n").unwrap();
    let unsupported = "rocewatch top: the resources collector cannot run here: plugin resources (built-in): unsupported: ";
    let disabled = "rocewatch top: the resources collector is disabled ([plugins.builtin.resources] enabled = false)";
    for (args, cause) in [
        (&["top", "--once", "--json"][..], unsupported),
        (&["top", "--once"][..], unsupported),
        (&["top"][..], unsupported),
        (
            &["top", "--once", "--json", "--config", off.to_str().unwrap()][..],
            disabled,
        ),
    ] {
        let mut a = args.to_vec();
        a.extend(["--sysfs-root", root.to_str().unwrap()]);
        let o = rocewatch(&a, &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(stdout(&o), "", "{args:?}: no frame, no JSON");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with(cause), "{args:?}: {err}");
        if cause == unsupported {
            assert!(err.contains("is not the live /sys"), "{err}");
        }
    }
}

#[test]
fn top_json_needs_once() {
    let o = rocewatch(&["top", "--json"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--once"), "{}", stderr(&o));
}
