//! Events: what the agent decided or saw happen (a rule firing, a remediation decision
//! and its result, a quarantine entered or released), as records a log pipeline takes,
//! sent as OTLP log records beside the metrics (`rocewatch_export::otlp::logs`).
//!
//! Sources publish to the process's [`EventBus`] and never wait: the bus is a bounded
//! queue that drops its oldest event when full (counted, [`EventBus::take_dropped`]), and
//! publishing without a bus installed (no OTLP endpoint, or `events = false`, also after
//! a reload turned them off: the exporter takes its bus out when it stops) does
//! nothing. The bus is process-wide, as `tracing`'s dispatcher is: events arise in the
//! audit log's append, which every command builds from its configuration, and threading
//! a handle through each of those builders would buy nothing.
//!
//! The audit log stays the record (flushed before an action runs); an event is its copy
//! for a log backend, published after the record is written (`audit`), so a decision's
//! records and events share its `decision_id`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// Events the bus holds at most before it drops its oldest.
pub const BUS_CAPACITY: usize = 4096;

/// Event names (the `event.name` of each log record).
pub mod names {
    pub const RULE_TRANSITION: &str = "rocewatch.rule.transition";
    pub const REMEDIATION_DECISION: &str = "rocewatch.remediation.decision";
    pub const REMEDIATION_RESULT: &str = "rocewatch.remediation.result";
    pub const QUARANTINE_ENTERED: &str = "rocewatch.quarantine.entered";
    pub const QUARANTINE_RELEASED: &str = "rocewatch.quarantine.released";
    pub const QOS_DECISION: &str = "rocewatch.qos.decision";
    pub const QOS_RESULT: &str = "rocewatch.qos.result";
    pub const CONFIG_RELOAD: &str = "rocewatch.config.reload";
    pub const LINK_UP: &str = "rocewatch.link.up";
    pub const LINK_DOWN: &str = "rocewatch.link.down";
    pub const HEALTH_VERDICT: &str = "rocewatch.health.verdict";
}

/// An event's severity, as OTLP's `SeverityNumber` ranges name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Info,
    Warn,
    Error,
}

impl Severity {
    /// `SeverityNumber` (INFO 9, WARN 13, ERROR 17).
    pub fn number(self) -> i32 {
        match self {
            Severity::Info => 9,
            Severity::Warn => 13,
            Severity::Error => 17,
        }
    }

    /// `severity_text`.
    pub fn text(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
            Severity::Error => "ERROR",
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub time: SystemTime,
    /// One of [`names`].
    pub name: &'static str,
    pub severity: Severity,
    /// One line a person reads.
    pub body: String,
    /// The event's attributes: the labels of what it is about (device, port, priority,
    /// workload...) and its own (`rocewatch.decision_id`, `rocewatch.rule`...).
    pub attributes: BTreeMap<String, String>,
}

impl Event {
    /// A rule began firing or cleared: WARN when firing (or the rule's own `severity`
    /// when it says `critical`: ERROR), INFO when cleared.
    pub fn rule_transition(
        rule: &str,
        metric: &str,
        firing: bool,
        value: f64,
        severity: &str,
        labels: &BTreeMap<String, String>,
    ) -> Event {
        let mut attributes = labels.clone();
        attributes.insert("rocewatch.rule".into(), rule.into());
        attributes.insert("rocewatch.rule.metric".into(), metric.into());
        let state = if firing { "firing" } else { "resolved" };
        attributes.insert("rocewatch.rule.state".into(), state.into());
        if !severity.is_empty() {
            attributes.insert("rocewatch.rule.severity".into(), severity.into());
        }
        if value.is_finite() {
            attributes.insert("rocewatch.rule.value".into(), value.to_string());
        }
        let sev = match (firing, severity) {
            (false, _) => Severity::Info,
            (true, "critical") => Severity::Error,
            (true, _) => Severity::Warn,
        };
        let on = describe(labels);
        Event {
            time: SystemTime::now(),
            name: names::RULE_TRANSITION,
            severity: sev,
            body: format!("rule {rule} {state}{on} ({metric} = {value})"),
            attributes,
        }
    }
}

impl Event {
    /// A port's link went down (WARN) or came back up (INFO), as `rdma.port.up` changed
    /// between two reads.
    pub fn link(up: bool, labels: &BTreeMap<String, String>) -> Event {
        let on = describe(labels);
        Event {
            time: SystemTime::now(),
            name: if up { names::LINK_UP } else { names::LINK_DOWN },
            severity: if up { Severity::Info } else { Severity::Warn },
            body: if up {
                format!("link up{on}")
            } else {
                format!("link down{on} (not ACTIVE and LinkUp)")
            },
            attributes: labels.clone(),
        }
    }

    /// The health self-test's verdict changed (the quarantine's recovery policy runs it):
    /// `line` is its one-line summary.
    pub fn health_verdict(healthy: bool, line: &str) -> Event {
        let verdict = if healthy { "healthy" } else { "unhealthy" };
        Event {
            time: SystemTime::now(),
            name: names::HEALTH_VERDICT,
            severity: if healthy {
                Severity::Info
            } else {
                Severity::Warn
            },
            body: format!("health self-test: {line}"),
            attributes: [("rocewatch.health.verdict".to_string(), verdict.to_string())]
                .into_iter()
                .collect(),
        }
    }

    /// A configuration reload (SIGHUP): INFO when the new configuration runs, ERROR when
    /// it was refused or did not start (`body`: why; the agent runs on with the old one).
    pub fn config_reload(ok: bool, body: String) -> Event {
        let result = if ok { "ok" } else { "error" };
        Event {
            time: SystemTime::now(),
            name: names::CONFIG_RELOAD,
            severity: if ok { Severity::Info } else { Severity::Error },
            body,
            attributes: [("rocewatch.reload.result".to_string(), result.to_string())]
                .into_iter()
                .collect(),
        }
    }
}

/// ` on mlx5_0 port 1` from a series' labels, or nothing.
pub fn describe(labels: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    if let Some(d) = labels.get("rdma.device").or_else(|| labels.get("device")) {
        out.push_str(&format!(" on {d}"));
        if let Some(p) = labels.get("rdma.port").or_else(|| labels.get("port")) {
            out.push_str(&format!(" port {p}"));
        }
    }
    out
}

/// A bounded queue of events: [`publish`](EventBus::publish) never waits, and drops the
/// oldest when full.
#[derive(Debug)]
pub struct EventBus {
    queue: Mutex<VecDeque<Event>>,
    cv: Condvar,
    capacity: usize,
    dropped: AtomicU64,
}

impl EventBus {
    pub fn new(capacity: usize) -> EventBus {
        EventBus {
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Event>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `event`; when full, the oldest goes (counted).
    pub fn publish(&self, event: Event) {
        let mut q = self.lock();
        while q.len() >= self.capacity {
            q.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(event);
        drop(q);
        self.cv.notify_all();
    }

    /// Up to `max` events, waiting until `deadline` for the first.
    pub fn take(&self, max: usize, deadline: Instant) -> Vec<Event> {
        let mut q = self.lock();
        while q.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                return Vec::new();
            }
            q = self
                .cv
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// Put events back at the front (a send to retry), dropping the oldest past the
    /// capacity (counted).
    pub fn put_back(&self, events: Vec<Event>) {
        let mut q = self.lock();
        for e in events.into_iter().rev() {
            q.push_front(e);
        }
        while q.len() > self.capacity {
            q.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events queued now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events dropped because the bus was full, since the last call.
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }

    /// Wake a [`take`](EventBus::take) waiting (the sender is stopping).
    pub fn wake(&self) {
        self.cv.notify_all();
    }
}

/// Where the process's bus is, while one is: installed by the events' exporter when it
/// starts, taken out when it stops (a reload that turns `events` off, the agent's end), so
/// that no source fills a bus nobody sends.
#[derive(Debug, Default)]
pub struct Registry {
    slot: RwLock<Option<Arc<EventBus>>>,
}

impl Registry {
    pub const fn new() -> Registry {
        Registry {
            slot: RwLock::new(None),
        }
    }

    /// Install a bus (a later call, while it is installed, hands back the same one).
    pub fn install(&self, capacity: usize) -> Arc<EventBus> {
        let mut slot = self.slot.write().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert_with(|| Arc::new(EventBus::new(capacity)))
            .clone()
    }

    /// Take `bus` out: publishing does nothing until a bus is installed again (a new one:
    /// what was published to this one is not carried over). Another bus installed since
    /// stays.
    pub fn uninstall(&self, bus: &Arc<EventBus>) {
        let mut slot = self.slot.write().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|b| Arc::ptr_eq(b, bus)) {
            *slot = None;
        }
    }

    /// Publish to the bus installed; nothing when none is.
    pub fn publish(&self, event: Event) {
        if let Some(bus) = self.slot.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            bus.publish(event);
        }
    }

    /// Whether a bus is installed.
    pub fn enabled(&self) -> bool {
        self.slot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

static BUS: Registry = Registry::new();

/// Install the process's bus (a later call, while it is installed, hands back the same
/// one).
pub fn install(capacity: usize) -> Arc<EventBus> {
    BUS.install(capacity)
}

/// Take the process's bus out (its exporter stopped): see [`Registry::uninstall`].
pub fn uninstall(bus: &Arc<EventBus>) {
    BUS.uninstall(bus);
}

/// Publish to the process's bus; nothing when none is installed.
pub fn publish(event: Event) {
    BUS.publish(event);
}

/// Whether a bus is installed (a source may skip building an event when not).
pub fn enabled() -> bool {
    BUS.enabled()
}

/// How long a sender waits for events before it looks at its other work.
pub const TAKE_WAIT: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(n: usize) -> Event {
        Event {
            time: SystemTime::UNIX_EPOCH,
            name: names::RULE_TRANSITION,
            severity: Severity::Info,
            body: n.to_string(),
            attributes: BTreeMap::new(),
        }
    }

    #[test]
    fn a_full_bus_drops_its_oldest_and_counts_them() {
        let bus = EventBus::new(3);
        for n in 0..5 {
            bus.publish(ev(n));
        }
        assert_eq!(bus.take_dropped(), 2);
        assert_eq!(bus.take_dropped(), 0);
        let got: Vec<String> = bus
            .take(10, Instant::now())
            .into_iter()
            .map(|e| e.body)
            .collect();
        assert_eq!(got, ["2", "3", "4"]);
    }

    #[test]
    fn events_put_back_come_first_and_the_bound_holds() {
        let bus = EventBus::new(3);
        bus.publish(ev(3));
        bus.publish(ev(4));
        bus.put_back(vec![ev(1), ev(2)]);
        assert_eq!(bus.take_dropped(), 1);
        let got: Vec<String> = bus
            .take(10, Instant::now())
            .into_iter()
            .map(|e| e.body)
            .collect();
        assert_eq!(got, ["2", "3", "4"]);
    }

    #[test]
    fn take_waits_for_an_event_until_its_deadline() {
        let bus = Arc::new(EventBus::new(8));
        let t = Instant::now();
        assert!(bus.take(1, t + Duration::from_millis(50)).is_empty());
        assert!(t.elapsed() >= Duration::from_millis(50));
        let b = bus.clone();
        let h = std::thread::spawn(move || b.take(1, Instant::now() + Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        bus.publish(ev(7));
        assert_eq!(h.join().unwrap()[0].body, "7");
    }

    /// A bus taken out (its exporter stopped: a reload turned `events` off) is filled no
    /// more, and one installed later starts empty: nothing published while events were off
    /// is sent when they are on again.
    #[test]
    fn a_bus_taken_out_fills_no_more_and_the_next_starts_empty() {
        let r = Registry::new();
        r.publish(ev(0));
        assert!(!r.enabled());
        let bus = r.install(8);
        assert!(Arc::ptr_eq(&bus, &r.install(8)), "one bus while installed");
        r.publish(ev(1));
        assert_eq!(bus.len(), 1);
        r.uninstall(&bus);
        assert!(!r.enabled());
        for n in 2..10 {
            r.publish(ev(n));
        }
        assert_eq!(bus.len(), 1, "filled no more");
        let next = r.install(8);
        assert!(!Arc::ptr_eq(&bus, &next));
        assert!(next.is_empty(), "nothing of while it was off");
        // The old exporter's late uninstall leaves the new bus.
        r.uninstall(&bus);
        assert!(r.enabled());
        r.publish(ev(11));
        assert_eq!(next.len(), 1);
    }

    #[test]
    fn a_rule_transition_says_its_rule_state_and_port() {
        let labels: BTreeMap<String, String> = [("rdma.device", "mlx5_0"), ("rdma.port", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let e = Event::rule_transition("pfc-storm", "rdma.port.pfc", true, 42.0, "", &labels);
        assert_eq!(e.severity, Severity::Warn);
        assert_eq!(
            e.body,
            "rule pfc-storm firing on mlx5_0 port 1 (rdma.port.pfc = 42)"
        );
        assert_eq!(e.attributes["rocewatch.rule.state"], "firing");
        assert_eq!(e.attributes["rdma.device"], "mlx5_0");
        let e = Event::rule_transition("pfc-storm", "rdma.port.pfc", false, 0.0, "", &labels);
        assert_eq!(e.severity, Severity::Info);
        assert_eq!(e.attributes["rocewatch.rule.state"], "resolved");
    }
}
