//! `rocewatch fleet plan` through the binary: a topology CSV as a CMDB exports it (extra
//! columns, quoted fields, CRLF), one host's pinglist as text and JSON, every host's with
//! the cross-ToR coverage, and errors naming the file and line.

use std::path::Path;

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
