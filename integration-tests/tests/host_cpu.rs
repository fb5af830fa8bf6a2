//! The host collector through the binary: `system.cpu.time{cpu.mode="steal"}` from the
//! proc tree given with a fixture's sysfs tree (`--procfs-root`), in seconds; without
//! the proc tree the collector is unsupported and no zero is exported.

use crate::support::*;

/// The steal ticks of a `/proc/stat` (8th time of the aggregate `cpu` line).
fn steal_ticks(stat: &str) -> u64 {
    let cpu = stat.lines().find(|l| l.starts_with("cpu ")).unwrap();
    cpu.split_whitespace().nth(8).unwrap().parse().unwrap()
}

#[test]
fn collect_once_shows_the_guests_steal_in_seconds() {
    let tree = root().join("integration-tests/fixtures/sriov-guest");
    let (sys, proc) = (tree.join("sys"), tree.join("proc"));
    let ticks = steal_ticks(&std::fs::read_to_string(proc.join("stat")).unwrap());
    let o = rocewatch(
        &[
            "collect",
            "--once",
            "--format",
            "prometheus",
            "--sysfs-root",
            sys.to_str().unwrap(),
            "--procfs-root",
            proc.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("system_cpu_time_seconds_total{"))
        .unwrap_or_else(|| panic!("no steal series\n{out}\n{}", stderr(&o)));
    assert!(line.contains("cpu_mode=\"steal\""), "{line}");
    let secs: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    // USER_HZ is 100: ticks / 100 seconds.
    assert!((secs - ticks as f64 / 100.0).abs() < 1e-9, "{line}");

    // The fixture's sysfs alone: the live host's CPU is not the tree's, nothing exported.
    let o = rocewatch(
        &[
            "collect",
            "--once",
            "--format",
            "prometheus",
            "--sysfs-root",
            sys.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !stdout(&o).contains("system_cpu_time"),
        "{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    let o = rocewatch(&["plugins", "--sysfs-root", sys.to_str().unwrap()], &[]);
    let host = stdout(&o)
        .lines()
        .find(|l| l.starts_with("host "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("{}\n{}", stdout(&o), stderr(&o)));
    assert!(
        host.contains("unsupported") && host.contains("--procfs-root"),
        "{host}"
    );
}
