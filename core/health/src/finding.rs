//! What a check found, the host's verdict, and the one line a scheduler reads.

use serde::Serialize;

/// How one finding weighs in the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Checked and as expected.
    Ok,
    /// Not checked here (no agent running, nothing of its kind on the host, a check the
    /// configuration turns off): says why, weighs nothing.
    Skipped,
    /// Worth a look; does not keep the host out of jobs.
    Warning,
    /// The check could not read what it needs: the host's health cannot be told.
    Unknown,
    /// The host must not take jobs.
    Unhealthy,
}

/// The host's verdict: the node-problem-detector custom-plugin contract's exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Healthy,
    Unhealthy,
    /// Something could not be read and nothing was found wrong.
    Unknown,
}

impl Verdict {
    /// 0 healthy, 1 unhealthy, 2 cannot tell (node-problem-detector's `OK`, `NonOK`,
    /// `Unknown`).
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Healthy => 0,
            Verdict::Unhealthy => 1,
            Verdict::Unknown => 2,
        }
    }
}

/// One thing a check found, about the host, a device, a port or a netdev.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The check: `ports`, `pcie`, `gid`, `mtu`, `builds`, `kernel-log`, `qps`, `agent`,
    /// `quarantine`, `devices`, `userspace`, `link`, `optics`.
    pub check: &'static str,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    /// What is wrong, or what was read.
    pub what: String,
    /// What changes from run to run and so stays out of `what`, which the line (and a
    /// Slurm drain's reason, compared before `scontrol` is run again) is made of: the age
    /// of the reading a link's flaps are counted from.
    /// (A boxed `str`: a finding stays small enough to be a function's error.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<str>>,
}

impl Finding {
    /// A finding about the host as a whole.
    pub fn host(check: &'static str, status: Status, what: impl Into<String>) -> Finding {
        Finding {
            check,
            status,
            device: None,
            port: None,
            netdev: None,
            what: what.into(),
            detail: None,
        }
    }

    /// A finding about `device` (and `port`, `netdev` when known).
    pub fn at(
        check: &'static str,
        status: Status,
        device: &str,
        port: Option<u32>,
        netdev: Option<&str>,
        what: impl Into<String>,
    ) -> Finding {
        Finding {
            check,
            status,
            device: Some(device.to_string()),
            port,
            netdev: netdev.map(str::to_string),
            what: what.into(),
            detail: None,
        }
    }

    /// `mlx5_0/1 ens1f0np0`, `mlx5_0`, or empty for the host.
    pub fn subject(&self) -> String {
        let mut s = match (&self.device, self.port) {
            (Some(d), Some(p)) => format!("{d}/{p}"),
            (Some(d), None) => d.clone(),
            (None, _) => String::new(),
        };
        if let Some(n) = &self.netdev {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(n);
        }
        s
    }
}

/// Every finding of one run, in the order the checks ran.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub verdict: Verdict,
    /// The worst finding in one line (at most [`LINE_MAX`] bytes).
    pub line: String,
    pub findings: Vec<Finding>,
}

/// node-problem-detector's default `max_output_length` for a custom plugin: what it keeps
/// of the plugin's output as the condition's message.
pub const LINE_MAX: usize = 80;

impl Report {
    pub fn new(findings: Vec<Finding>) -> Report {
        let worst = findings.iter().map(|f| f.status).max();
        let verdict = match worst {
            Some(Status::Unhealthy) => Verdict::Unhealthy,
            Some(Status::Unknown) => Verdict::Unknown,
            _ => Verdict::Healthy,
        };
        let line = bounded(&summary(&findings, verdict), LINE_MAX);
        Report {
            verdict,
            line,
            findings,
        }
    }
}

/// The one line: the worst finding (`mlx5_0/1 ens1f0np0: port DOWN, its netdev is up`),
/// how many more there are, or what was checked when all is well.
fn summary(findings: &[Finding], verdict: Verdict) -> String {
    let bad: Vec<&Finding> = {
        let mut v: Vec<&Finding> = findings
            .iter()
            .filter(|f| matches!(f.status, Status::Unhealthy | Status::Unknown))
            .collect();
        v.sort_by_key(|f| std::cmp::Reverse(f.status));
        v
    };
    match (verdict, bad.first()) {
        (Verdict::Healthy, _) => {
            let ports = findings
                .iter()
                .filter(|f| f.check == "ports" && f.status == Status::Ok)
                .count();
            let warnings = findings
                .iter()
                .filter(|f| f.status == Status::Warning)
                .count();
            match warnings {
                0 => format!("healthy: {ports} RDMA port{} checked", plural(ports)),
                n => format!(
                    "healthy: {ports} RDMA port{} checked, {n} warning{}",
                    plural(ports),
                    plural(n)
                ),
            }
        }
        (_, Some(f)) => {
            let more = bad.len() - 1;
            let subject = f.subject();
            let lead = if verdict == Verdict::Unknown {
                "cannot tell: "
            } else {
                ""
            };
            let head = if subject.is_empty() {
                format!("{lead}{}: {}", f.check, f.what)
            } else {
                format!("{lead}{subject}: {}", f.what)
            };
            match more {
                0 => head,
                n => format!("{head} (+{n} more)"),
            }
        }
        (_, None) => "cannot tell".to_string(),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Whether `c` could change how a line reads or where it ends: control characters, and
/// the format and separator characters of Unicode that reorder or break text (bidi
/// overrides and isolates, zero-width characters, line and paragraph separators).
fn unsafe_in_a_line(c: char) -> bool {
    c.is_control()
        || matches!(c as u32,
            0x061C | 0x180E | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB)
}

/// `text` on one line (control, format and separator characters as spaces) in at most
/// `max` bytes: cut at a character boundary with `...` when longer. A `(+N more)` tail is
/// kept whole.
pub fn bounded(text: &str, max: usize) -> String {
    let one: String = text
        .chars()
        .map(|c| if unsafe_in_a_line(c) { ' ' } else { c })
        .collect();
    if one.len() <= max {
        return one;
    }
    let (body, tail) = match one.rfind(" (+") {
        Some(i) if one.ends_with(" more)") && one.len() - i < max / 2 => one.split_at(i),
        _ => (one.as_str(), ""),
    };
    let room = max.saturating_sub(tail.len() + 3);
    let mut cut = room.min(body.len());
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...{tail}", &body[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn port_down(dev: &str) -> Finding {
        Finding::at(
            "ports",
            Status::Unhealthy,
            dev,
            Some(1),
            Some("ens1f0np0"),
            "port DOWN (phys Disabled), its netdev is up",
        )
    }

    #[test]
    fn the_verdict_is_the_worst_status() {
        let ok = Finding::at("ports", Status::Ok, "mlx5_0", Some(1), None, "ACTIVE");
        let unknown = Finding::host("pcie", Status::Unknown, "current_link_width unreadable");
        assert_eq!(Report::new(vec![ok.clone()]).verdict, Verdict::Healthy);
        assert_eq!(
            Report::new(vec![ok.clone(), unknown.clone()]).verdict,
            Verdict::Unknown
        );
        let r = Report::new(vec![ok, unknown, port_down("mlx5_0")]);
        assert_eq!(r.verdict, Verdict::Unhealthy);
        assert_eq!(r.verdict.exit_code(), 1);
        assert_eq!(
            r.line,
            "mlx5_0/1 ens1f0np0: port DOWN (phys Disabled), its netdev is up (+1 more)"
        );
        assert_eq!(Report::new(vec![]).verdict.exit_code(), 0);
    }

    #[test]
    fn the_line_names_the_worst_and_fits_80_bytes() {
        let long = Finding::at(
            "kernel-log",
            Status::Unhealthy,
            "mlx5_12",
            None,
            None,
            "cmd_timeout (a firmware command timed out): 31 messages in the last 15m; last at 2026-12-05 10:00:00 UTC",
        );
        let r = Report::new(vec![long, port_down("mlx5_3"), port_down("mlx5_4")]);
        assert!(
            r.line.len() <= LINE_MAX,
            "{} bytes: {}",
            r.line.len(),
            r.line
        );
        assert!(r.line.starts_with("mlx5_12: cmd_timeout"), "{}", r.line);
        assert!(r.line.ends_with("... (+2 more)"), "{}", r.line);
    }

    #[test]
    fn healthy_says_what_was_checked() {
        let ok = |d: &str| Finding::at("ports", Status::Ok, d, Some(1), None, "ACTIVE");
        let warn = Finding::host("agent", Status::Warning, "x");
        assert_eq!(
            Report::new(vec![ok("a"), ok("b")]).line,
            "healthy: 2 RDMA ports checked"
        );
        assert_eq!(
            Report::new(vec![ok("a"), warn]).line,
            "healthy: 1 RDMA port checked, 1 warning"
        );
    }

    #[test]
    fn bidi_overrides_and_line_separators_cannot_reorder_or_break_the_line() {
        let b = bounded("mlx5_0/1 e\u{202E}x\u{2028}y\u{200B}: port DOWN", 80);
        assert_eq!(b, "mlx5_0/1 e x y : port DOWN");
    }

    proptest! {
        #[test]
        fn bounded_is_one_line_within_max_at_a_char_boundary(s in "\\PC{0,200}", ctl in "[\\x00-\\x1f]{0,3}", max in 10usize..120) {
            let text = format!("{s}{ctl}{s}");
            let b = bounded(&text, max);
            prop_assert!(b.len() <= max, "{} > {max}", b.len());
            prop_assert!(!b.chars().any(unsafe_in_a_line));
        }
    }
}
