//! The ethtool ioctl path, for real, on this host's own interfaces: a veth pair the test
//! creates (and removes) and the virtio-net `eth0` if there is one, compared with what the
//! `ethtool -S` command prints for the same interface.

use std::process::Command;

use rocewatch_counters_ethtool::normalize::parse_ethtool_s;
use rocewatch_ethtool::EthtoolSocket;

use crate::support::*;

/// A veth pair (also used by the capture tests).
pub(crate) struct Veth(pub String, pub String);

impl Veth {
    /// A veth pair with names unique to this process and test.
    pub(crate) fn create() -> Veth {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let id = std::process::id() % 100_000;
        let (a, b) = (format!("rw{id}x{n}a"), format!("rw{id}x{n}b"));
        let st = Command::new("ip")
            .args(["link", "add", &a, "type", "veth", "peer", "name", &b])
            .status()
            .expect("run ip (iproute2)");
        assert!(
            st.success(),
            "ip link add {a} type veth failed (the test needs root / CAP_NET_ADMIN)"
        );
        for i in [&a, &b] {
            Command::new("ip")
                .args(["link", "set", i, "up"])
                .status()
                .unwrap();
        }
        Veth(a, b)
    }

    pub(crate) fn peer(&self) -> &str {
        &self.1
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

fn ethtool_cli(bin: &std::path::Path, ifname: &str) -> Vec<(String, u64)> {
    let o = Command::new(bin).args(["-S", ifname]).output().unwrap();
    assert!(
        o.status.success(),
        "ethtool -S {ifname}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    parse_ethtool_s(&String::from_utf8_lossy(&o.stdout))
}

#[test]
fn ioctls_read_what_ethtool_prints() {
    let Some(cli) = require(
        "ethtool",
        receiver("ROCEWATCH_ETHTOOL", "/usr/sbin/ethtool", "ethtool"),
    ) else {
        return;
    };
    let veth = Veth::create();
    let sock = EthtoolSocket::open().unwrap();
    let ours = sock.driver_stats(&veth.0).unwrap();
    let theirs = ethtool_cli(&cli, &veth.0);
    assert!(!ours.is_empty(), "veth reports driver statistics");
    assert_eq!(
        ours, theirs,
        "same names, same order, same values on an idle veth"
    );
    let peer_ifindex: u64 =
        std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", veth.peer()))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert_eq!(
        ours.iter()
            .find(|(n, _)| n == "peer_ifindex")
            .map(|(_, v)| *v),
        Some(peer_ifindex)
    );

    // virtio-net, whose counters move: same names; our values never exceed a later reading.
    let virtio = std::fs::read_link("/sys/class/net/eth0/device/driver")
        .ok()
        .is_some_and(|d| d.ends_with("virtio_net"));
    if virtio {
        let ours = sock.driver_stats("eth0").unwrap();
        let theirs = ethtool_cli(&cli, "eth0");
        assert_eq!(
            ours.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            theirs.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
        for ((n, a), (_, b)) in ours.iter().zip(&theirs) {
            assert!(a <= b, "{n}: ours {a} then ethtool {b}");
        }
    } else {
        eprintln!("NOTE: eth0 is not virtio-net here; only the veth pair was compared");
    }
}

#[test]
fn the_agent_reads_a_veth_through_the_ethtool_plugin() {
    let veth = Veth::create();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rw.toml");
    std::fs::write(
        &cfg,
        format!(
            "[plugins.builtin.counters-ethtool.options]\ninterfaces = [\"{}\"]\nraw_include = \"^peer_ifindex$\"\n",
            veth.0
        ),
    )
    .unwrap();
    let o = rocewatch(
        &[
            "collect",
            "--once",
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            fixture("no-devices").to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let s = v["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "rdma.netdev.driver_stat")
        .expect("raw passthrough sample");
    let peer_ifindex: u64 =
        std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", veth.peer()))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert_eq!(s["value"], peer_ifindex);
    assert_eq!(s["attributes"]["network.interface.name"], veth.0.as_str());
    assert_eq!(s["source"], "ethtool:peer_ifindex");
}
