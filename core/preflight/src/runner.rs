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
/// rails in parallel), then say done. Serving: answer the peer's tests until it says
/// done or is gone (its control connection closed); the result is ignored (the driver
/// measures).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Hello, Message, StepId};
    use crate::verbs::{Settings, Tell, VerbsRunner};
    use crate::{Mode, PairRunner};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// The notes a sweep says (an early end among them).
    #[derive(Default)]
    struct Notes(Mutex<Vec<String>>);

    impl Tell for Notes {
        fn waiting(&self, _: String, _: Option<std::time::Instant>) {}
        fn note(&self, line: String) {
            self.0.lock().unwrap().push(line);
        }
    }

    /// A serving step ends as soon as its driver says done, or as soon as the driver's
    /// control connection closes without it, not at the step's limit (here 100 s).
    #[tokio::test]
    async fn a_serving_step_ends_on_the_drivers_done_or_its_leaving() {
        for says_done in [true, false] {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let schedule = Schedule::new(vec!["a".into(), "b".into()], Mode::Default).unwrap();
            let b = HostRails {
                host: "b".into(),
                nics: Vec::new(),
            };
            let step = steps(&schedule, &b)
                .unwrap()
                .into_iter()
                .find(|s| s.role == Role::Serve)
                .expect("b serves a step");
            let settings = Settings {
                control_port: port,
                patience: Duration::from_secs(30),
                duration: Duration::from_secs(60),
                size: 65536,
                qps: 1,
                probes: 0,
                line_rate_gbps: None,
                token: None,
            };
            let notes = Arc::new(Notes::default());
            let metrics = Arc::new(rocewatch_runtime::selfmetrics::SelfMetrics::default());
            let mut runner = VerbsRunner::start(
                schedule,
                b,
                Default::default(),
                metrics,
                settings,
                notes.clone(),
            )
            .await
            .unwrap();
            let id = StepId {
                from: "a".into(),
                round: step.round,
                phase: step.phase,
            };
            let driver = tokio::spawn(async move {
                let sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap();
                let (r, mut w) = sock.into_split();
                let hello = Message::Hello(Hello::new(id.clone(), None)).encode();
                w.write_all(hello.as_bytes()).await.unwrap();
                let mut line = String::new();
                BufReader::new(r).read_line(&mut line).await.unwrap();
                assert!(
                    matches!(Message::decode(&line), Ok(Message::Rails(_))),
                    "{line}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                if says_done {
                    w.write_all(Message::Done(id).encode().as_bytes())
                        .await
                        .unwrap();
                }
                // Both halves dropped: the connection closes.
            });
            let served =
                tokio::time::timeout(Duration::from_secs(10), runner.run_step(&step)).await;
            driver.await.unwrap();
            let notes = notes.0.lock().unwrap().clone();
            assert!(served.is_ok(), "done {says_done}: {notes:?}");
            let early = notes.iter().any(|n| n.contains("ended early"));
            assert_eq!(early, !says_done, "{notes:?}");
        }
    }
}
