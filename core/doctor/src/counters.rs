//! Trouble counters (pauses, drops, out_of_buffer, out-of-sequence, retransmissions)
//! that grew over the window, went back (a reset) or rest at their top (saturated), and
//! the check's verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rocewatch_plugin_api::{Sample, ScrapeResult};

use super::check::{check, Check, Status};

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

/// The counters check over two collections `window` apart: a warning per trouble counter
/// that grew, a pass when none did, and a skip when no trouble counter was read in both
/// (every one unreadable, or no collector: no evidence). `unread` says what the
/// collectors could not read (their partial errors and failed calls).
pub(super) fn counters_checks(
    first: &ScrapeResult,
    second: &ScrapeResult,
    unread: &[String],
    window: Duration,
) -> Vec<Check> {
    let secs = humantime::format_duration(window);
    let key = |s: &Sample| {
        let attrs: Vec<String> = s
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        (s.name.to_string(), attrs)
    };
    let before: BTreeSet<_> = first
        .samples
        .iter()
        .filter(|s| TROUBLE.contains(&s.name.as_ref()))
        .map(key)
        .collect();
    let watched = second
        .samples
        .iter()
        .filter(|s| TROUBLE.contains(&s.name.as_ref()) && before.contains(&key(s)))
        .count();
    if watched == 0 {
        let errors: Vec<String> = first
            .errors
            .iter()
            .chain(&second.errors)
            .map(|e| format!("{}: {}", e.target, e.message))
            .chain(unread.iter().cloned())
            .collect();
        return vec![check(
            "counters",
            "",
            Status::Skip,
            format!(
                "no pause, drop, out-of-buffer, out-of-sequence or retransmission counter was read in both collections {secs} apart: nothing to judge{}",
                match errors.len() {
                    0 => String::new(),
                    1 => format!(" ({})", errors[0]),
                    n => format!(" ({}; and {} more errors)", errors[0], n - 1),
                }
            ),
            Some("rocewatch collect --once shows what each collector reads and why it could not".into()),
        )];
    }
    let grew = counter_increases(&first.samples, &second.samples);
    if grew.is_empty() {
        return vec![check(
            "counters",
            "",
            Status::Pass,
            format!(
                "no pauses, drops, out-of-buffer, out-of-sequence or retransmissions over {secs} ({watched} series watched)"
            ),
            None,
        )];
    }
    grew.into_iter()
        .map(|(series, moved)| {
            let (what, fix) = match moved {
                Move::Increase(d) => (
                    format!("{series} +{d} in {secs}"),
                    "pauses and drops under load point at PFC/ECN thresholds or congestion: rocewatch rules shows what fires; compare with the switch's counters",
                ),
                Move::Saturated => (
                    format!("{series} rests at its maximum: the counter stops there, so what it counted in {secs} is unknown"),
                    "clear the port's counters (perfquery -R) and run doctor again; a device with extended counters reports 64-bit ones in counters_ext/",
                ),
                Move::Reset => (
                    format!("{series} went back in {secs} (cleared, or the driver or device was reset): what it counted is unknown"),
                    "run doctor again; a counter reset nobody made points at a driver reload or a device reset (rocewatch doctor's kernel-log check)",
                ),
            };
            check("counters", "", Status::Warn, what, Some(fix.into()))
        })
        .collect()
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
