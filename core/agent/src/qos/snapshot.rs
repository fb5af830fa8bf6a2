//! Snapshots: the values `qos apply --yes` is about to replace, written before the first
//! change; what `qos rollback` restores.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One changed setting in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapChange {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub setting: String,
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

impl Snapshot {
    pub fn read(path: &Path) -> Result<Snapshot, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a rocewatch QoS snapshot: {e}", path.display()))
    }

    /// Written whole to a temporary file, flushed, renamed over `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(self).expect("plain data"))?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// The newest snapshot of `dir` that can be rolled back (applied, or cut short while
/// applying).
pub fn latest_snapshot(dir: &Path) -> Result<Option<PathBuf>, String> {
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
        if let Ok(s) = Snapshot::read(&p) {
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
