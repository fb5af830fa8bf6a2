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

/// lldpcli's json0 output with an LLDP neighbour on every netdev of the tree at `root`
/// (switch `leaf-NETDEV`, port `Ethernet1/1`), written to `file`.
pub(crate) fn write_lldp_json(root: &Path, file: &Path) {
    let mut netdevs: Vec<String> = std::fs::read_dir(root.join("class/net"))
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
    std::fs::write(
        file,
        serde_json::json!({"lldp": [{"interface": ifaces}]}).to_string(),
    )
    .unwrap();
}

/// `fleet topology` with an LLDP neighbour on every netdev of the tree.
fn fleet_rails(case: &str, cfg: Option<&Path>, dir: &Path, names: &Rails) -> Rails {
    let lldp = dir.join(format!("{case}-lldp.json"));
    write_lldp_json(&fixture(case), &lldp);
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

/// `rocewatch health --json` and `rocewatch doctor --json` on `case`: health's exit
/// status, its report and doctor's checks.
fn health_and_doctor(case: &str, cfg: Option<&Path>) -> (i32, Value, Vec<Value>) {
    health_and_doctor_at(&fixture(case), cfg)
}

/// [`health_and_doctor`] on the tree at `root`.
fn health_and_doctor_at(root: &Path, cfg: Option<&Path>) -> (i32, Value, Vec<Value>) {
    let mut args = vec!["health", "--json", "--sysfs-root", root.to_str().unwrap()];
    if let Some(c) = cfg {
        args.extend(["--config", c.to_str().unwrap()]);
    }
    // A state directory without a quarantine, whatever this machine's holds.
    let state = fresh_state_dir();
    let o = rocewatch(&args, &[("STATE_DIRECTORY", state.to_str().unwrap())]);
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

/// `case`'s tree copied to `dir/sys` (links kept), to be altered by a test.
pub(crate) fn copy_of(case: &str, dir: &Path) -> PathBuf {
    let to = dir.join("sys");
    let o = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture(case))
        .arg(&to)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cp: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    to
}

/// A PCI function at `addr` below `parent` (a directory of the tree) with its class,
/// device ID and driver link, linked from `bus/pci/devices` (the layout of
/// Documentation/ABI/testing/sysfs-bus-pci, as the fixtures are made).
fn add_function(
    root: &Path,
    parent: &Path,
    addr: &str,
    attrs: &[(&str, &str)],
    driver: Option<&str>,
) -> PathBuf {
    let d = parent.join(addr);
    std::fs::create_dir_all(&d).unwrap();
    for (f, v) in attrs {
        std::fs::write(d.join(f), format!("{v}\n")).unwrap();
    }
    if let Some(driver) = driver {
        let drv = root.join("bus/pci/drivers").join(driver);
        std::fs::create_dir_all(&drv).unwrap();
        std::os::unix::fs::symlink(&drv, d.join("driver")).unwrap();
    }
    std::os::unix::fs::symlink(&d, root.join("bus/pci/devices").join(addr)).unwrap();
    d
}

fn with_status<'a>(h: &'a Value, check: &str, status: &str) -> Vec<&'a Value> {
    h["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check && f["status"] == status)
        .collect()
}

/// The eight-rail host with an Intel X710 (i40e, device 0x1572: no RDMA at all) and
/// the second PF of NIC 0 bound to mlx5_core without an RDMA device (a RoCE LAG: only
/// PF0 has one): healthy to health and no failure or warning to doctor, with or without
/// the topology. An mlx5 function alone without its RDMA device that no row needs: a
/// warning to both (health exits 0), naming it with the same fix.
#[test]
fn an_ethernet_function_without_rdma_no_row_needs_never_drains() {
    let dir = tempfile::tempdir().unwrap();
    let root = copy_of("eight-rails", dir.path());
    let host = root.join("devices/pci0000:00");
    let eth = |device: &'static str| {
        [
            ("class", "0x020000"),
            ("vendor", "0x8086"),
            ("device", device),
        ]
    };
    add_function(&root, &host, "0000:5e:00.0", &eth("0x1572"), Some("i40e"));
    let pf0 = std::fs::canonicalize(root.join("bus/pci/devices/0000:13:00.0")).unwrap();
    let lag = [
        ("class", "0x020000"),
        ("vendor", "0x15b3"),
        ("device", "0x1021"),
    ];
    add_function(
        &root,
        pf0.parent().unwrap(),
        "0000:13:00.1",
        &lag,
        Some("mlx5_core"),
    );
    let cfg = config(dir.path(), "eight-rails");
    for cfg in [None, Some(cfg.as_path())] {
        let (code, h, d) = health_and_doctor_at(&root, cfg);
        assert_eq!(code, 0, "{h}");
        assert!(with_status(&h, "devices", "warning").is_empty(), "{h}");
        let rails: Vec<_> = d
            .iter()
            .filter(|c| c["check"] == "rails" && c["status"] != "info")
            .collect();
        assert!(rails.is_empty(), "{rails:#?}");
    }

    add_function(&root, &host, "0000:5f:00.0", &lag, Some("mlx5_core"));
    let (code, h, d) = health_and_doctor_at(&root, None);
    assert_eq!(code, 0, "a warning does not drain: {h}");
    let warned = with_status(&h, "devices", "warning");
    assert_eq!(warned.len(), 1, "{h}");
    let doctor: Vec<_> = d
        .iter()
        .filter(|c| c["check"] == "rails" && c["status"] == "warn")
        .collect();
    assert_eq!(doctor.len(), 1, "{d:#?}");
    assert_eq!(doctor[0]["subject"], "0000:5f:00.0");
    let fix = doctor[0]["fix"].as_str().unwrap();
    assert!(fix.starts_with("modprobe mlx5_ib; "), "{fix}");
    assert!(warned[0]["what"].as_str().unwrap().ends_with(fix), "{h}");
    assert!(failed(&d, "rails").is_empty(), "{d:#?}");
}

/// `case`'s tree copied to `dir/sys` with an empty NVMe bay: root port `0000:00:05.0`
/// with x4 lanes and no link trained, nothing below it.
fn with_an_empty_bay(case: &str, dir: &Path) -> PathBuf {
    let root = copy_of(case, dir);
    let bay = [
        ("class", "0x060400"),
        ("vendor", "0x8086"),
        ("device", "0x2030"),
        ("current_link_speed", "Unknown"),
        ("current_link_width", "0"),
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("max_link_width", "4"),
    ];
    let host = root.join("devices/pci0000:00");
    add_function(&root, &host, "0000:00:05.0", &bay, None);
    root
}

/// Rail 3's NIC present with its address not configured (its RoCE v2 GID gone: the
/// zero GID in `gids/0`, no `gid_attrs/types/0`, as drivers/infiniband/core/sysfs.c
/// shows an empty entry) and an empty NVMe bay (a root port with x4 lanes, no link):
/// unhealthy to both, as "address not configured?" naming the port, not a NIC gone
/// from the bus. With rail 3's NIC gone too and the bay: both places named, none claimed.
#[test]
fn health_and_doctor_give_one_verdict_on_a_rail_address_not_configured() {
    let dir = tempfile::tempdir().unwrap();
    let root = with_an_empty_bay("eight-rails", dir.path());
    let port = root.join("class/infiniband/mlx5_3/ports/1");
    std::fs::write(
        port.join("gids/0"),
        "0000:0000:0000:0000:0000:0000:0000:0000\n",
    )
    .unwrap();
    for f in ["gid_attrs/types/0", "gid_attrs/ndevs/0"] {
        let _ = std::fs::remove_file(port.join(f));
    }
    let cfg = config(dir.path(), "eight-rails");
    let (code, h, d) = health_and_doctor_at(&root, Some(&cfg));
    assert_eq!(code, 1, "{h}");
    let found = unhealthy(&h, "devices");
    assert_eq!(found.len(), 1, "{h}");
    assert_eq!(found[0]["device"], "rail 3", "{h}");
    let what = found[0]["what"].as_str().unwrap();
    assert!(
        what.contains("address not configured?") && what.contains("mlx5_3:1"),
        "{what}"
    );
    assert!(
        !what.contains("reseat the NIC") && !what.contains("0000:00:05.0"),
        "{what}"
    );
    let doctor = failed(&d, "rails");
    assert_eq!(doctor.len(), 1, "{d:#?}");
    assert!(
        what.ends_with(doctor[0]["fix"].as_str().unwrap()),
        "{h} {d:#?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let root = with_an_empty_bay("eight-rails-one-gone", dir.path());
    let cfg = config(dir.path(), "eight-rails-one-gone");
    let (code, h, d) = health_and_doctor_at(&root, Some(&cfg));
    assert_eq!(code, 1, "{h}");
    let what = unhealthy(&h, "devices")[0]["what"].as_str().unwrap();
    assert!(
        what.contains("one of: 0000:00:05.0, 0000:41:01.0"),
        "{what}"
    );
    let doctor = failed(&d, "rails");
    assert_eq!(doctor.len(), 1, "{d:#?}");
    let evidence = doctor[0]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("0000:00:05.0, 0000:41:01.0"),
        "{evidence}"
    );
    assert!(
        !evidence.contains("no PCI function or empty slot"),
        "{evidence}"
    );
}
