//! The command line as other tools take it: shell completions (clap_complete), manual
//! pages (clap_mangen), and the long version: the release, the git revision it was built
//! from and the plugin ABI it hosts.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

#[cfg(test)]
use super::args::long_version;
use super::args::{Cli, CompletionShell};

/// Print the completion script for `shell`.
pub fn completions(shell: CompletionShell) -> Result<i32> {
    let shell = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "rocewatch", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(0)
}

/// Write a manual page for the command and each visible subcommand, at any depth
/// (`rocewatch-qos-apply.1`), into `dir`. Each file is created new: an existing one (or
/// a link in its place) is an error naming it, never written through.
pub fn man_pages(dir: &Path) -> Result<i32> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_pages(cmd, dir, &mut written)?;
    written.sort();
    for p in &written {
        println!("{p}");
    }
    Ok(0)
}

fn write_pages(cmd: clap::Command, dir: &Path, written: &mut Vec<String>) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        write_pages(sub, dir, written)?;
    }
    let man = clap_mangen::Man::new(cmd);
    let name = man.get_filename();
    let mut page = Vec::new();
    man.render(&mut page)?;
    let path = dir.join(&name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("{}: (give a new or empty directory)", path.display()))?;
    f.write_all(&page)
        .with_context(|| format!("writing {}", path.display()))?;
    written.push(name);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_version_names_the_revision_and_the_abi() {
        let v = long_version();
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")), "{v}");
        assert!(v.contains(" (git "), "{v}");
        assert!(
            v.ends_with(&format!(
                ", plugin ABI {}.{})",
                rocewatch_plugin_sdk::abi::ABI_MAJOR,
                rocewatch_plugin_sdk::abi::ABI_MINOR
            )),
            "{v}"
        );
    }

    /// Every visible command has its page, a page is never written over, and the pages
    /// name their commands as man would list them.
    #[test]
    fn man_pages_cover_every_visible_command_and_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        man_pages(dir.path()).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for want in [
            "rocewatch.1",
            "rocewatch-probe.1",
            "rocewatch-doctor.1",
            "rocewatch-qos-apply.1",
            "rocewatch-completions.1",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("man-pages")), "{names:?}");
        let top = std::fs::read_to_string(dir.path().join("rocewatch.1")).unwrap();
        assert!(top.contains(".TH rocewatch 1"), "{top}");
        let e = man_pages(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("rocewatch"), "{e:#}");
    }
}
