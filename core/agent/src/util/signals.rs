//! Shutdown: a watch channel that turns true on SIGINT or SIGTERM (or after a duration).

use std::time::Duration;

use tokio::sync::watch;

/// A watch channel that turns true on SIGINT or SIGTERM.
pub fn shutdown_on_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => tracing::info!("SIGTERM: shutting down"),
        }
        let _ = tx.send(true);
    });
    rx
}

/// A shutdown signal that also fires after `duration`.
pub fn shutdown_after(duration: Option<Duration>) -> watch::Receiver<bool> {
    let signals = shutdown_on_signals();
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut signals = signals;
        tokio::select! {
            _ = signals.changed() => {}
            _ = async { match duration { Some(d) => tokio::time::sleep(d).await, None => std::future::pending().await } } => {
                tracing::info!("duration elapsed: shutting down");
            }
        }
        let _ = tx.send(true);
    });
    rx
}
