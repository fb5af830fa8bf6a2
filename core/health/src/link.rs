//! The `link` check: a link that flaps. One run of `health` cannot watch a link go down
//! and up, so each checked port's flap counters are kept between runs
//! ([`crate::history`]) and the increase since the oldest reading within `[health]
//! flap_window` is judged by the rule `doctor` uses too
//! (`rocewatch_sysfs::verdict::judge_flaps`): at `max_flaps` the link is unhealthy, a
//! flap short of it warns.
//!
//! The counters: the netdev's `carrier_changes` (`class/net/IF/carrier_changes`, under
//! any sysfs root) and, on the live host, mlx5's `link_down_events_phy` (the driver's
//! statistics, `ETHTOOL_GSTATS`), which the verdict prefers: it does not count an
//! administrator's `ip link set down/up`. An InfiniBand port is judged by its port
//! counter `link_downed` (`ports/N/counters/link_downed`, drivers/infiniband/core/
//! sysfs.c: the PMA's LinkDownedCounter, one per down) and never by its IPoIB netdev's
//! carrier, which IPoIB turns off on a subnet manager's events too
//! (`ipoib_ib_dev_down()` calls `netif_carrier_off()`).
//!
//! The readings are of one boot and one netdev: the boot id
//! (`PROC/sys/kernel/random/boot_id`) and the netdev's `ifindex` are kept with them, and
//! another one starts the port's history over ([`crate::history`]).

use std::path::Path;
use std::time::Duration;

use rocewatch_sysfs::verdict::{judge_flaps, FlapKind};

use super::deadline::{Board, Part};
use super::finding::{Finding, Status};
use super::history::{Baseline, HistoryFile, ReadOn, Reading, SPAN_FACTOR};
use crate::config::CheckName;

/// mlx5's physical-layer link down counter (`ethtool -S`, en_stats.c).
pub const PHY_DOWN: &str = "link_down_events_phy";

/// An InfiniBand port's link down counter (`ports/N/counters/link_downed`).
pub const LINK_DOWNED: &str = "link_downed";

/// A port the `link` check reads.
#[derive(Debug, Clone)]
pub struct LinkPort {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// An InfiniBand port (`link_layer`): judged by `link_downed`, not its netdev.
    pub infiniband: bool,
    /// ACTIVE and LinkUp as the inventory read it (a module's read is advisory to a link
    /// that works: the `optics` check).
    pub link_up: bool,
}

impl LinkPort {
    fn key(&self) -> String {
        format!("{}/{}", self.device, self.port)
    }

    fn finding(&self, status: Status, what: String) -> Finding {
        Finding::at(
            "link",
            status,
            &self.device,
            Some(self.port),
            self.netdev.as_deref(),
            what,
        )
    }
}

/// What one run of the check reads and where it keeps its readings.
pub struct LinkRun<'a> {
    pub sysfs_root: &'a Path,
    pub state_dir: &'a Path,
    pub window: Duration,
    pub max_flaps: u64,
    /// Now, in milliseconds since the epoch.
    pub now_ms: u64,
    /// This boot's `boot_id`: `None` where the proc tree has none (a fixture's).
    pub boot_id: Option<String>,
    pub board: &'a Board,
}

/// A counter of the sysfs tree: `Ok(None)` where it is absent (or `N/A`, no PMA).
fn read_count(run: &LinkRun, p: &LinkPort, path: &Path) -> Result<Option<u64>, Finding> {
    let part = Part::Check(CheckName::Link);
    run.board.reading(part, "link", path.display().to_string());
    match rocewatch_sysfs::read::read_attr(path) {
        Ok(rocewatch_sysfs::Attr::Value(v)) => match v.trim().parse::<u64>() {
            Ok(n) => Ok(Some(n)),
            Err(_) if v.starts_with("N/A") => Ok(None),
            Err(_) => {
                let what = format!("{}: {v:?} is not a count", path.display());
                Err(p.finding(Status::Unknown, what))
            }
        },
        Ok(rocewatch_sysfs::Attr::Absent) => Ok(None),
        Err(e) => Err(p.finding(Status::Unknown, e.to_string())),
    }
}

/// The netdev's `ifindex`, where it reads as one.
fn ifindex(run: &LinkRun, nd: &str) -> Option<u64> {
    let path = run.sysfs_root.join("class/net").join(nd).join("ifindex");
    match rocewatch_sysfs::read::read_attr(&path) {
        Ok(rocewatch_sysfs::Attr::Value(v)) => v.trim().parse().ok(),
        _ => None,
    }
}

/// An InfiniBand port's reading: its `link_downed`.
fn read_ib_port(run: &LinkRun, p: &LinkPort) -> Result<Reading, Finding> {
    let path = run
        .sysfs_root
        .join("class/infiniband")
        .join(&p.device)
        .join("ports")
        .join(p.port.to_string())
        .join("counters/link_downed");
    match read_count(run, p, &path)? {
        Some(n) => Ok(Reading {
            at_unix_ms: run.now_ms,
            carrier_changes: None,
            link_down_events_phy: None,
            link_downed: Some(n),
        }),
        None => Err(p.finding(
            Status::Skipped,
            format!("no {}: flaps cannot be counted", path.display()),
        )),
    }
}

/// A netdev's `link_down_events_phy`: `Ok(None)` where the driver has none.
pub type PhyReader<'a> = dyn FnMut(&str) -> Result<Option<u64>, String> + 'a;

/// What one port reads now, or the finding that says why it cannot be judged.
fn read_port(
    run: &LinkRun,
    p: &LinkPort,
    phy: &mut PhyReader,
) -> Result<(Reading, Option<String>), Finding> {
    if p.infiniband {
        return read_ib_port(run, p).map(|r| (r, None));
    }
    let Some(nd) = p.netdev.as_deref() else {
        return Err(p.finding(
            Status::Skipped,
            "no netdev, whose carrier_changes flaps are counted on (a RoCE port without one: ports says so)"
                .into(),
        ));
    };
    let path = run
        .sysfs_root
        .join("class/net")
        .join(nd)
        .join("carrier_changes");
    let carrier = read_count(run, p, &path)?;
    let part = Part::Check(CheckName::Link);
    run.board
        .reading(part, "link", format!("{nd}'s {PHY_DOWN} (ETHTOOL_GSTATS)"));
    let (phy_down, note) = match phy(nd) {
        Ok(v) => (v, None),
        Err(e) => (None, Some(format!("{PHY_DOWN} unreadable: {e}"))),
    };
    if carrier.is_none() && phy_down.is_none() {
        let what = format!(
            "no {} and no {PHY_DOWN}: flaps cannot be counted",
            path.display()
        );
        return Err(p.finding(
            Status::Skipped,
            note.map_or(what.clone(), |n| format!("{what} ({n})")),
        ));
    }
    let reading = Reading {
        at_unix_ms: run.now_ms,
        carrier_changes: carrier,
        link_down_events_phy: phy_down,
        link_downed: None,
    };
    Ok((reading, note))
}

/// The counters as read, in words.
fn counters(r: &Reading) -> String {
    let mut parts = Vec::new();
    if let Some(c) = r.carrier_changes {
        parts.push(format!("carrier_changes {c}"));
    }
    if let Some(d) = r.link_down_events_phy {
        parts.push(format!("{PHY_DOWN} {d}"));
    }
    if let Some(d) = r.link_downed {
        parts.push(format!("{LINK_DOWNED} {d}"));
    }
    parts.join(", ")
}

/// Each port's finding: its flaps since the oldest reading within the window, or why
/// they are counted from the next run only. A history that cannot be read or kept is a
/// warning of its own: never a drain.
pub fn link(run: &LinkRun, ports: &[LinkPort], phy: &mut PhyReader) -> Vec<Finding> {
    let file = HistoryFile::in_dir(run.state_dir);
    let part = Part::Check(CheckName::Link);
    let mut out = Vec::new();
    let mut read = Vec::new();
    for p in ports {
        match read_port(run, p, phy) {
            Ok(r) => read.push((p, r)),
            Err(f) => out.push(f),
        }
    }
    if read.is_empty() {
        return out;
    }
    run.board
        .reading(part, "link", file.path().display().to_string());
    let mut history = file.load().unwrap_or_else(|e| {
        out.push(Finding::host(
            "link",
            Status::Warning,
            format!("{e}: started over (flaps counted from the next run)"),
        ));
        Default::default()
    });
    history.retain_ports(&ports.iter().map(LinkPort::key).collect::<Vec<_>>());
    for (p, (now, note)) in read {
        let on = ReadOn {
            netdev: p.netdev.as_deref(),
            ifindex: p.netdev.as_deref().and_then(|nd| ifindex(run, nd)),
            boot_id: run.boot_id.as_deref(),
        };
        let base = history.record(&p.key(), on, now, run.window);
        let mut f = port_finding(run, p, base, &now);
        if let Some(n) = note {
            f.what = format!("{} ({n})", f.what);
        }
        out.push(f);
    }
    if let Err(e) = file.store(&history) {
        out.push(Finding::host(
            "link",
            Status::Warning,
            format!("readings not kept ({e}): flaps cannot be counted between runs"),
        ));
    }
    out
}

/// A port's finding: its reading `now` held against `base`.
fn port_finding(run: &LinkRun, p: &LinkPort, base: Baseline, now: &Reading) -> Finding {
    let window = humantime::format_duration(run.window);
    match base {
        Baseline::None => p.finding(
            Status::Ok,
            format!(
                "first reading ({}); flaps counted from the next run",
                counters(now)
            ),
        ),
        Baseline::Restarted(why) => p.finding(
            Status::Ok,
            format!("{}; history started over: {why}", counters(now)),
        ),
        // Slurm's HealthCheckInterval (or node-problem-detector's) longer than the
        // window by far: an Ok here would be blind to every flap.
        Baseline::Stale(b) => p.finding(
            Status::Warning,
            format!(
                "health runs less often than flap_window ({window}; the last reading is {} old): flaps not counted; make flap_window at least twice the run interval",
                humantime::format_duration(age(&b, now))
            ),
        ),
        Baseline::Since(b) => {
            let (status, what) = judged(run, &b, now);
            let mut f = p.finding(status, what);
            f.detail = Some(
                format!(
                    "since the reading {} ago",
                    humantime::format_duration(age(&b, now))
                )
                .into(),
            );
            f
        }
    }
}

/// How long before `now` `base` was read, in whole seconds.
fn age(base: &Reading, now: &Reading) -> Duration {
    Duration::from_secs(now.at_unix_ms.saturating_sub(base.at_unix_ms) / 1000)
}

/// The increase from `base` to `now`, judged over the window, or over the longer span
/// since `base` where no reading is within the window (said: `health` runs less often).
fn judged(run: &LinkRun, base: &Reading, now: &Reading) -> (Status, String) {
    let inc = |f: fn(&Reading) -> Option<u64>| Some(f(now)?.saturating_sub(f(base)?));
    let span = Duration::from_millis(now.at_unix_ms.saturating_sub(base.at_unix_ms));
    let longer = span > run.window;
    let over = if longer { age(base, now) } else { run.window };
    // An InfiniBand port's link_downed counts downs as mlx5's PHY counter does: the
    // verdict's PHY rule, named for what was read.
    let (phy, phy_name) = match inc(|r| r.link_downed) {
        Some(d) => (Some(d), LINK_DOWNED),
        None => (inc(|r| r.link_down_events_phy), PHY_DOWN),
    };
    let v = judge_flaps(inc(|r| r.carrier_changes), phy, over, run.max_flaps);
    let status = match v.kind {
        FlapKind::Steady => Status::Ok,
        FlapKind::Flapped => Status::Warning,
        FlapKind::Flapping => Status::Unhealthy,
        FlapKind::Unknown => Status::Unknown,
    };
    let mut what = v
        .evidence
        .replace(rocewatch_sysfs::verdict::flap::SOURCE_PHY, phy_name);
    if longer {
        what.push_str(&format!(
            "; health runs less often than flap_window ({}): counted over the {} since the last reading (at most {SPAN_FACTOR} windows); make flap_window at least twice the run interval",
            humantime::format_duration(run.window),
            humantime::format_duration(over)
        ));
    }
    (status, what)
}

/// The `link` check on this host: `link_down_events_phy` read on the live host only.
pub fn run_host(
    board: &Board,
    opts: &crate::Options,
    cfg: &crate::HealthConfig,
    ports: &[LinkPort],
) -> Vec<Finding> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let run = LinkRun {
        sysfs_root: &opts.sysfs_root,
        state_dir: &opts.state_dir,
        window: cfg.flap_window,
        max_flaps: cfg.max_flaps,
        now_ms,
        boot_id: boot_id(&opts.procfs_root),
        board,
    };
    if !opts.live {
        return link(&run, ports, &mut |_| Ok(None));
    }
    let sock = rocewatch_ethtool::EthtoolSocket::open();
    link(&run, ports, &mut |nd| {
        let s = sock.as_ref().map_err(|e| format!("ethtool socket: {e}"))?;
        match s.driver_stats(nd) {
            Ok(stats) => Ok(stats
                .into_iter()
                .find(|(n, _)| n == PHY_DOWN)
                .map(|(_, v)| v)),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    })
}

/// The proc tree's `sys/kernel/random/boot_id` (drivers/char/random.c: a UUID made once
/// per boot); `None` where it has none (a fixture's).
fn boot_id(procfs_root: &Path) -> Option<String> {
    let path = procfs_root.join("sys/kernel/random/boot_id");
    match rocewatch_sysfs::read::read_attr(&path) {
        Ok(rocewatch_sysfs::Attr::Value(v)) if !v.trim().is_empty() => Some(v.trim().to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new() -> Tree {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("sys/class/net/eth0")).unwrap();
            Tree { dir }
        }
        fn sys(&self) -> PathBuf {
            self.dir.path().join("sys")
        }
        fn state(&self) -> PathBuf {
            self.dir.path().join("state")
        }
        fn carrier(&self, n: u64) {
            let p = self.sys().join("class/net/eth0/carrier_changes");
            std::fs::write(p, format!("{n}\n")).unwrap();
        }
        fn run_at(&self, s: u64, phy: Option<u64>) -> Vec<Finding> {
            self.run_ports(s, &[port()], &mut |_| Ok(phy))
        }
        /// The check at `s` seconds over `ports`, with a 10m window and 2 flaps.
        fn run_ports(&self, s: u64, ports: &[LinkPort], phy: &mut PhyReader) -> Vec<Finding> {
            let board = Board::new();
            let (sys, state) = (self.sys(), self.state());
            let run = LinkRun {
                sysfs_root: &sys,
                state_dir: &state,
                window: Duration::from_secs(600),
                max_flaps: 2,
                now_ms: s * 1000,
                boot_id: None,
                board: &board,
            };
            link(&run, ports, phy)
        }
    }

    fn port() -> LinkPort {
        LinkPort {
            device: "mlx5_0".into(),
            port: 1,
            netdev: Some("eth0".into()),
            infiniband: false,
            link_up: true,
        }
    }

    fn one(f: &[Finding]) -> &Finding {
        assert_eq!(f.len(), 1, "{f:?}");
        &f[0]
    }

    #[test]
    fn first_run_is_ok_and_flaps_within_the_window_are_unhealthy() {
        let t = Tree::new();
        t.carrier(10);
        let f = t.run_at(1000, None);
        assert_eq!(one(&f).status, Status::Ok, "{f:?}");
        assert_eq!(
            one(&f).what,
            "first reading (carrier_changes 10); flaps counted from the next run"
        );
        t.carrier(14);
        let f = t.run_at(1300, None);
        assert_eq!(one(&f).status, Status::Unhealthy, "{f:?}");
        // The age stays out of what the line (a drain's reason) is made of.
        assert!(!one(&f).what.contains("ago"), "{f:?}");
        assert_eq!(one(&f).detail.as_deref(), Some("since the reading 5m ago"));
        // One flap (two changes) more than the oldest reading in the window: a warning
        // once the first reading is older than the window.
        t.carrier(16);
        let f = t.run_at(1700, None);
        assert_eq!(one(&f).status, Status::Warning, "{f:?}");
        let f = t.run_at(2400, None);
        assert_eq!(one(&f).status, Status::Ok, "{f:?}");
    }

    /// health run less often than the window: flaps between runs a little further apart
    /// still count (the span said); runs far apart warn rather than pass blind.
    #[test]
    fn runs_further_apart_than_the_window_count_flaps_or_warn() {
        let t = Tree::new();
        t.carrier(10);
        t.run_at(0, None);
        t.carrier(16);
        let f = t.run_at(700, None);
        assert_eq!(one(&f).status, Status::Unhealthy, "{f:?}");
        assert!(one(&f).what.contains("in the 700s window"), "{f:?}");
        assert!(
            one(&f)
                .what
                .contains("health runs less often than flap_window (10m)"),
            "{f:?}"
        );
        let f = t.run_at(700 + 1801, None);
        assert_eq!(one(&f).status, Status::Warning, "{f:?}");
        assert!(one(&f).what.contains("flaps not counted"), "{f:?}");
    }

    /// An InfiniBand port: its link_downed counts the downs, its IPoIB netdev's carrier
    /// (turned off on subnet manager events) is not read.
    #[test]
    fn an_infiniband_port_is_judged_by_link_downed_not_its_carrier() {
        let t = Tree::new();
        let counters = t.sys().join("class/infiniband/mlx5_0/ports/1/counters");
        std::fs::create_dir_all(&counters).unwrap();
        let ib = LinkPort {
            infiniband: true,
            ..port()
        };
        let run_at = |s: u64, carrier: u64, downed: u64| {
            t.carrier(carrier);
            std::fs::write(counters.join("link_downed"), format!("{downed}\n")).unwrap();
            t.run_ports(s, std::slice::from_ref(&ib), &mut |_| {
                panic!("no ethtool for IB")
            })
        };
        run_at(0, 2, 1);
        // The subnet manager's events: the carrier moved, the link did not go down.
        let f = run_at(60, 10, 1);
        assert_eq!(one(&f).status, Status::Ok, "{f:?}");
        let f = run_at(120, 10, 3);
        assert_eq!(one(&f).status, Status::Unhealthy, "{f:?}");
        assert!(one(&f).what.contains("(link_downed)"), "{f:?}");
        assert!(!one(&f).what.contains(PHY_DOWN), "{f:?}");
    }

    #[test]
    fn the_phy_counter_is_preferred_over_carrier_changes() {
        let t = Tree::new();
        t.carrier(10);
        t.run_at(0, Some(3));
        // An administrator's down/up twice: carrier changes, no PHY down event.
        t.carrier(14);
        let f = t.run_at(60, Some(3));
        assert_eq!(one(&f).status, Status::Ok, "{f:?}");
        t.carrier(18);
        let f = t.run_at(120, Some(5));
        assert_eq!(one(&f).status, Status::Unhealthy, "{f:?}");
        assert!(one(&f).what.contains(PHY_DOWN), "{f:?}");
    }

    #[test]
    fn a_recreated_netdev_starts_over_rather_than_flapping() {
        let t = Tree::new();
        t.carrier(40);
        t.run_at(0, None);
        t.carrier(2);
        let f = t.run_at(60, None);
        assert_eq!(one(&f).status, Status::Ok, "{f:?}");
        assert!(one(&f).what.contains("went back from 40 to 2"), "{f:?}");
    }

    #[test]
    fn a_corrupt_history_is_said_and_started_over_never_a_drain() {
        let t = Tree::new();
        t.carrier(10);
        std::fs::create_dir_all(t.state()).unwrap();
        std::fs::write(t.state().join(crate::history::FILE), b"\x00garbage").unwrap();
        let f = t.run_at(0, None);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[0].status, Status::Warning, "{f:?}");
        assert!(f[0].what.contains("not a link history"), "{f:?}");
        assert!(f[0]
            .what
            .ends_with("started over (flaps counted from the next run)"));
        assert_eq!(f[1].status, Status::Ok, "{f:?}");
        // Replaced: the next run is held against this one's reading.
        t.carrier(20);
        let f = t.run_at(60, None);
        assert_eq!(one(&f).status, Status::Unhealthy, "{f:?}");
    }

    #[test]
    fn a_history_that_cannot_be_kept_warns() {
        let t = Tree::new();
        t.carrier(10);
        // A file where the state directory should be.
        std::fs::write(t.state(), b"").unwrap();
        let f = t.run_at(0, None);
        assert!(
            f.iter()
                .any(|f| f.status == Status::Warning && f.what.starts_with("readings not kept")),
            "{f:?}"
        );
        assert!(f.iter().all(|f| f.status != Status::Unhealthy), "{f:?}");
    }

    #[test]
    fn no_counter_is_skipped_without_touching_the_state_directory() {
        let t = Tree::new();
        let f = t.run_at(0, None);
        assert_eq!(one(&f).status, Status::Skipped, "{f:?}");
        assert!(!t.state().exists());
        let p = LinkPort {
            netdev: None,
            ..port()
        };
        let f = t.run_ports(0, &[p], &mut |_| Ok(None));
        assert_eq!(one(&f).status, Status::Skipped, "{f:?}");
    }
}
