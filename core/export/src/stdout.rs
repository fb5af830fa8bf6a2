//! JSON lines on standard output: one line per collection, in the same shape as
//! `rocewatch collect --once --format json` (`{"samples":[...]}`), plus `plugin` and
//! `time` (Unix seconds).

use std::io::Write;
use std::sync::Arc;

use tokio::sync::broadcast;

use rocewatch_runtime::pipeline::Collection;
use rocewatch_runtime::selfmetrics::SelfMetrics;

/// The JSON document of one collection.
pub fn collection_json(c: &Collection) -> serde_json::Value {
    serde_json::json!({
        "plugin": c.plugin,
        "time": c.time.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
        "samples": c.result.samples,
        "errors": c.result.errors,
    })
}

/// Print every collection until the channel closes. When standard output closes (piped
/// into `head`, a reader that went away), the exporter stops: said once, at error, and
/// counted in `rocewatch.exporter.errors{exporter="stdout"}`; the agent goes on.
pub async fn run(mut rx: broadcast::Receiver<Arc<Collection>>, metrics: Arc<SelfMetrics>) {
    loop {
        match rx.recv().await {
            Ok(c) => {
                let line = collection_json(&c).to_string();
                let mut out = std::io::stdout().lock();
                if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                    metrics.exporter_error("stdout");
                    tracing::error!("stdout exporter: standard output is closed ({e}); nothing more is printed there, the agent goes on");
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!("stdout exporter fell behind; {n} collections not printed");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
