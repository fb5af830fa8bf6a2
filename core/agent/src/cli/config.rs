//! `rocewatch config check FILE` (with where each OTLP value came from),
//! `rocewatch config hash-password`.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Subcommand;

use crate::config::Config;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration file; errors name the key path. Exit status 1 when invalid.
    ///
    /// Web configuration files (`web_config_file`) it names are checked too: certificates
    /// and keys read, client CA, versions, bcrypt hashes.
    ///
    /// Example: rocewatch config check -c /etc/rocewatch/rocewatch.toml
    Check(CheckArgs),
    /// Print the bcrypt hash of a password read from standard input, for
    /// `basic_auth_users` in a web configuration file.
    ///
    /// Example:
    ///   read -rs PW && echo "$PW" | rocewatch config hash-password
    ///   # then in web.yml:  basic_auth_users: { prometheus: <the hash> }
    #[command(verbatim_doc_comment)]
    HashPassword {
        /// bcrypt cost (4-31); each step doubles the work of every check that is not cached.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(4..=31))]
        cost: u32,
    },
}

/// `rocewatch config check`'s arguments: the file as every command names it
/// (`-c/--config FILE`), or as the one positional argument it took first.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("file").required(true).args(["config", "path"])))]
pub struct CheckArgs {
    /// The configuration file (TOML) to check.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The same file, given without -c (the first spelling, kept).
    #[arg(value_name = "FILE", hide = true, conflicts_with = "config")]
    pub path: Option<PathBuf>,
}

impl CheckArgs {
    /// The file, however it was named.
    pub fn file(&self) -> &Path {
        self.config
            .as_deref()
            .or(self.path.as_deref())
            .expect("clap requires -c FILE or FILE")
    }
}

pub fn check(file: &Path) -> Result<i32> {
    match Config::load(Some(file)) {
        Ok(cfg) => {
            for (key, why) in rocewatch_remediation::warnings(&cfg.remediation, &cfg.rules) {
                eprintln!("rocewatch: {}: warning: {key}: {why}", file.display());
            }
            println!("{}: ok", file.display());
            for w in &cfg.otlp_sources.ignored {
                println!("warning: {w}");
            }
            // Where each OTLP value came from: the file, a ROCEWATCH_ or OTEL_ variable, or
            // the default (the command line's flags are not read here).
            if let Some(o) = &cfg.exporters.otlp {
                for line in cfg.otlp_sources.lines(o) {
                    println!("{line}");
                }
            } else if let Some(why) = &cfg.otlp_sources.disabled {
                println!("exporters.otlp: off ({why})");
            }
            Ok(0)
        }
        Err(e) => {
            eprintln!("rocewatch: {e}");
            Ok(1)
        }
    }
}

/// One line from standard input (without its newline) → its bcrypt hash on standard output.
pub fn hash_password(cost: u32) -> Result<i32> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        eprintln!("rocewatch: no password on standard input");
        return Ok(1);
    }
    // bcrypt reads 72 bytes; a longer password would match on its first 72 only.
    match bcrypt::non_truncating_hash(password, cost) {
        Ok(h) => println!("{h}"),
        Err(bcrypt::BcryptError::Truncation(n)) => {
            eprintln!("rocewatch: the password is {n} bytes; bcrypt uses at most 72: choose a shorter one");
            return Ok(1);
        }
        Err(e) => return Err(e.into()),
    }
    Ok(0)
}
