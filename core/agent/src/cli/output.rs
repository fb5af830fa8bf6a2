//! Logging set-up and JSON printing shared by the commands.

use std::io::{IsTerminal, Write};

use anyhow::Result;

use crate::config::LogFormat;

/// Set up logging to standard error (held while a live screen is drawn:
/// `demo::screen_logs`), and to OTLP once `run` has read `[exporters.otlp] agent_logs` (the
/// layer forwards nothing until then).
pub fn init_logging(format: LogFormat, level: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(crate::demo::screen_logs::LogWriter);
    let logs = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Json => logs
            .with(fmt.json())
            .with(super::agent_logs::AgentLogsLayer)
            .try_init(),
        LogFormat::Text => logs
            .with(fmt)
            .with(super::agent_logs::AgentLogsLayer)
            .try_init(),
    };
}

pub(super) fn print_json(v: &serde_json::Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}
