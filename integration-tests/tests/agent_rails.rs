//! The agent's rails are the rail map's (issue 50): the running agent's fleet map takes
//! each rail's port from `rocewatch_sysfs::railmap`, the map `rocewatch env` and
//! `rocewatch fleet topology` print, so that on the generated eight-rail host with NIC 3
//! gone from the bus (`fixtures/eight-rails-one-gone`: the later RDMA devices took lower
//! names) the agent probes each rail from the port those commands give it and exports the
//! rows LLDP gives at the same rails. And a rail whose address is configured after the
//! agent started is probed within seconds of the agent's discovery seeing it, not at the
//! next `[fleet] refresh`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fleet_rails::start_agent;
use crate::support::*;

/// The fleet topology of the eight-rail trees (gpu001 and gpu002 under one leaf a rail).
fn topology(case: &str) -> PathBuf {
    fixture(case).parent().unwrap().join("topology.csv")
}

/// An LLDP neighbour on every netdev of `root` (lldpcli's json0), written to `dir`, and
/// an lldpcli that prints it: (the JSON file, the lldpcli).
fn lldp(root: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let json = dir.join("lldp.json");
    crate::rail_map::write_lldp_json(root, &json);
    let tool = dir.join("lldpcli");
    std::fs::write(&tool, format!("#!/bin/sh\ncat {:?}\n", json)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    (json, tool)
}

/// The agent's configuration: this host gpu001 of `topo`, probing through fake-probe,
/// with `fleet` and `agent` lines added to their sections.
fn config(dir: &Path, root: &Path, topo: &Path, agent: &str, fleet: &str) -> PathBuf {
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {root:?}\ninterval = \"1s\"\n{agent}\n\n[fleet]\ntopology = {topo:?}\nhost = \"gpu001\"\npaths = 1\n{fleet}\n\n[probes]\nplugin = {:?}\ninterval = \"100ms\"\ntimeout = \"50ms\"\nserve = false\n",
            artifacts().fake_probe_so,
        ),
    )
    .unwrap();
    cfg
}

/// Rail → the port its peer (gpu002's `10.1.R.1`) was probed from, as fake-probe
/// recorded it (`PORT PEER ...` a line).
fn probed_rails(record: &Path) -> BTreeMap<usize, String> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let port = f.next()?.to_string();
            let rail = f.next()?.strip_prefix("10.1.")?.strip_suffix(".1")?;
            Some((rail.parse().ok()?, port))
        })
        .collect()
}

/// Rail → (port, address), as `rocewatch env --json` gives the rail map.
fn env_rails(cfg: &Path) -> BTreeMap<usize, (String, String)> {
    let o = rocewatch(&["env", "--json", "--config", cfg.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    j["rails"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["rail"].is_null())
        .map(|p| {
            let name = format!("{}:{}", p["device"].as_str().unwrap(), p["port"]);
            let addr = p["addrs"][0].as_str().unwrap().to_string();
            (p["rail"].as_u64().unwrap() as usize, (name, addr))
        })
        .collect()
}

/// Rail → (address, ToR) of `host,rail,addr,tor,tor_port` lines.
fn csv_rails(text: &str) -> BTreeMap<usize, (String, String)> {
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[1].parse().unwrap(), (f[2].to_string(), f[3].to_string()))
        })
        .collect()
}

/// Rail → (address, ToR) of the agent's `rdma_fleet_nic_info` series.
fn exported_rails(text: &str) -> BTreeMap<usize, (String, String)> {
    let label = |labels: &str, k: &str| -> String {
        let at = labels.find(&format!("{k}=\"")).unwrap() + k.len() + 2;
        labels[at..].split('"').next().unwrap().to_string()
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("rdma_fleet_nic_info{"))
        .map(|l| {
            let rail = label(l, "rail").parse().unwrap();
            (rail, (label(l, "address"), label(l, "tor")))
        })
        .collect()
}

/// Wait up to `within` for `f` to give what it should.
fn until<T: PartialEq>(within: Duration, want: &T, mut f: impl FnMut() -> T) -> T {
    let end = Instant::now() + within;
    loop {
        let seen = f();
        if seen == *want || Instant::now() >= end {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// NIC 3 gone from the bus, the later devices one name lower: the agent probes rail R's
/// peer from the port `env`'s rail map puts rail R on (rail 4 from mlx5_3, rail 3 from
/// none), and the rows it exports from LLDP are `fleet topology`'s, at the same rails.
#[test]
fn the_agent_probes_and_exports_the_rails_of_the_rail_map_with_a_nic_gone() {
    let case = "eight-rails-one-gone";
    let dir = tempfile::tempdir().unwrap();
    let root = fixture(case);
    let (json, lldpcli) = lldp(&root, dir.path());
    let fleet = format!("lldp = true\nlldpcli = {lldpcli:?}");
    let cfg = config(dir.path(), &root, &topology(case), "", &fleet);

    let env = env_rails(&cfg);
    assert_eq!(env.len(), 7, "{env:?}");
    assert!(!env.contains_key(&3), "{env:?}");
    assert_eq!(env[&4].0, "mlx5_3:1", "{env:?}");
    let o = rocewatch(
        &[
            "fleet",
            "topology",
            "--no-header",
            "--lldp-json",
            json.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let fleet_topology = csv_rails(&stdout(&o));
    let addrs: BTreeMap<usize, String> = env.iter().map(|(r, (_, a))| (*r, a.clone())).collect();
    let topo_addrs: BTreeMap<usize, String> = fleet_topology
        .iter()
        .map(|(r, (a, _))| (*r, a.clone()))
        .collect();
    assert_eq!(topo_addrs, addrs, "fleet topology and env");

    let record = dir.path().join("probes.log");
    let agent = start_agent(&cfg, &record);
    let want: BTreeMap<usize, String> = env.iter().map(|(r, (p, _))| (*r, p.clone())).collect();
    let seen = until(Duration::from_secs(10), &want, || probed_rails(&record));
    let url = format!("{}/metrics", agent.prometheus_url());
    let (_, text) = crate::prometheus::get(&url, None).unwrap();
    let ctx = format!("{text}\n--- agent log\n{}", agent.stderr());
    assert_eq!(seen, want, "the agent's rails and env's\n{ctx}");
    assert_eq!(
        exported_rails(&text),
        fleet_topology,
        "the agent's LLDP rows and fleet topology's\n{ctx}"
    );
    assert!(
        text.contains(r#"rdma_probe_peers{rdma_probe_state="other_rail"} 1"#),
        "rail 3's peer is not probed\n{ctx}"
    );
}

/// The eight-rail host with rail 5's address not configured yet (its RoCE v2 GID empty,
/// as drivers/infiniband/core/sysfs.c shows an unused entry) when the agent starts, and
/// `[fleet] refresh` an hour: once it is configured, rail 5 is probed from mlx5_5 within
/// seconds (the agent's discovery, every second here, sees the port's new address).
#[test]
fn a_rail_whose_address_comes_late_is_probed_before_the_next_refresh() {
    let case = "eight-rails";
    let dir = tempfile::tempdir().unwrap();
    let root = crate::rail_map::copy_of(case, dir.path());
    let port = root.join("class/infiniband/mlx5_5/ports/1");
    let saved: Vec<(PathBuf, String)> = ["gids/0", "gid_attrs/types/0", "gid_attrs/ndevs/0"]
        .iter()
        .map(|f| {
            let p = port.join(f);
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect();
    std::fs::write(
        port.join("gids/0"),
        "0000:0000:0000:0000:0000:0000:0000:0000\n",
    )
    .unwrap();
    for (p, _) in &saved[1..] {
        std::fs::remove_file(p).unwrap();
    }
    let cfg = config(
        dir.path(),
        &root,
        &topology(case),
        "discovery_interval = \"1s\"",
        "refresh = \"1h\"",
    );
    let record = dir.path().join("probes.log");
    let agent = start_agent(&cfg, &record);
    let all: BTreeMap<usize, String> = (0..8).map(|r| (r, format!("mlx5_{r}:1"))).collect();
    let mut early = all.clone();
    early.remove(&5);
    let seen = until(Duration::from_secs(10), &early, || probed_rails(&record));
    assert_eq!(seen, early, "--- agent log\n{}", agent.stderr());

    for (p, text) in &saved {
        std::fs::write(p, text).unwrap();
    }
    let configured = Instant::now();
    let seen = until(Duration::from_secs(15), &all, || probed_rails(&record));
    assert_eq!(
        seen,
        all,
        "rail 5 not probed {:?} after its address came\n--- agent log\n{}",
        configured.elapsed(),
        agent.stderr()
    );
}
