//! The report: a check's status, evidence and fix; the options of a run; the text form.

use std::time::Duration;

use serde::Serialize;

use crate::shell::one_line;

/// The RoCE v2 UDP port, named once where RoCE v2 packets are decoded.
pub use rocewatch_pcap::ROCE_PORT;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    Skip,
    Info,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
            Status::Info => "INFO",
        }
    }
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `ports`, `gid`, `firewall`...
    pub check: String,
    /// What it is about (`mlx5_0/1`, `eth0`), empty for the host.
    pub subject: String,
    pub status: Status,
    /// What was read.
    pub evidence: String,
    /// What to run or change (absent on a pass).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

pub(super) fn check(
    name: &str,
    subject: &str,
    status: Status,
    evidence: impl Into<String>,
    fix: Option<String>,
) -> Check {
    Check {
        check: name.into(),
        subject: subject.into(),
        status,
        evidence: evidence.into(),
        fix,
    }
}

/// What `doctor` is told.
#[derive(Debug, Clone)]
pub struct Options {
    /// A peer to probe and to check the path MTU to.
    pub peer: Option<String>,
    /// Also a short bandwidth test to the peer.
    pub bandwidth: bool,
    /// The priority PFC and ECN are expected on.
    pub priority: u8,
    /// The peer's RDMA CM listener port (`probe --serve --cm --cm-port`).
    pub cm_port: u16,
    /// The cable length, metres, for the PFC headroom a lossless buffer needs.
    pub cable_length: Option<u32>,
    /// How long the counters are watched.
    pub window: Duration,
    /// How far back the kernel log's driver messages are read.
    pub log_window: Duration,
    /// An application's environment (`--env`): its NCCL_*/UCX_*/OMPI_MCA_* settings are
    /// checked against what this host needs.
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// What the ports are meant to run (`Ethernet`, `InfiniBand`), when told.
    pub link_layer: Option<&'static str>,
    /// The proc tree that goes with the sysfs root (`/proc` on a host).
    pub procfs_root: std::path::PathBuf,
    /// The host's file system that goes with the sysfs root (`/`): `dev/infiniband`,
    /// `etc/libibverbs.d`, the verbs libraries.
    pub rootfs: std::path::PathBuf,
    /// The workload the userspace checks are about: its user (device permissions), its
    /// process or systemd unit (locked-memory limit), what it registers.
    pub user: Option<String>,
    pub pid: Option<u32>,
    pub unit: Option<String>,
    pub memlock_need: Option<u64>,
    /// The desired RoCE/PFC/ECN state (`[qos]`): the traffic class applications should use.
    pub qos: rocewatch_qos::QosConfig,
    /// The kernel-log collector's options (`[plugins.builtin.kernel-log.options]`): where
    /// the log is and which patterns count.
    pub kernel_log: serde_json::Value,
    /// `[health] min_mtu`: the lowest netdev MTU the RoCE netdevs may have, so that the
    /// MTU verdict is the one `health` gives on the same configuration.
    pub min_mtu: Option<u32>,
    /// `[doctor] pre_fec_ber_warn`: the pre-FEC bit error rate the `link` check warns
    /// above, whatever the port's FEC (else the figure of its FEC and lane rate).
    pub pre_fec_ber_warn: Option<f64>,
    /// `[health] max_flaps`: the flaps in the window at which the `link` check fails
    /// (one flap, fewer: a warning), `health`'s figure on the same configuration.
    pub max_flaps: u64,
    /// This host's rows of the fleet topology (`[fleet] topology`), when one is
    /// configured: the rails are told by them (`rocewatch_sysfs::railmap`), and a row no
    /// port carries is a NIC missing.
    pub rail_rows: Option<Vec<rocewatch_sysfs::railmap::RailRow>>,
}

/// Checks whose evidence is a table, one row a line (the GPU×NIC matrix, whose names are
/// escaped where they are put in): the only evidence shown on more than one line.
const TABLES: &[&str] = &["gpu-topology"];

/// The checks as text: one line each, the fix indented below. Names in the subject,
/// evidence and fix may hold control characters: the evidence is escaped to one line
/// (`one_line`) as a whole, a table's row by row, and the fix line by line, so no name
/// can end a line or start one of its own.
pub fn text(checks: &[Check]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for c in checks {
        let subject = if c.subject.is_empty() {
            String::new()
        } else {
            format!(" {}", one_line(&c.subject))
        };
        let evidence = if TABLES.contains(&c.check.as_str()) {
            c.evidence.lines().map(one_line).collect::<Vec<_>>()
        } else {
            vec![one_line(&c.evidence)]
        };
        let mut lines = evidence.iter();
        let _ = writeln!(
            s,
            "{}  {}{}: {}",
            c.status.word(),
            c.check,
            subject,
            lines.next().map_or("", String::as_str)
        );
        // A table (the GPU×NIC matrix) goes below, indented.
        for l in lines {
            let _ = writeln!(s, "      {l}");
        }
        if let Some(f) = &c.fix {
            for l in f.lines() {
                let _ = writeln!(s, "      fix: {}", one_line(l));
            }
        }
    }
    let n = |st: Status| checks.iter().filter(|c| c.status == st).count();
    let _ = writeln!(
        s,
        "{} passed, {} warnings, {} failed, {} skipped",
        n(Status::Pass),
        n(Status::Warn),
        n(Status::Fail),
        n(Status::Skip)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_cannot_start_a_line_of_its_own() {
        let c = check(
            "netdev",
            "mlx5_0/1\nPASS  firewall",
            Status::Fail,
            "eth0\rPASS (operstate down)",
            Some("ip link set 'eth0\nPASS' up".into()),
        );
        let t = text(&[c]);
        assert_eq!(
            t,
            "FAIL  netdev mlx5_0/1\\nPASS  firewall: eth0\\rPASS (operstate down)\n      fix: ip link set 'eth0\n      fix: PASS' up\n0 passed, 0 warnings, 1 failed, 0 skipped\n"
        );
    }

    /// Item 2 of issue 27: evidence was split into lines before it was escaped, so a
    /// device renamed `mlx5_1\n# $(touch Q) `touch R`` started an output line of its own.
    #[test]
    fn a_name_in_the_evidence_cannot_start_a_line() {
        let name = "mlx5_1\n# $(touch Q) `touch R`";
        let c = check(
            "netdev",
            &format!("{name}/1"),
            Status::Pass,
            format!("{name} (operstate up, MTU 1500)"),
            None,
        );
        let t = text(&[c]);
        assert_eq!(t.lines().count(), 2, "{t}");
        assert!(t.lines().all(|l| !l.starts_with('#')), "{t}");
        assert!(
            t.starts_with("PASS  netdev mlx5_1\\n# $(touch Q) `touch R`/1: mlx5_1\\n# $(touch Q)"),
            "{t}"
        );
    }

    /// A table (the GPU×NIC matrix) keeps its rows; a name inside it is escaped.
    #[test]
    fn a_table_keeps_its_rows_but_not_a_names_line_break() {
        let c = check(
            "gpu-topology",
            "",
            Status::Info,
            "GPU×NIC:\n      NIC0\nGPU0  PIX\nNIC legend: NIC0=mlx5_0",
            None,
        );
        assert_eq!(
            text(&[c]),
            "INFO  gpu-topology: GPU×NIC:\n            NIC0\n      GPU0  PIX\n      NIC legend: NIC0=mlx5_0\n0 passed, 0 warnings, 0 failed, 0 skipped\n"
        );
    }
}
