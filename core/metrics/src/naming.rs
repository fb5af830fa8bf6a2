//! Names of catalog metrics in other systems, derived from the catalog so that they never
//! drift: Prometheus (following the OpenTelemetry → Prometheus translation rules, so that
//! VictoriaMetrics or an OpenTelemetry Collector receiving our OTLP produce the same names
//! as our own `/metrics`: `.` → `_`, the unit as a suffix (`By` → `bytes`, `bit/s` →
//! `bit_per_second`, `1` → `ratio` for gauges, annotations like `{packet}` dropped),
//! `_total` on counters).

use rocewatch_plugin_api::MetricKind;

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
    if unit.starts_with('{') || unit.is_empty() {
        return None;
    }
    if unit == "1" {
        return (kind == MetricKind::Gauge).then(|| "ratio".to_string());
    }
    if let Some((num, den)) = unit.split_once('/') {
        let per = match den {
            "s" => "second",
            "m" => "minute",
            "h" => "hour",
            other => {
                return Some(sanitize(&format!(
                    "{}_per_{other}",
                    word(num).unwrap_or(num)
                )))
            }
        };
        return Some(format!("{}_per_{per}", word(num).unwrap_or(num)));
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
