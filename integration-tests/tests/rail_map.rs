//! One rail map (issue 50): `rocewatch env`, `rocewatch fleet topology`, `rocewatch
//! preflight --plan` and `rocewatch doctor` read this host's rails from one reader
//! (`rocewatch_sysfs::railmap`) and agree, on the generated eight-rail host
//! (`fixtures/eight-rails`) and on the same host with NIC 3 gone from the bus
//! (`fixtures/eight-rails-one-gone`, where the later RDMA devices take lower names): with
//! the fleet topology configured the other rails keep their numbers in every command.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

/// A configuration naming the tree's topology file, this host gpu001.
fn config(dir: &Path, case: &str) -> PathBuf {
    let topology = fixture(case).parent().unwrap().join("topology.csv");
    let path = dir.join(format!("{case}.toml"));
    std::fs::write(
        &path,
        format!(
            "[fleet]\ntopology = {:?}\nhost = \"gpu001\"\n",
            topology.to_str().unwrap()
        ),
    )
    .unwrap();
    path
}

/// Run a command on `case` with `cfg` (when given); its stdout, which must succeed.
fn run(case: &str, cfg: Option<&Path>, args: &[&str]) -> String {
    let root = fixture(case);
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--sysfs-root", root.to_str().unwrap()]);
    if let Some(c) = cfg {
        all.extend(["--config", c.to_str().unwrap()]);
    }
    let o = rocewatch(&all, &[]);
    assert!(
        o.status.code().is_some_and(|c| c <= 1),
        "{all:?}: {:?}\n{}",
        o.status,
        stderr(&o)
    );
    stdout(&o)
}

/// Rail → (port, address) as each command tells it.
type Rails = BTreeMap<usize, (String, String)>;

fn env_rails(case: &str, cfg: Option<&Path>) -> Rails {
    let j: Value = serde_json::from_str(&run(case, cfg, &["env", "--json"])).unwrap();
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

fn preflight_rails(case: &str, cfg: Option<&Path>) -> Rails {
    let args = [
        "preflight",
        "--host-list",
        "gpu001,gpu002",
        "--this-host",
        "gpu001",
        "--plan",
        "--json",
    ];
    let j: Value = serde_json::from_str(&run(case, cfg, &args)).unwrap();
    j["rails"]["nics"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, n)| !n["netdev"].is_null())
        .map(|(k, n)| {
            let addr = n["addr"].as_str().unwrap().to_string();
            (k, (n["name"].as_str().unwrap().to_string(), addr))
        })
        .collect()
}

/// `fleet topology` with an LLDP neighbour on every netdev of the tree.
fn fleet_rails(case: &str, cfg: Option<&Path>, dir: &Path, names: &Rails) -> Rails {
    let root = fixture(case).join("class/net");
    let mut netdevs: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    netdevs.sort();
    let ifaces: Vec<Value> = netdevs
        .iter()
        .map(|nd| {
            serde_json::json!({"name": nd, "chassis": [{"name": [{"value": format!("leaf-{nd}")}]}],
                "port": [{"id": [{"type": "ifname", "value": "Ethernet1/1"}]}]})
        })
        .collect();
    let lldp = dir.join(format!("{case}-lldp.json"));
    std::fs::write(
        &lldp,
        serde_json::json!({"lldp": [{"interface": ifaces}]}).to_string(),
    )
    .unwrap();
    let args = [
        "fleet",
        "topology",
        "--host",
        "gpu001",
        "--no-header",
        "--lldp-json",
        lldp.to_str().unwrap(),
    ];
    let by_addr: BTreeMap<&str, &str> = names
        .values()
        .map(|(n, a)| (a.as_str(), n.as_str()))
        .collect();
    run(case, cfg, &args)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let name = by_addr.get(f[2]).copied().unwrap_or("?").to_string();
            (f[1].parse().unwrap(), (name, f[2].to_string()))
        })
        .collect()
}

/// Doctor's `rails` line: `rail 0 mlx5_0:1, rail 1 mlx5_1:1, rail 3 missing (10.0.3.1);
/// rails told by ...`.
fn doctor_rails(case: &str, cfg: Option<&Path>, names: &Rails) -> Rails {
    let j: Value =
        serde_json::from_str(&run(case, cfg, &["doctor", "--json", "--window", "100ms"])).unwrap();
    let c = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "rails" && c["subject"] == "")
        .unwrap_or_else(|| panic!("no rails check: {j}"));
    let line = c["evidence"].as_str().unwrap();
    let list = line.split_once("; ").unwrap().0;
    let addr_of: BTreeMap<&str, &str> = names
        .values()
        .map(|(n, a)| (n.as_str(), a.as_str()))
        .collect();
    list.split(", ")
        .filter(|p| !p.contains("missing"))
        .map(|p| {
            let mut w = p.split(' ');
            assert_eq!(w.next(), Some("rail"), "{line}");
            let rail = w.next().unwrap().parse().unwrap();
            let name = w.next().unwrap().to_string();
            let addr = addr_of
                .get(name.as_str())
                .copied()
                .unwrap_or("?")
                .to_string();
            (rail, (name, addr))
        })
        .collect()
}

/// Every command's map of `case`, which must be one map.
fn agreed(case: &str, cfg: Option<&Path>, dir: &Path) -> Rails {
    let env = env_rails(case, cfg);
    assert!(!env.is_empty(), "{case}: env gives no rails");
    let preflight = preflight_rails(case, cfg);
    let fleet = fleet_rails(case, cfg, dir, &env);
    let doctor = doctor_rails(case, cfg, &env);
    for (what, other) in [
        ("preflight", &preflight),
        ("fleet topology", &fleet),
        ("doctor", &doctor),
    ] {
        assert_eq!(&env, other, "{case}: env and {what} disagree");
    }
    env
}

#[test]
fn every_command_reads_one_rail_map_and_a_gone_nic_renumbers_none() {
    let dir = tempfile::tempdir().unwrap();
    let all_cfg = config(dir.path(), "eight-rails");
    let all = agreed("eight-rails", Some(&all_cfg), dir.path());
    assert_eq!(all.len(), 8, "{all:?}");
    for (rail, (_, addr)) in &all {
        assert_eq!(addr, &format!("10.0.{rail}.1"), "the topology's row");
    }
    // Without a topology: PCI address order, the same eight here.
    assert_eq!(agreed("eight-rails", None, dir.path()), all);

    let gone_cfg = config(dir.path(), "eight-rails-one-gone");
    let gone = agreed("eight-rails-one-gone", Some(&gone_cfg), dir.path());
    let mut want: BTreeMap<usize, String> = all.iter().map(|(r, (_, a))| (*r, a.clone())).collect();
    want.remove(&3);
    let have: BTreeMap<usize, String> = gone.iter().map(|(r, (_, a))| (*r, a.clone())).collect();
    assert_eq!(have, want, "every rail but 3 where it was: {gone:?}");
    // The names moved (mlx5_4 is mlx5_3 now); the rails did not.
    assert_eq!(gone[&4].0, "mlx5_3:1");
    // Env says the rail is missing; doctor fails it.
    let j: Value = serde_json::from_str(&run(
        "eight-rails-one-gone",
        Some(&gone_cfg),
        &["env", "--json"],
    ))
    .unwrap();
    assert_eq!(j["rails"]["missing"][0]["rail"], 3, "{j}");
    assert_eq!(j["rails"]["by"], "topology", "{j}");
}
