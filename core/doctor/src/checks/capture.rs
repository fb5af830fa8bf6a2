//! Where to capture RoCE traffic: the VLAN offload state to turn off and to restore.
//!
//! `rocewatch capture --offload-off` turns `rx-vlan-offload` (the feature
//! `rx-vlan-hw-parse`) off through the ethtool ioctls and puts back the value it found:
//! after the capture, on Ctrl-C/SIGTERM, and, after a crash, on the next start. What it
//! changed is written to a restore record in the state directory before the change.

use std::path::{Path, PathBuf};

use rocewatch_ethtool::EthtoolSocket;
use serde::{Deserialize, Serialize};

/// The ethtool feature behind `rx-vlan-offload`.
pub const VLAN_FEATURE: &str = "rx-vlan-hw-parse";

/// The features a capture turns off: the only ones a restore record may turn back on.
const FEATURES_TURNED_OFF: &[&str] = &[VLAN_FEATURE];

/// A restore record as created (mode, less the umask): root's, for root to read back.
const RECORD_MODE: u32 = 0o600;

/// The rx-vlan-offload state of `nd` (`on`/`off`, as `ethtool -k` says it), read with the
/// ethtool ioctls; `None` when it cannot be read.
pub(crate) fn vlan_offload(nd: &str) -> Option<String> {
    let f = EthtoolSocket::open()
        .ok()?
        .feature(nd, VLAN_FEATURE)
        .ok()??;
    Some(if f.active { "on" } else { "off" }.to_string())
}

/// What a capture turned off, to turn back on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffloadRecord {
    pub netdev: String,
    pub feature: String,
    /// The value found (what `ethtool -K` had asked for): put back.
    pub was_on: bool,
    pub pid: u32,
}

/// The restore record of `netdev` (one per netdev: captures of two netdevs do not share
/// one).
pub fn record_path(state_dir: &Path, netdev: &str) -> PathBuf {
    state_dir.join(format!("capture-offload-{netdev}.json"))
}

/// Open (creating) a record file and take its lock without waiting: `None` when a
/// running capture holds it (the kernel drops the lock of a process that died). Never
/// through a link; as root, only a file root owns in a directory only root can write.
fn locked(path: &Path) -> Result<Option<std::fs::File>, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = rocewatch_runtime::util::fs::open_nofollow(
        path,
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(RECORD_MODE),
    )
    .map_err(|e| e.to_string())?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(None);
    }
    Ok(Some(f))
}

/// A feature turned off for a capture; [`OffloadGuard::restore`] puts the value back.
/// The record stays locked while the capture runs.
#[derive(Debug)]
pub struct OffloadGuard {
    record: OffloadRecord,
    path: PathBuf,
    _lock: std::fs::File,
    restored: bool,
}

fn socket() -> Result<EthtoolSocket, String> {
    EthtoolSocket::open().map_err(|e| format!("ethtool socket: {e}"))
}

fn set(netdev: &str, feature: &str, on: bool) -> Result<(), String> {
    socket()?.set_feature(netdev, feature, on).map_err(|e| {
        format!(
            "{netdev}: setting {feature} {}: {e}",
            if on { "on" } else { "off" }
        )
    })
}

impl OffloadGuard {
    /// Turn `rx-vlan-offload` of `netdev` off, the value found recorded (and the record
    /// locked) under `state_dir` first. `Ok(None)` when it is off already.
    pub fn turn_off(netdev: &str, state_dir: &Path) -> Result<Option<OffloadGuard>, String> {
        let now = socket()?
            .feature(netdev, VLAN_FEATURE)
            .map_err(|e| format!("{netdev}: reading {VLAN_FEATURE}: {e}"))?
            .ok_or_else(|| format!("{netdev} has no {VLAN_FEATURE} (rx-vlan-offload) feature"))?;
        if !now.requested && !now.active {
            return Ok(None);
        }
        if !now.changeable {
            return Err(format!(
                "{netdev}: rx-vlan-offload is fixed on by the driver"
            ));
        }
        rocewatch_runtime::util::fs::create_trusted_dir(state_dir).map_err(|e| e.to_string())?;
        let path = record_path(state_dir, netdev);
        let Some(mut lock) = locked(&path)? else {
            return Err(format!("another capture has rx-vlan-offload of {netdev} off (its record {} is held); it puts it back when it ends", path.display()));
        };
        let record = OffloadRecord {
            netdev: netdev.into(),
            feature: VLAN_FEATURE.into(),
            was_on: now.requested,
            pid: std::process::id(),
        };
        {
            use std::io::{Seek, Write};
            let body = serde_json::to_vec(&record).expect("plain data");
            lock.set_len(0)
                .and_then(|()| lock.seek(std::io::SeekFrom::Start(0)).map(|_| ()))
                .and_then(|()| lock.write_all(&body))
                .and_then(|()| lock.sync_data())
                .map_err(|e| {
                    format!(
                        "{}: cannot write the restore record ({e}); nothing changed",
                        path.display()
                    )
                })?;
        }
        if let Err(e) = set(netdev, VLAN_FEATURE, false) {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(Some(OffloadGuard {
            record,
            path,
            _lock: lock,
            restored: false,
        }))
    }

    /// Put the value back and remove the record (kept when the restore fails, for the
    /// next start to try again).
    pub fn restore(&mut self) -> Result<(), String> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        set(
            &self.record.netdev,
            &self.record.feature,
            self.record.was_on,
        )?;
        let _ = std::fs::remove_file(&self.path);
        Ok(())
    }

    pub fn netdev(&self) -> &str {
        &self.record.netdev
    }
}

impl Drop for OffloadGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("rocewatch: {e}; the record stays for the next start to restore");
        }
    }
}

/// Whether `name` is a name the kernel gives a netdev (`dev_valid_name` in
/// `net/core/dev.c`: 1 to 15 bytes, not `.` or `..`, no `/`, `:` or white space).
fn valid_netdev_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0x0b)
}

/// Why a restore record (read from `path`) must not be acted on, if it must not: root
/// turns on only a feature a capture turns off, for the netdev the file is named after,
/// which `known` says is a netdev of this host.
fn refusal(path: &Path, rec: &OffloadRecord, known: &dyn Fn(&str) -> bool) -> Option<String> {
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("capture-offload-"))
        .and_then(|n| n.strip_suffix(".json"));
    if !FEATURES_TURNED_OFF.contains(&rec.feature.as_str()) {
        return Some(format!(
            "it names the feature {:?}, which rocewatch never turns off (only {})",
            rec.feature,
            FEATURES_TURNED_OFF.join(", ")
        ));
    }
    if named != Some(rec.netdev.as_str()) {
        return Some(format!(
            "it names the netdev {:?}, not the one it is named after",
            rec.netdev
        ));
    }
    if !valid_netdev_name(&rec.netdev) || !known(&rec.netdev) {
        return Some(format!("{:?} is not a netdev of this host", rec.netdev));
    }
    None
}

/// Records left by captures that did not end (killed, crashed), not held by a running
/// one: the value is put back where the feature is still as the capture set it (off);
/// one changed since is left as it is, said. Only a record root can trust is acted on:
/// not a link, as root one root owns in a directory only root can write, for a netdev
/// `known` says this host has (the inventory's, or one under the sysfs root's
/// `class/net`), and a feature a capture turns off; any other is refused, said with the
/// file and why, and left in place for someone to look at. What was done, one line each.
pub fn restore_leftovers(
    state_dir: &Path,
    known: &dyn Fn(&str) -> bool,
) -> Vec<Result<String, String>> {
    let Ok(dir) = std::fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("capture-offload-") && name.ends_with(".json")) {
            continue;
        }
        let mut lock = match locked(&path) {
            Ok(Some(l)) => l,
            Ok(None) => continue, // a running capture's
            Err(e) => {
                out.push(Err(e));
                continue;
            }
        };
        // Read from the file locked and checked, not from the path again.
        let mut bytes = Vec::new();
        let rec: OffloadRecord = match std::io::Read::read_to_end(&mut lock, &mut bytes)
            .map_err(|e| e.to_string())
            .and_then(|_| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
        {
            Ok(r) => r,
            Err(e) => {
                out.push(Err(format!("{}: {e}", path.display())));
                continue;
            }
        };
        if let Some(why) = refusal(&path, &rec, known) {
            out.push(Err(format!(
                "{}: refused: {why}; nothing changed (the record stays: remove it once looked at)",
                path.display()
            )));
            continue;
        }
        let now = socket().and_then(|s| {
            s.feature(&rec.netdev, &rec.feature)
                .map_err(|e| format!("{}: reading {}: {e}", rec.netdev, rec.feature))
        });
        let r = match now {
            Ok(Some(f)) if f.requested => Ok(format!(
                "{}: {} is on again (changed since an interrupted capture, pid {}); left as it is",
                rec.netdev, rec.feature, rec.pid
            )),
            Ok(Some(_)) => set(&rec.netdev, &rec.feature, rec.was_on).map(|()| {
                format!(
                    "{}: {} {} restored, as found by an interrupted capture (pid {})",
                    rec.netdev,
                    rec.feature,
                    if rec.was_on { "on" } else { "off" },
                    rec.pid
                )
            }),
            Ok(None) => Ok(format!(
                "{}: no {} any more (the interface is gone?); record dropped",
                rec.netdev, rec.feature
            )),
            Err(e) => Err(e),
        };
        if r.is_ok() {
            let _ = std::fs::remove_file(&path);
        }
        drop(lock);
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(netdev: &str, feature: &str) -> OffloadRecord {
        OffloadRecord {
            netdev: netdev.into(),
            feature: feature.into(),
            was_on: true,
            pid: 1,
        }
    }

    #[test]
    fn a_record_is_honoured_only_for_a_feature_a_capture_turns_off_on_a_known_netdev() {
        let dir = Path::new("/var/lib/rocewatch");
        let known = |nd: &str| nd == "eth0";
        let path = record_path(dir, "eth0");
        assert_eq!(refusal(&path, &rec("eth0", VLAN_FEATURE), &known), None);
        let why = |r: OffloadRecord, p: &Path| refusal(p, &r, &known).unwrap();
        assert!(why(rec("eth0", "rx-gro"), &path)
            .contains("\"rx-gro\", which rocewatch never turns off"));
        assert!(why(rec("eth1", VLAN_FEATURE), &path).contains("not the one it is named after"));
        let other = record_path(dir, "eth1");
        assert!(why(rec("eth1", VLAN_FEATURE), &other)
            .contains("\"eth1\" is not a netdev of this host"));
        for bad in ["", ".", "..", "a/b", "a:1", "a b", "0123456789abcdef"] {
            assert!(!valid_netdev_name(bad), "{bad:?}");
            let p = dir.join(format!("capture-offload-{bad}.json"));
            assert!(
                refusal(&p, &rec(bad, VLAN_FEATURE), &|_| true).is_some(),
                "{bad:?}"
            );
        }
        assert!(valid_netdev_name("ens1f0np0") && valid_netdev_name("0123456789abcde"));
    }

    proptest::proptest! {
        /// Whatever a record file holds, reading it never panics, and a record of any
        /// feature but the VLAN offload is refused.
        #[test]
        fn any_record_is_read_without_panic(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
            netdev in "\\PC{0,20}",
            feature in "\\PC{0,20}",
        ) {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("capture-offload-eth0.json"), &bytes).unwrap();
            let out = restore_leftovers(dir.path(), &|_| false);
            proptest::prop_assert_eq!(out.len(), 1);
            proptest::prop_assert!(out[0].is_err());
            let r = rec(&netdev, &feature);
            let refused = refusal(&record_path(dir.path(), &netdev), &r, &|_| true);
            if feature != VLAN_FEATURE {
                proptest::prop_assert!(refused.is_some());
            }
        }
    }
}
