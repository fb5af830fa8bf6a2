//! The `log` action: the breach as a warning in the agent's log (and, like every action,
//! in the audit log).

use super::breach::Breach;

/// What `log` would do.
pub(super) fn describe() -> String {
    "log the breach".into()
}

pub(super) fn run(b: &Breach) -> Result<String, String> {
    tracing::warn!(rule = %b.rule, event = ?b.event, labels = ?b.labels, value = ?b.value, "remediation log action");
    Ok("logged".into())
}
