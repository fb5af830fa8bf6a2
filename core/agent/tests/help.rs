//! Every command's `--help`, byte for byte, against `tests/help/*.txt`: the grammar may
//! move between files (each command's arguments beside its handler), but what a user reads
//! changes only on purpose. After a deliberate change, regenerate with
//! `SNAPSHOTS=overwrite cargo test -p rocewatch --test help` and read the diff.

use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// `rocewatch`, `rocewatch qos`, `rocewatch qos apply`, ...: each command and the long help
/// `--help` prints for it.
fn every_help(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
    let mut c = cmd.clone();
    out.push((path.to_string(), c.render_long_help().to_string()));
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        every_help(sub, &format!("{path}-{}", sub.get_name()), out);
    }
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/help")
}

#[test]
fn every_commands_help_is_as_recorded() {
    let mut cmd = rocewatch::cli::Cli::command();
    cmd.build();
    let mut helps = Vec::new();
    every_help(&cmd, "rocewatch", &mut helps);
    assert!(helps.len() > 20, "only {} commands found", helps.len());
    let dir = golden_dir();
    if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
        std::fs::create_dir_all(&dir).unwrap();
        for old in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(old.unwrap().path()).unwrap();
        }
        for (name, text) in &helps {
            std::fs::write(dir.join(format!("{name}.txt")), text).unwrap();
        }
        return;
    }
    let mut problems = Vec::new();
    for (name, text) in &helps {
        let file = dir.join(format!("{name}.txt"));
        match std::fs::read_to_string(&file) {
            Ok(want) if &want == text => {}
            Ok(want) => problems.push(format!(
                "{name}: --help differs from {}\n--- recorded\n{want}\n--- now\n{text}",
                file.display()
            )),
            Err(e) => problems.push(format!("{name}: {}: {e}", file.display())),
        }
    }
    let names: Vec<String> = helps.iter().map(|(n, _)| format!("{n}.txt")).collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let f = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !names.contains(&f) {
            problems.push(format!("{f}: recorded, but no such command now"));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n(after a deliberate change: SNAPSHOTS=overwrite cargo test -p rocewatch --test help)",
        problems.join("\n\n")
    );
}
