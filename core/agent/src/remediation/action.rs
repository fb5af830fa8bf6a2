//! What an action receives (the breach) and the `exec` action: a command, never through a
//! shell, with the breach in `ROCEWATCH_*` variables and as JSON on standard input.

use std::collections::BTreeMap;

use serde::Serialize;

use super::config::{ActionKind, Event};

/// What the action receives (stdin of `exec`, body of `webhook`).
#[derive(Debug, Clone, Serialize)]
pub struct Breach {
    pub rule: String,
    pub metric: String,
    pub event: Event,
    pub action: String,
    pub severity: String,
    pub labels: BTreeMap<String, String>,
    pub value: Option<f64>,
    /// Recent values, oldest first: (seconds ago, value).
    pub recent: Vec<(f64, f64)>,
    pub dry_run: bool,
}

/// What an action would do, for dry runs and the audit log.
pub fn describe(kind: &ActionKind) -> String {
    match kind {
        ActionKind::Log {} => "log the breach".into(),
        ActionKind::QosApply {} => {
            "re-apply [[qos.desired]] to the settings the rule's labels select (snapshot, audit, undo on failure)".into()
        }
        ActionKind::Plugin { plugin } => format!("call remediation plugin {plugin:?}"),
        ActionKind::Exec { command } => format!("run {command:?}"),
        ActionKind::Webhook { url, .. } => format!("POST the breach to {url}"),
    }
}

/// `ROCEWATCH_LABEL_RDMA_DEVICE` for `rdma.device`.
pub(super) fn env_name(label: &str) -> String {
    let mut s = String::from("ROCEWATCH_LABEL_");
    s.extend(label.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    s
}

pub(super) async fn run_exec(command: &[String], b: &Breach) -> Result<String, String> {
    use tokio::io::AsyncWriteExt;
    let mut c = tokio::process::Command::new(&command[0]);
    c.args(&command[1..])
        .env("ROCEWATCH_RULE", &b.rule)
        .env(
            "ROCEWATCH_EVENT",
            if b.event == Event::Firing {
                "firing"
            } else {
                "clearing"
            },
        )
        .env("ROCEWATCH_ACTION", &b.action)
        .env("ROCEWATCH_SEVERITY", &b.severity)
        .env(
            "ROCEWATCH_VALUE",
            b.value.map(|v| v.to_string()).unwrap_or_default(),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in &b.labels {
        c.env(env_name(k), v);
    }
    let mut child = c
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", command[0]))?;
    if let Some(mut stdin) = child.stdin.take() {
        let body = serde_json::to_vec(b).expect("plain data");
        // A command that does not read its input is not an error.
        let _ = stdin.write_all(&body).await;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("{:?}: {e}", command[0]))?;
    let tail = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let s = s.trim();
        let start = s.len().saturating_sub(400);
        let start = (start..=s.len())
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(s.len());
        s[start..].to_string()
    };
    if out.status.success() {
        Ok(format!("exit 0; stdout: {}", tail(&out.stdout)))
    } else {
        Err(format!("{}; stderr: {}", out.status, tail(&out.stderr)))
    }
}
