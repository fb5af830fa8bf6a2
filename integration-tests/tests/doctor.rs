//! `rocewatch doctor` on fixture trees: what passes, what fails with which fix, what is
//! skipped because a tree is not the live host. The live guest pair (firewall, probe,
//! MTU to the peer) is in `lab.rs`.

use serde_json::Value;

use crate::support::*;

fn doctor(case: &str, extra: &[&str]) -> (Option<i32>, Value) {
    let root = fixture(case);
    let mut args = vec![
        "doctor",
        "--json",
        "--window",
        "300ms",
        "--sysfs-root",
        root.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = rocewatch(&args, &[]);
    let v = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (o.status.code(), v)
}

/// (check, subject) → (status, evidence, fix).
fn find<'a>(v: &'a Value, check: &str, subject: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == check && c["subject"] == subject)
        .unwrap_or_else(|| panic!("no {check} {subject} in {v}"))
}

#[test]
fn doctor_on_the_mlx5_tree() {
    let (code, v) = doctor("mlx5-roce-dual-port", &[]);
    // mlx5_1 has ECN off on priority 3: a failure, exit 1.
    assert_eq!(code, Some(1), "{v}");
    for (check, subject) in [
        ("devices", ""),
        ("port", "mlx5_0/1"),
        ("netdev", "mlx5_0/1"),
        ("gid", "mlx5_0/1"),
        ("roce-mode", "mlx5_0/1"),
        ("ecn", "mlx5_0/1"),
        ("mtu", ""),
        ("driver", "mlx5_core"),
        ("firmware", "mlx5_core"),
        ("counters", ""),
    ] {
        assert_eq!(
            find(&v, check, subject)["status"],
            "pass",
            "{check} {subject}: {v}"
        );
    }
    assert_eq!(
        find(&v, "gid", "mlx5_0/1")["evidence"],
        "RoCE v2 GID index 3 for 10.0.0.1"
    );
    let ecn = find(&v, "ecn", "mlx5_1/1");
    assert_eq!(ecn["status"], "fail");
    assert_eq!(
        ecn["fix"],
        "echo 1 > /sys/class/net/ens1f1np1/ecn/roce_np/enable/3; echo 1 > /sys/class/net/ens1f1np1/ecn/roce_rp/enable/3"
    );
    // mlx5_1's RoCE mode cannot be read until its configfs directory exists: a warning
    // saying how.
    let mode = find(&v, "roce-mode", "mlx5_1/1");
    assert_eq!(mode["status"], "warn");
    assert!(mode["fix"]
        .as_str()
        .unwrap()
        .contains("mkdir /sys/kernel/config/rdma_cm/mlx5_1"));
    // A tree is not the live host: its firewall and interrupts are not checked.
    for c in ["firewall", "interrupts"] {
        assert_eq!(find(&v, c, "")["status"], "skip", "{c}");
    }
    let why = find(&v, "firewall", "")["evidence"].clone();
    assert!(
        why.as_str().unwrap().ends_with(
            "is not the live /sys: this host's firewall rules say nothing about that tree"
        ),
        "{why}"
    );
    assert_eq!(find(&v, "probe", "")["status"], "skip");
    let cap = find(&v, "capture", "ens1f0np0");
    assert!(
        cap["evidence"]
            .as_str()
            .unwrap()
            .contains("tcpdump -i ens1f0np0 -nn udp port 4791"),
        "{cap}"
    );
    // The expected priority is an option: on priority 4 ECN fails on mlx5_0 too.
    let (_, v4) = doctor("mlx5-roce-dual-port", &["--priority", "4"]);
    assert_eq!(find(&v4, "ecn", "mlx5_0/1")["status"], "fail");
}

#[test]
fn doctor_on_other_trees() {
    // Soft-RoCE: RoCE checks pass, the mlx5 QoS knobs are unsupported (skipped).
    let (code, v) = doctor("rxe-soft-roce", &[]);
    assert_eq!(find(&v, "gid", "rxe0/1")["status"], "pass", "{v}");
    assert_eq!(find(&v, "ecn", "rxe0/1")["status"], "skip");
    assert!(find(&v, "ecn", "rxe0/1")["evidence"]
        .as_str()
        .unwrap()
        .starts_with("unsupported"));
    assert_eq!(find(&v, "mtu", "")["evidence"], "eth0 1500 (RoCE MTU 1024)");
    assert_eq!(find(&v, "driver", "rdma_rxe")["status"], "pass", "{v}");
    assert_eq!(code, Some(0), "warnings only: {v}");
    // A RoCE port whose netdev has no address: no IP, with the command.
    let (code, v) = doctor("no-pma-restricted", &[]);
    assert_eq!(code, Some(1));
    assert_eq!(
        find(&v, "ip", "mlx5_4/1")["fix"],
        "ip addr add ADDRESS/PREFIX dev ens3np0"
    );
    // Its driver stack is half a vendor package's: a warning naming the modules.
    let driver = find(&v, "driver", "mlx5_core");
    assert_eq!(driver["status"], "warn", "{driver}");
    assert!(driver["evidence"]
        .as_str()
        .unwrap()
        .contains("mlx5_core 23.10-2.1.3 (out-of-tree"));
    assert!(driver["fix"]
        .as_str()
        .unwrap()
        .contains("modinfo -F filename mlx5_core ib_core mlx5_ib"));
    // InfiniBand: the RoCE checks do not apply.
    let (_, v) = doctor("ib-hca", &[]);
    let nd = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "netdev")
        .unwrap();
    assert_eq!(nd["status"], "info", "{v}");
    // No devices: one failure with the fix, and the text form.
    let (code, v) = doctor("no-devices", &[]);
    assert_eq!(code, Some(1));
    assert_eq!(v["checks"].as_array().unwrap().len(), 1);
    let root = fixture("no-devices");
    let o = rocewatch(&["doctor", "--sysfs-root", root.to_str().unwrap()], &[]);
    let text = stdout(&o);
    assert!(
        text.starts_with("FAIL  devices: no RDMA devices under "),
        "{text}"
    );
    assert!(
        text.contains("      fix: load the NIC's RDMA driver"),
        "{text}"
    );
    assert!(
        text.ends_with("0 passed, 0 warnings, 1 failed, 0 skipped\n"),
        "{text}"
    );
}

/// The two-socket GPU host (fixtures/gpu-two-socket, see its SOURCE.md): the host checks
/// find each fault put in it.
#[test]
fn doctor_on_the_gpu_host() {
    let (code, v) = doctor("gpu-two-socket", &[]);
    assert_eq!(code, Some(1), "{v}");
    // PCIe links: mlx5_2 trained at x8 of x16, below its 200 Gb/s port.
    let link = find(&v, "pcie-link", "mlx5_2");
    assert_eq!(link["status"], "fail");
    assert_eq!(
        link["evidence"],
        "0000:9d:00.0 trained at x8 at 16 GT/s of x16 at 16 GT/s: caps ~126 Gb/s, below the 200 Gb/s port"
    );
    for d in ["mlx5_0", "mlx5_1", "mlx5_3"] {
        assert_eq!(find(&v, "pcie-link", d)["status"], "pass", "{d}");
    }
    // Trees without PCIe link files skip, saying why.
    let (_, v) = doctor("mlx5-roce-dual-port", &[]);
    assert_eq!(find(&v, "pcie-link", "mlx5_0")["status"], "skip");
    let (_, v) = doctor("rxe-soft-roce", &[]);
    assert_eq!(find(&v, "pcie-link", "rxe0")["status"], "skip");
}

/// The link layer: a port unlike most of the host's warns; with --link-layer it fails,
/// with the mlxconfig setting for its PCI function.
#[test]
fn doctor_link_layer_on_the_gpu_host() {
    let (_, v) = doctor("gpu-two-socket", &[]);
    let ll = find(&v, "link-layer", "mlx5_1/1");
    assert_eq!(ll["status"], "warn", "{v}");
    assert_eq!(
        ll["evidence"],
        "InfiniBand, but the port is meant for RoCE (Ethernet) (3 of the host's 4 ports run Ethernet); PCI function 0000:41:00.0"
    );
    assert_eq!(find(&v, "link-layer", "mlx5_0/1")["status"], "pass");
    let (_, v) = doctor("gpu-two-socket", &["--link-layer", "ethernet"]);
    let ll = find(&v, "link-layer", "mlx5_1/1");
    assert_eq!(ll["status"], "fail");
    assert!(ll["fix"].as_str().unwrap().starts_with(
        "mlxconfig -d 0000:41:00.0 set LINK_TYPE_P1=2 (ETH), then mlxfwreset -d 0000:41:00.0 reset"
    ));
    // An IB host told it is RoCE: every port fails.
    let (code, v) = doctor("ib-hca", &["--link-layer", "ethernet"]);
    assert_eq!(code, Some(1));
    assert_eq!(find(&v, "link-layer", "mlx4_0/2")["status"], "fail");
    assert!(find(&v, "link-layer", "mlx4_0/2")["fix"]
        .as_str()
        .unwrap()
        .contains("LINK_TYPE_P2=2"));
}

/// NUMA: with the tree's /proc, mlx5_3 (node 1) has its interrupts on node 0's CPUs;
/// without it, the check says the trees do not go together.
#[test]
fn doctor_numa_on_the_gpu_host() {
    let proc = fixture("gpu-two-socket").parent().unwrap().join("proc");
    let (_, v) = doctor("gpu-two-socket", &["--procfs-root", proc.to_str().unwrap()]);
    let n = find(&v, "numa", "mlx5_3");
    assert_eq!(n["status"], "warn", "{v}");
    assert_eq!(
        n["evidence"],
        "the NIC is on node 1 (CPUs 16-31) but its 4 interrupts run on CPUs 0-3, none of node 1: every completion crosses the socket interconnect"
    );
    assert!(n["fix"]
        .as_str()
        .unwrap()
        .contains("echo 16-31 > /proc/irq/$IRQ/smp_affinity_list"));
    for d in ["mlx5_0", "mlx5_1", "mlx5_2"] {
        assert_eq!(find(&v, "numa", d)["status"], "pass", "{d}");
    }
    let (_, v) = doctor("gpu-two-socket", &[]);
    assert_eq!(find(&v, "numa", "")["status"], "skip");
}

/// GPUs: the GPU×NIC matrix doctor computes is the one written by hand in the fixture's
/// SOURCE.md; nvidia_peermem is missing; one bridge redirects peer-to-peer traffic.
#[test]
fn doctor_gpus_on_the_gpu_host() {
    let (_, v) = doctor("gpu-two-socket", &[]);
    let source = std::fs::read_to_string(
        fixture("gpu-two-socket")
            .parent()
            .unwrap()
            .join("SOURCE.md"),
    )
    .unwrap();
    let by_hand: Vec<Vec<String>> = source
        .lines()
        .skip_while(|l| !l.starts_with("      NIC0"))
        .take_while(|l| *l != "```")
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(by_hand.len(), 9, "{source}");
    let topo = find(&v, "gpu-topology", "");
    assert_eq!(topo["status"], "info");
    let computed: Vec<Vec<String>> = topo["evidence"]
        .as_str()
        .unwrap()
        .lines()
        .skip(1)
        .take(9)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(computed, by_hand, "{}", topo["evidence"]);
    assert!(topo["evidence"]
        .as_str()
        .unwrap()
        .ends_with("NIC0=mlx5_0 (0000:1c:00.0) NIC1=mlx5_1 (0000:41:00.0) NIC2=mlx5_2 (0000:9d:00.0) NIC3=mlx5_3 (0000:bc:00.0)"));
    assert_eq!(
        find(&v, "gpu-nic", "GPU2 0000:3f:00.0")["evidence"],
        "nearest RDMA device mlx5_1 (PXB)"
    );
    let gd = find(&v, "gpudirect", "");
    assert_eq!(gd["status"], "warn");
    assert!(gd["fix"]
        .as_str()
        .unwrap()
        .starts_with("modprobe nvidia_peermem"));
    let acs = find(&v, "acs", "0000:19:02.0");
    assert_eq!(acs["status"], "warn");
    assert!(acs["evidence"]
        .as_str()
        .unwrap()
        .starts_with("ACS P2P Request Redirect on (control 0x001d at 0x14e"));
    assert!(acs["fix"]
        .as_str()
        .unwrap()
        .contains("setpci -s 0000:19:02.0 ECAP_ACS+0x6.w=0000"));
    assert_eq!(find(&v, "acs", "")["status"], "pass");
    // A host without GPUs says so.
    let (_, v) = doctor("mlx5-roce-dual-port", &[]);
    assert_eq!(find(&v, "gpu-topology", "")["status"], "skip");
}

/// A network namespace this test creates, deleted when dropped (also on a failed
/// assertion).
struct Netns(String);

impl Netns {
    /// Fails loudly when it cannot be made: these checks need root and `ip netns`.
    fn new(name: String) -> Netns {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "the multi-rail test creates a network namespace (ip netns add): it must run as root"
        );
        let o = std::process::Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .unwrap_or_else(|e| panic!("the multi-rail test needs iproute2's ip: {e}"));
        assert!(
            o.status.success(),
            "ip netns add {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Netns(name)
    }

    /// `ip netns exec NS ARGS`, which must succeed.
    fn exec(&self, args: &[&str]) {
        let o = std::process::Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "in {}: {}: {}",
            self.0,
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// `rocewatch doctor --json` inside the namespace on a fixture tree, with the live
    /// /proc (whose sys/net is the namespace's): its multi-rail checks.
    fn doctor_multirail(&self, case: &str) -> Vec<Value> {
        let root = fixture(case);
        let o = std::process::Command::new("ip")
            .args(["netns", "exec", &self.0])
            .arg(&artifacts().rocewatch)
            .args(["doctor", "--json", "--window", "300ms", "--sysfs-root"])
            .arg(&root)
            .args(["--procfs-root", "/proc"])
            .current_dir(crate::support::root())
            .output()
            .unwrap();
        let v: Value = serde_json::from_str(&stdout(&o))
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"].as_str().unwrap().starts_with("multirail"))
            .cloned()
            .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

fn only<'a>(checks: &'a [Value], check: &str, subject: &str) -> &'a Value {
    checks
        .iter()
        .find(|c| c["check"] == check && c["subject"] == subject)
        .unwrap_or_else(|| panic!("no {check} {subject} in {checks:#?}"))
}

/// Multi-rail: the mlx5 dual-port tree's netdevs (ens1f0np0, ens1f1np1, with 10.0.0.1 and
/// 10.0.1.1 in their GIDs) as two veth rails in 10.0.0.0/16 in a namespace of our own.
/// Bare, every sysctl and policy route is missing and named; after running the fix lines
/// doctor printed, every check passes.
#[test]
fn doctor_multirail_in_a_network_namespace() {
    let ns = Netns::new(format!("rw-mr-{}", std::process::id()));
    // No such netdevs in the namespace yet: skipped, saying so.
    let checks = ns.doctor_multirail("mlx5-roce-dual-port");
    for nd in ["ens1f0np0", "ens1f1np1"] {
        let c = only(&checks, "multirail", nd);
        assert_eq!(c["status"], "skip", "{c}");
        assert!(c["evidence"]
            .as_str()
            .unwrap()
            .contains("is not an interface of this network namespace (rtnetlink lists lo)"));
    }
    ns.exec(&["ip", "link", "set", "lo", "up"]);
    for (i, (nd, addr)) in [("ens1f0np0", "10.0.0.1/16"), ("ens1f1np1", "10.0.1.1/16")]
        .into_iter()
        .enumerate()
    {
        let peer = format!("mrpeer{i}");
        ns.exec(&[
            "ip", "link", "add", nd, "type", "veth", "peer", "name", &peer,
        ]);
        ns.exec(&["ip", "addr", "add", addr, "dev", nd]);
        ns.exec(&["ip", "link", "set", &peer, "up"]);
        ns.exec(&["ip", "link", "set", nd, "up"]);
    }
    // Known `all` values (a namespace may inherit the host's), strict rp_filter on one rail.
    ns.exec(&[
        "sysctl",
        "-qw",
        "net.ipv4.conf.all.arp_ignore=0",
        "net.ipv4.conf.all.arp_announce=0",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.ens1f1np1.rp_filter=1",
    ]);

    let checks = ns.doctor_multirail("mlx5-roce-dual-port");
    let group = only(&checks, "multirail", "10.0.0.0/16");
    assert_eq!(group["status"], "info", "{checks:#?}");
    assert!(group["evidence"]
        .as_str()
        .unwrap()
        .starts_with("ens1f0np0 10.0.0.1, ens1f1np1 10.0.1.1 share 10.0.0.0/16"));
    let fix = |c: &Value| -> Vec<String> {
        c["fix"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let mut wanted = Vec::new();
    for (nd, strict) in [("ens1f0np0", false), ("ens1f1np1", true)] {
        let c = only(&checks, "multirail-sysctl", nd);
        assert_eq!(c["status"], "warn", "{c}");
        let mut lines = vec![
            format!("sysctl -w net.ipv4.conf.{nd}.arp_ignore=1"),
            format!("sysctl -w net.ipv4.conf.{nd}.arp_announce=2"),
        ];
        if strict {
            lines.push(format!("sysctl -w net.ipv4.conf.{nd}.rp_filter=2"));
            // Read from the namespace's /proc/sys/net: the value set only in there.
            assert!(c["evidence"]
                .as_str()
                .unwrap()
                .contains("rp_filter 1 (all 0, ens1f1np1 1)"));
        } else {
            assert!(!c["fix"].as_str().unwrap().contains("rp_filter"), "{c}");
        }
        for l in &lines {
            assert!(fix(c).contains(l), "{l} not in {c}");
        }
        wanted.extend(lines);
    }
    for (nd, addr, table) in [
        ("ens1f0np0", "10.0.0.1", 100),
        ("ens1f1np1", "10.0.1.1", 101),
    ] {
        let c = only(&checks, "multirail-route", &format!("{nd} {addr}"));
        assert_eq!(c["status"], "warn", "{c}");
        let lines = [
            format!("ip rule add from {addr} table {table}"),
            format!("ip route add 10.0.0.0/16 dev {nd} src {addr} table {table}"),
        ];
        assert_eq!(fix(c)[..2], lines, "{c}");
        wanted.extend(lines);
    }
    assert_eq!(
        checks.iter().filter(|c| c["status"] == "warn").count(),
        4,
        "{checks:#?}"
    );

    // Run the commands doctor printed (not the lines for files), in the namespace.
    let mut ran = Vec::new();
    for c in &checks {
        for line in fix(c) {
            if line.starts_with("sysctl -w ") || line.starts_with("ip ") {
                ns.exec(&line.split_whitespace().collect::<Vec<_>>());
                ran.push(line);
            }
        }
    }
    ran.sort();
    wanted.sort();
    assert_eq!(ran, wanted, "the fixes are exactly the missing pieces");

    let checks = ns.doctor_multirail("mlx5-roce-dual-port");
    let ours: Vec<&Value> = checks
        .iter()
        .filter(|c| c["check"] != "multirail")
        .collect();
    assert_eq!(ours.len(), 4, "{checks:#?}");
    for c in ours {
        assert_eq!(c["status"], "pass", "{c}");
    }
    assert_eq!(
        only(&checks, "multirail-route", "ens1f1np1 10.0.1.1")["evidence"],
        "rule 32764 from 10.0.1.1 lookup 101; table 101: 10.0.0.0/16 dev ens1f1np1 src 10.0.1.1"
    );
    assert_eq!(
        only(&checks, "multirail-sysctl", "ens1f1np1")["evidence"],
        "arp_ignore 1 (all 0, ens1f1np1 1), arp_announce 2 (all 0, ens1f1np1 2), rp_filter 2 (all 0, ens1f1np1 2) (the kernel applies the larger of all and the interface's value)"
    );
}

/// Whether every `touch` in `text` lies inside single quotes as `sh` reads it (an
/// apostrophe between letters is prose).
fn touch_only_single_quoted(text: &str) -> bool {
    let b = text.as_bytes();
    let (mut single, mut double, mut i) = (false, false, 0);
    let mut inside = vec![false; b.len()];
    let letter = |j: usize| b.get(j).is_some_and(u8::is_ascii_alphabetic);
    while i < b.len() {
        match b[i] {
            b'\'' if single => single = false,
            _ if single => inside[i] = true,
            b'\\' => i += 1,
            b'"' => double = !double,
            b'\'' if !double && (i == 0 || !letter(i - 1) || !letter(i + 1)) => single = true,
            _ => {}
        }
        i += 1;
    }
    text.match_indices("touch")
        .all(|(at, n)| (at..at + n.len()).all(|j| inside[j]))
}

/// A netdev called `$(touch${IFS}P)` (a valid Linux name): every fix doctor prints for
/// it, and the capture command, keep it quoted.
#[test]
fn doctor_fixes_quote_a_netdev_name_a_shell_would_run() {
    let tree = crate::appenv::hostile_netdev_tree();
    let sys = tree.path().join("sys");
    let o = rocewatch(
        &[
            "doctor",
            "--json",
            "--window",
            "100ms",
            "--priority",
            "4",
            "--sysfs-root",
            sys.to_str().unwrap(),
        ],
        &[],
    );
    let v: Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    let mut seen = 0;
    for c in v["checks"].as_array().unwrap() {
        for text in [&c["fix"], &c["evidence"]] {
            let Some(t) = text.as_str() else { continue };
            if (c["check"] == "capture" || text == &c["fix"]) && t.contains("touch") {
                seen += 1;
                assert!(touch_only_single_quoted(t), "{c}");
            }
        }
    }
    // ECN on priority 4 fails on mlx5_0 (the netdev's port; PFC is not read from a tree),
    // and capture names it.
    assert!(seen >= 2, "{v}");
}

/// doctor's kernel-log check on a recorded log (fixtures/kernel-log, see its SOURCE.md):
/// the check's results, over the whole log.
fn doctor_kernel_log(file: &str) -> Vec<Value> {
    doctor_kernel_log_with(file, &["--log-window", "36500d"])
}

/// The kernel-log check's results on a recorded log, with `extra` arguments.
fn doctor_kernel_log_with(file: &str, extra: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("log.toml");
    let log = root()
        .join("integration-tests/fixtures/kernel-log")
        .join(file);
    std::fs::write(
        &cfg,
        format!(
            "[plugins.builtin.kernel-log.options]\npath = {:?}\n",
            log.to_str().unwrap()
        ),
    )
    .unwrap();
    let (_, v) = doctor(
        "mlx5-roce-dual-port",
        &[&["--config", cfg.to_str().unwrap()], extra].concat(),
    );
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == "kernel-log")
        .cloned()
        .collect()
}

/// The issue's case: a syslog kern.log with a firmware command timeout and a health
/// report passed as "0 records read". Each layout operators keep is read.
#[test]
fn doctor_reads_the_kernel_log_as_syslog_journalctl_and_dmesg_write_it() {
    for file in [
        "kern.log",
        "kern.log-rfc3339",
        "journalctl-k.txt",
        "dmesg.txt",
    ] {
        let checks = doctor_kernel_log(file);
        for pattern in ["cmd_timeout", "health_compromised"] {
            let c = checks
                .iter()
                .find(|c| c["evidence"].as_str().unwrap().starts_with(pattern))
                .unwrap_or_else(|| panic!("{file}: no {pattern} in {checks:#?}"));
            assert_eq!(c["status"], "fail", "{file}: {c}");
            assert_eq!(c["subject"], "mlx5_0", "{file}: {c}");
        }
    }
}

/// Doctor never passes on no evidence: on an empty tree, and on a device directory with
/// an empty port directory (with an empty proc tree, an empty kernel log and an empty
/// `--env`), no check says PASS.
#[test]
fn doctor_passes_nothing_on_empty_input() {
    let dir = tempfile::tempdir().unwrap();
    let (empty, bare, proc_root) = (
        dir.path().join("empty"),
        dir.path().join("bare"),
        dir.path().join("proc"),
    );
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::create_dir_all(bare.join("class/infiniband/dev0/ports/1")).unwrap();
    std::fs::create_dir_all(&proc_root).unwrap();
    let (log, env, cfg) = (
        dir.path().join("kmsg"),
        dir.path().join("job.env"),
        dir.path().join("log.toml"),
    );
    std::fs::write(&log, "").unwrap();
    std::fs::write(&env, "").unwrap();
    std::fs::write(
        &cfg,
        format!(
            "[plugins.builtin.kernel-log.options]\npath = {:?}\n",
            log.to_str().unwrap()
        ),
    )
    .unwrap();
    for (tree, at_least) in [(&empty, 1), (&bare, 10)] {
        let o = rocewatch(
            &[
                "doctor",
                "--json",
                "--window",
                "100ms",
                "--sysfs-root",
                tree.to_str().unwrap(),
                "--procfs-root",
                proc_root.to_str().unwrap(),
                "--config",
                cfg.to_str().unwrap(),
                "--env",
                env.to_str().unwrap(),
            ],
            &[],
        );
        let v: Value = serde_json::from_str(&stdout(&o))
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        let checks = v["checks"].as_array().unwrap();
        assert!(checks.len() >= at_least, "{v}");
        let passed: Vec<&Value> = checks.iter().filter(|c| c["status"] == "pass").collect();
        assert!(
            passed.is_empty(),
            "{}: passed on no evidence: {passed:#?}",
            tree.display()
        );
    }
}

/// The userspace stack on a container-like host built here: the mlx5 tree with the
/// kernel's uverbs and rdma_cm class devices (`class/infiniband_verbs/uverbsN/{ibdev,dev}`,
/// `class/misc/rdma_cm/dev`: uverbs_main.c, ucma.c), a root file system with rdma-core
/// 44.0's libibverbs and only some of it: `uverbs0` passed in as a real character device
/// (231:192, made with mknod, mode 0666 as the kernel makes it), `uverbs1` and `rdma_cm`
/// not; the mlx5 provider present or taken away; a workload process (a proc tree's
/// `4242`) with 64 KiB of locked memory and no CAP_IPC_LOCK.
#[test]
fn doctor_userspace_stack_on_a_container_like_host() {
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test makes a character device with mknod: it needs root (CI runs as root)");
    }
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&sys)
        .status()
        .unwrap();
    assert!(st.success());
    for (n, dev, minor) in [(0, "mlx5_0", 192), (1, "mlx5_1", 193)] {
        let d = sys.join(format!("class/infiniband_verbs/uverbs{n}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("ibdev"), format!("{dev}\n")).unwrap();
        std::fs::write(d.join("dev"), format!("231:{minor}\n")).unwrap();
    }
    std::fs::create_dir_all(sys.join("class/misc/rdma_cm")).unwrap();
    std::fs::write(sys.join("class/misc/rdma_cm/dev"), "10:58\n").unwrap();
    let rootfs = dir.path().join("rootfs");
    let lib = rootfs.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(lib.join("libibverbs")).unwrap();
    std::fs::write(lib.join("libibverbs.so.1.14.44.0"), "").unwrap();
    std::fs::write(lib.join("libibverbs/libmlx5-rdmav34.so"), "").unwrap();
    std::fs::create_dir_all(rootfs.join("etc/libibverbs.d")).unwrap();
    std::fs::write(rootfs.join("etc/libibverbs.d/mlx5.driver"), "driver mlx5\n").unwrap();
    std::fs::create_dir_all(rootfs.join("dev/infiniband")).unwrap();
    let node =
        std::ffi::CString::new(rootfs.join("dev/infiniband/uverbs0").to_str().unwrap()).unwrap();
    let r = unsafe {
        libc::mknod(
            node.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(231, 192),
        )
    };
    assert_eq!(r, 0, "mknod: {}", std::io::Error::last_os_error());
    unsafe { libc::chmod(node.as_ptr(), 0o666) };
    let proc = dir.path().join("proc/4242");
    std::fs::create_dir_all(&proc).unwrap();
    std::fs::write(
        proc.join("limits"),
        "Limit                     Soft Limit           Hard Limit           Units     \n\
         Max open files            1024                 524288               files     \n\
         Max locked memory         65536                65536                bytes     \n",
    )
    .unwrap();
    std::fs::write(
        proc.join("status"),
        "Name:\tworkload\nCapEff:\t00000000a80425fb\n",
    )
    .unwrap();
    let run = || {
        let o = rocewatch(
            &[
                "doctor",
                "--json",
                "--window",
                "100ms",
                "--sysfs-root",
                sys.to_str().unwrap(),
                "--procfs-root",
                dir.path().join("proc").to_str().unwrap(),
                "--rootfs",
                rootfs.to_str().unwrap(),
                "--pid",
                "4242",
                "--user",
                "nobody",
            ],
            &[],
        );
        let v: Value = serde_json::from_str(&stdout(&o))
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        v
    };
    let v = run();
    // (check, subject) has `status` and its evidence holds `says`; the check back.
    let expect = |v: &Value, check: &str, subject: &str, status: &str, says: &str| -> Value {
        let c = find(v, check, subject).clone();
        assert_eq!(c["status"], status, "{c}");
        assert!(c["evidence"].as_str().unwrap().contains(says), "{c}");
        c
    };
    expect(&v, "rdma-core", "", "pass", "rdma-core 44.0");
    expect(
        &v,
        "provider",
        "mlx5_0",
        "pass",
        "driver mlx5_core: provider mlx5",
    );
    expect(&v, "uverbs", "mlx5_0", "pass", "(231:192, mode 666)");
    let c = expect(
        &v,
        "uverbs",
        "mlx5_1",
        "fail",
        "dev/infiniband/uverbs1 is not there",
    );
    assert!(
        c["fix"]
            .as_str()
            .unwrap()
            .contains("--device /dev/infiniband/uverbs1"),
        "{c}"
    );
    expect(&v, "rdma-cm", "", "warn", "rdma_cm is not there");
    let c = expect(
        &v,
        "memlock",
        "",
        "fail",
        "process 4242: locked memory 64 KiB (hard 64 KiB)",
    );
    assert!(
        c["fix"].as_str().unwrap().contains("--ulimit memlock=-1"),
        "{c}"
    );
    // The node made 0600 root's: nobody cannot open it.
    unsafe { libc::chmod(node.as_ptr(), 0o600) };
    let v = run();
    expect(&v, "uverbs", "mlx5_0", "fail", "nobody cannot open it");
    // CAP_IPC_LOCK lifts the limit; the provider taken away fails both devices.
    std::fs::write(
        proc.join("status"),
        "Name:\tworkload\nCapEff:\t000001ffffffffff\n",
    )
    .unwrap();
    std::fs::remove_file(lib.join("libibverbs/libmlx5-rdmav34.so")).unwrap();
    let v = run();
    assert_eq!(find(&v, "memlock", "")["status"], "pass", "{v}");
    let c = expect(
        &v,
        "provider",
        "mlx5_1",
        "fail",
        "etc/libibverbs.d names it but no libmlx5-rdmav*.so is installed",
    );
    assert!(
        c["fix"].as_str().unwrap().contains("ibverbs-providers"),
        "{c}"
    );
}

/// The kernel-log window ends at the uptime of the proc tree given with `--procfs-root`
/// (a recorded host's), as in `health`: the recorded dmesg (1021-1030 s after boot) read
/// at an uptime of 1040 s has a firmware command timeout in the last minute; read at
/// 5000 s, none.
#[test]
fn doctor_ends_the_kernel_log_window_at_the_procfs_roots_uptime() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    std::fs::create_dir(&proc_root).unwrap();
    let at = |uptime: &str| -> Vec<Value> {
        std::fs::write(proc_root.join("uptime"), uptime).unwrap();
        let p = proc_root.to_str().unwrap();
        doctor_kernel_log_with("dmesg.txt", &["--log-window", "1m", "--procfs-root", p])
    };
    let recent = at("1040.00 3.00\n");
    assert!(
        recent
            .iter()
            .any(|c| c["status"] == "fail"
                && c["evidence"].as_str().unwrap().starts_with("cmd_timeout")),
        "read at 1040 s after boot: {recent:#?}"
    );
    let later = at("5000.00 3.00\n");
    assert!(
        !later.is_empty() && later.iter().all(|c| c["status"] != "fail"),
        "read at 5000 s after boot: {later:#?}"
    );
}
