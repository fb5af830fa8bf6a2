//! The measurement, as a trait: the CLI implements [`PairRunner`] with the verbs plugin's
//! RDMA WRITE bandwidth test (`rocewatch bandwidth`'s `measure`, the probe plugin's
//! responder serving) and a latency probe; tests implement it with simulated results.
//!
//! [`run_host`] walks this host's part of the schedule: for every round in which it has a
//! partner, both phases in order, driving or serving on every ACTIVE rail at once. There
//! is no coordinator and no barrier: a host that idles a round (odd N) or finishes early
//! goes on to its next step, where a serving host waits for its driver and a driving
//! host's connect waits for its server, so the runner's connect timeout must cover one
//! round. Each host knows only its own NICs: the runner learns the peer's NIC at rank k
//! when it connects (and says so in an error when the peer has no ACTIVE port there).

use std::future::Future;

use crate::rails::{Endpoint, HostRails};
use crate::schedule::{Phase, Role, Schedule, ScheduleError};
use crate::verdict::TestResult;

/// One phase of one round, seen from this host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    pub round: usize,
    pub phase: Phase,
    pub role: Role,
    pub peer: String,
    /// (rank, this host's NIC at that rank), the ACTIVE ones only.
    pub rails: Vec<(usize, String)>,
}

/// What the driving side measured on one rail.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measurement {
    /// The peer's NIC at this rank, as its responder named it.
    pub peer_nic: Option<String>,
    pub bandwidth_gbps: Option<f64>,
    pub latency_us: Option<f64>,
    /// The slower of the two ports' line rates.
    pub line_rate_gbps: Option<f64>,
    pub error: Option<String>,
}

/// Runs one step. Driving: one measurement per rail of `step.rails`, in that order (the
/// rails in parallel). Serving: answer the peer's tests until they end; the result is
/// ignored (the driver measures).
pub trait PairRunner {
    fn run_step(&mut self, step: &Step) -> impl Future<Output = Vec<Measurement>> + Send;
}

/// This host's steps, in order.
pub fn steps(schedule: &Schedule, this: &HostRails) -> Result<Vec<Step>, ScheduleError> {
    let me = schedule.index(&this.host)?;
    let rails: Vec<(usize, String)> = this
        .nics
        .iter()
        .enumerate()
        .filter(|(_, n)| n.up)
        .map(|(k, n)| (k, n.name.clone()))
        .collect();
    let mut out = Vec::new();
    for round in 0..schedule.rounds() {
        let Some(p) = schedule.partner(me, round) else {
            continue;
        };
        for phase in Phase::BOTH {
            if let Some(role) = schedule.role(me, round, phase) {
                out.push(Step {
                    round,
                    phase,
                    role,
                    peer: schedule.hosts()[p].clone(),
                    rails: rails.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// Runs this host's part of the schedule: the results of the tests it drove.
pub async fn run_host<R: PairRunner>(
    schedule: &Schedule,
    this: &HostRails,
    runner: &mut R,
) -> Result<Vec<TestResult>, ScheduleError> {
    let mut out = Vec::new();
    for step in steps(schedule, this)? {
        let got = runner.run_step(&step).await;
        if step.role == Role::Serve {
            continue;
        }
        for (i, (rank, nic)) in step.rails.iter().enumerate() {
            let m = got.get(i).cloned().unwrap_or_else(|| Measurement {
                error: Some("the runner returned no measurement for this rail".into()),
                ..Measurement::default()
            });
            out.push(TestResult {
                round: step.round,
                rank: *rank,
                from: Endpoint {
                    host: this.host.clone(),
                    nic: nic.clone(),
                },
                to: Endpoint {
                    host: step.peer.clone(),
                    nic: m.peer_nic.unwrap_or_else(|| format!("rank {rank}")),
                },
                bandwidth_gbps: m.bandwidth_gbps,
                latency_us: m.latency_us,
                line_rate_gbps: m.line_rate_gbps,
                error: m.error,
            });
        }
    }
    Ok(out)
}
