//! Every doctor fix that names a device, netdev, PCI function, module, firewall table or
//! peer keeps that name inside single quotes when it holds anything a shell reads: the
//! fix lines are meant to be copied into a root shell. The names here are valid where
//! they come from (a netdev may be called `$(touch${IFS}P)`: net/core/dev.c
//! `dev_valid_name` forbids only '/', ':' and white space; RDMA devices and sysfs trees
//! given with `--sysfs-root` may hold anything).

use std::collections::BTreeMap;
use std::net::IpAddr;

use rocewatch_plugin_api::{Device, DriverModule, Inventory, QosState, Setting};

use super::check::{Check, Status};
use crate::shell::only_single_quoted;

/// A netdev name that runs `touch P` where it is not quoted.
const ND: &str = "$(touch${IFS}P)";
/// An RDMA device or other name that runs `touch Q`.
const DEV: &str = "mlx5_$(touch${IFS}Q)";

/// Every fix (and `capture`'s command evidence) of `checks` keeps `touch` quoted.
fn assert_quoted(checks: &[Check]) {
    let mut seen = 0;
    for c in checks {
        for text in c.fix.iter() {
            assert!(
                only_single_quoted(text, "touch"),
                "{} {}: a name is not quoted in the fix:\n{text}",
                c.check,
                c.subject
            );
            seen += 1;
        }
    }
    assert!(seen > 0, "no fix to look at in {checks:#?}");
}

fn value(v: &str) -> Setting {
    Setting::Value(v.into())
}

#[test]
fn port_and_qos_fixes() {
    let p = rocewatch_plugin_api::Port {
        port: 1,
        state: Some("DOWN".into()),
        netdev: Some(ND.into()),
        ..Default::default()
    };
    assert_quoted(&[crate::guide::ports::port_check(DEV, &p)]);
    let mut settings = BTreeMap::new();
    settings.insert("roce_mode".to_string(), value("IB/RoCE v1"));
    settings.insert("pfc_enabled".to_string(), value("4"));
    settings.insert("trust".to_string(), value("pcp"));
    settings.insert("ecn_np_enabled".to_string(), value("4"));
    settings.insert("ecn_rp_enabled".to_string(), value("4"));
    let qos = vec![QosState {
        device: DEV.into(),
        port: 1,
        settings,
        ..Default::default()
    }];
    let checks = crate::checks::qos::qos_checks(&qos, DEV, 1, ND, 3);
    assert_eq!(checks.len(), 3);
    assert!(
        checks.iter().all(|c| c.status == Status::Fail),
        "{checks:#?}"
    );
    assert_quoted(&checks);
    let mut unknown = qos.clone();
    unknown[0]
        .settings
        .insert("roce_mode".into(), Setting::Unknown("no configfs".into()));
    assert_quoted(&crate::checks::qos::qos_checks(&unknown, DEV, 1, ND, 3)[..1]);
    let mut peer = qos.clone();
    peer[0]
        .settings
        .insert("peer_pfc_enabled".into(), value("none"));
    let c = crate::checks::dcbx::dcbx_peer_check(&peer, DEV, 1, ND, 3);
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert_quoted(&[c]);
    let mut buf = qos.clone();
    for (k, v) in [
        ("pfc_enabled", "3"),
        ("prio2buffer", "0,0,0,0,0,0,0,0"),
        ("buffer_size", "1000,0,0,0,0,0,0,0"),
    ] {
        buf[0].settings.insert(k.into(), value(v));
    }
    let link = crate::checks::buffers::Link {
        speed_mbps: Some(100_000),
        mtu: Some(9000),
        cable_m: None,
    };
    let c = crate::checks::buffers::buffer_check(&buf, DEV, 1, ND, &link);
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert_quoted(&[c]);
}

#[test]
fn numa_linklayer_pcie_and_driver_fixes() {
    let irqs = [crate::checks::numa::IrqCpus {
        irq: "112".into(),
        cpus: vec![0],
    }];
    assert_quoted(&[crate::checks::numa::locality_check(
        DEV,
        Some(ND),
        1,
        &[16, 17],
        &irqs,
    )]);
    let fix = crate::checks::linklayer::fix(true, Some(DEV), 1, crate::checks::linklayer::ETHERNET);
    assert!(only_single_quoted(&fix, "touch"), "{fix}");
    let link = rocewatch_sysfs::pci::PcieLink {
        speed: Some(8.0),
        width: Some(8),
        max_speed: Some(16.0),
        max_width: Some(16),
    };
    assert_quoted(&[crate::checks::pcie::link_check(
        DEV,
        DEV,
        &link,
        None,
        Some(100.0),
    )]);
    let module = |v: &str| DriverModule {
        name: DEV.into(),
        version: Some(v.into()),
        srcversion: None,
        origin: "out-of-tree".into(),
    };
    let inv = Inventory {
        devices: vec![
            Device {
                name: "a".into(),
                driver_module: Some(module("1")),
                ..Default::default()
            },
            Device {
                name: "b".into(),
                driver_module: Some(module("2")),
                ..Default::default()
            },
        ],
    };
    let dir = tempfile::tempdir().unwrap();
    let sys = rocewatch_sysfs::SysRoot::new(dir.path());
    assert_quoted(&crate::checks::driver::driver_checks(&sys, None, &inv));
}

#[test]
fn multirail_fixes() {
    use rocewatch_netlink::route::{Address, Link, Prefix};
    let prefix = |a: &str| Prefix {
        addr: a.parse::<IpAddr>().unwrap(),
        len: 24,
    };
    let o = crate::checks::multirail::Observed {
        netdevs: vec![ND.into(), "rail1".into()],
        links: vec![
            Link {
                index: 2,
                name: ND.into(),
                flags: 1,
            },
            Link {
                index: 3,
                name: "rail1".into(),
                flags: 1,
            },
        ],
        addresses: vec![
            Address {
                index: 2,
                local: prefix("198.51.100.11"),
                flags: 0,
                scope: 0,
                label: None,
            },
            Address {
                index: 3,
                local: prefix("198.51.100.12"),
                flags: 0,
                scope: 0,
                label: None,
            },
        ],
        conf: [("all", [0, 0, 0]), (ND, [0, 0, 1]), ("rail1", [0, 0, 0])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.map(Ok)))
            .collect(),
        conf_dir: "/proc/sys/net/ipv4/conf".into(),
        source: "a test".into(),
        ..Default::default()
    };
    let checks = crate::checks::multirail::decide(&o);
    let mine: Vec<Check> = checks
        .into_iter()
        .filter(|c| c.subject.starts_with(ND) && c.fix.is_some())
        .collect();
    assert_eq!(mine.len(), 2, "the sysctls and the route: {mine:#?}");
    assert_quoted(&mine);
}

#[test]
fn kernel_log_env_and_firewall_fixes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kmsg");
    std::fs::write(
        &log,
        format!("6,1,10,-;mlx5_core 0000:03:00.0 {ND}: Link down\n"),
    )
    .unwrap();
    let checks = crate::checks::kernel_log::kernel_log_checks(
        dir.path(),
        &serde_json::json!({ "path": log }),
        std::time::Duration::from_secs(60),
        rocewatch_klog::text::Clock {
            since_boot_us: 100,
            unix_us: 0,
            utc_offset_s: 0,
        },
    );
    assert_quoted(&checks);
    let host = super::appenv::HostEnv {
        variables: vec![
            ("NCCL_IB_HCA".into(), format!("={DEV}:1")),
            ("NCCL_SOCKET_IFNAME".into(), format!("={ND}")),
        ],
        ..Default::default()
    };
    let mut env = BTreeMap::new();
    env.insert("NCCL_IB_HCA".to_string(), "mlx5_9".to_string());
    let checks = super::appenv::check::env_checks(&host, &Inventory::default(), &[], &env, None);
    assert_quoted(&checks);
    let checks =
        super::appenv::check::env_checks(&host, &Inventory::default(), &[], &BTreeMap::new(), None);
    assert_quoted(&checks);
    // A table and chain named by whoever wrote the rule set; an iptables rule whose
    // comment iptables-save double-quotes.
    let nft = format!(
        r#"{{"nftables":[{{"chain":{{"family":"inet","table":"t{ND}","name":"c{DEV}","hook":"input","policy":"drop"}}}},{{"rule":{{"family":"inet","table":"t{ND}","chain":"c{DEV}","handle":7,"expr":[{{"match":{{"op":"==","left":{{"payload":{{"protocol":"udp","field":"dport"}}}},"right":4791}}}},{{"drop":null}}]}}}}]}}"#
    );
    let b = crate::checks::firewall::nft_blocking(&nft, 4791).unwrap();
    assert_eq!(b.len(), 2, "the rule and the policy: {b:?}");
    for x in &b {
        assert!(only_single_quoted(&x.fix, "touch"), "{}", x.fix);
    }
    let save = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -m udp --dport 4791 -m comment --comment \"$(touch P)\" -j DROP\nCOMMIT\n";
    let b = crate::checks::firewall::iptables_blocking(save, 4791, "iptables");
    assert_eq!(b.len(), 1, "{b:?}");
    assert!(only_single_quoted(&b[0].fix, "touch"), "{}", b[0].fix);
}
