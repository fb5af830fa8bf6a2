//! The kernel log's RDMA/NIC driver messages over a window: firmware command timeouts,
//! health reports, firmware syndromes, ACCESS_REG errors, PCIe slot power, temperature
//! and link flaps (the catalog's patterns, and the kernel-log plugin's options: the same
//! reader, matcher and device attribution the collector uses).

use std::path::Path;
use std::time::Duration;

use rocewatch_klog::text::Clock;
use rocewatch_klog::{scan, Options as LogOptions, Scan};

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// Patterns that mean the device is failing (the rest warn).
const FAILING: &[&str] = &["cmd_timeout", "health_compromised", "pcie_power"];

/// The check over the `window` before `clock`, reading what the plugin's `options` say
/// under `sysfs_root`. A log that holds no record, or that could not all be read, or
/// whose records are all older than the window (a file no longer written), is no
/// evidence of a quiet NIC: SKIP or WARN saying why, never PASS.
pub fn kernel_log_checks(
    sysfs_root: &Path,
    options: &serde_json::Value,
    window: Duration,
    clock: Clock,
) -> Vec<Check> {
    let opts = match LogOptions::from_json(options) {
        Ok(o) => o,
        Err(e) => {
            return vec![check(
                "kernel-log",
                "",
                Status::Fail,
                e.to_string(),
                Some("fix [plugins.builtin.kernel-log.options] in the configuration".into()),
            )]
        }
    };
    let path = match opts.source(sysfs_root) {
        Ok(p) => p,
        Err(why) => return vec![check("kernel-log", "", Status::Skip, why, None)],
    };
    let matcher = match opts.matcher(sysfs_root) {
        Ok(m) => m,
        Err(e) => {
            return vec![check(
                "kernel-log",
                "",
                Status::Fail,
                e.to_string(),
                Some("fix [plugins.builtin.kernel-log.options] patterns".into()),
            )]
        }
    };
    let w = humantime::format_duration(window).to_string();
    let s = match scan(&path, &matcher, window, &clock) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return vec![check(
                "kernel-log",
                "",
                Status::Skip,
                format!("{}: {e}", path.display()),
                Some("run doctor as root (reading the kernel log needs CAP_SYSLOG), or sysctl -w kernel.dmesg_restrict=0".into()),
            )]
        }
        Err(e) => return vec![check("kernel-log", "", Status::Skip, format!("{}: {e}", path.display()), None)],
    };
    let source = match s.format {
        Some(f) => format!("{} ({})", path.display(), f.describe()),
        None => path.display().to_string(),
    };
    if s.records == 0 {
        return vec![no_records(&s, &source, &w)];
    }
    let untimed = s.format.is_some_and(|f| !f.timed());
    let boot = another_boot(&s, &clock);
    if s.tally.counts.is_empty() {
        let mut c = no_match(&s, &source, &w, untimed);
        if let Some(b) = &boot {
            c.evidence = format!("{}; {b}", c.evidence);
        }
        return vec![c];
    }
    let note = match (untimed, s.unparsed) {
        (true, _) => {
            format!(" (the records of {source} carry no time: counted over the whole file)")
        }
        (false, 0) => String::new(),
        (false, _) => format!(" ({})", unread(&s)),
    } + &boot.map_or(String::new(), |b| format!(" ({b})"));
    s.tally
        .counts
        .iter()
        .map(|((pattern, device), hit)| {
            let known = rocewatch_metrics::kernel_log_pattern(pattern);
            let meaning = known.map_or(String::new(), |p| format!(" ({})", p.meaning));
            check(
                "kernel-log",
                device,
                if FAILING.contains(&pattern.as_str()) {
                    Status::Fail
                } else {
                    Status::Warn
                },
                format!(
                    "{pattern}{meaning}: {} message{} in the last {w}; last at {}: {}{note}",
                    hit.count,
                    if hit.count == 1 { "" } else { "s" },
                    hit.last_stamp.describe(),
                    hit.last_message
                ),
                Some(match known {
                    Some(p) => {
                        let o = rocewatch_klog::matcher::origin(&hit.last_message);
                        let mut fix = p.fix.to_string();
                        if let Some(pci) = &o.pci {
                            fix = fix.replace("pci/PCI", &format!("pci/{pci}"));
                        }
                        if let Some(nd) = &o.netdev {
                            fix = fix.replace(" IF", &format!(" {}", word(nd)));
                        }
                        fix
                    }
                    None => format!("the configured pattern {pattern} matched: read the message in dmesg and act on it"),
                }),
            )
        })
        .collect()
}

/// The records of another boot, when there are: before the log's last boot (a log of
/// several boots, whose times since boot start again at each) or dated after this boot's
/// uptime (a log kept across reboots), never in the window; the driver messages among
/// them.
fn another_boot(s: &Scan, clock: &Clock) -> Option<String> {
    let n = s.another_boot.records;
    if n == 0 {
        return None;
    }
    let records = |n: u64| format!("{n} record{}", if n == 1 { "" } else { "s" });
    let before = s.before_last_boot.min(n);
    let mut parts = Vec::new();
    if before > 0 {
        parts.push(format!(
            "{} logged before the log's last boot ({})",
            records(before),
            s.last_boot.as_deref().unwrap_or_default()
        ));
    }
    if n > before {
        parts.push(format!(
            "{} dated after this boot's uptime of {:.0} s",
            records(n - before),
            clock.since_boot_us as f64 / 1e6
        ));
    }
    let mut by_pattern: std::collections::BTreeMap<&str, u64> = Default::default();
    for ((pattern, _), hit) in &s.another_boot.counts {
        *by_pattern.entry(pattern).or_default() += hit.count;
    }
    let matched: Vec<String> = by_pattern.iter().map(|(p, n)| format!("{p} {n}")).collect();
    Some(format!(
        "{}, from another boot: not counted{}",
        parts.join(" and "),
        if matched.is_empty() {
            String::new()
        } else {
            format!(" (matching there: {})", matched.join(", "))
        }
    ))
}

/// How many lines of the log were not read as records, and the first of them.
fn unread(s: &Scan) -> String {
    format!(
        "{} of its {} lines {} not read as records ({})",
        s.unparsed,
        s.lines,
        if s.unparsed == 1 { "was" } else { "were" },
        s.first_unparsed.as_deref().unwrap_or_default()
    )
}

/// A log without a kernel record: empty, unreadable as records, or of other programs.
fn no_records(s: &Scan, source: &str, w: &str) -> Check {
    let (status, why) = if s.lines == 0 {
        (
            Status::Skip,
            format!("{source} is empty: no kernel record to judge the last {w} by"),
        )
    } else if s.unparsed > 0 {
        (
            Status::Warn,
            format!(
                "no kernel record in {source}: {}; doctor reads /dev/kmsg records, dmesg (with or without times), syslog kern.log and journalctl -k output",
                unread(s)
            ),
        )
    } else {
        (
            Status::Skip,
            format!(
                "no kernel record in {source} ({} lines, {} of other programs): nothing to judge the last {w} by",
                s.lines, s.other
            ),
        )
    };
    check("kernel-log", "", status, why, None)
}

/// Records, but no driver message matching a pattern: a pass only when the window's
/// records were read and carry times.
fn no_match(s: &Scan, source: &str, w: &str, untimed: bool) -> Check {
    let patterns = s.patterns.join(", ");
    let (status, evidence) = if s.unparsed > 0 {
        (
            Status::Warn,
            format!(
                "no RDMA/NIC driver message matching {patterns} in the records read, but {}: what they hold was not checked",
                unread(s)
            ),
        )
    } else if untimed {
        (
            Status::Warn,
            format!(
                "no RDMA/NIC driver message matching {patterns} in {source}, but its {} records carry no time: the last {w} cannot be told from older messages (record the log with times: dmesg, not dmesg -t)",
                s.records
            ),
        )
    } else if s.tally.records == 0 && !s.device {
        (
            Status::Skip,
            format!(
                "none of the {} records of {source} is from the last {w} (the last: {}): nothing to judge the window by; a log no longer written, or a recording (a longer --log-window reads further back)",
                s.records,
                s.last.map_or_else(|| "none".into(), |l| l.describe())
            ),
        )
    } else {
        (
            Status::Pass,
            format!(
                "no RDMA/NIC driver message matching {patterns} in the last {w} ({} of the {} records of {source} in the window)",
                s.tally.records, s.records
            ),
        )
    };
    check("kernel-log", "", status, evidence, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `us` since boot, the wall clock at the epoch, UTC.
    fn boot(us: u64) -> Clock {
        Clock {
            since_boot_us: us,
            unix_us: 0,
            utc_offset_s: 0,
        }
    }

    #[test]
    fn recorded_log_gives_one_check_per_pattern_and_device() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        std::fs::write(
            &log,
            "3,1,1000000,-;mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n\
             6,2,90000000,-;mlx5_core 0000:03:00.0 ens1f0np0: Link down\n\
             6,3,91000000,-;mlx5_core 0000:03:00.0 ens1f0np0: Link up\n",
        )
        .unwrap();
        let opts = serde_json::json!({ "path": log });
        // A window of 60 s at 100 s after boot: the command timeout is older.
        let c = kernel_log_checks(
            dir.path(),
            &opts,
            Duration::from_secs(60),
            boot(100_000_000),
        );
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(
            (c[0].status, c[0].subject.as_str()),
            (Status::Warn, "0000:03:00.0")
        );
        assert!(
            c[0].fix
                .as_deref()
                .unwrap()
                .contains("ethtool -m ens1f0np0"),
            "{c:?}"
        );
        assert!(c[0].evidence.starts_with("link_flap (the link went down or up): 2 messages in the last 1m; last at 91.000 s after boot: mlx5_core 0000:03:00.0 ens1f0np0: Link up"), "{}", c[0].evidence);
        let c = kernel_log_checks(
            dir.path(),
            &opts,
            Duration::from_secs(3600),
            boot(100_000_000),
        );
        let timeout = c
            .iter()
            .find(|c| c.evidence.starts_with("cmd_timeout"))
            .unwrap();
        assert_eq!(timeout.status, Status::Fail);
        assert!(timeout
            .fix
            .as_deref()
            .unwrap()
            .contains("devlink dev reload pci/0000:03:00.0"));
        assert!(c.iter().any(|c| c.evidence.starts_with("access_reg")));
    }

    #[test]
    fn quiet_log_passes_and_a_fixture_root_skips() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        std::fs::write(&log, "6,1,10,-;EXT4-fs (sda1): mounted\n").unwrap();
        let c = kernel_log_checks(
            dir.path(),
            &serde_json::json!({ "path": log }),
            Duration::from_secs(60),
            boot(100),
        );
        assert_eq!(c[0].status, Status::Pass, "{c:?}");
        assert!(c[0].evidence.contains("cmd_timeout, health_compromised"));
        assert!(
            c[0].evidence.contains("(1 of the 1 records of "),
            "{}",
            c[0].evidence
        );
        let c = kernel_log_checks(
            dir.path(),
            &serde_json::json!({}),
            Duration::from_secs(60),
            boot(100),
        );
        assert_eq!(c[0].status, Status::Skip);
        let c = kernel_log_checks(
            dir.path(),
            &serde_json::json!({"pattern": {}}),
            Duration::from_secs(60),
            boot(100),
        );
        assert_eq!(c[0].status, Status::Fail);
        assert!(
            c[0].evidence.contains("unknown field `pattern`"),
            "{}",
            c[0].evidence
        );
    }

    /// The recorded logs (integration-tests/fixtures/kernel-log, see its SOURCE.md):
    /// every layout gives the firmware timeout and the health report as failures.
    #[test]
    fn every_recorded_layout_fails_on_the_mlx5_failures() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/kernel-log");
        // 2025-12-01 00:00 UTC, 2000 s after boot: a week's window holds them all.
        let clock = Clock {
            since_boot_us: 2_000_000_000,
            unix_us: 1_764_547_200_000_000,
            utc_offset_s: 0,
        };
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name == "SOURCE.md" || name == "generate.py" {
                continue;
            }
            let c = kernel_log_checks(
                &dir,
                &serde_json::json!({ "path": path }),
                Duration::from_secs(7 * 86_400),
                clock,
            );
            for p in ["cmd_timeout", "health_compromised"] {
                let hit = c
                    .iter()
                    .find(|c| c.evidence.starts_with(p))
                    .unwrap_or_else(|| panic!("{name}: no {p}: {c:#?}"));
                assert_eq!(
                    (hit.status, hit.subject.as_str()),
                    (Status::Fail, "0000:3b:00.0"),
                    "{name}"
                );
            }
            let flap = c
                .iter()
                .find(|c| c.evidence.starts_with("link_flap"))
                .unwrap();
            assert_eq!(flap.status, Status::Warn, "{name}");
            if name == "dmesg-t.txt" {
                assert!(flap.evidence.contains("carry no time"), "{}", flap.evidence);
            }
            if name == "kern.log-rfc3339" {
                assert!(
                    flap.evidence.contains("last at 2025-11-30 08:12:10 UTC"),
                    "{}",
                    flap.evidence
                );
            }
        }
    }

    /// A log kept across a reboot (issue 49): a firmware timeout dated at 1021 s after
    /// boot when this boot is 900 s old is another boot's, never "in the last 1m".
    #[test]
    fn a_record_dated_after_the_uptime_is_of_another_boot() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        let timeout = "3,7,1021000000,-;mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n";
        let run = |content: &str| {
            std::fs::write(&log, content).unwrap();
            kernel_log_checks(
                dir.path(),
                &serde_json::json!({ "path": log }),
                Duration::from_secs(60),
                boot(900_000_000),
            )
        };
        // Only the other boot's record: nothing of this boot to judge the window by.
        let c = run(timeout);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].status, Status::Skip, "{c:?}");
        assert!(
            c[0].evidence.contains("1 record dated after this boot's uptime of 900 s, from another boot: not counted (matching there: access_reg 1, cmd_timeout 1)"),
            "{}",
            c[0].evidence
        );
        // And a quiet record of this boot in the window: a pass, the other boot said.
        let c = run(&format!(
            "{timeout}6,8,880000000,-;EXT4-fs (sda1): mounted\n"
        ));
        assert_eq!(c[0].status, Status::Pass, "{c:?}");
        assert!(
            c[0].evidence.contains("from another boot"),
            "{}",
            c[0].evidence
        );
        // A link flap of this boot: counted, the other boot's timeout not.
        let c = run(&format!(
            "{timeout}6,8,880000000,-;mlx5_core 0000:03:00.0 ens1f0np0: Link up\n"
        ));
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].status, Status::Warn, "{c:?}");
        assert!(c[0].evidence.starts_with("link_flap"), "{}", c[0].evidence);
        assert!(
            c[0].evidence.contains("from another boot: not counted"),
            "{}",
            c[0].evidence
        );
    }

    /// A log of two boots whose times since boot start again (issue 49): the previous
    /// boot's firmware timeout at 300 s is before this boot's uptime of 400 s but not this
    /// boot's: not counted in the hour, said apart.
    #[test]
    fn the_records_before_the_last_boot_of_a_log_are_of_another_boot() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dmesg");
        std::fs::write(
            &log,
            "[  300.000000] mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n\
             [    1.000000] Linux version 6.1.0\n\
             [  390.000000] EXT4-fs (sda1): mounted\n",
        )
        .unwrap();
        let c = kernel_log_checks(
            dir.path(),
            &serde_json::json!({ "path": log }),
            Duration::from_secs(3600),
            boot(400_000_000),
        );
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].status, Status::Pass, "{c:?}");
        assert!(
            c[0].evidence.contains("1 record logged before the log's last boot (line 2: times since boot go back from 300.000 s after boot to 1.000 s after boot), from another boot: not counted (matching there: access_reg 1, cmd_timeout 1)"),
            "{}",
            c[0].evidence
        );
        // With a record dated after the uptime too: both said.
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::write(&log, format!("[ 1021.000000] usb 1-1: new device\n{text}")).unwrap();
        let c = kernel_log_checks(
            dir.path(),
            &serde_json::json!({ "path": log }),
            Duration::from_secs(3600),
            boot(400_000_000),
        );
        assert!(
            c[0].evidence
                .contains("1 record logged before the log's last boot (line 3: ")
                && c[0].evidence.contains(
                    " and 1 record dated after this boot's uptime of 400 s, from another boot"
                ),
            "{}",
            c[0].evidence
        );
    }

    /// What is no evidence of a quiet NIC is never a pass.
    #[test]
    fn a_log_that_says_nothing_does_not_pass() {
        let dir = tempfile::tempdir().unwrap();
        let run = |content: &str, window: u64, clock: Clock| {
            let log = dir.path().join("log");
            std::fs::write(&log, content).unwrap();
            let c = kernel_log_checks(
                dir.path(),
                &serde_json::json!({ "path": log }),
                Duration::from_secs(window),
                clock,
            );
            assert_eq!(c.len(), 1, "{c:?}");
            (c[0].status, c[0].evidence.clone())
        };
        let now = Clock {
            since_boot_us: 10_000_000,
            unix_us: 1_764_547_200_000_000,
            utc_offset_s: 0,
        };
        let (st, ev) = run("", 3600, now);
        assert_eq!(st, Status::Skip, "{ev}");
        assert!(ev.contains("is empty"), "{ev}");
        let (st, ev) = run("\u{1}\u{2}\n\u{3}\n", 3600, now);
        assert_eq!(st, Status::Warn, "{ev}");
        assert!(ev.contains("2 of its 2 lines were not read"), "{ev}");
        // Syslog lines a day old, a one-hour window: a log no longer written.
        let (st, ev) = run(
            "Nov 30 00:00:00 node7 kernel: usb 1-1: new device\n",
            3600,
            now,
        );
        assert_eq!(st, Status::Skip, "{ev}");
        assert!(ev.contains("none of the 1 records"), "{ev}");
        assert!(ev.contains("the last: 2025-11-30 00:00:00 UTC"), "{ev}");
        // Only other programs' lines.
        let (st, ev) = run("Nov 30 23:59:00 node7 sshd[12]: Accepted key\n", 3600, now);
        assert_eq!(st, Status::Skip, "{ev}");
        assert!(ev.contains("1 of other programs"), "{ev}");
        // No times: the window cannot be applied.
        let (st, ev) = run("usb 1-1: new device\n", 3600, now);
        assert_eq!(st, Status::Warn, "{ev}");
        assert!(ev.contains("carry no time"), "{ev}");
        // Quiet, but a line could not be read: it was not checked.
        let (st, ev) = run(
            "[    5.000000] usb 1-1: new device\n[garbled\n[    6.000000] usb 1-1: gone\n",
            3600,
            now,
        );
        assert_eq!(st, Status::Warn, "{ev}");
        assert!(ev.contains("1 of its 3 lines was not read"), "{ev}");
        // Quiet and read whole, records in the window: a pass.
        let (st, ev) = run(
            "Nov 30 23:59:00 node7 kernel: usb 1-1: new device\n",
            3600,
            now,
        );
        assert_eq!(st, Status::Pass, "{ev}");
    }
}
