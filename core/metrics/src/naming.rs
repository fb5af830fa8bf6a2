//! Names of catalog metrics in other systems, derived from the catalog so that they never
//! drift: Prometheus (following the OpenTelemetry → Prometheus translation rules, so that
//! VictoriaMetrics or an OpenTelemetry Collector receiving our OTLP produce the same names
//! as our own `/metrics`: `.` → `_`, the unit as a suffix (`By` → `bytes`, `bit/s` →
//! `bit_per_second`, `1` → `ratio` for gauges, annotations like `{packet}` dropped, so
//! `{transfer}/s` → `per_second`),
//! `_total` on counters).

use rocewatch_plugin_api::{AttrSet, MetricKind};

/// Replace every character Prometheus does not allow with `_` and collapse runs.
fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut last_us = false;
    for (i, c) in s.chars().enumerate() {
        let ok = c.is_ascii_alphanumeric() || c == '_' || c == ':';
        let c = if ok && !(i == 0 && c.is_ascii_digit()) {
            c
        } else {
            '_'
        };
        if c == '_' && last_us {
            continue;
        }
        last_us = c == '_';
        out.push(c);
    }
    out
}

/// The Prometheus unit word of a UCUM unit, if it has one (`By` → `bytes`).
/// Annotations (`{packet}`) have none; `1` is `ratio` for gauges only.
pub fn prometheus_unit(unit: &str, kind: MetricKind) -> Option<String> {
    let word = |u: &str| -> Option<&'static str> {
        Some(match u {
            "By" => "bytes",
            "KiBy" => "kibibytes",
            "MiBy" => "mebibytes",
            "s" => "seconds",
            "ms" => "milliseconds",
            "us" => "microseconds",
            "ns" => "nanoseconds",
            "Hz" => "hertz",
            "Cel" => "celsius",
            "%" => "percent",
            _ => return None,
        })
    };
    // A rate: each side kept unless it is empty or an annotation (`{transfer}/s` →
    // `per_second`), as the OpenTelemetry → Prometheus translator does.
    if let Some((num, den)) = unit.split_once('/') {
        let plain = |u: &str| !u.is_empty() && !u.contains(['{', '}']);
        let num = plain(num).then(|| word(num).map_or_else(|| sanitize(num), str::to_string));
        let den = plain(den).then(|| match den {
            "s" => "second".to_string(),
            "m" => "minute".to_string(),
            "h" => "hour".to_string(),
            other => sanitize(other),
        });
        return match (num, den) {
            (Some(n), Some(d)) => Some(format!("{n}_per_{d}")),
            (None, Some(d)) => Some(format!("per_{d}")),
            (n, None) => n,
        };
    }
    if unit.starts_with('{') || unit.is_empty() {
        return None;
    }
    if unit == "1" {
        return (kind == MetricKind::Gauge).then(|| "ratio".to_string());
    }
    Some(word(unit).map_or_else(|| sanitize(unit), str::to_string))
}

/// The Prometheus metric family name (without `_total`): `rdma.port.io` (By) →
/// `rdma_port_io_bytes`.
pub fn prometheus_family(name: &str, unit: &str, kind: MetricKind) -> String {
    let mut n = sanitize(name);
    if let Some(u) = prometheus_unit(unit, kind) {
        if !n.ends_with(&format!("_{u}")) {
            n.push('_');
            n.push_str(&u);
        }
    }
    n
}

/// The name of the sample line: counters get `_total`.
pub fn prometheus_sample_name(name: &str, unit: &str, kind: MetricKind) -> String {
    let f = prometheus_family(name, unit, kind);
    if kind == MetricKind::Counter {
        format!("{f}_total")
    } else {
        f
    }
}

/// A label name: `network.io.direction` → `network_io_direction`.
pub fn prometheus_label(key: &str) -> String {
    sanitize(key)
}

/// `{k="v",...}` written straight into `out` (label names sanitized, values escaped),
/// without intermediate strings: this runs for every series on every scrape.
pub fn write_prometheus_labels(out: &mut String, attrs: &AttrSet) {
    if attrs.is_empty() {
        return;
    }
    out.push('{');
    for (i, (k, v)) in attrs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // The common case (`rdma.device`) maps dots to underscores; anything else takes
        // the full sanitizer (which also collapses runs of underscores).
        let sep = |b: &u8| *b == b'_' || *b == b'.';
        if k.bytes().all(|b| b.is_ascii_alphanumeric() || sep(&b))
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && !k.as_bytes().windows(2).any(|w| sep(&w[0]) && sep(&w[1]))
        {
            out.extend(k.chars().map(|c| if c == '.' { '_' } else { c }));
        } else {
            out.push_str(&prometheus_label(k));
        }
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
}

/// The `{k="v",...}` label set of a series (rendered once when a series appears).
pub fn prometheus_labels(attrs: &AttrSet) -> String {
    let mut s = String::new();
    write_prometheus_labels(&mut s, attrs);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use MetricKind::*;

    #[test]
    fn names_follow_the_otel_prometheus_rules() {
        assert_eq!(
            prometheus_sample_name("rdma.port.io", "By", Counter),
            "rdma_port_io_bytes_total"
        );
        assert_eq!(
            prometheus_sample_name("rdma.port.packets", "{packet}", Counter),
            "rdma_port_packets_total"
        );
        assert_eq!(
            prometheus_sample_name("rdma.port.rate", "bit/s", Gauge),
            "rdma_port_rate_bit_per_second"
        );
        assert_eq!(
            prometheus_sample_name("rdma.netdev.mtu", "By", Gauge),
            "rdma_netdev_mtu_bytes"
        );
        assert_eq!(
            prometheus_sample_name("rdma.port.up", "1", Gauge),
            "rdma_port_up_ratio"
        );
        assert_eq!(
            prometheus_sample_name("rdma.port.hw_counter", "1", Counter),
            "rdma_port_hw_counter_total"
        );
        assert_eq!(
            prometheus_family("rocewatch.plugin.duration", "s", Histogram),
            "rocewatch_plugin_duration_seconds"
        );
        assert_eq!(
            prometheus_label("network.io.direction"),
            "network_io_direction"
        );
        assert_eq!(prometheus_label("9lives"), "_lives");
        assert_eq!(prometheus_family("a..b", "By", Gauge), "a_b_bytes");
    }

    /// A rate of an annotation (`{transfer}/s`): the translator drops the annotated main
    /// unit and keeps the per unit, as Prometheus's own OTLP receiver names it
    /// (`otlp_prometheus` checks the name it stores).
    #[test]
    fn an_annotated_rate_keeps_its_per_unit() {
        assert_eq!(
            prometheus_family("rdma.pcie.link.speed", "{transfer}/s", Gauge),
            "rdma_pcie_link_speed_per_second"
        );
        assert_eq!(
            prometheus_family("rdma.port.packet.rate", "{packet}/s", Gauge),
            "rdma_port_packet_rate_per_second"
        );
        assert_eq!(prometheus_unit("{transfer}", Gauge), None);
    }

    #[test]
    fn they_match_what_victoriametrics_produced() {
        // Seen in the OTLP end-to-end test with -opentelemetry.usePrometheusNaming.
        assert_eq!(
            prometheus_sample_name("rdma.port.cnp.sent", "{packet}", Counter),
            "rdma_port_cnp_sent_total"
        );
        assert_eq!(
            prometheus_sample_name("rdma.port.rate", "bit/s", Gauge),
            "rdma_port_rate_bit_per_second"
        );
        assert_eq!(
            prometheus_sample_name("rdma.port.up", "1", Gauge),
            "rdma_port_up_ratio"
        );
    }
}

/// The collectd plugin name of port metrics (`rdma-<device>-<port>/...`).
pub const COLLECTD_PLUGIN: &str = "rdma";
/// The collectd plugin name of the agent's self-metrics.
pub const COLLECTD_SELF_PLUGIN: &str = "rocewatch";

/// The collectd type of a metric: its name with `.` → `_` (`rdma_port_io`), defined in
/// the `types.db` that [`collectd_types_db`] renders. At most 63 characters.
pub fn collectd_type(name: &str) -> String {
    let mut t: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    t.truncate(63);
    t
}

/// The data-source type: counters are DERIVE with a minimum of 0 (a reset makes the
/// rate negative, which collectd then drops), gauges GAUGE.
pub fn collectd_ds(kind: MetricKind) -> &'static str {
    match kind {
        MetricKind::Counter => "DERIVE",
        _ => "GAUGE",
    }
}

/// `types.db` lines for every catalog metric and self-metric (histograms excluded: they
/// have no collectd equivalent and are not sent).
pub fn collectd_types_db() -> String {
    let mut out = String::from(
        "# rocewatch types for collectd. Generated from the metric catalog (core/metrics);\n\
         # do not edit. Load it next to collectd's own: TypesDB \"/usr/share/collectd/types.db\" \"/etc/rocewatch/types.db\"\n",
    );
    let mut seen = std::collections::BTreeSet::new();
    for e in crate::all_entries() {
        if e.kind == MetricKind::Histogram || !seen.insert(e.name) {
            continue;
        }
        let min = if e.kind == MetricKind::Counter {
            "0"
        } else {
            "U"
        };
        out.push_str(&format!(
            "{}\tvalue:{}:{min}:U\n",
            collectd_type(e.name),
            collectd_ds(e.kind)
        ));
    }
    out
}

#[cfg(test)]
mod collectd_tests {
    use super::*;

    #[test]
    fn types() {
        assert_eq!(collectd_type("rdma.port.io"), "rdma_port_io");
        assert_eq!(collectd_ds(MetricKind::Counter), "DERIVE");
        let db = collectd_types_db();
        assert!(db.contains("rdma_port_io\tvalue:DERIVE:0:U\n"), "{db}");
        assert!(db.contains("rdma_port_up\tvalue:GAUGE:U:U\n"), "{db}");
        assert!(!db.contains("rocewatch_plugin_duration"));
        assert_eq!(db.matches("rdma_port_io\t").count(), 1);
    }

    /// configs/collectd/types.db must be what the catalog renders
    /// (`SNAPSHOTS=overwrite cargo test -p rocewatch-metrics` regenerates it).
    #[test]
    fn committed_types_db_matches_catalog() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../configs/collectd/types.db");
        let want = collectd_types_db();
        if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &want).unwrap();
        }
        assert!(
            std::fs::read_to_string(&path).unwrap_or_default() == want,
            "configs/collectd/types.db differs from the catalog; run `SNAPSHOTS=overwrite cargo test -p rocewatch-metrics`"
        );
    }
}
