//! The report: a table in the shape operators know from `ib_write_bw` (one row per test:
//! host, NIC, peer, direction, BW Gb/s, % of line rate, latency µs, verdict), the
//! untested ranks, then the findings; or the same as JSON. Exit status: 0 every test
//! passed, 1 a NIC, host or direction is named, 2 cannot tell (a failure no one can be
//! blamed for, a test not judged or never run).

use std::fmt::Write as _;

use serde_json::json;

use crate::schedule::{Mode, Schedule};
use crate::verdict::{FailedDirection, Finding, Judgement, Status, Verdict};

/// The exit status of a verdict.
pub fn exit_code(v: &Verdict) -> i32 {
    match v.status {
        Status::Pass => 0,
        Status::Fail => 1,
        Status::CannotTell => 2,
    }
}

/// Names from a host list or sysfs, and messages naming them, on one line of a terminal:
/// control characters escaped, nothing else (a table for humans is not shell text:
/// `n2's` stays as written).
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn num(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Default => "default",
        Mode::AllPairs => "all pairs",
    }
}

/// One line per finding.
pub fn finding_line(f: &Finding) -> String {
    match f {
        Finding::BadHost {
            host,
            nics,
            partners,
        } => format!(
            "FAIL: bad host {}: every rail fails ({}) against partners whose other tests pass ({})",
            clean(host),
            clean(&nics.join(", ")),
            clean(&partners.join(", "))
        ),
        Finding::BadNic {
            host,
            nic,
            rank,
            partners,
            direction,
        } => {
            let dir = match direction {
                FailedDirection::Sending => "sending",
                FailedDirection::Receiving => "receiving",
                FailedDirection::Both => "both ways",
            };
            format!(
                "FAIL: bad NIC {}/{} (rail {rank}): fails {dir} against {}, whose other tests pass",
                clean(host),
                clean(nic),
                clean(&partners.join(", "))
            )
        }
        Finding::NicDown { host, nic, rank } => format!(
            "FAIL: {}/{} (rail {rank}) is not ACTIVE: untested",
            clean(host),
            clean(nic)
        ),
        Finding::SlowDirection {
            rank,
            from,
            to,
            why,
        } => format!(
            "FAIL: slow direction {} → {} (rail {rank}): {}",
            clean(&from.to_string()),
            clean(&to.to_string()),
            clean(why)
        ),
        Finding::Inconclusive { why } => format!("CANNOT TELL: {}", clean(why)),
    }
}

/// The report as text. With `every_row` false only the tests that did not pass get a
/// row (a sweep of 128 hosts × 8 rails is 6,144 tests), and a line counts the others.
pub fn text(schedule: &Schedule, v: &Verdict, every_row: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rocewatch preflight: {} hosts, {} round{} ({}); pass at ≥ {:.0} % of the line rate and ≤ {:.1} µs",
        schedule.hosts().len(),
        schedule.rounds(),
        if schedule.rounds() == 1 { "" } else { "s" },
        mode_name(schedule.mode()),
        v.thresholds.min_share * 100.0,
        v.thresholds.max_latency_us
    );
    let shown: Vec<&crate::verdict::Judged> = v
        .tests
        .iter()
        .filter(|t| every_row || t.judgement != Judgement::Pass)
        .collect();
    let rows: Vec<[String; 9]> = shown
        .iter()
        .map(|t| {
            let r = &t.result;
            let verdict = match &t.judgement {
                Judgement::Pass => "pass".to_string(),
                Judgement::Fail { .. } => "FAIL".to_string(),
                Judgement::Unknown { .. } => "unknown".to_string(),
            };
            [
                clean(&r.from.host),
                clean(&r.from.nic),
                "->".into(),
                clean(&r.to.host),
                clean(&r.to.nic),
                num(r.bandwidth_gbps, 2),
                num(t.share.map(|s| s * 100.0), 0),
                num(r.latency_us, 2),
                verdict,
            ]
        })
        .collect();
    let head = [
        "host", "NIC", "dir", "peer", "peer NIC", "BW[Gb/s]", "%line", "lat[µs]", "verdict",
    ];
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut line = |cells: &[String]| {
        let mut l = String::new();
        for (c, w) in cells.iter().zip(&width) {
            let _ = write!(l, " {c:<w$} ");
        }
        let _ = writeln!(out, "{}", l.trim_end());
    };
    if !rows.is_empty() {
        line(&head.map(String::from));
    }
    for row in &rows {
        line(row);
    }
    let hidden = v.tests.len() - shown.len();
    if hidden > 0 {
        let s = if hidden == 1 { "" } else { "s" };
        let _ = writeln!(out, "({hidden} passing test{s} not shown)");
    }
    for t in &v.tests {
        if let Judgement::Fail { reasons } = &t.judgement {
            let r = &t.result;
            let _ = writeln!(
                out,
                "  {} → {} (rail {}): {}",
                clean(&r.from.to_string()),
                clean(&r.to.to_string()),
                r.rank,
                clean(&reasons.join("; "))
            );
        }
    }
    for u in &v.untested {
        let _ = writeln!(
            out,
            "untested: {}/{} (rail {}) against {} in round {}: {}",
            clean(&u.host),
            clean(u.nic.as_deref().unwrap_or("-")),
            u.rank,
            clean(&u.peer),
            u.round,
            clean(&u.why)
        );
    }
    for f in &v.findings {
        let _ = writeln!(out, "{}", finding_line(f));
    }
    if v.status == Status::Pass {
        let _ = writeln!(out, "PASS: {} tests, every one passed", v.tests.len());
    }
    out
}

/// The report as JSON.
pub fn json(schedule: &Schedule, v: &Verdict) -> serde_json::Value {
    json!({
        "status": v.status,
        "exit_code": exit_code(v),
        "hosts": schedule.hosts(),
        "mode": schedule.mode(),
        "rounds": schedule.rounds(),
        "thresholds": v.thresholds,
        "findings": v.findings,
        "tests": v.tests,
        "untested": v.untested,
    })
}

#[cfg(test)]
mod tests {
    use super::clean;
    use proptest::prelude::*;

    #[test]
    fn only_control_characters_are_escaped() {
        assert_eq!(
            clean("cannot reach n2's preflight"),
            "cannot reach n2's preflight"
        );
        assert_eq!(clean("a\"b\\c"), "a\"b\\c");
        assert_eq!(clean("n2\n\u{1b}[2J's"), "n2\\n\\u{1b}[2J's");
    }

    proptest! {
        /// Whatever a name holds, it stays on one line with no control character, and
        /// text without one comes back as written.
        #[test]
        fn any_text_is_one_line_of_printable_text(s in "\\PC*|.*[\\x00-\\x1f\\x7f].*") {
            let c = clean(&s);
            prop_assert!(!c.chars().any(char::is_control));
            if !s.chars().any(char::is_control) {
                prop_assert_eq!(c, s);
            }
        }
    }
}
