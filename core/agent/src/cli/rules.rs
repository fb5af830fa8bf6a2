//! `rocewatch rules`: rule states from a running agent, or evaluated once here.

use anyhow::{Context, Result};

use super::args::RulesArgs;
use super::show;
use crate::app::{App, READ};

pub async fn run(a: RulesArgs) -> Result<i32> {
    let RulesArgs {
        url,
        ca_file,
        cert_file,
        key_file,
        user,
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
        let client = client(ca_file.as_deref(), cert_file.zip(key_file))?;
        let mut req = client.get(&u);
        if let Some(user) = &user {
            if !u.starts_with("https://") {
                eprintln!("rocewatch: warning: sending the password in the clear to {u}");
            }
            let (name, password) = user.split_once(':').unwrap_or((user, ""));
            req = req.basic_auth(name, Some(password));
        }
        let body = req
            .send()
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

/// The HTTP client for an agent's listener: its CA, a client certificate.
fn client(
    ca: Option<&std::path::Path>,
    identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
) -> Result<reqwest::Client> {
    let mut b = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30));
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).with_context(|| format!("--ca-file {}", ca.display()))?;
        b = b.add_root_certificate(
            reqwest::Certificate::from_pem(&pem)
                .with_context(|| format!("--ca-file {}: not a PEM certificate", ca.display()))?,
        );
    }
    if let Some((cert, key)) = identity {
        let mut pem =
            std::fs::read(&cert).with_context(|| format!("--cert-file {}", cert.display()))?;
        pem.extend(std::fs::read(&key).with_context(|| format!("--key-file {}", key.display()))?);
        b = b.identity(reqwest::Identity::from_pem(&pem).with_context(|| {
            format!(
                "--cert-file {} with --key-file {}",
                cert.display(),
                key.display()
            )
        })?);
    }
    b.build().context("building the HTTP client")
}
