//! The `slurm_drain` action: drain this node in Slurm through `scontrol` when the rule
//! fires, as `rocewatch health --slurm` does (`rocewatch_slurm`), unless someone else set
//! the node's state.

use std::time::Duration;

use super::breach::Breach;

/// What `slurm_drain` would do.
pub(super) fn describe(node: Option<&str>, scontrol: &str) -> String {
    format!(
        "drain {} in Slurm through {scontrol} (unless someone else set its state)",
        rocewatch_slurm::this_node_name(node)
            .unwrap_or_else(|e| format!("this node (its name: {e})"))
    )
}

/// Drain this node off the runtime's workers; `timeout` is the action's (scontrol's own
/// bound is a second less; the dispatcher's timeout ends the wait).
pub(super) async fn run(
    node: Option<&str>,
    scontrol: &str,
    timeout: Duration,
    b: &Breach,
) -> Result<String, String> {
    let (node, scontrol, b) = (node.map(str::to_string), scontrol.to_string(), b.clone());
    tokio::task::spawn_blocking(move || drain(node.as_deref(), &scontrol, timeout, &b))
        .await
        .map_err(|e| format!("the drain did not finish: {e}"))?
}

/// The drain reason's text for a firing rule (`rocewatch_slurm::reason` adds the
/// prefix, escapes control characters and bounds the length): the rule, its labels
/// and value.
fn drain_text(b: &Breach) -> String {
    let mut t = format!("rule {} fired", b.rule);
    let labels: Vec<String> = b.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !labels.is_empty() {
        t.push_str(&format!(": {}", labels.join(",")));
    }
    if let Some(v) = b.value {
        t.push_str(&format!(" value {v}"));
    }
    t
}

/// Drain this node through `scontrol` (blocking: run it off the runtime's workers).
fn drain(
    node: Option<&str>,
    scontrol: &str,
    timeout: Duration,
    b: &Breach,
) -> Result<String, String> {
    let name = rocewatch_slurm::this_node_name(node)
        .map_err(|e| format!("this node's name in Slurm: {e}"))?;
    // A second of the action's timeout is left for the dispatcher to hear the outcome.
    let bound = timeout
        .saturating_sub(Duration::from_secs(1))
        .max(Duration::from_secs(1));
    let sc = rocewatch_slurm::Scontrol::new(scontrol);
    sc.drain_unless_others(&name, &drain_text(b), bound)
        .map(|o| o.describe(&name))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::testing::{breach, child_gone, hanging_wrapper};

    /// `slurm_drain` as the dispatcher runs it (off the workers, under the action's
    /// timeout): a wrapper scontrol whose child hangs ends within the timeout, and takes
    /// its child with it.
    #[tokio::test]
    async fn a_drain_through_a_hanging_scontrol_wrapper_ends_in_time_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let scontrol = hanging_wrapper(dir.path(), "scontrol");
        let started = std::time::Instant::now();
        let timeout = Duration::from_secs(2);
        let r = tokio::task::spawn_blocking(move || {
            drain(Some("n1"), scontrol.to_str().unwrap(), timeout, &breach())
        })
        .await
        .unwrap();
        let took = started.elapsed();
        let e = r.unwrap_err();
        assert!(e.contains("killed"), "{e}");
        assert!(took < timeout + Duration::from_secs(1), "{took:?}: {e}");
        child_gone(dir.path()).await.unwrap();
    }
}
