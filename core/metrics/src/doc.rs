//! Renders `docs/METRICS.md` from the catalog: a section per table of [`TABLES`].

use crate::names;
use std::fmt::Write;

use crate::catalog::{CatalogEntry, NOT_COUNTERS};
use crate::counter::{describe, overflow_of, WRAP_PACE_FACTOR};
use crate::naming::{collectd_ds, collectd_type, prometheus_sample_name};
use crate::tables::{Columns, Table, Then, TABLES};

fn attrs(e: &CatalogEntry) -> String {
    let mut s = String::from("`rdma.device`, `rdma.port`, `network.interface.name`");
    if e.name == names::PORT_HW_COUNTER {
        s.push_str(", `rdma.counter`");
    }
    for (k, v) in e.attributes {
        let _ = write!(s, ", `{k}={v}`");
    }
    s
}

/// How a catalogued counter ends, for its row: gauges have no top.
fn top(e: &CatalogEntry) -> String {
    if e.kind != rocewatch_plugin_api::MetricKind::Counter {
        return String::new();
    }
    match e.source.split_once('/') {
        Some(("hw_counters", "*")) => "64-bit, or as its driver says".into(),
        _ => describe(overflow_of(e.source)),
    }
}

/// Which counters saturate, roll over or are 64 bits wide, and where that comes from.
fn counter_widths(md: &mut String) {
    md.push_str("Every reader of counters (rates, rules, doctor, the bandwidth test, `top`, the per-QP sums) ");
    md.push_str(
        "decides how a counter moved in one place (`core/metrics/src/counter.rs`): a counter that ",
    );
    md.push_str("went back is a **reset** (`perfquery -R`, a driver reload, a VF reset) and yields no rate and ");
    md.push_str("no increase for that interval; a counter resting at the top of a counter that stops there is ");
    md.push_str("**saturated** (rate unknown, not 0; counted in `rocewatch.counter.saturated`); only a counter ");
    md.push_str("known to roll over counts the increase across its top, and only when that increase is within ");
    let _ = write!(
        md,
        "{WRAP_PACE_FACTOR}× of what its last rate predicts (else it is a reset).\n\n"
    );
    md.push_str("| counters | at the top | source |\n|---|---|---|\n");
    md.push_str("| `counters/` (IB PortCounters) | saturate at 2^width − 1: 4 bits (`local_link_integrity_errors`, `excessive_buffer_overrun_errors`), 8 (`link_downed`, `link_error_recovery`, `port_*_constraint_errors`), 16 (`symbol_error`, `port_rcv_errors`, `port_rcv_remote_physical_errors`, `port_rcv_switch_relay_errors`, `port_xmit_discards`, `VL15_dropped`), 32 (`port_xmit_data`/`port_rcv_data` in 4-octet words, `port_*_packets`, `port_xmit_wait`) | `drivers/infiniband/core/sysfs.c` `PORT_PMA_ATTR(name, counter, width, offset)`; IBTA Vol. 1 PortCounters: a counter stops at its maximum |\n");
    md.push_str("| `counters/unicast_*`, `counters/multicast_*`, `counters_ext/` | 64-bit | `sysfs.c` `PORT_PMA_ATTR_EXT` (PortCountersExtended) |\n");
    md.push_str("| mlx5 `hw_counters/` queue counters (`out_of_buffer`, `out_of_sequence`, `duplicate_request`, `local_ack_timeout_err`, `packet_seq_err`, `implied_nak_seq_err`, `rnr_nak_retry_err`, `rx_*_requests`, `*_cqe_*error`, `*_remote_*`, `resp_local_length_error`, `roce_adp_retrans*`, `roce_slow_restart*`), also per QP | wrap at 2^32 | `drivers/infiniband/hw/mlx5/counters.c` `mlx5_ib_query_q_counters`: each read as a `__be32` |\n");
    md.push_str("| mlx5 `hw_counters/` congestion counters (`rp_cnp_*`, `np_cnp_sent`, `np_ecn_marked_roce_packets`) and `rx_icrc_encapsulated` | 64-bit | `counters.c`: `mlx5_lag_query_cong_counters`, `mlx5_ib_query_ext_ppcnt_counters` read `__be64` |\n");
    md.push_str("| mlx5 ethtool `rx_out_of_buffer`, `rx_if_down_packets` | wrap at 2^32 | `drivers/net/ethernet/mellanox/mlx5/core/en_stats.h` `struct mlx5e_qcounter_stats` (u32) |\n");
    md.push_str("| every other ethtool statistic, bnxt_re, irdma, efa and rxe `hw_counters/`, RDMA netlink statistics | 64-bit | the drivers accumulate into u64 (ethtool ABI: `__u64 data[]`) |\n");
}

/// A table of name, unit, kind, Prometheus name, (with `from`: the source,) description.
fn table(md: &mut String, entries: &[CatalogEntry], from: bool) {
    let (head, rule) = if from {
        (
            "| name | unit | kind | Prometheus | from | description |",
            "|---|---|---|---|---|---|",
        )
    } else {
        (
            "| name | unit | kind | Prometheus | description |",
            "|---|---|---|---|---|",
        )
    };
    let _ = writeln!(md, "{head}\n{rule}");
    for e in entries {
        let from = if from {
            format!(" {} |", e.source)
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {} | `{}` |{from} {} |",
            e.name,
            e.unit,
            e.kind.as_str(),
            prometheus_sample_name(e.name, e.unit, e.kind),
            e.description
        );
    }
}

/// docs/METRICS.md: the introduction, a section per catalog table ([`TABLES`], in their
/// order), the names in Prometheus and what every exporter carries.
pub fn render_markdown() -> String {
    let mut md = String::new();
    intro(&mut md);
    for (i, t) in TABLES.iter().enumerate() {
        section(&mut md, t, i == 0);
    }
    prometheus_names(&mut md);
    every_exporter(&mut md);
    md
}

/// One table's section: its title, what it says first, its rows, what follows them.
fn section(md: &mut String, t: &Table, first: bool) {
    let _ = write!(md, "{}## {}\n\n", if first { "" } else { "\n" }, t.title);
    if !t.about.is_empty() {
        let _ = write!(md, "{}\n\n", t.about);
    }
    if !t.entries.is_empty() {
        match t.columns {
            Columns::Plain => table(md, t.entries, false),
            Columns::Source => table(md, t.entries, true),
            Columns::Port => port_metrics(md, t.entries),
            Columns::DriverStatistics => driver_statistics(md, t.entries),
        }
    }
    match t.then {
        Then::Nothing => {}
        Then::CounterWidths => counter_widths(md),
        Then::KernelLogPatterns => kernel_log_patterns(md),
        Then::NotCounters => not_counters(md),
    }
}

fn intro(md: &mut String) {
    md.push_str("# rocewatch metrics\n\n");
    md.push_str("<!-- Generated from core/metrics/src/catalog.rs by `rocewatch metrics-doc`. Do not edit by hand. -->\n\n");
    md.push_str("Every sample carries `rdma.device` and `rdma.port`, and `network.interface.name` when the port has a netdev. ");
    md.push_str("Counters are cumulative and monotonic; a counter seen going backwards is a reset and starts a new series, ");
    md.push_str(
        "with no rate and no increase for that interval (see [Counter widths](#counter-widths)). ",
    );
    md.push_str("A value the kernel does not expose (`N/A (no PMA)`, EINVAL, EACCES, EOPNOTSUPP, missing file) is absent, never zero.\n\n");
}

/// The port metrics' rows: with their collectd type, source and scale, attributes, the
/// devices they are seen on and how their counters end.
fn port_metrics(md: &mut String, entries: &[CatalogEntry]) {
    md.push_str(
        "| name | unit | kind | Prometheus | source | attributes | seen on | at its top | description |\n",
    );
    md.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for e in entries {
        let scale = if e.scale != 1 {
            format!(" (×{})", e.scale)
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {} | `{}` | `{}` ({}) | `{}`{} | {} | {} | {} | {} |",
            e.name,
            e.unit,
            e.kind.as_str(),
            prometheus_sample_name(e.name, e.unit, e.kind),
            collectd_type(e.name),
            collectd_ds(e.kind),
            e.source,
            scale,
            attrs(e),
            e.seen_on,
            top(e),
            e.description
        );
    }
}

/// The ethtool metrics' rows: with the driver statistics they come from per vendor.
fn driver_statistics(md: &mut String, entries: &[CatalogEntry]) {
    md.push_str(
        "| name | unit | kind | Prometheus | driver statistics | seen on | description |\n",
    );
    md.push_str("|---|---|---|---|---|---|---|\n");
    for e in entries {
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {} | `{}` | {} | {} | {} |",
            e.name,
            e.unit,
            e.kind.as_str(),
            prometheus_sample_name(e.name, e.unit, e.kind),
            e.source,
            e.seen_on,
            e.description
        );
    }
}

/// The kernel log's patterns, after its table.
fn kernel_log_patterns(md: &mut String) {
    md.push_str(
        "\n| pattern (`rdma.kernel.pattern`) | regular expression | meaning |\n|---|---|---|\n",
    );
    for p in crate::kernel_log::KERNEL_LOG_PATTERNS {
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {} |",
            p.name,
            p.regex.replace('|', "\\|"),
            p.meaning
        );
    }
}

fn not_counters(md: &mut String) {
    for f in NOT_COUNTERS {
        let _ = writeln!(
            md,
            "- `{f}`: a setting, not a counter; not exported as a counter."
        );
    }
}

fn prometheus_names(md: &mut String) {
    md.push_str("\n## Names in Prometheus\n\n");
    md.push_str("Generated by the OpenTelemetry → Prometheus translation rules (the same names VictoriaMetrics with ");
    md.push_str("`-opentelemetry.usePrometheusNaming` produces from our OTLP): `.` becomes `_`; the unit is appended ");
    md.push_str("(`By` → `_bytes`, `s` → `_seconds`, `bit/s` → `_bit_per_second`, `1` → `_ratio` for gauges; ");
    md.push_str("annotations such as `{packet}` add nothing); counters end in `_total`. Attribute keys become label ");
    md.push_str("names the same way (`rdma.device` → `rdma_device`, `network.io.direction` → `network_io_direction`). ");
    md.push_str(
        "The histogram `rocewatch.plugin.duration` is exposed as a summary (`_sum`, `_count`).\n",
    );
}

fn every_exporter(md: &mut String) {
    md.push_str("\n## Every exporter, the same series\n\n");
    md.push_str("Prometheus, OTLP and collectd (the network protocol and the Exec plugin's `PUTVAL` lines) ");
    md.push_str(
        "all read the agent's one store, so each carries every series above: collected, derived, ",
    );
    md.push_str(
        "probe and QoS. In collectd a metric's type is the name with `.` as `_` (`rdma_port_io`), ",
    );
    md.push_str("declared in `configs/collectd/types.db` (`rocewatch collectd-types`); the plugin instance is ");
    md.push_str(
        "`rdma-DEVICE-PORT` for port metrics, `rocewatch-WHO` for self-metrics. Histograms aside: ",
    );
    md.push_str(
        "collectd has no type for a distribution, so `rdma.probe.rtt` is not sent there (its ",
    );
    md.push_str("`rdma.probe.rtt.last` gauge and the probe counters are). `rocewatch collect --once` and the ");
    md.push_str("stdout exporter print collections as they happen, without the derived, probe and QoS series.\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/METRICS.md must be what the catalog renders. Regenerate with
    /// `SNAPSHOTS=overwrite cargo test -p rocewatch-metrics`.
    #[test]
    fn committed_metrics_doc_matches_catalog() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/METRICS.md");
        let want = render_markdown();
        if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/METRICS.md differs from the catalog; run `SNAPSHOTS=overwrite cargo test -p rocewatch-metrics`"
        );
    }
}
