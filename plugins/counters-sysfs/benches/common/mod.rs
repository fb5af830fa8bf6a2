//! What the collector's benchmarks share.

use std::path::{Path, PathBuf};

/// The sysfs root to read: the first argument that is not an option, else a 16-port mlx5
/// host generated with `integration-tests/fixtures/generate.py --big` in the temporary
/// directory.
pub fn root_from_args() -> PathBuf {
    if let Some(r) = std::env::args().skip(1).find(|a| !a.starts_with('-')) {
        return PathBuf::from(r);
    }
    let dest = std::env::temp_dir().join("rocewatch-bench-host");
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration-tests/fixtures/generate.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg("--big")
        .arg(&dest)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dest.join("sys")
}
