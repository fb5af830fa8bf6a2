//! `rocewatch probe PEER` and `rocewatch probe --serve`, and where the verbs plugin is.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use rocewatch_plugin_api::{CmConnection, NicTimestamps, ProbeOutcome, ProbeResult};
use rocewatch_runtime::host::call::CallError;
use rocewatch_runtime::host::registry::{Entry, Registry, State};
use rocewatch_runtime::util::duration::{PROBE_GAP, PROBE_TIMEOUT};

use super::source::SourceArgs;
use crate::app::App;
use crate::config::Config;

/// `rocewatch probe`'s arguments.
#[derive(Debug, Args)]
pub struct ProbeCmdArgs {
    #[command(flatten)]
    pub args: ProbeArgs,
    #[command(flatten)]
    pub source: SourceArgs,
}

/// `rocewatch probe`'s command line.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// The peer (IP address or name).
    #[arg(required_unless_present = "serve")]
    pub peer: Option<String>,
    /// Probes to send.
    #[arg(long, default_value_t = 10)]
    pub count: u32,
    /// Message size in bytes.
    #[arg(long, default_value_t = 64)]
    pub size: u32,
    /// Per-probe timeout (at most 1m).
    #[arg(long, value_parser = PROBE_TIMEOUT.flag(), default_value = "1s", value_name = "DUR")]
    pub timeout: Duration,
    /// Time between probes (0s: one after another; at most 1h).
    #[arg(long, value_parser = PROBE_GAP.flag(), default_value = "100ms", value_name = "DUR")]
    pub interval: Duration,
    /// Run a responder until interrupted instead of probing; it also serves bandwidth
    /// tests (`rocewatch bandwidth`) unless --no-bandwidth.
    #[arg(long)]
    pub serve: bool,
    /// With --serve: refuse bandwidth tests.
    #[arg(long, requires = "serve")]
    pub no_bandwidth: bool,
    /// RDMA device (default: the first).
    #[arg(long)]
    pub device: Option<String>,
    /// TCP port of the side channel.
    #[arg(long, default_value_t = rocewatch_plugin_api::DEFAULT_PROBE_TCP_PORT)]
    pub tcp_port: u16,
    /// Print the results and the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Busy-poll for completions (prober, or responder with --serve) instead of sleeping
    /// on completion events, as ib_send_lat does: lower, steadier RTTs, one core busy.
    #[arg(long)]
    pub busy_poll: bool,
    /// Connect through the RDMA connection manager, as rping and every CM application
    /// (NVMe over Fabrics, iSER, UCX, Open MPI) do: address and route resolution, the
    /// CM's request over UDP 4791, the connection's RoCE mode and type of service; each
    /// failure named by where it stopped. The peer runs `rocewatch probe --serve --cm`.
    /// With --serve: also listen for CM connections (as rping -s).
    #[arg(long)]
    pub cm: bool,
    /// The RDMA CM port (the same on both sides).
    #[arg(
        long = "cm-port",
        alias = "port",
        default_value_t = rocewatch_probes::DEFAULT_CM_PORT,
        value_name = "PORT",
        requires = "cm"
    )]
    pub port: u16,
    /// The type of service a CM connection asks for (the whole ToS byte: DSCP 26 is
    /// 104); default: the device's configfs default_roce_tos.
    #[arg(long, value_name = "TOS", requires = "cm", conflicts_with = "serve")]
    pub tos: Option<u8>,
}

pub async fn run(a: ProbeCmdArgs) -> Result<i32> {
    run_probe(a.args, a.source.load()?).await
}

async fn run_probe(a: ProbeArgs, mut cfg: Config) -> Result<i32> {
    use rocewatch_plugin_api::PluginKind;
    let path = rocewatch_probes::plugin_path()?;
    probe_plugin_only(&a, &mut cfg, &path);
    let agent = App::start(cfg, Some(&[PluginKind::Probe])).await;
    let entry = started_probe(&agent.registry, &path)?;
    if a.serve {
        serve(&a).await;
        return Ok(0);
    }
    let peer = a
        .peer
        .clone()
        .expect("clap requires a peer without --serve");
    let mut tally = Tally::default();
    for seq in 1..=a.count {
        let mut target = rocewatch_plugin_api::ProbeTarget::new(
            peer.clone(),
            a.size,
            a.timeout.as_millis() as u64,
        );
        if a.cm {
            target.cm_port = a.port;
            target.tos = a.tos;
        }
        let r = rocewatch_probes::probe_once(entry, target, agent.metrics()).await;
        let line = tally.record(&a, &peer, seq, r);
        if !a.json {
            println!("{line}");
        }
        if seq < a.count {
            tokio::time::sleep(a.interval).await;
        }
    }
    tally.report(&a, &peer);
    Ok(if tally.rtts.is_empty() { 1 } else { 0 })
}

/// `cfg` with every built-in plugin off (no collection here) and the verbs probe plugin
/// at `path` as the one external plugin.
fn probe_plugin_only(a: &ProbeArgs, cfg: &mut Config, path: &Path) {
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
        path.to_path_buf(),
        a.timeout,
        &a.device,
        a.tcp_port,
        a.serve,
        a.busy_poll,
        // A one-off run tries to connect for every probe.
        Duration::ZERO,
    );
    plugin.options["serve_bandwidth"] = (a.serve && !a.no_bandwidth).into();
    if a.serve && a.cm {
        plugin.options["serve_cm_port"] = a.port.into();
    }
    cfg.plugins.external = vec![plugin];
}

/// The started probe plugin, or why it did not start.
fn started_probe<'r>(registry: &'r Registry, path: &Path) -> Result<&'r Entry> {
    let started = registry
        .of_kind(rocewatch_plugin_api::PluginKind::Probe)
        .find(|e| e.instance.is_some() && e.status().state == State::Started);
    let Some(entry) = started else {
        let why = registry
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
    Ok(entry)
}

/// `--serve`: the plugin answers peers until a signal.
async fn serve(a: &ProbeArgs) {
    eprintln!(
        "rocewatch probe: responding on TCP port {}{}{} (Ctrl-C to stop)",
        a.tcp_port,
        if a.cm {
            format!(" and RDMA CM port {}", a.port)
        } else {
            String::new()
        },
        if a.no_bandwidth {
            "; bandwidth tests refused (--no-bandwidth)"
        } else {
            "; bandwidth tests served, one at a time"
        }
    );
    let mut stop = rocewatch_runtime::util::signals::shutdown_on_signals();
    let _ = stop.changed().await;
}

/// What the probes of one run returned.
#[derive(Default)]
struct Tally {
    /// The RTT of each answered probe, in seconds.
    rtts: Vec<f64>,
    /// Every result, for `--json`.
    rows: Vec<serde_json::Value>,
    timeouts: u32,
    /// Why each probe that failed to connect (or to run) failed.
    failures: Vec<String>,
    /// The last NIC-measured split a result carried.
    nic: Option<NicTimestamps>,
    /// Where the CM put the last CM probe's connection.
    cm: Option<CmConnection>,
}

impl Tally {
    /// Count probe `seq`'s result; returns its line.
    fn record(
        &mut self,
        a: &ProbeArgs,
        peer: &str,
        seq: u32,
        r: Result<ProbeResult, CallError>,
    ) -> String {
        match r {
            Ok(res) => {
                self.rows
                    .push(serde_json::to_value(&res).expect("plain data"));
                if res.nic_timestamps.is_some() {
                    self.nic = res.nic_timestamps.clone();
                }
                if res.cm.is_some() {
                    self.cm = res.cm.clone();
                }
                match res.outcome {
                    ProbeOutcome::Ok { rtt_seconds } => {
                        self.rtts.push(rtt_seconds);
                        format!(
                            "{} bytes from {peer}: seq={seq} rtt={:.3} ms",
                            a.size,
                            rtt_seconds * 1e3
                        )
                    }
                    ProbeOutcome::Timeout => {
                        self.timeouts += 1;
                        format!(
                            "seq={seq}: timeout after {}",
                            humantime::format_duration(a.timeout)
                        )
                    }
                    ProbeOutcome::ConnectFailed { cause } => {
                        let l = format!("seq={seq}: connection failed: {cause}");
                        self.failures.push(cause);
                        l
                    }
                }
            }
            Err(e) => {
                self.failures.push(e.to_string());
                format!("seq={seq}: {e}")
            }
        }
    }

    /// The summary: loss, RTT quantiles and the NIC-measured split, as text or JSON.
    fn report(&self, a: &ProbeArgs, peer: &str) {
        let Tally {
            rtts,
            rows,
            timeouts,
            failures,
            nic,
            cm,
        } = self;
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
                    "cm": cm,
                    "results": rows,
                })
            );
            return;
        }
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
            Some(NicTimestamps::Unsupported { reason }) => {
                println!("NIC-measured split of the RTT: unsupported ({reason})")
            }
            Some(NicTimestamps::Measured {
                network_seconds,
                host_seconds,
            }) => println!(
                "NIC-measured split of the last RTT: network {:.3} ms, host {:.3} ms",
                network_seconds * 1e3,
                host_seconds * 1e3
            ),
            None => println!("NIC-measured split of the RTT: the probe plugin does not say"),
        }
        if a.cm {
            println!("{}", cm_line(cm.as_ref(), a.tos));
        }
    }
}

/// Where the CM put the connections and the class of service they carried, as `probe
/// --cm` prints it.
fn cm_line(cm: Option<&CmConnection>, asked: Option<u8>) -> String {
    let Some(c) = cm else {
        return match asked {
            Some(t) => format!(
                "RDMA CM: no route was resolved (asked for ToS {t}: it never reached the wire)"
            ),
            None => "RDMA CM: no route was resolved, so no device and no ToS".into(),
        };
    };
    let whence = if c.tos_set {
        "asked with --tos".to_string()
    } else {
        format!(
            "the port's default: /sys/kernel/config/rdma_cm/{}/ports/{}/default_roce_tos",
            c.device, c.port
        )
    };
    format!(
        "RDMA CM: via {} port {}, ToS {} (DSCP {}, ECN {}), {whence}",
        c.device,
        c.port,
        c.tos,
        c.tos >> 2,
        c.tos & 3
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cm_line_says_the_device_the_tos_and_where_it_came_from() {
        let c = CmConnection {
            device: "mlx5_0".into(),
            port: 1,
            tos: 106,
            tos_set: false,
        };
        assert_eq!(
            cm_line(Some(&c), None),
            "RDMA CM: via mlx5_0 port 1, ToS 106 (DSCP 26, ECN 2), the port's default: /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"
        );
        let asked = CmConnection {
            tos: 96,
            tos_set: true,
            ..c
        };
        assert_eq!(
            cm_line(Some(&asked), Some(96)),
            "RDMA CM: via mlx5_0 port 1, ToS 96 (DSCP 24, ECN 0), asked with --tos"
        );
        assert!(cm_line(None, Some(96)).contains("never reached the wire"));
        assert!(cm_line(None, None).contains("no route was resolved"));
    }
}
