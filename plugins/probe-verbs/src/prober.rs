//! The prober's rounds: keeping the connected peers' queue pairs, and pinging every
//! target of a round at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_plugin_api::*;

use crate::conn::{connect_all, timeout_of, Conn};
use crate::verbs::Endpoint;
use crate::{FlowKey, VerbsProbe};

/// One probe in flight.
struct Flight {
    /// Index into the targets.
    i: usize,
    t0: Instant,
    deadline: Instant,
    sent: bool,
    answered: Option<Duration>,
    /// Its queue will raise an event on the channel at the next completion.
    armed: bool,
}

/// What polling a flight's queue found.
enum Step {
    Waiting,
    Done(ProbeOutcome),
}

impl Flight {
    /// Drain the queue's completions; done when the reply is in and the send completed
    /// (so no completion of this probe is left to confuse the next one), or at the
    /// deadline.
    fn step(&mut self, ep: &mut Endpoint, now: Instant) -> Step {
        loop {
            match ep.poll() {
                Ok(Some(1)) => self.sent = true,
                Ok(Some(_)) => self.answered = Some(self.t0.elapsed()),
                Ok(None) => break,
                Err(e) => {
                    return Step::Done(ProbeOutcome::ConnectFailed {
                        cause: format!("QP error: {e}"),
                    })
                }
            }
            // A completion disarms the queue.
            self.armed = false;
        }
        match (self.sent, self.answered) {
            (true, Some(rtt)) => Step::Done(ProbeOutcome::Ok {
                rtt_seconds: rtt.as_secs_f64(),
            }),
            _ if now >= self.deadline => Step::Done(ProbeOutcome::Timeout),
            _ => Step::Waiting,
        }
    }
}

impl VerbsProbe {
    fn add_conn(&mut self, key: &FlowKey, c: Conn) {
        let token = c.ep.cq_id() as u64;
        if let Some(ep) = &self.epoll {
            if let Err(e) = ep.add(c.ep.event_fd(), token) {
                // Without it the queue is looked at on deadlines only: slower, not wrong.
                eprintln!("rocewatch probe: {e}");
            }
        }
        self.tokens.insert(token, key.clone());
        if let Some(old) = self.conns.insert(key.clone(), c) {
            self.forget_conn(old);
        }
    }

    pub(crate) fn drop_conn(&mut self, key: &FlowKey) {
        if let Some(c) = self.conns.remove(key) {
            self.forget_conn(c);
        }
    }

    fn forget_conn(&mut self, c: Conn) {
        if let Some(ep) = &self.epoll {
            ep.remove(c.ep.event_fd());
        }
        self.tokens.remove(&(c.ep.cq_id() as u64));
    }

    /// Ping every connected target at once: post a receive and a send on each, then wait
    /// for every reply (or deadline). The first 2 ms busy-poll every queue (replies
    /// normally come well within that, and a wake-up would add its latency to the RTT);
    /// after that each waiting queue is armed and the thread sleeps in the epoll set of
    /// the queues' completion channels, polling only the queues an event names: the work per probe
    /// stays constant however many peers are in flight and however slow they answer.
    fn ping_all(
        &mut self,
        busy: bool,
        targets: &[ProbeTarget],
        keys: &[FlowKey],
        idx: &[usize],
    ) -> Vec<(usize, ProbeOutcome)> {
        let mut out = Vec::with_capacity(idx.len());
        // By completion queue (what an event names).
        let mut flights: HashMap<usize, Flight> = HashMap::with_capacity(idx.len());
        for &i in idx {
            let conn = self.conns.get_mut(&keys[i]).expect("connected");
            let posted = conn.ep.post_recv().and_then(|_| {
                let t0 = Instant::now();
                conn.ep.post_send().map(|_| t0)
            });
            match posted {
                Ok(t0) => {
                    flights.insert(
                        conn.ep.cq_id(),
                        Flight {
                            i,
                            t0,
                            deadline: t0 + timeout_of(&targets[i]),
                            sent: false,
                            answered: None,
                            armed: false,
                        },
                    );
                }
                Err(e) => out.push((
                    i,
                    ProbeOutcome::ConnectFailed {
                        cause: format!("QP error: {e}"),
                    },
                )),
            }
        }
        let conns = &mut self.conns;
        // Poll a flight's queue; false when the flight is over (its outcome is in `out`).
        fn step(
            conns: &mut HashMap<FlowKey, Conn>,
            keys: &[FlowKey],
            f: &mut Flight,
            now: Instant,
            out: &mut Vec<(usize, ProbeOutcome)>,
        ) -> bool {
            let ep = &mut conns.get_mut(&keys[f.i]).expect("connected").ep;
            match f.step(ep, now) {
                Step::Done(o) => {
                    out.push((f.i, o));
                    false
                }
                Step::Waiting => true,
            }
        }
        let spin_until = if busy {
            // Until every reply is in or its deadline passes.
            flights
                .values()
                .map(|f| f.deadline)
                .max()
                .unwrap_or_else(Instant::now)
        } else {
            Instant::now() + Duration::from_millis(2)
        };
        while !flights.is_empty() && Instant::now() < spin_until {
            let now = Instant::now();
            flights.retain(|_, f| step(conns, keys, f, now, &mut out));
            std::hint::spin_loop();
        }
        // Arm every waiting queue, then look once more: a completion that landed before
        // its queue was armed raised no event.
        let mut to_check: Vec<usize> = flights.keys().copied().collect();
        while !flights.is_empty() {
            let now = Instant::now();
            for cq in to_check.drain(..) {
                let Some(f) = flights.get_mut(&cq) else {
                    continue;
                };
                if !f.armed {
                    let ep = &conns.get(&keys[f.i]).expect("connected").ep;
                    // A queue that cannot be armed is polled at every wake-up (below).
                    f.armed = ep.arm();
                }
                if !step(conns, keys, f, now, &mut out) {
                    flights.remove(&cq);
                }
            }
            let Some(until) = flights.values().map(|f| f.deadline).min() else {
                break;
            };
            // Sleep until a completion or the first deadline (at most 100 ms, so a queue
            // that could not be armed is still looked at).
            let wait = until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            let mut ready = Vec::new();
            self.epoll.as_ref().expect("started").wait(wait, &mut ready);
            for token in &ready {
                // Read the events (a queue left with one would stay ready); a flight's
                // queue is then disarmed and looked at.
                if let Some(c) = self.tokens.get(token).and_then(|p| conns.get(p)) {
                    c.ep.take_events();
                }
                let cq = *token as usize;
                if let Some(f) = flights.get_mut(&cq) {
                    f.armed = false;
                    to_check.push(cq);
                }
            }
            if to_check.is_empty() {
                // A timeout (or only stale events of earlier rounds): deadlines, and
                // queues that could not be armed.
                let now = Instant::now();
                to_check.extend(
                    flights
                        .iter()
                        .filter(|(_, f)| !f.armed || now >= f.deadline)
                        .map(|(cq, _)| *cq),
                );
            }
        }
        out
    }
}

impl VerbsProbe {
    /// Probe `targets` together; with `whole_round`, flows not among them are forgotten.
    /// Each (peer, path) is a flow with its own queue pair; a flow whose label changed
    /// moves to its new source port before the round (connecting again if that fails).
    pub(crate) fn probe_targets(
        &mut self,
        targets: &[ProbeTarget],
        whole_round: bool,
    ) -> Result<Vec<ProbeResult>, PluginError> {
        let setup = Arc::clone(
            self.setup
                .as_ref()
                .ok_or_else(|| self.not_started("probe"))?,
        );
        let keys: Vec<FlowKey> = targets.iter().map(|t| (t.peer.clone(), t.path)).collect();
        let mut outcomes: Vec<Option<ProbeOutcome>> = vec![None; targets.len()];
        let mut first: HashMap<&FlowKey, usize> = HashMap::new();
        let mut unique = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            if first.insert(k, i).is_none() {
                unique.push(i);
            }
        }
        for &i in &unique {
            let t = &targets[i];
            let Some(c) = self.conns.get_mut(&keys[i]) else {
                continue;
            };
            // A queue pair made for another message size is made again; one whose flow
            // label changed moves (or is made again when it cannot).
            if c.size != t.size || (c.flow_label != t.flow_label && c.repath(t.flow_label).is_err())
            {
                self.drop_conn(&keys[i]);
            }
        }
        let now = Instant::now();
        let mut missing = Vec::new();
        for &i in &unique {
            if self.conns.contains_key(&keys[i]) {
                continue;
            }
            match self.backoff.due(&targets[i].peer, now) {
                Err(cause) => outcomes[i] = Some(ProbeOutcome::ConnectFailed { cause }),
                Ok(()) => missing.push(i),
            }
        }
        // The backoff is the peer's: a round's flows to it move it once (a failure
        // doubles the wait once, not once per flow; any flow connecting clears it).
        let mut connected: HashMap<&str, Option<String>> = HashMap::new();
        for (i, r) in connect_all(&setup, targets, &missing) {
            let peer = targets[i].peer.as_str();
            match r {
                Ok(c) => {
                    connected.insert(peer, None);
                    self.add_conn(&keys[i], c);
                }
                Err(cause) => {
                    connected.entry(peer).or_insert_with(|| Some(cause.clone()));
                    outcomes[i] = Some(ProbeOutcome::ConnectFailed { cause });
                }
            }
        }
        for (peer, failed) in connected {
            match failed {
                None => self.backoff.succeeded(peer),
                Some(cause) => self.backoff.failed(peer, &cause, Instant::now()),
            }
        }
        // A round names every flow: the others are forgotten (their queue pairs closed),
        // so memory follows the peer list.
        if whole_round {
            let asked: std::collections::HashSet<&str> =
                targets.iter().map(|t| t.peer.as_str()).collect();
            self.backoff.peers.retain(|p, _| asked.contains(p.as_str()));
            let gone: Vec<FlowKey> = self
                .conns
                .keys()
                .filter(|k| !first.contains_key(k))
                .cloned()
                .collect();
            for k in gone {
                self.drop_conn(&k);
            }
        }
        let ready: Vec<usize> = unique
            .iter()
            .copied()
            .filter(|&i| outcomes[i].is_none())
            .collect();
        for (i, o) in self.ping_all(setup.opts.busy_poll, targets, &keys, &ready) {
            if !matches!(o, ProbeOutcome::Ok { .. }) {
                // A timeout or a failed completion drops the queue pair; the next probe
                // connects again.
                self.drop_conn(&keys[i]);
            }
            outcomes[i] = Some(o);
        }
        Ok(targets
            .iter()
            .enumerate()
            .map(|(i, t)| ProbeResult {
                peer: t.peer.clone(),
                outcome: outcomes[i]
                    .clone()
                    .or_else(|| outcomes[first[&keys[i]]].clone())
                    .unwrap_or(ProbeOutcome::Timeout),
                // The same for every peer: said once per round.
                nic_timestamps: (i == 0).then(|| setup.timestamps.clone()),
                cm: None,
            })
            .collect())
    }
}
