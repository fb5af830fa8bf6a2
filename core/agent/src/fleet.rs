//! This host in the fleet: its NICs at their ranks (the rails), where they hang (LLDP or
//! the topology file), the fleet's map (the file, or the metrics backend's NIC info
//! series), and from all that the pinglist the prober probes (`[fleet]`).
//!
//! [`run`] refreshes the map every `refresh`: it exports this host's NIC info series
//! (`rdma.fleet.nic.info`, the map's rows for the backend), and hands the prober a new
//! [`FleetView`] when the pinglist changed. A map that cannot be read keeps the last one
//! in use; the failure is logged when it starts and when it changes, not every refresh.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use rocewatch_fleet::lldp::{LeftOut, LocalPort, Neighbour};
use rocewatch_fleet::{Nic, Topology};
use rocewatch_metrics::names;
use rocewatch_plugin_api::{AttrSet, Attributes, Inventory, MetricKind, Sample, Value};
use rocewatch_preflight as pf;
use rocewatch_probes::fleet::{fetch_prometheus, view_of, FleetConfig, FleetSource, FleetView};
use rocewatch_runtime::host::discovery::Discovery;
use rocewatch_runtime::pipeline::Pipeline;

/// The pseudo-plugin the NIC info series are stored under.
pub const PLUGIN: &str = "fleet";

/// How long lldpcli may take.
pub const LLDPCLI_TIMEOUT: Duration = Duration::from_secs(10);

/// This host's NICs in `rocewatch env`'s order (`appenv::ports`: devices by name, ports
/// by number), down ones kept at their rank.
pub fn rails_of(host: &str, inv: &Inventory) -> pf::HostRails {
    let ports = rocewatch_doctor::appenv::ports(inv, &[], None);
    let nics = ports
        .iter()
        .map(|p| {
            let rate = inv
                .devices
                .iter()
                .find(|d| d.name == p.device)
                .and_then(|d| d.ports.iter().find(|x| x.port == p.port))
                .and_then(|x| x.rate_bps);
            pf::Nic {
                name: p.name(),
                netdev: p.netdev.clone(),
                up: p.up,
                line_rate_gbps: rate.map(|b| b as f64 / 1e9),
                addr: p.ipv4.map(|ip| ip.to_string()),
            }
        })
        .collect();
    pf::HostRails {
        host: host.to_string(),
        nics,
    }
}

/// The ports LLDP is joined with, at their ranks.
pub fn local_ports(inv: &Inventory) -> Vec<LocalPort> {
    rocewatch_doctor::appenv::ports(inv, &[], None)
        .into_iter()
        .map(|p| LocalPort {
            name: p.name(),
            netdev: p.netdev.clone(),
            addr: p.ipv4.map(IpAddr::V4),
        })
        .collect()
}

/// The addresses of `device` (the first device when none is named: the probe plugin's
/// default), which tell the rails the probe plugin serves.
pub fn device_addrs(inv: &Inventory, device: Option<&str>) -> BTreeSet<IpAddr> {
    let ports = rocewatch_doctor::appenv::ports(inv, &[], None);
    let dev = device
        .map(str::to_string)
        .or_else(|| ports.first().map(|p| p.device.clone()));
    ports
        .iter()
        .filter(|p| Some(&p.device) == dev.as_ref())
        .filter_map(|p| p.ipv4.map(IpAddr::V4))
        .collect()
}

/// `lldpcli -f json0 show neighbors details`, run within [`LLDPCLI_TIMEOUT`].
pub fn lldp_neighbours(lldpcli: &Path) -> Result<Vec<Neighbour>, String> {
    use rocewatch_slurm::scontrol::{run_bounded, RunError};
    let mut cmd = std::process::Command::new(lldpcli);
    cmd.args(["-f", "json0", "show", "neighbors", "details"]);
    let what = format!("{} -f json0 show neighbors details", lldpcli.display());
    let out = run_bounded(cmd, LLDPCLI_TIMEOUT).map_err(|e| match e {
        RunError::Spawn(e) => {
            format!("{what}: cannot run: {e} (is lldpd installed? Debian: apt install lldpd)")
        }
        RunError::Timeout { stderr } => {
            format!("{what}: still running after {LLDPCLI_TIMEOUT:?}; killed ({stderr})")
        }
    })?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {}: {} (is lldpd running?)",
            out.status,
            out.stderr.trim()
        ));
    }
    rocewatch_fleet::lldp::parse(&out.stdout).map_err(|e| format!("{what}: {e}"))
}

/// The NIC info series of `rows`.
pub fn info_samples(rows: &[Nic]) -> Vec<Sample> {
    rows.iter()
        .map(|n| {
            let mut a = AttrSet::new();
            a.insert("host", &n.host);
            a.insert("rail", n.rail.to_string());
            a.insert("address", n.addr.to_string());
            a.insert("tor", &n.tor);
            a.insert("tor_port", n.tor_port.as_deref().unwrap_or(""));
            Sample {
                name: names::FLEET_NIC_INFO.into(),
                unit: "{nic}".into(),
                value: Value::U64(1),
                attributes: Attributes::new(a),
                source: "fleet".into(),
                kind: MetricKind::Gauge,
            }
        })
        .collect()
}

/// What one refresh read: the map, this host's rows, what was left out.
struct Read {
    topo: Topology,
    own: Vec<Nic>,
    notes: Vec<String>,
}

fn read_file(path: &Path) -> Result<Topology, String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    Topology::parse(&name, &text).map_err(|e| e.to_string())
}

/// Read the map and this host's rows (blocking: files, HTTP, lldpcli).
fn read(cfg: &FleetConfig, host: &str, inv: Option<&Inventory>) -> Result<Read, String> {
    let mut notes = Vec::new();
    let file = cfg.topology.as_deref().map(read_file).transpose()?;
    let own = if cfg.lldp {
        let inv = inv.ok_or("no inventory yet: LLDP rows need this host's ports")?;
        let (rows, left) =
            rocewatch_fleet::lldp::rows(host, &local_ports(inv), &lldp_neighbours(&cfg.lldpcli)?);
        notes.extend(
            left.iter()
                .map(|LeftOut { rail, name, why }| format!("rail {rail} ({name}): {why}")),
        );
        rows
    } else {
        file.as_ref()
            .map(|t| t.nics_of(host).cloned().collect())
            .unwrap_or_default()
    };
    let topo = match cfg.source {
        FleetSource::Topology => file.ok_or("no topology file")?,
        FleetSource::Prometheus => {
            let url = cfg.url.as_deref().ok_or("no url")?;
            let (mut nics, left) = fetch_prometheus(url, &cfg.query, Duration::from_secs(10))?;
            if !left.is_empty() {
                notes.push(format!(
                    "{} series of the backend left out, the first: {}",
                    left.len(),
                    left[0]
                ));
            }
            // This host as it sees itself (the backend may not have its rows yet).
            nics.retain(|n| n.host != host);
            nics.extend(own.iter().cloned());
            Topology::from_nics(nics)?
        }
    };
    Ok(Read { topo, own, notes })
}

/// Refresh the map every `cfg.refresh` until `stop`: export this host's rows, and send
/// the prober its view when it changed. `device` is the probe plugin's device.
pub async fn run(
    cfg: FleetConfig,
    host: String,
    device: Option<String>,
    discovery: Arc<Discovery>,
    pipeline: Arc<Pipeline>,
    views: watch::Sender<Option<Arc<FleetView>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_problem = String::new();
    let mut last_notes = Vec::new();
    loop {
        let inv = match discovery.discover().await {
            Ok(inv) => Some(inv),
            Err(e) => {
                tracing::warn!("fleet: discovering this host's ports: {e}");
                None
            }
        };
        let (c, h, i) = (cfg.clone(), host.clone(), inv.clone());
        let read = tokio::task::spawn_blocking(move || read(&c, &h, i.as_ref()))
            .await
            .unwrap_or_else(|e| Err(format!("the reading task failed: {e}")));
        let result = read.and_then(|r| {
            let local = inv
                .as_ref()
                .map(|i| device_addrs(i, device.as_deref()))
                .unwrap_or_default();
            let view = view_of(&r.topo, &host, cfg.options(), &local)?;
            Ok((r, view))
        });
        match result {
            Ok((r, view)) => {
                if !last_problem.is_empty() {
                    tracing::info!(
                        "fleet: the map is read again ({} NICs)",
                        r.topo.nics().len()
                    );
                    last_problem.clear();
                }
                if r.notes != last_notes {
                    for n in &r.notes {
                        tracing::warn!("fleet: {n}");
                    }
                    last_notes = r.notes.clone();
                }
                pipeline.ingest_at(
                    PLUGIN,
                    &info_samples(&r.own),
                    SystemTime::now(),
                    Instant::now(),
                );
                views.send_if_modified(|v| {
                    let changed = v.as_deref() != Some(&view);
                    if changed {
                        tracing::info!(
                            "fleet: {host}: {} peers on rails {:?} ({} NICs in the map)",
                            view.peers.len(),
                            view.tors.keys().collect::<Vec<_>>(),
                            r.topo.nics().len()
                        );
                        *v = Some(Arc::new(view));
                    }
                    changed
                });
            }
            Err(e) => {
                if e != last_problem {
                    tracing::warn!("fleet: {e}; the last map stays in use");
                    last_problem = e;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.refresh) => {}
            _ = stop.changed() => return,
        }
    }
}
