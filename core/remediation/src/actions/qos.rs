//! The `qos_apply` action: re-apply `[[qos.desired]]` to the settings the rule's labels
//! select, through the configuration plugins (`rocewatch_qos::apply`), on firing only.

use super::breach::Breach;
use rocewatch_qos::apply::Applier;

/// What `qos_apply` would do.
pub(super) fn describe() -> String {
    "re-apply [[qos.desired]] to the settings the rule's labels select (snapshot, audit, undo on failure)".into()
}

/// Re-apply through `applier` (none without configuration plugins).
pub(super) async fn run(applier: Option<&Applier>, b: &Breach) -> Result<String, String> {
    let applier = applier.ok_or_else(|| "no configuration plugins to apply through".to_string())?;
    applier.reapply(&b.labels, &b.rule).await
}
