//! The soft-RoCE lab: a pair of QEMU guests running the stock Debian kernel with a real
//! `rdma_rxe` device each (`integration-tests/lab/rxe-lab.sh`). The `rocewatch` binary
//! built here runs inside both guests (`integration-tests/lab/counters.sh`) before, during
//! and after an `ib_write_bw` between them; this side checks what it recorded:
//!
//! - hw_counters over RDMA netlink and from sysfs give the same series and numbers: equal
//!   when the port is idle, and sandwiched between the sysfs readings before and after
//!   while traffic moves them; `rdma statistic show` agrees the same way;
//! - the recorded netlink replies decode to the values the agent reported;
//! - traffic counters rose by at least what perftest moved (packets >= iterations x
//!   packets per message at the active MTU);
//! - `rocewatch discover` agrees with `ibv_devinfo -v` and `rdma link show`.
//!
//! The lab needs root, QEMU and debootstrap (installed by scripts/install-test-deps.sh,
//! which also builds the image into .cache/rxe-lab). Without the image or QEMU a plain
//! `cargo test` says SKIPPED and how to get them; `scripts/test.sh` (and CI) requires them
//! (`ROCEWATCH_REQUIRE_ALL=1`). A lab that cannot boot fails the test;
//! ROCEWATCH_SKIP_LAB=1 skips it knowingly outside scripts/test.sh, saying so.
//! ROCEWATCH_LAB_RUNS=DIR boots into DIR/lab-<script> instead of target/, and judges a run
//! already finished there (both guests' commands exited 0) without booting again: for
//! working on a lab's tests, or two checkouts' labs apart.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::*;

/// Runs the counters lab once per test run; returns the output directory.
fn lab_run() -> Option<&'static Path> {
    static OUT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    said_if_skipped(OUT.get_or_init(|| run_lab("counters")).as_deref())
}

/// Every test of a lab that did not run says so (the reason is said once, by the first).
fn said_if_skipped(out: Option<&'static Path>) -> Option<&'static Path> {
    if out.is_none() {
        skipped("soft-RoCE lab test (the lab did not run: see the first SKIPPED line for why)");
    }
    out
}

/// Runs the probe lab once per test run; returns the output directory.
/// Held by a lab boot, and by other tests heavy enough on both cores (the fleet rules'
/// simulations) to skew the lab's timing comparisons with perftest.
pub(crate) static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn probe_lab() -> Option<&'static Path> {
    static OUT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    said_if_skipped(OUT.get_or_init(|| run_lab("probe")).as_deref())
}

/// Boot the guest pair with `integration-tests/lab/<script>.sh`; the agent and the probe
/// plugin built here are shared with the guests. The probe boot's guests have two NICs
/// each (two rails, for the fleet's part: `fleet.sh`).
fn run_lab(script: &str) -> Option<PathBuf> {
    {
        let runs = std::env::var_os("ROCEWATCH_LAB_RUNS").map(PathBuf::from);
        let runs = runs.unwrap_or_else(target_dir);
        let finished = |out: &Path| {
            ["a", "b"].iter().all(|r| {
                std::fs::read_to_string(out.join(format!("exit-{r}")))
                    .is_ok_and(|e| e.trim() == "0")
            })
        };
        if std::env::var_os("ROCEWATCH_LAB_RUNS").is_some()
            && finished(&runs.join(format!("lab-{script}")))
        {
            eprintln!(
                "SOFT-RoCE LAB: judging the finished {script} run in {} (ROCEWATCH_LAB_RUNS), not booting",
                runs.display()
            );
            return Some(runs.join(format!("lab-{script}")));
        }
        if std::env::var("ROCEWATCH_SKIP_LAB").as_deref() == Ok("1") && !require_all() {
            skipped("soft-RoCE lab (ROCEWATCH_SKIP_LAB=1); this test did not run");
            return None;
        }
        // The lab image scripts/install-test-deps.sh builds, and QEMU to boot it.
        let image = root().join(".cache/rxe-lab");
        // rxe-lab.sh marks an unpacked kernel with kernel/PACKAGE/.done.
        let kernel = std::fs::read_dir(image.join("kernel"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.path().join(".done").is_file());
        let built = kernel && image.join("base.cpio.gz").is_file();
        let qemu = std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|d| d.join("qemu-system-x86_64").is_file())
        });
        if !built || !qemu {
            missing(
                if qemu { "the soft-RoCE lab image (.cache/rxe-lab)" } else { "qemu-system-x86_64" },
                "run scripts/install-test-deps.sh (it installs QEMU and builds the lab image, about a minute)",
            );
            return None;
        }
        // One lab at a time: two pairs of emulated guests on two cores starve each other.
        let _one = HEAVY.lock().unwrap_or_else(|p| p.into_inner());
        let share = runs.join(format!("lab-share-{script}"));
        let out = runs.join(format!("lab-{script}"));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&share).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::copy(&artifacts().rocewatch, share.join("rocewatch")).unwrap();
        std::fs::copy(
            &artifacts().probe_so,
            share.join("librocewatch_probe_verbs.so"),
        )
        .unwrap();
        let lab = root().join("integration-tests/lab");
        // The bring-up walk, the preflight sweep and the topology, sourced by probe.sh.
        for sourced in ["walkthrough.sh", "preflight.sh", "fleet.sh"] {
            std::fs::copy(lab.join(sourced), share.join(sourced)).unwrap();
        }
        // netdevsim for each kernel netdevsim-build.sh built it for (the guest takes its
        // own release's), with the guest side (counters.sh sources netdevsim.sh in guest a).
        std::fs::copy(lab.join("netdevsim.sh"), share.join("netdevsim.sh")).unwrap();
        for built in netdevsim_builds() {
            let to = share.join("netdevsim").join(built.file_name().unwrap());
            std::fs::create_dir_all(&to).unwrap();
            for ko in ["netdevsim.ko", "psample.ko"] {
                std::fs::copy(built.join(ko), to.join(ko)).unwrap();
            }
        }
        let boot = || {
            Command::new("bash")
                .arg(lab.join("rxe-lab.sh"))
                .args(["run", "--pair"])
                .arg(lab.join(format!("{script}.sh")))
                .arg(&out)
                .env("RXE_LAB_SHARE", &share)
                .env("RXE_LAB_NICS", if script == "probe" { "2" } else { "1" })
                .status()
                .expect("run integration-tests/lab/rxe-lab.sh")
        };
        let mut st = boot();
        if !st.success() {
            // An emulated pair stalls now and then (one boot in CI ran into the guests'
            // 900 s limit where the next one took 343 s). Booted once more, loudly, with
            // the failed boot's logs kept for a look; a second failure fails the tests.
            let kept = runs.join(format!("lab-{script}-failed-boot"));
            let _ = std::fs::remove_dir_all(&kept);
            let _ = std::fs::rename(&out, &kept);
            eprintln!(
                "SOFT-RoCE LAB: the {script} lab failed on its first boot ({st}); its logs are in {}; booting it once more",
                kept.display()
            );
            std::fs::create_dir_all(&out).unwrap();
            st = boot();
        }
        assert!(
            st.success(),
            "the soft-RoCE lab failed twice (boot, rxe setup or the guest script): see {}/console-*.log and guest-*.log",
            out.display()
        );
        Some(out)
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json(p: &Path) -> Value {
    serde_json::from_str(&read(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// hw counter file name -> (metric name, attributes, value, source) of a collection.
fn hw_counters(collection: &Value) -> BTreeMap<String, (String, Value, u64, String)> {
    let mut out = BTreeMap::new();
    for s in collection["samples"].as_array().expect("samples") {
        let source = s["source"].as_str().unwrap();
        let Some((_, file)) = source.split_once("hw_counters/") else {
            continue;
        };
        out.insert(
            file.to_string(),
            (
                s["name"].as_str().unwrap().to_string(),
                s["attributes"].clone(),
                s["value"].as_u64().unwrap(),
                source.to_string(),
            ),
        );
    }
    out
}

/// `rdma -j statistic show`: counter -> value of the one port.
fn rdma_statistic(v: &Value) -> BTreeMap<String, u64> {
    let port = &v.as_array().expect("rdma -j statistic: an array")[0];
    port.as_object()
        .unwrap()
        .iter()
        .filter_map(|(k, v)| v.as_u64().filter(|_| k != "port").map(|v| (k.clone(), v)))
        .collect()
}

const ROLES: [&str; 2] = ["a", "b"];

#[test]
fn lab_netlink_and_sysfs_hw_counters_agree() {
    let Some(out) = lab_run() else { return };
    for role in ROLES {
        let r = out.join(role);
        for phase in ["idle0", "during", "idle1"] {
            let at = |k: &str| r.join(format!("{phase}-{k}"));
            let before = hw_counters(&json(&at("sysfs-before.json")));
            let nl = hw_counters(&json(&at("netlink.json")));
            let after = hw_counters(&json(&at("sysfs-after.json")));
            let rdma = rdma_statistic(&json(&at("rdma.json")));
            assert!(
                before.len() >= 10,
                "{role}/{phase}: only {} hw counters",
                before.len()
            );
            assert_eq!(
                nl.keys().collect::<Vec<_>>(),
                before.keys().collect::<Vec<_>>(),
                "{role}/{phase}: netlink and sysfs give the same counters"
            );
            assert_eq!(
                rdma.keys().collect::<Vec<_>>(),
                before.keys().collect::<Vec<_>>(),
                "{role}/{phase}: rdma statistic shows the same counters"
            );
            for (file, (name, attrs, v, source)) in &nl {
                let (bname, battrs, b, bsource) = &before[file];
                let a = after[file].2;
                assert_eq!(
                    source,
                    &format!("netlink:{bsource}"),
                    "{role}/{phase}/{file}"
                );
                assert_eq!((name, attrs), (bname, battrs), "{role}/{phase}/{file}");
                assert!(
                    b <= v && v <= &a,
                    "{role}/{phase}/{file}: sysfs {b} <= netlink {v} <= sysfs {a}"
                );
                assert!(
                    b <= &rdma[file] && rdma[file] <= a,
                    "{role}/{phase}/{file}: sysfs {b} <= rdma statistic {} <= sysfs {a}",
                    rdma[file]
                );
                if phase == "idle0" {
                    assert_eq!((b, v), (&a, &a), "{role}/{phase}/{file}: idle, all equal");
                }
            }
            if phase == "during" {
                // The writer (b) sends the data, the target (a) receives it.
                let moving = if role == "a" {
                    "rcvd_pkts"
                } else {
                    "sent_pkts"
                };
                let (b, a) = (before[moving].2, after[moving].2);
                let retries = std::fs::read_to_string(r.join("snap-retries.txt"));
                assert!(
                    b < a,
                    "{role}: traffic was moving during the netlink read ({moving} {b} -> {a}); \
                     snapshots taken again: {}",
                    retries.unwrap_or_else(|_| "none".into())
                );
            }
            // The recorded replies decode to what the agent reported.
            let cap = at("capture");
            let replies: Vec<_> = std::fs::read_dir(&cap)
                .unwrap_or_else(|e| panic!("{}: {e}", cap.display()))
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with("-reply-1.bin"))
                .collect();
            let mut decoded = BTreeMap::new();
            for p in replies {
                let bytes = std::fs::read(&p).unwrap();
                for m in rocewatch_netlink::msg::messages(&bytes) {
                    let m = m.unwrap();
                    if m.ty
                        == rocewatch_netlink::rdma::nldev_type(
                            rocewatch_netlink::rdma::CMD_STAT_GET,
                        )
                    {
                        decoded.clear();
                        rocewatch_netlink::rdma::decode_hw_counters(m.payload, |n, v| {
                            decoded.insert(n.to_string(), v);
                        })
                        .unwrap();
                    }
                }
            }
            // The last STAT_GET reply is the collection's (the first one probed the port).
            let reported: BTreeMap<String, u64> =
                nl.iter().map(|(k, v)| (k.clone(), v.2)).collect();
            assert_eq!(
                decoded, reported,
                "{role}/{phase}: recorded reply vs reported values"
            );
        }
    }
}

/// `#bytes #iterations ...` line of ib_write_bw: (bytes per message, iterations).
fn perftest_result(text: &str) -> (u64, u64) {
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.trim_start().starts_with("#bytes") {
            let nums: Vec<u64> = lines
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .take(2)
                .filter_map(|x| x.parse().ok())
                .collect();
            if nums.len() == 2 {
                return (nums[0], nums[1]);
            }
        }
    }
    panic!("no result line in ib_write_bw output:\n{text}");
}

fn ibv_field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {key} in ibv_devinfo -v output"))
}

#[test]
fn lab_traffic_counters_rise_by_what_perftest_moved() {
    let Some(out) = lab_run() else { return };
    let info = read(&out.join("b/ibv_devinfo.txt"));
    let mtu: u64 = ibv_field(&info, "active_mtu")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let perf = read(&out.join("b/perftest.txt"));
    assert!(
        perf.contains("perftest exit 0"),
        "ib_write_bw failed:\n{perf}"
    );
    let (bytes, iterations) = perftest_result(&perf);
    let packets = iterations * bytes.div_ceil(mtu);
    assert!(packets >= 2000, "{iterations} x {bytes} B at MTU {mtu}");
    let delta = |role: &str, file: &str| -> u64 {
        let get = |phase: &str| {
            hw_counters(&json(&out.join(role).join(format!("{phase}-netlink.json"))))[file].2
        };
        get("idle1") - get("idle0")
    };
    // b writes into a: b sends the data packets, a receives them.
    let sent = delta("b", "sent_pkts");
    let rcvd = delta("a", "rcvd_pkts");
    assert!(
        sent >= packets,
        "client sent_pkts rose {sent}, perftest moved {packets} packets"
    );
    assert!(
        rcvd >= packets,
        "server rcvd_pkts rose {rcvd}, perftest moved {packets} packets"
    );
}

#[test]
fn lab_discover_agrees_with_ibv_devinfo_and_rdma_link() {
    let Some(out) = lab_run() else { return };
    for role in ROLES {
        let r = out.join(role);
        let d = json(&r.join("discover.json"));
        let info = read(&r.join("ibv_devinfo.txt"));
        let dev = &d["devices"][0];
        assert_eq!(dev["name"], ibv_field(&info, "hca_id"), "{role}");
        assert_eq!(dev["node_guid"], ibv_field(&info, "node_guid"), "{role}");
        let port = &dev["ports"][0];
        assert_eq!(ibv_field(&info, "state"), "PORT_ACTIVE (4)");
        assert_eq!(port["state"], "ACTIVE", "{role}");
        assert_eq!(ibv_field(&info, "phys_state"), "LINK_UP (5)");
        assert_eq!(port["phys_state"], "LinkUp", "{role}");
        assert_eq!(port["link_layer"], ibv_field(&info, "link_layer"), "{role}");
        // GID[  1]:		::ffff:192.168.100.1, RoCE v2
        let ibv_gids: Vec<(u64, Ipv6Addr, String)> = info
            .lines()
            .filter_map(|l| l.trim().strip_prefix("GID["))
            .map(|l| {
                let (idx, rest) = l.split_once("]:").unwrap();
                let (gid, ty) = rest.trim().split_once(", ").unwrap();
                (
                    idx.trim().parse().unwrap(),
                    gid.parse().unwrap(),
                    ty.to_string(),
                )
            })
            .collect();
        let ours: Vec<(u64, Ipv6Addr, String)> = port["gids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["index"].as_u64().unwrap(),
                    g["gid"].as_str().unwrap().parse().unwrap(),
                    g["type"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert!(!ibv_gids.is_empty(), "{role}: ibv_devinfo printed no GID");
        assert_eq!(ours, ibv_gids, "{role}: GIDs");
        let self_ip: std::net::Ipv4Addr = if role == "a" {
            "192.168.100.1"
        } else {
            "192.168.100.2"
        }
        .parse()
        .unwrap();
        assert!(
            ours.iter()
                .any(|(_, g, t)| *g == self_ip.to_ipv6_mapped() && t == "RoCE v2"),
            "{role}: a RoCE v2 GID for {self_ip}"
        );
        let link = json(&r.join("rdma-link.json"));
        assert_eq!(
            port["netdev"], link[0]["netdev"],
            "{role}: netdev as rdma link shows it"
        );
        assert_eq!(dev["name"], link[0]["ifname"], "{role}");
    }
}

/// `rocewatch env` in the guests: the GID index it prints is the one `ibv_devinfo -v` shows
/// for the guest's IPv4 address as RoCE v2; `doctor --env` passes those settings and fails
/// a job's wrong GID index and a device that does not exist.
#[test]
fn lab_env_gives_the_gid_index_ibv_devinfo_shows_and_doctor_checks_a_job() {
    let Some(out) = lab_run() else { return };
    for role in ROLES {
        let r = out.join(role);
        let env = json(&r.join("env.json"));
        let info = read(&r.join("ibv_devinfo.txt"));
        let self_ip = if role == "a" {
            "192.168.100.1"
        } else {
            "192.168.100.2"
        };
        // GID[  1]:		::ffff:192.168.100.1, RoCE v2
        let index = info
            .lines()
            .filter_map(|l| l.trim().strip_prefix("GID["))
            .find(|l| l.contains(&format!("::ffff:{self_ip}, RoCE v2")))
            .and_then(|l| l.split_once(']'))
            .map(|(i, _)| i.trim().to_string())
            .unwrap_or_else(|| {
                panic!("{role}: no RoCE v2 GID for {self_ip} in ibv_devinfo:\n{info}")
            });
        let vars = &env["variables"];
        assert_eq!(vars["NCCL_IB_GID_INDEX"], index.as_str(), "{role}: {env}");
        assert_eq!(vars["UCX_IB_GID_INDEX"], index.as_str(), "{role}: {env}");
        assert_eq!(vars["NCCL_IB_HCA"], "=rxe0:1", "{role}: {env}");
        assert_eq!(vars["UCX_NET_DEVICES"], "rxe0:1", "{role}: {env}");
        assert_eq!(env["ports"][0]["ipv4"], self_ip, "{role}: {env}");
        let netdev = env["ports"][0]["netdev"].as_str().unwrap().to_string();
        assert_eq!(
            vars["NCCL_SOCKET_IFNAME"],
            format!("={netdev}"),
            "{role}: {env}"
        );
    }
    let b = out.join("b");
    let env_checks = |file: &str| -> Vec<Value> {
        json(&b.join(file))["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"] == "env")
            .cloned()
            .collect()
    };
    let good = env_checks("doctor-env.json");
    assert!(good.len() >= 5, "{good:#?}");
    for c in &good {
        assert!(
            c["status"] == "pass",
            "what rocewatch env printed passes: {c}"
        );
    }
    let bad = env_checks("doctor-env-bad.json");
    let by = |s: &str| {
        bad.iter()
            .find(|c| c["subject"] == s)
            .unwrap_or_else(|| panic!("{s}: {bad:#?}"))
    };
    let gid = by("NCCL_IB_GID_INDEX");
    assert_eq!(gid["status"], "fail", "{gid}");
    // rxe's GID 0 is its link-local address (RoCE v2, not IPv4).
    assert!(
        gid["evidence"]
            .as_str()
            .unwrap()
            .contains("is not an IPv4 address"),
        "{gid}"
    );
    let hca = by("NCCL_IB_HCA");
    assert_eq!(hca["status"], "fail", "{hca}");
    assert!(
        hca["evidence"]
            .as_str()
            .unwrap()
            .contains("no RDMA port named rxe9"),
        "{hca}"
    );
}

/// `rocewatch capture rxe0` in the target guest while `ib_write_bw` writes to it: RDMA
/// WRITE packets in, acknowledgements out, no CNP; `--offload-off` finds virtio-net's VLAN
/// offload off and leaves it.
/// Packets of a `capture --summary --json` result whose BTH opcode starts with `prefix`.
fn captured_packets(summary: &Value, prefix: &str) -> u64 {
    summary["by_opcode"]
        .as_object()
        .unwrap_or_else(|| panic!("no by_opcode in {summary}"))
        .iter()
        .filter(|(op, _)| op.starts_with(prefix))
        .map(|(_, n)| n["packets"].as_u64().unwrap())
        .sum()
}

#[test]
fn lab_capture_during_ib_write_bw_sees_the_writes() {
    let Some(out) = lab_run() else { return };
    let a = out.join("a");
    let stderr = read(&a.join("capture.stderr"));
    assert!(stderr.contains("rc=0"), "{stderr}");
    let c = json(&a.join("capture.json"));
    let writes = captured_packets(&c, "RC RDMA WRITE");
    // 3 s of 64 KiB writes (1024-byte RoCE MTU: 64 packets each), however slow the guest.
    assert!(writes >= 64, "{c}");
    assert!(c["acks"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(c["cnp"], 0, "{c}");
    // virtio-net has no rx-vlan-offload to turn off (the guest has no ethtool to show
    // it): the capture says so and changes nothing. Turning it off and back on is tested
    // on a veth pair (capture::a_live_capture_...).
    assert!(
        stderr.contains("rx-vlan-offload is already off on eth0"),
        "{stderr}"
    );
}

fn probe_json(out: &Path, name: &str) -> Value {
    json(&out.join("b").join(format!("{name}.json")))
}

#[test]
fn lab_probes_succeed_with_rtts_of_the_order_of_ib_send_lat() {
    let Some(out) = probe_lab() else { return };
    let ok = probe_json(out, "probe-ok");
    assert_eq!(ok["sent"], 200);
    assert_eq!(ok["received"], 200, "{ok}");
    assert_eq!(ok["loss_percent"], 0.0);
    // rxe has no completion timestamps, and the result says so.
    assert_eq!(ok["nic_timestamps"]["kind"], "unsupported", "{ok}");
    let why = ok["nic_timestamps"]["reason"].as_str().unwrap();
    assert!(
        why.contains("rxe0") && why.contains("does not timestamp completions"),
        "{why}"
    );
    let p50 = ok["rtt_seconds"]["p50"].as_f64().unwrap();
    assert!(p50 > 0.0);
    // ib_send_lat prints one-way latency (half the round trip) in microseconds:
    //  #bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] ...
    let lat = read(&out.join("b/ib_send_lat.txt"));
    let typical: f64 = lat
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(4)?.parse().ok())
        .unwrap_or_else(|| panic!("no ib_send_lat result:\n{lat}"));
    let their_rtt = 2.0 * typical * 1e-6;
    let ratio = p50 / their_rtt;
    assert!(
        (0.2..=10.0).contains(&ratio),
        "probe p50 RTT {:.1} us vs ib_send_lat round trip {:.1} us (x{ratio:.1}): not the same order",
        p50 * 1e6,
        their_rtt * 1e6
    );
}

#[test]
fn lab_a_killed_responder_gives_timeouts_or_refusals_then_recovery() {
    let Some(out) = probe_lab() else { return };
    let r = probe_json(out, "probe-recovery");
    let outcomes: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["outcome"].as_str().unwrap())
        .collect();
    let first_bad = outcomes
        .iter()
        .position(|o| *o != "ok")
        .expect("the kill shows");
    let recovered = outcomes[first_bad..].iter().position(|o| *o == "ok");
    assert!(first_bad > 0, "probes worked before the kill: {outcomes:?}");
    assert!(
        recovered.is_some(),
        "probes work again after the restart: {outcomes:?}"
    );
    assert!(
        r["timeouts"].as_u64().unwrap() + r["connect_failures"].as_u64().unwrap() > 0,
        "{r}"
    );
    assert_eq!(*outcomes.last().unwrap(), "ok", "{outcomes:?}");
    // While the responder is down, the cause says so.
    assert!(
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x["cause"].as_str())
            .all(|c| c.starts_with("rejected") || c.starts_with("QP error")),
        "{r}"
    );
}

#[test]
fn lab_a_peer_without_responder_is_a_connection_failure_with_its_cause() {
    let Some(out) = probe_lab() else { return };
    let r = probe_json(out, "probe-refused");
    assert_eq!(r["received"], 0);
    assert_eq!(r["connect_failures"], 2);
    let cause = r["results"][0]["cause"].as_str().unwrap();
    assert!(
        cause.contains("rejected") && cause.contains("connection refused"),
        "{cause}"
    );
    assert!(
        read(&out.join("b/rc.txt")).contains("refused rc=1"),
        "exit status 1 when unreachable"
    );
}

/// `rc.txt` line `NAME rc=N` of role b.
/// The RDMA CM probe and rping, case by case in the same guest: both reach their
/// listeners on the other guest; a port nobody listens on is rejected with the CM's
/// reason 8 by both; an address no guest has fails address resolution for both; with UDP
/// 4791 dropped the CM's reply never comes: unreachable for the probe, no connection for
/// rping (it waits for the CM's own retries, bounded here).
#[test]
fn lab_the_cm_probe_fails_where_rping_fails_and_names_where() {
    let Some(out) = probe_lab() else { return };
    let b = out.join("b");
    let cause = |case: &str| -> String {
        let v = json(&b.join(format!("cm-{case}.json")));
        v["results"][0]["cause"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| {
                panic!(
                    "cm-{case}: no cause in {v}; stderr: {}",
                    read(&b.join(format!("cm-{case}.err")))
                )
            })
    };
    let rping = |case: &str| read(&b.join(format!("rping-{case}.txt")));
    // Both connect and answer.
    let ok = json(&b.join("cm-ok.json"));
    assert_eq!(
        rc_of(out, "cm-ok"),
        0,
        "{ok}; {}",
        read(&b.join("cm-ok.err"))
    );
    assert_eq!(ok["received"], 3, "{ok}");
    assert!(
        ok["rtt_seconds"]["p50"].as_f64().is_some_and(|r| r > 0.0),
        "{ok}"
    );
    assert_eq!(rc_of(out, "rping-ok"), 0, "rping: {}", rping("ok"));
    // Where the CM put the connection: rxe0's port 1, with the port's default ToS (0
    // then).
    assert_eq!(
        (
            &ok["cm"]["device"],
            &ok["cm"]["port"],
            &ok["cm"]["tos"],
            &ok["cm"]["tos_set"]
        ),
        (&"rxe0".into(), &1.into(), &0.into(), &false.into()),
        "{ok}"
    );
    // Nothing listens: rejected, reason 8, for both.
    assert_ne!(rc_of(out, "cm-nolistener"), 0);
    let c = cause("nolistener");
    assert!(
        c.starts_with("rejected: nothing listens on port 18599"),
        "{c}"
    );
    assert_ne!(rc_of(out, "rping-nolistener"), 0);
    assert!(
        rping("nolistener").contains("RDMA_CM_EVENT_REJECTED, error 8"),
        "rping: {}",
        rping("nolistener")
    );
    // An address nobody has: address resolution fails for both.
    let c = cause("noaddr");
    assert!(
        c.starts_with("address: 192.168.100.77 did not answer neighbour resolution"),
        "{c}"
    );
    assert_ne!(rc_of(out, "rping-noaddr"), 0);
    assert!(
        rping("noaddr").contains("RDMA_CM_EVENT_ADDR_ERROR"),
        "rping: {}",
        rping("noaddr")
    );
    // The CM's reply dropped: unreachable; rping never connects either.
    let c = cause("dropped");
    assert!(c.starts_with("unreachable:"), "{c}");
    assert_ne!(
        rc_of(out, "rping-dropped"),
        0,
        "rping connected through the drop: {}",
        rping("dropped")
    );
    assert!(
        !rping("dropped").contains("ping data"),
        "rping: {}",
        rping("dropped")
    );
    // Only queue pair 1 dropped (the CM's messages): the same for both, while the side
    // channel passes (lab_doctor_explains_why_the_cm_fails_where_the_side_channel_passes).
    let c = cause("qp1dropped");
    assert!(
        c.starts_with("unreachable:"),
        "{c}
{}",
        read(&b.join("nft.log"))
    );
    assert_ne!(rc_of(out, "rping-qp1dropped"), 0, "{}", rping("qp1dropped"));
    assert!(
        !rping("qp1dropped").contains("ping data"),
        "rping: {}",
        rping("qp1dropped")
    );
}

/// With UDP 4791 dropped for queue pair 1 alone (nft `@th,104,24 1`: the CM's
/// messages), doctor --peer passes the side-channel probe, fails the CM probe as
/// unreachable and says why the two differ; its firewall check names the rule as the
/// CM's alone.
#[test]
fn lab_doctor_explains_why_the_cm_fails_where_the_side_channel_passes() {
    let Some(out) = probe_lab() else { return };
    let d = json(&out.join("b/doctor-cmonly.json"));
    let nft = read(&out.join("b/nft.log"));
    let find = |name: &str| -> serde_json::Value {
        d["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check in {d}"))
    };
    assert_eq!(
        status(&d, "probe"),
        ["pass"],
        "{d}
{nft}"
    );
    let cm = find("probe-cm");
    assert_eq!(
        cm["status"], "fail",
        "{cm}
{nft}"
    );
    let ev = cm["evidence"].as_str().unwrap();
    assert!(ev.starts_with("unreachable:"), "{ev}");
    assert!(
        ev.contains("(via rxe0 port 1, ToS 0: DSCP 0, the port's default); the side-channel probe passed: the CM's request"),
        "{ev}"
    );
    let fw = find("firewall");
    assert_eq!(fw["status"], "fail", "{fw}");
    assert!(
        fw["evidence"]
            .as_str()
            .unwrap()
            .contains("udp dport 4791 @th,104,24 1 drop (only the RDMA CM's messages"),
        "{fw}"
    );
    assert!(
        fw["fix"]
            .as_str()
            .unwrap()
            .starts_with("nft delete rule inet cmqp input handle "),
        "{fw}"
    );
    assert_eq!(rc_of(out, "doctor-cmonly"), 1);
}

/// The statuses of every `check` in a doctor's JSON report.
fn status(v: &serde_json::Value, check: &str) -> Vec<String> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == check)
        .map(|c| c["status"].as_str().unwrap().to_string())
        .collect()
}

fn rc_of(out: &Path, name: &str) -> i32 {
    let rc = read(&out.join("b/rc.txt"));
    rc.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} rc=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{name} rc=` in b/rc.txt:\n{rc}"))
}

/// `rocewatch bandwidth` (RDMA WRITE, 64 KiB, 4 QPs, 5 s) against `probe --serve` reaches
/// at least 0.6 of `ib_write_bw` with the same size, QPs, duration and queue settings (32
/// in flight per QP, ~1 s retransmission timeout) in the same guests and run (three times each,
/// alternately: the best run against the ib_write_bw run beside it; the three together at
/// least 0.4 of ib_write_bw's three); the rxe packet counters (sysfs, and the agent's collectors on both
/// ports) moved by at least the packets the reported bytes need at the active MTU.
#[test]
fn lab_bandwidth_reaches_ib_write_bw_and_the_counters_moved_as_much() {
    let Some(out) = probe_lab() else { return };
    let stderr = read(&out.join("b/bw-write.stderr"));
    assert_eq!(
        rc_of(out, "bw-write"),
        0,
        "rocewatch bandwidth failed:\n{stderr}"
    );
    let bw = probe_json(out, "bw-write");
    let r = &bw["result"];
    let bytes = r["local"]["bytes"].as_u64().unwrap();
    let messages = r["local"]["messages"].as_u64().unwrap();
    assert!(messages > 0 && bytes == messages * 65536, "{bw}");
    // Three times each, alternately (the emulated guests' speed drifts with the host's
    // load, and the other integration tests run beside the lab): each rocewatch run is
    // paired with the ib_write_bw run right after it, under the same load, and the best
    // pair reaches 0.6 (a CI run: pairs x0.63, x0.29, x0.72).
    let ours: Vec<f64> = ["bw-write", "bw-write2", "bw-write3"]
        .iter()
        .map(|n| probe_json(out, n)["average_bps"].as_f64().unwrap() / 1e9)
        .collect();
    let failures =
        std::fs::read_to_string(out.join("b/ib_write_bw-failures.txt")).unwrap_or_default();
    let perf_of = |name: &str| -> f64 {
        let perf = std::fs::read_to_string(out.join("b").join(name)).unwrap_or_default();
        perf.lines()
            .skip_while(|l| !l.trim_start().starts_with("#bytes"))
            .nth(1)
            .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
            .unwrap_or_else(|| {
                let servers: String = (0..15)
                    .map(|k| format!("ib_write_bw-{k}.txt"))
                    .filter_map(|f| {
                        let text = std::fs::read_to_string(out.join("a").join(&f)).ok()?;
                        Some(format!("== a/{f}\n{text}"))
                    })
                    .collect();
                panic!("no ib_write_bw result in {name}:\n{perf}\nfailed attempts:\n{failures}\na's servers:\n{servers}")
            })
    };
    let theirs: Vec<f64> = ["ib_write_bw.txt", "ib_write_bw2.txt", "ib_write_bw3.txt"]
        .iter()
        .map(|n| perf_of(n))
        .collect();
    let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let pairs: Vec<f64> = ours.iter().zip(&theirs).map(|(o, t)| o / t).collect();
    let best_pair = best(&pairs);
    eprintln!(
        "lab bandwidth (TCG guests, Gb/s): rocewatch {ours:.3?}, ib_write_bw {theirs:.3?}, pairs x{pairs:.2?}, totals x{:.2}, {messages} messages in the first run",
        ours.iter().sum::<f64>() / theirs.iter().sum::<f64>()
    );
    assert!(
        best_pair >= 0.6,
        "no rocewatch bandwidth run reached 0.6 x the ib_write_bw run beside it: rocewatch {ours:.3?} Gb/s, ib_write_bw {theirs:.3?} Gb/s"
    );
    // Under the suite's load single runs swing fivefold (one run: rocewatch 0.054, 0.129,
    // 0.102 against ib_write_bw 0.098, 0.055, 0.210 Gb/s), so the gross check is on the
    // totals of the three: rocewatch under 0.4 of ib_write_bw fails (CI runs under the
    // suite's load measured totals of x0.51 to x0.77, best pairs x0.72 and up).
    let (sum_ours, sum_theirs) = (ours.iter().sum::<f64>(), theirs.iter().sum::<f64>());
    assert!(
        sum_ours >= 0.4 * sum_theirs,
        "rocewatch bandwidth {sum_ours:.3} Gb/s over three runs < 0.4 x ib_write_bw's {sum_theirs:.3} Gb/s"
    );
    let info = read(&out.join("b/ibv_devinfo.txt"));
    let mtu: u64 = ibv_field(&info, "active_mtu")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let packets = messages * 65536u64.div_ceil(mtu);
    let num = |f: &str| -> u64 { read(&out.join("b").join(f)).trim().parse().unwrap() };
    let sysfs = num("bw-sent-after.txt") - num("bw-sent-before.txt");
    assert!(
        sysfs >= packets,
        "sent_pkts rose {sysfs}, the {bytes} bytes reported need {packets} packets at MTU {mtu}"
    );
    let local = bw["local_moves"]["tx_packets"]
        .as_u64()
        .expect("local tx_packets");
    let remote = bw["remote_moves"]["rx_packets"]
        .as_u64()
        .expect("the peer's rx_packets");
    assert!(
        local >= packets,
        "the collectors saw {local} packets sent, need {packets}: {bw}"
    );
    assert!(
        remote >= packets,
        "the peer's port received {remote} packets, need {packets}: {bw}"
    );
    assert_eq!(bw["result"]["remote_port"]["device"], "rxe0", "{bw}");
    // The text form has ib_write_bw's table.
    let text = read(&out.join("b/bw-write.txt"));
    assert!(
        text.contains("#bytes")
            && text.contains("BW average[Gb/sec]")
            && text.contains("line rate:"),
        "{text}"
    );
    // READ, and bidirectional SEND.
    for name in ["bw-read", "bw-send"] {
        let e = read(&out.join("b").join(format!("{name}.stderr")));
        assert_eq!(rc_of(out, name), 0, "{name}:\n{e}");
        let v = probe_json(out, name);
        assert!(
            v["result"]["local"]["bytes"].as_u64().unwrap() > 0,
            "{name}: {v}"
        );
    }
    let send = probe_json(out, "bw-send");
    assert!(
        send["result"]["remote"]["bytes"].as_u64().unwrap() > 0,
        "bidirectional: {send}"
    );
    // doctor --bandwidth: the check ran (pass, or a shortfall against rxe's nominal rate).
    let doc = json(&out.join("b/doctor-bw.json"));
    let check = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "bandwidth")
        .unwrap_or_else(|| panic!("no bandwidth check: {doc}"));
    assert!(
        ["pass", "warn", "info"].contains(&check["status"].as_str().unwrap()),
        "{check}"
    );
    assert!(
        check["evidence"].as_str().unwrap().contains("RDMA WRITE"),
        "{check}"
    );
}

/// A responder started with --no-bandwidth refuses, and both sides say why; an address
/// nobody has fails with the route cause; both exit 2.
#[test]
fn lab_bandwidth_refused_and_unreachable_fail_with_their_cause() {
    let Some(out) = probe_lab() else { return };
    let refused = read(&out.join("b/bw-refused.txt"));
    assert_eq!(rc_of(out, "bw-refused"), 2, "{refused}");
    assert!(
        refused.contains("peer 192.168.100.1 refused the bandwidth test: serve_bandwidth is off on the responder"),
        "{refused}"
    );
    let served = read(&out.join("a/serve-nobw.txt"));
    assert!(
        served.contains("refused: serve_bandwidth is off"),
        "the responder's side: {served}"
    );
    let unreachable = read(&out.join("b/bw-unreachable.txt"));
    assert_eq!(rc_of(out, "bw-unreachable"), 2, "{unreachable}");
    assert!(
        unreachable.contains("cannot reach the responder at 192.168.100.77: route:"),
        "{unreachable}"
    );
}

/// `rocewatch doctor --peer` in the guest pair: device, port, GID, RoCE mode (once its
/// configfs directory exists, which the first run says how to make), firewall, MTU and
/// probe checks pass; the QoS checks say unsupported (rxe); an nftables rule dropping
/// UDP 4791 fails the firewall check, naming the rule and how to delete it, and the probe.
#[test]
fn lab_doctor_passes_on_the_pair_and_fails_on_a_firewall_that_drops_roce() {
    let Some(out) = probe_lab() else { return };
    let first = json(&out.join("b/doctor-first.json"));
    let mode = first["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "roce-mode")
        .unwrap();
    assert_eq!(mode["status"], "warn", "{mode}");
    assert!(
        mode["fix"]
            .as_str()
            .unwrap()
            .contains("mkdir /sys/kernel/config/rdma_cm/rxe0"),
        "{mode}"
    );
    let ok = json(&out.join("b/doctor-ok.json"));
    for c in [
        "devices",
        "port",
        "netdev",
        "ip",
        "gid",
        "roce-mode",
        "firewall",
        "mtu",
        "probe",
        "probe-cm",
        "counters",
    ] {
        let st = status(&ok, c);
        assert!(
            !st.is_empty() && st.iter().all(|s| s == "pass"),
            "{c}: {st:?}\n{ok}"
        );
    }
    assert_eq!(
        status(&ok, "mtu").len(),
        2,
        "the netdev's MTUs, and the path MTU to the peer"
    );
    for c in ["pfc", "ecn"] {
        assert_eq!(status(&ok, c), ["skip"], "{c}: rxe has none\n{ok}");
    }
    let rc = read(&out.join("b/rc.txt"));
    assert!(rc.contains("doctor-ok rc=0"), "{rc}");
    let text = read(&out.join("b/doctor-ok.txt"));
    assert!(text.contains("tcpdump -i eth0 -nn udp port 4791"), "{text}");
    // With UDP 4791 dropped on input.
    let fw = json(&out.join("b/doctor-firewall.json"));
    let firewall = fw["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "firewall")
        .unwrap();
    assert_eq!(
        firewall["status"],
        "fail",
        "{fw}\n{}",
        read(&out.join("b/nft.log"))
    );
    assert!(
        firewall["fix"]
            .as_str()
            .unwrap()
            .starts_with("nft delete rule inet rwtest input handle "),
        "{firewall}"
    );
    assert_eq!(status(&fw, "probe"), ["fail"], "{fw}");
    // The CM path fails there too: the CM's request or reply dropped.
    assert_eq!(status(&fw, "probe-cm"), ["fail"], "{fw}");
    let cm = fw["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "probe-cm")
        .unwrap();
    assert!(
        cm["evidence"].as_str().unwrap().starts_with("unreachable:"),
        "{cm}"
    );
    assert!(rc.contains("doctor-firewall rc=1"), "{rc}");
}

#[test]
fn lab_the_agent_probes_on_schedule_and_a_rule_fires_on_probe_failures() {
    let Some(out) = probe_lab() else { return };
    let metrics = read(&out.join("b/agent-metrics.txt"));
    let value = |line_start: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {line_start} in:\n{metrics}"))
    };
    let sent = value(r#"rdma_probe_sent_total{rdma_probe_peer="192.168.100.1"}"#);
    let received = value(r#"rdma_probe_received_total{rdma_probe_peer="192.168.100.1"}"#);
    // Eight dead peers with a 1 s timeout: one after another, a round would take 8 s (one
    // or two rounds in the 10 s the agent runs); in flight together it takes 1 s.
    assert!(
        sent >= 5.0 && received == sent,
        "{sent} sent, {received} received: are the dead peers probed one after another?"
    );
    assert!(value(r#"rdma_probe_rtt_last_seconds{rdma_probe_peer="192.168.100.1"}"#) > 0.0);
    assert_eq!(
        value(r#"rdma_probe_rtt_seconds_bucket{rdma_probe_peer="192.168.100.1",le="+Inf"}"#),
        received,
        "every answered probe is in the histogram"
    );
    assert_eq!(
        value(r#"rdma_probe_rtt_seconds_count{rdma_probe_peer="192.168.100.1"}"#),
        received
    );
    // The same peer through the RDMA CM (`cm:192.168.100.1`, a's CM listener): its own
    // series, with the mode.
    let cm_sent =
        value(r#"rdma_probe_sent_total{rdma_probe_mode="cm",rdma_probe_peer="192.168.100.1"}"#);
    let cm_received =
        value(r#"rdma_probe_received_total{rdma_probe_mode="cm",rdma_probe_peer="192.168.100.1"}"#);
    // Every CM probe answered or timed out (an emulated guest under the suite's load can
    // miss the 1 s timeout once: a CI run had 10 of 11 answered, 1 timed out).
    let cm_timeouts = metrics
        .lines()
        .find(|l| l.starts_with(r#"rdma_probe_timeouts_total{rdma_probe_mode="cm",rdma_probe_peer="192.168.100.1"}"#))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        cm_received >= 5.0 && cm_received + cm_timeouts == cm_sent && cm_timeouts <= 1.0,
        "CM: {cm_sent} sent, {cm_received} received, {cm_timeouts} timed out"
    );
    // Nobody has 192.168.100.77-84: the side channel's connection times out (a route
    // failure), for each of them in every round.
    for host in 77..=84 {
        let f = value(&format!(
            r#"rdma_probe_failures_total{{rdma_probe_cause="route",rdma_probe_peer="192.168.100.{host}"}}"#
        ));
        assert!(f >= 5.0, "192.168.100.{host}: {f} failures");
    }
    let rules = read(&out.join("b/agent-rules.txt"));
    let body: Value = serde_json::from_str(rules.split("\r\n\r\n").nth(1).unwrap().trim()).unwrap();
    let firing: Vec<&Value> = body["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["rule"] == "probe-unreachable" && r["phase"] == "firing")
        .collect();
    let mut peers: Vec<&str> = firing
        .iter()
        .map(|r| r["labels"]["rdma.probe.peer"].as_str().unwrap())
        .collect();
    peers.sort();
    let dead: Vec<String> = (77..=84).map(|h| format!("192.168.100.{h}")).collect();
    assert_eq!(peers, dead, "{body}");
}

/// `NAME_KEY=value` lines of the lab's overhead.txt.
fn overhead(out: &Path) -> std::collections::BTreeMap<String, f64> {
    read(&out.join("b/overhead.txt"))
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Sum of the samples of `family` (any labels) in a scrape.
fn sum_of(metrics: &str, family: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn lab_probe_overhead_100_peers_at_1000_probes_per_second() {
    let Some(out) = probe_lab() else { return };
    let o = overhead(out);
    let get = |k: &str| *o.get(k).unwrap_or_else(|| panic!("no {k} in {o:?}"));
    let m0 = read(&out.join("b/load-metrics0.txt"));
    let m1 = read(&out.join("b/load-metrics.txt"));
    let sent = sum_of(&m1, "rdma_probe_sent_total") - sum_of(&m0, "rdma_probe_sent_total");
    let received =
        sum_of(&m1, "rdma_probe_received_total") - sum_of(&m0, "rdma_probe_received_total");
    let wall = get("load_wall_seconds");
    let rate = sent / wall;
    let cpu = get("load_cpu_seconds") - get("base_cpu_seconds");
    // Per peer: the slope between 10 and 100 peers (the plugin's libraries and the
    // prober's fixed costs are in both; the stacks the C library keeps of the 54 more
    // connecting threads are not, so this is an upper bound).
    let rss_per_peer = (get("load_rss_kib") - get("load10_rss_kib")) / 90.0;
    let peers = m1
        .lines()
        .filter(|l| l.starts_with("rdma_probe_sent_total{"))
        .count();
    eprintln!(
        "lab probe overhead (TCG guest): {peers} peers, {rate:.0} probes/s achieved, {received} of {sent} answered, \
         CPU {:.1} % of a core ({:.1} us per probe) above the agent without probes, RSS {:.0} KiB per peer \
         (agent {} KiB without probes, {} KiB with 10 peers, {} KiB with 100)",
        100.0 * cpu / wall,
        1e6 * cpu / sent.max(1.0),
        rss_per_peer,
        get("base_rss_kib"),
        get("load10_rss_kib"),
        get("load_rss_kib"),
    );
    assert_eq!(peers, 100, "every peer of the file is probed");
    assert!(
        sent > 0.0 && received >= 0.95 * sent,
        "{received} of {sent}"
    );
    assert!(
        rate >= 100.0,
        "{rate:.0} probes/s: the emulated guest should sustain at least a tenth of the target"
    );
    assert!(cpu > 0.0, "the CPU measurement saw the probes");
}

/// A setting of `rocewatch qos show --json`: (status, value).
fn qos_setting(v: &Value, key: &str) -> (String, String) {
    let s = &v["ports"][0]["settings"][key];
    (
        s["status"].as_str().unwrap_or_default().to_string(),
        s["value"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn lab_qos_show_reads_roce_mode_from_configfs_and_dcb_over_netlink() {
    let Some(out) = lab_run() else { return };
    let before = json(&out.join("a/qos-before.json"));
    let after_mkdir = json(&out.join("a/qos-v2.json"));
    let tos = json(&out.join("a/qos-tos.json"));
    assert_eq!(before["ports"][0]["device"], "rxe0");
    let (st, why) = qos_setting(&before, "roce_mode");
    assert!(
        st == "unknown" && why.contains("not created"),
        "{st}: {why}"
    );
    assert_eq!(
        qos_setting(&after_mkdir, "roce_mode"),
        ("value".into(), "RoCE v2".into())
    );
    assert_eq!(
        qos_setting(&after_mkdir, "roce_tos"),
        ("value".into(), "0".into())
    );
    assert_eq!(
        qos_setting(&tos, "roce_tos"),
        ("value".into(), "106".into()),
        "the ToS set through configfs is what qos show reads"
    );
    // rxe is RoCE v2 only: the kernel refuses v1 (EINVAL), and the mode stays.
    let refused = read(&out.join("a/qos-set-v1.txt"));
    assert!(
        refused.contains("Invalid argument") && !refused.contains("rc=0"),
        "{refused}"
    );
    assert_eq!(
        qos_setting(&tos, "roce_mode"),
        ("value".into(), "RoCE v2".into())
    );
    // The guest's netdev has no DCB operations: the kernel answers EOPNOTSUPP over
    // netlink, which is "unsupported", not an error.
    for k in ["pfc_enabled", "trust", "dscp_map"] {
        assert_eq!(qos_setting(&tos, k).0, "unsupported", "{k}: {tos}");
    }
    // rxe has no mlx5 ECN knobs or traffic class.
    assert_eq!(qos_setting(&tos, "ecn_np_enabled").0, "unsupported");
    assert_eq!(qos_setting(&tos, "mtu"), ("value".into(), "1500".into()));
    assert_eq!(
        qos_setting(&tos, "rdma_mtu"),
        ("value".into(), "1024".into())
    );
    assert!(read(&out.join("a/qos-tos.txt"))
        .lines()
        .any(|l| l.starts_with("  roce_tos ") && l.ends_with(" 106")));
}

/// `qos plan/apply/rollback` on the guest's real configfs and netdev: the dry run
/// creates nothing; apply creates the device's rdma_cm directory and sets the ToS; DCB
/// (unsupported on rxe) is listed as not comparable; rollback restores the ToS the
/// kernel showed once the directory existed; a change the kernel refuses half-way (RoCE
/// v1 on rxe) undoes the MTU change made before it; everything is audited.
#[test]
fn lab_qos_apply_and_rollback_on_the_real_configfs() {
    let Some(out) = lab_run() else { return };
    let a = out.join("a");
    let plan = read(&a.join("qos-plan-a.txt"));
    assert!(
        plan.contains("change  rxe0/1 (eth0)  roce_mode: unknown -> RoCE v2\n")
            && plan.contains("change  rxe0/1 (eth0)  roce_tos: unknown -> 106\n")
            && plan.contains(
                "cannot  rxe0/1 (eth0)  pfc_enabled -> 3: the device does not have this setting"
            )
            && plan.ends_with("rc=1\n"),
        "{plan}"
    );
    let dry = read(&a.join("qos-dry-a.txt"));
    assert!(
        dry.contains("would create /sys/kernel/config/rdma_cm/rxe0 and write \"106\""),
        "{dry}"
    );
    assert!(dry.ends_with("rc=0\n"), "{dry}");
    assert_eq!(
        read(&a.join("qos-after-dry.txt")).trim(),
        "",
        "the dry run created the directory"
    );
    let applied = json(&a.join("qos-apply-a.json"));
    assert_eq!(applied["failed"], false, "{applied}");
    let steps = applied["steps"].as_array().unwrap();
    assert!(steps.iter().all(|s| s["outcome"] == "done"), "{applied}");
    assert!(
        steps[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("created /sys/kernel/config/rdma_cm/rxe0"),
        "{applied}"
    );
    let shown = json(&a.join("qos-applied.json"));
    assert_eq!(
        qos_setting(&shown, "roce_tos"),
        ("value".into(), "106".into())
    );
    assert_eq!(
        qos_setting(&shown, "roce_mode"),
        ("value".into(), "RoCE v2".into())
    );
    let rb = json(&a.join("qos-rollback-a.json"));
    assert_eq!(rb["failed"], false, "{rb}");
    let outcome = |r: &serde_json::Value, setting: &str| {
        r["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["setting"] == setting)
            .map(|s| s["outcome"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(outcome(&rb, "roce_tos"), ["done"], "{rb}");
    assert_eq!(outcome(&rb, "roce_mode"), ["skipped"], "{rb}");
    assert_eq!(
        qos_setting(&json(&a.join("qos-rolledback.json")), "roce_tos"),
        ("value".into(), "0".into())
    );
    // The half-way failure on the real kernel.
    assert_eq!(read(&a.join("qos-apply-b.rc")).trim(), "1");
    let b = json(&a.join("qos-apply-b.json"));
    assert_eq!(outcome(&b, "mtu"), ["done", "undone"], "{b}");
    assert_eq!(outcome(&b, "roce_mode"), ["failed"], "{b}");
    let failed = b["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["outcome"] == "failed")
        .unwrap();
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("Invalid argument"),
        "{failed}"
    );
    assert_eq!(read(&a.join("qos-mtu-after-b.txt")).trim(), "1500");
    let audit: Vec<serde_json::Value> = read(&a.join("qos-audit.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let results = |action: &str, outcome: &str| {
        audit
            .iter()
            .filter(|r| {
                r["action"] == action && r["decision"] == "result" && r["outcome"] == outcome
            })
            .count()
    };
    // apply a: 2 ok; rollback: 1 ok; apply b: mtu ok, roce_mode error, undo ok.
    assert_eq!(results("qos_apply", "ok"), 4, "{audit:?}");
    assert_eq!(results("qos_apply", "error"), 1, "{audit:?}");
    assert_eq!(results("qos_rollback", "ok"), 1, "{audit:?}");
    // The dry runs (apply and rollback without --yes) write nothing.
    assert_eq!(
        audit.iter().filter(|r| r["decision"] == "dry_run").count(),
        0,
        "{audit:?}"
    );
}

/// The bring-up walk (docs/BRINGUP.md) runs in the guests in its order, each step
/// doing its part: discover finds rxe0 with its netdev; qos reads the RoCE mode the walk
/// made readable; probe reaches the peer; bandwidth moves data; env names rxe0:1 and a GID
/// index; doctor passes the connectivity checks; capture sees the probes' RoCE packets.
/// The userspace stack in a real guest: doctor finds the rxe provider libibverbs uses
/// (ibv_devices lists rxe0 in the same guest), rdma-core's version and the uverbs device
/// file; under `ulimit -l 64` without CAP_IPC_LOCK its memlock check fails, and a probe
/// whose buffer cannot be registered names the limit.
#[test]
fn lab_doctor_sees_the_userspace_stack_and_a_small_memlock_fails_registration() {
    let Some(out) = probe_lab() else { return };
    let b = out.join("b");
    let devices = read(&b.join("ibv_devices.txt"));
    assert!(devices.contains("rxe0"), "ibv_devices: {devices}");
    let walk = json(&b.join("walk-doctor.out"));
    let find = |v: &Value, check: &str, subject: &str| -> Value {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == check && c["subject"] == subject)
            .cloned()
            .unwrap_or_else(|| panic!("no {check} {subject} in {v}"))
    };
    let p = find(&walk, "provider", "rxe0");
    assert_eq!(p["status"], "pass", "{p}");
    assert!(
        p["evidence"].as_str().unwrap().contains("provider rxe"),
        "{p}"
    );
    let rc = find(&walk, "rdma-core", "");
    assert_eq!(rc["status"], "pass", "{rc}");
    let u = find(&walk, "uverbs", "rxe0");
    assert_eq!(u["status"], "pass", "{u}");
    assert!(
        u["evidence"]
            .as_str()
            .unwrap()
            .contains("/dev/infiniband/uverbs"),
        "{u}"
    );
    assert_eq!(find(&walk, "memlock", "")["status"], "pass", "{walk}");
    let limited = json(&b.join("doctor-memlock.json"));
    let m = find(&limited, "memlock", "");
    assert_eq!(m["status"], "fail", "{m}");
    assert!(
        m["evidence"]
            .as_str()
            .unwrap()
            .contains("this process: locked memory 64 KiB"),
        "{m}"
    );
    let probe = read(&b.join("probe-memlock.out"));
    assert!(
        !probe.contains("rc=0"),
        "the probe registered 512 KiB under 64 KiB: {probe}"
    );
    assert!(
        probe.contains("ibv_reg_mr") && probe.contains("RLIMIT_MEMLOCK, is 65536 bytes"),
        "{probe}"
    );
}

#[test]
fn lab_the_bring_up_walk_runs_in_order() {
    let Some(out) = probe_lab() else { return };
    let b = out.join("b");
    let walk = read(&b.join("walk.txt"));
    let steps: Vec<(&str, &str)> = walk.lines().filter_map(|l| l.split_once(" rc=")).collect();
    let names: Vec<&str> = steps.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        names,
        [
            "discover",
            "qos",
            "probe",
            "bandwidth",
            "env",
            "doctor",
            "capture"
        ],
        "{walk}"
    );
    let out_of = |step: &str| json(&b.join(format!("walk-{step}.out")));
    let err_of = |step: &str| {
        std::fs::read_to_string(b.join(format!("walk-{step}.err"))).unwrap_or_default()
    };
    for (step, rc) in &steps {
        assert_eq!(*rc, "0", "{step} exited {rc}: {}", err_of(step));
    }
    let d = out_of("discover");
    assert_eq!(d["devices"][0]["name"], "rxe0", "{d}");
    let netdev = d["devices"][0]["ports"][0]["netdev"]
        .as_str()
        .unwrap()
        .to_string();
    let q = out_of("qos");
    assert_eq!(
        qos_setting(&q, "roce_mode"),
        ("value".into(), "RoCE v2".into()),
        "{q}"
    );
    let p = out_of("probe");
    assert_eq!(p["sent"], 10, "{p}");
    assert_eq!(p["received"], 10, "{p}");
    let bw = out_of("bandwidth");
    assert!(bw["average_bps"].as_f64().unwrap() > 0.0, "{bw}");
    assert!(bw["result"]["local"]["bytes"].as_u64().unwrap() > 0, "{bw}");
    let env = out_of("env");
    assert_eq!(env["variables"]["NCCL_IB_HCA"], "=rxe0:1", "{env}");
    assert_eq!(
        env["variables"]["NCCL_SOCKET_IFNAME"],
        format!("={netdev}"),
        "{env}"
    );
    assert!(env["variables"]["NCCL_IB_GID_INDEX"].is_string(), "{env}");
    let doc = out_of("doctor");
    for check in [
        "devices",
        "port",
        "netdev",
        "gid",
        "roce-mode",
        "firewall",
        "probe",
    ] {
        let st: Vec<&str> = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"] == check)
            .map(|c| c["status"].as_str().unwrap())
            .collect();
        assert!(
            !st.is_empty() && st.iter().all(|s| *s == "pass"),
            "{check}: {st:?}\n{doc}"
        );
    }
    let c = out_of("capture");
    let sends = captured_packets(&c, "RC SEND");
    // 40 probes at 50 ms during a 4 s capture: their sends and the replies.
    assert!(sends >= 10, "{c}");
    // The CM probes' connections carried configfs' default_roce_tos, 104: DSCP 26 on the
    // wire (the side channel's queue pairs set none: DSCP 0).
    let dscp = |d: &str| c["by_dscp"][d].as_u64().unwrap_or(0);
    assert!(
        dscp("26") >= 15,
        "{c}\n{}",
        read(&b.join("walk-cm-probes.out"))
    );
    assert!(dscp("0") >= 10, "{c}");
    // probe --cm says which ToS its connections carried and where it came from.
    let cm_out = read(&b.join("walk-cm-probes.out"));
    assert!(
        cm_out.contains("RDMA CM: via rxe0 port 1, ToS 104 (DSCP 26, ECN 0), the port's default"),
        "{cm_out}"
    );
    // Three probes asking for ToS 96 themselves: DSCP 24 on the wire, said so.
    let tos = std::fs::read_to_string(b.join("walk-cm-tos.json")).unwrap_or_default();
    let tos: serde_json::Value = serde_json::from_str(&tos).unwrap_or_else(|e| {
        panic!(
            "walk-cm-tos.json: {e}: {tos}\n{}",
            read(&b.join("walk-cm-tos.err"))
        )
    });
    assert_eq!(
        (&tos["cm"]["tos"], &tos["cm"]["tos_set"]),
        (&96.into(), &true.into()),
        "{tos}"
    );
    assert!(dscp("24") >= 3, "{c}\n{tos}");
}

/// Driver messages in the mlx5 driver's formats, written into the guest's `/dev/kmsg`
/// naming eth0's PCI function while the agent runs: counted per pattern on rxe0 (eth0 is
/// its netdev) in `/metrics`, a rule on command timeouts fires, and doctor reports them
/// with the last message and the fix; a CPU thermal message is not a NIC driver's.
#[test]
fn lab_kernel_log_messages_are_counted_fire_a_rule_and_show_in_doctor() {
    let Some(out) = lab_run() else { return };
    let b = out.join("b");
    let pci = read(&b.join("kmsg-pci.txt")).trim().to_string();
    assert_eq!(pci.len(), 12, "eth0's PCI function: {pci:?}");
    let log = read(&b.join("kmsg-agent.log"));
    let metrics = read(&b.join("kmsg-metrics.txt"));
    let count = |pattern: &str| -> Option<f64> {
        metrics
            .lines()
            .filter(|l| l.starts_with("rdma_kernel_events_total{"))
            .find(|l| l.contains(&format!("rdma_kernel_pattern=\"{pattern}\"")))
            .map(|l| {
                assert!(l.contains("rdma_device=\"rxe0\""), "{l}\nagent log:\n{log}");
                l.rsplit(' ').next().unwrap().parse().unwrap()
            })
    };
    for (pattern, n) in [
        ("cmd_timeout", 1.0),
        ("access_reg", 1.0),
        ("health_compromised", 1.0),
        ("pcie_power", 1.0),
        ("link_flap", 4.0),
    ] {
        assert_eq!(
            count(pattern),
            Some(n),
            "{pattern}:\n{metrics}\nagent log:\n{log}"
        );
    }
    assert_eq!(count("module_temperature"), None, "{metrics}");
    let rules = read(&b.join("kmsg-rules.txt"));
    let body: Value = serde_json::from_str(
        rules
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{rules}\nagent log:\n{log}"))
            .trim(),
    )
    .unwrap();
    assert!(
        body["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["rule"] == "nic-command-timeouts"
                && r["phase"] == "firing"
                && r["labels"]["rdma.device"] == "rxe0"),
        "{body}"
    );
    let doctor = json(&b.join("doctor-kmsg.json"));
    let checks: Vec<&Value> = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == "kernel-log")
        .collect();
    let timeout = checks
        .iter()
        .find(|c| c["evidence"].as_str().unwrap().starts_with("cmd_timeout"))
        .unwrap_or_else(|| panic!("{checks:#?}"));
    assert_eq!(timeout["status"], "fail", "{timeout}");
    assert_eq!(timeout["subject"], "rxe0", "{timeout}");
    assert!(
        timeout["evidence"]
            .as_str()
            .unwrap()
            .contains("wait_func:1189:(pid 4242): ACCESS_REG(0x805) timeout"),
        "{timeout}"
    );
    assert!(
        timeout["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("devlink dev reload pci/{pci}")),
        "{timeout}"
    );
    let flap = checks
        .iter()
        .find(|c| c["evidence"].as_str().unwrap().starts_with("link_flap"))
        .unwrap_or_else(|| panic!("{checks:#?}"));
    assert_eq!(flap["status"], "warn", "{flap}");
    assert!(
        flap["evidence"].as_str().unwrap().contains("4 messages"),
        "{flap}"
    );
}

/// Prometheus lines of `family` whose labels include every `label="value"` of `with`:
/// their values, summed.
fn prom_sum(metrics: &str, family: &str, with: &[(&str, &str)]) -> Option<f64> {
    let lines: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| {
            with.iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    (!lines.is_empty()).then(|| lines.iter().sum())
}

/// `rdma -j resource show <kind>` entries of perftest (its `comm`).
fn rdma_entries_of<'a>(v: &'a Value, comm: &str) -> Vec<&'a Value> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .filter(|e| e["comm"].as_str().map(|c| c.trim_matches(['[', ']'])) == Some(comm))
        .collect()
}

#[test]
fn lab_resources_are_attributed_to_the_pod_and_the_slurm_job_of_ib_write_bw() {
    let Some(out) = lab_run() else { return };
    for role in ["a", "b"] {
        let r = out.join(role);
        let wl = read(&r.join("res-workload.txt")).trim().to_string();
        let log = read(&r.join("res-agent.log"));
        let during = read(&r.join("res-metrics-during.txt"));
        let ctx = format!("guest {role}, workload {wl}\nagent log:\n{log}");
        // What rdma resource show listed for perftest in the same guest.
        let qps = json(&r.join("res-qp.json"));
        let mrs = json(&r.join("res-mr.json"));
        let perf_qps = rdma_entries_of(&qps, "ib_write_bw").len();
        let perf_mrs = rdma_entries_of(&mrs, "ib_write_bw");
        let mr_bytes: u64 = perf_mrs.iter().map(|m| m["mrlen"].as_u64().unwrap()).sum();
        assert!(perf_qps >= 1, "rdma resource show qp: {qps}");
        assert!(!perf_mrs.is_empty(), "rdma resource show mr: {mrs}");
        let w = [("rdma_workload", wl.as_str()), ("rdma_device", "rxe0")];
        assert_eq!(
            prom_sum(&during, "rdma_resource_qps", &w),
            Some(perf_qps as f64),
            "{ctx}\n{during}"
        );
        assert_eq!(
            prom_sum(&during, "rdma_resource_mrs", &w),
            Some(perf_mrs.len() as f64),
            "{ctx}"
        );
        assert_eq!(
            prom_sum(&during, "rdma_resource_mr_bytes", &w),
            Some(mr_bytes as f64),
            "{ctx}"
        );
        // The identity behind the workload, in OpenTelemetry's names where it has them.
        let identity: &[(&str, &str)] = if role == "a" {
            &[
                ("rdma_workload_kind", "pod"),
                ("k8s_pod_uid", "7f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f"),
                (
                    "container_id",
                    "4f9d0c2b7a1e3f5d6c8b9a0e1f2d3c4b5a6978e0d1c2b3a4f5e6d7c8b9a0f1e2",
                ),
                // The workload's own cgroup, as counters.sh made it.
                (
                    "rdma_workload_cgroup",
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod7f3e2d1c_0b9a_4c8d_9e7f_6a5b4c3d2e1f.slice/cri-containerd-4f9d0c2b7a1e3f5d6c8b9a0e1f2d3c4b5a6978e0d1c2b3a4f5e6d7c8b9a0f1e2.scope",
                ),
            ]
        } else {
            &[
                ("rdma_workload_kind", "slurm"),
                ("slurm_job_id", "42"),
                ("slurm_step_id", "0"),
                (
                    "rdma_workload_cgroup",
                    "/system.slice/slurmstepd.scope/job_42/step_0",
                ),
            ]
        };
        assert!(
            prom_sum(&during, "rdma_resource_qps", identity).is_some(),
            "{identity:?}: {ctx}\n{during}"
        );
        // The kernel's own QPs (QP1 of ib_core) go to the kernel consumer.
        let kernel_qps = rdma_entries_of(&qps, "ib_core").len();
        assert!(kernel_qps >= 1, "{qps}");
        assert_eq!(
            prom_sum(
                &during,
                "rdma_resource_qps",
                &[("rdma_workload", "kernel:ib_core")]
            ),
            Some(kernel_qps as f64),
            "{ctx}"
        );
        // Never per process.
        assert!(!during.contains("process_pid="), "{during}");
        // rocewatch top, beside them.
        let top = json(&r.join("top-during.json"));
        let row = top["workloads"]
            .as_array()
            .unwrap_or_else(|| panic!("{top}"))
            .iter()
            .find(|w| w["workload"] == wl.as_str())
            .unwrap_or_else(|| {
                panic!(
                    "{wl} not in top: {top}\n{}",
                    read(&r.join("top-during.stderr"))
                )
            });
        assert_eq!(row["qps"], perf_qps as u64, "{row}");
        assert_eq!(row["mrs"], perf_mrs.len() as u64, "{row}");
        // After perftest: its series read 0, top no longer lists it, rdma shows nothing.
        let after = read(&r.join("res-metrics-after.txt"));
        assert_eq!(
            prom_sum(&after, "rdma_resource_qps", &w),
            Some(0.0),
            "{ctx}\n{after}"
        );
        assert!(rdma_entries_of(&json(&r.join("res-qp-after.json")), "ib_write_bw").is_empty());
        let top = json(&r.join("top-after.json"));
        assert!(
            !top["workloads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w["workload"] == wl.as_str() && w["qps"].as_u64() > Some(0)),
            "{top}"
        );
        // Per-QP counters: the mode was set for the agent's run and put back, both audited;
        // rxe accepts it and binds nothing, which the collector says once.
        // a stopped the agent with one SIGTERM (a normal stop), b through timeout, which
        // signals the agent and then its group: two signals, the second ending the agent
        // at once, unless they arrive together and count as one. Either way the counter
        // mode goes back (below).
        if role == "a" {
            assert!(!log.contains("during shutdown: exiting now"), "{ctx}");
        }
        let mode = |p: &str| read(&r.join(format!("res-mode-{p}.txt")));
        // `rdma statistic qp mode`: "link rxe0/1 mode qp auto off" as booted.
        assert!(mode("before").contains("auto off"), "{}", mode("before"));
        assert!(
            mode("during").contains("auto type,pid on"),
            "{}",
            mode("during")
        );
        assert_eq!(mode("before"), mode("after"));
        assert_eq!(
            log.matches("no QP of a process is bound to a counter")
                .count(),
            1,
            "{ctx}"
        );
        let audit: Vec<Value> = read(&r.join("res-audit.jsonl"))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &Value| v["rule"] == "resources.qp_counters")
            .collect();
        let details: Vec<&str> = audit
            .iter()
            .map(|v| v["detail"].as_str().unwrap())
            .collect();
        assert!(
            details.iter().any(|d| d
                .starts_with("rdma statistic qp set link rxe0/1 auto type,pid on (was auto off")),
            "{details:?}"
        );
        assert!(
            details.contains(&"put the QP counter mode of rxe0/1 back to auto off"),
            "{details:?}"
        );
        // The kernel's mode once put back, as it reports it.
        assert!(details.contains(&"back to none"), "{details:?}");
        // What was found is kept on disk while the mode is changed, and goes with it.
        let state = read(&r.join("res-state-during.txt"));
        assert!(state.contains("\"device\":\"rxe0\""), "{state}");
        assert!(
            !read(&r.join("res-state-after.txt")).contains("qp-counter-modes.json"),
            "{ctx}"
        );
        let results: Vec<&Value> = audit.iter().filter(|v| v["decision"] == "result").collect();
        assert_eq!(results.len(), 2, "{audit:?}");
        assert!(results.iter().all(|v| v["outcome"] == "ok"), "{audit:?}");
    }
    // Guest a: an agent killed (SIGKILL) with the mode changed leaves the mode it found
    // on disk; the next one, without per-QP counters, puts it back when it starts.
    let a = out.join("a");
    let said = |f: &str| read(&a.join(f));
    assert!(
        said("res-kill-mode.txt").contains("auto type,pid on"),
        "{}",
        said("res-kill-agent.log")
    );
    assert!(
        said("res-kill-state.txt").contains("\"auto\":false"),
        "{}",
        said("res-kill-state.txt")
    );
    assert!(
        said("res-restart-mode.txt").contains("auto off"),
        "{}",
        said("res-restart-agent.log")
    );
    assert!(!said("res-restart-state.txt").contains("qp-counter-modes.json"));
    assert!(
        said("res-restart-agent.log").contains("did not put back: putting them back"),
        "{}",
        said("res-restart-agent.log")
    );
    let puts_back = said("res-audit-kill.jsonl")
        .lines()
        .filter(|l| l.contains("put the QP counter mode of rxe0/1 back to auto off"))
        .count();
    assert_eq!(puts_back, 2, "the normal stop's, then the restart's");
}

/// `pf.txt` of `role`: the sweep's exit status and how long it took (guest uptime
/// seconds), by name.
fn sweep_of(out: &Path, role: &str, name: &str) -> (i32, f64) {
    let text = read(&out.join(format!("{role}/pf.txt")));
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("pf-{name} ")))
        .unwrap_or_else(|| panic!("no pf-{name} line in {role}/pf.txt:\n{text}"));
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in {line:?}"))
    };
    let rc = field("rc").parse().unwrap();
    let wall = field("end").parse::<f64>().unwrap() - field("start").parse::<f64>().unwrap();
    (rc, wall)
}

/// `rocewatch preflight --judge` on this host over both guests' lines of one sweep.
fn judge(out: &Path, name: &str) -> (i32, Value) {
    let files: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|r| out.join(format!("{r}/pf-{name}.jsonl")))
        .collect();
    let o = Command::new(&artifacts().rocewatch)
        .args(["preflight", "--json", "--min-bandwidth-share", "0.03"])
        .args(["--host-list", "192.168.100.1,192.168.100.2"])
        .args(["--max-latency-us", "1000000", "--judge"])
        .args(&files)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("--judge {name}: {e}; stderr: {stderr}"));
    (o.status.code().unwrap_or(-1), v)
}

/// The preflight sweep between the two guests (integration-tests/lab/preflight.sh), both
/// running the same command with no coordinator: it passes as they are (both directions
/// measured, each by the host that drives it, exit 0 on both and from `--judge` over both
/// hosts' lines); with b's egress throttled to 10 Mb/s by a token bucket, b's test of
/// b → a fails on its bandwidth, a's of a → b passes, and `--judge` names the slow
/// direction with both ends (exit 1). The sweep's wall time, one round of two 3 s tests
/// and ten probes each way, is printed: what docs/PROBES.md's timing rests on.
#[test]
fn lab_preflight_passes_on_the_pair_and_names_the_throttled_direction() {
    let Some(out) = probe_lab() else { return };
    let stderr = |r: &str, n: &str| read(&out.join(format!("{r}/pf-{n}.stderr")));
    for role in ["a", "b"] {
        let (rc, wall) = sweep_of(out, role, "pass");
        assert_eq!(rc, 0, "{role}'s sweep: {}", stderr(role, "pass"));
        eprintln!(
            "lab preflight: {role}'s sweep (1 round, 2 × (3 s + 10 probes)) took {wall:.1} s"
        );
        assert!(wall < 30.0, "{role}'s sweep took {wall} s");
    }
    let (rc, pass) = judge(out, "pass");
    assert_eq!(rc, 0, "{pass:#}");
    assert_eq!(pass["status"], "pass", "{pass:#}");
    let tests = pass["tests"].as_array().unwrap();
    let ends: Vec<(&str, &str)> = tests
        .iter()
        .map(|t| {
            (
                t["from"]["host"].as_str().unwrap(),
                t["to"]["host"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("192.168.100.1", "192.168.100.2"),
            ("192.168.100.2", "192.168.100.1")
        ],
        "{pass:#}"
    );
    for t in tests {
        assert!(t["bandwidth_gbps"].as_f64().unwrap() > 0.03, "{t}");
        assert!(t["latency_us"].as_f64().unwrap() > 0.0, "{t}");
        assert_eq!(t["from"]["nic"], "rxe0:1", "{t}");
    }

    // Throttled: b's own table fails its test, a's passes; the verdict names b → a.
    let tc = read(&out.join("b/pf.txt"));
    assert!(
        tc.contains("tc rc=0"),
        "tc qdisc add failed: {}",
        read(&out.join("b/tc.log"))
    );
    assert_eq!(sweep_of(out, "a", "slow").0, 0, "{}", stderr("a", "slow"));
    assert_eq!(sweep_of(out, "b", "slow").0, 1, "{}", stderr("b", "slow"));
    assert!(
        stderr("b", "slow").contains("FAIL"),
        "{}",
        stderr("b", "slow")
    );
    let (rc, slow) = judge(out, "slow");
    assert_eq!(rc, 1, "{slow:#}");
    assert_eq!(slow["status"], "fail", "{slow:#}");
    let findings = slow["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{slow:#}");
    let f = &findings[0];
    assert_eq!(f["finding"], "slow_direction", "{f:#}");
    assert_eq!(f["from"]["host"], "192.168.100.2", "{f:#}");
    assert_eq!(f["to"]["host"], "192.168.100.1", "{f:#}");
    assert_eq!(f["rank"], 0, "{f:#}");
    let why = f["why"].as_str().unwrap();
    assert!(
        why.contains("of the line rate") && why.contains("the reverse passes"),
        "{why}"
    );
    let slow_bw = slow["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["from"]["host"] == "192.168.100.2")
        .and_then(|t| t["bandwidth_gbps"].as_f64())
        .unwrap();
    // The bucket passes 10 Mb/s (what the queue pair's ramp and the burst add is little).
    assert!(
        slow_bw < 0.02,
        "b → a through a 10 Mb/s bucket measured {slow_bw} Gb/s"
    );
}

/// LLDP in the guest pair (integration-tests/lab/fleet.sh): lldpd in each guest sees the
/// other as its neighbour on both NICs, and `rocewatch fleet topology` prints each guest's
/// two lines (rail 0, the address of rxe0's RoCE v2 GID, the other guest as its switch and
/// eth0 as the port; rail 1 the same on rxe1 and eth1); both guests' lines make a topology
/// file whose pinglists have each guest probe the other across "ToRs" on both rails.
#[test]
fn lab_lldp_gives_each_guest_the_other_as_its_neighbour_in_the_topology() {
    let Some(out) = probe_lab() else { return };
    let lines = |r: &str| {
        let fleet = read(&out.join(format!("{r}/fleet.txt")));
        assert!(
            fleet.contains("topology rc=0"),
            "{fleet}: {}\nlldpd: {}\nlldpcli: {}",
            read(&out.join(format!("{r}/topology.stderr"))),
            read(&out.join(format!("{r}/lldpd.log"))),
            read(&out.join(format!("{r}/lldp.json")))
        );
        read(&out.join(format!("{r}/topology.csv")))
    };
    assert_eq!(
        lines("a"),
        "host,rail,addr,tor,tor_port\nlab-a,0,192.168.100.1,lab-b,eth0\nlab-a,1,192.168.101.1,lab-b,eth1\n"
    );
    let b = lines("b");
    assert_eq!(
        b,
        "host,rail,addr,tor,tor_port\nlab-b,0,192.168.100.2,lab-a,eth0\nlab-b,1,192.168.101.2,lab-a,eth1\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("fleet.csv");
    let b_rows: String = b.lines().skip(1).map(|l| format!("{l}\n")).collect();
    std::fs::write(&csv, format!("{}{b_rows}", lines("a"))).unwrap();
    let o = Command::new(&artifacts().rocewatch)
        .args([
            "fleet",
            "plan",
            "--format",
            "json",
            "--host",
            "lab-a",
            "--topology",
        ])
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_lab_b_on_both_rails(&v);
}

/// Asserts lab-a's pinglist `v` (`fleet plan --format json`): lab-b across "ToRs" on
/// rail 0 (192.168.100.2) and rail 1 (192.168.101.2).
fn assert_lab_b_on_both_rails(v: &Value) {
    let peers = v["peers"].as_array().cloned().unwrap_or_default();
    let got: Vec<(u64, &str, &str, &str, &str)> = peers
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or("?");
            (
                p["rail"].as_u64().unwrap_or(99),
                s("host"),
                s("addr"),
                s("tor"),
                s("class"),
            )
        })
        .collect();
    let want = [
        (0, "lab-b", "192.168.100.2", "lab-a", "cross_tor"),
        (1, "lab-b", "192.168.101.2", "lab-a", "cross_tor"),
    ];
    assert_eq!(got, want, "{v:#}");
}

/// The agent's log, fleet.txt and rxe1's setup of guest `r`, for a failure's message.
fn fleet_ctx(out: &Path, r: &str) -> String {
    format!(
        "--- agent log\n{}\n--- fleet.txt\n{}\n--- rxe1.log\n{}",
        read(&out.join(format!("{r}/fleet-agent.log"))),
        read(&out.join(format!("{r}/fleet.txt"))),
        std::fs::read_to_string(out.join(format!("{r}/rxe1.log"))).unwrap_or_default()
    )
}

/// How much the fleet results with the labels `with` rose from the scrape `m0` to `m`.
fn fleet_delta(m0: &str, m: &str, with: &[(&str, &str)]) -> f64 {
    let sum = |m: &str| prom_sum(m, "rdma_probe_fleet_results_total", with).unwrap_or(0.0);
    sum(m) - sum(m0)
}

/// The lines of `family` in the scrape `m` whose labels include `with` (`rail="1"`).
fn fleet_series<'a>(m: &'a str, family: &str, with: &str) -> Vec<&'a str> {
    m.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(with))
        .collect()
}

/// The agent with `[fleet]` in both guests (`fleet.sh`): the map is both guests' topology
/// lines (two rails each), each guest's NIC info series carries the ToR LLDP named (the
/// other guest) on both rails, and each probes the other on both rails, each rail from
/// its own device (rail 0 from rxe0, rail 1 from rxe1: the series' `device`), on 4 flows
/// whose source ports rotate every 2 s. In a's capture of the RoCE v2 packets it sent on
/// eth0, the prober's ports are exactly those its flow labels give (`0xC000 | label` of
/// lab-a → 192.168.100.2, path, epoch), many of them; every probe on every path of both
/// rails was answered (a flow moved to a new port keeps its queue pairs).
#[test]
fn lab_fleet_probes_use_a_source_port_per_path_and_rotation_and_export_the_lldp_tor() {
    let Some(out) = probe_lab() else { return };
    let ctx = |r: &str| fleet_ctx(out, r);
    for (r, me, n, tor) in [("a", "lab-a", 1, "lab-b"), ("b", "lab-b", 2, "lab-a")] {
        let m = read(&out.join(format!("{r}/fleet-metrics.txt")));
        for rail in 0..2 {
            let info = format!(
                r#"rdma_fleet_nic_info{{address="192.168.10{rail}.{n}",host="{me}",rail="{rail}",tor="{tor}",tor_port="eth{rail}"}} 1"#
            );
            assert!(m.contains(&info), "{info} not in\n{m}\n{}", ctx(r));
            // Every series of the rail is its own device's.
            let results = fleet_series(
                &m,
                "rdma_probe_fleet_results_total",
                &format!("rail=\"{rail}\""),
            );
            let device = format!("device=\"rxe{rail}:1\"");
            assert!(
                !results.is_empty() && results.iter().all(|l| l.contains(&device)),
                "rail {rail} not all from {device}: {results:#?}\n{}",
                ctx(r)
            );
        }
        // The 12 s between the scrape once every flow was answered and this one.
        let m0 = read(&out.join(format!("{r}/fleet-metrics0.txt")));
        for (rail, path) in (0..2).flat_map(|rail| (0..4).map(move |path| (rail, path))) {
            let (rail, path) = (rail.to_string(), path.to_string());
            let with = [("rail", rail.as_str()), ("path", &path), ("outcome", "ok")];
            let n = fleet_delta(&m0, &m, &with);
            assert!(
                n >= 5.0,
                "{me} rail {rail} path {path}: {n} answered\n{m}\n{}",
                ctx(r)
            );
            for bad in ["timeout", "failed", "host_overloaded", "local_error"] {
                let with = [("rail", rail.as_str()), ("path", &path), ("outcome", bad)];
                let n = fleet_delta(&m0, &m, &with);
                assert_eq!(
                    n,
                    0.0,
                    "{me} rail {rail} path {path}: {bad}\n{m}\n{}",
                    ctx(r)
                );
            }
        }
        assert!(!m.contains("rdma_probe_fleet_failing_ratio{"), "{m}");
    }
    // a's capture: "TIME SRC.PORT" per packet it sent to UDP port 4791.
    let cap = read(&out.join("a/roce-sports.txt"));
    let packets: Vec<(f64, u16)> = cap
        .lines()
        .filter_map(|l| {
            let (t, src) = l.split_once(' ')?;
            let (ip, port) = src.rsplit_once('.')?;
            (ip == "192.168.100.1").then_some((t.parse().ok()?, port.parse().ok()?))
        })
        .collect();
    assert!(packets.len() > 50, "{cap}");
    let (t0, t1) = (packets[0].0 as u64, packets[packets.len() - 1].0 as u64);
    let mut predicted = std::collections::BTreeSet::new();
    for path in 0..4u16 {
        for s in t0.saturating_sub(4)..=t1 + 4 {
            let e = rocewatch_probes::fleet::flows::epoch("lab-a", "192.168.100.2", path, s, 2);
            let label =
                rocewatch_probes::fleet::flows::flow_label("lab-a", "192.168.100.2", path, e);
            predicted.insert(rocewatch_probes::fleet::flows::udp_sport(label));
        }
    }
    let seen: std::collections::BTreeSet<u16> = packets.iter().map(|p| p.1).collect();
    let prober: Vec<u16> = seen.intersection(&predicted).copied().collect();
    // About 10 s of probing at a rotation of 2 s: 4 flows x 5 epochs; the rest of a's
    // packets are its responder's answers to b (the driver's ports, a few).
    assert!(
        prober.len() >= 12,
        "prober ports {prober:?} of {seen:?}\n{cap}"
    );
    assert!(
        seen.len() - prober.len() <= 4,
        "ports not from a flow label: {:?}",
        seen.difference(&predicted).collect::<Vec<_>>()
    );
    assert!(prober.iter().all(|p| *p >= 0xc000), "{prober:?}");
}

/// Then guest a drops UDP 4791 to its rail-1 address (nftables, `fleet.sh`) for 10 s: in
/// both guests' scrape at its end, rail 1's flows fail (timeouts or failed connections,
/// failing flows named with rail 1, rxe1 and the peer's rail-1 address) while rail 0,
/// probed all the while, lost nothing and has no failing flow.
#[test]
fn lab_fleet_udp_4791_dropped_to_rail_1_fails_rail_1_only() {
    let Some(out) = probe_lab() else { return };
    let nft = read(&out.join("a/nft-fleet.json"));
    assert!(nft.contains("192.168.101.1"), "the drop rule: {nft}");
    for (r, peer) in [("a", "192.168.101.2"), ("b", "192.168.101.1")] {
        let before = read(&out.join(format!("{r}/fleet-metrics.txt")));
        let m = read(&out.join(format!("{r}/fleet-drop-metrics.txt")));
        let ctx = || format!("{m}\n{}", fleet_ctx(out, r));
        // What the 10 s of the drop (and the few seconds around) added.
        let added = |rail: &str, outcome: &str| {
            fleet_delta(&before, &m, &[("rail", rail), ("outcome", outcome)])
        };
        let lost = |rail: &str| added(rail, "timeout") + added(rail, "failed");
        assert!(lost("1") > 0.0, "guest {r}: rail 1 lost nothing\n{}", ctx());
        assert_eq!(lost("0"), 0.0, "guest {r}: rail 0 lost probes\n{}", ctx());
        assert!(
            added("0", "ok") >= 8.0,
            "guest {r}: rail 0 answered {} probes during the drop\n{}",
            added("0", "ok"),
            ctx()
        );
        let failing = fleet_series(&m, "rdma_probe_fleet_failing_ratio", "");
        assert!(!failing.is_empty(), "guest {r}: no failing flow\n{}", ctx());
        for l in &failing {
            for want in [
                "rail=\"1\"",
                "device=\"rxe1:1\"",
                &format!("peer=\"{peer}\""),
            ] {
                assert!(l.contains(want), "guest {r}: {l} without {want}\n{}", ctx());
            }
        }
    }
}

/// The metrics backend as the fleet's map (`[fleet] source = "prometheus"`,
/// `fleet plan --prometheus`): the NIC info series both guests' agents exported, loaded
/// into a real VictoriaMetrics, give lab-a its pinglist: lab-b across "ToRs" on both rails.
#[test]
fn lab_the_prometheus_map_of_the_guests_info_series_gives_the_right_peers() {
    let Some(out) = probe_lab() else { return };
    let Some(bin) = crate::otlp::vm_bin() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let vm = crate::otlp::start_vm(&bin, "127.0.0.1:0", data.path(), &[]);
    let mut lines = String::new();
    for r in ["a", "b"] {
        let m = read(&out.join(format!("{r}/fleet-metrics.txt")));
        let info: Vec<&str> = m
            .lines()
            .filter(|l| l.starts_with("rdma_fleet_nic_info{"))
            .collect();
        assert_eq!(info.len(), 2, "{m}");
        for l in info {
            lines.push_str(l);
            lines.push('\n');
        }
    }
    let url = format!("http://{}", vm.addr);
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/api/v1/import/prometheus"))
        .body(lines.clone())
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text());
    let plan = || {
        Command::new(&artifacts().rocewatch)
            .args([
                "fleet",
                "plan",
                "--format",
                "json",
                "--host",
                "lab-a",
                "--prometheus",
                &url,
            ])
            .output()
            .unwrap()
    };
    // Imported samples become searchable within a second or two.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let o = loop {
        let o = plan();
        if o.status.success() || std::time::Instant::now() > deadline {
            break o;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert!(
        o.status.success(),
        "{}\n{lines}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_lab_b_on_both_rails(&v);
}

/// Inside a lab guest, on its real kernel: doctor's virtualization topic says a QEMU
/// guest (kvm where the guest has kvm-clock and the CPU's hypervisor flag, as under
/// `-enable-kvm`; qemu under TCG), with the DMI vendor the guest's own file shows, and
/// measures steal over its window from the same `/proc/stat` the guest reads.
#[test]
fn lab_doctor_says_a_qemu_guest_and_measures_steal() {
    let Some(out) = lab_run() else { return };
    let a = out.join("a");
    let facts: BTreeMap<String, String> = read(&a.join("virt-facts.txt"))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect();
    let stderr = read(&a.join("doctor-virt.stderr"));
    let doctor = json(&a.join("doctor-virt.json"));
    let checks: Vec<&Value> = doctor["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("{doctor}\nstderr: {stderr}"))
        .iter()
        .filter(|c| c["check"] == "virtualization")
        .collect();
    let find = |subject: &str| -> &Value {
        checks
            .iter()
            .find(|c| c["subject"] == subject)
            .unwrap_or_else(|| {
                panic!("no virtualization {subject:?} in {checks:?}\nstderr: {stderr}")
            })
    };
    assert_eq!(facts["sys_vendor"], "QEMU", "{facts:?}");
    let what = find("");
    let evidence = what["evidence"].as_str().unwrap();
    let kvm = facts["hypervisor_flag"] == "1"
        && facts["clocksources"]
            .split_whitespace()
            .any(|c| c == "kvm-clock");
    let expect = if kvm { "(kvm)" } else { "(qemu)" };
    assert_eq!(what["status"], "info", "{what}");
    assert!(
        evidence.starts_with("a guest: a virtual machine ") && evidence.contains(expect),
        "{expect} expected from {facts:?}: {what}"
    );
    assert!(evidence.contains("DMI sys_vendor: QEMU"), "{what}");
    // The guest cannot see the switch: said, never judged.
    assert_eq!(find("switch")["status"], "skip", "{checks:?}");
    // Steal: measured on the live /proc/stat (pass, or warn when the host was busy).
    let steal = find("steal");
    assert!(
        steal["status"] == "pass" || steal["status"] == "warn",
        "{steal}"
    );
    let pct: f64 = steal["evidence"]
        .as_str()
        .unwrap()
        .split(" % ")
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no share in {steal}"));
    assert!((0.0..=100.0).contains(&pct), "{steal}");
    // The guest's own reading around the run: the cpu line has steal (8th value), which
    // never goes back.
    let stat = read(&a.join("virt-stat.txt"));
    let steals: Vec<u64> = stat
        .lines()
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect();
            assert!(v.len() >= 8, "{l}");
            v[7]
        })
        .collect();
    assert_eq!(steals.len(), 2, "{stat}");
    assert!(steals[1] >= steals[0], "{stat}");
    eprintln!(
        "lab guest: {evidence}; steal over doctor's window: {}",
        steal["evidence"]
    );
}

/// Where netdevsim-build.sh built netdevsim for a lab kernel (`.cache/netdevsim/KV`,
/// marked `.done`), one directory per kernel release.
fn netdevsim_builds() -> Vec<PathBuf> {
    std::fs::read_dir(root().join(".cache/netdevsim"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|d| d.join(".done").is_file())
        .collect()
}

/// One `vf N` line of `ip -d link show dev PF`: its comma-separated parts.
fn ip_vf_line(text: &str, vf: u32) -> Vec<String> {
    let head = format!("vf {vf} ");
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no {head:?} line in ip -d link show:\n{text}"));
    line.split(", ").map(str::to_string).collect()
}

/// Guest a's results of the counters boot where netdevsim ran there; `None` (said) when
/// the lab does not run or netdevsim.ko was not built for its kernel.
fn netdevsim_guest() -> Option<std::path::PathBuf> {
    let a = lab_run()?.join("a");
    if a.join("nds-missing.txt").is_file() {
        missing(
            "netdevsim.ko for the lab's guest kernel",
            "run scripts/install-test-deps.sh (integration-tests/lab/netdevsim-build.sh builds it once, about a minute)",
        );
        return None;
    }
    Some(a)
}

/// On the lab guest's real kernel, netdevsim's SR-IOV emulation (built for that kernel by
/// netdevsim-build.sh) answers RTM_GETLINK with IFLA_VFINFO_LIST as `rtnl_fill_vfinfo`
/// lays it out; rocewatch's decoder (`rocewatch_netlink::vfinfo`) reads that reply to
/// what `ip -d link show` prints from the same kernel (MAC, VLAN and its QoS, rate, spoof
/// checking, link state, trust) and to what netdevsim.sh set.
#[test]
fn lab_the_kernels_vfinfo_reply_decodes_to_what_ip_link_shows() {
    use rocewatch_netlink::vfinfo::{self, LinkState};
    let Some(a) = netdevsim_guest() else { return };
    let setup = read(&a.join("nds-setup.txt"));
    let failed: Vec<&str> = setup
        .lines()
        .filter(|l| l.starts_with("rc=") && !l.starts_with("rc=0 "))
        .collect();
    assert!(
        failed.is_empty(),
        "netdevsim setup failed: {failed:?}\n{setup}"
    );
    let pf = read(&a.join("nds-pf.txt")).trim().to_string();
    assert!(!pf.is_empty(), "netdevsim made no netdev:\n{setup}");
    let reply = std::fs::read(a.join("nds-vfinfo-reply.bin")).unwrap();
    assert!(reply.len() >= 16, "short reply {reply:?}\n{setup}");
    let len = u32::from_ne_bytes(reply[0..4].try_into().unwrap()) as usize;
    let kind = u16::from_ne_bytes(reply[4..6].try_into().unwrap());
    // RTM_NEWLINK (16), not NLMSG_ERROR (2), and the whole message came.
    assert_eq!(kind, 16, "reply type {kind}: {reply:?}\n{setup}");
    assert!(len <= reply.len(), "{len} > {}", reply.len());
    let got = vfinfo::decode_vf_link(&reply[16..len])
        .unwrap_or_else(|e| panic!("the kernel's reply does not decode: {e}"));
    assert_eq!(got.name, pf);
    // netdevsim.sh enabled two VFs (its sriov_numvfs).
    assert_eq!(got.num_vf, Some(2), "{got:?}");
    assert_eq!(got.vfs.iter().map(|v| v.vf).collect::<Vec<_>>(), [0, 1]);
    // What netdevsim.sh set: vf 0 mac and vlan 10 qos 3; vf 1 rate 100..300, state
    // disable, trust on, spoofchk off.
    let (v0, v1) = (&got.vfs[0], &got.vfs[1]);
    assert_eq!(
        v0.mac_text().as_deref(),
        Some("02:00:00:00:0a:03"),
        "{v0:?}"
    );
    let vlan = v0.vlan.unwrap_or_else(|| panic!("no VLAN in {v0:?}"));
    assert_eq!((vlan.vlan, vlan.qos), (10, 3), "{v0:?}");
    assert_eq!(vlan.proto, Some(vfinfo::ETH_P_8021Q), "{v0:?}");
    assert_eq!(
        (v1.min_tx_rate, v1.max_tx_rate),
        (Some(100), Some(300)),
        "{v1:?}"
    );
    assert_eq!(v1.link_state, Some(LinkState::Disable), "{v1:?}");
    assert_eq!((v1.trust, v1.spoofchk), (Some(true), Some(false)), "{v1:?}");
    // And field by field what `ip -d link show` printed from the same kernel.
    let ip = read(&a.join("nds-ip-link.txt"));
    let on = |b: bool| if b { "on" } else { "off" };
    for v in &got.vfs {
        let parts = ip_vf_line(&ip, v.vf);
        let mut want = Vec::new();
        if let Some(vl) = v.vlan.filter(|vl| vl.vlan != 0) {
            want.push(format!("vlan {}", vl.vlan));
            if vl.qos != 0 {
                want.push(format!("qos {}", vl.qos));
            }
        }
        if let Some(r) = v.max_tx_rate.filter(|r| *r != 0) {
            want.push(format!("max_tx_rate {r}Mbps"));
        }
        if let Some(r) = v.min_tx_rate.filter(|r| *r != 0) {
            want.push(format!("min_tx_rate {r}Mbps"));
        }
        if let Some(b) = v.spoofchk {
            want.push(format!("spoof checking {}", on(b)));
        }
        if let Some(l) = v.link_state {
            want.push(format!("link-state {}", l.as_str()));
        }
        if let Some(b) = v.trust {
            want.push(format!("trust {}", on(b)));
        }
        for w in &want {
            assert!(parts.contains(w), "vf {}: {w:?} not in {parts:?}", v.vf);
        }
        let mac = v.mac_text().unwrap_or_else(|| panic!("no MAC in {v:?}"));
        assert!(
            parts[0].contains(&mac),
            "vf {}: {mac} not in {parts:?}",
            v.vf
        );
        eprintln!("lab netdevsim vf {}: {} == {v:?}", v.vf, parts.join(", "));
    }
}

/// On the lab guest's real kernel, counters-ethtool's link requests against netdevsim: its
/// ETHTOOL_MSG_FEC_GET reply (6.1's netdevsim answers from what the FEC ioctl set) decodes
/// to the RS that netdevsim.sh set through `ETHTOOL_SFECPARAM`, with no active mode before
/// (the kernel leaves `ETHTOOL_A_FEC_ACTIVE` out for none); and `rocewatch optics` on a
/// host whose ports have no module (netdevsim, virtio-net) says so and exits 0, the
/// module request answered EOPNOTSUPP by a real kernel. No module or FEC counter of real
/// hardware is read anywhere here (docs/OPTICS.md says so).
#[test]
fn lab_the_kernels_fec_reply_decodes_to_what_netdevsim_was_set_to() {
    let Some(a) = netdevsim_guest() else { return };
    let pf = read(&a.join("nds-pf.txt")).trim().to_string();
    assert!(!pf.is_empty(), "netdevsim made no netdev");
    let fec_set = read(&a.join("nds-fec-set.txt"));
    assert!(fec_set.contains("rc=0"), "the FEC ioctl failed: {fec_set}");
    let collection = |name: &str| -> Vec<Value> {
        let v = json(&a.join(format!("{name}.json")));
        let why = read(&a.join(format!("{name}.stderr")));
        let errors = v["errors"].to_string();
        assert!(
            !errors.contains(&pf),
            "{name}: errors about {pf}: {errors}\nstderr:\n{why}"
        );
        v["samples"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no samples; stderr:\n{why}"))
            .iter()
            .filter(|s| s["attributes"]["network.interface.name"] == pf.as_str())
            .cloned()
            .collect()
    };
    let active = |samples: &[Value]| -> Vec<(String, Value)> {
        samples
            .iter()
            .filter(|s| s["name"] == "rdma.link.fec.active")
            .map(|s| {
                let mode = s["attributes"]
                    .as_object()
                    .and_then(|m| m.iter().find(|(k, _)| k.contains("fec")))
                    .map(|(_, v)| v.as_str().unwrap_or_default().to_string())
                    .unwrap_or_default();
                (mode, s["value"].clone())
            })
            .collect()
    };
    let before = collection("nds-link-default");
    assert!(
        before
            .iter()
            .any(|s| s["name"] == "rdma.link.carrier_changes"),
        "no link series for {pf} at all: {before:?}"
    );
    assert_eq!(active(&before), [], "an active FEC mode before any was set");
    let after = collection("nds-link-rs");
    assert_eq!(
        active(&after),
        [("RS".to_string(), serde_json::json!(1))],
        "after ETHTOOL_SFECPARAM RS: {after:?}"
    );
    let rc = read(&a.join("nds-optics.rc"));
    let text = read(&a.join("nds-optics.txt"));
    let why = read(&a.join("nds-optics.stderr"));
    assert_eq!(rc.trim(), "0", "rocewatch optics: {text}\nstderr:\n{why}");
    assert!(
        text.contains("No transceiver module read"),
        "rocewatch optics on a host without modules: {text}\nstderr:\n{why}"
    );
}
