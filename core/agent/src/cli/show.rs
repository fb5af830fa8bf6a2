//! Renderings for the command line.

use std::fmt::Write;

use rocewatch_plugin_api::{Inventory, Sample};

use rocewatch_runtime::host::registry::Status;

/// `rocewatch discover --json`.
pub fn inventory_json(inv: &Inventory) -> serde_json::Value {
    serde_json::to_value(inv).unwrap_or_default()
}

/// `rocewatch discover`: `ibdev2netdev` lines, then a port table and the RoCE GIDs.
pub fn inventory_text(inv: &Inventory) -> String {
    let mut s = String::new();
    if inv.devices.is_empty() {
        s.push_str("no RDMA devices found\n");
        return s;
    }
    for d in &inv.devices {
        for p in &d.ports {
            match (&p.netdev, p.netdev_operstate.as_deref()) {
                (Some(nd), state) => {
                    let up = match state {
                        Some("up") => "Up",
                        Some("down") => "Down",
                        Some(other) => other,
                        None => "unknown",
                    };
                    let _ = writeln!(s, "{} port {} ==> {} ({})", d.name, p.port, nd, up);
                }
                (None, _) => {
                    let _ = writeln!(s, "{} port {} ==> (no netdev)", d.name, p.port);
                }
            }
        }
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "{:<12} {:>4}  {:<8} {:<10} {:<11} {:<22} {:<14} {:>5}  {:<12} NODE_GUID",
        "DEVICE", "PORT", "STATE", "PHYS", "LINK", "RATE", "NETDEV", "MTU", "FW"
    );
    for d in &inv.devices {
        for p in &d.ports {
            let _ = writeln!(
                s,
                "{:<12} {:>4}  {:<8} {:<10} {:<11} {:<22} {:<14} {:>5}  {:<12} {}",
                d.name,
                p.port,
                p.state.as_deref().unwrap_or("-"),
                p.phys_state.as_deref().unwrap_or("-"),
                p.link_layer.as_deref().unwrap_or("-"),
                p.rate.as_deref().unwrap_or("-"),
                p.netdev.as_deref().unwrap_or("-"),
                p.netdev_mtu.map_or("-".to_string(), |m| m.to_string()),
                d.fw_ver.as_deref().unwrap_or("-"),
                d.node_guid.as_deref().unwrap_or("-"),
            );
        }
    }
    let gids: Vec<_> = inv
        .devices
        .iter()
        .flat_map(|d| {
            d.ports
                .iter()
                .flat_map(move |p| p.gids.iter().map(move |g| (d, p, g)))
        })
        .collect();
    if !gids.is_empty() {
        s.push('\n');
        let _ = writeln!(
            s,
            "{:<12} {:>4} {:>5}  {:<40} {:<11} NETDEV",
            "DEVICE", "PORT", "INDEX", "GID", "TYPE"
        );
        for (d, p, g) in gids {
            let _ = writeln!(
                s,
                "{:<12} {:>4} {:>5}  {:<40} {:<11} {}",
                d.name,
                p.port,
                g.index,
                g.gid,
                g.gid_type.as_deref().unwrap_or("-"),
                g.netdev.as_deref().unwrap_or("-")
            );
        }
    }
    s
}

/// `rocewatch collect --once --format text`.
pub fn samples_text(samples: &[Sample]) -> String {
    let mut s = String::new();
    for x in samples {
        let attrs: Vec<String> = x
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            s,
            "{} {{{}}} {} {}  ({})",
            x.name,
            attrs.join(","),
            x.value,
            x.unit,
            x.source
        );
    }
    s
}

/// `rocewatch plugins`.
pub fn plugins_text(statuses: &[Status]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<18} {:<14} {:<6} {:<12} {:<40} LAST ERROR",
        "NAME", "KIND", "ABI", "STATE", "ORIGIN"
    );
    for p in statuses {
        let _ = writeln!(
            s,
            "{:<18} {:<14} {:<6} {:<12} {:<40} {}",
            p.name,
            p.kind.map_or("-".to_string(), |k| k.to_string()),
            p.abi,
            format!("{:?}", p.state).to_lowercase(),
            p.origin.to_string(),
            p.last_error.as_deref().unwrap_or("-")
        );
    }
    s
}

/// The `rocewatch rules` table, from the `/rules` rows: columns as wide as their widest
/// cell, values and thresholds as operators read them (`40 Gb/s`, not `40000000000.0000`;
/// `--json` keeps the raw numbers).
pub fn rules_text(rows: &[serde_json::Value]) -> String {
    let header = ["RULE", "PHASE", "VALUE", "FOR", "LABELS", "CONDITION"];
    let mut table: Vec<[String; 6]> = vec![header.map(String::from)];
    for r in rows {
        let labels: Vec<String> = r["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let condition = r["condition"].as_str().unwrap_or_default();
        let unit = value_unit(r["metric"].as_str().unwrap_or_default(), condition);
        let value = r["value"]
            .as_f64()
            .map_or_else(|| "-".into(), |v| human(v, &unit));
        let secs = r["for_seconds"].as_f64().unwrap_or(0.0);
        table.push([
            r["rule"].as_str().unwrap_or_default().to_string(),
            r["phase"].as_str().unwrap_or_default().to_string(),
            value,
            format!("{secs:.0}s"),
            if labels.is_empty() {
                "-".into()
            } else {
                labels.join(",")
            },
            human_numbers(condition, &unit),
        ]);
    }
    let width = |c: usize| {
        table
            .iter()
            .map(|r| r[c].chars().count())
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..5).map(width).collect();
    let mut out = String::new();
    for r in &table {
        let _ = writeln!(
            out,
            "{:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}  {:<w4$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        );
    }
    out
}

/// The unit a rule's value is in, for display: the metric's catalogued unit (UCUM), per
/// second for a `rate(...)`; empty for counts and ratios (`{packet}`, `1`).
fn value_unit(metric: &str, condition: &str) -> String {
    let ucum = rocewatch_metrics::all_entries()
        .find(|e| e.name == metric)
        .map_or("", |e| e.unit);
    let unit = match ucum {
        "bit/s" => "b/s",
        "By/s" => "B/s",
        "By" => "B",
        "s" => "s",
        _ => "",
    };
    if condition.starts_with("rate(") && !unit.is_empty() && !unit.ends_with("/s") {
        format!("{unit}/s")
    } else {
        unit.to_string()
    }
}

/// A number as operators read it: `40 Gb/s`, `1.5 MB`, `0.25`, `2500`, `12M`. With a
/// unit, scaled by 1000 from 1000 up (`G` for 10^9); without one, from a million up,
/// where counting digits starts to be work. At most three decimals, trailing zeros
/// dropped; integral values keep no decimal point.
pub fn human(v: f64, unit: &str) -> String {
    const PREFIXES: [&str; 6] = ["", "k", "M", "G", "T", "P"];
    if !v.is_finite() {
        return format!("{v}");
    }
    let from = if unit.is_empty() { 1e6 } else { 1e3 };
    let (mut scaled, mut i) = (v, 0);
    if v.abs() >= from {
        while scaled.abs() >= 1000.0 && i + 1 < PREFIXES.len() {
            scaled /= 1000.0;
            i += 1;
        }
    }
    let mut num = format!("{scaled:.3}");
    if num.contains('.') {
        num = num.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if num == "-0" {
        num = "0".into();
    }
    match (unit.is_empty(), PREFIXES[i]) {
        (true, p) => format!("{num}{p}"),
        (false, p) => format!("{num} {p}{unit}"),
    }
}

/// A condition with its numbers as operators read them (`rdma.port.rate < 100 Gb/s for
/// 1m`); the rest as written.
fn human_numbers(condition: &str, unit: &str) -> String {
    condition
        .split(' ')
        .map(|t| {
            let (open, rest) = t.split_at(t.len() - t.trim_start_matches('(').len());
            let body = rest.trim_end_matches(')');
            let close = &rest[body.len()..];
            match body.parse::<f64>() {
                Ok(n)
                    if body
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-') =>
                {
                    format!("{open}{}{close}", human(n, unit))
                }
                _ => t.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_operators_read_them() {
        assert_eq!(human(40_000_000_000.0, "b/s"), "40 Gb/s");
        assert_eq!(human(100_000_000_000.0, "b/s"), "100 Gb/s");
        assert_eq!(human(1_500_000.0, "B"), "1.5 MB");
        assert_eq!(human(0.25, ""), "0.25");
        assert_eq!(human(1.0, ""), "1");
        assert_eq!(human(2500.0, ""), "2500");
        assert_eq!(human(12_345_678.0, ""), "12.346M");
        assert_eq!(human(-0.0001, ""), "0");
        assert_eq!(human(999.9999, "b/s"), "1000 b/s");
    }

    #[test]
    fn a_condition_keeps_its_words_and_scales_its_numbers() {
        assert_eq!(
            human_numbers("rdma.port.rate < 100000000000 for 1m", "b/s"),
            "rdma.port.rate < 100 Gb/s for 1m"
        );
        assert_eq!(
            human_numbers("rate(x[1m]) > 5000 (clears at > 2500) for 1m", ""),
            "rate(x[1m]) > 5000 (clears at > 2500) for 1m"
        );
        assert_eq!(
            human_numbers("x > 20000000 (clears at > 10000000)", ""),
            "x > 20M (clears at > 10M)"
        );
    }

    #[test]
    fn every_column_is_as_wide_as_its_widest_cell() {
        let rows = [
            serde_json::json!({"rule": "retransmission-timeout-growth", "phase": "inactive",
                "metric": "rdma.port.retransmissions.timeouts", "labels": {},
                "condition": "increase(x[5m]) > 10", "for_seconds": 0.0}),
            serde_json::json!({"rule": "link-speed-below-nominal", "phase": "pending",
                "metric": "rdma.port.rate", "value": 40_000_000_000.0_f64,
                "labels": {"rdma.device": "mlx5_0"},
                "condition": "rdma.port.rate < 100000000000 for 1m", "for_seconds": 12.0}),
        ];
        let text = rules_text(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // Each column starts where the header's does.
        for name in ["PHASE", "LABELS", "CONDITION"] {
            let at = lines[0].find(name).unwrap();
            for l in &lines[1..] {
                assert_eq!(&l[at - 2..at], "  ", "{name} in {l:?}\n{text}");
                assert_ne!(&l[at..=at], " ", "{name} in {l:?}\n{text}");
            }
        }
        assert!(lines[2].contains("pending"), "{text}");
        assert!(lines[2].contains("  40 Gb/s  "), "{text}");
        assert!(
            lines[2].ends_with("rdma.port.rate < 100 Gb/s for 1m"),
            "{text}"
        );
        assert!(!text.contains("40000000000"), "{text}");
    }
}
