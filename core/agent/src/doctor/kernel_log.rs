//! The kernel log's RDMA/NIC driver messages over a window: firmware command timeouts,
//! health reports, firmware syndromes, ACCESS_REG errors, PCIe slot power, temperature
//! and link flaps (the catalog's patterns, and the kernel-log plugin's options: the same
//! reader, matcher and device attribution the collector uses).

use std::path::Path;
use std::time::Duration;

use rocewatch_kernel_log::{scan, Options as LogOptions};

use super::check::{check, Check, Status};
use crate::util::shell::word_on_one_line as word;

/// Patterns that mean the device is failing (the rest warn).
const FAILING: &[&str] = &["cmd_timeout", "health_compromised", "pcie_power"];

/// The check over the `window` before `now_us` (microseconds since boot, the records'
/// clock), reading what the plugin's `options` say under `sysfs_root`.
pub(super) fn kernel_log_checks(
    sysfs_root: &Path,
    options: &serde_json::Value,
    window: Duration,
    now_us: u64,
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
    let since = now_us.saturating_sub(u64::try_from(window.as_micros()).unwrap_or(u64::MAX));
    let w = humantime::format_duration(window);
    let s = match scan(&path, &matcher, since) {
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
    if s.tally.counts.is_empty() {
        return vec![check(
            "kernel-log",
            "",
            Status::Pass,
            format!(
                "no RDMA/NIC driver message matching {} in the last {w} ({} records read from {})",
                s.patterns.join(", "),
                s.tally.records,
                path.display()
            ),
            None,
        )];
    }
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
                    "{pattern}{meaning}: {} message{} in the last {w}; last at {:.3} s after boot: {}",
                    hit.count,
                    if hit.count == 1 { "" } else { "s" },
                    hit.last_timestamp_us as f64 / 1e6,
                    hit.last_message
                ),
                Some(match known {
                    Some(p) => {
                        let o = rocewatch_kernel_log::matcher::origin(&hit.last_message);
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let c = kernel_log_checks(dir.path(), &opts, Duration::from_secs(60), 100_000_000);
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
        let c = kernel_log_checks(dir.path(), &opts, Duration::from_secs(3600), 100_000_000);
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
            100,
        );
        assert_eq!(c[0].status, Status::Pass, "{c:?}");
        assert!(c[0].evidence.contains("cmd_timeout, health_compromised"));
        assert!(c[0].evidence.contains("(1 records read"));
        let c = kernel_log_checks(
            dir.path(),
            &serde_json::json!({}),
            Duration::from_secs(60),
            100,
        );
        assert_eq!(c[0].status, Status::Skip);
        let c = kernel_log_checks(
            dir.path(),
            &serde_json::json!({"pattern": {}}),
            Duration::from_secs(60),
            100,
        );
        assert_eq!(c[0].status, Status::Fail);
        assert!(
            c[0].evidence.contains("unknown field `pattern`"),
            "{}",
            c[0].evidence
        );
    }
}
