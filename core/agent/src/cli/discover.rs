//! `rocewatch discover`: RDMA devices and ports, like ibdev2netdev.

use anyhow::{bail, Result};
use clap::Args;

use super::output::print_json;
use super::show;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_plugin_api::PluginKind;

/// `rocewatch discover`'s arguments.
#[derive(Debug, Args)]
pub struct DiscoverArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print JSON: {"devices":[{"name","node_guid","fw_ver","ports":[...]}]}.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(a: DiscoverArgs) -> Result<i32> {
    let DiscoverArgs { source, json } = a;
    let cfg = source.load()?;
    let root = cfg.agent.sysfs_root.clone();
    let agent = App::start(cfg, Some(&[PluginKind::Discovery])).await;
    let inv = match agent.discover().await {
        Ok(inv) => inv,
        Err(e) if e.is_unsupported() => {
            eprintln!("rocewatch: no RDMA devices under {}", root.display());
            Default::default()
        }
        Err(e) => bail!("discovery failed: {e}"),
    };
    if json {
        print_json(&show::inventory_json(&inv))?;
    } else {
        print!("{}", show::inventory_text(&inv));
    }
    Ok(0)
}
