//! `rocewatch collect --once`: every counter once, in one of four formats.

use anyhow::{bail, Result};

use super::args::{CollectArgs, CollectFormat};
use super::output::print_json;
use super::show;
use crate::app::App;
use rocewatch_plugin_api::PluginKind;

pub async fn run(a: CollectArgs) -> Result<i32> {
    let CollectArgs {
        once,
        source,
        format,
    } = a;
    if !once {
        bail!("collect needs --once (use `rocewatch run` to collect continuously)");
    }
    let cfg = source.load()?;
    let root = cfg.agent.sysfs_root.clone();
    let cfg_interval = cfg.agent.interval;
    let agent = App::start(cfg, Some(&[PluginKind::Collector])).await;
    let (result, failures) = agent.collect_all().await;
    for f in &failures {
        eprintln!("rocewatch: {f}");
    }
    for e in &result.errors {
        eprintln!("rocewatch: partial: {}: {}", e.target, e.message);
    }
    if result.samples.is_empty() && failures.is_empty() {
        eprintln!(
            "rocewatch: no samples (no RDMA devices under {}?)",
            root.display()
        );
    }
    match format {
        CollectFormat::Json => {
            print_json(&serde_json::json!({"samples": result.samples, "errors": result.errors}))?
        }
        CollectFormat::Text => print!("{}", show::samples_text(&result.samples)),
        CollectFormat::Collectd => {
            let interval = cfg_interval;
            for s in &result.samples {
                let v = crate::export::collectd::value_list(
                    s,
                    &agent.host_name,
                    std::time::SystemTime::now(),
                    interval,
                );
                println!("{}", crate::export::collectd::putval(&v));
            }
        }
        CollectFormat::Prometheus => print!(
            "{}",
            crate::export::prometheus::render_samples(
                &result.samples,
                &agent.store().descriptors(),
                crate::export::prometheus::Format::Text
            )
        ),
    }
    Ok(if failures.is_empty() { 0 } else { 1 })
}
