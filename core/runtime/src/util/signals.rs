//! Shutdown: a watch channel that turns true on SIGINT or SIGTERM (or after a duration).

use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// What must still be undone when a second signal ends the process at once (a change
/// the agent made on the host and puts back at a normal stop).
static BEFORE_FAST_EXIT: std::sync::Mutex<Vec<fn()>> = std::sync::Mutex::new(Vec::new());

/// Runs `undo` before the process exits on a second signal (once, however often it is
/// registered). It must be quick and must not need the runtime: it runs on the way out.
pub fn before_fast_exit(undo: fn()) {
    let mut v = BEFORE_FAST_EXIT.lock().unwrap_or_else(|p| p.into_inner());
    if !v.contains(&undo) {
        v.push(undo);
    }
}

/// A watch channel that turns true on SIGINT or SIGTERM. A second signal while shutting
/// down (a final export that hangs) ends the process at once, with status 130.
pub fn shutdown_on_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term = signal(SignalKind::terminate()).ok();
        let mut int = signal(SignalKind::interrupt()).ok();
        let first = next_signal(&mut term, &mut int).await;
        tracing::info!("{first}: shutting down (a second signal exits at once)");
        let _ = tx.send(true);
        let second = next_signal(&mut term, &mut int).await;
        tracing::warn!(
            "{second} during shutdown: exiting now, without waiting for the final export"
        );
        for undo in BEFORE_FAST_EXIT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            undo();
        }
        std::process::exit(130);
    });
    rx
}

/// The name of the next SIGINT or SIGTERM.
async fn next_signal(term: &mut Option<Signal>, int: &mut Option<Signal>) -> &'static str {
    async fn recv(s: &mut Option<Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = recv(int) => "SIGINT",
        _ = recv(term) => "SIGTERM",
    }
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
