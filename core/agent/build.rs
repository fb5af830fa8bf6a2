//! The git revision the binary is built from, for `rocewatch --version`:
//! `ROCEWATCH_GIT_REV` when set (a build from a source tarball), else `git rev-parse`,
//! else `unknown`.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=ROCEWATCH_GIT_REV");
    let rev = std::env::var("ROCEWATCH_GIT_REV")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ROCEWATCH_GIT_REV={rev}");
    // Built again when HEAD moves: HEAD itself, the branch it names, packed refs. Only
    // files that exist (a missing one would rebuild this crate every time).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = Path::new(&dir);
        let mut watch = vec![dir.join("HEAD"), dir.join("packed-refs")];
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(dir.join(r));
        }
        for p in watch.iter().filter(|p| p.is_file()) {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
}
