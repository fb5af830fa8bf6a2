//! Snapshots: the values `qos apply --yes` is about to replace, written before the first
//! change; what `qos rollback` restores.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One changed setting in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapChange {
    #[serde(flatten)]
    pub at: crate::SettingAt,
    /// The value replaced; `None` when it could not be read (a RoCE default whose
    /// configfs directory apply created): rollback leaves such a setting alone.
    pub from: Option<String>,
    pub to: String,
    /// Made (a change that failed, or was not reached, is not).
    pub done: bool,
}

/// What one `qos apply --yes` replaced, as kept under `[qos] snapshot_dir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// RFC 3339, when apply started.
    pub time: String,
    pub host: String,
    /// `qos apply`, or the rule whose remediation applied it.
    pub origin: String,
    /// applying | applied | rolled_back (a failure undid it) | restored (by `qos rollback`)
    pub state: String,
    pub changes: Vec<SnapChange>,
}

/// A snapshot file as created (mode, less the umask).
const SNAPSHOT_MODE: u32 = 0o644;

impl Snapshot {
    /// Reads a snapshot `qos rollback` acts on: never through a link, and, as root, only
    /// one root wrote (in a directory only root can write).
    pub fn read(path: &Path) -> Result<Snapshot, String> {
        let bytes = rocewatch_runtime::util::fs::read_trusted(path).map_err(|e| e.to_string())?;
        Self::parse(path, &bytes)
    }

    fn parse(path: &Path, bytes: &[u8]) -> Result<Snapshot, String> {
        serde_json::from_slice(bytes)
            .map_err(|e| format!("{}: not a rocewatch QoS snapshot: {e}", path.display()))
    }

    /// Written whole to a temporary file of a random name, flushed, renamed over `path`
    /// (see [`rocewatch_runtime::util::fs::write_atomic`]); the directory is created when missing.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        rocewatch_runtime::util::fs::create_trusted_dir(rocewatch_runtime::util::fs::parent_of(
            path,
        ))?;
        let mut body = serde_json::to_vec_pretty(self).expect("plain data");
        body.push(b'\n');
        rocewatch_runtime::util::fs::write_atomic(path, &body, SNAPSHOT_MODE)?;
        Ok(())
    }
}

/// The newest snapshot of `dir` that can be rolled back (applied, or cut short while
/// applying).
/// One that cannot be parsed is passed over; one refused (a link, another user's file, a
/// directory another user can write) is an error: an older one must not be rolled back
/// in its stead.
pub fn latest_snapshot(dir: &Path) -> Result<Option<PathBuf>, String> {
    if !dir.exists() {
        return Ok(None);
    }
    rocewatch_runtime::util::fs::trusted_dir(dir).map_err(|e| e.to_string())?;
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut names: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("qos-") && n.ends_with(".json"))
        })
        .collect();
    names.sort();
    for p in names.into_iter().rev() {
        let bytes = match rocewatch_runtime::util::fs::read_trusted(&p) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.to_string()),
        };
        if let Ok(s) = Snapshot::parse(&p, &bytes) {
            if s.state == "applied" || s.state == "applying" {
                return Ok(Some(p));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_never_written_through_a_link_planted_at_a_temporary_name() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let snaps = dir.path().join("qos");
        std::fs::create_dir(&snaps).unwrap();
        let path = snaps.join("qos-20261201T000000-000Z.json");
        // The fixed name rocewatch used for the temporary file.
        std::os::unix::fs::symlink(&victim, snaps.join("qos-20261201T000000-000Z.json.tmp"))
            .unwrap();
        let snap = Snapshot {
            time: "t".into(),
            host: "h".into(),
            origin: "qos apply".into(),
            state: "applying".into(),
            changes: Vec::new(),
        };
        snap.write(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(Snapshot::read(&path).unwrap(), snap);
    }

    #[test]
    fn a_snapshot_root_did_not_write_is_refused_not_passed_over() {
        assert!(
            rocewatch_runtime::util::fs::strict(),
            "this test checks what root refuses: it needs root (CI runs as root)"
        );
        let dir = tempfile::tempdir().unwrap();
        let snap = Snapshot {
            time: "t".into(),
            host: "h".into(),
            origin: "qos apply".into(),
            state: "applied".into(),
            changes: Vec::new(),
        };
        let older = dir.path().join("qos-20261201T000000-000Z.json");
        let newer = dir.path().join("qos-20261202T000000-000Z.json");
        snap.write(&older).unwrap();
        snap.write(&newer).unwrap();
        let c = std::ffi::CString::new(newer.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: chown of a file in our temporary directory; the result is checked.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        for e in [
            latest_snapshot(dir.path()).unwrap_err(),
            Snapshot::read(&newer).unwrap_err(),
        ] {
            assert!(
                e.contains(&newer.display().to_string()) && e.contains("(uid 65534)"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_newest_applied_snapshot_is_the_one_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(latest_snapshot(&dir.path().join("none")).unwrap(), None);
        let snap = |state: &str| Snapshot {
            time: "t".into(),
            host: "h".into(),
            origin: "qos apply".into(),
            state: state.into(),
            changes: Vec::new(),
        };
        let p = |n: &str| dir.path().join(n);
        snap("applied")
            .write(&p("qos-20261201T000000-000Z.json"))
            .unwrap();
        snap("applied")
            .write(&p("qos-20261202T000000-000Z.json"))
            .unwrap();
        snap("restored")
            .write(&p("qos-20261203T000000-000Z.json"))
            .unwrap();
        std::fs::write(p("qos-20261204T000000-000Z.json"), "not json").unwrap();
        assert_eq!(
            latest_snapshot(dir.path()).unwrap(),
            Some(p("qos-20261202T000000-000Z.json"))
        );
        assert_eq!(
            Snapshot::read(&p("qos-20261202T000000-000Z.json")).unwrap(),
            snap("applied")
        );
        assert!(Snapshot::read(&p("qos-20261204T000000-000Z.json"))
            .unwrap_err()
            .contains("not a rocewatch QoS snapshot"));
    }
}
