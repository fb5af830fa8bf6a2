//! `rocewatch health`'s `link` check as a scheduler runs it, run after run: a copy of the
//! mlx5 tree whose netdevs' `carrier_changes` move between runs, with a state directory
//! of its own (where the readings are kept between runs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// The window the test runs with: long enough for two runs back to back on a loaded
/// machine, short enough to wait out.
const WINDOW_SECS: u64 = 5;

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let h = Host::of("mlx5-roce-dual-port");
        h.carrier("ens1f0np0", 6);
        h.carrier("ens1f1np1", 2);
        h
    }

    /// A copy of the fixture `name`'s tree.
    fn of(name: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("cp")
            .arg("-a")
            .arg(fixture(name))
            .arg(dir.path().join("sys"))
            .status()
            .unwrap();
        assert!(st.success());
        std::fs::write(
            dir.path().join("rocewatch.toml"),
            format!(
                "[remediation]\naudit_log = {:?}\n\n[health]\nflap_window = \"{WINDOW_SECS}s\"\n",
                dir.path().join("state/audit.jsonl")
            ),
        )
        .unwrap();
        Host { dir }
    }

    fn sys(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The netdev's `carrier_changes` (through its `class/net` link, as the kernel's).
    fn carrier(&self, netdev: &str, n: u64) {
        let p = self
            .sys()
            .join("class/net")
            .join(netdev)
            .join("carrier_changes");
        std::fs::write(p, format!("{n}\n")).unwrap();
    }

    /// `health --json`'s exit status, report and standard error.
    fn health(&self) -> (i32, serde_json::Value, String) {
        self.health_with(&[])
    }

    /// `health --json ARGS`'s exit status, report and standard error.
    fn health_with(&self, args: &[&str]) -> (i32, serde_json::Value, String) {
        let config = self.dir.path().join("rocewatch.toml");
        let sys = self.sys();
        let base = [
            "health",
            "--json",
            "--config",
            config.to_str().unwrap(),
            "--sysfs-root",
            sys.to_str().unwrap(),
        ];
        let o = rocewatch(
            &[&base[..], args].concat(),
            &[("STATE_DIRECTORY", self.state().to_str().unwrap())],
        );
        let out = stdout(&o);
        let v = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{e}: {out}\nstderr:\n{}", stderr(&o)));
        (o.status.code().unwrap_or(-1), v, stderr(&o))
    }
}

/// The `link` findings of a report, by device.
fn link_of<'a>(report: &'a serde_json::Value, device: &str) -> &'a serde_json::Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "link" && f["device"] == device)
        .unwrap_or_else(|| panic!("no link finding about {device} in {report}"))
}

fn history(state: &Path) -> serde_json::Value {
    let p = state.join("link-history.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
}

#[test]
fn health_link_flaps_between_runs_are_unhealthy_until_the_window_passes() {
    let h = Host::new();
    // The first run: nothing to compare with, never a drain.
    let (code, r, err) = h.health();
    assert_eq!(code, 0, "{r}\n{err}");
    let f = link_of(&r, "mlx5_0");
    assert_eq!(f["status"], "ok", "{r}\n{err}");
    assert_eq!(
        f["what"],
        "first reading (carrier_changes 6); flaps counted from the next run"
    );
    assert_eq!(f["netdev"], "ens1f0np0");
    let kept = history(&h.state());
    assert_eq!(
        kept["ports"]["mlx5_0/1"]["readings"][0]["carrier_changes"], 6,
        "{kept}"
    );
    // Two flaps (four carrier changes) on mlx5_0's link: unhealthy, named in the line.
    h.carrier("ens1f0np0", 10);
    let (code, r, err) = h.health();
    assert_eq!(code, 1, "{r}\n{err}");
    let f = link_of(&r, "mlx5_0");
    assert_eq!(f["status"], "unhealthy", "{r}\n{err}");
    assert!(
        r["line"]
            .as_str()
            .unwrap()
            .starts_with("mlx5_0/1 ens1f0np0: 4 carrier changes"),
        "{r}\n{err}"
    );
    assert_eq!(link_of(&r, "mlx5_1")["status"], "ok", "{r}\n{err}");
    // Once the flaps are older than the window: healthy again.
    std::thread::sleep(Duration::from_millis(WINDOW_SECS * 1000 + 500));
    let (code, r, err) = h.health();
    assert_eq!(code, 0, "{r}\n{err}");
    assert_eq!(link_of(&r, "mlx5_0")["status"], "ok", "{r}\n{err}");
}

#[test]
fn health_link_a_corrupt_history_is_said_and_started_over() {
    let h = Host::new();
    std::fs::create_dir_all(h.state()).unwrap();
    std::fs::write(h.state().join("link-history.json"), b"{\"version\":").unwrap();
    let (code, r, err) = h.health();
    assert_eq!(code, 0, "{r}\n{err}");
    let said = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "link" && f["status"] == "warning")
        .unwrap_or_else(|| panic!("no warning about the history in {r}"));
    assert!(
        said["what"]
            .as_str()
            .unwrap()
            .contains("link-history.json: not a link history"),
        "{said}"
    );
    // Started over: the file holds this run's readings.
    assert_eq!(history(&h.state())["version"], 1);
}

#[test]
fn health_link_and_optics_off_a_live_host() {
    let h = Host::new();
    let (_, r, err) = h.health();
    let optics: Vec<&serde_json::Value> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "optics")
        .collect();
    assert_eq!(optics.len(), 1, "{r}\n{err}");
    assert_eq!(optics[0]["status"], "skipped", "{r}\n{err}");
}

/// As Slurm's HealthCheckProgram: a flapping link drains the node (and quarantines the
/// host, origin health); once the flaps are older than the window the quarantine ends
/// and the node is resumed.
#[test]
fn health_link_flapping_drains_under_slurm_and_resumes_after_the_window() {
    let h = Host::new();
    let slurm = h.dir.path().join("slurm");
    std::fs::create_dir(&slurm).unwrap();
    let scontrol = crate::health::fake_scontrol(&slurm);
    let args = [
        "--slurm",
        "--slurm-node",
        "n1",
        "--scontrol",
        scontrol.to_str().unwrap(),
    ];
    let state = || std::fs::read_to_string(slurm.join("state")).unwrap();
    let (code, r, err) = h.health_with(&args);
    assert_eq!(code, 0, "{r}\n{err}");
    assert_eq!(state(), "IDLE\n");
    h.carrier("ens1f0np0", 10);
    let (code, r, err) = h.health_with(&args);
    assert_eq!(code, 1, "{r}\n{err}");
    assert_eq!(state(), "IDLE+DRAIN\n", "{r}\n{err}");
    let reason = std::fs::read_to_string(slurm.join("reason")).unwrap();
    assert!(
        reason.starts_with("rocewatch: mlx5_0/1 ens1f0np0: 4 carrier changes"),
        "{reason}"
    );
    assert!(h.state().join("quarantine.json").exists());
    std::thread::sleep(Duration::from_millis(WINDOW_SECS * 1000 + 500));
    let (code, r, err) = h.health_with(&args);
    assert_eq!(code, 0, "{r}\n{err}");
    assert_eq!(state(), "IDLE\n", "{r}\n{err}");
    assert!(!h.state().join("quarantine.json").exists());
}

impl Host {
    /// A proc tree for `--procfs-root` holding `boot_id` (and an uptime for the kernel-log
    /// window).
    fn boot(&self, boot_id: &str) -> PathBuf {
        let proc = self.dir.path().join("proc");
        std::fs::create_dir_all(proc.join("sys/kernel/random")).unwrap();
        std::fs::write(proc.join("uptime"), "600.00 1200.00\n").unwrap();
        std::fs::write(
            proc.join("sys/kernel/random/boot_id"),
            format!("{boot_id}\n"),
        )
        .unwrap();
        proc
    }

    /// The netdev's `ifindex`.
    fn ifindex(&self, netdev: &str, n: u64) {
        let p = self.sys().join("class/net").join(netdev).join("ifindex");
        std::fs::write(p, format!("{n}\n")).unwrap();
    }
}

/// After `scontrol reboot` slurmd runs the health check at its start: the links coming
/// up (and the MTU set, the rings sized) raised carrier_changes, which are no flaps of
/// the link read before the reboot. Nor are those of a netdev recreated under its name.
#[test]
fn health_link_a_reboot_or_a_recreated_netdev_starts_the_history_over() {
    let h = Host::new();
    h.carrier("ens1f0np0", 2);
    h.ifindex("ens1f0np0", 4);
    let proc = h.boot("9b0c2ad4-6f0c-4f55-8d7e-3f1f0f6b6a01");
    let with_proc = ["--procfs-root", proc.to_str().unwrap()];
    let (code, r, err) = h.health_with(&with_proc);
    assert_eq!(code, 0, "{r}\n{err}");
    h.boot("1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5");
    h.carrier("ens1f0np0", 6);
    let (code, r, err) = h.health_with(&with_proc);
    assert_eq!(code, 0, "{r}\n{err}");
    let what = link_of(&r, "mlx5_0")["what"].as_str().unwrap().to_string();
    assert!(
        what.contains("history started over: the host rebooted"),
        "{r}\n{err}"
    );
    // A netdev of the same name, another ifindex: its counters start anew.
    h.ifindex("ens1f0np0", 9);
    h.carrier("ens1f0np0", 10);
    let (code, r, err) = h.health_with(&with_proc);
    assert_eq!(code, 0, "{r}\n{err}");
    let what = link_of(&r, "mlx5_0")["what"].as_str().unwrap().to_string();
    assert!(what.contains("the netdev was recreated"), "{r}\n{err}");
    // The same boot and netdev: flaps count again.
    h.carrier("ens1f0np0", 14);
    let (code, r, err) = h.health_with(&with_proc);
    assert_eq!(code, 1, "{r}\n{err}");
}

/// health run less often than flap_window (Slurm's HealthCheckInterval above it): the
/// flaps between two runs still count, over the span between them.
#[test]
fn health_link_runs_further_apart_than_the_window_still_count_flaps() {
    let h = Host::new();
    let (code, r, err) = h.health();
    assert_eq!(code, 0, "{r}\n{err}");
    std::thread::sleep(Duration::from_millis(WINDOW_SECS * 1000 + 500));
    h.carrier("ens1f0np0", 12);
    let (code, r, err) = h.health();
    assert_eq!(code, 1, "{r}\n{err}");
    let f = link_of(&r, "mlx5_0");
    assert_eq!(f["status"], "unhealthy", "{r}\n{err}");
    assert!(
        f["what"]
            .as_str()
            .unwrap()
            .contains("health runs less often than flap_window"),
        "{r}\n{err}"
    );
}

/// The drain's reason is the same run after run for the same flaps: scontrol is asked to
/// drain once, not at every run (its reason compared first).
#[test]
fn health_link_the_drain_reason_is_stable_between_runs() {
    let h = Host::new();
    let slurm = h.dir.path().join("slurm");
    std::fs::create_dir(&slurm).unwrap();
    let scontrol = crate::health::fake_scontrol(&slurm);
    let args = [
        "--slurm",
        "--slurm-node",
        "n1",
        "--scontrol",
        scontrol.to_str().unwrap(),
    ];
    let (code, r, err) = h.health_with(&args);
    assert_eq!(code, 0, "{r}\n{err}");
    h.carrier("ens1f0np0", 10);
    let (code, r, err) = h.health_with(&args);
    assert_eq!(code, 1, "{r}\n{err}");
    std::thread::sleep(Duration::from_millis(1100));
    let (code, r, err) = h.health_with(&args);
    assert_eq!(code, 1, "{r}\n{err}");
    let log = std::fs::read_to_string(slurm.join("log")).unwrap();
    let drains = log.lines().filter(|l| l.contains("state=drain")).count();
    assert_eq!(drains, 1, "{log}\n{r}\n{err}");
}

/// An InfiniBand port with IPoIB: its flaps are its port counter link_downed's rises, not
/// ib0's carrier changes (IPoIB turns the carrier off on subnet manager events too).
#[test]
fn health_link_an_infiniband_port_is_judged_by_link_downed() {
    let h = Host::of("ib-hca");
    // Its second port is down on purpose (the fixture's SOURCE.md).
    let config = h.dir.path().join("rocewatch.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}ignore_ports = [\"mlx4_0/2\"]\n")).unwrap();
    let downed = h
        .sys()
        .join("class/infiniband/mlx4_0/ports/1/counters/link_downed");
    let set_downed = |n: u64| std::fs::write(&downed, format!("{n}\n")).unwrap();
    h.carrier("ib0", 2);
    let (code, r, err) = h.health();
    assert_eq!(code, 0, "{r}\n{err}");
    assert_eq!(
        link_of(&r, "mlx4_0")["what"],
        "first reading (link_downed 22017); flaps counted from the next run",
        "{r}\n{err}"
    );
    h.carrier("ib0", 10);
    let (code, r, err) = h.health();
    assert_eq!(code, 0, "{r}\n{err}");
    set_downed(22019);
    let (code, r, err) = h.health();
    assert_eq!(code, 1, "{r}\n{err}");
    let what = link_of(&r, "mlx4_0")["what"].as_str().unwrap().to_string();
    assert!(what.contains("(link_downed)"), "{r}\n{err}");
}

/// `health --all` says how old the reading held against is, after the finding; the one
/// line a scheduler drains by does not (it stays the same from run to run).
#[test]
fn health_link_all_says_the_readings_age_after_the_finding() {
    let h = Host::new();
    let (code, r, err) = h.health();
    assert_eq!(code, 0, "{r}\n{err}");
    h.carrier("ens1f0np0", 10);
    let config = h.dir.path().join("rocewatch.toml");
    let sys = h.sys();
    let o = rocewatch(
        &[
            "health",
            "--all",
            "--config",
            config.to_str().unwrap(),
            "--sysfs-root",
            sys.to_str().unwrap(),
        ],
        &[("STATE_DIRECTORY", h.state().to_str().unwrap())],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\nstderr:\n{}", stderr(&o));
    let line = out
        .lines()
        .find(|l| l.starts_with("UNHEALTHY") && l.contains("ens1f0np0"))
        .unwrap_or_else(|| panic!("no unhealthy link line:\n{out}\nstderr:\n{}", stderr(&o)));
    assert!(line.contains("(since the reading "), "{line}");
    let first = out.lines().next().unwrap_or_default();
    assert!(!first.contains("since the reading"), "{out}");
}
