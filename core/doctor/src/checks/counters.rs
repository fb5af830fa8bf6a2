//! Trouble counters (pauses, drops, out_of_buffer, out-of-sequence, retransmissions)
//! that grew over the window, went back (a reset) or rest at their top (saturated), and
//! the check's verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rocewatch_plugin_api::{Sample, ScrapeResult};

use crate::check::{check, Check, Status};

use rocewatch_metrics::counter::{counter_move_from, Move};
use rocewatch_metrics::names;

/// Counters that must not move on a healthy lossless fabric.
pub(crate) const TROUBLE: &[&str] = &[
    names::PFC_PAUSE_FRAMES,
    names::PFC_STORM_EVENTS,
    names::LINK_PAUSE_FRAMES,
    names::LINK_PAUSE_DURATION,
    names::LINK_DISCARDS,
    names::PORT_TRANSMIT_DISCARDS,
    names::PRIORITY_DISCARDS,
    names::NETDEV_OUT_OF_BUFFER,
    names::PORT_OUT_OF_BUFFER,
    names::PORT_OUT_OF_SEQUENCE,
    names::PORT_LOCAL_ACK_TIMEOUTS,
    names::PORT_RETRANSMISSIONS_PACKETS,
    names::PORT_RETRANSMISSIONS_ADAPTIVE,
    names::PORT_RETRANSMISSIONS_TIMEOUTS,
    names::PORT_DUPLICATE_REQUESTS,
];

/// A series' key: its name and attributes (`name{k=v,...}`).
fn series_key(s: &Sample) -> String {
    let attrs = s
        .attributes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    format!("{}{{{attrs}}}", s.name)
}

/// Whether a collector's error is about a trouble counter: its target is a file of a
/// port directory (`.../ports/1/hw_counters/out_of_sequence`) that the catalog names as
/// one of `TROUBLE`, or a counter directory that could not be listed (`.../hw_counters`).
fn about_trouble(target: &str) -> bool {
    if target.ends_with("/hw_counters") || target.ends_with("/counters") {
        return true;
    }
    let mut parts = target.rsplit('/');
    let (Some(file), Some(group)) = (parts.next(), parts.next()) else {
        return false;
    };
    rocewatch_metrics::lookup(group, file).is_some_and(|e| TROUBLE.contains(&e.name))
}

/// How the trouble counters that did not stand still moved between two collections:
/// (series, move), a move being an increase, a reset or a counter resting at its top
/// (`rocewatch_metrics::counter`, the one definition every reader of counters uses).
pub fn counter_increases(before: &[Sample], after: &[Sample]) -> Vec<(String, Move)> {
    let old: BTreeMap<String, f64> = before
        .iter()
        .filter(|s| TROUBLE.contains(&s.name.as_ref()))
        .map(|s| (series_key(s), s.value.as_f64()))
        .collect();
    let mut out = Vec::new();
    for s in after.iter().filter(|s| TROUBLE.contains(&s.name.as_ref())) {
        let k = series_key(s);
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
pub(crate) fn counters_checks(
    first: &ScrapeResult,
    second: &ScrapeResult,
    unread: &[String],
    window: Duration,
) -> Vec<Check> {
    let secs = humantime::format_duration(window);
    let before: BTreeSet<String> = first
        .samples
        .iter()
        .filter(|s| TROUBLE.contains(&s.name.as_ref()))
        .map(series_key)
        .collect();
    let watched: Vec<&Sample> = second
        .samples
        .iter()
        .filter(|s| TROUBLE.contains(&s.name.as_ref()) && before.contains(&series_key(s)))
        .collect();
    if watched.is_empty() {
        return vec![nothing_read(first, second, unread, &secs.to_string())];
    }
    // What was watched, by name: a pass says only that.
    let names: BTreeSet<&str> = watched.iter().map(|s| s.name.as_ref()).collect();
    let names = names.into_iter().collect::<Vec<_>>().join(", ");
    let n = watched.len();
    // Trouble counters a collector could not read: each file once (both collections
    // report it).
    let not_read: BTreeSet<String> = first
        .errors
        .iter()
        .chain(&second.errors)
        .filter(|e| about_trouble(&e.target))
        .map(|e| format!("{}: {}", e.target, e.message))
        .collect();
    let grew = counter_increases(&first.samples, &second.samples);
    let mut out = global_pause_checks(&first.samples, &second.samples, &secs.to_string());
    let link_pause = |series: &str| {
        [names::LINK_PAUSE_FRAMES, names::LINK_PAUSE_DURATION]
            .iter()
            .any(|n| series.starts_with(&format!("{n}{{")))
    };
    out.extend(
        grew.into_iter()
            // Increases of 802.3x pause are the finding above; a reset or a counter at
            // its top is said here like any other's.
            .filter(|(series, moved)| !(link_pause(series) && matches!(moved, Move::Increase(_))))
            .map(|(series, moved)| moved_check(&series, moved, &secs.to_string())),
    );
    if !not_read.is_empty() {
        let listed = not_read
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        let more = match not_read.len() {
            0..=5 => String::new(),
            m => format!("; and {} more", m - 5),
        };
        out.push(check(
            "counters",
            "",
            Status::Warn,
            format!(
                "only {names} read over {secs} ({n} series{}); trouble counters not read: {listed}{more}",
                if out.is_empty() { ", none moved" } else { "" }
            ),
            Some("rocewatch collect --once shows what each collector reads and why it could not; run doctor as root (or give the agent's user read access to those files)".into()),
        ));
    } else if out.is_empty() {
        out.push(check(
            "counters",
            "",
            Status::Pass,
            format!("{names}: no growth over {secs} ({n} series watched)"),
            None,
        ));
    }
    out
}

/// No trouble counter was read in both collections: nothing to judge, and why.
fn nothing_read(
    first: &ScrapeResult,
    second: &ScrapeResult,
    unread: &[String],
    secs: &str,
) -> Check {
    let errors: Vec<String> = first
        .errors
        .iter()
        .chain(&second.errors)
        .map(|e| format!("{}: {}", e.target, e.message))
        .chain(unread.iter().cloned())
        .collect();
    check(
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
    )
}

/// 802.3x (global) pause that moved on a netdev: a FAIL per netdev. A RoCE port must not
/// use it: it stops every priority of the link (RoCE's and everyone else's) where PFC
/// stops one, and a switch port in 802.3x mode ignores PFC. The evidence: frames each way
/// and, where the driver reports it (mlx5), the time spent paused.
fn global_pause_checks(before: &[Sample], after: &[Sample], secs: &str) -> Vec<Check> {
    let link_pause =
        |s: &&Sample| s.name == names::LINK_PAUSE_FRAMES || s.name == names::LINK_PAUSE_DURATION;
    let old: BTreeMap<String, f64> = before
        .iter()
        .filter(link_pause)
        .map(|s| (series_key(s), s.value.as_f64()))
        .collect();
    // netdev -> (frames sent, frames received, µs paused by the peer, µs pausing the peer)
    let mut moved: BTreeMap<String, [f64; 4]> = BTreeMap::new();
    for s in after.iter().filter(link_pause) {
        let frames = s.name == names::LINK_PAUSE_FRAMES;
        let Some(&o) = old.get(&series_key(s)) else {
            continue;
        };
        let Move::Increase(d) = counter_move_from(&s.source, o, s.value.as_f64(), None) else {
            continue;
        };
        if d <= 0.0 {
            continue;
        }
        let subject = s
            .attributes
            .get(rocewatch_metrics::ATTR_NETDEV)
            .or_else(|| s.attributes.get(rocewatch_metrics::ATTR_DEVICE))
            .unwrap_or("?")
            .to_string();
        let sent = s.attributes.get(rocewatch_metrics::ATTR_DIRECTION) == Some("transmit");
        let i = match (frames, sent) {
            (true, true) => 0,
            (true, false) => 1,
            (false, false) => 2,
            (false, true) => 3,
        };
        moved.entry(subject).or_default()[i] += d;
    }
    moved
        .into_iter()
        .map(|(netdev, [tx, rx, paused_us, pausing_us])| {
            let mut what = Vec::new();
            if tx > 0.0 {
                what.push(format!("{tx} pause frames sent"));
            }
            if rx > 0.0 && tx > 0.0 {
                what.push(format!("{rx} received"));
            } else if rx > 0.0 {
                what.push(format!("{rx} pause frames received"));
            }
            if pausing_us > 0.0 {
                what.push(format!("pausing its peer {:.1} s", pausing_us / 1e6));
            }
            if paused_us > 0.0 {
                what.push(format!("paused by its peer {:.1} s", paused_us / 1e6));
            }
            let q = crate::shell::quote(&netdev);
            check(
                "global-pause",
                &netdev,
                Status::Fail,
                format!(
                    "802.3x (global) pause in {secs}: {}; it stops every priority of the link, not only RoCE's",
                    what.join(", ")
                ),
                Some(format!(
                    "turn link flow control off (ethtool -A {q} rx off tx off; ethtool -a {q} shows it) and PFC on the RoCE priority (rocewatch qos plan); on the switch, the port's 802.3x flow control off and PFC on"
                )),
            )
        })
        .collect()
}

/// The warning for one series that grew, went back or rests at its top.
fn moved_check(series: &str, moved: Move, secs: &str) -> Check {
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
                names::PORT_OUT_OF_SEQUENCE,
                "hw_counters/out_of_sequence",
                3_000_000_000,
            ),
            s(
                names::PORT_TRANSMIT_DISCARDS,
                "counters/port_xmit_discards",
                65_535,
            ),
        ];
        let after = [
            s(
                names::PORT_OUT_OF_SEQUENCE,
                "hw_counters/out_of_sequence",
                100,
            ),
            s(
                names::PORT_TRANSMIT_DISCARDS,
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

    /// Item 8 of issue 27: with every hw_counters file unreadable, only port_xmit_discards
    /// read, the check passed "no pauses, drops, out-of-buffer, out-of-sequence or
    /// retransmissions" and said nothing of the permission errors. A pass names only
    /// what was watched; errors for trouble counters make it a warning listing them.
    #[test]
    fn unreadable_trouble_counters_are_no_pass() {
        use rocewatch_plugin_api::{Attributes, MetricKind, PartialError, Sample, Value};
        let xmit = |port: &str| Sample {
            name: "rdma.port.transmit.discards".into(),
            unit: "".into(),
            value: Value::U64(0),
            attributes: Attributes::new(
                [
                    ("rdma.device".to_string(), "mlx5_0".to_string()),
                    ("rdma.port".to_string(), port.to_string()),
                ]
                .into(),
            ),
            source: "counters/port_xmit_discards".into(),
            kind: MetricKind::Counter,
        };
        let denied = |file: &str| PartialError {
            target: format!("/sys/class/infiniband/mlx5_0/ports/1/hw_counters/{file}"),
            message: "Permission denied (os error 13)".into(),
        };
        let read = || ScrapeResult {
            samples: vec![xmit("1"), xmit("2")],
            errors: vec![
                denied("out_of_sequence"),
                denied("out_of_buffer"),
                // Not a trouble counter: not listed.
                PartialError {
                    target: "/sys/class/infiniband/mlx5_0/ports/1/hw_counters/rx_write_requests"
                        .into(),
                    message: "Permission denied (os error 13)".into(),
                },
            ],
        };
        let out = counters_checks(&read(), &read(), &[], Duration::from_millis(200));
        assert_eq!(out.len(), 1, "{out:#?}");
        assert_eq!(out[0].status, Status::Warn, "{out:#?}");
        let e = &out[0].evidence;
        assert!(e.contains("rdma.port.transmit.discards"), "{e}");
        assert!(!e.contains("no pauses"), "{e}");
        assert!(
            e.contains("hw_counters/out_of_sequence: Permission denied"),
            "{e}"
        );
        assert!(
            e.contains("hw_counters/out_of_buffer: Permission denied"),
            "{e}"
        );
        assert!(!e.contains("rx_write_requests"), "{e}");
        // Each file once, though both collections reported it.
        assert_eq!(e.matches("out_of_sequence").count(), 1, "{e}");
        assert!(out[0].fix.is_some());

        // Everything read: the pass names what was watched.
        let clean = || ScrapeResult {
            samples: vec![xmit("1"), xmit("2")],
            errors: vec![],
        };
        let out = counters_checks(&clean(), &clean(), &[], Duration::from_millis(200));
        assert_eq!(out.len(), 1, "{out:#?}");
        assert_eq!(out[0].status, Status::Pass);
        assert!(
            out[0].evidence.contains("rdma.port.transmit.discards"),
            "{}",
            out[0].evidence
        );
        assert!(
            !out[0].evidence.contains("no pauses"),
            "{}",
            out[0].evidence
        );
    }

    /// A ConnectX-6 Dx pausing its peer with 802.3x pause, as the ethtool collector reads
    /// it (`tx_pause_ctrl_phy`, `tx_global_pause_duration`): one FAIL naming the netdev,
    /// the frames and the time, with the fix quoted for a shell; the PFC counters' move
    /// is still the usual warning.
    #[test]
    fn global_pause_on_a_netdev_is_a_failure() {
        use rocewatch_plugin_api::{Attributes, MetricKind, Value};
        let s = |name: &'static str, stat: &str, dir: &str, v: u64| Sample {
            name: name.into(),
            unit: "".into(),
            value: Value::U64(v),
            attributes: Attributes::new(
                [
                    (
                        "network.interface.name".to_string(),
                        "ens1f0np0".to_string(),
                    ),
                    ("network.io.direction".to_string(), dir.to_string()),
                ]
                .into(),
            ),
            source: format!("ethtool:{stat}").into(),
            kind: MetricKind::Counter,
        };
        let at = |frames: u64, us: u64, rx_frames: u64, pfc: u64| ScrapeResult {
            samples: vec![
                s(
                    names::LINK_PAUSE_FRAMES,
                    "tx_pause_ctrl_phy",
                    "transmit",
                    frames,
                ),
                s(
                    names::LINK_PAUSE_FRAMES,
                    "rx_pause_ctrl_phy",
                    "receive",
                    rx_frames,
                ),
                s(
                    names::LINK_PAUSE_DURATION,
                    "tx_global_pause_duration",
                    "transmit",
                    us,
                ),
                s(names::PFC_PAUSE_FRAMES, "rx_prio3_pause", "receive", pfc),
            ],
            errors: vec![],
        };
        let out = counters_checks(
            &at(44_061_528, 5_961_284_324, 0, 7),
            &at(44_071_528, 5_963_784_324, 0, 9),
            &[],
            Duration::from_secs(10),
        );
        let fails: Vec<&Check> = out.iter().filter(|c| c.status == Status::Fail).collect();
        assert_eq!(fails.len(), 1, "{out:#?}");
        let f = fails[0];
        assert_eq!(
            (f.check.as_str(), f.subject.as_str()),
            ("global-pause", "ens1f0np0")
        );
        assert!(
            f.evidence.contains("10000 pause frames sent"),
            "{}",
            f.evidence
        );
        assert!(
            f.evidence.contains("pausing its peer 2.5 s"),
            "{}",
            f.evidence
        );
        assert!(!f.evidence.contains("received"), "{}", f.evidence);
        let fix = f.fix.as_deref().unwrap();
        assert!(fix.contains("ethtool -A ens1f0np0 rx off tx off"), "{fix}");
        // The PFC move is the ordinary warning; the link pause is not said twice.
        assert!(out
            .iter()
            .any(|c| c.status == Status::Warn && c.evidence.contains("rdma.pfc.pause_frames")));
        assert!(!out
            .iter()
            .any(|c| c.status == Status::Warn && c.evidence.contains("rdma.link.pause")));

        // A netdev name a shell would split is quoted in the fix.
        let odd = |v: u64| ScrapeResult {
            samples: vec![Sample {
                attributes: Attributes::new(
                    [
                        ("network.interface.name".to_string(), "x;reboot".to_string()),
                        ("network.io.direction".to_string(), "receive".to_string()),
                    ]
                    .into(),
                ),
                ..s(names::LINK_PAUSE_FRAMES, "rx_pause_frames", "receive", v)
            }],
            errors: vec![],
        };
        let out = counters_checks(&odd(1), &odd(5), &[], Duration::from_secs(10));
        let fix = out[0].fix.as_deref().unwrap();
        assert!(fix.contains("ethtool -A 'x;reboot' rx off"), "{fix}");
        assert!(
            out[0].evidence.contains("4 pause frames received"),
            "{}",
            out[0].evidence
        );

        // A PFC host: its per-priority pause moves and `*_pause_ctrl_phy` does not (IEEE
        // 802.3 30.3.4.2/30.3.4.3 count frames of the PAUSE opcode only; PFC's is
        // another): no global-pause finding, only the PFC warning.
        let out = counters_checks(
            &at(5, 5, 5, 7),
            &at(5, 5, 5, 90_007),
            &[],
            Duration::from_secs(10),
        );
        assert!(!out.iter().any(|c| c.check == "global-pause"), "{out:#?}");
        assert!(out.iter().any(|c| c.status == Status::Warn));

        // No move, no finding.
        let still = at(5, 5, 5, 5);
        assert!(
            counters_checks(&still, &still, &[], Duration::from_secs(10))
                .iter()
                .all(|c| c.status == Status::Pass)
        );
    }
}
