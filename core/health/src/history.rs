//! What `health` keeps between runs for the `link` check: each checked port's flap
//! counters (`carrier_changes`, mlx5's `link_down_events_phy`, an InfiniBand port's
//! `link_downed`) with the time they were read, and what they were read on (the boot,
//! the netdev's ifindex), in `link-history.json` in the state directory. One run of
//! `health` takes a few seconds; a flap shows as these counters rising between runs. A
//! reboot or a recreated netdev starts the port's history over: a link coming up, an MTU
//! set or a ring resized at boot raise `carrier_changes` by two each, which are no flaps
//! of the link read before (`scontrol reboot` runs the health check at slurmd's start).
//!
//! The file is read and replaced as the quarantine file is (`rocewatch_runtime::util::fs`):
//! never through a link, a regular file of bounded size, replaced whole through a
//! temporary file of a random name and a rename; root acts in a state directory another
//! user owns as that user. Two runs at once (Slurm's and node-problem-detector's) each
//! replace it whole: the last one's readings stay, the other's are lost, which costs one
//! reading, never a false flap. A file that cannot be read or is not a history is said,
//! and the history starts over.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rocewatch_runtime::util::fs::{as_owner_of, create_trusted_dir, read_trusted, write_atomic};
use serde::{Deserialize, Serialize};

/// The file's name in the state directory.
pub const FILE: &str = "link-history.json";

/// The readings kept per port: runs every few seconds over a day's window stay bounded
/// (the oldest reading, the baseline, is always kept; those after it are thinned).
const MAX_READINGS: usize = 128;

/// The format this build writes and reads.
const VERSION: u32 = 1;

/// One port's counters at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reading {
    /// When, in milliseconds since the epoch.
    pub at_unix_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier_changes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_down_events_phy: Option<u64>,
    /// An InfiniBand port's `counters/link_downed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_downed: Option<u64>,
}

/// One port's readings, oldest first, and what they were read on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortHistory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    /// The netdev's `ifindex`: another one is another netdev of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifindex: Option<u64>,
    /// The kernel's `sys/kernel/random/boot_id` when read: another one is another boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    pub readings: Vec<Reading>,
}

/// What a port's counters are read on now: a reading of another boot or another netdev
/// cannot be compared with them. `None`: not known (a fixture tree without them), compared
/// with nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOn<'a> {
    pub netdev: Option<&'a str>,
    pub ifindex: Option<u64>,
    pub boot_id: Option<&'a str>,
}

/// Every checked port's readings, by `DEVICE/PORT`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub version: u32,
    pub ports: BTreeMap<String, PortHistory>,
}

impl Default for History {
    fn default() -> Self {
        History {
            version: VERSION,
            ports: BTreeMap::new(),
        }
    }
}

/// Why the history could not be read or kept, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{path}: not a link history ({why})")]
    Corrupt { path: String, why: String },
    #[error(transparent)]
    Fs(#[from] rocewatch_runtime::util::fs::FsError),
}

/// How much older than the window the last reading may be and still be compared with:
/// a run that comes a little later than `flap_window` counts its flaps over the longer
/// span rather than not at all.
pub const SPAN_FACTOR: u64 = 3;

/// What a port's new reading is held against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Baseline {
    /// No earlier reading: the first run (or readings all dated after now, a clock set
    /// back).
    None,
    /// The history was started over: why.
    Restarted(String),
    /// The oldest reading within the window, else the newest one older than it when
    /// that is within [`SPAN_FACTOR`] windows.
    Since(Reading),
    /// Only readings older than [`SPAN_FACTOR`] windows: the newest of them. `health`
    /// runs far less often than the window: flaps cannot be counted over it.
    Stale(Reading),
}

/// `bytes` as the history file at `path` holds it.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<History, HistoryError> {
    let corrupt = |why: String| HistoryError::Corrupt {
        path: path.display().to_string(),
        why,
    };
    let h: History = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if h.version != VERSION {
        return Err(corrupt(format!(
            "version {}, this build reads {VERSION}",
            h.version
        )));
    }
    Ok(h)
}

/// The history file of the state directory `dir`.
#[derive(Debug, Clone)]
pub struct HistoryFile {
    dir: PathBuf,
    path: PathBuf,
}

impl HistoryFile {
    pub fn in_dir(dir: &Path) -> HistoryFile {
        HistoryFile {
            dir: dir.to_path_buf(),
            path: dir.join(FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The history kept, empty where there is none yet.
    pub fn load(&self) -> Result<History, HistoryError> {
        if !self.dir.is_dir() {
            return Ok(History::default());
        }
        let bytes = match as_owner_of(&self.dir, || read_trusted(&self.path)) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(History::default()),
            Err(e) => return Err(e.into()),
        };
        parse(&self.path, &bytes)
    }

    /// Replace the file with `h` (the state directory created when missing, as the
    /// quarantine's is).
    pub fn store(&self, h: &History) -> Result<(), HistoryError> {
        let json = serde_json::to_vec(h).expect("plain data");
        as_owner_of(&self.dir, || {
            create_trusted_dir(&self.dir)?;
            write_atomic(&self.path, &json, 0o644)
        })
        .map_err(HistoryError::from)
    }
}

impl History {
    /// Keep only the ports in `keep` (those checked this run: the file stays bounded).
    pub fn retain_ports(&mut self, keep: &[String]) {
        self.ports.retain(|k, _| keep.contains(k));
    }

    /// Add `now` to `port`'s readings (read on `on`), dropping those older than
    /// `window` (or dated after `now`: a clock set back) but the one it is held against;
    /// what `now` is held against. Another boot, another netdev (by name or ifindex) or a
    /// counter lower than before (the driver reloaded) starts the port's history over.
    pub fn record(&mut self, port: &str, on: ReadOn, now: Reading, window: Duration) -> Baseline {
        let h = self.ports.entry(port.to_string()).or_default();
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let restart = if h.readings.is_empty() {
            None
        } else {
            restarted(h, &on).or_else(|| went_back(&h.readings, &now))
        };
        h.netdev = on.netdev.map(str::to_string);
        h.ifindex = on.ifindex;
        h.boot_id = on.boot_id.map(str::to_string);
        if let Some(why) = restart {
            h.readings = vec![now];
            return Baseline::Restarted(why);
        }
        h.readings.retain(|r| r.at_unix_ms <= now.at_unix_ms);
        let age = |r: &Reading| now.at_unix_ms - r.at_unix_ms;
        let base = match h.readings.iter().find(|r| age(r) <= window_ms) {
            Some(r) => Baseline::Since(*r),
            None => match h.readings.last() {
                Some(r) if age(r) <= window_ms.saturating_mul(SPAN_FACTOR) => Baseline::Since(*r),
                Some(r) => Baseline::Stale(*r),
                None => Baseline::None,
            },
        };
        h.readings.retain(|r| age(r) <= window_ms);
        h.readings.push(now);
        while h.readings.len() > MAX_READINGS {
            h.readings.remove(1);
        }
        base
    }
}

/// Why `h`'s readings were of something else than `on`: another boot, another netdev.
/// What either side does not know is compared with nothing.
fn restarted(h: &PortHistory, on: &ReadOn) -> Option<String> {
    if let (Some(was), Some(is)) = (h.boot_id.as_deref(), on.boot_id) {
        if was != is {
            return Some("the host rebooted (another boot_id)".into());
        }
    }
    if h.netdev.as_deref() != on.netdev {
        return Some(format!(
            "its netdev is {} now, was {}",
            on.netdev.unwrap_or("none"),
            h.netdev.as_deref().unwrap_or("none")
        ));
    }
    match (h.ifindex, on.ifindex) {
        (Some(was), Some(is)) if was != is => Some(format!(
            "the netdev was recreated (ifindex {is}, was {was})"
        )),
        _ => None,
    }
}

/// Why `now` cannot follow `before`: a counter that went down.
fn went_back(before: &[Reading], now: &Reading) -> Option<String> {
    let back = |name: &str, f: fn(&Reading) -> Option<u64>| {
        let n = f(now)?;
        let was = before.iter().filter_map(f).max()?;
        (n < was).then(|| format!("{name} went back from {was} to {n} (the netdev was recreated or its driver reloaded)"))
    };
    back("carrier_changes", |r| r.carrier_changes)
        .or_else(|| back("link_down_events_phy", |r| r.link_down_events_phy))
        .or_else(|| back("link_downed", |r| r.link_downed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(s: u64, c: u64) -> Reading {
        Reading {
            at_unix_ms: s * 1000,
            carrier_changes: Some(c),
            link_down_events_phy: None,
            link_downed: None,
        }
    }

    fn on(netdev: &str) -> ReadOn<'_> {
        ReadOn {
            netdev: Some(netdev),
            ..Default::default()
        }
    }

    const W: Duration = Duration::from_secs(600);

    #[test]
    fn the_first_reading_has_no_baseline_and_the_next_is_held_against_it() {
        let mut h = History::default();
        assert_eq!(
            h.record("mlx5_0/1", on("eth0"), at(0, 2), W),
            Baseline::None
        );
        assert_eq!(
            h.record("mlx5_0/1", on("eth0"), at(300, 6), W),
            Baseline::Since(at(0, 2))
        );
        // Still the oldest within the window.
        assert_eq!(
            h.record("mlx5_0/1", on("eth0"), at(600, 6), W),
            Baseline::Since(at(0, 2))
        );
        // The first is older than the window now: the next oldest.
        assert_eq!(
            h.record("mlx5_0/1", on("eth0"), at(700, 6), W),
            Baseline::Since(at(300, 6))
        );
    }

    /// health run less often than the window: the last reading, a little older than the
    /// window, is still held against (its flaps counted over the longer span); one older
    /// than three windows is stale (a warning, never a blind Ok).
    #[test]
    fn readings_older_than_the_window_are_held_against_up_to_three_windows() {
        let mut h = History::default();
        h.record("mlx5_0/1", on("eth0"), at(0, 2), W);
        assert_eq!(
            h.record("mlx5_0/1", on("eth0"), at(601, 9), W),
            Baseline::Since(at(0, 2))
        );
        assert_eq!(h.ports["mlx5_0/1"].readings, vec![at(601, 9)]);
        assert_eq!(
            h.record("mlx5_0/1", on("eth0"), at(601 + 1801, 9), W),
            Baseline::Stale(at(601, 9))
        );
        assert_eq!(h.ports["mlx5_0/1"].readings, vec![at(2402, 9)]);
    }

    /// After a reboot the links came up again (carrier_changes +2 each, more for an MTU
    /// set or rings sized at boot): no flap of the link read before.
    #[test]
    fn another_boot_or_ifindex_starts_over_and_an_unknown_one_compares_nothing() {
        let mut h = History::default();
        let boot = |b: &'static str, i: u64| ReadOn {
            netdev: Some("eth0"),
            ifindex: Some(i),
            boot_id: Some(b),
        };
        h.record("p", boot("a", 4), at(0, 2), W);
        let b = h.record("p", boot("b", 4), at(60, 6), W);
        assert_eq!(
            b,
            Baseline::Restarted("the host rebooted (another boot_id)".into())
        );
        let b = h.record("p", boot("b", 7), at(70, 10), W);
        assert_eq!(
            b,
            Baseline::Restarted("the netdev was recreated (ifindex 7, was 4)".into())
        );
        // Neither known (a fixture tree): compared with nothing.
        assert_eq!(
            h.record("p", on("eth0"), at(80, 12), W),
            Baseline::Since(at(70, 10))
        );
        assert_eq!(
            h.record("p", boot("c", 1), at(90, 12), W),
            Baseline::Since(at(70, 10))
        );
    }

    #[test]
    fn a_counter_that_went_back_or_another_netdev_starts_over() {
        let mut h = History::default();
        h.record("mlx5_0/1", on("eth0"), at(0, 8), W);
        let b = h.record("mlx5_0/1", on("eth0"), at(10, 1), W);
        assert!(
            matches!(&b, Baseline::Restarted(w) if w.contains("carrier_changes went back from 8 to 1")),
            "{b:?}"
        );
        assert_eq!(
            h.record("mlx5_0/1", on("eth0"), at(20, 3), W),
            Baseline::Since(at(10, 1))
        );
        let b = h.record("mlx5_0/1", on("eth1"), at(30, 5), W);
        assert!(
            matches!(&b, Baseline::Restarted(w) if w.contains("eth1 now, was eth0")),
            "{b:?}"
        );
    }

    #[test]
    fn a_clock_set_back_drops_the_readings_dated_after_now() {
        let mut h = History::default();
        h.record("p", on("eth0"), at(1000, 2), W);
        assert_eq!(h.record("p", on("eth0"), at(900, 2), W), Baseline::None);
    }

    #[test]
    fn the_baseline_is_kept_when_readings_are_thinned() {
        let mut h = History::default();
        for i in 0..(MAX_READINGS as u64 + 10) {
            h.record("p", on("eth0"), at(i, i), W);
        }
        let r = &h.ports["p"].readings;
        assert_eq!(r.len(), MAX_READINGS);
        assert_eq!(r[0], at(0, 0));
    }

    #[test]
    fn the_file_round_trips_and_another_version_is_refused_naming_it() {
        let mut h = History::default();
        h.record("mlx5_0/1", on("eth0"), at(5, 2), W);
        let p = Path::new("/state/link-history.json");
        let bytes = serde_json::to_vec(&h).unwrap();
        assert_eq!(parse(p, &bytes).unwrap(), h);
        let e = parse(p, br#"{"version":2,"ports":{}}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/state/link-history.json: not a link history (version 2, this build reads 1)"
        );
    }

    #[test]
    fn stored_and_loaded_in_a_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let f = HistoryFile::in_dir(&dir.path().join("state"));
        assert_eq!(f.load().unwrap(), History::default());
        let mut h = History::default();
        h.record("mlx5_0/1", on("eth0"), at(5, 2), W);
        f.store(&h).unwrap();
        assert_eq!(f.load().unwrap(), h);
        std::fs::write(f.path(), b"{").unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(e.starts_with(&f.path().display().to_string()), "{e}");
    }

    #[test]
    fn a_link_in_place_of_the_file_is_refused_and_replaced_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let f = HistoryFile::in_dir(&state);
        std::os::unix::fs::symlink(&victim, f.path()).unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        f.store(&History::default()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(!std::fs::symlink_metadata(f.path()).unwrap().is_symlink());
        assert_eq!(f.load().unwrap(), History::default());
    }

    /// Root (Slurm's HealthCheckProgram) keeps the history in a state directory the
    /// agent's user owns as that user, as it does the quarantine: the agent's own
    /// self-test can still replace it.
    #[test]
    fn root_keeps_the_history_of_a_state_directory_another_user_owns_as_that_user() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert!(
            rocewatch_runtime::util::fs::strict(),
            "this test checks what root does in a state directory another user owns: it needs root (CI runs as root)"
        );
        const NOBODY: u32 = 65534;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
        let c = std::ffi::CString::new(state.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: lchown on a path the test made; the result is checked.
        assert_eq!(unsafe { libc::lchown(c.as_ptr(), NOBODY, NOBODY) }, 0);
        let f = HistoryFile::in_dir(&state);
        let mut h = History::default();
        h.record("mlx5_0/1", on("eth0"), at(5, 2), W);
        f.store(&h).unwrap();
        let md = std::fs::symlink_metadata(f.path()).unwrap();
        assert_eq!((md.uid(), md.gid()), (NOBODY, NOBODY));
        assert_eq!(f.load().unwrap(), h);
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_an_error_names_the_file(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let p = Path::new("/state/link-history.json");
            if let Err(e) = parse(p, &bytes) {
                prop_assert!(e.to_string().starts_with("/state/link-history.json: "), "{e}");
            }
        }

        #[test]
        fn json_shaped_text_parses_or_an_error_names_the_file(
            version in 0u32..3,
            port in "[a-z0-9_/]{0,12}",
            at in any::<u64>(),
            c in proptest::option::of(any::<u64>()),
            extra in "[a-z\":,{}0-9 ]{0,20}",
        ) {
            let p = Path::new("/state/link-history.json");
            let c = c.map(|c| format!(",\"carrier_changes\":{c}")).unwrap_or_default();
            let text = format!("{{\"version\":{version},\"ports\":{{\"{port}\":{{\"readings\":[{{\"at_unix_ms\":{at}{c}}}]}}}}{extra}}}");
            match parse(p, text.as_bytes()) {
                Ok(mut h) => {
                    // Whatever it held, a reading can follow it.
                    h.record(&port, ReadOn::default(), Reading { at_unix_ms: 1, carrier_changes: Some(0), link_down_events_phy: None, link_downed: None }, W);
                }
                Err(e) => prop_assert!(e.to_string().starts_with("/state/link-history.json: "), "{e}"),
            }
        }
    }
}
