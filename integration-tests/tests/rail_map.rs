//! One rail map (issue 50): `rocewatch env`, `rocewatch fleet topology`, `rocewatch
//! preflight --plan` and `rocewatch doctor` read this host's rails from one reader
//! (`rocewatch_sysfs::railmap`) and agree, on the generated eight-rail host
//! (`fixtures/eight-rails`) and on the same host with NIC 3 gone from the bus
//! (`fixtures/eight-rails-one-gone`, where the later RDMA devices take lower names): with
//! the fleet topology configured the other rails keep their numbers in every command.
//! And every NIC accounted for: `health` and `doctor` give one verdict on a NIC gone from
//! the bus (`eight-rails-one-gone`, the topology the only configuration) and on a
//! degraded switch uplink above a NIC (`eight-rails-switch-degraded`).

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

/// A state directory without a quarantine, whatever this machine's holds.
const NO_STATE: (&str, &str) = ("STATE_DIRECTORY", "/nonexistent/rocewatch-rail-map-test");

/// `rocewatch health --json` and `rocewatch doctor --json` on `case`: health's exit
/// status, its report and doctor's checks.
fn health_and_doctor(case: &str, cfg: Option<&Path>) -> (i32, Value, Vec<Value>) {
    let root = fixture(case);
    let mut args = vec!["health", "--json", "--sysfs-root", root.to_str().unwrap()];
    if let Some(c) = cfg {
        args.extend(["--config", c.to_str().unwrap()]);
    }
    let o = rocewatch(&args, &[NO_STATE]);
    let h: Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    let code = o.status.code().unwrap_or(-1);
    let mut args = vec!["doctor", "--json", "--window", "100ms"];
    args.extend(["--sysfs-root", root.to_str().unwrap()]);
    if let Some(c) = cfg {
        args.extend(["--config", c.to_str().unwrap()]);
    }
    let o = rocewatch(&args, &[]);
    let d: Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (code, h, d["checks"].as_array().unwrap().clone())
}

fn unhealthy<'a>(h: &'a Value, check: &str) -> Vec<&'a Value> {
    h["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check && f["status"] == "unhealthy")
        .collect()
}

fn failed<'a>(d: &'a [Value], check: &str) -> Vec<&'a Value> {
    d.iter()
        .filter(|c| c["check"] == check && c["status"] == "fail")
        .collect()
}

/// A NIC gone from the bus, with no configuration beyond the fleet topology: health is
/// unhealthy naming the rail and the slot's PCI address, and doctor fails the same rail
/// in the same words, with what would bring it back. With all eight present, neither.
#[test]
fn health_and_doctor_give_one_verdict_on_a_nic_gone_from_the_bus() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "eight-rails-one-gone");
    let (code, h, d) = health_and_doctor("eight-rails-one-gone", Some(&cfg));
    assert_eq!(code, 1, "{h}");
    let line = h["line"].as_str().unwrap();
    assert!(
        line.contains("rail 3") && line.contains("0000:41:01.0"),
        "the line names the rail and the slot: {line:?}"
    );
    let found = unhealthy(&h, "devices");
    assert_eq!(found.len(), 1, "{h}");
    assert_eq!(found[0]["device"], "rail 3", "{h}");
    let doctor = failed(&d, "rails");
    assert_eq!(doctor.len(), 1, "{d:#?}");
    assert_eq!(doctor[0]["subject"], "rail 3");
    let evidence = doctor[0]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("rail 3 (10.0.3.1)") && evidence.contains("0000:41:01.0"),
        "{evidence}"
    );
    // One fix, in both: health's finding ends with doctor's.
    let fix = doctor[0]["fix"].as_str().unwrap();
    assert!(fix.starts_with("echo 1 > /sys/bus/pci/rescan"), "{fix}");
    assert!(found[0]["what"].as_str().unwrap().ends_with(fix), "{h}");

    // All eight: no NIC missing to either.
    let cfg = config(dir.path(), "eight-rails");
    let (code, h, d) = health_and_doctor("eight-rails", Some(&cfg));
    assert_eq!(code, 0, "{h}");
    assert!(failed(&d, "rails").is_empty(), "{d:#?}");
    // Without the topology an empty slot is how many hosts are built: not a fault alone.
    let (code, h, _) = health_and_doctor("eight-rails-one-gone", None);
    assert!(unhealthy(&h, "devices").is_empty(), "{code}: {h}");
}

/// The switch uplink above NIC 5 trained x8 of x16 (the GPU behind that switch shares
/// it): unhealthy to health and a failure to doctor, naming the switch port, while the
/// NIC's own link is full.
#[test]
fn health_and_doctor_give_one_verdict_on_a_degraded_switch_uplink() {
    let (code, h, d) = health_and_doctor("eight-rails-switch-degraded", None);
    assert_eq!(code, 1, "{h}");
    let found = unhealthy(&h, "pcie");
    assert_eq!(found.len(), 1, "{h}");
    assert_eq!(found[0]["device"], "mlx5_5", "{h}");
    let what = found[0]["what"].as_str().unwrap();
    assert!(what.contains("0000:a0:00.0 trained at x8"), "{what}");
    let doctor = failed(&d, "pcie-upstream");
    assert_eq!(doctor.len(), 1, "{d:#?}");
    assert_eq!(doctor[0]["subject"], "mlx5_5 0000:a0:00.0");
    // In the same words.
    let evidence = doctor[0]["evidence"].as_str().unwrap();
    let link = what.strip_prefix("PCIe above it: ").unwrap();
    assert!(
        evidence.starts_with(link),
        "health {what:?}, doctor {evidence:?}"
    );
    assert!(
        failed(&d, "pcie-link").is_empty(),
        "the NIC's own link is full"
    );
    // Every other switch uplink passes.
    let passed = d
        .iter()
        .filter(|c| c["check"] == "pcie-upstream" && c["status"] == "pass")
        .count();
    assert_eq!(passed, 7, "{d:#?}");
}
