//! Signals computed from counter rates after every collection: PFC pause ratio per
//! priority, throughput per port and per priority, error rate per port. They are gauges
//! ingested under the pseudo-plugin [`PLUGIN`], so every exporter sees them.

use rocewatch_metrics::names;
use std::collections::BTreeMap;
use std::sync::Arc;

use rocewatch_congestion::{state_of, Join};
use rocewatch_metrics::{
    CatalogEntry, ATTR_CONGESTION_STATE, ATTR_DEVICE, ATTR_NETDEV, ATTR_PORT, ATTR_PRIORITY,
    DERIVED_PFC_PAUSE_RATIO, DERIVED_PORT_ERROR_RATE, DERIVED_PORT_THROUGHPUT,
    DERIVED_PRIORITY_CONGESTION, DERIVED_PRIORITY_THROUGHPUT, ERROR_COUNTERS,
};
use rocewatch_plugin_api::{AttrSet, Attributes, MetricKind, Sample, Value};

use crate::store::Store;

/// The name derived series are stored under.
pub const PLUGIN: &str = "derived";

/// A derived sample; `source` is `derived:<what it is computed from>`, one `Arc` for
/// every sample of a kind.
fn derived(e: &CatalogEntry, value: f64, attributes: Attributes, source: &Arc<str>) -> Sample {
    Sample {
        name: e.name.into(),
        unit: e.unit.into(),
        value: Value::F64(value),
        attributes,
        source: Arc::clone(source),
        kind: MetricKind::Gauge,
    }
}

/// Every derived signal the store's current rates allow.
pub fn compute(store: &Store) -> Vec<Sample> {
    let mut out = Vec::new();
    for (from, to, scale) in [
        (names::PFC_PAUSE_DURATION, &DERIVED_PFC_PAUSE_RATIO, 1e-6),
        (names::PORT_IO, &DERIVED_PORT_THROUGHPUT, 1.0),
        (names::PRIORITY_IO, &DERIVED_PRIORITY_THROUGHPUT, 1.0),
    ] {
        let source: Arc<str> = format!("derived:{from}").into();
        store.for_each_named(from, |s| {
            if let Some(r) = s.rate() {
                out.push(derived(to, r * scale, s.sample.attributes.clone(), &source));
            }
        });
    }
    // Error rate: sum per port over every error counter that has a rate.
    let mut per_port: BTreeMap<(String, String), (f64, AttrSet)> = BTreeMap::new();
    for name in ERROR_COUNTERS {
        store.for_each_named(name, |s| {
            let (Some(rate), Some(dev), Some(port)) = (
                s.rate(),
                s.sample.attributes.get(ATTR_DEVICE),
                s.sample.attributes.get(ATTR_PORT),
            ) else {
                return;
            };
            let slot = per_port
                .entry((dev.to_string(), port.to_string()))
                .or_insert_with(|| {
                    let mut a = vec![(ATTR_DEVICE, dev), (ATTR_PORT, port)];
                    if let Some(nd) = s.sample.attributes.get(ATTR_NETDEV) {
                        a.push((ATTR_NETDEV, nd));
                    }
                    (0.0, a.into_iter().collect::<AttrSet>())
                });
            slot.0 += rate;
        });
    }
    let source: Arc<str> = "derived:error counters".into();
    for (_, (rate, attrs)) in per_port {
        out.push(derived(
            &DERIVED_PORT_ERROR_RATE,
            rate,
            Attributes::new(attrs),
            &source,
        ));
    }
    congestion(store, &mut out);
    out
}

/// The congestion state of every port and priority with per-priority rates (the NIC's
/// driver statistics), joined with its port's RDMA counters by device and port.
fn congestion(store: &Store, out: &mut Vec<Sample>) {
    let mut join = Join::default();
    for name in Join::METRICS {
        store.for_each_named(name, |s| {
            if let Some(rate) = s.rate() {
                join.add(name, |k| s.sample.attributes.get(k), rate);
            }
        });
    }
    let source: Arc<str> = "derived:congestion counters".into();
    for (k, r) in join.finish() {
        let state = state_of(&r);
        let mut attrs: Vec<(&str, &str)> = Vec::with_capacity(5);
        for (key, v) in [
            (ATTR_DEVICE, k.device.as_str()),
            (ATTR_PORT, k.port.as_str()),
            (ATTR_NETDEV, k.netdev.as_str()),
        ] {
            if !v.is_empty() {
                attrs.push((key, v));
            }
        }
        attrs.push((ATTR_PRIORITY, k.priority.as_str()));
        attrs.push((ATTR_CONGESTION_STATE, state.as_str()));
        out.push(derived(
            &DERIVED_PRIORITY_CONGESTION,
            1.0,
            Attributes::new(attrs.into_iter().collect::<AttrSet>()),
            &source,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selfmetrics::SelfMetrics;
    use std::time::{Duration, Instant, SystemTime};

    fn counter(name: &str, unit: &str, v: u64, attrs: &[(&str, &str)]) -> Sample {
        Sample {
            name: name.to_string().into(),
            unit: unit.to_string().into(),
            value: Value::U64(v),
            attributes: Attributes::new(attrs.iter().copied().collect()),
            source: "x".into(),
            kind: MetricKind::Counter,
        }
    }

    fn value(out: &[Sample], name: &str, attr: (&str, &str)) -> Option<f64> {
        out.iter()
            .find(|s| s.name == name && s.attributes.get(attr.0) == Some(attr.1))
            .map(|s| s.value.as_f64())
    }

    #[test]
    fn pause_ratio_throughput_and_error_rate() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let (t0, i0) = (SystemTime::now(), Instant::now());
        let port = [
            ("rdma.device", "mlx5_0"),
            ("rdma.port", "1"),
            ("network.interface.name", "ens1f0np0"),
        ];
        let p3 = [
            ("network.interface.name", "ens1f0np0"),
            ("rdma.priority", "3"),
            ("network.io.direction", "receive"),
        ];
        let read = |pause_us: u64, io: u64, sym: u64, oob: u64| {
            vec![
                counter("rdma.pfc.pause_duration", "us", pause_us, &p3),
                counter("rdma.port.io", "By", io, &port),
                counter("rdma.port.symbol_errors", "{error}", sym, &port),
                counter("rdma.port.out_of_buffer", "{packet}", oob, &port),
            ]
        };
        store.ingest_at("p", &read(1_000_000, 0, 0, 0), &m, t0, i0);
        assert!(compute(&store).is_empty(), "no rates after one read");
        // 2 s later: paused 500 ms of them (ratio 0.25), 20 GB sent, 4 + 6 errors.
        store.ingest_at(
            "p",
            &read(1_500_000, 20_000_000_000, 4, 6),
            &m,
            t0 + Duration::from_secs(2),
            i0 + Duration::from_secs(2),
        );
        let out = compute(&store);
        assert_eq!(
            value(&out, "rdma.pfc.pause_ratio", ("rdma.priority", "3")),
            Some(0.25)
        );
        assert_eq!(
            value(&out, "rdma.port.throughput", ("rdma.device", "mlx5_0")),
            Some(10e9)
        );
        assert_eq!(
            value(&out, "rdma.port.error_rate", ("rdma.device", "mlx5_0")),
            Some(5.0)
        );
        let er = out
            .iter()
            .find(|s| s.name == "rdma.port.error_rate")
            .unwrap();
        assert_eq!(
            er.attributes.get("network.interface.name"),
            Some("ens1f0np0")
        );
        // A reset yields no rate: no derived value, never a negative one.
        store.ingest_at(
            "p",
            &read(10, 5, 0, 0),
            &m,
            t0 + Duration::from_secs(3),
            i0 + Duration::from_secs(3),
        );
        let out = compute(&store);
        assert!(out.iter().all(|s| s.value.as_f64() >= 0.0));
        assert_eq!(
            value(&out, "rdma.pfc.pause_ratio", ("rdma.priority", "3")),
            None
        );
    }

    /// The congestion state per port and priority: the driver's per-priority counters
    /// joined with the port's RDMA counters by device and port, one series per priority
    /// naming its state, the previous state's series gone when it changes.
    #[test]
    fn congestion_state_per_priority() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let (t0, i0) = (SystemTime::now(), Instant::now());
        let port = [("rdma.device", "mlx5_0"), ("rdma.port", "1")];
        let prio = |p: &'static str, dir: &'static str| {
            [
                ("rdma.device", "mlx5_0"),
                ("rdma.port", "1"),
                ("network.interface.name", "ens1f0np0"),
                ("rdma.priority", p),
                ("network.io.direction", dir),
            ]
        };
        // Totals at one read: priority 3's bytes sent, its pause time received (µs), its
        // pause frames received, the port's ECN marks and out-of-sequence; priority 0
        // carries nothing.
        let read = |tx: u64, paused_us: u64, pauses: u64, ecn: u64, oos: u64| {
            vec![
                counter("rdma.priority.io", "By", tx, &prio("3", "transmit")),
                counter("rdma.priority.io", "By", 0, &prio("0", "transmit")),
                counter(
                    "rdma.pfc.pause_duration",
                    "us",
                    paused_us,
                    &prio("3", "receive"),
                ),
                counter(
                    "rdma.pfc.pause_frames",
                    "{frame}",
                    pauses,
                    &prio("3", "receive"),
                ),
                counter("rdma.port.ecn_marked_packets", "{packet}", ecn, &port),
                counter("rdma.port.out_of_sequence", "{packet}", oos, &port),
            ]
        };
        let state = |out: &[Sample], p: &str| -> Vec<String> {
            out.iter()
                .filter(|s| {
                    s.name == "rdma.priority.congestion"
                        && s.attributes.get("rdma.priority") == Some(p)
                })
                .map(|s| {
                    assert_eq!(s.value.as_f64(), 1.0);
                    assert_eq!(s.attributes.get("rdma.device"), Some("mlx5_0"));
                    assert_eq!(
                        s.attributes.get("network.interface.name"),
                        Some("ens1f0np0")
                    );
                    s.attributes
                        .get("rdma.congestion.state")
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        let mut at = 0u64;
        let mut step = |r: Vec<Sample>| {
            store.ingest_at(
                "p",
                &r,
                &m,
                t0 + Duration::from_secs(at),
                i0 + Duration::from_secs(at),
            );
            let out = compute(&store);
            store.ingest_at(
                PLUGIN,
                &out,
                &m,
                t0 + Duration::from_secs(at),
                i0 + Duration::from_secs(at),
            );
            at += 10;
            out
        };
        step(read(0, 0, 0, 0, 0));
        // 10 s: 10 GB sent, ECN marks, no pauses.
        let out = step(read(10_000_000_000, 0, 0, 50_000, 0));
        assert_eq!(state(&out, "3"), ["ecn_controlled"]);
        assert_eq!(state(&out, "0"), ["idle"]);
        // Paused 9.8 s of 10, 500 bytes sent: a storm.
        let out = step(read(10_000_000_500, 9_800_000, 140_000, 50_000, 0));
        assert_eq!(state(&out, "3"), ["storm"]);
        // Sending again, losses and no pauses: lossy.
        let out = step(read(20_000_000_500, 9_800_000, 140_000, 50_000, 400));
        assert_eq!(state(&out, "3"), ["lossy"]);
        // The store keeps one state series per priority.
        let mut n = 0;
        store.for_each_named("rdma.priority.congestion", |_| n += 1);
        assert_eq!(n, 2);
    }
}
