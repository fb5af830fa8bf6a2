//! `rocewatch probe PEER` and `rocewatch probe --serve`, and where the verbs plugin is.

use std::time::Duration;

use anyhow::{bail, Result};

use super::args::{ProbeArgs, ProbeCmdArgs};
use crate::app::App;
use crate::config::Config;

pub async fn run(a: ProbeCmdArgs) -> Result<i32> {
    run_probe(a.args, a.source.load()?).await
}

async fn run_probe(a: ProbeArgs, mut cfg: Config) -> Result<i32> {
    use rocewatch_plugin_api::{PluginKind, ProbeOutcome, ProbeTarget};
    let path = rocewatch_probes::plugin_path()?;
    // Only the probe plugin: no collection here.
    for name in crate::builtins::builtin_names() {
        cfg.plugins.builtin.insert(
            name.to_string(),
            rocewatch_runtime::host::settings::PluginSettings {
                enabled: false,
                ..Default::default()
            },
        );
    }
    let mut plugin = rocewatch_probes::plugin_config(
        path.clone(),
        a.timeout,
        &a.device,
        a.tcp_port,
        a.serve,
        a.busy_poll,
        // A one-off run tries to connect for every probe.
        Duration::ZERO,
    );
    plugin.options["serve_bandwidth"] = (a.serve && !a.no_bandwidth).into();
    cfg.plugins.external = vec![plugin];
    let agent = App::start(cfg, Some(&[PluginKind::Probe])).await;
    let Some(entry) = agent.registry.of_kind(PluginKind::Probe).find(|e| {
        e.instance.is_some()
            && e.status().state == rocewatch_runtime::host::registry::State::Started
    }) else {
        let why = agent
            .registry
            .statuses()
            .into_iter()
            .filter_map(|s| s.last_error)
            .collect::<Vec<_>>()
            .join("; ");
        bail!(
            "the verbs probe plugin ({}) did not start: {why}",
            path.display()
        );
    };
    if a.serve {
        eprintln!(
            "rocewatch probe: responding on TCP port {}{} (Ctrl-C to stop)",
            a.tcp_port,
            if a.no_bandwidth {
                "; bandwidth tests refused (--no-bandwidth)"
            } else {
                "; bandwidth tests served, one at a time"
            }
        );
        let mut stop = rocewatch_runtime::util::signals::shutdown_on_signals();
        let _ = stop.changed().await;
        return Ok(0);
    }
    let peer = a
        .peer
        .clone()
        .expect("clap requires a peer without --serve");
    let mut rtts = Vec::new();
    let mut rows = Vec::new();
    let (mut timeouts, mut failures) = (0u32, Vec::new());
    let mut nic = None;
    for seq in 1..=a.count {
        let target = ProbeTarget {
            peer: peer.clone(),
            size: a.size,
            timeout_ms: a.timeout.as_millis() as u64,
        };
        let r = rocewatch_probes::probe_once(entry, target, agent.metrics()).await;
        let line = match r {
            Ok(res) => {
                rows.push(serde_json::to_value(&res).expect("plain data"));
                if res.nic_timestamps.is_some() {
                    nic = res.nic_timestamps.clone();
                }
                match res.outcome {
                    ProbeOutcome::Ok { rtt_seconds } => {
                        rtts.push(rtt_seconds);
                        format!(
                            "{} bytes from {peer}: seq={seq} rtt={:.3} ms",
                            a.size,
                            rtt_seconds * 1e3
                        )
                    }
                    ProbeOutcome::Timeout => {
                        timeouts += 1;
                        format!(
                            "seq={seq}: timeout after {}",
                            humantime::format_duration(a.timeout)
                        )
                    }
                    ProbeOutcome::ConnectFailed { cause } => {
                        let l = format!("seq={seq}: connection failed: {cause}");
                        failures.push(cause);
                        l
                    }
                }
            }
            Err(e) => {
                failures.push(e.to_string());
                format!("seq={seq}: {e}")
            }
        };
        if !a.json {
            println!("{line}");
        }
        if seq < a.count {
            tokio::time::sleep(a.interval).await;
        }
    }
    let mut sorted = rtts.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| -> Option<f64> {
        (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize])
    };
    let loss = 100.0 * (a.count as f64 - rtts.len() as f64) / a.count.max(1) as f64;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "peer": peer, "size": a.size, "sent": a.count, "received": rtts.len(),
                "timeouts": timeouts, "connect_failures": failures.len(), "loss_percent": loss,
                "rtt_seconds": { "min": q(0.0), "p50": q(0.5), "p99": q(0.99), "max": q(1.0) },
                "nic_timestamps": nic,
                "results": rows,
            })
        );
    } else {
        println!(
            "--- {peer} rdma probe: {} sent, {} received, {loss:.1}% loss, {timeouts} timeouts, {} connection failures",
            a.count,
            rtts.len(),
            failures.len()
        );
        if let (Some(min), Some(p50), Some(p99), Some(max)) = (q(0.0), q(0.5), q(0.99), q(1.0)) {
            println!(
                "rtt min/p50/p99/max = {:.3}/{:.3}/{:.3}/{:.3} ms",
                min * 1e3,
                p50 * 1e3,
                p99 * 1e3,
                max * 1e3
            );
        }
        match nic {
            Some(rocewatch_plugin_api::NicTimestamps::Unsupported { reason }) => {
                println!("NIC-measured split of the RTT: unsupported ({reason})")
            }
            Some(rocewatch_plugin_api::NicTimestamps::Measured {
                network_seconds,
                host_seconds,
            }) => println!(
                "NIC-measured split of the last RTT: network {:.3} ms, host {:.3} ms",
                network_seconds * 1e3,
                host_seconds * 1e3
            ),
            None => println!("NIC-measured split of the RTT: the probe plugin does not say"),
        }
    }
    Ok(if rtts.is_empty() { 1 } else { 0 })
}
