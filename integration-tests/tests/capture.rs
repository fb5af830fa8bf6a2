//! `rocewatch capture --read FILE`: a pcap of RoCE v2 packets (crafted here: an RDMA WRITE
//! with a lost packet and a retransmission, an ACK, a NAK, a CNP, an ECN-CE mark), summed
//! up as text and JSON; a file that is not a pcap is refused with the reason.

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
