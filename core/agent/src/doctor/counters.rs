//! Trouble counters (pauses, drops, out_of_buffer, out-of-sequence, retransmissions)
//! that grew over the window, went back (a reset) or rest at their top (saturated).

use std::collections::BTreeMap;

use rocewatch_metrics::counter::{counter_move_from, Move};

/// Counters that must not move on a healthy lossless fabric.
pub(super) const TROUBLE: &[&str] = &[
    "rdma.pfc.pause_frames",
    "rdma.pfc.storm_events",
    "rdma.link.discards",
    "rdma.port.transmit.discards",
    "rdma.priority.discards",
    "rdma.netdev.out_of_buffer",
    "rdma.port.out_of_buffer",
    "rdma.port.out_of_sequence",
    "rdma.port.local_ack_timeouts",
    "rdma.port.retransmissions.packets",
    "rdma.port.retransmissions.adaptive",
    "rdma.port.retransmissions.timeouts",
    "rdma.port.duplicate_requests",
];

/// How the trouble counters that did not stand still moved between two collections:
/// (series, move), a move being an increase, a reset or a counter resting at its top
/// (`rocewatch_metrics::counter`, the one definition every reader of counters uses).
pub fn counter_increases(
    before: &[rocewatch_plugin_api::Sample],
    after: &[rocewatch_plugin_api::Sample],
) -> Vec<(String, Move)> {
    let key = |s: &rocewatch_plugin_api::Sample| {
        let attrs = s
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        format!("{}{{{attrs}}}", s.name)
    };
    let old: BTreeMap<String, f64> = before
        .iter()
        .filter(|s| TROUBLE.contains(&s.name.as_ref()))
        .map(|s| (key(s), s.value.as_f64()))
        .collect();
    let mut out = Vec::new();
    for s in after.iter().filter(|s| TROUBLE.contains(&s.name.as_ref())) {
        let k = key(s);
        if let Some(&o) = old.get(&k) {
            match counter_move_from(&s.source, o, s.value.as_f64(), None) {
                Move::Increase(d) if d <= 0.0 => {}
                m => out.push((k, m)),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name that is not in the catalog would never match: every trouble counter is one
    /// rocewatch emits.
    #[test]
    fn trouble_counters_are_catalogued() {
        for n in TROUBLE {
            assert!(
                rocewatch_metrics::all_entries()
                    .any(|e| e.name == *n && e.kind == rocewatch_plugin_api::MetricKind::Counter),
                "{n}"
            );
        }
    }

    #[test]
    fn only_trouble_counters_that_grew_are_reported() {
        use rocewatch_plugin_api::{Attributes, MetricKind, Sample, Value};
        let s = |name: &'static str, v: u64| Sample {
            name: name.into(),
            unit: "".into(),
            value: Value::U64(v),
            attributes: Attributes::new([("rdma.device".to_string(), "mlx5_0".to_string())].into()),
            source: "t".into(),
            kind: MetricKind::Counter,
        };
        let before = [
            s("rdma.pfc.pause_frames", 10),
            s("rdma.port.io", 1),
            s("rdma.port.out_of_buffer", 5),
        ];
        let after = [
            s("rdma.pfc.pause_frames", 25),
            s("rdma.port.io", 99),
            s("rdma.port.out_of_buffer", 5),
        ];
        assert_eq!(
            counter_increases(&before, &after),
            [(
                "rdma.pfc.pause_frames{rdma.device=mlx5_0}".to_string(),
                Move::Increase(15.0)
            )]
        );
    }

    /// A reset is no growth (3e9 → 100 was once read as a 32-bit wrap, 1.29e9 drops),
    /// and a counter resting at its top is said, not taken for a quiet one.
    #[test]
    fn resets_and_saturated_counters_are_told_apart_from_growth() {
        use rocewatch_plugin_api::{Attributes, MetricKind, Sample, Value};
        let s = |name: &'static str, source: &str, v: u64| Sample {
            name: name.into(),
            unit: "".into(),
            value: Value::U64(v),
            attributes: Attributes::new([("rdma.device".to_string(), "mlx5_0".to_string())].into()),
            source: source.into(),
            kind: MetricKind::Counter,
        };
        let before = [
            s(
                "rdma.port.out_of_sequence",
                "hw_counters/out_of_sequence",
                3_000_000_000,
            ),
            s(
                "rdma.port.transmit.discards",
                "counters/port_xmit_discards",
                65_535,
            ),
        ];
        let after = [
            s(
                "rdma.port.out_of_sequence",
                "hw_counters/out_of_sequence",
                100,
            ),
            s(
                "rdma.port.transmit.discards",
                "counters/port_xmit_discards",
                65_535,
            ),
        ];
        assert_eq!(
            counter_increases(&before, &after),
            [
                (
                    "rdma.port.out_of_sequence{rdma.device=mlx5_0}".to_string(),
                    Move::Reset
                ),
                (
                    "rdma.port.transmit.discards{rdma.device=mlx5_0}".to_string(),
                    Move::Saturated
                ),
            ]
        );
    }
}
