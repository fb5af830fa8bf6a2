//! `rocewatch rules`: rule states from a running agent, or evaluated once here.

use anyhow::{Context, Result};

use super::args::RulesArgs;
use super::show;
use crate::app::{App, READ};

pub async fn run(a: RulesArgs) -> Result<i32> {
    let RulesArgs {
        url,
        once,
        source,
        json,
    } = a;
    let rows: Vec<serde_json::Value> = if once {
        let cfg = source.load()?;
        if cfg.rules.is_empty() {
            anyhow::bail!(
                "no [[rules]] in the configuration (configs/rules.toml has the default set)"
            );
        }
        let agent = App::start(cfg, Some(READ)).await;
        let _ = agent.discover().await;
        let _ = agent.collect_all().await;
        agent
            .pipeline
            .rule_status()
            .into_iter()
            .map(|s| serde_json::to_value(s).expect("plain data"))
            .collect()
    } else {
        let u = format!("{}/rules", url.trim_end_matches('/'));
        let body = reqwest::get(&u)
            .await
            .and_then(|r| r.error_for_status())
            .with_context(|| format!("asking the agent at {u} (is `rocewatch run --prometheus-listen` running there?)"))?
            .text()
            .await
            .with_context(|| format!("reading {u}"))?;
        let body: serde_json::Value =
            serde_json::from_str(&body).with_context(|| format!("{u}: not a rules document"))?;
        body["rules"].as_array().cloned().unwrap_or_default()
    };
    if json {
        println!("{}", serde_json::json!({ "rules": rows }));
    } else {
        print!("{}", show::rules_text(&rows));
    }
    Ok(0)
}
