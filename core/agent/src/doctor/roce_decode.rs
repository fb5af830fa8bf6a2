//! RoCE v2 in a packet capture: a pcap reader (Ethernet, Linux cooked v1/v2; µs or ns
//! timestamps, either byte order) and a decoder of what RDMA puts on UDP 4791 (BTH, AETH),
//! summed up the way a fabric engineer reads a capture: packets and bytes per opcode and
//! per destination QP, CNPs, ECN-CE marks, NAKs and RNR NAKs, PSN gaps (loss) and PSNs
//! seen again (retransmission) per QP. Every length is checked: a truncated or foreign
//! packet is counted as undecoded, never a panic.

use std::collections::BTreeMap;

use serde::Serialize;

use super::check::ROCE_PORT;

/// What is wrong with a capture file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PcapError {
    #[error("not a pcap file (magic {0:#010x}; pcapng is not read: capture with tcpdump -w, or convert with editcap -F pcap)")]
    Magic(u32),
    #[error("the file ends inside its header ({0} bytes)")]
    Short(usize),
    #[error("link type {0} is not read (Ethernet, Linux cooked v1 and v2 are)")]
    LinkType(u32),
    #[error("record {index} at byte {offset}: {what}")]
    Record {
        index: usize,
        offset: usize,
        what: String,
    },
}

/// One captured frame: its bytes (as captured) and its length on the wire.
pub struct Frame<'a> {
    pub data: &'a [u8],
    pub wire_len: u32,
}

/// The frames of a pcap file, and how its frames begin.
pub fn read_pcap(bytes: &[u8]) -> Result<(u32, Vec<Frame<'_>>), PcapError> {
    if bytes.len() < 24 {
        return Err(PcapError::Short(bytes.len()));
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => return Err(PcapError::Magic(m)),
    };
    let u32_at = |b: &[u8], at: usize| {
        let a: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let link = u32_at(bytes, 20) & 0x0fff_ffff;
    if !matches!(link, 1 | 113 | 276) {
        return Err(PcapError::LinkType(link));
    }
    let mut frames = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let index = frames.len();
        if bytes.len() - at < 16 && index > 0 {
            break; // a capture cut short inside a record header
        }
        if bytes.len() - at < 16 {
            return Err(PcapError::Record {
                index,
                offset: at,
                what: format!("{} bytes left, a record header is 16", bytes.len() - at),
            });
        }
        let incl = u32_at(bytes, at + 8) as usize;
        let wire_len = u32_at(bytes, at + 12);
        let start = at + 16;
        let Some(end) = start.checked_add(incl).filter(|e| *e <= bytes.len()) else {
            if index > 0 && incl <= 262_144 {
                // The last record of a capture cut short (killed while writing): the
                // frames before it stand.
                break;
            }
            return Err(PcapError::Record {
                index,
                offset: at,
                what: format!(
                    "{incl} captured bytes, {} left in the file",
                    bytes.len() - start
                ),
            });
        };
        frames.push(Frame {
            data: &bytes[start..end],
            wire_len,
        });
        at = end;
    }
    Ok((link, frames))
}

/// One RoCE v2 packet, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
    /// IP ECN field was CE (3).
    pub ecn_ce: bool,
    /// AETH syndrome, for the opcodes that carry one.
    pub aeth: Option<u8>,
    /// Bytes of the frame on the wire.
    pub bytes: u32,
}

/// The IB opcode's name (transport and operation), as Wireshark shows it.
pub fn opcode_name(op: u8) -> String {
    let transport = match op >> 5 {
        0 => "RC",
        1 => "UC",
        2 => "RD",
        3 => "UD",
        4 => "CNP",
        5 => "XRC",
        _ => "?",
    };
    if op == 0x81 {
        return "CNP".into();
    }
    let what = match op & 0x1f {
        0x00 => "SEND First",
        0x01 => "SEND Middle",
        0x02 => "SEND Last",
        0x03 => "SEND Last with Immediate",
        0x04 => "SEND Only",
        0x05 => "SEND Only with Immediate",
        0x06 => "RDMA WRITE First",
        0x07 => "RDMA WRITE Middle",
        0x08 => "RDMA WRITE Last",
        0x09 => "RDMA WRITE Last with Immediate",
        0x0a => "RDMA WRITE Only",
        0x0b => "RDMA WRITE Only with Immediate",
        0x0c => "RDMA READ Request",
        0x0d => "RDMA READ Response First",
        0x0e => "RDMA READ Response Middle",
        0x0f => "RDMA READ Response Last",
        0x10 => "RDMA READ Response Only",
        0x11 => "Acknowledge",
        0x12 => "ATOMIC Acknowledge",
        0x13 => "CmpSwap",
        0x14 => "FetchAdd",
        0x16 => "SEND Last with Invalidate",
        0x17 => "SEND Only with Invalidate",
        _ => return format!("{transport} opcode {op:#04x}"),
    };
    format!("{transport} {what}")
}

/// Opcodes whose header carries an AETH right after the BTH (Acknowledge, ATOMIC
/// Acknowledge, READ Response First/Last/Only).
fn has_aeth(op: u8) -> bool {
    matches!(op & 0x1f, 0x0d | 0x0f | 0x10 | 0x11 | 0x12) && op >> 5 != 3
}

/// Opcodes that take one PSN each, in order, on their QP (SEND, WRITE, READ responses):
/// a gap is loss, a PSN seen again a retransmission. READ requests take as many PSNs as
/// responses they ask for, and acknowledgements repeat PSNs: not followed.
fn sequential(op: u8) -> bool {
    op >> 5 <= 1 && matches!(op & 0x1f, 0x00..=0x0b | 0x0d..=0x10 | 0x16 | 0x17)
}

/// Decode one frame (`link`: its pcap link type); `None` when it is not RoCE v2.
pub fn decode(link: u32, f: &Frame<'_>) -> Option<Packet> {
    let d = f.data;
    let (mut ethertype, mut at) = match link {
        1 => (u16::from_be_bytes([*d.get(12)?, *d.get(13)?]), 14),
        113 => (u16::from_be_bytes([*d.get(14)?, *d.get(15)?]), 16),
        276 => (u16::from_be_bytes([*d.first()?, *d.get(1)?]), 20),
        _ => return None,
    };
    // 802.1Q / 802.1ad tags.
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = u16::from_be_bytes([*d.get(at + 2)?, *d.get(at + 3)?]);
        at += 4;
    }
    let (ecn, udp_at) = match ethertype {
        0x0800 => {
            let vihl = *d.get(at)?;
            let ihl = usize::from(vihl & 0x0f) * 4;
            if vihl >> 4 != 4 || ihl < 20 || *d.get(at + 9)? != 17 {
                return None;
            }
            (*d.get(at + 1)? & 3, at + ihl)
        }
        0x86dd => {
            let tc = (u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]) >> 4) as u8;
            if *d.get(at + 6)? != 17 {
                return None;
            }
            (tc & 3, at + 40)
        }
        _ => return None,
    };
    let dport = u16::from_be_bytes([*d.get(udp_at + 2)?, *d.get(udp_at + 3)?]);
    if dport != ROCE_PORT {
        return None;
    }
    let bth = udp_at + 8;
    let b = d.get(bth..bth + 12)?;
    let opcode = b[0];
    let dest_qp = u32::from_be_bytes([0, b[5], b[6], b[7]]);
    let psn = u32::from_be_bytes([0, b[9], b[10], b[11]]);
    let aeth = if has_aeth(opcode) {
        Some(*d.get(bth + 12)?)
    } else {
        None
    };
    Some(Packet {
        opcode,
        dest_qp,
        psn,
        ecn_ce: ecn == 3,
        aeth,
        bytes: f.wire_len,
    })
}

/// Packets and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    pub packets: u64,
    pub bytes: u64,
}

impl Count {
    fn add(&mut self, bytes: u32) {
        self.packets += 1;
        self.bytes += u64::from(bytes);
    }
}

/// One destination QP.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QpSummary {
    #[serde(flatten)]
    pub count: Count,
    /// PSNs skipped (packets lost, or not captured).
    pub psn_gaps: u64,
    /// Packets whose PSN came again (retransmissions).
    pub retransmitted: u64,
    #[serde(skip)]
    next_psn: Option<u32>,
}

/// What a capture holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub frames: u64,
    /// RoCE v2 packets.
    pub roce: Count,
    /// Frames that were not RoCE v2 (or too short to tell).
    pub other: u64,
    pub by_opcode: BTreeMap<String, Count>,
    pub by_dest_qp: BTreeMap<u32, QpSummary>,
    pub cnp: u64,
    pub ecn_ce: u64,
    pub acks: u64,
    /// NAKs by code (`PSN sequence error`, `remote access error`...).
    pub naks: BTreeMap<String, u64>,
    pub rnr_naks: u64,
}

fn nak_name(code: u8) -> String {
    match code {
        0 => "PSN sequence error".into(),
        1 => "invalid request".into(),
        2 => "remote access error".into(),
        3 => "remote operational error".into(),
        4 => "invalid RD request".into(),
        c => format!("code {c}"),
    }
}

const PSN_MASK: u32 = 0x00ff_ffff;

impl Summary {
    pub fn add(&mut self, link: u32, f: &Frame<'_>) {
        self.frames += 1;
        let Some(p) = decode(link, f) else {
            self.other += 1;
            return;
        };
        self.roce.add(p.bytes);
        self.by_opcode
            .entry(opcode_name(p.opcode))
            .or_default()
            .add(p.bytes);
        if p.ecn_ce {
            self.ecn_ce += 1;
        }
        if p.opcode == 0x81 {
            self.cnp += 1;
        }
        if let Some(syndrome) = p.aeth {
            match syndrome >> 5 {
                0 => self.acks += 1,
                1 => self.rnr_naks += 1,
                3 => *self.naks.entry(nak_name(syndrome & 0x1f)).or_default() += 1,
                _ => {}
            }
        }
        let qp = self.by_dest_qp.entry(p.dest_qp).or_default();
        qp.count.add(p.bytes);
        if matches!(p.opcode & 0x1f, 0x0c | 0x13 | 0x14) && p.opcode >> 5 <= 1 {
            // A READ request takes as many PSNs as the responses it asks for, an atomic
            // one: the requester's next PSN is not known from here.
            qp.next_psn = None;
        } else if sequential(p.opcode) {
            if let Some(next) = qp.next_psn {
                // Distance forward in the 24-bit PSN space: ahead of what was expected
                // is a gap; behind it (the upper half) is a PSN seen again.
                let ahead = p.psn.wrapping_sub(next) & PSN_MASK;
                if ahead == 0 {
                } else if ahead < (1 << 23) {
                    qp.psn_gaps += u64::from(ahead);
                } else {
                    qp.retransmitted += 1;
                    return;
                }
            }
            qp.next_psn = Some(p.psn.wrapping_add(1) & PSN_MASK);
        }
    }

    /// The capture as a short table.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} frames: {} RoCE v2 packets ({} bytes), {} other",
            self.frames, self.roce.packets, self.roce.bytes, self.other
        );
        let _ = writeln!(
            s,
            "CNPs {}   ECN-CE marked {}   ACKs {}   NAKs {}   RNR NAKs {}",
            self.cnp,
            self.ecn_ce,
            self.acks,
            self.naks.values().sum::<u64>(),
            self.rnr_naks
        );
        for (k, n) in &self.naks {
            let _ = writeln!(s, "  NAK {k}: {n}");
        }
        let _ = writeln!(s, "\n{:<40} {:>10} {:>14}", "opcode", "packets", "bytes");
        for (op, c) in &self.by_opcode {
            let _ = writeln!(s, "{op:<40} {:>10} {:>14}", c.packets, c.bytes);
        }
        let _ = writeln!(
            s,
            "\n{:<10} {:>10} {:>14} {:>9} {:>14}",
            "dest QP", "packets", "bytes", "PSN gaps", "retransmitted"
        );
        for (qp, q) in &self.by_dest_qp {
            let _ = writeln!(
                s,
                "{:<10} {:>10} {:>14} {:>9} {:>14}",
                format!("{qp:#08x}"),
                q.count.packets,
                q.count.bytes,
                q.psn_gaps,
                q.retransmitted
            );
        }
        s
    }
}

/// Sum up a pcap file.
pub fn summarize(bytes: &[u8]) -> Result<Summary, PcapError> {
    let (link, frames) = read_pcap(bytes)?;
    let mut s = Summary::default();
    for f in &frames {
        s.add(link, f);
    }
    Ok(s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A RoCE v2 frame over IPv4 (`ecn`: the IP ECN bits), BTH with `opcode`, `qp`, `psn`,
    /// then `aeth` when given and a payload.
    pub(crate) fn frame(
        opcode: u8,
        qp: u32,
        psn: u32,
        ecn: u8,
        aeth: Option<u8>,
        vlan: bool,
    ) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x60, 0x64]); // priority 3, VLAN 100
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let payload = 64;
        let udp_len = 8 + 12 + aeth.map_or(0, |_| 4) + payload;
        let ip_len = 20 + udp_len;
        f.extend_from_slice(&[0x45, (26 << 2) | ecn]);
        f.extend_from_slice(&(ip_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[0xc0, 0x00]); // source port
        f.extend_from_slice(&ROCE_PORT.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.push(opcode);
        f.extend_from_slice(&[0, 0xff, 0xff]);
        f.extend_from_slice(&qp.to_be_bytes()); // byte 0 reserved: qp < 2^24
        f.extend_from_slice(&psn.to_be_bytes());
        if let Some(a) = aeth {
            f.extend_from_slice(&[a, 0, 0, 1]);
        }
        f.extend(std::iter::repeat_n(0xab, payload));
        f
    }

    /// A pcap file (little-endian, µs, Ethernet) of these frames.
    pub(crate) fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        b.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&65535u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        for (i, f) in frames.iter().enumerate() {
            b.extend_from_slice(&(i as u32).to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&(f.len() as u32).to_le_bytes());
            b.extend_from_slice(&(f.len() as u32).to_le_bytes());
            b.extend_from_slice(f);
        }
        b
    }

    #[test]
    fn writes_acks_cnps_ecn_naks_and_psn_gaps() {
        let qp = 0x11;
        let frames = vec![
            frame(0x06, qp, 100, 2, None, false),         // WRITE First
            frame(0x07, qp, 101, 2, None, true),          // Middle, VLAN tagged
            frame(0x07, qp, 102, 3, None, false),         // Middle, ECN-CE
            frame(0x07, qp, 105, 2, None, false),         // 103, 104 lost
            frame(0x07, qp, 103, 2, None, false),         // retransmitted
            frame(0x08, qp, 106, 2, None, false),         // Last
            frame(0x11, 0x22, 106, 2, Some(0x00), false), // ACK
            frame(0x11, 0x22, 103, 2, Some(0x60), false), // NAK: PSN sequence error
            frame(0x11, 0x22, 103, 2, Some(0x20 | 0x0e), false), // RNR NAK
            frame(0x81, qp, 0, 2, None, false),           // CNP
            vec![0u8; 30],                                // not IP
        ];
        let s = summarize(&pcap(&frames)).unwrap();
        assert_eq!(s.frames, 11);
        assert_eq!(s.roce.packets, 10);
        assert_eq!(s.other, 1);
        assert_eq!(s.by_opcode["RC RDMA WRITE Middle"].packets, 4);
        assert_eq!(s.by_opcode["RC RDMA WRITE First"].packets, 1);
        assert_eq!(s.by_opcode["CNP"].packets, 1);
        assert_eq!(s.cnp, 1);
        assert_eq!(s.ecn_ce, 1);
        assert_eq!(s.acks, 1);
        assert_eq!(s.naks["PSN sequence error"], 1);
        assert_eq!(s.rnr_naks, 1);
        let q = &s.by_dest_qp[&qp];
        assert_eq!((q.psn_gaps, q.retransmitted), (2, 1), "{q:?}");
        assert_eq!(s.by_dest_qp[&0x22].count.packets, 3);
        let t = s.text();
        assert!(t.contains("CNPs 1   ECN-CE marked 1"), "{t}");
        assert!(t.contains("NAK PSN sequence error: 1"), "{t}");
    }

    #[test]
    fn a_capture_cut_short_keeps_its_whole_frames_and_a_read_request_resets_the_psn() {
        let mut file = pcap(&[
            frame(0x04, 9, 1, 0, None, false),
            frame(0x0c, 9, 2, 0, None, false), // READ request: 2.. taken by its responses
            frame(0x04, 9, 7, 0, None, false), // no gap counted
            frame(0x04, 9, 8, 0, None, false),
        ]);
        file.truncate(file.len() - 20);
        let s = summarize(&file).unwrap();
        assert_eq!(s.roce.packets, 3);
        assert_eq!(s.by_dest_qp[&9].psn_gaps, 0);
    }

    #[test]
    fn psn_wraps_at_24_bits() {
        let frames: Vec<_> = [0xff_fffe, 0xff_ffff, 0, 1]
            .iter()
            .map(|p| frame(0x04, 7, *p, 0, None, false))
            .collect();
        let s = summarize(&pcap(&frames)).unwrap();
        assert_eq!(
            (s.by_dest_qp[&7].psn_gaps, s.by_dest_qp[&7].retransmitted),
            (0, 0)
        );
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        assert_eq!(summarize(b"short").unwrap_err(), PcapError::Short(5));
        let ng = [0x0a, 0x0d, 0x0d, 0x0a].repeat(8);
        assert!(summarize(&ng)
            .unwrap_err()
            .to_string()
            .contains("pcapng is not read"));
        let mut truncated = pcap(&[frame(0x04, 1, 1, 0, None, false)]);
        truncated.truncate(truncated.len() - 10);
        let e = summarize(&truncated).unwrap_err().to_string();
        assert!(e.starts_with("record 0 at byte 24:"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = summarize(&b);
            let mut file = pcap(&[]);
            file.extend_from_slice(&(b.len() as u32).to_le_bytes().repeat(4));
            file.extend_from_slice(&b);
            let _ = summarize(&file);
            for link in [1, 113, 276] {
                let _ = decode(link, &Frame { data: &b, wire_len: 0 });
            }
        }
    }
}
