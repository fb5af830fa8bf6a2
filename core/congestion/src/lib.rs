//! What a port's congestion counters mean together, per priority: one state out of six,
//! with the evidence it rests on and the knob it points to.
//!
//! The input is one interval's rates for one port and priority ([`Rates`]): the
//! priority's own counters (bytes, pause frames, time paused, discards: mlx5 and bnxt
//! per priority, ice per priority for pauses) and the port's RDMA counters (ECN-marked
//! packets, CNPs sent and handled, out-of-sequence, retransmissions: per port only; they go
//! to the priorities of the port that carry traffic or pauses and have PFC on (the NIC
//! reports pauses for them), or, where no priority reports pauses, to every busy one).
//! A counter the NIC does not have is `None` and counts as no evidence, never as zero: no
//! ECN counter read is said as such, and without transmit bytes no storm is claimed.
//!
//! The states, first match wins:
//!
//! | state | condition | knob |
//! |---|---|---|
//! | `storm` | paused by the peer at least 90 % of the interval while the priority sends (next to) nothing | the receiver that keeps pausing (a stuck host, a loop); the switch's PFC watchdog; the NIC's storm prevention |
//! | `pfc_dominated` | pauses, with fewer ECN marks and CNPs than pause frames | ECN on that priority, its marking threshold below PFC xoff |
//! | `lossy` | out-of-sequence, retransmissions or discards without pauses | PFC on that priority, end to end |
//! | `ecn_controlled` | ECN marks or CNPs, no pauses | none: DCQCN at work (its rates and timers if throughput suffers) |
//! | `flowing` | traffic and none of the above | none |
//! | `idle` | no traffic, no pauses | none |
//!
//! The storm condition is the one SONiC's PFC watchdog acts on: a queue that receives
//! pauses for nearly all of its detection time while it does not drain.
//!
//! [`classify`] gives the state with its evidence and knob (what `rocewatch congestion` and
//! `doctor` print); [`state_of`] the state alone, without formatting (what the agent
//! derives after every collection, per port and priority).

mod advice;

pub use advice::settings_advice;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rocewatch_metrics::counter::{counter_move_from, Move};
use rocewatch_plugin_api::Sample;

use rocewatch_metrics::{
    names, ATTR_DEVICE, ATTR_DIRECTION, ATTR_NETDEV, ATTR_PORT, ATTR_PRIORITY,
};

/// A priority paused for at least this share of the interval, while it sends (next to)
/// nothing, is a storm suspect.
pub const STORM_PAUSED: f64 = 0.9;
/// "Next to nothing": under this many bytes a second (a few pause-refresh-sized frames).
pub const STORM_TX_BYTES: f64 = 1024.0;

/// One interval's rates (per second) for one port and priority; `None` where the NIC or
/// the interval gave nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    /// Bytes sent and received on the priority.
    pub tx_bytes: Option<f64>,
    pub rx_bytes: Option<f64>,
    /// Share of the interval (0..1) the peer kept this priority paused (received
    /// pauses), and this port kept the peer paused (sent pauses).
    pub paused_by_peer: Option<f64>,
    pub pausing_peer: Option<f64>,
    /// Pause (XOFF) frames received and sent on the priority.
    pub pause_frames_rx: Option<f64>,
    pub pause_frames_tx: Option<f64>,
    /// Packets of the priority discarded.
    pub discards: Option<f64>,
    /// The port's RDMA counters.
    pub ecn_marked: Option<f64>,
    pub cnp_sent: Option<f64>,
    pub cnp_handled: Option<f64>,
    pub out_of_sequence: Option<f64>,
    pub retransmissions: Option<f64>,
}

/// The six states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    Idle,
    Flowing,
    EcnControlled,
    Lossy,
    PfcDominated,
    Storm,
}

impl State {
    /// Every state, in order of concern.
    pub const ALL: [State; 6] = [
        State::Idle,
        State::Flowing,
        State::EcnControlled,
        State::Lossy,
        State::PfcDominated,
        State::Storm,
    ];

    /// The attribute value (`rdma.congestion.state`).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Flowing => "flowing",
            State::EcnControlled => "ecn_controlled",
            State::Lossy => "lossy",
            State::PfcDominated => "pfc_dominated",
            State::Storm => "storm",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state, what it rests on (the rates that decided it, as text) and what to look at.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub state: State,
    pub evidence: String,
    /// Empty when nothing needs doing.
    pub knob: &'static str,
}

fn pos(v: Option<f64>) -> f64 {
    v.filter(|x| x.is_finite() && *x > 0.0).unwrap_or(0.0)
}

fn per_s(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}/s")
    } else {
        format!("{v:.2}/s")
    }
}

/// The signals one interval's rates give, each absent or unusable counter as none.
struct Signals {
    /// Shares of the interval paused by the peer and pausing it (0..1).
    paused: f64,
    pausing: f64,
    /// Pause frames received and sent.
    pauses: f64,
    paused_any: bool,
    /// ECN marks and CNPs sent and handled.
    ecn: f64,
    /// Whether any ECN or CNP counter was read at all.
    ecn_read: bool,
    /// Out-of-sequence, retransmissions and discards.
    loss: f64,
    tx: f64,
    rx: f64,
}

impl Signals {
    fn of(r: &Rates) -> Signals {
        let paused = pos(r.paused_by_peer).min(1.0);
        let pausing = pos(r.pausing_peer).min(1.0);
        let pauses = pos(r.pause_frames_rx) + pos(r.pause_frames_tx);
        Signals {
            paused,
            pausing,
            pauses,
            paused_any: pauses > 0.0 || paused > 0.0 || pausing > 0.0,
            ecn: pos(r.ecn_marked) + pos(r.cnp_sent) + pos(r.cnp_handled),
            ecn_read: [r.ecn_marked, r.cnp_sent, r.cnp_handled]
                .iter()
                .any(|v| v.is_some_and(f64::is_finite)),
            loss: pos(r.out_of_sequence) + pos(r.retransmissions) + pos(r.discards),
            tx: pos(r.tx_bytes),
            rx: pos(r.rx_bytes),
        }
    }
}

/// Which condition decided the state (`pfc_dominated` has two: without any ECN counter
/// read, and with fewer marks and CNPs than pauses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Storm,
    PfcEcnUnread,
    PfcEcnBehind,
    Lossy,
    EcnControlled,
    Flowing,
    Idle,
}

impl Case {
    fn of(r: &Rates, s: &Signals) -> Case {
        if s.paused >= STORM_PAUSED
            && r.tx_bytes.is_some_and(f64::is_finite)
            && s.tx < STORM_TX_BYTES
        {
            return Case::Storm;
        }
        if s.paused_any {
            if !s.ecn_read {
                return Case::PfcEcnUnread;
            }
            if s.ecn < s.pauses || s.ecn == 0.0 {
                return Case::PfcEcnBehind;
            }
        }
        if s.loss > 0.0 && !s.paused_any {
            Case::Lossy
        } else if s.ecn > 0.0 {
            Case::EcnControlled
        } else if s.tx + s.rx > 0.0 {
            Case::Flowing
        } else {
            Case::Idle
        }
    }

    fn state(self) -> State {
        match self {
            Case::Storm => State::Storm,
            Case::PfcEcnUnread | Case::PfcEcnBehind => State::PfcDominated,
            Case::Lossy => State::Lossy,
            Case::EcnControlled => State::EcnControlled,
            Case::Flowing => State::Flowing,
            Case::Idle => State::Idle,
        }
    }
}

/// The state of one port and priority over one interval, without the evidence text:
/// what the agent derives after every collection (a text per port and priority it would
/// throw away), the same state as [`classify`]'s.
pub fn state_of(r: &Rates) -> State {
    Case::of(r, &Signals::of(r)).state()
}

/// The state of one port and priority over one interval, with its evidence and knob.
pub fn classify(r: &Rates) -> Verdict {
    let s = Signals::of(r);
    let case = Case::of(r, &s);
    let pct = |x: f64| format!("{:.0} %", x * 100.0);
    let losses = || {
        if s.loss > 0.0 {
            format!(", and losses {} despite them", per_s(s.loss))
        } else {
            String::new()
        }
    };
    let (evidence, knob) = match case {
        Case::Storm => (
            format!(
                "paused by the peer {} of the interval while sending {:.0} B/s",
                pct(s.paused),
                s.tx
            ),
            "the peer keeps pausing this priority because something behind it does not drain (a stuck receiver host, or a loop): find it from the switch's pause counters; the switch's PFC watchdog contains it, and on the stuck host the NIC's storm prevention (ethtool --set-tunable IF pfc-prevention-tout) stops it pausing",
        ),
        Case::PfcEcnUnread => (
            format!(
                "pause frames {} (paused by the peer {}, pausing it {}), no ECN or CNP counter read{}",
                per_s(s.pauses),
                pct(s.paused),
                pct(s.pausing),
                losses()
            ),
            "pauses, and nothing here says whether ECN marks: read the port's ECN and CNP counters (hw_counters np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled) and check ECN is on for this priority (rocewatch qos show)",
        ),
        Case::PfcEcnBehind => (
            format!(
                "pause frames {} (paused by the peer {}, pausing it {}), ECN marks and CNPs {}{}",
                per_s(s.pauses),
                pct(s.paused),
                pct(s.pausing),
                per_s(s.ecn),
                losses()
            ),
            if s.ecn == 0.0 {
                "ECN is off or never marks on this priority: enable it on the switch queue and the NIC (rocewatch qos plan), marking below the PFC xoff threshold"
            } else {
                "ECN marks later than PFC triggers: lower the switch's ECN marking threshold (Kmin) below the PFC xoff threshold, or raise xoff within the headroom"
            },
        ),
        Case::Lossy => (
            format!(
                "out-of-sequence {}, retransmissions {}, discards {}, and no pauses",
                per_s(pos(r.out_of_sequence)),
                per_s(pos(r.retransmissions)),
                per_s(pos(r.discards))
            ),
            "the priority is not lossless in practice: PFC on it on the NIC and every switch port of the path (rocewatch qos plan; rocewatch doctor compares with the switch)",
        ),
        Case::EcnControlled => (
            format!(
                "ECN marks {}, CNPs sent {}, handled {}, pause frames {}",
                per_s(pos(r.ecn_marked)),
                per_s(pos(r.cnp_sent)),
                per_s(pos(r.cnp_handled)),
                per_s(s.pauses)
            ),
            "",
        ),
        Case::Flowing => (
            format!(
                "sending {:.0} B/s, receiving {:.0} B/s, no congestion signal",
                s.tx, s.rx
            ),
            "",
        ),
        Case::Idle => ("no traffic, no pauses".into(), ""),
    };
    Verdict {
        state: case.state(),
        evidence,
        knob,
    }
}

/// Where a state belongs: a port (device and port, when the driver statistics were
/// mapped to an RDMA port), its netdev, a priority.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortPriority {
    pub device: String,
    pub port: String,
    pub netdev: String,
    pub priority: String,
}

/// Gathers one interval's rates by port and priority from named counters, whatever
/// reads them (the agent's store, or two collections `doctor` took): the priority's own
/// (`rdma.priority.io`, `rdma.pfc.pause_duration`, `rdma.pfc.pause_frames`,
/// `rdma.priority.discards`) and the port's RDMA counters, joined by device and port.
#[derive(Debug, Default)]
pub struct Join {
    per: BTreeMap<PortPriority, Rates>,
    ports: BTreeMap<(String, String), Rates>,
}

fn add(slot: &mut Option<f64>, v: f64) {
    *slot = Some(slot.unwrap_or(0.0) + v);
}

impl Join {
    /// The counters it reads.
    pub const METRICS: [&'static str; 9] = [
        names::PRIORITY_IO,
        names::PFC_PAUSE_DURATION,
        names::PFC_PAUSE_FRAMES,
        names::PRIORITY_DISCARDS,
        names::PORT_ECN_MARKED_PACKETS,
        names::PORT_CNP_SENT,
        names::PORT_CNP_HANDLED,
        names::PORT_OUT_OF_SEQUENCE,
        names::PORT_RETRANSMISSIONS_PACKETS,
    ];

    /// One counter's rate per second; `attr` looks its attributes up. Other metrics,
    /// and per-priority ones without a priority, are ignored.
    pub fn add<'a>(&mut self, name: &str, attr: impl Fn(&str) -> Option<&'a str>, rate: f64) {
        let get = |k: &str| attr(k).unwrap_or("").to_string();
        if let Some(prio) = attr(ATTR_PRIORITY) {
            let key = PortPriority {
                device: get(ATTR_DEVICE),
                port: get(ATTR_PORT),
                netdev: get(ATTR_NETDEV),
                priority: prio.to_string(),
            };
            let sent = attr(ATTR_DIRECTION) == Some("transmit");
            let r = self.per.entry(key).or_default();
            let (slot, v) = match (name, sent) {
                (names::PRIORITY_IO, true) => (&mut r.tx_bytes, rate),
                (names::PRIORITY_IO, false) => (&mut r.rx_bytes, rate),
                // Received pause time: the peer kept this priority paused (µs per s).
                (names::PFC_PAUSE_DURATION, false) => (&mut r.paused_by_peer, rate * 1e-6),
                (names::PFC_PAUSE_DURATION, true) => (&mut r.pausing_peer, rate * 1e-6),
                (names::PFC_PAUSE_FRAMES, false) => (&mut r.pause_frames_rx, rate),
                (names::PFC_PAUSE_FRAMES, true) => (&mut r.pause_frames_tx, rate),
                (names::PRIORITY_DISCARDS, _) => (&mut r.discards, rate),
                _ => return,
            };
            return add(slot, v);
        }
        let (Some(dev), Some(port)) = (attr(ATTR_DEVICE), attr(ATTR_PORT)) else {
            return;
        };
        let r = self
            .ports
            .entry((dev.to_string(), port.to_string()))
            .or_default();
        let slot = match name {
            names::PORT_ECN_MARKED_PACKETS => &mut r.ecn_marked,
            names::PORT_CNP_SENT => &mut r.cnp_sent,
            names::PORT_CNP_HANDLED => &mut r.cnp_handled,
            names::PORT_OUT_OF_SEQUENCE => &mut r.out_of_sequence,
            names::PORT_RETRANSMISSIONS_PACKETS => &mut r.retransmissions,
            _ => return,
        };
        add(slot, rate);
    }

    /// Every port and priority with per-priority rates, its port's RDMA counters joined
    /// in where it carries traffic or pauses (a port's ECN marks say nothing about a
    /// priority without traffic) and, where some priority of the port reports pauses
    /// (PFC on), only into those.
    pub fn finish(self) -> Vec<(PortPriority, Rates)> {
        let ports = self.ports;
        let busy = |r: &Rates| {
            [r.tx_bytes, r.rx_bytes, r.pause_frames_rx, r.pause_frames_tx]
                .iter()
                .any(|v| v.is_some_and(|x| x > 0.0))
        };
        // A priority the NIC reports pauses for has PFC on (mlx5 prints them only for
        // those): RoCE's. Where some priority of a port has them, the port's RDMA counters
        // go to those only, so TCP beside RoCE is not blamed for RoCE's losses.
        let pfc = |r: &Rates| {
            [
                r.pause_frames_rx,
                r.pause_frames_tx,
                r.paused_by_peer,
                r.pausing_peer,
            ]
            .iter()
            .any(Option::is_some)
        };
        let mut pfc_ports = std::collections::BTreeSet::new();
        for (k, r) in &self.per {
            if pfc(r) {
                pfc_ports.insert((k.device.clone(), k.port.clone()));
            }
        }
        self.per
            .into_iter()
            .map(|(k, mut r)| {
                let port = (k.device.clone(), k.port.clone());
                let roce = busy(&r) && (pfc(&r) || !pfc_ports.contains(&port));
                if let Some(p) = ports.get(&port).filter(|_| roce) {
                    r.ecn_marked = p.ecn_marked;
                    r.cnp_sent = p.cnp_sent;
                    r.cnp_handled = p.cnp_handled;
                    r.out_of_sequence = p.out_of_sequence;
                    r.retransmissions = p.retransmissions;
                }
                (k, r)
            })
            .collect()
    }
}

/// One port and priority over an interval: where, its rates, its state.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub at: PortPriority,
    pub rates: Rates,
    pub verdict: Verdict,
}

fn series_key(s: &Sample) -> String {
    let attrs: Vec<String> = s
        .attributes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{}{{{}}}", s.name, attrs.join(","))
}

/// Whether a collection holds a per-priority counter [`between`] reads. Rows need the same
/// series in both collections: a first collection without one decides the outcome (no
/// rows, whatever the second holds), so a caller need not wait out its window.
pub fn has_per_priority(samples: &[Sample]) -> bool {
    samples.iter().any(|s| {
        Join::METRICS.contains(&s.name.as_ref()) && s.attributes.get(ATTR_PRIORITY).is_some()
    })
}

/// The state of every port and priority between two collections `window` apart (what
/// `rocewatch doctor` and `rocewatch congestion` read): each counter's increase over the
/// window, a reset or a counter resting at its top counting as no evidence.
pub fn between(before: &[Sample], after: &[Sample], window: Duration) -> Vec<Row> {
    let secs = window.as_secs_f64();
    if secs <= 0.0 {
        return Vec::new();
    }
    let read = |s: &&Sample| Join::METRICS.contains(&s.name.as_ref());
    let old: BTreeMap<String, f64> = before
        .iter()
        .filter(read)
        .map(|s| (series_key(s), s.value.as_f64()))
        .collect();
    let mut join = Join::default();
    for s in after.iter().filter(read) {
        let Some(&o) = old.get(&series_key(s)) else {
            continue;
        };
        if let Move::Increase(d) = counter_move_from(&s.source, o, s.value.as_f64(), None) {
            join.add(&s.name, |k| s.attributes.get(k), d.max(0.0) / secs);
        }
    }
    join.finish()
        .into_iter()
        .map(|(at, rates)| Row {
            verdict: classify(&rates),
            at,
            rates,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Rates {
        Rates {
            tx_bytes: Some(0.0),
            rx_bytes: Some(0.0),
            paused_by_peer: Some(0.0),
            pausing_peer: Some(0.0),
            pause_frames_rx: Some(0.0),
            pause_frames_tx: Some(0.0),
            discards: Some(0.0),
            ecn_marked: Some(0.0),
            cnp_sent: Some(0.0),
            cnp_handled: Some(0.0),
            out_of_sequence: Some(0.0),
            retransmissions: Some(0.0),
        }
    }

    #[test]
    fn each_state_from_its_counters() {
        assert_eq!(classify(&r()).state, State::Idle);
        assert_eq!(classify(&Rates::default()).state, State::Idle);
        let flowing = Rates {
            tx_bytes: Some(2e9),
            rx_bytes: Some(1e9),
            ..r()
        };
        assert_eq!(classify(&flowing).state, State::Flowing);
        let ecn = Rates {
            ecn_marked: Some(1200.0),
            cnp_sent: Some(300.0),
            cnp_handled: Some(250.0),
            ..flowing.clone()
        };
        let v = classify(&ecn);
        assert_eq!(v.state, State::EcnControlled);
        assert!(v.evidence.contains("ECN marks 1200/s"), "{}", v.evidence);
        assert!(v.knob.is_empty());
        // Pauses and no ECN at all: ECN is off.
        let pfc = Rates {
            pause_frames_rx: Some(5000.0),
            paused_by_peer: Some(0.3),
            ..flowing.clone()
        };
        let v = classify(&pfc);
        assert_eq!(v.state, State::PfcDominated);
        assert!(v.knob.contains("ECN is off"), "{}", v.knob);
        assert!(
            v.evidence.contains("paused by the peer 30 %"),
            "{}",
            v.evidence
        );
        // Pauses outnumbering ECN marks: ECN marks too late.
        let late = Rates {
            ecn_marked: Some(100.0),
            ..pfc.clone()
        };
        let v = classify(&late);
        assert_eq!(v.state, State::PfcDominated);
        assert!(v.knob.contains("Kmin"), "{}", v.knob);
        // ECN marks outnumbering the pauses: DCQCN does the work, PFC is the backstop.
        let mostly_ecn = Rates {
            ecn_marked: Some(50_000.0),
            pause_frames_rx: Some(10.0),
            ..flowing.clone()
        };
        assert_eq!(classify(&mostly_ecn).state, State::EcnControlled);
        // Losses without pauses: not lossless in practice.
        let lossy = Rates {
            out_of_sequence: Some(40.0),
            retransmissions: Some(35.0),
            ..flowing.clone()
        };
        let v = classify(&lossy);
        assert_eq!(v.state, State::Lossy);
        assert!(v.knob.contains("PFC on it"), "{}", v.knob);
        // Losses with pauses: PFC-dominated, the losses said.
        let both = Rates {
            out_of_sequence: Some(40.0),
            ..pfc.clone()
        };
        let v = classify(&both);
        assert_eq!(v.state, State::PfcDominated);
        assert!(
            v.evidence.contains("losses 40.00/s despite them"),
            "{}",
            v.evidence
        );
    }

    /// SONiC's PFC watchdog condition: paused nearly all of the interval, nothing sent.
    #[test]
    fn storm_is_paused_and_not_draining() {
        let storm = Rates {
            paused_by_peer: Some(0.97),
            pause_frames_rx: Some(14_000.0),
            tx_bytes: Some(12.0),
            ..r()
        };
        let v = classify(&storm);
        assert_eq!(v.state, State::Storm);
        assert!(v.evidence.contains("97 %"), "{}", v.evidence);
        // Paused as much but still sending: heavy PFC, not a deadlock.
        let draining = Rates {
            tx_bytes: Some(3e9),
            ..storm.clone()
        };
        assert_eq!(classify(&draining).state, State::PfcDominated);
        // Not enough pausing.
        let short = Rates {
            paused_by_peer: Some(0.5),
            ..storm.clone()
        };
        assert_eq!(classify(&short).state, State::PfcDominated);
        // Transmit bytes unknown (ice has no per-priority bytes): no storm claimed.
        let unknown = Rates {
            tx_bytes: None,
            ..storm
        };
        assert_eq!(classify(&unknown).state, State::PfcDominated);
    }

    /// No ECN counter read is no evidence, not "ECN off"; a transmit rate that is not a
    /// number claims no storm.
    #[test]
    fn what_was_not_read_is_not_zero() {
        let pauses_only = Rates {
            tx_bytes: Some(1e9),
            pause_frames_rx: Some(500.0),
            ..Rates::default()
        };
        let v = classify(&pauses_only);
        assert_eq!(v.state, State::PfcDominated);
        assert!(
            v.evidence.contains("no ECN or CNP counter read"),
            "{}",
            v.evidence
        );
        assert!(!v.knob.contains("ECN is off"), "{}", v.knob);
        let nan = Rates {
            tx_bytes: Some(f64::NAN),
            paused_by_peer: Some(0.99),
            ..Rates::default()
        };
        assert_ne!(classify(&nan).state, State::Storm);
    }

    /// The port's RDMA counters go to the priority with PFC (pause counters), not to TCP
    /// beside it; with no priority reporting pauses, to every busy one.
    #[test]
    fn port_counters_go_to_the_pfc_priority() {
        let attrs = |prio: Option<&'static str>, dir: Option<&'static str>| {
            move |k: &str| match k {
                "rdma.device" => Some("mlx5_0"),
                "rdma.port" => Some("1"),
                "rdma.priority" => prio,
                "network.io.direction" => dir,
                _ => None,
            }
        };
        let mut j = Join::default();
        j.add(names::PRIORITY_IO, attrs(Some("0"), Some("transmit")), 1e9);
        j.add(names::PRIORITY_IO, attrs(Some("3"), Some("transmit")), 1e9);
        j.add(
            names::PFC_PAUSE_FRAMES,
            attrs(Some("3"), Some("receive")),
            0.0,
        );
        j.add(names::PORT_OUT_OF_SEQUENCE, attrs(None, None), 40.0);
        let out = j.finish();
        let state = |p: &str| classify(&out.iter().find(|(k, _)| k.priority == p).unwrap().1).state;
        assert_eq!(state("3"), State::Lossy);
        assert_eq!(state("0"), State::Flowing);
        // No pause counters anywhere (a NIC without them): every busy priority.
        let mut j = Join::default();
        j.add(names::PRIORITY_IO, attrs(Some("0"), Some("transmit")), 1e9);
        j.add(names::PORT_OUT_OF_SEQUENCE, attrs(None, None), 40.0);
        assert_eq!(classify(&j.finish()[0].1).state, State::Lossy);
    }

    fn counter(name: &'static str, attrs: &[(&str, &str)], value: u64) -> Sample {
        Sample {
            name: name.into(),
            unit: "By".into(),
            value: rocewatch_plugin_api::Value::U64(value),
            attributes: std::sync::Arc::new(attrs.iter().copied().collect()),
            source: "test".into(),
            kind: rocewatch_plugin_api::MetricKind::Counter,
        }
    }

    /// A first collection without a per-priority counter decides it: no rows, whatever
    /// the second holds (a priority's series that appears later has no start to count
    /// from); a port counter alone is not one.
    #[test]
    fn a_first_collection_without_priorities_decides() {
        let port = [("rdma.device", "mlx5_0"), ("rdma.port", "1")];
        let prio = [
            ("rdma.device", "mlx5_0"),
            ("rdma.port", "1"),
            ("rdma.priority", "3"),
            ("network.io.direction", "transmit"),
        ];
        let first = vec![counter(names::PORT_CNP_SENT, &port, 10)];
        assert!(!has_per_priority(&first));
        assert!(!has_per_priority(&[]));
        // A priority attribute on a counter `between` does not read is not one either.
        assert!(!has_per_priority(&[counter("rdma.other", &prio, 1)]));
        let second = vec![
            counter(names::PORT_CNP_SENT, &port, 20),
            counter(names::PRIORITY_IO, &prio, 5000),
        ];
        assert!(has_per_priority(&second));
        assert!(between(&first, &second, Duration::from_secs(1)).is_empty());
        // With it in both, a row.
        let first = vec![counter(names::PRIORITY_IO, &prio, 1000)];
        assert!(has_per_priority(&first));
        assert_eq!(between(&first, &second, Duration::from_secs(1)).len(), 1);
    }

    proptest::proptest! {
        /// Any rates, NaN and infinities included: a state, never a panic; the evidence
        /// never says NaN.
        #[test]
        fn any_rates_give_a_state(v in proptest::collection::vec(
            proptest::option::of(proptest::prop_oneof![
                proptest::num::f64::ANY,
                0.0..1e12f64,
            ]), 12)) {
            let r = Rates {
                tx_bytes: v[0], rx_bytes: v[1], paused_by_peer: v[2], pausing_peer: v[3],
                pause_frames_rx: v[4], pause_frames_tx: v[5], discards: v[6],
                ecn_marked: v[7], cnp_sent: v[8], cnp_handled: v[9],
                out_of_sequence: v[10], retransmissions: v[11],
            };
            let out = classify(&r);
            proptest::prop_assert!(State::ALL.contains(&out.state));
            proptest::prop_assert!(!out.evidence.contains("NaN"), "{}", out.evidence);
            // The state the agent derives without the text is the one the text explains.
            proptest::prop_assert_eq!(state_of(&r), out.state);
        }
    }
}
