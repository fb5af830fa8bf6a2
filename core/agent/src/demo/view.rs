//! The live view: per-port rates read from the store, the rule states and the audit log's
//! last decisions, rendered as a table.

use rocewatch_metrics::names;
use std::fmt::Write as _;
use std::path::Path;

use rocewatch_runtime::store::Store;

/// One line of the live view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortRates {
    pub device: String,
    pub port: String,
    pub netdev: String,
    pub up: bool,
    pub tx_gbps: Option<f64>,
    pub rx_gbps: Option<f64>,
    pub errors_per_s: Option<f64>,
    pub out_of_buffer_per_s: Option<f64>,
    pub cnp_per_s: Option<f64>,
    /// The port's priorities that are neither idle nor flowing: `3:storm`.
    pub congestion: Vec<String>,
}

pub(super) fn sum_rates(
    store: &Store,
    names: &[&str],
    dev: &str,
    port: &str,
    extra: Option<(&str, &str)>,
) -> Option<f64> {
    let mut any = false;
    let mut total = 0.0;
    for n in names {
        for s in store.by_name(n) {
            let a = &s.sample.attributes;
            if a.get("rdma.device") != Some(dev) || a.get("rdma.port") != Some(port) {
                continue;
            }
            if let Some((k, v)) = extra {
                if a.get(k) != Some(v) {
                    continue;
                }
            }
            if let Some(r) = s.rate() {
                any = true;
                total += r;
            }
        }
    }
    any.then_some(total)
}

/// Per-port rates from the store, for the live view.
pub fn port_rates(store: &Store) -> Vec<PortRates> {
    let mut out = Vec::new();
    for s in store.by_name(names::PORT_UP) {
        let a = &s.sample.attributes;
        let dev = a.get("rdma.device").map(str::to_string).unwrap_or_default();
        let port = a.get("rdma.port").map(str::to_string).unwrap_or_default();
        let gbps = |dir| {
            sum_rates(
                store,
                &[names::PORT_IO],
                &dev,
                &port,
                Some(("network.io.direction", dir)),
            )
            .map(|b| b * 8.0 / 1e9)
        };
        out.push(PortRates {
            netdev: a
                .get("network.interface.name")
                .map(str::to_string)
                .unwrap_or_else(|| "-".into()),
            up: s.sample.value.as_f64() == 1.0,
            tx_gbps: gbps("transmit"),
            rx_gbps: gbps("receive"),
            errors_per_s: sum_rates(
                store,
                &[names::PORT_SYMBOL_ERRORS, names::PORT_RECEIVE_ERRORS],
                &dev,
                &port,
                None,
            ),
            out_of_buffer_per_s: sum_rates(store, &[names::PORT_OUT_OF_BUFFER], &dev, &port, None),
            cnp_per_s: sum_rates(store, &[names::PORT_CNP_SENT], &dev, &port, None),
            congestion: store
                .by_name(names::PRIORITY_CONGESTION)
                .iter()
                .filter_map(|c| {
                    let a = &c.sample.attributes;
                    let state = a.get(rocewatch_metrics::ATTR_CONGESTION_STATE)?;
                    (a.get("rdma.device") == Some(dev.as_str())
                        && a.get("rdma.port") == Some(port.as_str())
                        && !matches!(state, "idle" | "flowing"))
                    .then(|| format!("{}:{state}", a.get("rdma.priority").unwrap_or("?")))
                })
                .collect(),
            device: dev,
            port,
        });
    }
    out
}

pub(super) fn cell(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "…".to_string(), |v| format!("{v:.prec$}"))
}

/// The live view's text.
pub fn render(rates: &[PortRates], header: &str, footer: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{header}");
    let _ = writeln!(
        s,
        "{:<8} {:>4} {:<10} {:<5} {:>9} {:>9} {:>9} {:>10} {:>9}  CONGESTION",
        "DEVICE", "PORT", "NETDEV", "LINK", "TX Gb/s", "RX Gb/s", "ERR/s", "OOB/s", "CNP/s"
    );
    for r in rates {
        let alert =
            r.errors_per_s.unwrap_or(0.0) > 0.0 || r.out_of_buffer_per_s.unwrap_or(0.0) > 0.0;
        let _ = writeln!(
            s,
            "{:<8} {:>4} {:<10} {:<5} {:>9} {:>9} {:>9} {:>10} {:>9}  {}{}",
            r.device,
            r.port,
            r.netdev,
            if r.up { "up" } else { "DOWN" },
            cell(r.tx_gbps, 2),
            cell(r.rx_gbps, 2),
            cell(r.errors_per_s, 1),
            cell(r.out_of_buffer_per_s, 1),
            cell(r.cnp_per_s, 1),
            if r.congestion.is_empty() {
                "-".to_string()
            } else {
                r.congestion.join(" ")
            },
            if alert { "  <-- errors" } else { "" }
        );
    }
    let _ = writeln!(s, "{footer}");
    s
}

/// The live view's lines about rules (those not inactive) and the audit log's last
/// decisions.
pub fn rules_footer(status: &[rocewatch_runtime::rules::RuleStatus], audit: &Path) -> String {
    let mut out = String::from("\nrules:");
    let active: Vec<_> = status
        .iter()
        .filter(|s| s.phase != rocewatch_runtime::rules::Phase::Inactive)
        .collect();
    if active.is_empty() {
        out.push_str(" all inactive");
    }
    for s in active {
        let labels: Vec<String> = [
            "rdma.device",
            "rdma.port",
            "rdma.priority",
            "network.io.direction",
        ]
        .iter()
        .filter_map(|k| s.labels.get(*k).map(|v| format!("{k}={v}")))
        .collect();
        let _ = write!(
            out,
            "\n  {:<20} {:<8} {:>8} for {:>3.0}s  {}",
            s.rule,
            format!("{:?}", s.phase).to_uppercase(),
            s.value
                .map(|v| format!("{v:.3}"))
                .unwrap_or_else(|| "-".into()),
            s.for_seconds,
            labels.join(" ")
        );
    }
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    let last: Vec<&str> = text.lines().rev().take(3).collect();
    let _ = write!(
        out,
        "\naudit log {} ({} records):",
        audit.display(),
        text.lines().count()
    );
    for l in last.iter().rev() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
        let _ = write!(
            out,
            "\n  {} {:<10} {} {}",
            v["time"].as_str().unwrap_or("-"),
            v["decision"].as_str().unwrap_or("-"),
            v["rule"].as_str().unwrap_or("-"),
            v["detail"].as_str().unwrap_or("")
        );
    }
    out
}
