//! One grammar across commands (docs/AGENT.md, "One grammar"), checked over every
//! command's clap definition: a flag that means the same is spelt the same everywhere,
//! and the first spellings, kept for scripts, are hidden aliases that `--help` never shows.

use clap::{ArgAction, CommandFactory};

/// Spellings replaced by the shared one: (old, use instead).
const REPLACED: &[(&str, &str)] = &[
    ("this-host", "--host"),
    ("url", "--agent"),
    (
        "port",
        "--cm-port (the RDMA CM port) or --tcp-port (the side channel)",
    ),
    ("min-bandwidth-share", "--min-share"),
    ("fleet-config", "-c/--config"),
];

/// Commands that read a configuration file without also reading sysfs (every command with
/// `--sysfs-root` reads one as well).
const READS_CONFIG: &[&str] = &["rocewatch config check", "rocewatch fleet simulate"];

/// The flags that say where the host is read: one spelling points any command at a
/// fixture tree or at the host's trees mounted in a pod (`--sysfs-root /host/sys
/// --procfs-root /host/proc --rootfs /host`).
const HOST_ROOTS: &[&str] = &["sysfs-root", "procfs-root", "rootfs"];

/// Commands that read the host beyond sysfs, and the trees each reads: each takes the
/// flag of every tree it reads. A command taking `--procfs-root` or `--rootfs` must be
/// listed, so the list stays what the commands do.
const READS_HOST_ROOTS: &[(&str, &[&str])] = &[
    ("rocewatch doctor", HOST_ROOTS),
    ("rocewatch health", HOST_ROOTS),
    // The resources collector's `<pid>/cgroup` and `<pid>/comm`.
    ("rocewatch top", &["sysfs-root", "procfs-root"]),
    ("rocewatch collect", &["sysfs-root", "procfs-root"]),
    ("rocewatch run", &["sysfs-root", "procfs-root"]),
];

/// Every command and subcommand, with its full name (`rocewatch qos apply`).
fn every_command(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
    out.push((path.to_string(), cmd.clone()));
    for sub in cmd.get_subcommands() {
        if sub.get_name() != "help" {
            every_command(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
}

fn long(cmd: &clap::Command, name: &str) -> Option<clap::Arg> {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(name))
        .cloned()
}

/// What is inconsistent in one command's flags, each said with the fix.
fn problems_of(
    path: &str,
    cmd: &clap::Command,
    reads_host_roots: &[(&str, &[&str])],
) -> Vec<String> {
    let mut out = Vec::new();
    for a in cmd.get_arguments().filter(|a| !a.is_global_set()) {
        let Some(name) = a.get_long() else { continue };
        if a.is_hide_set() {
            continue;
        }
        if let Some((_, new)) = REPLACED.iter().find(|(old, _)| *old == name) {
            out.push(format!(
                "{path}: --{name} is shown; the grammar says {new} (keep --{name} as a hidden alias)"
            ));
        }
        if name == "format" {
            let values: Vec<String> = a
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            if values.iter().any(|v| v == "json") && values.len() <= 2 {
                out.push(format!(
                    "{path}: --format {values:?} is --json under another name: hide it"
                ));
            }
        }
        if name == "json" && !matches!(a.get_action(), ArgAction::SetTrue) {
            out.push(format!("{path}: --json takes a value; it is a switch"));
        }
        if name == "config" && a.get_short() != Some('c') {
            out.push(format!("{path}: --config without -c"));
        }
    }
    let json_format = long(cmd, "format").is_some_and(|f| {
        f.get_possible_values()
            .iter()
            .any(|v| v.get_name() == "json")
    });
    let json = long(cmd, "json").is_some_and(|j| !j.is_hide_set());
    if json_format && !json {
        out.push(format!(
            "{path}: --format json without --json (add --json, keep --format)"
        ));
    }
    let reads_config = long(cmd, "sysfs-root").is_some() || READS_CONFIG.contains(&path);
    let config =
        long(cmd, "config").is_some_and(|c| !c.is_hide_set() && c.get_short() == Some('c'));
    if reads_config && !config {
        out.push(format!(
            "{path}: reads a configuration without -c/--config FILE"
        ));
    }
    out.extend(host_root_problems(path, cmd, reads_host_roots));
    out
}

/// A command that reads the host beyond sysfs without the flag of a tree it reads, or
/// that takes such a flag without being listed as reading that tree.
fn host_root_problems(path: &str, cmd: &clap::Command, listed: &[(&str, &[&str])]) -> Vec<String> {
    let shown = |name: &str| long(cmd, name).is_some_and(|a| !a.is_hide_set());
    let reads: &[&str] = listed
        .iter()
        .find(|(p, _)| *p == path)
        .map_or(&[], |(_, trees)| trees);
    let mut out: Vec<String> = reads
        .iter()
        .filter(|n| !shown(n))
        .map(|n| format!("{path}: reads the host beyond sysfs without --{n}"))
        .collect();
    out.extend(
        HOST_ROOTS[1..]
            .iter()
            .filter(|n| shown(n) && !reads.contains(n))
            .map(|n| {
                format!("{path}: takes --{n} but is not listed in READS_HOST_ROOTS as reading that tree (list it, with every tree it reads)")
            }),
    );
    out
}

fn problems(root: &clap::Command, reads_host_roots: &[(&str, &[&str])]) -> Vec<String> {
    let mut cmd = root.clone();
    cmd.build();
    let mut all = Vec::new();
    every_command(&cmd, "rocewatch", &mut all);
    assert!(all.len() > 20, "only {} commands found", all.len());
    for c in READS_CONFIG
        .iter()
        .chain(reads_host_roots.iter().map(|(c, _)| c))
    {
        assert!(
            all.iter().any(|(p, _)| p == c),
            "{c}: listed as reading a configuration or the host, but there is no such command"
        );
    }
    all.iter()
        .flat_map(|(path, c)| problems_of(path, c, reads_host_roots))
        .collect()
}

#[test]
fn every_command_speaks_one_grammar() {
    let found = problems(&rocewatch::cli::Cli::command(), READS_HOST_ROOTS);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The check itself: a command planted with each kind of inconsistency is caught, once
/// for each.
#[test]
fn an_inconsistent_flag_is_caught() {
    use clap::Arg;
    let flag = |name: &'static str| Arg::new(name).long(name).action(ArgAction::SetTrue);
    let value = |name: &'static str| Arg::new(name).long(name);
    let bad = rocewatch::cli::Cli::command()
        .subcommand(clap::Command::new("planted-host").arg(value("this-host")))
        .subcommand(
            clap::Command::new("planted-format")
                .arg(value("format").value_parser(["text", "json"])),
        )
        .subcommand(
            clap::Command::new("planted-config")
                .arg(value("sysfs-root"))
                .arg(flag("json")),
        )
        .subcommand(clap::Command::new("planted-json").arg(value("json")))
        .subcommand(
            clap::Command::new("planted-roots")
                .arg(value("config").short('c'))
                .arg(value("sysfs-root"))
                .arg(value("procfs-root")),
        )
        .subcommand(
            clap::Command::new("planted-reader")
                .arg(value("config").short('c'))
                .arg(value("sysfs-root")),
        );
    let found = problems(
        &bad,
        &[
            READS_HOST_ROOTS,
            &[("rocewatch planted-reader", HOST_ROOTS)],
        ]
        .concat(),
    );
    let expect = [
        "rocewatch planted-host: --this-host is shown",
        "rocewatch planted-format: --format [\"text\", \"json\"] is --json under another name",
        "rocewatch planted-format: --format json without --json",
        "rocewatch planted-config: reads a configuration without -c/--config FILE",
        "rocewatch planted-json: --json takes a value",
        "rocewatch planted-roots: takes --procfs-root but is not listed",
        "rocewatch planted-reader: reads the host beyond sysfs without --procfs-root",
        "rocewatch planted-reader: reads the host beyond sysfs without --rootfs",
    ];
    for e in expect {
        assert_eq!(
            found.iter().filter(|f| f.starts_with(e)).count(),
            1,
            "{e} not found once in:\n{}",
            found.join("\n")
        );
    }
    assert_eq!(found.len(), expect.len(), "{}", found.join("\n"));
}

/// The old spellings still parse, to the same values as the new ones (those whose two
/// spellings are one field; `config check FILE`, `--format json`: tests/grammar.rs in
/// integration-tests, through the binary).
#[test]
fn old_spellings_parse_as_the_new_ones() {
    let pairs: &[(&[&str], &[&str])] = &[
        (
            &["fleet", "topology", "--this-host", "h1"],
            &["fleet", "topology", "--host", "h1"],
        ),
        (
            &[
                "preflight",
                "--this-host",
                "h1",
                "--min-bandwidth-share",
                "0.5",
            ],
            &["preflight", "--host", "h1", "--min-share", "0.5"],
        ),
        (
            &["rules", "--url", "http://a:1"],
            &["rules", "--agent", "http://a:1"],
        ),
        (
            &["probe", "p", "--cm", "--port", "7"],
            &["probe", "p", "--cm", "--cm-port", "7"],
        ),
        (
            &[
                "fleet",
                "simulate",
                "--topology",
                "t",
                "--out",
                "o",
                "--fleet-config",
                "f",
            ],
            &[
                "fleet",
                "simulate",
                "--topology",
                "t",
                "--out",
                "o",
                "-c",
                "f",
            ],
        ),
    ];
    for (old, new) in pairs {
        let parse = |args: &[&str]| {
            let argv = std::iter::once("rocewatch").chain(args.iter().copied());
            format!(
                "{:?}",
                rocewatch::cli::parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"))
            )
        };
        assert_eq!(parse(old), parse(new), "{old:?} against {new:?}");
    }
}
