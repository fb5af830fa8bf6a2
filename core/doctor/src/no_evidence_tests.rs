//! Doctor never passes on no evidence: every check, run on empty input (an empty sysfs
//! tree, a device directory with nothing in it, an empty proc tree, an empty kernel log,
//! no counters, no rule set, no variables), says SKIP, WARN, FAIL or INFO, never PASS.
//! [`every_check_name_runs_here`] reads the doctor's sources for the names of its checks,
//! so a check added later without a case here fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use rocewatch_plugin_api::{Device, Inventory, Port, ScrapeResult};
use rocewatch_sysfs::SysRoot;

use super::check::{Check, Options, Status};
use rocewatch_runtime::app::{App, AppSpec};
use rocewatch_runtime::host::registry::{Builtin, Defaults, HostSettings, Instance};
use rocewatch_runtime::host::settings::PluginsConfig;

/// Checks that cannot run on empty input, and why (each needs something read first).
const NOT_ON_EMPTY_INPUT: &[(&str, &str)] = &[
    ("ip", "runs for a RoCE port whose netdev was found"),
    (
        "probe-cm",
        "runs with --peer and a started probe plugin (the lab runs it against a CM listener)",
    ),
    ("gid", "runs for each address found on a RoCE netdev"),
    ("mtu", "runs when a netdev's MTU was read, or with --peer"),
    (
        "global-pause",
        "says a netdev's 802.3x pause moved between the two collections (the counters check watches those counters otherwise)",
    ),
    (
        "gpu-nic",
        "runs for a GPU and an RDMA device found on the PCI bus",
    ),
    (
        "gpudirect",
        "runs for a GPU and an RDMA device found on the PCI bus",
    ),
];

/// Doctor on `root` with an empty proc tree and an empty kernel log, every option that
/// adds a check on (an empty `--env`).
async fn doctor_on(root: &Path, scratch: &Path) -> Vec<Check> {
    let proc_root = scratch.join("proc");
    std::fs::create_dir_all(&proc_root).unwrap();
    let log = scratch.join("kmsg");
    std::fs::write(&log, "").unwrap();
    // The built-ins that read a tree (the others read this host, not the tree).
    let builtins: &[Builtin] = &[
        Builtin {
            name: rocewatch_discovery_sysfs::SysfsDiscovery::NAME,
            make: || {
                Instance::Discovery(Box::new(rocewatch_discovery_sysfs::SysfsDiscovery::new()))
            },
            check_options: |_| Ok(()),
        },
        Builtin {
            name: rocewatch_counters_sysfs::SysfsCounters::NAME,
            make: || Instance::Collector(Box::new(rocewatch_counters_sysfs::SysfsCounters::new())),
            check_options: |_| Ok(()),
        },
    ];
    let app = App::start(AppSpec {
        host: HostSettings {
            builtins,
            plugins: &PluginsConfig::default(),
            devices: &Default::default(),
            defaults: Defaults {
                interval: Duration::from_secs(10),
                timeout: Duration::from_secs(5),
            },
            kinds: None,
        },
        sysfs_root: root.to_path_buf(),
        host_name: "test".into(),
        rules: &[],
        declare: &|_| {},
    })
    .await;
    let opts = Options {
        peer: None,
        bandwidth: false,
        priority: 3,
        cm_port: 18517,
        cable_length: None,
        window: Duration::from_millis(10),
        log_window: Duration::from_secs(3600),
        env: Some(BTreeMap::new()),
        link_layer: None,
        procfs_root: proc_root,
        rootfs: root.to_path_buf(),
        // A user no host has: the userspace topic says so and goes on.
        user: Some("rocewatch-no-such-user".into()),
        pid: None,
        unit: None,
        memlock_need: None,
        qos: Default::default(),
        kernel_log: serde_json::json!({ "path": log }),
        min_mtu: None,
        pre_fec_ber_warn: None,
        max_flaps: rocewatch_sysfs::verdict::DEFAULT_MAX_FLAPS,
        rail_rows: None,
    };
    let mut out = super::guide::run(&app, &opts).await;
    out.push(crate::checks::bandwidth::bandwidth_check(&app, "peer.example").await);
    app.stop().await;
    out
}

/// Every check, on empty input.
async fn every_check_on_empty_input() -> Vec<Check> {
    let scratch = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let mut out = doctor_on(empty.path(), scratch.path()).await;
    // A device directory with one port directory and nothing in them.
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bare.path().join("class/infiniband/dev0/ports/1")).unwrap();
    out.extend(doctor_on(bare.path(), scratch.path()).await);

    // The topics one by one, on nothing.
    let sys = SysRoot::new(empty.path());
    let no_inv = Inventory::default();
    let one = Inventory {
        devices: vec![Device {
            name: "dev0".into(),
            ports: vec![Port {
                port: 1,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    out.push(crate::guide::ports::port_check("dev0/1", &Port::default()));
    out.extend(crate::checks::qos::qos_checks(&[], "dev0", 1, "eth0", 3));
    out.push(crate::checks::dcbx::dcbx_peer_check(
        &[],
        "dev0",
        1,
        "eth0",
        3,
    ));
    out.push(crate::checks::cm_path::cm_tos_check(
        &[],
        "dev0",
        1,
        3,
        None,
    ));
    out.push(crate::checks::buffers::buffer_check(
        &[],
        "dev0",
        1,
        "eth0",
        &crate::checks::buffers::Link {
            speed_mbps: None,
            mtu: None,
            cable_m: None,
        },
    ));
    for told in [None, Some(crate::checks::linklayer::ETHERNET)] {
        out.extend(crate::checks::linklayer::link_layer_checks(
            &sys, &no_inv, told,
        ));
        out.extend(crate::checks::linklayer::link_layer_checks(
            &sys, &one, told,
        ));
    }
    let unread = rocewatch_sysfs::pci::PcieLink {
        speed: None,
        width: None,
        max_speed: None,
        max_width: None,
    };
    out.push(crate::checks::pcie::link_check(
        "dev0",
        "0000:00:00.0",
        &unread,
        None,
        None,
    ));
    out.extend(crate::checks::pcie::link_checks(&sys, &one));
    out.extend(crate::checks::gpu::gpu_checks(&sys, &[], &[]));
    out.extend(crate::checks::acs::acs_checks(&sys, &[], &[]));
    out.extend(crate::checks::numa::numa_checks(&sys, scratch.path(), &one));
    out.extend(rails_on_nothing(&sys, empty.path(), scratch.path()));
    out.extend(crate::checks::multirail::decide(&two_rails_nothing_read()));
    // No firewall tool: nothing read. (A rule set that was read, an empty one too, is
    // evidence: nothing in it drops RoCE.)
    out.extend(crate::checks::firewall::firewall_verdict(vec![
        ("nft", None),
        ("iptables-save", None),
        ("ip6tables-save", None),
    ]));
    out.extend(crate::checks::interrupts::irq_checks(
        empty.path(),
        scratch.path(),
        &["eth0".into()],
    ));
    out.extend(crate::checks::driver::driver_checks(&sys, None, &one));
    out.extend(crate::checks::driver::firmware_checks(&one));
    let log = scratch.path().join("empty.log");
    std::fs::write(&log, "").unwrap();
    let clock = rocewatch_klog::text::Clock::now();
    out.extend(crate::checks::kernel_log::kernel_log_checks(
        empty.path(),
        &serde_json::json!({ "path": log }),
        Duration::from_secs(3600),
        clock,
    ));
    out.extend(crate::checks::counters::counters_checks(
        &ScrapeResult::default(),
        &ScrapeResult::default(),
        &[],
        Duration::from_secs(5),
    ));
    out.extend(crate::checks::congestion::congestion_checks(
        &ScrapeResult::default(),
        &ScrapeResult::default(),
        Duration::from_secs(5),
    ));
    let host = super::appenv::HostEnv::default();
    out.extend(super::appenv::check::env_checks(
        &host,
        &no_inv,
        &[],
        &BTreeMap::new(),
        None,
    ));
    out
}

/// Two rails in one subnet, but no sysctl read and no rule or route.
/// The rails on no inventory (without a topology and with one that has no row here),
/// and the multi-rail checks of no netdev.
fn rails_on_nothing(
    sys: &SysRoot,
    sysfs: &std::path::Path,
    procfs: &std::path::Path,
) -> Vec<Check> {
    let no_inv = Inventory::default();
    let map = sys.rail_map(&no_inv, None);
    let mut out = crate::checks::rails::rail_checks(&map, &[]);
    out.extend(crate::checks::rails::rail_checks(
        &sys.rail_map(&no_inv, Some(&[])),
        &rocewatch_sysfs::verdict::nics::missing_nics(sys, &map),
    ));
    out.extend(crate::checks::multirail::multirail_checks(
        &no_inv, &map, sysfs, procfs,
    ));
    out
}

fn two_rails_nothing_read() -> crate::checks::multirail::Observed {
    use rocewatch_netlink::route::{Address, Link, Prefix};
    let link = |index, name: &str| Link {
        index,
        name: name.into(),
        flags: 1,
    };
    let addr = |index, a: &str| Address {
        index,
        local: Prefix {
            addr: a.parse().unwrap(),
            len: 24,
        },
        flags: 0,
        scope: 0,
        label: None,
    };
    crate::checks::multirail::Observed {
        netdevs: vec!["rail0".into(), "rail1".into()],
        links: vec![link(2, "rail0"), link(3, "rail1")],
        addresses: vec![addr(2, "198.51.100.11"), addr(3, "198.51.100.12")],
        ..Default::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn no_check_passes_on_empty_input() {
    let checks = runtime().block_on(every_check_on_empty_input());
    let passed: Vec<&Check> = checks.iter().filter(|c| c.status == Status::Pass).collect();
    assert!(passed.is_empty(), "passed on no evidence: {passed:#?}");
    for c in &checks {
        assert!(
            !c.evidence.is_empty(),
            "a verdict without its reason: {c:?}"
        );
    }
}

/// The doctor's source files, in every folder under `src`.
fn source_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The names given to `check(` as a literal in the doctor's sources.
fn check_names_in_sources() -> BTreeSet<String> {
    let mut files = Vec::new();
    source_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut names = BTreeSet::new();
    for path in files {
        if path.ends_with("no_evidence_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Only the code above the file's tests.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (at, _) in code.match_indices("check(") {
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // port_check(, irq_check( ...
            }
            let rest = code[at + "check(".len()..].trim_start();
            if let Some(lit) = rest.strip_prefix('"') {
                if let Some(end) = lit.find('"') {
                    names.insert(lit[..end].to_string());
                }
            }
        }
        // Names handed to a helper that calls check(name, ...).
        for (at, _) in code.match_indices("unreadable(\"") {
            let lit = &code[at + "unreadable(\"".len()..];
            if let Some(end) = lit.find('"') {
                names.insert(lit[..end].to_string());
            }
        }
    }
    names
}

#[test]
fn every_check_name_runs_here() {
    let names = check_names_in_sources();
    assert!(
        names.len() > 20,
        "the source scan found too little: {names:?}"
    );
    let checks = runtime().block_on(every_check_on_empty_input());
    let ran: BTreeSet<&str> = checks.iter().map(|c| c.check.as_str()).collect();
    let exempt: BTreeSet<&str> = NOT_ON_EMPTY_INPUT.iter().map(|(n, _)| *n).collect();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !ran.contains(n.as_str()) && !exempt.contains(n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "checks not run on empty input by this test (add a case, or say in NOT_ON_EMPTY_INPUT why they cannot run on it): {missing:?}"
    );
    for n in &exempt {
        assert!(names.contains(*n), "{n} is no check any more");
    }
}
