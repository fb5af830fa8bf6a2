//! Per-QP counters for the resources collector (`[plugins.builtin.resources.options]
//! qp_counters = true`): each port's QP counter mode set to auto per QP type and process
//! when the agent starts, and put back as found when it stops. It changes the device's
//! state, so it is audited like a QoS change: the record announcing a change is on disk
//! before the change, and a change that cannot be audited is not made.

use std::collections::BTreeMap;
use std::time::Instant;

use rocewatch_netlink::rdma::RdmaNetlink;
use rocewatch_netlink::rdma_stat::QpCounterMode;
use rocewatch_resources::qp_mode;

use crate::audit::{AuditLog, AuditRecord, Decision};

/// What the audit records name as their origin.
const ORIGIN: &str = "resources.qp_counters";
/// ... and as their action.
const ACTION: &str = "qp_counter_mode";

/// Whether the resources collector's options ask for per-QP counters.
pub fn wanted(options: Option<&serde_json::Value>) -> bool {
    options.is_some_and(|o| o.get("qp_counters") == Some(&serde_json::Value::Bool(true)))
}

/// The ports changed, to put back at stop.
pub struct CounterModes {
    saved: Vec<QpCounterMode>,
    audit: AuditLog,
}

/// The changes not put back yet: taken by [`restore_pending`] at the end of `run`, or on
/// the way out when a second signal ends the process at once.
static PENDING: std::sync::Mutex<Option<CounterModes>> = std::sync::Mutex::new(None);

/// Keeps `m` to be put back by [`restore_pending`], also on a fast exit.
pub fn keep_pending(m: CounterModes) {
    if m.saved.is_empty() {
        return;
    }
    *PENDING.lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
    crate::util::signals::before_fast_exit(restore_pending);
}

/// Puts back what [`keep_pending`] kept, once (the first caller does it; a second one
/// waits until it is done, so a fast exit does not cut a putting back short). Blocking.
pub fn restore_pending() {
    let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = pending.take() {
        m.restore();
    }
}

fn decision(device: &str, port: u32) -> Decision {
    Decision::new(BTreeMap::from([
        (
            rocewatch_metrics::ATTR_DEVICE.to_string(),
            device.to_string(),
        ),
        (rocewatch_metrics::ATTR_PORT.to_string(), port.to_string()),
    ]))
}

fn record(
    kind: &'static str,
    detail: String,
    outcome: Option<&'static str>,
    started: Option<Instant>,
) -> AuditRecord {
    AuditRecord::change(kind, ORIGIN, ACTION, detail, outcome, started)
}

/// Sets every port of every RDMA device to auto mode (type,pid), audited; returns what to
/// put back. Blocking (netlink and the audit log's fsync): call from a blocking thread.
pub fn enable(audit: AuditLog) -> CounterModes {
    let mut out = CounterModes {
        saved: Vec::new(),
        audit,
    };
    if let Err(e) = out.audit.prepare() {
        tracing::error!("resources: qp_counters: {e}: the QP counter modes are not changed");
        return out;
    }
    let mut nl = match RdmaNetlink::open() {
        Ok(nl) => nl,
        Err(e) => {
            tracing::warn!("resources: qp_counters: {e}; no per-QP counters");
            return out;
        }
    };
    let devices = match nl.devices() {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("resources: qp_counters: {e}; no per-QP counters");
            return out;
        }
    };
    // Read every port's mode first, then change them one at a time, each audited first.
    for d in &devices {
        for port in 1..=d.ports {
            let saved = match nl.qp_counter_mode(d.index, port) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(
                        "resources: {}/{port}: the QP counter mode cannot be read ({e}); no per-QP counters there",
                        d.name
                    );
                    continue;
                }
            };
            if saved.mode == rocewatch_netlink::rdma_stat::CounterMode::Auto
                && saved.auto_mask & qp_mode::MASK == qp_mode::MASK
            {
                tracing::info!(
                    "resources: {}/{port}: QP counters already in auto mode (type,pid)",
                    d.name
                );
                continue;
            }
            let was = qp_mode::describe(&saved);
            let dec = decision(&d.name, port);
            let detail = format!(
                "rdma statistic qp set link {}/{port} auto type,pid on (was {was}; put back when the agent stops)",
                d.name
            );
            if let Err(e) = out
                .audit
                .append_to(&dec, record("executing", detail, None, None), true)
            {
                tracing::error!(
                    "resources: {}/{port}: the audit log {} cannot be written ({e}): the QP counter mode is not changed",
                    d.name,
                    out.audit.path().display()
                );
                continue;
            }
            let t = Instant::now();
            let r = nl.set_qp_counter_auto(d.index, port, qp_mode::MASK);
            let (outcome, msg) = match &r {
                Ok(()) => ("ok", format!("auto type,pid (was {was})")),
                Err(e) => ("error", format!("refused: {e}")),
            };
            match &r {
                Ok(()) => tracing::warn!(
                    "resources: {}/{port}: QP counter mode set to auto type,pid (was {was}); it is put back when the agent stops",
                    d.name
                ),
                Err(e) => tracing::warn!(
                    "resources: {}/{port}: the driver refuses per-QP counters ({e}); the resource counts go on without them",
                    d.name
                ),
            }
            let _ = out
                .audit
                .append_to(&dec, record("result", msg, Some(outcome), Some(t)), false);
            if r.is_ok() {
                out.saved.push(saved);
            }
        }
    }
    out
}

impl CounterModes {
    /// Puts every changed port back as it was found, audited. Blocking.
    pub fn restore(self) {
        if self.saved.is_empty() {
            return;
        }
        let mut nl = match RdmaNetlink::open() {
            Ok(nl) => nl,
            Err(e) => {
                tracing::error!("resources: the QP counter modes cannot be put back: {e}");
                return;
            }
        };
        for s in &self.saved {
            let dec = decision(&s.dev_name, s.port);
            let was = qp_mode::describe(s);
            let detail = format!(
                "put the QP counter mode of {}/{} back to {was}",
                s.dev_name, s.port
            );
            // Putting back what the agent changed goes ahead even if it cannot be
            // audited: leaving the change in place would be the surprise.
            let _ = self
                .audit
                .append_to(&dec, record("executing", detail, None, None), true);
            let t = Instant::now();
            let r = qp_mode::restore(&mut nl, s);
            let (outcome, msg) = match &r {
                Ok(()) => ("ok", format!("back to {was}")),
                Err(e) => ("error", e.to_string()),
            };
            if let Err(e) = &r {
                tracing::error!(
                    "resources: {}/{}: the QP counter mode could not be put back to {was}: {e}",
                    s.dev_name,
                    s.port
                );
            }
            let _ =
                self.audit
                    .append_to(&dec, record("result", msg, Some(outcome), Some(t)), false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_true_asks_for_per_qp_counters() {
        assert!(wanted(Some(&serde_json::json!({"qp_counters": true}))));
        for o in [
            serde_json::json!({}),
            serde_json::json!({"qp_counters": false}),
            serde_json::json!({"qp_counters": "yes"}),
        ] {
            assert!(!wanted(Some(&o)), "{o}");
        }
        assert!(!wanted(None));
    }
}
