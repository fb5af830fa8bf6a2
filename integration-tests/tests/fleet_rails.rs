//! The agent probes every rail (issue 50): on a generated host of eight RoCE NICs, with
//! `[fleet]` and no `probes.device`, each rail of the pinglist is probed from its own
//! NIC (a probe plugin instance per port: fake-probe records the device and port of its
//! options with every target), the eight instances in the same rounds, and all of them
//! together within `probes.max_rate`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// Rails of the generated host.
const RAILS: u8 = 8;

fn put(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("{text}\n")).unwrap();
}

/// A sysfs tree of `RAILS` mlx5 devices of one RoCE port each, the port of `mlx5_R`
/// carrying the RoCE v2 GID of 10.R.0.1 (an IPv4-mapped GID, as the kernel writes it:
/// `gids/N`, `gid_attrs/types/N`, `gid_attrs/ndevs/N`, drivers/infiniband/core/sysfs.c),
/// except the rails of `unaddressed`, whose GID 0 is all zeros (no address yet).
fn eight_nic_tree(root: &Path, unaddressed: &[u8]) {
    for r in 0..RAILS {
        let dev = root.join(format!("class/infiniband/mlx5_{r}"));
        put(&dev.join("node_guid"), &format!("b859:9f03:0000:{r:04x}"));
        put(&dev.join("fw_ver"), "28.39.1002");
        put(&dev.join("hca_type"), "MT4129");
        put(&dev.join("node_type"), "1: CA");
        let port = dev.join("ports/1");
        put(&port.join("state"), "4: ACTIVE");
        put(&port.join("phys_state"), "5: LinkUp");
        put(&port.join("link_layer"), "Ethernet");
        put(&port.join("rate"), "400 Gb/sec (4X NDR)");
        put(&port.join("lid"), "0x0");
        if unaddressed.contains(&r) {
            put(
                &port.join("gids/0"),
                "0000:0000:0000:0000:0000:0000:0000:0000",
            );
        } else {
            give_address(root, r);
        }
        let nd = root.join(format!("class/net/eth{r}"));
        put(&nd.join("mtu"), "9000");
        put(&nd.join("operstate"), "up");
    }
}

/// Rail `r`'s port gets its RoCE v2 GID of 10.R.0.1 on eth`r`.
fn give_address(root: &Path, r: u8) {
    let port = root.join(format!("class/infiniband/mlx5_{r}/ports/1"));
    put(
        &port.join("gids/0"),
        &format!("0000:0000:0000:0000:0000:ffff:0a{r:02x}:0001"),
    );
    put(&port.join("gid_attrs/types/0"), "RoCE v2");
    put(&port.join("gid_attrs/ndevs/0"), &format!("eth{r}"));
}

/// Hosts a and b under one ToR per rail, c under another: a probes b (its ToR mesh) and
/// c (across ToRs) on every rail, from its NIC of that rail.
fn topology() -> String {
    let mut t = String::from("host,rail,addr,tor\n");
    for r in 0..RAILS {
        t += &format!("a,{r},10.{r}.0.1,leaf-{r}\n");
        t += &format!("b,{r},10.{r}.0.2,leaf-{r}\n");
        t += &format!("c,{r},10.{r}.1.3,leaf-{r}-x\n");
    }
    t
}

/// One recorded target: the instance's port, the peer, the time (ms).
struct Probe {
    port: String,
    peer: String,
    at: u64,
}

fn records(file: &Path) -> Vec<Probe> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some(Probe {
                port: f.first()?.to_string(),
                peer: f.get(1)?.to_string(),
                at: f.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

/// The peers each instance (by its port) probed.
fn by_port(probes: &[Probe]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in probes {
        out.entry(p.port.clone())
            .or_default()
            .insert(p.peer.clone());
    }
    out
}

/// The agent with `cfg`, fake-probe recording to `record`.
pub(crate) fn start_agent(cfg: &Path, record: &Path) -> RunningAgent {
    RunningAgent::start_with(
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--prometheus-listen",
            "127.0.0.1:0",
        ],
        &[("ROCEWATCH_FAKE_PROBE_RECORD", record.to_str().unwrap())],
        None,
    )
}

/// The agent with `cfg`, fake-probe recording to `record`, for `secs`: its `/metrics`,
/// and that with its log for a failure's message.
fn run_agent(cfg: &Path, record: &Path, secs: Duration) -> (String, String) {
    let agent = start_agent(cfg, record);
    std::thread::sleep(secs);
    let url = format!("{}/metrics", agent.prometheus_url());
    let (_, text) = crate::prometheus::get(&url, None).unwrap();
    let ctx = format!("{text}\n--- agent log\n{}", agent.stderr());
    (text, ctx)
}

/// Every rail from its own NIC: the peers of 10.R.x.x only from mlx5_R port 1.
fn each_rail_from_its_nic() -> BTreeMap<String, BTreeSet<String>> {
    (0..RAILS)
        .map(|r| {
            (
                format!("mlx5_{r}:1"),
                [format!("10.{r}.0.2"), format!("10.{r}.1.3")].into(),
            )
        })
        .collect()
}

#[test]
fn every_rail_is_probed_from_its_own_nic_within_one_rate_budget() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    eight_nic_tree(&sys, &[]);
    let topo = dir.path().join("fleet.csv");
    std::fs::write(&topo, topology()).unwrap();
    let record = dir.path().join("probes.log");
    // 8 rails x 2 peers x 2 paths = 32 flows; at 64 probes a second in all, a round every
    // 0.5 s (asked: 0.1 s).
    let max_rate = 64.0;
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {sys:?}\ninterval = \"1s\"\n\n[fleet]\ntopology = {topo:?}\nhost = \"a\"\npaths = 2\n\n[probes]\nplugin = {:?}\ninterval = \"100ms\"\ntimeout = \"50ms\"\nmax_rate = {max_rate:?}\nserve = false\n",
            artifacts().fake_probe_so,
        ),
    )
    .unwrap();
    let (text, ctx) = run_agent(&cfg, &record, Duration::from_secs(5));
    let probes = records(&record);
    let by_port = by_port(&probes);
    assert_eq!(by_port, each_rail_from_its_nic(), "{ctx}");
    assert!(
        text.contains(r#"rdma_probe_peers{rdma_probe_state="probed"} 16"#),
        "{ctx}"
    );
    assert!(
        text.contains(r#"rdma_probe_peers{rdma_probe_state="other_rail"} 0"#),
        "{ctx}"
    );

    // The rails in the same rounds: each round's eight instances start within 200 ms.
    let starts: BTreeMap<String, Vec<u64>> = probes.iter().fold(BTreeMap::new(), |mut m, p| {
        let v: &mut Vec<u64> = m.entry(p.port.clone()).or_default();
        if v.last() != Some(&p.at) {
            v.push(p.at);
        }
        m
    });
    let rounds = starts.values().map(Vec::len).min().unwrap_or(0);
    assert!(rounds >= 4, "{rounds} rounds in 5 s\n{starts:?}\n{ctx}");
    for k in 0..rounds {
        let at: Vec<u64> = starts.values().map(|v| v[k]).collect();
        let spread = at.iter().max().unwrap() - at.iter().min().unwrap();
        assert!(spread < 200, "round {k}: {at:?}\n{ctx}");
    }

    // One budget for the host: all instances together within max_rate (one round of
    // slack for the window's edges), each rail at the same interval.
    let (first, last) = (probes[0].at, probes[probes.len() - 1].at);
    let secs = (last - first) as f64 / 1000.0;
    let allowed = max_rate * secs + 32.0;
    assert!(
        (probes.len() as f64) <= allowed,
        "{} probes in {secs} s, at most {allowed}\n{ctx}",
        probes.len()
    );
    assert!(
        text.contains("rdma_probe_interval_seconds 0.5\n"),
        "the interval stretched to 32 flows / 64 per second\n{ctx}"
    );
    let per_port: BTreeSet<usize> = by_port
        .keys()
        .map(|k| probes.iter().filter(|p| p.port == *k).count())
        .collect();
    let (lo, hi) = (per_port.first().unwrap(), per_port.last().unwrap());
    assert!(hi - lo <= 4, "rails probed unevenly: {per_port:?}\n{ctx}");
}

/// Without `[fleet]`: `[probes] device_peers` binds peers to a device; they are probed
/// from an instance on that device while the list goes from the first one. A device the
/// host does not have is refused at start, naming the key and the devices there are.
#[test]
fn device_peers_are_probed_from_their_device_and_an_unknown_device_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    eight_nic_tree(&sys, &[]);
    let record = dir.path().join("probes.log");
    let cfg = dir.path().join("agent.toml");
    let write = |device_peers: &str| {
        std::fs::write(
            &cfg,
            format!(
                "[agent]\nsysfs_root = {sys:?}\ninterval = \"1s\"\n\n[probes]\nplugin = {:?}\npeers = [\"10.0.0.2\"]\ninterval = \"200ms\"\ntimeout = \"50ms\"\nserve = false\n\n[probes.device_peers]\n{device_peers}\n",
                artifacts().fake_probe_so,
            ),
        )
        .unwrap();
    };
    write("mlx5_9 = [\"10.9.0.2\"]");
    let o = rocewatch(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--prometheus-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("probes.device_peers.mlx5_9: no RDMA device mlx5_9 on this host")
            && err.contains("mlx5_0, mlx5_1, mlx5_2"),
        "{err}"
    );

    write("mlx5_3 = [\"10.3.0.2\", \"10.3.1.3\"]\n\"mlx5_5:1\" = [\"10.5.0.2\"]");
    let (text, ctx) = run_agent(&cfg, &record, Duration::from_secs(2));
    let by_port = by_port(&records(&record));
    let want: BTreeMap<String, BTreeSet<String>> = [
        ("-:-", vec!["10.0.0.2"]),
        ("mlx5_3:-", vec!["10.3.0.2", "10.3.1.3"]),
        ("mlx5_5:1", vec!["10.5.0.2"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(by_port, want, "{ctx}");
    assert!(
        text.contains(r#"rdma_probe_sent_total{rdma_probe_peer="10.5.0.2"}"#),
        "{ctx}"
    );
}

/// Rails whose address arrives after the agent started (the rail interfaces come up
/// after the agent, as `network-online.target` does not wait for them): an instance runs
/// on every RoCE port from the start, and a rail is probed from its port once the map
/// finds its address there.
#[test]
fn a_rail_whose_address_arrives_late_is_probed_once_the_map_finds_it() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    let late = [4, 5, 6, 7];
    eight_nic_tree(&sys, &late);
    let topo = dir.path().join("fleet.csv");
    std::fs::write(&topo, topology()).unwrap();
    let record = dir.path().join("probes.log");
    let cfg = dir.path().join("agent.toml");
    // The shortest refresh there is: 10 s, 9 to 11 s by the host's name.
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {sys:?}\ninterval = \"1s\"\n\n[fleet]\ntopology = {topo:?}\nhost = \"a\"\npaths = 1\nrefresh = \"10s\"\n\n[probes]\nplugin = {:?}\ninterval = \"100ms\"\ntimeout = \"50ms\"\nserve = false\n",
            artifacts().fake_probe_so,
        ),
    )
    .unwrap();
    let agent = start_agent(&cfg, &record);
    std::thread::sleep(Duration::from_secs(2));
    let early = by_port(&records(&record));
    let ctx = || format!("--- agent log\n{}", agent.stderr());
    assert_eq!(
        early.keys().cloned().collect::<Vec<_>>(),
        ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"],
        "{}",
        ctx()
    );
    for r in late {
        give_address(&sys, r);
    }
    let want = each_rail_from_its_nic();
    let until = std::time::Instant::now() + Duration::from_secs(16);
    let seen = loop {
        let seen = by_port(&records(&record));
        if seen == want || std::time::Instant::now() >= until {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(seen, want, "{}", ctx());
    let url = format!("{}/metrics", agent.prometheus_url());
    let (_, text) = crate::prometheus::get(&url, None).unwrap();
    assert!(
        text.contains(r#"rdma_probe_peers{rdma_probe_state="probed"} 16"#)
            && text.contains(r#"rdma_probe_peers{rdma_probe_state="other_rail"} 0"#),
        "{text}\n{}",
        ctx()
    );
}
