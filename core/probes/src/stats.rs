//! Per-peer probe statistics and the `rdma.probe.*` samples made of them.

use rocewatch_metrics::names;
use std::collections::BTreeMap;
use std::time::Duration;

use rocewatch_plugin_api::{Attributes, MetricKind, ProbeOutcome, Sample, Value};

use super::config::{default_rtt_buckets, ProbesConfig, ATTR_CAUSE, ATTR_MODE, ATTR_PEER};
use rocewatch_runtime::store::Store;

/// Declare the probe metrics in the store (the RTT histogram with its buckets).
pub fn declare(store: &Store, cfg: Option<&ProbesConfig>) {
    let bounds = cfg.map_or_else(default_rtt_buckets, |c| c.rtt_buckets.clone());
    let catalogs = [
        rocewatch_metrics::PROBE_CATALOG,
        rocewatch_metrics::FLEET_CATALOG,
    ];
    for d in catalogs
        .into_iter()
        .flat_map(rocewatch_metrics::descriptors_of)
    {
        if d.kind == MetricKind::Histogram {
            store.declare_histogram(&d, &bounds);
        } else {
            store.declare(std::slice::from_ref(&d));
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct PeerStats {
    pub(crate) attrs: Attributes,
    sent: u64,
    received: u64,
    timeouts: u64,
    failures: BTreeMap<String, u64>,
    rtt: Option<f64>,
}

impl PeerStats {
    /// A peer probed through the RDMA CM (`cm`) carries `rdma.probe.mode = cm`.
    pub(crate) fn with_mode(peer: &str, cm: bool) -> Self {
        let mut a: BTreeMap<String, String> = [(ATTR_PEER.to_string(), peer.to_string())].into();
        if cm {
            a.insert(ATTR_MODE.to_string(), "cm".to_string());
        }
        PeerStats {
            attrs: Attributes::new(a.into()),
            sent: 0,
            received: 0,
            timeouts: 0,
            failures: BTreeMap::new(),
            rtt: None,
        }
    }

    /// Count one result; the RTT of an answered probe.
    pub(crate) fn count(&mut self, r: Result<&ProbeOutcome, ()>) -> Option<f64> {
        self.sent += 1;
        match r {
            Ok(ProbeOutcome::Ok { rtt_seconds }) => {
                self.received += 1;
                self.rtt = Some(*rtt_seconds);
                return Some(*rtt_seconds);
            }
            Ok(ProbeOutcome::Timeout) => self.timeouts += 1,
            Ok(ProbeOutcome::ConnectFailed { cause }) => {
                *self.failures.entry(cause_class(cause)).or_default() += 1;
            }
            Err(()) => *self.failures.entry("plugin".into()).or_default() += 1,
        }
        None
    }
}

/// `rejected: no responder ...` → `rejected`; `QP error: ...` → `qp_error`.
pub(super) fn cause_class(cause: &str) -> String {
    let head = cause
        .split(':')
        .next()
        .unwrap_or(cause)
        .trim()
        .to_ascii_lowercase();
    head.replace([' ', '-'], "_")
}

pub(super) fn sample(name: &'static str, value: Value, attributes: Attributes) -> Sample {
    let e = rocewatch_metrics::PROBE_CATALOG
        .iter()
        .chain(rocewatch_metrics::FLEET_CATALOG)
        .find(|e| e.name == name)
        .expect("probe metric is catalogued");
    Sample {
        name: name.into(),
        unit: e.unit.into(),
        value,
        attributes,
        source: "probe-verbs".into(),
        kind: e.kind,
    }
}

/// The round's state as samples: per peer, and the peer counts and interval in effect.
pub(super) fn samples(
    stats: &BTreeMap<String, PeerStats>,
    over_limit: usize,
    interval: Duration,
) -> Vec<Sample> {
    let mut out = Vec::with_capacity(stats.len() * 5 + 3);
    for s in stats.values() {
        let a = &s.attrs;
        out.push(sample(names::PROBE_SENT, Value::U64(s.sent), a.clone()));
        out.push(sample(
            names::PROBE_RECEIVED,
            Value::U64(s.received),
            a.clone(),
        ));
        out.push(sample(
            names::PROBE_TIMEOUTS,
            Value::U64(s.timeouts),
            a.clone(),
        ));
        if let Some(r) = s.rtt {
            out.push(sample(names::PROBE_RTT_LAST, Value::F64(r), a.clone()));
        }
        for (cause, n) in &s.failures {
            let mut with_cause = (**a).clone();
            with_cause.insert(ATTR_CAUSE, cause);
            out.push(sample(
                names::PROBE_FAILURES,
                Value::U64(*n),
                Attributes::new(with_cause),
            ));
        }
    }
    peers_and_interval(
        &mut out,
        &[("probed", stats.len()), ("over_limit", over_limit)],
        interval,
    );
    out
}

/// The peers by state (`rdma.probe.peers`) and the interval in effect.
pub(super) fn peers_and_interval(
    out: &mut Vec<Sample>,
    states: &[(&str, usize)],
    interval: Duration,
) {
    for (state, n) in states {
        out.push(sample(
            names::PROBE_PEERS,
            Value::U64(*n as u64),
            Attributes::new([("rdma.probe.state".to_string(), (*state).to_string())].into()),
        ));
    }
    out.push(sample(
        names::PROBE_INTERVAL,
        Value::F64(interval.as_secs_f64()),
        Attributes::default(),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_and_samples() {
        assert_eq!(
            cause_class("rejected: no responder on 1.2.3.4:18516"),
            "rejected"
        );
        assert_eq!(
            cause_class("QP error: work completion status transport retry counter exceeded (12)"),
            "qp_error"
        );
        assert_eq!(
            cause_class("address resolution: x: no address"),
            "address_resolution"
        );
        let mut st = BTreeMap::new();
        let mut p = PeerStats::with_mode("10.0.0.1", false);
        assert_eq!(
            p.count(Ok(&ProbeOutcome::Ok { rtt_seconds: 0.003 })),
            Some(0.003)
        );
        assert_eq!(
            p.count(Ok(&ProbeOutcome::Ok { rtt_seconds: 0.002 })),
            Some(0.002)
        );
        assert_eq!(p.count(Ok(&ProbeOutcome::Timeout)), None);
        let refused = ProbeOutcome::ConnectFailed {
            cause: "rejected: no responder".into(),
        };
        assert_eq!(p.count(Ok(&refused)), None);
        assert_eq!(p.count(Err(())), None);
        st.insert("10.0.0.1".to_string(), p);
        let s = samples(&st, 7, Duration::from_secs(2));
        let get = |n: &str| s.iter().find(|x| x.name == n).unwrap();
        assert_eq!(get("rdma.probe.sent").value, Value::U64(5));
        assert_eq!(get("rdma.probe.received").value, Value::U64(2));
        assert_eq!(get("rdma.probe.timeouts").value, Value::U64(1));
        assert_eq!(get("rdma.probe.rtt.last").value, Value::F64(0.002));
        let failures: Vec<_> = s
            .iter()
            .filter(|x| x.name == "rdma.probe.failures")
            .map(|x| (&x.attributes[ATTR_CAUSE], x.value))
            .collect();
        assert_eq!(
            failures,
            [("plugin", Value::U64(1)), ("rejected", Value::U64(1))]
        );
        assert_eq!(
            &get("rdma.probe.timeouts").attributes[ATTR_PEER],
            "10.0.0.1"
        );
        let peers: Vec<_> = s
            .iter()
            .filter(|x| x.name == "rdma.probe.peers")
            .map(|x| (&x.attributes["rdma.probe.state"], x.value))
            .collect();
        assert_eq!(
            peers,
            [("probed", Value::U64(1)), ("over_limit", Value::U64(7))]
        );
        assert_eq!(get("rdma.probe.interval").value, Value::F64(2.0));
        assert!(s.iter().all(|x| x.kind != MetricKind::Histogram));
    }
}
