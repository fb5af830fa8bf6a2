//! `rocewatch capture`: a pcap of RoCE v2 packets (crafted here: an RDMA WRITE with a lost
//! packet and a retransmission, an ACK, a NAK, a CNP, an ECN-CE mark) summed up as text and
//! JSON (`--read`); a file that is not a pcap refused with the reason; and a live capture
//! with tcpdump on a veth pair, frames injected on the peer, rx-vlan-offload turned off for
//! it and put back after the capture, after SIGTERM, and after a SIGKILL on the next start.

use serde_json::Value;

use crate::support::*;

/// An Ethernet/IPv4/UDP 4791 frame with a BTH (and an AETH when given).
fn frame(opcode: u8, qp: u32, psn: u32, ecn: u8, aeth: Option<u8>) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let udp_len = 8 + 12 + aeth.map_or(0, |_| 4) + 32;
    f.extend_from_slice(&[0x45, (26 << 2) | ecn]);
    f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7]); // source port, 4791
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, opcode, 0, 0xff, 0xff]);
    f.extend_from_slice(&qp.to_be_bytes());
    f.extend_from_slice(&psn.to_be_bytes());
    if let Some(a) = aeth {
        f.extend_from_slice(&[a, 0, 0, 1]);
    }
    f.extend_from_slice(&[0u8; 32]);
    f
}

fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for f in frames {
        for v in [0u32, 0, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(f);
    }
    b
}

#[test]
fn capture_read_sums_up_roce_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("roce.pcap");
    std::fs::write(
        &file,
        pcap(&[
            frame(0x06, 0x12, 10, 2, None),       // RC RDMA WRITE First
            frame(0x07, 0x12, 11, 3, None),       // Middle, ECN-CE
            frame(0x08, 0x12, 13, 2, None),       // Last: 12 lost
            frame(0x07, 0x12, 11, 2, None),       // 11 again: retransmitted
            frame(0x11, 0x34, 13, 2, Some(0)),    // ACK
            frame(0x11, 0x34, 12, 2, Some(0x60)), // NAK, PSN sequence error
            frame(0x81, 0x12, 0, 2, None),        // CNP
        ]),
    )
    .unwrap();
    let o = rocewatch(&["capture", "--read", file.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.starts_with("7 frames: 7 RoCE v2 packets"), "{t}");
    assert!(
        t.contains("CNPs 1   ECN-CE marked 1   ACKs 1   NAKs 1   RNR NAKs 0"),
        "{t}"
    );
    assert!(t.contains("RC RDMA WRITE Middle"), "{t}");
    let o = rocewatch(
        &["capture", "--read", file.to_str().unwrap(), "--json"],
        &[],
    );
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["by_dest_qp"]["18"]["psn_gaps"], 1, "{j}");
    assert_eq!(j["by_dest_qp"]["18"]["retransmitted"], 1, "{j}");
    assert_eq!(j["naks"]["PSN sequence error"], 1, "{j}");
    assert_eq!(j["by_opcode"]["CNP"]["packets"], 1, "{j}");
    // Not a pcap: refused, naming the file and why.
    std::fs::write(&file, "not a capture at all, but long enough").unwrap();
    let o = rocewatch(&["capture", "--read", file.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("roce.pcap: not a pcap file"),
        "{}",
        stderr(&o)
    );
}

/// Send `frame` out of `ifname` (AF_PACKET): it arrives on the veth peer.
fn inject(ifname: &str, frame: &[u8]) {
    let c = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: plain socket calls on a sockaddr_ll filled here; every result is checked.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let mut sa: libc::sockaddr_ll = std::mem::zeroed();
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_ifindex = libc::if_nametoindex(c.as_ptr()) as i32;
        sa.sll_halen = 6;
        let n = libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&sa as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        );
        libc::close(fd);
        assert_eq!(
            n,
            frame.len() as isize,
            "sendto: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn vlan_offload(ifname: &str) -> String {
    let o = std::process::Command::new("ethtool")
        .args(["-k", ifname])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("rx-vlan-offload:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

fn wait_for(what: &str, within: std::time::Duration, f: impl Fn() -> bool) {
    let end = std::time::Instant::now() + within;
    while !f() {
        assert!(std::time::Instant::now() < end, "{what} within {within:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn capture(veth: &str, state: &std::path::Path, args: &[&str]) -> Spawned {
    let out = Some(std::process::Stdio::piped());
    Spawned::start(
        "rocewatch capture",
        std::process::Command::new(&artifacts().rocewatch)
            .arg("capture")
            .arg(veth)
            .args(args)
            .env("STATE_DIRECTORY", state),
        out,
    )
}

#[test]
fn a_live_capture_turns_the_vlan_offload_off_and_always_puts_it_back() {
    let Some(_) = require("tcpdump", receiver("ROCEWATCH_TCPDUMP", "", "tcpdump")) else {
        return;
    };
    let veth = crate::ethtool::Veth::create();
    let state = tempfile::tempdir().unwrap();
    let rec = state
        .path()
        .join(format!("capture-offload-{}.json", veth.0));
    let secs = std::time::Duration::from_secs;
    let off = || vlan_offload(&veth.0) == "off";
    let listening = |c: &mut Spawned| {
        c.wait_log("tcpdump listening", secs(15), |l| {
            l.contains("listening on").then_some(())
        })
    };
    assert_eq!(vlan_offload(&veth.0), "on");
    // A capture of 4 s: offload off while it runs, the frames counted, on again after.
    let mut c = capture(
        &veth.0,
        state.path(),
        &["--duration", "4s", "--offload-off", "--summary", "--json"],
    );
    wait_for("offload off", secs(15), off);
    assert!(
        rec.exists(),
        "the restore record is there while the offload is off"
    );
    listening(&mut c);
    for psn in 0..20 {
        inject(veth.peer(), &frame(0x0a, 0x77, psn, 2, None)); // RC RDMA WRITE Only
    }
    assert!(
        c.wait_exit(secs(20)).is_some_and(|s| s.success()),
        "{}",
        c.log()
    );
    let mut out = String::new();
    use std::io::Read;
    c.child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{}", c.log()));
    assert_eq!(j["by_opcode"]["RC RDMA WRITE Only"]["packets"], 20, "{j}");
    assert_eq!(j["by_dest_qp"]["119"]["psn_gaps"], 0, "{j}");
    assert_eq!(vlan_offload(&veth.0), "on", "put back after the capture");
    assert!(!rec.exists());
    // SIGTERM in the middle: put back, exit 143 (128 + SIGTERM).
    let mut c = capture(
        &veth.0,
        state.path(),
        &["--duration", "60s", "--offload-off"],
    );
    wait_for("offload off", secs(15), off);
    // A second capture of the same netdev meanwhile finds the offload off and leaves the
    // first one's record and setting alone (its leftover check skips a held record).
    let o = std::process::Command::new(&artifacts().rocewatch)
        .args(["capture", &veth.0, "--duration", "1s", "--offload-off"])
        .env("STATE_DIRECTORY", state.path())
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains("rx-vlan-offload is already off") && !stderr(&o).contains("restored"),
        "{}",
        stderr(&o)
    );
    assert!(off() && rec.exists());
    listening(&mut c);
    c.signal("TERM");
    let st = c.wait_exit(secs(20));
    assert_eq!(st.and_then(|s| s.code()), Some(143), "{}", c.log());
    assert_eq!(
        vlan_offload(&veth.0),
        "on",
        "put back after SIGTERM: {}",
        c.log()
    );
    // SIGKILL: nothing can run; the record stays and the next start puts the value back.
    let kept = state.path().join("k.pcap");
    let mut c = capture(
        &veth.0,
        state.path(),
        &[
            "--duration",
            "60s",
            "--offload-off",
            "-w",
            kept.to_str().unwrap(),
        ],
    );
    wait_for("offload off", secs(15), off);
    listening(&mut c);
    c.signal("KILL");
    let _ = c.wait_exit(secs(10));
    assert!(off() && rec.exists());
    // Its tcpdump went with it.
    wait_for("tcpdump gone", secs(10), || {
        !std::process::Command::new("pgrep")
            .args(["-f", &format!("tcpdump -i {} ", veth.0)])
            .status()
            .unwrap()
            .success()
    });
    let o = std::process::Command::new(&artifacts().rocewatch)
        .args(["capture", &veth.0, "--duration", "1s"])
        .env("STATE_DIRECTORY", state.path())
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains("rx-vlan-hw-parse on restored, as found by an interrupted capture"),
        "{}",
        stderr(&o)
    );
    assert_eq!(vlan_offload(&veth.0), "on");
    assert!(!rec.exists());
    // Something that is neither an RDMA device nor a netdev: refused with the cause.
    let o = rocewatch(
        &["capture", "nosuch0", "--duration", "1s"],
        &[("STATE_DIRECTORY", state.path().to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no RDMA device or netdev named \"nosuch0\""),
        "{}",
        stderr(&o)
    );
}

/// `ethtool -k IFNAME`'s value of `name` (`on`, `off`, `on [fixed]`).
fn feature(ifname: &str, name: &str) -> String {
    let o = std::process::Command::new("ethtool")
        .args(["-k", ifname])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(&format!("{name}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

#[test]
fn a_restore_record_root_did_not_write_or_that_names_another_feature_is_refused() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test checks what `capture` (root) refuses to act on: it needs root (CI runs as root)"
    );
    let veth = crate::ethtool::Veth::create();
    let state = tempfile::tempdir().unwrap();
    let rec = state
        .path()
        .join(format!("capture-offload-{}.json", veth.0));
    let record = |feature: &str| {
        format!(
            "{{\"netdev\":\"{}\",\"feature\":\"{feature}\",\"was_on\":true,\"pid\":1}}",
            veth.0
        )
    };
    // Starting `capture` restores what earlier captures left; the target does not matter.
    let capture = || {
        let o = rocewatch(
            &["capture", "nosuch0", "--duration", "1s"],
            &[("STATE_DIRECTORY", state.path().to_str().unwrap())],
        );
        stderr(&o)
    };
    let said_refused = |said: &str, why: &str| {
        said.lines().any(|l| {
            l.contains(&rec.display().to_string()) && l.contains("refused") && l.contains(why)
        })
    };

    // A feature rocewatch never turns off (GRO, off on a veth): not turned on.
    assert_eq!(feature(&veth.0, "generic-receive-offload"), "off");
    std::fs::write(&rec, record("rx-gro")).unwrap();
    let said = capture();
    assert_eq!(
        feature(&veth.0, "generic-receive-offload"),
        "off",
        "turned on a feature it never turns off: {said}"
    );
    assert!(said_refused(&said, "rx-gro"), "{said}");

    // The VLAN offload, off, with a record user nobody wrote: left off.
    let st = std::process::Command::new("ethtool")
        .args(["-K", &veth.0, "rxvlan", "off"])
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(&rec, record("rx-vlan-hw-parse")).unwrap();
    crate::qos::lchown(&rec, 65534);
    let said = capture();
    assert_eq!(
        vlan_offload(&veth.0),
        "off",
        "acted on user nobody's record: {said}"
    );
    assert!(
        said_refused(&said, "owned by user nobody (uid 65534)"),
        "{said}"
    );

    // The same record as a link to a file root wrote elsewhere: not followed.
    let elsewhere = tempfile::tempdir().unwrap();
    let real = elsewhere.path().join("record.json");
    std::fs::write(&real, record("rx-vlan-hw-parse")).unwrap();
    std::fs::remove_file(&rec).unwrap();
    std::os::unix::fs::symlink(&real, &rec).unwrap();
    let said = capture();
    assert_eq!(vlan_offload(&veth.0), "off", "followed a link: {said}");
    assert!(said_refused(&said, "symbolic link"), "{said}");

    // Root's own record of the netdev: honoured.
    std::fs::remove_file(&rec).unwrap();
    std::fs::write(&rec, record("rx-vlan-hw-parse")).unwrap();
    let said = capture();
    assert_eq!(vlan_offload(&veth.0), "on", "{said}");
    assert!(!rec.exists(), "{said}");
}
