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

/// The `rocewatch rules` table, from the `/rules` rows.
pub fn rules_text(rows: &[serde_json::Value]) -> String {
    let mut out = format!(
        "{:<28} {:<9} {:>14} {:>8}  {:<44} {}\n",
        "RULE", "PHASE", "VALUE", "FOR", "LABELS", "CONDITION"
    );
    for r in rows {
        let labels: Vec<String> = r["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let value = r["value"]
            .as_f64()
            .map(|v| format!("{v:.4}"))
            .unwrap_or_else(|| "-".into());
        let secs = r["for_seconds"].as_f64().unwrap_or(0.0);
        out.push_str(&format!(
            "{:<28} {:<9} {:>14} {:>7.0}s  {:<44} {}\n",
            r["rule"].as_str().unwrap_or_default(),
            r["phase"].as_str().unwrap_or_default(),
            value,
            secs,
            labels.join(","),
            r["condition"].as_str().unwrap_or_default()
        ));
    }
    out
}
