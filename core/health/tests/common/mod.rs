//! What the health tests share.

use std::path::PathBuf;
use std::sync::OnceLock;

/// A state directory of this call's own, which does not exist yet (no quarantine there):
/// the `link` check keeps its readings in the state directory, so a path inside a
/// fixture tree would be written into the repository and carry one test's readings into
/// the next. All of them under one temporary directory of this test process.
pub fn fresh_state_dir() -> PathBuf {
    static PARENT: OnceLock<tempfile::TempDir> = OnceLock::new();
    let parent = PARENT.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
    tempfile::tempdir_in(parent.path())
        .expect("a temporary directory")
        .keep()
        .join("state")
}
