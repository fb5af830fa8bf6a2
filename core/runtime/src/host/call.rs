//! Calling plugins: on a blocking thread, with a timeout, with panics caught, and with
//! every outcome reflected in the plugin's status and the self-metrics.

use rocewatch_metrics::labels::PluginErrorReason;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_plugin_api::{PluginContext, PluginError};
use rocewatch_plugin_sdk::ffi::panic_message;

use crate::host::registry::{Entry, Instance, State};
use crate::selfmetrics::SelfMetrics;

/// Why a plugin call did not give a result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{plugin}: {error}")]
    Plugin { plugin: String, error: PluginError },
    #[error("{plugin}: timed out after {timeout:?} (the call keeps running on its thread; the plugin is skipped until it returns)")]
    Timeout { plugin: String, timeout: Duration },
    #[error("{plugin}: previous call still running (it timed out earlier); skipped")]
    Busy { plugin: String },
    #[error("{plugin}: not loaded")]
    NotLoaded { plugin: String },
}

impl CallError {
    /// The `reason` attribute of `rocewatch.plugin.errors`.
    pub fn reason(&self) -> PluginErrorReason {
        match self {
            CallError::Plugin {
                error: PluginError::Panicked(_),
                ..
            } => PluginErrorReason::Panic,
            CallError::Plugin { .. } => PluginErrorReason::Error,
            CallError::Timeout { .. } => PluginErrorReason::Timeout,
            CallError::Busy { .. } => PluginErrorReason::Busy,
            CallError::NotLoaded { .. } => PluginErrorReason::Load,
        }
    }

    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            CallError::Plugin {
                error: PluginError::Unsupported(_),
                ..
            }
        )
    }
}

/// Run `f` on the plugin's instance on a blocking thread, bounded by `timeout`.
pub async fn call<R, F>(
    entry: &Entry,
    timeout: Duration,
    metrics: &SelfMetrics,
    f: F,
) -> Result<R, CallError>
where
    R: Send + 'static,
    F: FnOnce(&mut Instance) -> Result<R, PluginError> + Send + 'static,
{
    let label = entry.label();
    let Some(instance) = entry.instance.clone() else {
        return Err(CallError::NotLoaded { plugin: label });
    };
    if entry.busy.swap(true, Ordering::SeqCst) {
        metrics.plugin_error(&entry.name, PluginErrorReason::Busy);
        return Err(CallError::Busy { plugin: label });
    }
    let busy = Arc::clone(&entry.busy);
    let started = Instant::now();
    let task = tokio::task::spawn_blocking(move || {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut guard = instance.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        }));
        busy.store(false, Ordering::SeqCst);
        match r {
            Ok(r) => r,
            Err(p) => Err(PluginError::Panicked(panic_message(&*p))),
        }
    });
    let outcome = match tokio::time::timeout(timeout, task).await {
        Ok(Ok(r)) => r.map_err(|error| CallError::Plugin {
            plugin: label.clone(),
            error,
        }),
        Ok(Err(join)) => Err(CallError::Plugin {
            plugin: label.clone(),
            error: PluginError::Panicked(join.to_string()),
        }),
        Err(_) => Err(CallError::Timeout {
            plugin: label.clone(),
            timeout,
        }),
    };
    let kind = entry.kind.map_or("unknown", |k| k.as_str());
    metrics.call_duration(&entry.name, kind, started.elapsed());
    // An unsupported plugin stays unsupported: said once, and again when the reason changes.
    let said_before = {
        let mut s = entry.status.lock().unwrap_or_else(|p| p.into_inner());
        let said = match &outcome {
            Err(e) if e.is_unsupported() => {
                s.state == State::Unsupported && s.last_error.as_deref() == Some(&e.to_string())
            }
            _ => false,
        };
        s.calls += 1;
        match &outcome {
            Ok(_) => s.state = State::Started,
            Err(e) if e.is_unsupported() => {
                s.state = State::Unsupported;
                s.last_error = Some(e.to_string());
            }
            Err(e) => {
                s.state = State::Failed;
                s.errors += 1;
                s.last_error = Some(e.to_string());
            }
        }
        said
    };
    match &outcome {
        Err(e) if e.is_unsupported() && said_before => {
            tracing::debug!(plugin = %entry.name, "{e}")
        }
        Err(e) if e.is_unsupported() => tracing::info!(plugin = %entry.name, "{e}"),
        Err(e) => {
            metrics.plugin_error(&entry.name, e.reason());
            tracing::warn!(plugin = %entry.name, reason = e.reason().as_str(), "{e}");
        }
        Ok(_) => {}
    }
    outcome
}

/// Start every loaded plugin with its context. Failures are recorded, never fatal.
pub async fn start_all(
    reg: &crate::host::registry::Registry,
    base: &PluginContext,
    metrics: &SelfMetrics,
) {
    for e in reg.entries.iter().filter(|e| e.instance.is_some()) {
        let mut ctx = base.clone();
        ctx.options = e.settings.options.clone();
        ctx.call_timeout_ms = Some(e.timeout.as_millis().try_into().unwrap_or(u64::MAX));
        let r = call(e, e.timeout, metrics, move |i| i.plugin().start(&ctx)).await;
        if r.is_ok() {
            tracing::debug!(plugin = %e.name, kind = ?e.kind, "started");
        }
    }
}

/// Stop every plugin that is not stuck in a call.
pub async fn stop_all(reg: &crate::host::registry::Registry, metrics: &SelfMetrics) {
    for e in reg.entries.iter().filter(|e| e.instance.is_some()) {
        if crate::host::registry::is_busy(e) {
            continue;
        }
        let _ = call(e, e.timeout, metrics, |i| {
            i.plugin().stop();
            Ok(())
        })
        .await;
    }
}
