//! Trouble counters (pauses, drops, out_of_buffer, out-of-sequence, retransmissions)
//! that grew over the window, and the check's verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rocewatch_plugin_api::{Sample, ScrapeResult};

use super::check::{check, Check, Status};

/// Counters that must not move on a healthy lossless fabric.
pub(super) const TROUBLE: &[&str] = &[
    "rdma.pfc.pause_frames",
    "rdma.pfc.storm_events",
    "rdma.link.discards",
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

/// Which trouble counters grew between two collections: (series, increase).
pub fn counter_increases(
    before: &[rocewatch_plugin_api::Sample],
    after: &[rocewatch_plugin_api::Sample],
) -> Vec<(String, f64)> {
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
        if let Some(o) = old.get(&k) {
            let d = s.value.as_f64() - o;
            if d > 0.0 {
                out.push((k, d));
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
        .map(|(series, d)| {
            check(
                "counters",
                "",
                Status::Warn,
                format!("{series} +{d} in {secs}"),
                Some("pauses and drops under load point at PFC/ECN thresholds or congestion: rocewatch rules shows what fires; compare with the switch's counters".into()),
            )
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
                15.0
            )]
        );
    }
}
