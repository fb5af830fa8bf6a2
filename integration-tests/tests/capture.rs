//! `rocewatch capture`: a pcap of RoCE v2 packets (crafted here: an RDMA WRITE with a lost
//! packet and a retransmission, an ACK, a NAK, a CNP, an ECN-CE mark) summed up as text and
//! JSON (`--read`); a file that is not a pcap refused with the reason; UDP 4791 payloads
//! that are not RoCE v2 counted apart; a 512 MiB capture read in the memory of one frame
//! under a 1 GiB address-space limit, its last record cut short said; a FIFO, /dev/zero
//! and a directory refused; a record too long to be one named by offset; and a live capture
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

/// An Ethernet/IPv4/UDP frame to port 4791 carrying `udp_payload` (what follows the UDP
/// header: a BTH and whatever the test puts after it), its UDP length saying so.
fn udp_4791(udp_payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let udp_len = 8 + udp_payload.len();
    f.extend_from_slice(&[0x45, 26 << 2]);
    f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7]);
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(udp_payload);
    f
}

/// A BTH: `opcode`, the byte with SE/M/pad count/TVer (`flags`), P_Key 0xffff, QP 0x12,
/// PSN 1.
fn bth(opcode: u8, flags: u8) -> Vec<u8> {
    vec![opcode, flags, 0xff, 0xff, 0, 0, 0, 0x12, 0, 0, 0, 1]
}

/// `rocewatch ARGS` with its address space limited to 1 GiB (what a systemd unit's
/// MemoryMax or a container limit does to a reader that holds a whole file), its exit
/// status, standard output and error, and its peak resident memory in KiB (the kernel's
/// `ru_maxrss` of the child, from `wait4`).
fn rocewatch_limited(args: &[&str]) -> (Option<i32>, String, String, u64) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&artifacts().rocewatch);
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit in the child before exec, async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let gib = 1u64 << 30;
            let rl = libc::rlimit {
                rlim_cur: gib,
                rlim_max: gib,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Reaped by the wait4 below (which is what returns its rusage), not by Child::wait.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().expect("start rocewatch");
    let (mut out, mut err) = (String::new(), String::new());
    let mut so = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    out.push_str(&reader.join().unwrap());
    let mut status = 0;
    // SAFETY: wait4 on our own child with out-buffers we own; std's Child is not waited
    // on after this (its Drop does not wait).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, out, err, ru.ru_maxrss as u64)
}

#[test]
fn capture_read_streams_a_large_file_in_bounded_memory() {
    // 512 MiB of capture: a RoCE frame, 8192 records of 65535 bytes each (holes in a sparse
    // file: zeros, Ethernet type 0, "other"), a RoCE frame, and a last record cut short.
    // Memory must not grow with the file (it held the whole file plus an index of every
    // frame: a 512 MB capture aborted under a 1 GB limit).
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.pcap");
    let small = dir.path().join("small.pcap");
    let roce = frame(0x0a, 0x12, 7, 2, None); // RC RDMA WRITE Only
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::File::create(&big).unwrap();
        f.write_all(&pcap(std::slice::from_ref(&roce))).unwrap();
        let mut at = f.stream_position().unwrap();
        for _ in 0..8192 {
            for v in [0u32, 0, 65535, 65535] {
                f.write_all(&v.to_le_bytes()).unwrap();
            }
            at += 16 + 65535;
            f.seek(SeekFrom::Start(at)).unwrap();
        }
        let rest = pcap(std::slice::from_ref(&roce));
        f.write_all(&rest[24..]).unwrap();
        // The last record: a header for 1000 bytes, 10 of them written.
        for v in [0u32, 0, 1000, 1000] {
            f.write_all(&v.to_le_bytes()).unwrap();
        }
        f.write_all(&[0u8; 10]).unwrap();
        assert!(f.metadata().unwrap().len() > 512 << 20);
    }
    std::fs::write(&small, pcap(std::slice::from_ref(&roce))).unwrap();
    let (code, out, err, small_kib) =
        rocewatch_limited(&["capture", "--read", small.to_str().unwrap()]);
    assert_eq!(code, Some(0), "small file: {err}");
    assert!(out.starts_with("1 frames: 1 RoCE v2 packets"), "{out}{err}");
    let (code, out, err, big_kib) =
        rocewatch_limited(&["capture", "--read", big.to_str().unwrap()]);
    assert_eq!(
        code,
        Some(0),
        "512 MiB file under a 1 GiB address space: {err}"
    );
    assert!(
        out.starts_with("8194 frames: 2 RoCE v2 packets"),
        "{out}{err}"
    );
    assert!(out.contains("8192 other"), "{out}{err}");
    assert!(
        out.contains("the file ends inside record 8194"),
        "the last record cut short is said: {out}{err}"
    );
    assert!(
        big_kib < small_kib + 16 * 1024,
        "peak resident memory {big_kib} KiB for 512 MiB against {small_kib} KiB for one frame: it grows with the file\n{err}"
    );
}

#[test]
fn capture_read_refuses_a_fifo_and_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("capture.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    // A FIFO nobody writes to: opening it to read would wait forever for a writer.
    let mut p = Spawned::start(
        "rocewatch capture --read FIFO",
        std::process::Command::new(&artifacts().rocewatch).args([
            "capture",
            "--read",
            fifo.to_str().unwrap(),
        ]),
        None,
    );
    let st = p.wait_exit(std::time::Duration::from_secs(20));
    assert!(st.is_some(), "a FIFO was waited on (20 s): {}", p.log());
    assert_eq!(st.unwrap().code(), Some(2), "{}", p.log());
    assert!(
        p.log()
            .contains("capture.fifo: a FIFO (named pipe), not a capture file"),
        "{}",
        p.log()
    );
    // /dev/zero never ends: refused before a byte is read.
    let (code, _, err, _) = rocewatch_limited(&["capture", "--read", "/dev/zero"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("/dev/zero: a character device, not a capture file"),
        "{err}"
    );
    // A directory says so too.
    let o = rocewatch(&["capture", "--read", dir.path().to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("a directory, not a capture file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn capture_read_counts_udp_4791_that_is_not_roce_apart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mixed.pcap");
    let with = |mut b: Vec<u8>, rest: &[u8]| {
        b.extend_from_slice(rest);
        b
    };
    std::fs::write(
        &file,
        pcap(&[
            // RC SEND Only: BTH, 8 bytes of payload, ICRC.
            udp_4791(&with(bth(0x04, 0), &[0; 12])),
            // 0x15 is reserved in every transport (include/rdma/ib_pack.h).
            udp_4791(&with(bth(0x15, 0), &[0; 12])),
            // 0xc4: manufacturer specific, not an IBTA opcode.
            udp_4791(&with(bth(0xc4, 0), &[0; 12])),
            // Pad count 3 with one byte after the BTH: shorter than pad + ICRC.
            udp_4791(&with(bth(0x04, 3 << 4), &[0; 1])),
            // RDMA WRITE First without room for its RETH and the ICRC.
            udp_4791(&with(bth(0x06, 0), &[0; 8])),
            // Transport header version 1.
            udp_4791(&with(bth(0x04, 1), &[0; 12])),
        ]),
    )
    .unwrap();
    let o = rocewatch(&["capture", "--read", file.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(
        t.starts_with("6 frames: 1 RoCE v2 packets (") && t.contains("5 UDP 4791 not RoCE"),
        "{t}"
    );
    let o = rocewatch(
        &["capture", "--read", file.to_str().unwrap(), "--json"],
        &[],
    );
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["roce"]["packets"], 1, "{j}");
    assert_eq!(j["not_roce"], 5, "{j}");
    assert_eq!(j["not_roce_why"]["opcode not defined"], 2, "{j}");
    assert_eq!(
        j["not_roce_why"]["shorter than its headers, pad and ICRC"], 2,
        "{j}"
    );
    assert_eq!(
        j["not_roce_why"]["transport header version not 0"], 1,
        "{j}"
    );
    assert_eq!(j["by_opcode"].as_object().unwrap().len(), 1, "{j}");
}

#[test]
fn capture_read_names_the_offset_of_a_record_too_long_to_be_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("damaged.pcap");
    let mut b = pcap(&[frame(0x0a, 0x12, 7, 2, None)]);
    let at = b.len();
    // 300000 captured bytes: more than any pcap record holds (libpcap's 262144), and the
    // file has them, so only the bound can tell.
    for v in [0u32, 0, 300_000, 300_000] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend(std::iter::repeat_n(0u8, 300_000));
    std::fs::write(&file, b).unwrap();
    let o = rocewatch(&["capture", "--read", file.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!(
            "damaged.pcap: record 1 at byte {at}: captured length 300000 is more than 262144"
        )),
        "{}",
        stderr(&o)
    );
}
