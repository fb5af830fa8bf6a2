//! One grammar (docs/AGENT.md): each new spelling and the old one it replaces, kept as a
//! hidden alias, through the binary: the same exit status and the same output.

use std::process::Output;

use crate::support::*;

const MLX5: &str = "mlx5-roce-dual-port";

/// `rocewatch OLD` and `rocewatch NEW` exit alike and print the same; the new one's output.
fn same(old: &[&str], new: &[&str]) -> Output {
    let (o, n) = (rocewatch(old, &[]), rocewatch(new, &[]));
    let show = |x: &Output| {
        format!(
            "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
            x.status.code(),
            stdout(x),
            stderr(x)
        )
    };
    assert_eq!(
        (o.status.code(), stdout(&o), stderr(&o)),
        (n.status.code(), stdout(&n), stderr(&n)),
        "{old:?}:\n{}\n\n{new:?}:\n{}",
        show(&o),
        show(&n)
    );
    n
}

#[test]
fn config_check_takes_the_file_as_every_command_does() {
    let f = "configs/rules.toml";
    let n = same(&["config", "check", f], &["config", "check", "-c", f]);
    assert_eq!(n.status.code(), Some(0), "{}", stderr(&n));
    assert!(
        stdout(&n).starts_with("configs/rules.toml: ok\n"),
        "{}",
        stdout(&n)
    );
    same(&["config", "check", f], &["config", "check", "--config", f]);
    // An invalid file: exit status 1 and the key path, whichever spelling names it.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[agent]\ninterval = \"ten\"\n").unwrap();
    let bad = bad.to_str().unwrap();
    let n = same(&["config", "check", bad], &["config", "check", "-c", bad]);
    assert_eq!(n.status.code(), Some(1), "{}", stderr(&n));
    assert!(stderr(&n).contains("agent.interval"), "{}", stderr(&n));
    // Both at once, or neither: refused by the parser.
    let o = rocewatch(&["config", "check", "-c", f, f], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = rocewatch(&["config", "check"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--config <FILE>"), "{}", stderr(&o));
}

#[test]
fn json_is_dash_dash_json_where_format_json_was() {
    let root = fixture(MLX5);
    let root = root.to_str().unwrap();
    let n = same(
        &[
            "collect",
            "--once",
            "--sysfs-root",
            root,
            "--format",
            "json",
        ],
        &["collect", "--once", "--sysfs-root", root, "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&n)).unwrap();
    assert!(
        !v["samples"].as_array().unwrap().is_empty(),
        "{}",
        stdout(&n)
    );

    let n = same(
        &["env", "--sysfs-root", root, "--format", "json"],
        &["env", "--sysfs-root", root, "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&n)).unwrap();
    assert!(v.get("variables").is_some(), "{}", stdout(&n));

    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("fleet.csv");
    std::fs::write(
        &topo,
        "host,rail,addr,tor\ngpu01,0,10.0.0.1,leaf-a\ngpu02,0,10.0.1.2,leaf-b\n",
    )
    .unwrap();
    let topo = topo.to_str().unwrap();
    let plan = ["fleet", "plan", "--topology", topo, "--all"];
    let n = same(
        &[&plan[..], &["--format", "json"]].concat(),
        &[&plan[..], &["--json"]].concat(),
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&n)).unwrap();
    assert_eq!(v["hosts"].as_array().unwrap().len(), 2, "{}", stdout(&n));
    // --json and a --format that says otherwise: refused, not one of them silently.
    let o = rocewatch(
        &["env", "--sysfs-root", root, "--json", "--format", "shell"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// The demo's JSON lines carry times and moving counters: the two spellings print the same
/// kind of lines, not the same bytes.
#[test]
fn demo_json_and_format_json_print_the_same_lines() {
    let keys = |args: &[&str]| {
        let o = rocewatch(args, &[]);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        let first = out
            .lines()
            .next()
            .unwrap_or_else(|| panic!("{args:?}: no output"));
        let v: serde_json::Value =
            serde_json::from_str(first).unwrap_or_else(|e| panic!("{args:?}: {e}: {first}"));
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let old = keys(&[
        "demo",
        "--duration",
        "1s",
        "--interval",
        "200ms",
        "--format",
        "json",
    ]);
    let new = keys(&["demo", "--duration", "1s", "--interval", "200ms", "--json"]);
    assert!(!new.is_empty());
    assert_eq!(old, new);
}

#[test]
fn host_names_this_host_in_preflight_and_fleet_topology() {
    let root = fixture(MLX5);
    let root = root.to_str().unwrap();
    let pf = [
        "preflight",
        "--host-list",
        "n1,n2,n3",
        "--sysfs-root",
        root,
        "--plan",
    ];
    let n = same(
        &[&pf[..], &["--this-host", "n2"]].concat(),
        &[&pf[..], &["--host", "n2"]].concat(),
    );
    assert!(stdout(&n).starts_with("n2: 3 hosts"), "{}", stdout(&n));

    let dir = tempfile::tempdir().unwrap();
    let lldp = dir.path().join("lldp.json");
    std::fs::write(
        &lldp,
        r#"{"lldp": [{"interface": [
          {"name": "ens1f0np0", "via": "LLDP", "rid": "1",
           "chassis": [{"id": [{"type": "mac", "value": "0c:42:a1:00:00:01"}],
                        "name": [{"value": "leaf-a"}]}],
           "port": [{"id": [{"type": "ifname", "value": "Ethernet1/7"}]}]}]}]}"#,
    )
    .unwrap();
    let topo = [
        "fleet",
        "topology",
        "--sysfs-root",
        root,
        "--lldp-json",
        lldp.to_str().unwrap(),
    ];
    let n = same(
        &[&topo[..], &["--this-host", "gpu017"]].concat(),
        &[&topo[..], &["--host", "gpu017"]].concat(),
    );
    assert!(stdout(&n).contains("\ngpu017,0,"), "{}", stdout(&n));
}

#[test]
fn min_share_is_the_one_name_for_a_bandwidth_share() {
    // The verdict's header says the share it judges at (the default is 90 %): the value
    // reached the same setting under either name.
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("n1.jsonl");
    std::fs::write(&results, "").unwrap();
    let results = results.to_str().unwrap();
    let judge = ["preflight", "--judge", results, "--host-list", "n1,n2"];
    let n = same(
        &[&judge[..], &["--min-bandwidth-share", "0.5"]].concat(),
        &[&judge[..], &["--min-share", "0.5"]].concat(),
    );
    assert!(
        stdout(&n).contains("pass at ≥ 50 % of the line rate"),
        "{}",
        stdout(&n)
    );
}

#[test]
fn agent_is_the_one_name_for_an_agents_url() {
    // Nothing listens on port 1: the same refusal, naming the URL, under either name.
    let url = "http://127.0.0.1:1";
    let n = same(&["rules", "--url", url], &["rules", "--agent", url]);
    assert_eq!(n.status.code(), Some(2), "{}", stderr(&n));
    assert!(stderr(&n).contains("127.0.0.1:1"), "{}", stderr(&n));
}

#[test]
fn cm_port_is_the_one_name_for_the_rdma_cm_port() {
    // The parser's answers, which need no verbs: both spellings are the CM port, which
    // needs --cm, and takes a port number.
    let n = same(
        &["probe", "p", "--port", "7"],
        &["probe", "p", "--cm-port", "7"],
    );
    assert_eq!(n.status.code(), Some(2), "{}", stderr(&n));
    assert!(stderr(&n).contains("--cm"), "{}", stderr(&n));
    let n = same(
        &["probe", "p", "--cm", "--port", "x"],
        &["probe", "p", "--cm", "--cm-port", "x"],
    );
    assert!(
        stderr(&n).contains("invalid value 'x' for '--cm-port <PORT>'"),
        "{}",
        stderr(&n)
    );
}

#[test]
fn fleet_simulate_reads_its_config_with_dash_c() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("fleet.csv");
    std::fs::write(&topo, "host,rail,addr,tor\ngpu01,0,10.0.0.1,leaf-a\n").unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(&cfg, "[fleet]\nprobers = \"many\"\n").unwrap();
    let (topo, cfg) = (topo.to_str().unwrap(), cfg.to_str().unwrap());
    let out = dir.path().join("sim");
    let sim = [
        "fleet",
        "simulate",
        "--topology",
        topo,
        "--out",
        out.to_str().unwrap(),
    ];
    let n = same(
        &[&sim[..], &["--fleet-config", cfg]].concat(),
        &[&sim[..], &["-c", cfg]].concat(),
    );
    assert_eq!(n.status.code(), Some(2), "{}", stderr(&n));
    assert!(
        stderr(&n).contains("agent.toml: its [fleet] table"),
        "{}",
        stderr(&n)
    );
}

#[test]
fn a_typo_suggests_the_nearest_command_first() {
    let o = rocewatch(&["colect"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    let tip = e
        .lines()
        .find(|l| l.contains("tip:"))
        .unwrap_or_else(|| panic!("{e}"));
    assert!(tip.contains("exist: 'collect'"), "{e}");
}
