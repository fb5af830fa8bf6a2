//! `health --slurm`: the verdict acted on, as Slurm's HealthCheckProgram (or a prolog)
//! would have it, and as LBNL's Node Health Check does. Unhealthy: the host goes into
//! quarantine (origin `health`, audited) and this node is drained with the reason
//! `rocewatch: <the line>`; healthy again: a quarantine `health` set is released and the
//! node resumed, but only when the drain's reason is rocewatch's (an administrator's
//! drain, for maintenance, stays). A quarantine a rule or an operator set is not
//! `health`'s to end: the node stays drained; so does a quarantine file that cannot be
//! read (fail closed). Cannot tell: Slurm and the quarantine are left as they are.
//!
//! Slurm runs its HealthCheckProgram as root, and the packages give the state directory
//! to the agent's user: the quarantine is changed there as that user
//! (`rocewatch_runtime::quarantine`), and the drain never waits on it.

use rocewatch_runtime::audit::AuditLog;
use rocewatch_runtime::quarantine::{Quarantine, QuarantineFile};
use rocewatch_slurm::{ResumeOutcome, Scontrol, REASON_PREFIX};

use super::finding::{Finding, Report, Status, Verdict};
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
///
/// A node health calls unhealthy is drained whatever becomes of its quarantine (the
/// state directory may be read-only, full, or locked by another writer: said, and the
/// drain goes on). A quarantine file that cannot be read counts as one that is not
/// `health`'s (fail closed): the node is drained and never resumed. `health`'s own
/// quarantine ends only when every other check passes (OK, skipped or a warning): a check
/// that cannot tell ends nothing.
pub async fn act(
    report: Report,
    opts: &Options,
    audit: &AuditLog,
    node: &SlurmNode,
) -> Result<(Report, Done), String> {
    let file = QuarantineFile::in_dir(&opts.state_dir);
    let mut done = Vec::new();
    let (q, unreadable) = match file.read() {
        Ok(q) => (q, false),
        Err(e) => {
            done.push(format!("{e}: treated as in quarantine"));
            (None, true)
        }
    };
    // What the drain's reason and the exit status say: the quarantine health reads
    // without acting may have been readable where acting on it is refused.
    let report = if unreadable
        && !report
            .findings
            .iter()
            .any(|f| f.check == "quarantine" && f.status == Status::Unhealthy)
    {
        let mut findings = report.findings;
        findings.retain(|f| f.check != "quarantine");
        findings.push(Finding::host(
            "quarantine",
            Status::Unhealthy,
            done[0].clone(),
        ));
        Report::new(findings)
    } else {
        report
    };
    let ours = q.as_ref().is_some_and(|q| q.origin == ORIGIN);
    // A quarantine health may not end: a rule's, an operator's, or one it cannot read.
    let held = unreadable || q.is_some() && !ours;
    // Unhealthy, or cannot tell, for a reason other than the quarantine itself.
    let others = || report.findings.iter().filter(|f| f.check != "quarantine");
    let failing = others().any(|f| f.status == Status::Unhealthy);
    let unknown = others().any(|f| f.status == Status::Unknown);
    // The same fault reads the same in the drain's reason, run after run: health's own
    // quarantine, entered for that fault, is no finding of its own in the line.
    let report = if failing && ours {
        let line = Report::new(others().cloned().collect()).line;
        Report { line, ..report }
    } else {
        report
    };
    if failing || held {
        // The drain first: the quarantine's lock and audit may wait (another writer, a
        // slow disk) and slurmd's bound is the drain's.
        let drained = drain(node, &report.line);
        if failing && q.is_none() && !unreadable {
            let entered = Quarantine::now(&report.line, ORIGIN, Default::default());
            match file.enter(&entered, audit) {
                Ok(true) => done.push(format!("quarantine: {}", entered.reason)),
                Ok(false) => {}
                Err(e) => done.push(format!("not in quarantine ({e}); drained all the same")),
            }
        }
        return match drained {
            Ok(d) => {
                done.push(d);
                Ok((report, done))
            }
            Err(e) => {
                done.push(e);
                Err(done.join("; "))
            }
        };
    }
    if unknown || report.verdict == Verdict::Unknown {
        done.push("cannot tell: Slurm and the quarantine left as they are".to_string());
        return Ok((report, done));
    }
    // Healthy apart from a quarantine of its own: that quarantine ends (audited), if it
    // is still the one read above, and the node is resumed on that same verdict (not a
    // second one judged after the release, which nothing would act on).
    let report = if ours {
        let released = file
            // The very record judged: another run may have released it and entered a
            // quarantine of its own for a new fault meanwhile, which this verdict never saw.
            .release_if("recovered: health passes", ORIGIN, audit, |now| {
                q.as_ref() == Some(now)
            })
            .map_err(|e| {
                done.push(format!("{e}; the node stays drained"));
                done.join("; ")
            })?;
        if released.is_none() {
            // Replaced meanwhile (a rule's, an operator's): not health's to end.
            done.push("quarantine changed meanwhile: the node stays drained".to_string());
            return Ok((report, done));
        }
        done.push("quarantine released: health passes".to_string());
        let findings = report
            .findings
            .into_iter()
            .map(|f| match f.check {
                "quarantine" => Finding::host("quarantine", Status::Ok, "released: health passes"),
                _ => f,
            })
            .collect();
        Report::new(findings)
    } else {
        report
    };
    if report.verdict == Verdict::Healthy {
        match resume(node) {
            Ok(d) => done.push(d),
            Err(e) => {
                done.push(e);
                return Err(done.join("; "));
            }
        }
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
