//! This host in the fleet: its NICs at their ranks (the rails), where they hang (LLDP or
//! the topology file), the fleet's map (the file, or the metrics backend's NIC info
//! series), and from all that the pinglist the prober probes (`[fleet]`).
//!
//! [`run`] refreshes the map every `refresh`: it exports this host's NIC info series
//! (`rdma.fleet.nic.info`, the map's rows for the backend), and hands the prober a new
//! [`FleetView`] when the pinglist changed. A map that cannot be read keeps the last one
//! in use; the failure is logged when it starts and when it changes, not every refresh.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::config::{fetch_prometheus, view_of, FleetConfig, FleetSource, FleetView, Probing};
use rocewatch_fleet::lldp::{LeftOut, LocalPort, Neighbour};
use rocewatch_fleet::{Nic, Topology};
use rocewatch_metrics::names;
use rocewatch_plugin_api::{AttrSet, Attributes, Inventory, MetricKind, Sample, Value};
use rocewatch_runtime::host::discovery::Discovery;
use rocewatch_runtime::pipeline::Pipeline;

/// The pseudo-plugin the NIC info series are stored under.
pub const PLUGIN: &str = "fleet";

/// How long lldpcli may take.
pub const LLDPCLI_TIMEOUT: Duration = Duration::from_secs(10);

/// The ports LLDP is joined with, at their ranks.
pub fn local_ports(inv: &Inventory) -> Vec<LocalPort> {
    rocewatch_sysfs::rails::ports(inv, &[], None)
        .into_iter()
        .map(|p| LocalPort {
            name: p.name(),
            netdev: p.netdev.clone(),
            addr: p.ipv4.map(IpAddr::V4),
        })
        .collect()
}

/// The addresses of the ports each probe plugin instance probes from, with the port
/// they are on: `specs[i]` is instance `i`'s port (`mlx5_3:1`), device (`mlx5_3`: its
/// ports) or `None` (the plugin's default: the first device). An address two instances
/// could probe from is the first one's.
pub fn probe_addrs(inv: &Inventory, specs: &[Option<String>]) -> BTreeMap<IpAddr, Probing> {
    let ports = rocewatch_sysfs::rails::ports(inv, &[], None);
    let first = ports.first().map(|p| p.device.clone());
    let mut out = BTreeMap::new();
    for (instance, spec) in specs.iter().enumerate() {
        let matches = |p: &rocewatch_sysfs::rails::PortEnv| match spec {
            Some(s) => *s == p.name() || *s == p.device,
            None => Some(&p.device) == first.as_ref(),
        };
        for p in ports.iter().filter(|p| matches(p)) {
            if let Some(ip) = p.ipv4 {
                out.entry(IpAddr::V4(ip)).or_insert_with(|| Probing {
                    instance,
                    port: p.name(),
                });
            }
        }
    }
    out
}

/// `lldpcli -f json0 show neighbors details`, run within [`LLDPCLI_TIMEOUT`].
pub fn lldp_neighbours(lldpcli: &Path) -> Result<Vec<Neighbour>, String> {
    lldp_neighbours_within(lldpcli, LLDPCLI_TIMEOUT)
}

/// The same within `timeout`, as a process group killed at the bound with whatever it
/// started (a wrapper's child included: [`rocewatch_process`]).
fn lldp_neighbours_within(lldpcli: &Path, timeout: Duration) -> Result<Vec<Neighbour>, String> {
    use rocewatch_process::{run_bounded, RunError};
    let mut cmd = std::process::Command::new(lldpcli);
    cmd.args(["-f", "json0", "show", "neighbors", "details"]);
    let what = format!("{} -f json0 show neighbors details", lldpcli.display());
    let out = run_bounded(cmd, timeout).map_err(|e| match e {
        RunError::Spawn(e) => {
            format!("{what}: cannot run: {e} (is lldpd installed? Debian: apt install lldpd)")
        }
        RunError::Timeout { stderr } => {
            format!("{what}: still running after {timeout:?}; killed ({stderr})")
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

/// The most of a topology file read: 10,000 hosts of 8 NICs are about 4 MiB.
const MAX_TOPOLOGY: u64 = 256 << 20;

fn read_file(path: &Path) -> Result<Topology, String> {
    use std::io::Read;
    let name = path.display().to_string();
    // Bounded: a path to something that never ends (a FIFO, /dev/zero) is refused.
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOPOLOGY + 1).read_to_string(&mut text))
        .map_err(|e| format!("{name}: {e}"))?;
    if text.len() as u64 > MAX_TOPOLOGY {
        return Err(format!("{name}: over {} MiB", MAX_TOPOLOGY >> 20));
    }
    Topology::parse(&name, &text).map_err(|e| e.to_string())
}

/// Refreshes the LLDP rows may miss a rail before its last row is dropped (a port flap,
/// an lldpd or switch restart: the NIC stays in the map meanwhile).
const LLDP_GRACE: u32 = 3;

/// What the runner keeps between refreshes: a failure keeps the last good value.
#[derive(Default)]
struct Kept {
    inv: Option<Inventory>,
    /// The probed ports' addresses (the rails probed), each with its port.
    local: BTreeMap<IpAddr, Probing>,
    /// This host's rows, with the refreshes LLDP has missed each.
    own: Vec<(Nic, u32)>,
    map: Option<Topology>,
}

/// This host's rows from LLDP: the rows seen now, and the rails seen before but missed
/// now kept for [`LLDP_GRACE`] refreshes.
fn lldp_own(cfg: &FleetConfig, host: &str, kept: &mut Kept, notes: &mut Vec<String>) {
    let Some(inv) = &kept.inv else {
        notes.push("no inventory yet: LLDP rows need this host's ports".into());
        return;
    };
    let (rows, left) = match lldp_neighbours(&cfg.lldpcli) {
        Ok(n) => rocewatch_fleet::lldp::rows(host, &local_ports(inv), &n),
        Err(e) => {
            notes.push(format!("{e}; this host's last rows stay"));
            return;
        }
    };
    notes.extend(
        left.iter()
            .map(|LeftOut { rail, name, why }| format!("rail {rail} ({name}): {why}")),
    );
    let mut own: Vec<(Nic, u32)> = rows.into_iter().map(|n| (n, 0)).collect();
    for (n, missed) in &kept.own {
        if !own.iter().any(|(o, _)| o.rail == n.rail) && missed + 1 < LLDP_GRACE {
            own.push((n.clone(), missed + 1));
        }
    }
    own.sort_by_key(|(n, _)| n.rail);
    kept.own = own;
}

/// The map from the backend: every host's NICs but this one's, which are its own rows.
/// NICs that claim another's address are left out (this host's own always stay).
fn backend_map(
    cfg: &FleetConfig,
    host: &str,
    own: &[Nic],
    notes: &mut Vec<String>,
) -> Result<Topology, String> {
    let url = cfg.url.as_deref().ok_or("no url")?;
    let (mut nics, left) = fetch_prometheus(url, &cfg.query, Duration::from_secs(10))?;
    if let Some(first) = left.first() {
        notes.push(format!(
            "series of the backend left out, the first: {first}"
        ));
    }
    nics.retain(|n| n.host != host);
    let mut by_addr: std::collections::BTreeMap<IpAddr, usize> = std::collections::BTreeMap::new();
    for n in nics.iter().chain(own) {
        *by_addr.entry(n.addr).or_default() += 1;
    }
    let mine: BTreeSet<IpAddr> = own.iter().map(|n| n.addr).collect();
    nics.retain(|n| {
        let clash = by_addr[&n.addr] > 1 || mine.contains(&n.addr);
        if clash {
            notes.push(format!(
                "address {} is claimed by more than one NIC ({} rail {} among them): left out",
                n.addr, n.host, n.rail
            ));
        }
        !clash
    });
    nics.extend(own.iter().cloned());
    Topology::from_nics(nics)
}

/// One refresh (blocking: files, HTTP, lldpcli): this host's rows, then the map.
fn refresh(cfg: &FleetConfig, host: &str, kept: &mut Kept, notes: &mut Vec<String>) {
    let file = cfg.topology.as_deref().map(read_file);
    if cfg.lldp {
        lldp_own(cfg, host, kept, notes);
    } else {
        match &file {
            Some(Ok(t)) => kept.own = t.nics_of(host).cloned().map(|n| (n, 0)).collect(),
            Some(Err(e)) => notes.push(format!("{e}; this host's last rows stay")),
            None => {}
        }
    }
    let own: Vec<Nic> = kept.own.iter().map(|(n, _)| n.clone()).collect();
    let map = match cfg.source {
        FleetSource::Topology => file.unwrap_or_else(|| Err("no topology file".into())),
        FleetSource::Prometheus => backend_map(cfg, host, &own, notes),
    };
    match map {
        Ok(t) => kept.map = Some(t),
        Err(e) => notes.push(format!("{e}; the last map stays in use")),
    }
}

/// A note as the log remembers it: without its numbers, so that a count that moves
/// does not log the same condition again.
fn note_key(n: &str) -> String {
    n.chars().filter(|c| !c.is_ascii_digit()).collect()
}

/// Refresh the map every `cfg.refresh` (spread over the fleet: each host waits between
/// 0.9 and 1.1 of it, by its name) until `stop`: export this host's rows, and send the
/// prober its view when it changed. `specs` are the ports the probe plugin's instances
/// probe from ([`probe_addrs`]).
pub async fn run(
    cfg: FleetConfig,
    host: String,
    specs: Vec<Option<String>>,
    discovery: Arc<Discovery>,
    pipeline: Arc<Pipeline>,
    views: watch::Sender<Option<Arc<FleetView>>>,
    mut stop: watch::Receiver<bool>,
) {
    let spread =
        0.9 + 0.2 * (rocewatch_fleet::pinglist::score(&[&host, "refresh"]) % 1000) as f64 / 1000.0;
    let pause = cfg.refresh.mul_f64(spread);
    let mut said: BTreeSet<String> = BTreeSet::new();
    let mut kept = Some(Kept::default());
    loop {
        let mut notes = Vec::new();
        let mut k = kept.take().expect("put back after each refresh");
        match discovery.discover().await {
            Ok(inv) => {
                let local = probe_addrs(&inv, &specs);
                if local.is_empty() {
                    let named: Vec<&str> = specs
                        .iter()
                        .map(|s| s.as_deref().unwrap_or("the first device"))
                        .collect();
                    notes.push(format!(
                        "the ports probed from ({}) have no IPv4 address with a RoCE v2 GID: the rails they serve are unknown",
                        named.join(", ")
                    ));
                } else {
                    k.local = local;
                }
                k.inv = Some(inv);
            }
            Err(e) => notes.push(format!("discovering this host's ports: {e}")),
        }
        let (c, h) = (cfg.clone(), host.clone());
        let task = tokio::task::spawn_blocking(move || {
            let mut notes = Vec::new();
            refresh(&c, &h, &mut k, &mut notes);
            (k, notes)
        });
        let (k, more) = tokio::select! {
            r = task => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("fleet: the refresh failed: {e}; the map is no longer read");
                    return;
                }
            },
            _ = stop.changed() => return,
        };
        notes.extend(more);
        // No view until the probed ports' rails are known: probing a rail's peers from
        // another port would count as loss.
        let view = match (&k.map, k.local.is_empty()) {
            (Some(map), false) => match view_of(map, &host, cfg.options(), &k.local) {
                Ok(v) => Some((v, map.nics().len())),
                Err(e) => {
                    notes.push(format!("{e}; the last pinglist stays in use"));
                    None
                }
            },
            _ => None,
        };
        let keys: BTreeSet<String> = notes.iter().map(|n| note_key(n)).collect();
        for n in &notes {
            if !said.contains(&note_key(n)) {
                tracing::warn!("fleet: {n}");
            }
        }
        if keys.is_empty() && !said.is_empty() {
            tracing::info!("fleet: the map and this host's rows are read again");
        }
        said = keys;
        let own: Vec<Nic> = k.own.iter().map(|(n, _)| n.clone()).collect();
        pipeline.ingest_at(
            PLUGIN,
            &info_samples(&own),
            SystemTime::now(),
            Instant::now(),
        );
        if let Some((view, nics)) = view {
            views.send_if_modified(|v| {
                let changed = v.as_deref() != Some(&view);
                if changed {
                    let rails: Vec<String> = view
                        .tors
                        .keys()
                        .map(|r| match view.ports.get(r) {
                            Some(p) => format!("{r} from {}", p.port),
                            None => r.to_string(),
                        })
                        .collect();
                    tracing::info!(
                        "fleet: {host}: {} peers on rails [{}] ({nics} NICs in the map)",
                        view.peers.len(),
                        rails.join(", "),
                    );
                    *v = Some(Arc::new(view));
                }
                changed
            });
        }
        kept = Some(k);
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each instance's port gives its addresses: by port, by device, or the first
    /// device's when it names none; an address two instances could serve is the first's.
    #[test]
    fn the_addresses_of_each_instance_port() {
        let root = rocewatch_sysfs::SysRoot::new(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures/mlx5-roce-dual-port/sys"),
        );
        let filter = rocewatch_sysfs::inventory::DeviceFilter::new(&Default::default()).unwrap();
        let (inv, _) = rocewatch_sysfs::inventory::read_inventory(&root, &filter).unwrap();
        let at = |i: usize, port: &str| Probing {
            instance: i,
            port: port.into(),
        };
        let (a0, a1): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.1.1".parse().unwrap());
        let rails = probe_addrs(&inv, &[Some("mlx5_0:1".into()), Some("mlx5_1:1".into())]);
        assert_eq!(
            rails,
            BTreeMap::from([(a0, at(0, "mlx5_0:1")), (a1, at(1, "mlx5_1:1"))])
        );
        assert_eq!(
            probe_addrs(&inv, &[None]),
            BTreeMap::from([(a0, at(0, "mlx5_0:1"))])
        );
        assert_eq!(
            probe_addrs(
                &inv,
                &[Some("mlx5_1".into()), None, Some("mlx5_1:1".into())]
            ),
            BTreeMap::from([(a0, at(1, "mlx5_0:1")), (a1, at(0, "mlx5_1:1"))])
        );
        assert!(probe_addrs(&inv, &[Some("mlx5_7".into())]).is_empty());
    }

    /// An lldpcli that is a wrapper whose child hangs (an lldpd that does not answer) is
    /// killed at the bound with its child; the fleet keeps its last map.
    #[test]
    fn a_hanging_lldpcli_wrapper_is_killed_with_its_child_at_the_bound() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let tool = dir.path().join("lldpcli");
        std::fs::write(
            &tool,
            format!(
                "#!/bin/sh\nsh -c 'echo $$ > {}; exec sleep 20'\necho '{{}}'\n",
                pidfile.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = Instant::now();
        let e = lldp_neighbours_within(&tool, Duration::from_secs(1)).unwrap_err();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "{took:?}: {e}");
        assert!(e.contains("killed"), "{e}");
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let until = Instant::now() + Duration::from_secs(2);
        let dead = loop {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
            let dead = stat.as_deref().map_or(true, |l| {
                l.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
            });
            if dead || Instant::now() >= until {
                break dead;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(dead, "lldpcli's child {} lives on", pid.trim());
    }
}
