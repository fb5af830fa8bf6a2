//! JSON lines on standard output: one line per collection, in the same shape as
//! `rocewatch collect --once --format json` (`{"samples":[...]}`), plus `plugin` and
//! `time` (Unix seconds).

use std::io::Write;
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::pipeline::Collection;

/// The JSON document of one collection.
pub fn collection_json(c: &Collection) -> serde_json::Value {
    serde_json::json!({
        "plugin": c.plugin,
        "time": c.time.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
        "samples": c.result.samples,
        "errors": c.result.errors,
    })
}

/// Print every collection until the channel closes.
pub async fn run(mut rx: broadcast::Receiver<Arc<Collection>>) {
    loop {
        match rx.recv().await {
            Ok(c) => {
                let line = collection_json(&c).to_string();
                let mut out = std::io::stdout().lock();
                if writeln!(out, "{line}").is_err() {
                    return; // stdout closed (e.g. piped into head): stop quietly
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!("stdout exporter fell behind; {n} collections not printed");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
