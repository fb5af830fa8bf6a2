//! The measurement of `rocewatch preflight`'s sweep: this host's part of the schedule,
//! run for real through the verbs probe plugin.
//!
//! One verbs probe plugin instance per ACTIVE rail (device and port of rank k, its
//! responder on TCP `tcp_port + k`, serving bandwidth tests), and the control channel of
//! [`crate::control`] on `control_port`: a driving step connects to the
//! partner's control port, waits until the partner has reached the same step, learns
//! the partner's rail addresses, runs an RDMA WRITE bandwidth test and a few probes per
//! rail (the rails at once), then says it is done; a serving step waits for that. The
//! control port's two ends (the listener, its cap on connections, the driver's hello and
//! when it is said again) are in `control`; the plugin of each rail, to start and then
//! to find started, in [`plugins`]; what it tells its caller while it runs (what it
//! waits on, why a step took long), in [`Tell`].

mod control;
pub mod plugins;
mod tell;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::control::{Message, StepId};
use rocewatch_plugin_api::{BandwidthOp, BandwidthRequest, ProbeOutcome, ProbeTarget};
use rocewatch_runtime::host::registry::Entry;
use rocewatch_runtime::selfmetrics::SelfMetrics;
use tokio::io::AsyncWriteExt;
use tokio::sync::{watch, Notify};

use self::control::Shared;
pub use self::tell::Tell;
use self::tell::{from_now, step_name};

/// How a sweep measures.
#[derive(Debug, Clone)]
pub struct Settings {
    pub control_port: u16,
    /// How long to wait for a partner at each step (its start, an earlier round it is
    /// still busy with).
    pub patience: Duration,
    /// One bandwidth test, one direction.
    pub duration: Duration,
    pub size: u32,
    pub qps: u16,
    /// Probes per rail for the latency (their median).
    pub probes: u32,
    /// The line rate to judge against instead of the ports' (`--line-rate`).
    pub line_rate_gbps: Option<f64>,
    /// The sweep's token, the same on every host: hellos carry it and must (none: any
    /// hello the schedule explains is answered).
    pub token: Option<crate::control::Token>,
}

/// How the verbs responder refuses a test while another one runs (`bwserve.rs`).
const RESPONDER_BUSY: &str = "another bandwidth test is running on the responder";

/// The runner of [`crate::run_host`] for this host.
pub struct VerbsRunner {
    shared: Arc<Shared>,
    settings: Settings,
    /// The started probe plugin of each rank, or why it did not start.
    entries: HashMap<usize, Result<Entry, String>>,
    metrics: Arc<SelfMetrics>,
}

impl VerbsRunner {
    /// Listens on the control port (every address) for the whole sweep.
    pub async fn start(
        schedule: crate::Schedule,
        rails: crate::HostRails,
        entries: HashMap<usize, Result<Entry, String>>,
        metrics: Arc<SelfMetrics>,
        settings: Settings,
        tell: Arc<dyn Tell>,
    ) -> std::io::Result<VerbsRunner> {
        let me = schedule.index(&rails.host).map_err(std::io::Error::other)?;
        // A step's tests once both ends are there: the RDMA WRITE, the probes (a second
        // each at most), a responder still busy with a late test (the patience), and a
        // margin for the queue pairs' setup.
        let step_limit = settings.duration
            + Duration::from_secs(u64::from(settings.probes) + 10)
            + settings.patience;
        let shared = Arc::new(Shared {
            schedule,
            me,
            rails,
            current: watch::Sender::new(None),
            begun: Mutex::new(std::collections::HashSet::new()),
            ended: Mutex::new(HashMap::new()),
            notify: Notify::new(),
            patience: settings.patience,
            step_limit,
            token: settings.token.clone(),
            tell,
        });
        control::listen(shared.clone(), settings.control_port).await?;
        Ok(VerbsRunner {
            shared,
            settings,
            entries,
            metrics,
        })
    }

    /// Waits within the patience for the driver of `step` to begin (both hosts at this
    /// step), then within the step's limit for its tests to end.
    async fn serve(&self, step: &crate::Step) {
        let id = StepId {
            from: step.peer.clone(),
            round: step.round,
            phase: step.phase,
        };
        let sh = &self.shared;
        let name = step_name(step.round, step.phase);
        sh.tell.waiting(
            format!("{name}: waiting for {} to write into this host", step.peer),
            from_now(sh.patience),
        );
        sh.current.send_replace(Some(id.clone()));
        // Some(how it ended) once it ended, None once it began.
        let state = |begun_is_enough: bool| {
            let id = id.clone();
            async move {
                loop {
                    let notified = sh.notify.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    if let Some(r) = sh.ended.lock().expect("not poisoned").remove(&id) {
                        return Some(r);
                    }
                    if begun_is_enough && sh.begun.lock().expect("not poisoned").contains(&id) {
                        return None;
                    }
                    notified.await;
                }
            }
        };
        let ended = match tokio::time::timeout(sh.patience, state(true)).await {
            Err(_) => {
                sh.tell.note(format!(
                    "{name}: {} never came to test this host (waited {:?}, the patience); going on",
                    step.peer, sh.patience
                ));
                None
            }
            Ok(Some(r)) => Some(r),
            Ok(None) => {
                sh.tell.waiting(
                    format!("{name}: {} writing into this host", step.peer),
                    from_now(sh.step_limit),
                );
                match tokio::time::timeout(sh.step_limit, state(false)).await {
                    Ok(r) => r,
                    Err(_) => Some(Err(format!(
                        "its tests did not end within {:?}",
                        sh.step_limit
                    ))),
                }
            }
        };
        if let Some(Err(why)) = ended {
            sh.tell.note(format!(
                "{name}: {}'s tests into this host ended early: {why}",
                step.peer
            ));
        }
        sh.current.send_replace(None);
        sh.begun.lock().expect("not poisoned").remove(&id);
    }

    async fn drive(&self, step: &crate::Step) -> Vec<crate::Measurement> {
        let failed = |why: String| {
            step.rails
                .iter()
                .map(|_| crate::Measurement {
                    error: Some(why.clone()),
                    ..Default::default()
                })
                .collect()
        };
        let id = StepId {
            from: self.shared.rails.host.clone(),
            round: step.round,
            phase: step.phase,
        };
        let sh = &self.shared;
        let port = self.settings.control_port;
        let name = step_name(step.round, step.phase);
        sh.tell.waiting(
            format!(
                "{name}: waiting for {} to be tested by this host",
                step.peer
            ),
            from_now(sh.patience),
        );
        let said = crate::control::Hello::new(id.clone(), sh.token.clone());
        let hello = control::hello(&step.peer, port, &said, sh.patience);
        let (_reader, mut writer, theirs) = match hello.await {
            Ok(x) => x,
            Err(why) => return failed(why),
        };
        let ranks: Vec<String> = step.rails.iter().map(|(k, _)| k.to_string()).collect();
        sh.tell.waiting(
            format!(
                "{name}: writing into {} on rails {}",
                step.peer,
                ranks.join(",")
            ),
            from_now(self.settings.duration + Duration::from_secs(u64::from(self.settings.probes))),
        );
        let mut set = tokio::task::JoinSet::new();
        for (i, &(rank, _)) in step.rails.iter().enumerate() {
            let entry = self.entries.get(&rank).cloned();
            let peer_nic = theirs.nics.get(rank).cloned();
            let mine = self.shared.rails.nics.get(rank).cloned();
            let (s, m, peer) = (
                self.settings.clone(),
                self.metrics.clone(),
                step.peer.clone(),
            );
            set.spawn(async move {
                let r = rail(entry, mine, peer_nic, &peer, rank, &s, &m).await;
                (i, r)
            });
        }
        let mut out = vec![crate::Measurement::default(); step.rails.len()];
        while let Some(j) = set.join_next().await {
            if let Ok((i, m)) = j {
                out[i] = m;
            }
        }
        if let Err(e) = writer
            .write_all(Message::Done(id).encode().as_bytes())
            .await
        {
            sh.tell.note(format!(
                "{name}: telling {} the tests are over: {e}",
                step.peer
            ));
        }
        out
    }
}

impl crate::PairRunner for VerbsRunner {
    async fn run_step(&mut self, step: &crate::Step) -> Vec<crate::Measurement> {
        match step.role {
            crate::Role::Serve => {
                self.serve(step).await;
                Vec::new()
            }
            crate::Role::Drive => self.drive(step).await,
        }
    }
}

/// `test`, asked again every second within `patience` while the responder says it is
/// busy: a responder still finishing an earlier test (a partner's that ran late) is not a
/// fault of this pair.
async fn while_busy<T, E, F, Fut>(patience: Duration, mut test: F) -> Result<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let until = tokio::time::Instant::now() + patience;
    loop {
        match test().await {
            Err(e)
                if e.to_string().contains(RESPONDER_BUSY)
                    && tokio::time::Instant::now() < until =>
            {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            other => return other,
        }
    }
}

/// One rail's tests against the partner's NIC of the same rank.
async fn rail(
    entry: Option<Result<Entry, String>>,
    mine: Option<crate::Nic>,
    theirs: Option<crate::Nic>,
    peer: &str,
    rank: usize,
    s: &Settings,
    metrics: &SelfMetrics,
) -> crate::Measurement {
    let err = |why: String, peer_nic: Option<String>| crate::Measurement {
        peer_nic,
        error: Some(why),
        ..Default::default()
    };
    let entry = match entry {
        Some(Ok(e)) => e,
        Some(Err(why)) => {
            return err(
                format!("this host's probe plugin for rank {rank}: {why}"),
                None,
            )
        }
        None => {
            return err(
                format!("this host has no probe plugin for rank {rank}"),
                None,
            )
        }
    };
    let Some(nic) = theirs else {
        return err(format!("{peer} has no NIC of rank {rank}"), None);
    };
    let name = Some(nic.name.clone());
    if !nic.up {
        return err(format!("{peer}'s {} is not ACTIVE", nic.name), name);
    }
    let Some(addr) = nic.addr.clone() else {
        return err(
            format!("{peer}'s {} has no RoCE v2 address to test", nic.name),
            name,
        );
    };
    let req = BandwidthRequest {
        peer: addr.clone(),
        op: BandwidthOp::Write,
        size: s.size,
        qps: s.qps,
        duration_ms: s.duration.as_millis() as u64,
        bidirectional: false,
        timeout_ms: 5000,
    };
    let test = || rocewatch_probes::bandwidth::run_test(&entry, req.clone(), metrics);
    let bw = match while_busy(s.patience, test).await {
        Ok(r) => r.local.average_bps / 1e9,
        Err(e) => return err(format!("RDMA WRITE to {addr}: {e}"), name),
    };
    let mut rtts = Vec::new();
    let mut last_err = None;
    for _ in 0..s.probes {
        let target = ProbeTarget::new(addr.clone(), 64, 1000);
        match rocewatch_probes::probe_once(&entry, target, metrics).await {
            Ok(r) => match r.outcome {
                ProbeOutcome::Ok { rtt_seconds } => rtts.push(rtt_seconds * 1e6),
                ProbeOutcome::Timeout => last_err = Some("a probe timed out".to_string()),
                ProbeOutcome::ConnectFailed { cause } => last_err = Some(cause),
            },
            Err(e) => last_err = Some(e.to_string()),
        }
    }
    rtts.sort_by(f64::total_cmp);
    let line = s.line_rate_gbps.or_else(|| {
        let m = mine.and_then(|n| n.line_rate_gbps);
        match (m, nic.line_rate_gbps) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    });
    crate::Measurement {
        peer_nic: name,
        bandwidth_gbps: Some(bw),
        latency_us: rtts.get(rtts.len() / 2).copied(),
        line_rate_gbps: line,
        error: rtts.is_empty().then(|| {
            format!(
                "no probe to {addr} was answered: {}",
                last_err.unwrap_or_default()
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Busy refusals are asked again within the patience; another error, or busy past
    /// it, is the result.
    #[tokio::test(start_paused = true)]
    async fn a_busy_responder_is_asked_again_within_the_patience() {
        let busy = format!("{RESPONDER_BUSY}; try again when it ends");
        let calls = std::cell::Cell::new(0);
        let r: Result<u32, String> = while_busy(Duration::from_secs(10), || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            let busy = busy.clone();
            async move {
                if n < 4 {
                    Err(busy)
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(r, Ok(4));
        calls.set(0);
        let started = tokio::time::Instant::now();
        let r: Result<u32, String> = while_busy(Duration::from_secs(5), || {
            calls.set(calls.get() + 1);
            let busy = busy.clone();
            async move { Err(busy) }
        })
        .await;
        assert!(r.unwrap_err().contains(RESPONDER_BUSY));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert_eq!(calls.get(), 6);
        calls.set(0);
        let r: Result<u32, String> = while_busy(Duration::from_secs(5), || {
            calls.set(calls.get() + 1);
            async move { Err("route: no route to host".to_string()) }
        })
        .await;
        assert_eq!(r, Err("route: no route to host".into()));
        assert_eq!(calls.get(), 1);
    }
}
