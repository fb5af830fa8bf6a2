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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::config::{fetch_prometheus, view_of, FleetConfig, FleetSource, FleetView, Probing};
use super::rails;
use rocewatch_fleet::lldp::{LeftOut, Neighbour};
use rocewatch_fleet::{Nic, Topology};
use rocewatch_metrics::names;
use rocewatch_plugin_api::{AttrSet, Attributes, Inventory, MetricKind, Sample, Value};
use rocewatch_runtime::host::discovery::Discovery;
use rocewatch_runtime::pipeline::Pipeline;
use rocewatch_sysfs::railmap::RailRow;
use rocewatch_sysfs::SysRoot;

/// The pseudo-plugin the NIC info series are stored under.
pub const PLUGIN: &str = "fleet";

/// How long lldpcli may take.
pub const LLDPCLI_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The topology file at `path`, read within [`MAX_TOPOLOGY`].
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

/// `host`'s rows of `[fleet] topology`, when `fleet` names a topology file: what tells
/// the rail map, health and doctor which rails this host has. An unreadable or malformed
/// file is an error naming it. Read as the agent's map reads it (within its bound).
pub fn topology_rows(
    fleet: Option<&FleetConfig>,
    host: &str,
) -> Result<Option<Vec<RailRow>>, String> {
    let Some(path) = fleet.and_then(|f| f.topology.as_deref()) else {
        return Ok(None);
    };
    let topo = read_file(path).map_err(|e| format!("[fleet] topology: {e}"))?;
    Ok(Some(rails::rail_rows(topo.nics_of(host))))
}

/// Refreshes the LLDP rows may miss a rail before its last row is dropped (a port flap,
/// an lldpd or switch restart: the NIC stays in the map meanwhile).
const LLDP_GRACE: u32 = 3;

/// How often the ports are looked at between refreshes (in the inventory the agent's
/// discovery keeps, nothing read): a port whose addresses changed (a rail's address
/// configured after the agent started) is given its rail then, not at the next refresh.
const PORTS_LOOK: Duration = Duration::from_secs(5);

/// This host, as the map runner takes it.
#[derive(Debug, Clone)]
pub struct ThisHost {
    /// Its name in the fleet's map.
    pub name: String,
    /// The sysfs tree its ports are read under (the rail map reads their PCI functions).
    pub sysfs_root: PathBuf,
    /// The ports the probe plugin's instances probe from ([`rails::probed_rails`]).
    pub specs: Vec<Option<String>>,
}

/// What the runner keeps between refreshes: a failure keeps the last good value.
#[derive(Default)]
struct Kept {
    inv: Option<Inventory>,
    /// The ports and their addresses in `inv` ([`rails::ports_key`]).
    key: Vec<(String, u32, Vec<IpAddr>)>,
    /// The probed rails' addresses, each with its port.
    local: BTreeMap<IpAddr, Probing>,
    /// This host's rows, with the refreshes LLDP has missed each.
    own: Vec<(Nic, u32)>,
    /// This host's rows of `[fleet] topology` as last read: the rail map LLDP's rows take
    /// their rails from.
    file_rows: Option<Vec<RailRow>>,
    map: Option<Topology>,
}

impl Kept {
    fn take_inventory(&mut self, inv: Inventory) {
        self.key = rails::ports_key(&inv);
        self.inv = Some(inv);
    }
}

/// This host's rows from LLDP: each port at its rail in the rail map (by the rows of
/// `[fleet] topology` when one is configured, else by PCI address order: what `rocewatch
/// fleet topology` prints), and the rails seen before but missed now kept for
/// [`LLDP_GRACE`] refreshes (a look between refreshes, `refreshed` false, ages none).
fn lldp_own(
    cfg: &FleetConfig,
    this: &ThisHost,
    kept: &mut Kept,
    refreshed: bool,
    notes: &mut Vec<String>,
) {
    let Some(inv) = &kept.inv else {
        notes.push("no inventory yet: LLDP rows need this host's ports".into());
        return;
    };
    if cfg.topology.is_some() && kept.file_rows.is_none() {
        notes.push("LLDP rows wait for this host's rows of [fleet] topology (their rails)".into());
        return;
    }
    let rail_map = SysRoot::new(&this.sysfs_root).rail_map(inv, kept.file_rows.as_deref());
    let ports = rails::lldp_ports(&rail_map);
    let host = this.name.as_str();
    let (rows, left) = match lldp_neighbours(&cfg.lldpcli) {
        Ok(n) => rocewatch_fleet::lldp::rows_at(host, ports.iter().map(|(r, p)| (*r, p)), &n),
        Err(e) => {
            notes.push(format!("{e}; this host's last rows stay"));
            return;
        }
    };
    notes.extend(rail_map.ports.iter().filter(|p| p.rail.is_none()).map(|p| {
        format!(
            "{}: none of its addresses is a row of host {host} in [fleet] topology: no LLDP row",
            p.name()
        )
    }));
    notes.extend(
        left.iter()
            .map(|LeftOut { rail, name, why }| format!("rail {rail} ({name}): {why}")),
    );
    let mut own: Vec<(Nic, u32)> = rows.into_iter().map(|n| (n, 0)).collect();
    let age = u32::from(refreshed);
    for (n, missed) in &kept.own {
        if !own.iter().any(|(o, _)| o.rail == n.rail) && missed + age < LLDP_GRACE {
            own.push((n.clone(), missed + age));
        }
    }
    own.sort_by_key(|(n, _)| n.rail);
    kept.own = own;
}

/// The map from the backend: every host's NICs but this one's, which are its own rows.
fn backend_map(
    cfg: &FleetConfig,
    host: &str,
    own: &[Nic],
    notes: &mut Vec<String>,
) -> Result<Topology, String> {
    let url = cfg.url.as_deref().ok_or("no url")?;
    let (nics, left) = fetch_prometheus(url, &cfg.query, Duration::from_secs(10))?;
    if let Some(first) = left.first() {
        notes.push(format!(
            "series of the backend left out, the first: {first}"
        ));
    }
    with_own(nics, host, own, notes)
}

/// `nics` with this host's own rows in place of the ones they give for it. NICs that
/// claim another's address are left out (this host's own always stay).
fn with_own(
    mut nics: Vec<Nic>,
    host: &str,
    own: &[Nic],
    notes: &mut Vec<String>,
) -> Result<Topology, String> {
    nics.retain(|n| n.host != host);
    let mut by_addr: BTreeMap<IpAddr, usize> = BTreeMap::new();
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
fn refresh(cfg: &FleetConfig, this: &ThisHost, kept: &mut Kept, notes: &mut Vec<String>) {
    let host = this.name.as_str();
    let file = cfg.topology.as_deref().map(read_file);
    if let Some(Ok(t)) = &file {
        kept.file_rows = Some(rails::rail_rows(t.nics_of(host)));
    }
    if cfg.lldp {
        lldp_own(cfg, this, kept, true, notes);
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

/// A look at this host's ports between refreshes (blocking: lldpcli), when they changed:
/// LLDP's rows again and, with the backend's map, this host's rows in the map kept; the
/// map is not read again (the file's rows of this host do not depend on its ports).
fn relook(cfg: &FleetConfig, this: &ThisHost, kept: &mut Kept, notes: &mut Vec<String>) {
    if !cfg.lldp {
        return;
    }
    lldp_own(cfg, this, kept, false, notes);
    if cfg.source != FleetSource::Prometheus {
        return;
    }
    let own: Vec<Nic> = kept.own.iter().map(|(n, _)| n.clone()).collect();
    if let Some(map) = &kept.map {
        match with_own(map.nics().to_vec(), &this.name, &own, notes) {
            Ok(t) => kept.map = Some(t),
            Err(e) => notes.push(format!("{e}; the last map stays in use")),
        }
    }
}

/// The rails probed: this host's rows of the map tell the rail map each port's rail
/// (`rocewatch_sysfs::railmap`, what `env`, `fleet topology`, preflight and doctor read),
/// each probed from its port when an instance serves it. None found: the last stay.
fn probed(this: &ThisHost, kept: &mut Kept, notes: &mut Vec<String>) {
    let (Some(inv), Some(map)) = (&kept.inv, &kept.map) else {
        return;
    };
    let rows = rails::rail_rows(map.nics_of(&this.name));
    if rows.is_empty() {
        return; // the view says this host is not in the map
    }
    let rail_map = SysRoot::new(&this.sysfs_root).rail_map(inv, Some(&rows));
    let local = rails::probed_rails(&rail_map, &rows, inv, &this.specs);
    if local.is_empty() {
        let named: Vec<&str> = this
            .specs
            .iter()
            .map(|s| s.as_deref().unwrap_or("the first device"))
            .collect();
        notes.push(format!(
            "none of this host's rails is on a port probed from ({}): {}",
            named.join(", "),
            rail_map.line()
        ));
    } else {
        kept.local = local;
    }
}

/// A note as the log remembers it: without its numbers, so that a count that moves
/// does not log the same condition again.
fn note_key(n: &str) -> String {
    n.chars().filter(|c| !c.is_ascii_digit()).collect()
}

/// What [`run`] hands on after each look: the notes logged when new, this host's rows
/// exported, the view sent to the prober when it changed.
struct Outlet {
    cfg: FleetConfig,
    host: String,
    pipeline: Arc<Pipeline>,
    views: watch::Sender<Option<Arc<FleetView>>>,
    /// The notes of the last look, as [`note_key`] keeps them.
    said: BTreeSet<String>,
}

impl Outlet {
    fn publish(&mut self, k: &Kept, mut notes: Vec<String>) {
        let host = &self.host;
        // No view until the probed ports' rails are known: probing a rail's peers from
        // another port would count as loss.
        let view = match (&k.map, k.local.is_empty()) {
            (Some(map), false) => match view_of(map, host, self.cfg.options(), &k.local) {
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
            if !self.said.contains(&note_key(n)) {
                tracing::warn!("fleet: {n}");
            }
        }
        if keys.is_empty() && !self.said.is_empty() {
            tracing::info!("fleet: the map and this host's rows are read again");
        }
        self.said = keys;
        let own: Vec<Nic> = k.own.iter().map(|(n, _)| n.clone()).collect();
        self.pipeline.ingest_at(
            PLUGIN,
            &info_samples(&own),
            SystemTime::now(),
            Instant::now(),
        );
        let Some((view, nics)) = view else {
            return;
        };
        self.views.send_if_modified(|v| {
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
}

/// Run `look` (a refresh or a relook, then the rails probed) off the runtime's threads.
async fn blocking(
    cfg: &FleetConfig,
    this: &ThisHost,
    mut k: Kept,
    full: bool,
) -> Result<(Kept, Vec<String>), tokio::task::JoinError> {
    let (c, t) = (cfg.clone(), this.clone());
    tokio::task::spawn_blocking(move || {
        let mut notes = Vec::new();
        if full {
            refresh(&c, &t, &mut k, &mut notes);
        } else {
            relook(&c, &t, &mut k, &mut notes);
        }
        probed(&t, &mut k, &mut notes);
        (k, notes)
    })
    .await
}

/// Refresh the map every `cfg.refresh` (spread over the fleet: each host waits between
/// 0.9 and 1.1 of it, by its name) until `stop`: export this host's rows, and send the
/// prober its view when it changed. Between refreshes, every [`PORTS_LOOK`], the ports of
/// the inventory the agent's discovery keeps: when their addresses changed, the rails
/// probed are told again then (the map is not read again).
pub async fn run(
    cfg: FleetConfig,
    this: ThisHost,
    discovery: Arc<Discovery>,
    pipeline: Arc<Pipeline>,
    views: watch::Sender<Option<Arc<FleetView>>>,
    mut stop: watch::Receiver<bool>,
) {
    let spread = 0.9
        + 0.2 * (rocewatch_fleet::pinglist::score(&[&this.name, "refresh"]) % 1000) as f64 / 1000.0;
    let pause = cfg.refresh.mul_f64(spread);
    let mut out = Outlet {
        cfg: cfg.clone(),
        host: this.name.clone(),
        pipeline,
        views,
        said: BTreeSet::new(),
    };
    let mut kept = Some(Kept::default());
    let mut full = true;
    let mut next = tokio::time::Instant::now();
    loop {
        let mut k = kept.take().expect("put back after each look");
        let mut notes = Vec::new();
        if full {
            match discovery.discover().await {
                Ok(inv) => k.take_inventory(inv),
                Err(e) => notes.push(format!("discovering this host's ports: {e}")),
            }
        }
        let look = blocking(&cfg, &this, k, full);
        let (k, more) = tokio::select! {
            r = look => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("fleet: the refresh failed: {e}; the map is no longer read");
                    return;
                }
            },
            _ = stop.changed() => return,
        };
        notes.extend(more);
        out.publish(&k, notes);
        if full {
            next = tokio::time::Instant::now() + pause;
        }
        // Until the next refresh, or until the ports' addresses change.
        let changed = loop {
            let at = next.min(tokio::time::Instant::now() + PORTS_LOOK);
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = stop.changed() => return,
            }
            if tokio::time::Instant::now() >= next {
                break None;
            }
            let inv = discovery.latest();
            if rails::ports_key(&inv) != k.key {
                break Some(inv);
            }
        };
        let mut k = k;
        full = changed.is_none();
        if let Some(inv) = changed {
            tracing::info!(
                "fleet: this host's ports or their addresses changed: their rails are told again"
            );
            k.take_inventory(inv);
        }
        kept = Some(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This host's rows replace the ones the map gives it (what a look between refreshes
    /// does with the map in hand); another host's NIC that claims one of its addresses is
    /// left out, named.
    #[test]
    fn this_hosts_own_rows_replace_its_rows_in_the_map() {
        let nic = |host: &str, rail: u8, addr: &str| Nic {
            host: host.into(),
            rail,
            addr: addr.parse().unwrap(),
            tor: format!("leaf-{rail}"),
            tor_port: None,
        };
        let map = Topology::from_nics(vec![
            nic("a", 0, "10.0.0.1"),
            nic("b", 0, "10.0.0.2"),
            nic("c", 1, "10.1.0.1"),
        ])
        .unwrap();
        // a's rail 1 came: its address is the one c's stale row claims.
        let own = [nic("a", 0, "10.0.0.1"), nic("a", 1, "10.1.0.1")];
        let mut notes = Vec::new();
        let t = with_own(map.nics().to_vec(), "a", &own, &mut notes).unwrap();
        assert_eq!(t.nics_of("a").cloned().collect::<Vec<_>>(), own);
        assert_eq!(t.hosts(), ["a", "b"]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("10.1.0.1") && notes[0].contains("c rail 1"));
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
