//! `rocewatch rules`: rule states from a running agent, or evaluated once here.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::show;
use super::source::SourceArgs;
use crate::app::{App, READ};

/// `rocewatch rules`'s arguments.
#[derive(Debug, Args)]
pub struct RulesArgs {
    /// The agent's Prometheus listener (https:// when it has a web configuration with TLS).
    #[arg(
        long = "agent",
        alias = "url",
        default_value = "http://127.0.0.1:9464",
        value_name = "URL"
    )]
    pub url: String,
    /// The CA that signed the listener's certificate (PEM), for an https:// URL.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) for a listener that requires one; with --key-file.
    #[arg(long, value_name = "FILE", requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert_file")]
    pub key_file: Option<PathBuf>,
    /// USER:PASSWORD for a listener with basic_auth_users (as curl's --user); prefer the
    /// environment variable, which other users cannot read in the process list.
    #[arg(
        long,
        value_name = "USER:PASSWORD",
        env = "ROCEWATCH_BASIC_AUTH",
        hide_env_values = true
    )]
    pub user: Option<String>,
    /// Evaluate the configured rules once, here, instead of asking an agent.
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub source: SourceArgs,
    #[arg(long)]
    pub json: bool,
}

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
        let mut cfg = source.load()?;
        if cfg.rules.is_empty() && source.config.is_none() {
            // Without a file, the default set (configs/rules.toml), as the demo runs it.
            cfg.rules = crate::demo::default_rules().context("the default rules")?;
            eprintln!("rocewatch: no --config: the default rules (configs/rules.toml)");
        }
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
