//! `rocewatch fleet plan` through the binary: a topology CSV as a CMDB exports it (extra
//! columns, quoted fields, CRLF), one host's pinglist as text and JSON, every host's with
//! the cross-ToR coverage, and errors naming the file and line.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// Three ToRs on rail 0 (3, 2 and 1 hosts), two of them on rail 1 as well.
const TOPOLOGY: &str = "host,rail,addr,tor,tor_port,serial\r\n\
gpu01,0,10.0.0.1,leaf-a,Ethernet1/1,\"SN,01\"\r\n\
gpu02,0,10.0.0.2,leaf-a,Ethernet1/2,SN02\r\n\
gpu03,0,10.0.0.3,leaf-a,Ethernet1/3,SN03\r\n\
gpu04,0,10.0.1.4,leaf-b,Ethernet1/1,SN04\r\n\
gpu05,0,10.0.1.5,leaf-b,Ethernet1/2,SN05\r\n\
gpu06,0,10.0.2.6,leaf-c,Ethernet1/1,SN06\r\n\
gpu01,1,10.1.0.1,leaf-a1,Ethernet1/1,SN01\r\n\
gpu02,1,10.1.0.2,leaf-a1,Ethernet1/2,SN02\r\n\
gpu04,1,10.1.1.4,leaf-b1,Ethernet1/1,SN04\r\n";

fn plan(topology: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["fleet", "plan", "--topology", topology.to_str().unwrap()];
    all.extend_from_slice(args);
    rocewatch(&all, &[])
}

#[test]
fn fleet_plan_prints_a_hosts_mesh_and_cross_tor_peers() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("fleet.csv");
    std::fs::write(&topo, TOPOLOGY).unwrap();

    let o = plan(&topo, &["--host", "gpu01", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["host"], "gpu01");
    assert_eq!(v["truncated"], 0);
    let peers = v["peers"].as_array().unwrap();
    let of = |rail: u64, class: &str| -> Vec<String> {
        peers
            .iter()
            .filter(|p| p["rail"] == rail && p["class"] == class)
            .map(|p| {
                format!(
                    "{}@{}",
                    p["host"].as_str().unwrap(),
                    p["tor"].as_str().unwrap()
                )
            })
            .collect()
    };
    // The mesh: every other host on its ToR, per rail.
    assert_eq!(of(0, "same_tor"), ["gpu02@leaf-a", "gpu03@leaf-a"]);
    assert_eq!(of(1, "same_tor"), ["gpu02@leaf-a1"]);
    // Cross-ToR: at most one peer in each other ToR of the rail (two of leaf-a's three
    // hosts probe each other ToR; which two is the rendezvous hash's choice).
    for p in of(0, "cross_tor") {
        assert!(p.ends_with("@leaf-b") || p.ends_with("@leaf-c"), "{p}");
    }
    let addr = peers
        .iter()
        .find(|p| p["host"] == "gpu02" && p["rail"] == 0)
        .unwrap();
    assert_eq!(addr["addr"], "10.0.0.2");

    // Text: the same list as a table.
    let o = plan(&topo, &["--host", "gpu01"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with(&format!("gpu01: {} peers (3 same ToR, ", peers.len())),
        "{text}"
    );
    assert!(text.contains("0     same_tor   gpu02"), "{text}");

    // Every host: each ordered pair of ToRs on each rail has its probers (2, or all the
    // rack has: leaf-c's one host probes leaf-a and leaf-b alone).
    let o = plan(&topo, &["--all", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["hosts"].as_array().unwrap().len(), 6);
    assert_eq!(v["coverage"]["pairs"], 6 + 2, "{:#}", v["coverage"]);
    assert_eq!(v["coverage"]["full"], 6 + 2, "{:#}", v["coverage"]);
    let gpu06 = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == "gpu06")
        .unwrap();
    let tors: Vec<&str> = gpu06["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tor"].as_str().unwrap())
        .collect();
    assert_eq!(tors, ["leaf-a", "leaf-b"]);
    let o = plan(&topo, &["--all"]);
    assert!(
        stdout(&o)
            .contains("cross-ToR coverage: 8 of 8 ordered ToR pairs × rails have their probers"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn fleet_plan_errors_name_the_file_line_and_host() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("bad.csv");
    std::fs::write(
        &topo,
        "host,rail,addr,tor\ngpu01,0,10.0.0.1,leaf-a\ngpu02,eight,10.0.0.2,leaf-a\n",
    )
    .unwrap();
    let o = plan(&topo, &["--all"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "{} line 3: rail \"eight\" is not a number from 0 to 63",
            topo.display()
        )),
        "{}",
        stderr(&o)
    );
    std::fs::write(&topo, TOPOLOGY).unwrap();
    let o = plan(&topo, &["--host", "gpu01.cluster"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o)
            .contains("gpu01.cluster is not in the topology (6 hosts there; did you mean gpu01?)"),
        "{}",
        stderr(&o)
    );
    let o = plan(&topo, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--host <NAME>|--all"), "{}", stderr(&o));
    let o = plan(&dir.path().join("missing.csv"), &["--all"]);
    assert!(stderr(&o).contains("missing.csv"), "{}", stderr(&o));
}

/// `fleet topology`: this host's lines from discovery (the fixture's two mlx5 ports, the
/// addresses of their RoCE v2 GIDs) and lldpd's JSON (a switch name with a comma and a
/// space is quoted); a port with no LLDP neighbour is named and left out (exit 1); the
/// lines read back as a topology file; an lldpcli that cannot run says what to install.
#[test]
fn fleet_topology_prints_this_hosts_lines_from_lldp() {
    let dir = tempfile::tempdir().unwrap();
    let lldp = dir.path().join("lldp.json");
    let root = fixture("mlx5-roce-dual-port");
    std::fs::write(
        &lldp,
        r#"{"lldp": [{"interface": [
          {"name": "ens1f0np0", "via": "LLDP", "rid": "1",
           "chassis": [{"id": [{"type": "mac", "value": "0c:42:a1:00:00:01"}],
                        "name": [{"value": "leaf r01, a"}]}],
           "port": [{"id": [{"type": "ifname", "value": "Ethernet1/7"}],
                     "descr": [{"value": "to gpu017"}]}]}]}]}"#,
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "fleet",
            "topology",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--this-host",
            "gpu017",
        ];
        args.extend_from_slice(extra);
        rocewatch(&args, &[])
    };
    let o = run(&["--lldp-json", lldp.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "host,rail,addr,tor,tor_port\ngpu017,0,10.0.0.1,\"leaf r01, a\",Ethernet1/7\n"
    );
    assert!(
        stderr(&o).contains("rail 1 (mlx5_1:1): left out: no LLDP neighbour on \"ens1f1np1\""),
        "{}",
        stderr(&o)
    );
    // The lines are a topology file.
    let csv = dir.path().join("fleet.csv");
    std::fs::write(&csv, stdout(&o)).unwrap();
    let p = plan(&csv, &["--host", "gpu017", "--format", "json"]);
    assert!(p.status.success(), "{}", stderr(&p));
    let v: Value = serde_json::from_str(&stdout(&p)).unwrap();
    assert_eq!(v["host"], "gpu017");
    assert_eq!(v["peers"].as_array().unwrap().len(), 0);

    let o = run(&["--lldpcli", "/nonexistent/lldpcli"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot run") && stderr(&o).contains("apt install lldpd"),
        "{}",
        stderr(&o)
    );
}

/// The series of `name` in a Prometheus text exposition: (labels, value).
fn series<'t>(text: &'t str, name: &str) -> Vec<(&'t str, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

/// The agent with `[fleet]` and `[probes]` probes its pinglist of the topology through a
/// probe plugin without RDMA (fake-probe answers an address by its last byte): each peer
/// on 4 flows with their own labels, the results by class, path and outcome, the failing
/// flows only (one black-holed path of one peer among them), this host's NIC info series,
/// nothing per healthy pair; each rail probed from its own device (issue 50); when the
/// host turns overloaded its timeouts are its own.
#[test]
fn the_agent_probes_its_pinglist_on_every_path_and_exports_bounded_fleet_series() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("fleet.csv");
    // a's NICs are the fixture's mlx5_0 (10.0.0.1) and mlx5_1 (10.0.1.1): rail 0 is
    // probed from mlx5_0, rail 1 (b alone) from mlx5_1.
    std::fs::write(
        &topo,
        "host,rail,addr,tor,tor_port\na,0,10.0.0.1,t1,Ethernet1\na,1,10.0.1.1,t1b,Ethernet1\nb,0,10.0.0.2,t1,Ethernet2\nb,1,10.0.1.2,t1b,Ethernet2\nc,0,10.0.2.150,t2,\nd,0,10.0.3.210,t3,\ne,0,10.0.4.252,t4,\n",
    )
    .unwrap();
    let procfs = dir.path().join("proc");
    std::fs::create_dir(&procfs).unwrap();
    let stat = |running: u32| {
        format!("cpu  100 0 50 800 10 0 5 0 0 0\ncpu0 50 0 25 400 5 0 2 0 0 0\ncpu1 50 0 25 400 5 0 3 0 0 0\nprocs_running {running}\n")
    };
    std::fs::write(procfs.join("stat"), stat(1)).unwrap();
    let cfg = dir.path().join("fleet.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\ninterval = \"1s\"\n\n[fleet]\ntopology = {topo:?}\nhost = \"a\"\npath_rotation = \"1s\"\nfailing_window = \"6s\"\ntop_failing = 16\nprocfs_root = {procfs:?}\n\n[probes]\nplugin = {:?}\ninterval = \"200ms\"\ntimeout = \"100ms\"\nserve = false\n",
            fixture("mlx5-roce-dual-port"),
            artifacts().fake_probe_so,
        ),
    )
    .unwrap();
    let agent = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--prometheus-listen",
        "127.0.0.1:0",
    ]);
    let base = agent.prometheus_url();
    std::thread::sleep(Duration::from_secs(3));
    let (_, text) = crate::prometheus::get(&format!("{base}/metrics"), None).unwrap();
    let log = agent.stderr();
    let ctx = format!("{text}\n--- agent log\n{log}");

    let info = series(&text, "rdma_fleet_nic_info");
    assert_eq!(
        info,
        [
            (
                r#"address="10.0.0.1",host="a",rail="0",tor="t1",tor_port="Ethernet1""#,
                1.0
            ),
            (
                r#"address="10.0.1.1",host="a",rail="1",tor="t1b",tor_port="Ethernet1""#,
                1.0
            ),
        ],
        "{ctx}"
    );
    let results = series(&text, "rdma_probe_fleet_results_total");
    let count = |class: &str, path: u16, outcome: &str| {
        // Rail 0's series name the port it is probed from.
        let want = format!(
            r#"class="{class}",device="mlx5_0:1",host="a",outcome="{outcome}",path="{path}",rail="0""#
        );
        results
            .iter()
            .find(|(l, _)| *l == want)
            .map_or(0.0, |(_, v)| *v)
    };
    for path in 0..4 {
        // b answers on every path; c never; e refuses; d answers but on path 2.
        let ok = count("same_tor", path, "ok");
        assert!(ok >= 5.0, "path {path}: {ok} ok\n{ctx}");
        assert_eq!(count("cross_tor", path, "failed"), ok, "{ctx}");
        let d_lost = u16::from(path == 2);
        assert_eq!(
            count("cross_tor", path, "ok"),
            ok * f64::from(1 - d_lost),
            "{ctx}"
        );
        assert_eq!(
            count("cross_tor", path, "timeout"),
            ok * f64::from(1 + d_lost),
            "{ctx}"
        );
    }
    assert!(results.len() <= 2 * 4 * 4, "{ctx}");
    // The failing flows: c's and e's four, d's path 2.
    let mut failing: Vec<String> = series(&text, "rdma_probe_fleet_failing_ratio")
        .iter()
        .map(|(l, v)| {
            assert_eq!(*v, 1.0, "{l}");
            assert!(
                l.contains(r#"host="a""#)
                    && l.contains(r#"tor="t1""#)
                    && l.contains(r#"rail="0""#)
                    && l.contains(r#"device="mlx5_0:1""#)
                    && l.contains(r#"class="cross_tor""#),
                "{l}"
            );
            let get = |k: &str| {
                l.split(&format!("{k}=\""))
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .to_string()
            };
            format!("{}@{}/{}", get("peer_host"), get("peer_tor"), get("path"))
        })
        .collect();
    failing.sort();
    assert_eq!(
        failing,
        [
            "c@t2/0", "c@t2/1", "c@t2/2", "c@t2/3", "d@t3/2", "e@t4/0", "e@t4/1", "e@t4/2",
            "e@t4/3"
        ],
        "{ctx}"
    );
    assert!(
        !text.contains("rdma_probe_sent_total"),
        "a series per peer\n{ctx}"
    );
    assert!(
        text.contains(r#"rdma_probe_peers{rdma_probe_state="probed"} 5"#),
        "{ctx}"
    );
    assert!(
        text.contains(r#"rdma_probe_peers{rdma_probe_state="other_rail"} 0"#),
        "{ctx}"
    );
    assert!(
        log.contains("5 peers on rails [0 from mlx5_0:1, 1 from mlx5_1:1]"),
        "{log}"
    );
    let rail1 = results
        .iter()
        .filter(|(l, _)| {
            l.contains(r#"rail="1""#)
                && l.contains(r#"device="mlx5_1:1""#)
                && l.contains(r#"outcome="ok""#)
        })
        .count();
    assert_eq!(rail1, 4, "b answers on rail 1's four paths\n{ctx}");
    assert!(
        text.contains("# TYPE rdma_probe_fleet_rtt_seconds histogram"),
        "{ctx}"
    );
    // One RTT histogram a rail and class (not a path), with the rail's port.
    let rtts: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("rdma_probe_fleet_rtt_seconds_count{"))
        .map(|l| l.split('}').next().unwrap())
        .collect();
    assert_eq!(
        rtts,
        [
            r#"class="cross_tor",device="mlx5_0:1",host="a",rail="0""#,
            r#"class="same_tor",device="mlx5_0:1",host="a",rail="0""#,
            r#"class="same_tor",device="mlx5_1:1",host="a",rail="1""#,
        ],
        "{ctx}"
    );
    if let Some(promtool) = crate::prometheus::promtool() {
        crate::prometheus::promtool_check(&promtool, &text);
    }

    // The host turns overloaded (8 runnable tasks on 2 CPUs): its timeouts are its own.
    std::fs::write(procfs.join("stat"), stat(8)).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let (_, text) = crate::prometheus::get(&format!("{base}/metrics"), None).unwrap();
    let overloaded = series(&text, "rdma_probe_fleet_results_total")
        .into_iter()
        .filter(|(l, _)| l.contains(r#"outcome="host_overloaded""#))
        .map(|(_, v)| v)
        .sum::<f64>();
    assert!(
        overloaded >= 4.0,
        "{overloaded}\n{text}\n{}",
        agent.stderr()
    );
}

/// `rocewatch fleet simulate`: 120 hosts on 2 rails (racks of 1, 2, 48 and 22 to 24
/// hosts), a NIC down from the third minute. The series load into a real VictoriaMetrics
/// as they are written; before the fault nothing fails, after it every failing flow is to
/// or from that NIC's host, and each host's counters only grow.
#[test]
fn fleet_simulate_writes_series_victoriametrics_loads_and_the_fault_shows_where_it_is() {
    let Some(bin) = crate::otlp::vm_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("fleet.csv");
    let mut csv = String::from("host,rail,addr,tor\n");
    let mut h = 0;
    for (rack, size) in [1, 2, 48, 23, 24, 22].iter().enumerate() {
        for _ in 0..*size {
            for rail in 0..2 {
                csv.push_str(&format!(
                    "gpu{h:03},{rail},10.{rail}.{}.{},leaf{rack}-{rail}\n",
                    h / 200,
                    h % 200 + 1
                ));
            }
            h += 1;
        }
    }
    std::fs::write(&topo, csv).unwrap();
    let out = dir.path().join("sim");
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60
        * 60
        - 600;
    let o = rocewatch(
        &[
            "fleet",
            "simulate",
            "--topology",
            topo.to_str().unwrap(),
            "--fault",
            "nic_down:gpu060/1",
            "--out",
            out.to_str().unwrap(),
            "--duration",
            "6m",
            "--fault-after",
            "3m",
            "--start",
            &start.to_string(),
            // No background loss: every failing flow is the fault's.
            "--background-loss",
            "0",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("faults.json")).unwrap()).unwrap();
    assert_eq!(meta["hosts"], 120);
    assert_eq!(
        meta["faults"][0]["suspect"],
        serde_json::json!({"kind": "nic", "target": "gpu060", "rails": [1]})
    );
    assert_eq!(meta["faults"][0]["start_ms"], (start + 180) * 1000);
    let series = std::fs::read_to_string(out.join("series.prom")).unwrap();
    // The faulted rail only: rail 0 of gpu060 keeps working.
    for l in series
        .lines()
        .filter(|l| l.starts_with("rdma_probe_fleet_failing_ratio"))
    {
        assert!(l.contains("rail=\"1\""), "{l}");
        assert!(
            l.contains("peer_host=\"gpu060\"") || l.contains("host=\"gpu060\""),
            "{l}"
        );
        let ts: u64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(ts >= (start + 180) * 1000, "failing before the fault: {l}");
    }
    // Loaded into VictoriaMetrics as written.
    let data = tempfile::tempdir().unwrap();
    let vm = crate::otlp::start_vm(&bin, "127.0.0.1:0", data.path(), &[]);
    let url = format!("http://{}", vm.addr);
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/api/v1/import/prometheus"))
        .body(series)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text());
    let query = |q: &str, at: u64| -> Value {
        let body = reqwest::blocking::Client::new()
            .get(format!("{url}/api/v1/query"))
            .query(&[("query", q), ("time", &at.to_string())])
            .send()
            .unwrap()
            .text()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    };
    let end = start + 330;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let failing = loop {
        let v = query(
            "count by (peer_host) (rdma_probe_fleet_failing_ratio{class=\"same_tor\"})",
            end,
        );
        if !v["data"]["result"].as_array().unwrap().is_empty()
            || std::time::Instant::now() > deadline
        {
            break v;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let hosts: Vec<&str> = failing["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metric"]["peer_host"].as_str().unwrap())
        .collect();
    // gpu060's ToR mates see it failing; gpu060 itself sees them all failing.
    assert!(hosts.contains(&"gpu060"), "{failing}");
    let before = query("count(rdma_probe_fleet_failing_ratio)", start + 150);
    assert_eq!(before["data"]["result"], serde_json::json!([]), "{before}");
    let nics = query("count(rdma_fleet_nic_info)", end);
    assert_eq!(nics["data"]["result"][0]["value"][1], "240", "{nics}");
    // Counters never go back: no decrease over the run.
    let resets = query("sum(resets(rdma_probe_fleet_results_total[10m]))", end);
    assert_eq!(resets["data"]["result"][0]["value"][1], "0", "{resets}");
}

/// `fleet plan --all` writes each host's list as it is drawn, never holding the fleet's
/// lists (they took 2 GB at 20,000 hosts): one host a line in its JSON, each the list
/// `--host` gives alone, and the coverage the text form gives, also where the bound cuts.
#[test]
fn fleet_plan_all_is_written_a_host_at_a_time_and_matches_each_hosts_own_list() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("fleet.csv");
    let mut csv = String::from("host,rail,addr,tor\n");
    // Racks of 1, 2, then 24: 300 hosts on 4 rails.
    let mut rack = 0;
    let mut in_rack = 0;
    for h in 0..300 {
        let size = [1, 2].get(rack).copied().unwrap_or(24);
        if in_rack == size {
            rack += 1;
            in_rack = 0;
        }
        in_rack += 1;
        for r in 0..4 {
            csv.push_str(&format!(
                "gpu{h:03},{r},10.{r}.{}.{},leaf{rack:02}\n",
                h / 200,
                h % 200 + 1
            ));
        }
    }
    std::fs::write(&topo, csv).unwrap();
    let o = plan(&topo, &["--all", "--format", "json", "--max-peers", "60"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    // `{"options":...,"hosts":[`, one host a line, `],"coverage":...}`.
    assert_eq!(
        text.lines().count(),
        300 + 2,
        "{}",
        &text[..text.len().min(400)]
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["options"]["max_peers"], 60);
    let hosts = v["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 300);
    assert!(hosts.iter().any(|h| h["truncated"].as_u64().unwrap() > 0));
    for h in hosts.iter().step_by(23) {
        let name = h["host"].as_str().unwrap();
        let o = plan(
            &topo,
            &["--host", name, "--format", "json", "--max-peers", "60"],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let own: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(&own, h, "{name}");
    }
    let cov = &v["coverage"];
    assert!(cov["full"].as_u64() < cov["pairs"].as_u64(), "{cov:#}");
    let o = plan(&topo, &["--all", "--max-peers", "60"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(
        t.contains(&format!(
            "cross-ToR coverage: {} of {} ordered ToR pairs × rails have their probers",
            cov["full"], cov["pairs"]
        )),
        "{t}"
    );
    let short: Vec<&str> = t.lines().filter(|l| l.starts_with("  short: ")).collect();
    assert_eq!(short.len(), cov["short"].as_array().unwrap().len());
    assert_eq!(t.lines().count(), 1 + 300 + 1 + short.len());
}
