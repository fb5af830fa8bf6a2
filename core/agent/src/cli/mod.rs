//! The command line: `args` is the top level of the grammar (clap: `Cli`, the `Command`
//! enum), `source` the options several commands share; one file per command holds that
//! command's arguments at its top, then does the work and prints; `show` renders
//! inventories, samples, rules and QoS state as text, `output` sets up logging,
//! `agent_logs` sends it over OTLP as well (opt-in). `main.rs` only parses and calls
//! [`run`].

mod agent_logs;
mod args;
mod bandwidth;
mod capture;
mod collect;
mod collectd;
mod config;
mod congestion;
mod demo;
mod discover;
mod doctor;
#[cfg(test)]
mod duration_flags;
mod env;
mod fleet;
mod health;
mod manuals;
mod optics;
mod optics_host;
mod output;
mod plugins;
mod preflight;
mod preflight_run;
mod probe;
mod progress;
mod qos;
mod quarantine;
mod rails;
mod rules;
mod run;
pub mod show;
mod source;
mod suggest;
mod terminal;
mod top;
mod top_view;

pub use args::{Cli, Command};
pub use suggest::{parse, parse_from};

use anyhow::Result;

use config::ConfigCommand;

/// Run a parsed command line; the returned code is the process exit status.
pub async fn run(cli: Cli) -> Result<i32> {
    let default_level = match cli.command {
        Command::Run(_) | Command::Demo(_) => "info",
        // Commands that wait on plugins: a plugin call that fails or times out is said
        // when it happens (why the wait was long), not only in the report after it.
        Command::Doctor(_)
        | Command::Congestion(_)
        | Command::Bandwidth(_)
        | Command::Capture(_) => "error,rocewatch_runtime::host::call=warn",
        _ => "error",
    };
    output::init_logging(
        cli.log_format.unwrap_or_default(),
        cli.log_level.as_deref().unwrap_or(default_level),
    );
    match cli.command {
        Command::Discover(a) => discover::run(a).await,
        Command::Collect(a) => collect::run(a).await,
        Command::Run(a) => run::run(a).await,
        Command::Plugins(a) => plugins::run(a).await,
        Command::Rules(a) => rules::run(a).await,
        Command::Probe(a) => probe::run(a).await,
        Command::Bandwidth(a) => bandwidth::run(a).await,
        Command::Preflight(a) => preflight::run(a).await,
        Command::Fleet(c) => fleet::run(c).await,
        Command::Config(ConfigCommand::Check(a)) => config::check(a.file()),
        Command::Config(ConfigCommand::HashPassword { cost }) => config::hash_password(cost),
        Command::Qos(c) => qos::run(c).await,
        Command::Doctor(a) => doctor::run(a).await,
        Command::Congestion(a) => congestion::run(a).await,
        Command::Health(a) => health::run(a).await,
        Command::Optics(a) => optics::run(a),
        Command::Quarantine(c) => quarantine::run(c),
        Command::Env(a) => env::run(a).await,
        Command::Capture(a) => capture::run(a).await,
        Command::Top(a) => top::run(a).await,
        Command::Demo(a) => demo::run(a).await,
        Command::CollectdExec(a) => collectd::run(a).await,
        Command::CollectdTypes => collectd::types(),
        Command::Completions { shell } => manuals::completions(shell),
        Command::ManPages { dir } => manuals::man_pages(&dir),
        Command::MetricsDoc => {
            print!("{}", rocewatch_metrics::doc::render_markdown());
            Ok(0)
        }
    }
}
