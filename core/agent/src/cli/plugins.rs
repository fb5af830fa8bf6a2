//! `rocewatch plugins`: every plugin's kind, origin, ABI, state and last error.

use anyhow::Result;
use clap::Args;

use super::output::print_json;
use super::show;
use super::source::SourceArgs;
use crate::app::App;

/// `rocewatch plugins`'s arguments.
#[derive(Debug, Args)]
pub struct PluginsArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[arg(long)]
    pub json: bool,
}

pub async fn run(a: PluginsArgs) -> Result<i32> {
    let PluginsArgs { source, json } = a;
    let cfg = source.load()?;
    let agent = App::start(cfg, None).await;
    let _ = agent.discover().await;
    let _ = agent.collect_all().await;
    let statuses = agent.registry.statuses();
    if json {
        print_json(&serde_json::to_value(&statuses)?)?;
    } else {
        print!("{}", show::plugins_text(&statuses));
    }
    Ok(0)
}
