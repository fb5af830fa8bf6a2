//! Where to capture RoCE traffic: the VLAN offload state to turn off and to restore.
//!
//! `rocewatch capture --offload-off` turns `rx-vlan-offload` (the feature
//! `rx-vlan-hw-parse`) off through the ethtool ioctls and puts back the value it found:
//! after the capture, on Ctrl-C/SIGTERM, and, after a crash, on the next start. What it
//! changed is written to a restore record in the state directory before the change.

use std::path::{Path, PathBuf};

use rocewatch_counters_ethtool::ioctl::EthtoolSocket;
use serde::{Deserialize, Serialize};

use super::host::run_tool;

/// The ethtool feature behind `rx-vlan-offload`.
pub const VLAN_FEATURE: &str = "rx-vlan-hw-parse";

/// The `ethtool -k IF` state of rx-vlan-offload (`on`/`off`), when ethtool tells.
pub(super) fn vlan_offload(nd: &str) -> Option<String> {
    let text = run_tool("ethtool", &["-k", nd])?.ok()?;
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("rx-vlan-offload:")
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
    })
}

/// What a capture turned off, to turn back on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffloadRecord {
    pub netdev: String,
    pub feature: String,
    /// The value found (restored).
    pub was_on: bool,
    pub pid: u32,
}

/// The restore record's place.
pub fn record_path(state_dir: &Path) -> PathBuf {
    state_dir.join("capture-offload.json")
}

/// A feature turned off for a capture; [`OffloadGuard::restore`] puts the value back.
#[derive(Debug)]
pub struct OffloadGuard {
    record: OffloadRecord,
    path: PathBuf,
    restored: bool,
}

fn set(netdev: &str, feature: &str, on: bool) -> Result<(), String> {
    EthtoolSocket::open()
        .and_then(|s| s.set_feature(netdev, feature, on))
        .map_err(|e| {
            format!(
                "{netdev}: setting {feature} {}: {e}",
                if on { "on" } else { "off" }
            )
        })
}

impl OffloadGuard {
    /// Turn `rx-vlan-offload` of `netdev` off, the value found recorded first under
    /// `state_dir`. `Ok(None)` when it is off already (nothing to restore).
    pub fn turn_off(netdev: &str, state_dir: &Path) -> Result<Option<OffloadGuard>, String> {
        let sock = EthtoolSocket::open().map_err(|e| format!("ethtool socket: {e}"))?;
        let (on, changeable) = sock
            .feature(netdev, VLAN_FEATURE)
            .map_err(|e| format!("{netdev}: reading {VLAN_FEATURE}: {e}"))?
            .ok_or_else(|| format!("{netdev} has no {VLAN_FEATURE} (rx-vlan-offload) feature"))?;
        if !on {
            return Ok(None);
        }
        if !changeable {
            return Err(format!(
                "{netdev}: rx-vlan-offload is fixed on by the driver"
            ));
        }
        let record = OffloadRecord {
            netdev: netdev.into(),
            feature: VLAN_FEATURE.into(),
            was_on: true,
            pid: std::process::id(),
        };
        let path = record_path(state_dir);
        std::fs::create_dir_all(state_dir)
            .and_then(|()| std::fs::write(&path, serde_json::to_vec(&record).expect("plain data")))
            .map_err(|e| {
                format!(
                    "{}: cannot write the restore record ({e}); nothing changed",
                    path.display()
                )
            })?;
        if let Err(e) = set(netdev, VLAN_FEATURE, false) {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(Some(OffloadGuard {
            record,
            path,
            restored: false,
        }))
    }

    /// Put the value back and remove the record (kept when the restore fails, for the
    /// next start to try again).
    pub fn restore(&mut self) -> Result<(), String> {
        if self.restored {
            return Ok(());
        }
        set(
            &self.record.netdev,
            &self.record.feature,
            self.record.was_on,
        )?;
        self.restored = true;
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

/// A record left by a capture that did not end (killed, crashed): restore it. `None`
/// when there is none; otherwise what was done.
pub fn restore_leftover(state_dir: &Path) -> Option<Result<String, String>> {
    let path = record_path(state_dir);
    let text = std::fs::read(&path).ok()?;
    let rec: OffloadRecord = match serde_json::from_slice(&text) {
        Ok(r) => r,
        Err(e) => return Some(Err(format!("{}: {e}", path.display()))),
    };
    Some(set(&rec.netdev, &rec.feature, rec.was_on).map(|()| {
        let _ = std::fs::remove_file(&path);
        format!(
            "{}: {} {} restored, as found by an interrupted capture (pid {})",
            rec.netdev,
            rec.feature,
            if rec.was_on { "on" } else { "off" },
            rec.pid
        )
    }))
}
