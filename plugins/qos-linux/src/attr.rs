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
