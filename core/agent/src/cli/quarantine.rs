//! `rocewatch quarantine`: show, enter by hand, release.
//!
//! `show` reads the file as `rocewatch health` does (no link followed, a regular file of
//! bounded size, in whichever user's state directory), so root sees what health reports
//! in the agent's user's directory, and prints its text fields on one line (control,
//! format and separator characters as spaces; `--json` escapes them); `enter` and `release` change it as that directory's
//! owner, under its lock (`rocewatch_runtime::quarantine::operator`). This file is the
//! arguments' handling and the printing only.

use anyhow::{Context, Result};
use clap::Subcommand;

use super::output::print_json;
use super::source::SourceArgs;
use rocewatch_runtime::quarantine::operator;

/// `rocewatch quarantine`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// Whether the host is in quarantine, since when, by whom and why.
    ///
    /// Exit status: 0 not in quarantine, 1 in quarantine, 2 on an error.
    Show {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON: {"quarantine": null} or {"quarantine": {"reason","origin","since",
        /// "since_unix","labels"}}.
        #[arg(long)]
        json: bool,
    },
    /// Put the host in quarantine by hand (audited): health says unhealthy, --slurm
    /// drains the node, until `quarantine release`.
    ///
    /// Example: rocewatch quarantine enter --reason "flapping cable on mlx5_3, ticket 4711"
    #[command(verbatim_doc_comment)]
    Enter {
        #[command(flatten)]
        source: SourceArgs,
        /// Why, in one line (it lands in the audit log, the metric and Slurm's reason).
        #[arg(long)]
        reason: String,
    },
    /// End the quarantine (audited with the reason): the only way one ends, unless
    /// [health] release_after lets a rule's quarantine recover. Restarting the agent or
    /// rebooting ends none.
    ///
    /// Example: rocewatch quarantine release --reason "cable replaced, ticket 4711"
    #[command(verbatim_doc_comment)]
    Release {
        #[command(flatten)]
        source: SourceArgs,
        /// Why it ends, in one line (audited).
        #[arg(long)]
        reason: String,
    },
}

/// The most of a field of the file `show` prints (a reason is one line).
const SHOWN_MAX: usize = 1024;

pub fn run(c: QuarantineCommand) -> Result<i32> {
    let file = operator::this_hosts_file();
    match c {
        QuarantineCommand::Show { source, json } => {
            source.load()?;
            let q = file.read_status()?;
            if json {
                print_json(&serde_json::json!({ "quarantine": q }))?;
            } else {
                // The file is anyone's who could write the state directory: what it says
                // is printed as text on one line (no escape, return or bidi override).
                let text = |s: &str| rocewatch_health::bounded(s, SHOWN_MAX);
                match &q {
                    Some(q) => println!(
                        "in quarantine since {} ({}): {}",
                        text(&q.since),
                        text(&q.origin),
                        text(&q.reason)
                    ),
                    None => println!("not in quarantine ({})", file.path().display()),
                }
            }
            Ok(i32::from(q.is_some()))
        }
        QuarantineCommand::Enter { source, reason } => {
            let cfg = source.load()?;
            let audit = cfg.remediation.audit();
            if let Some(q) = operator::enter(&file, &reason, &audit).context("quarantine enter")? {
                println!("in quarantine: {}", q.reason);
            } else {
                let was = file.read()?.map(|q| q.reason).unwrap_or_default();
                println!("already in quarantine (kept as it is): {was}");
            }
            Ok(0)
        }
        QuarantineCommand::Release { source, reason } => {
            let cfg = source.load()?;
            let audit = cfg.remediation.audit();
            match operator::release(&file, &reason, &audit).context("quarantine release")? {
                Some(q) => println!("released (in quarantine since {}: {})", q.since, q.reason),
                None => println!("not in quarantine: nothing to release"),
            }
            Ok(0)
        }
    }
}
