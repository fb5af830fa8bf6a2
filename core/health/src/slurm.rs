//! `health --slurm`: the verdict acted on, as Slurm's HealthCheckProgram (or a prolog)
//! would have it, and as LBNL's Node Health Check does. Unhealthy: the host goes into
//! quarantine (origin `health`, audited) and this node is drained with the reason
//! `rocewatch: <the line>`; healthy again: a quarantine `health` set is released and the
//! node resumed, but only when the drain's reason is rocewatch's (an administrator's
//! drain, for maintenance, stays). A quarantine a rule or an operator set is not
//! `health`'s to end: the node stays drained. Cannot tell: Slurm is left as it is.

use rocewatch_runtime::audit::AuditLog;
use rocewatch_runtime::quarantine::{Quarantine, QuarantineFile};
use rocewatch_slurm::{ResumeOutcome, Scontrol, REASON_PREFIX};

use super::finding::{Report, Status, Verdict};
use super::options::Options;

/// The origin of a quarantine `health --slurm` sets (and may end).
pub const ORIGIN: &str = "health";

/// This node in Slurm.
pub struct SlurmNode {
    pub scontrol: Scontrol,
    pub name: String,
}

/// What `--slurm` did, one line each, for standard error and the tests.
pub type Done = Vec<String>;

/// Act on `report` for `node`; the report as it stands after (a quarantine released by
/// a recovery makes it healthy).
pub async fn act(
    report: Report,
    opts: &Options,
    cfg: &super::HealthConfig,
    audit: &AuditLog,
    node: &SlurmNode,
) -> Result<(Report, Done), String> {
    let file = QuarantineFile::in_dir(&opts.state_dir);
    let q = file.read().map_err(|e| e.to_string())?;
    let ours = q.as_ref().is_some_and(|q| q.origin == ORIGIN);
    // Unhealthy for a reason of its own, not only for the quarantine it set earlier.
    let failing = report
        .findings
        .iter()
        .any(|f| f.status == Status::Unhealthy && !(f.check == "quarantine" && ours));
    let mut done = Vec::new();
    if report.verdict == Verdict::Unknown && !failing {
        done.push("cannot tell: Slurm left as it is".to_string());
        return Ok((report, done));
    }
    if failing || q.is_some() && !ours {
        if failing && q.is_none() {
            let entered = Quarantine::now(&report.line, ORIGIN, Default::default());
            if let Some(dir) = file.path().parent() {
                rocewatch_runtime::util::fs::create_trusted_dir(dir).map_err(|e| e.to_string())?;
            }
            file.enter(&entered, audit).map_err(|e| e.to_string())?;
            done.push(format!("quarantine: {}", entered.reason));
        }
        done.push(drain(node, &report.line)?);
        return Ok((report, done));
    }
    // Healthy apart from a quarantine of its own: that quarantine ends (audited).
    let report = if ours {
        file.release("recovered: health passes", ORIGIN, audit)
            .map_err(|e| e.to_string())?;
        done.push("quarantine released: health passes".to_string());
        super::run(opts, cfg).await
    } else {
        report
    };
    if report.verdict == Verdict::Healthy {
        done.push(resume(node)?);
    }
    Ok((report, done))
}

/// Drain the node with `line` as the reason, unless an administrator drained it (their
/// reason stays) or it already carries this very reason.
fn drain(node: &SlurmNode, line: &str) -> Result<String, String> {
    node.scontrol
        .drain_unless_others(&node.name, line, node.scontrol.limit())
        .map(|o| o.describe(&node.name))
        .map_err(|e| e.to_string())
}

/// Resume the node if rocewatch drained it.
fn resume(node: &SlurmNode) -> Result<String, String> {
    Ok(
        match node
            .scontrol
            .resume_if_ours(&node.name, REASON_PREFIX)
            .map_err(|e| e.to_string())?
        {
            ResumeOutcome::Resumed { reason } => {
                format!("{} resumed (was drained: {reason})", node.name)
            }
            ResumeOutcome::LeftAlone { reason } => format!(
                "{} stays drained: drained by someone else ({reason})",
                node.name
            ),
            ResumeOutcome::NotDrained { state } => format!("{} is {state}", node.name),
        },
    )
}
