//! Errors name their cause (issue 49): a refused connection, the environment variable a
//! bad value came from, what is wrong with `preflight --out`, through the binary.

use crate::support::*;
use std::time::Duration;

/// `fleet plan --prometheus` at a port nobody listens on says the connection was refused,
/// not only reqwest's "error sending request for url (...)".
#[test]
fn fleet_plan_prometheus_says_the_connection_was_refused() {
    let held = HeldPort::new();
    let url = format!("http://127.0.0.1:{}", held.port);
    let o = rocewatch(&["fleet", "plan", "--prometheus", &url, "--host", "x"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Connection refused"),
        "the cause is named: {}",
        stderr(&o)
    );
}

/// The OTLP exporter's send error at a port nobody listens on names the refusal, over
/// HTTP and gRPC.
#[test]
fn otlp_send_errors_say_the_connection_was_refused() {
    for protocol in ["http/protobuf", "grpc"] {
        let held = HeldPort::new();
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("rw.toml");
        std::fs::write(
            &cfg,
            format!(
                "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.otlp]\n\
                 endpoint = \"http://127.0.0.1:{}\"\nprotocol = \"{protocol}\"\ninterval = \"300ms\"\n",
                fixture("mlx5-roce-dual-port"),
                held.port
            ),
        )
        .unwrap();
        let mut rw = RunningAgent::start(&["--config", cfg.to_str().unwrap()]);
        rw.proc.wait_log(
            &format!("a {protocol} send error naming the refusal"),
            Duration::from_secs(20),
            |log| log.contains("Connection refused").then_some(()),
        );
        let (status, log, _) = rw.proc.stop();
        assert!(status.success(), "{log}");
    }
}

/// A bad value set by a `ROCEWATCH_*` variable names the variable, not the file (whose
/// value it replaced).
#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f.toml");
    std::fs::write(&f, "[agent]\ninterval = \"1s\"\n").unwrap();
    let o = rocewatch(
        &["config", "check", f.to_str().unwrap()],
        &[("ROCEWATCH_AGENT__INTERVAL", "ten")],
    );
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("ROCEWATCH_AGENT__INTERVAL: agent.interval: invalid duration"),
        "{err}"
    );
    assert!(!err.contains("f.toml"), "the file is not blamed: {err}");
    // The same key bad in the file, with no variable, still names the file.
    std::fs::write(&f, "[agent]\ninterval = \"ten\"\n").unwrap();
    let o = rocewatch(&["config", "check", f.to_str().unwrap()], &[]);
    assert!(
        stderr(&o).contains("f.toml: agent.interval: invalid duration"),
        "{}",
        stderr(&o)
    );
}

/// `preflight --out DIR/` (as docs/PROBES.md writes it, a job's new directory) makes the
/// directory, instead of "Is a directory (os error 21)" after a sentence about never
/// overwriting.
#[test]
fn preflight_out_dir_with_a_slash_makes_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = format!("{}/pf-job/", dir.path().display());
    // The control port is taken: the sweep fails at once, after making its --out.
    let v6 = std::net::TcpListener::bind("[::]:28625");
    let v4 = std::net::TcpListener::bind("0.0.0.0:28625");
    assert!(v6.is_ok() || v4.is_ok(), "the test cannot take port 28625");
    let o = rocewatch(
        &[
            "preflight",
            "--host-list",
            "pf-a.invalid,pf-b.invalid",
            "--this-host",
            "pf-a.invalid",
            "--sysfs-root",
            fixture("mlx5-roce-dual-port").to_str().unwrap(),
            "--control-port",
            "28625",
            "--out",
            &out,
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("Is a directory"), "{err}");
    assert!(err.contains("listening on control port 28625"), "{err}");
    assert!(dir.path().join("pf-job").is_dir(), "{err}");
}

/// `fleet simulate --fault` of an unknown kind lists the kinds it takes.
#[test]
fn an_unknown_fault_kind_lists_the_kinds() {
    let o = rocewatch(&["fleet", "simulate", "--fault", "tordown:x"], &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for kind in [
        "nic_down",
        "host_overloaded",
        "tor_down",
        "uplink_loss",
        "ecmp_blackhole",
        "link_loss",
    ] {
        assert!(err.contains(kind), "{kind}: {err}");
    }
}

/// The kernel-log window's bound is the docs' "100 years": `100y` is taken, and past it
/// the bound is said as 100 years, for the key and the flag.
#[test]
fn the_log_window_bound_is_100_years_as_the_docs_say() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("h.toml");
    std::fs::write(&f, "[health]\nkernel_log_window = \"100y\"\n").unwrap();
    let o = rocewatch(&["config", "check", f.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&f, "[health]\nkernel_log_window = \"101y\"\n").unwrap();
    let o = rocewatch(&["config", "check", f.to_str().unwrap()], &[]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("at most 100years") && !stderr(&o).contains("99years"),
        "{}",
        stderr(&o)
    );
    let o = rocewatch(&["doctor", "--log-window", "101y"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("at most 100years"), "{}", stderr(&o));
}

/// `rules --once` without a configuration evaluates the default set (configs/rules.toml)
/// rather than saying there are no rules.
#[test]
fn rules_once_without_a_config_uses_the_default_set() {
    let root = fixture("mlx5-roce-dual-port");
    let o = rocewatch(
        &[
            "rules",
            "--once",
            "--json",
            "--sysfs-root",
            root.to_str().unwrap(),
        ],
        &[],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("no [[rules]]"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let text = v.to_string();
    let defaults =
        std::fs::read_to_string(crate::support::root().join("configs/rules.toml")).unwrap();
    let first = defaults
        .lines()
        .find_map(|l| l.trim().strip_prefix("name = \""))
        .and_then(|l| l.split('"').next())
        .expect("a named rule in configs/rules.toml");
    assert!(text.contains(first), "{first} in {text}");
}

/// `doctor --peer` when the probe plugin cannot start (its device does not exist) says
/// why it did not start, not "probe called before start".
#[test]
fn doctor_peer_says_why_the_probe_plugin_did_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rw.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[plugins.external]]\npath = {:?}\n[plugins.external.options]\ndevice = \"no_such_dev9\"\n",
            artifacts().probe_so
        ),
    )
    .unwrap();
    let o = rocewatch(
        &[
            "doctor",
            "--config",
            cfg.to_str().unwrap(),
            "--peer",
            "192.0.2.1",
            "--sysfs-root",
            fixture("mlx5-roce-dual-port").to_str().unwrap(),
        ],
        &[],
    );
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.contains("probe 192.0.2.1"))
        .unwrap_or_else(|| panic!("no probe check: {out}{}", stderr(&o)));
    assert!(!line.contains("called before start"), "{line}");
    // Why: no device by that name, or no RDMA device at all on this host.
    let why = line
        .split_once("the probe plugin did not start: ")
        .map(|(_, why)| why.trim())
        .unwrap_or_default();
    assert!(why.contains("device"), "{line}");
}
