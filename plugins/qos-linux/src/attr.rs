//! Attribute files: reading a setting from one, writing one and reading it back; the
//! `Setting` and `ApplyOutcome` constructors every module uses.

use std::path::Path;

use rocewatch_plugin_api::*;

pub(crate) fn value(v: impl Into<String>) -> Setting {
    Setting::Value(v.into())
}

/// Read one attribute file: its trimmed text, or `None` when it does not exist.
pub(crate) fn read(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// A setting from a file: its value, `unsupported` when the file is not there.
pub(crate) fn file_setting(path: &Path) -> Setting {
    match read(path) {
        Ok(Some(v)) => value(v),
        Ok(None) => Setting::Unsupported,
        Err(e) => Setting::Unknown(e),
    }
}

pub(crate) fn outcome(applied: bool, message: String, previous: Option<String>) -> ApplyOutcome {
    ApplyOutcome {
        applied,
        message,
        previous,
    }
}

/// Write `to` into an attribute file that must exist, and read it back; in a dry run,
/// say what would be written.
pub(crate) fn write_file(
    file: &Path,
    to: &str,
    dry_run: bool,
) -> Result<ApplyOutcome, PluginError> {
    let previous = match read(file).map_err(PluginError::failed)? {
        Some(v) => v,
        None => {
            return Err(PluginError::Unsupported(format!(
                "{} is not there",
                file.display()
            )))
        }
    };
    if dry_run {
        return Ok(outcome(
            false,
            format!(
                "would write {to:?} to {} (now {previous:?})",
                file.display()
            ),
            Some(previous),
        ));
    }
    std::fs::write(file, to)
        .map_err(|e| PluginError::failed(format!("write {to:?} to {}: {e}", file.display())))?;
    let now = read(file).map_err(PluginError::failed)?.unwrap_or_default();
    let msg = if now == to {
        format!("{}: {previous:?} -> {to:?}", file.display())
    } else {
        format!(
            "{}: {previous:?} -> {to:?} (reads back as {now:?})",
            file.display()
        )
    };
    Ok(outcome(true, msg, Some(previous)))
}

/// [`write_file`], and when the file reads back other than `to` (a driver that cut the
/// value to its field, or refused it quietly), the previous value written back and an
/// error saying what was read.
pub(crate) fn write_file_checked(
    file: &Path,
    to: &str,
    dry_run: bool,
) -> Result<ApplyOutcome, PluginError> {
    let o = write_file(file, to, dry_run)?;
    if dry_run {
        return Ok(o);
    }
    let now = read(file).map_err(PluginError::failed)?.unwrap_or_default();
    if now == to {
        return Ok(o);
    }
    let previous = o.previous.clone().unwrap_or_default();
    let restored = std::fs::write(file, &previous).is_ok()
        && read(file).ok().flatten().as_deref() == Some(previous.as_str());
    Err(PluginError::failed(format!(
        "{}: wrote {to:?}, reads back {now:?}; {}",
        file.display(),
        if restored {
            format!("{previous:?} written back")
        } else {
            format!("writing {previous:?} back failed too")
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_that_does_not_read_back_is_undone_and_an_error() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("rp_ai_rate");
        std::fs::write(&f, "5").unwrap();
        let o = write_file_checked(&f, "10", false).unwrap();
        assert_eq!(o.previous.as_deref(), Some("5"));
        // A file that keeps nothing (as a driver that refuses quietly): /dev/null.
        let null = d.path().join("np_cnp_dscp");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        let e = match write_file_checked(&null, "46", false) {
            Err(PluginError::Failed(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            e.contains("wrote \"46\", reads back \"\"; \"\" written back"),
            "{e}"
        );
    }
}
