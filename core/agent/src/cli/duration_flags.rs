//! Every duration flag refuses what its configuration key refuses: a value past the most
//! the setting allows (time arithmetic would overflow: `Instant + d` panics), and 0 where
//! 0 would run something back to back. The table names every flag; a flag added without a
//! line here fails the test.

use clap::{CommandFactory, Parser};

use super::args::Cli;

/// (command line before the flag, the flag, whether 0 is allowed and what it means).
const FLAGS: &[(&[&str], &str, bool)] = &[
    (&["run"], "--interval", false),
    (&["run"], "--export-interval", false),
    (&["run"], "--duration", false),
    (&["bandwidth", "10.0.0.1"], "--duration", false),
    (&["bandwidth", "10.0.0.1"], "--timeout", false),
    (&["doctor"], "--window", false),
    (&["doctor"], "--log-window", false),
    (&["congestion"], "--window", false),
    (&["capture", "mlx5_0"], "--duration", false),
    (&["demo"], "--interval", false),
    (&["demo"], "--duration", false),
    (&["probe", "10.0.0.1"], "--timeout", false),
    // Probes one after another, as `ping -i 0`: --count bounds them.
    (&["probe", "10.0.0.1"], "--interval", true),
    (&["top"], "--interval", false),
    (&["preflight"], "--duration", false),
    (&["preflight"], "--patience", false),
    (
        &["fleet", "simulate", "--topology", "t.csv", "--out", "o"],
        "--duration",
        false,
    ),
    (
        &["fleet", "simulate", "--topology", "t.csv", "--out", "o"],
        "--round",
        false,
    ),
    (
        &["fleet", "simulate", "--topology", "t.csv", "--out", "o"],
        "--scrape",
        false,
    ),
    (
        &["fleet", "simulate", "--topology", "t.csv", "--out", "o"],
        "--fault-after",
        true,
    ),
];

/// Every flag whose value is a duration (`value_name = "DUR"`), as "command --flag".
fn duration_flags(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for a in cmd.get_arguments() {
        let is_duration = a
            .get_value_names()
            .is_some_and(|names| names.iter().any(|n| n.as_str() == "DUR"));
        if is_duration {
            let long = a.get_long().expect("duration flags are long options");
            out.push(format!("{path} --{long}").trim().to_string());
        }
    }
    for sub in cmd.get_subcommands() {
        duration_flags(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

/// The subcommands a command line starts with (`fleet simulate`), as `duration_flags`
/// names them.
fn command_path(prefix: &[&str]) -> String {
    let mut cmd = Cli::command();
    let mut path = Vec::new();
    for w in prefix {
        match cmd.find_subcommand(w) {
            Some(sub) => {
                path.push(*w);
                cmd = sub.clone();
            }
            None => break,
        }
    }
    path.join(" ")
}

fn parse(prefix: &[&str], flag: &str, value: &str) -> Result<Cli, clap::Error> {
    let mut argv = vec!["rocewatch"];
    argv.extend(prefix);
    argv.extend([flag, value]);
    Cli::try_parse_from(argv)
}

#[test]
fn the_table_names_every_duration_flag() {
    let mut found = Vec::new();
    duration_flags(&Cli::command(), "", &mut found);
    found.sort();
    let mut listed: Vec<String> = FLAGS
        .iter()
        .map(|(prefix, flag, _)| format!("{} {flag}", command_path(prefix)))
        .collect();
    listed.sort();
    assert_eq!(found, listed);
}

#[test]
fn every_duration_flag_refuses_what_would_overflow_or_busy_loop() {
    for (prefix, flag, zero_allowed) in FLAGS {
        let name = format!("{} {flag}", command_path(prefix));
        // What the default or a sensible value gives: accepted.
        parse(prefix, flag, "2s").unwrap_or_else(|e| panic!("{name} 2s: {e}"));
        for huge in ["18446744073709551615s", "1000years"] {
            let e = parse(prefix, flag, huge)
                .err()
                .unwrap_or_else(|| panic!("{name} {huge} was accepted"));
            let text = e.to_string();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{text}");
            assert!(
                text.contains(flag) && text.contains("at most"),
                "{name} {huge}: the error names the flag and the bound: {text}"
            );
        }
        let zero = parse(prefix, flag, "0s");
        match (zero_allowed, zero) {
            (true, Ok(_)) => {}
            (false, Err(e)) => {
                let text = e.to_string();
                assert!(
                    text.contains(flag) && text.contains("at least"),
                    "{name} 0s: the error names the flag and the bound: {text}"
                );
            }
            (true, Err(e)) => panic!("{name} 0s refused: {e}"),
            (false, Ok(_)) => panic!("{name} 0s was accepted"),
        }
    }
}
