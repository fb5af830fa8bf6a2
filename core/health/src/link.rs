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
//! administrator's `ip link set down/up`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rocewatch_sysfs::verdict::{judge_flaps, FlapKind};

use super::deadline::{Board, Part};
use super::finding::{Finding, Status};
use super::history::{Baseline, HistoryFile, Reading};
use crate::config::CheckName;

/// mlx5's physical-layer link down counter (`ethtool -S`, en_stats.c).
pub const PHY_DOWN: &str = "link_down_events_phy";

/// A port the `link` check reads.
#[derive(Debug, Clone)]
pub struct LinkPort {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
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
    pub board: &'a Board,
}

/// A netdev's `link_down_events_phy`: `Ok(None)` where the driver has none.
pub type PhyReader<'a> = dyn FnMut(&str) -> Result<Option<u64>, String> + 'a;

/// What one port reads now, or the finding that says why it cannot be judged.
fn read_port(
    run: &LinkRun,
    p: &LinkPort,
    phy: &mut PhyReader,
) -> Result<(Reading, Option<String>), Finding> {
    let Some(nd) = p.netdev.as_deref() else {
        return Err(p.finding(
            Status::Skipped,
            "no netdev, whose carrier_changes flaps are counted on (an InfiniBand port's link_downed: the agent's rule port-flapping; a RoCE port without one: ports says so)"
                .into(),
        ));
    };
    let path = run
        .sysfs_root
        .join("class/net")
        .join(nd)
        .join("carrier_changes");
    let part = Part::Check(CheckName::Link);
    run.board.reading(part, "link", path.display().to_string());
    let carrier = match rocewatch_sysfs::read::read_attr(&path) {
        Ok(rocewatch_sysfs::Attr::Value(v)) => match v.trim().parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                let what = format!("{}: {v:?} is not a count", path.display());
                return Err(p.finding(Status::Unknown, what));
            }
        },
        Ok(rocewatch_sysfs::Attr::Absent) => None,
        Err(e) => return Err(p.finding(Status::Unknown, e.to_string())),
    };
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
    let window = humantime::format_duration(run.window).to_string();
    for (p, (now, note)) in read {
        let key = p.key();
        let had = history
            .ports
            .get(&key)
            .is_some_and(|h| !h.readings.is_empty());
        let base = history.record(&key, p.netdev.as_deref(), now, run.window);
        let (status, mut what) = match base {
            Baseline::None if had => (
                Status::Ok,
                format!(
                    "{}; no reading of the last {window} to compare with: flaps counted from the next run",
                    counters(&now)
                ),
            ),
            Baseline::None => (
                Status::Ok,
                format!(
                    "first reading ({}); flaps counted from the next run",
                    counters(&now)
                ),
            ),
            Baseline::Restarted(why) => (
                Status::Ok,
                format!("{}; history started over: {why}", counters(&now)),
            ),
            Baseline::Since(b) => judged(run, &b, &now),
        };
        if let Some(n) = note {
            what = format!("{what} ({n})");
        }
        out.push(p.finding(status, what));
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

/// The increase from `base` to `now`, judged.
fn judged(run: &LinkRun, base: &Reading, now: &Reading) -> (Status, String) {
    let inc = |f: fn(&Reading) -> Option<u64>| Some(f(now)?.saturating_sub(f(base)?));
    let v = judge_flaps(
        inc(|r| r.carrier_changes),
        inc(|r| r.link_down_events_phy),
        run.window,
        run.max_flaps,
    );
    let status = match v.kind {
        FlapKind::Steady => Status::Ok,
        FlapKind::Flapped => Status::Warning,
        FlapKind::Flapping => Status::Unhealthy,
        FlapKind::Unknown => Status::Unknown,
    };
    let ago = Duration::from_secs(now.at_unix_ms.saturating_sub(base.at_unix_ms) / 1000);
    let what = format!(
        "{} (since the reading {} ago)",
        v.evidence,
        humantime::format_duration(ago)
    );
    (status, what)
}

/// The `link` check on this host: `link_down_events_phy` read on the live host only.
pub fn run_host(
    board: &Board,
    sysfs_root: PathBuf,
    state_dir: PathBuf,
    live: bool,
    cfg: &crate::HealthConfig,
    ports: &[LinkPort],
) -> Vec<Finding> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let run = LinkRun {
        sysfs_root: &sysfs_root,
        state_dir: &state_dir,
        window: cfg.flap_window,
        max_flaps: cfg.max_flaps,
        now_ms,
        board,
    };
    if !live {
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

#[cfg(test)]
mod tests {
    use super::*;

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
            let board = Board::new();
            let (sys, state) = (self.sys(), self.state());
            let run = LinkRun {
                sysfs_root: &sys,
                state_dir: &state,
                window: Duration::from_secs(600),
                max_flaps: 2,
                now_ms: s * 1000,
                board: &board,
            };
            link(&run, &[port()], &mut |_| Ok(phy))
        }
    }

    fn port() -> LinkPort {
        LinkPort {
            device: "mlx5_0".into(),
            port: 1,
            netdev: Some("eth0".into()),
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
        assert!(one(&f).what.contains("since the reading 5m ago"), "{f:?}");
        // One flap (two changes) more than the oldest reading in the window: a warning
        // once the first reading is older than the window.
        t.carrier(16);
        let f = t.run_at(1700, None);
        assert_eq!(one(&f).status, Status::Warning, "{f:?}");
        let f = t.run_at(2400, None);
        assert_eq!(one(&f).status, Status::Ok, "{f:?}");
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
        let board = Board::new();
        let (sys, state) = (t.sys(), t.state());
        let run = LinkRun {
            sysfs_root: &sys,
            state_dir: &state,
            window: Duration::from_secs(600),
            max_flaps: 2,
            now_ms: 0,
            board: &board,
        };
        let f = link(&run, &[p], &mut |_| Ok(None));
        assert_eq!(one(&f).status, Status::Skipped, "{f:?}");
    }
}
