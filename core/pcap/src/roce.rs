//! RoCE v2 in a packet capture: a decoder of what RDMA puts on UDP 4791 (BTH, AETH) over
//! the frames [`crate::reader`] reads, summed up the way a fabric engineer reads a capture:
//! packets and bytes per opcode and per destination QP, CNPs, ECN-CE marks, NAKs and RNR
//! NAKs, PSN gaps (loss) and PSNs seen again (retransmission) per QP.
//!
//! Only a payload that decodes as RoCE v2 counts as RoCE: an opcode the IBTA defines, a
//! transport header version of 0, and a UDP payload long enough for the opcode's headers,
//! the BTH's pad count and the 4-byte ICRC (the checks soft-RoCE's receive path makes
//! before it trusts a packet). Anything else to UDP 4791 is counted apart, with why. Every
//! length is checked: a truncated or foreign packet is never a panic. Memory stays bounded
//! whatever the file: one record at a time, and at most [`MAX_QPS`] destination QPs
//! followed one by one (the rest summed).

use std::collections::BTreeMap;
use std::io::Read;

use serde::Serialize;

use crate::reader::{Frame, PcapError, PcapReader, Truncated};

/// The RoCE v2 UDP destination port (IANA's assignment; `ROCE_V2_UDP_DPORT` in the
/// kernel's `include/rdma/ib_verbs.h`).
pub const ROCE_PORT: u16 = 4791;

/// One RoCE v2 packet, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
    /// IP ECN field was CE (3).
    pub ecn_ce: bool,
    /// The IP header's DSCP (the connection's type of service, without ECN).
    pub dscp: u8,
    /// AETH syndrome, for the opcodes that carry one.
    pub aeth: Option<u8>,
    /// Bytes of the frame on the wire.
    pub bytes: u32,
}

/// Why a UDP 4791 payload is not RoCE v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NotRoce {
    /// The capture kept fewer bytes than the BTH (and AETH) take: its snap length.
    NotCaptured,
    /// The UDP length is shorter than the UDP header.
    UdpLength,
    /// Not an opcode of the IBTA's table ([`header_len`]).
    Opcode,
    /// The BTH's transport header version is not 0.
    Version,
    /// The UDP payload is shorter than the opcode's headers, the pad and the ICRC.
    Length,
}

impl NotRoce {
    pub fn why(self) -> &'static str {
        match self {
            NotRoce::NotCaptured => "headers not captured (snap length)",
            NotRoce::UdpLength => "UDP length shorter than its header",
            NotRoce::Opcode => "opcode not defined",
            NotRoce::Version => "transport header version not 0",
            NotRoce::Length => "shorter than its headers, pad and ICRC",
        }
    }
}

/// What a frame is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    Roce(Packet),
    /// To UDP port 4791, and not RoCE v2.
    NotRoce(NotRoce),
    /// Not to UDP 4791 (or not IP, or too short to tell).
    Other,
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
    if op == CNP {
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
        0x15 if op >> 5 == 2 => "RESYNC",
        0x16 => "SEND Last with Invalidate",
        0x17 => "SEND Only with Invalidate",
        0x1c => "FLUSH",
        0x1d => "ATOMIC WRITE",
        _ => return format!("{transport} opcode {op:#04x}"),
    };
    format!("{transport} {what}")
}

/// The RoCE v2 CNP's opcode (IBTA Annex A17; scapy's `contrib/roce.py` `CNP_OPCODE`):
/// a BTH and 16 reserved bytes.
const CNP: u8 = 0x81;

// Header lengths, in bytes (include/rdma/ib_pack.h, drivers/infiniband/sw/rxe/rxe_hdr.h).
const BTH: usize = 12;
const RETH: usize = 16;
const AETH: usize = 4;
const IMMDT: usize = 4;
const IETH: usize = 4;
const DETH: usize = 8;
const RDETH: usize = 4;
const ATOMICETH: usize = 28;
const ATOMICACKETH: usize = 8;
const XRCETH: usize = 4;
const FETH: usize = 4;
const ICRC: usize = 4;

/// The extended headers an operation (the low 5 bits of the opcode) carries after the
/// BTH on a reliable connection, as soft-RoCE's opcode table lays them out
/// (drivers/infiniband/sw/rxe/rxe_opcode.c: `.length` minus the BTH); `None` for an
/// operation the IBTA does not define.
fn operation_headers(op: u8) -> Option<usize> {
    Some(match op {
        0x00 | 0x01 | 0x02 | 0x04 => 0, // SEND First, Middle, Last, Only
        0x03 | 0x05 => IMMDT,           // SEND ... with Immediate
        0x06 | 0x0a => RETH,            // RDMA WRITE First, Only
        0x07 | 0x08 => 0,               // RDMA WRITE Middle, Last
        0x09 => IMMDT,                  // RDMA WRITE Last with Immediate
        0x0b => RETH + IMMDT,           // RDMA WRITE Only with Immediate
        0x0c => RETH,                   // RDMA READ Request
        0x0d | 0x0f | 0x10 => AETH,     // READ Response First, Last, Only
        0x0e => 0,                      // READ Response Middle
        0x11 => AETH,                   // Acknowledge
        0x12 => AETH + ATOMICACKETH,    // ATOMIC Acknowledge
        0x13 | 0x14 => ATOMICETH,       // CmpSwap, FetchAdd
        0x16 | 0x17 => IETH,            // SEND ... with Invalidate
        0x1c => FETH + RETH,            // FLUSH
        0x1d => RETH,                   // ATOMIC WRITE
        _ => return None,
    })
}

/// Whether an operation is a request (the responder's side: READ responses and
/// acknowledgements are not).
fn is_request(op: u8) -> bool {
    !matches!(op, 0x0d..=0x12)
}

/// The bytes of a packet's headers (BTH and extended headers) for `opcode`, when the IBTA
/// defines it; `None` otherwise (reserved, or manufacturer specific: 0xc0 and up).
///
/// The opcodes: include/rdma/ib_pack.h (`IB_OPCODE_RC_*` .. `IB_OPCODE_UD_*`: RC sends,
/// writes, reads, acknowledgements, atomics, SEND with Invalidate, FLUSH and ATOMIC WRITE;
/// UC sends and writes; RD all but SEND with Invalidate and ATOMIC WRITE; UD SEND Only
/// [with Immediate]); XRC (0xa0 + the RC operations but FLUSH and ATOMIC WRITE, an XRCETH
/// after the BTH of requests) as Wireshark's packet-infiniband and the rxe XRC series on
/// linux-rdma lay it out; the RoCE v2 CNP. RD packets carry an RDETH, and RD requests a
/// DETH, before the operation's headers; RD RESYNC and RD FLUSH are counted with those
/// two alone (no implementation sends them; a lower bound keeps them RoCE).
pub fn header_len(opcode: u8) -> Option<usize> {
    let op = opcode & 0x1f;
    match opcode >> 5 {
        // RC
        0 if !matches!(op, 0x15) => Some(BTH + operation_headers(op)?),
        // UC: SEND and RDMA WRITE.
        1 if op <= 0x0b => Some(BTH + operation_headers(op)?),
        // RD
        2 if op == 0x15 || op == 0x1c => Some(BTH + RDETH + DETH),
        2 if op <= 0x14 => {
            let deth = if is_request(op) { DETH } else { 0 };
            Some(BTH + RDETH + deth + operation_headers(op)?)
        }
        // UD: SEND Only [with Immediate].
        3 if op == 0x04 || op == 0x05 => Some(BTH + DETH + operation_headers(op)?),
        4 if opcode == CNP => Some(BTH + 16),
        // XRC
        5 if op <= 0x14 || op == 0x16 || op == 0x17 => {
            let xrceth = if is_request(op) { XRCETH } else { 0 };
            Some(BTH + xrceth + operation_headers(op)?)
        }
        _ => None,
    }
}

/// Where the AETH is, counted from the BTH, for the opcodes that carry one (Acknowledge,
/// ATOMIC Acknowledge, READ Response First/Last/Only): right after the BTH, after the
/// RDETH on RD.
fn aeth_at(opcode: u8) -> Option<usize> {
    let op = opcode & 0x1f;
    if !matches!(op, 0x0d | 0x0f | 0x10 | 0x11 | 0x12) {
        return None;
    }
    match opcode >> 5 {
        0 | 5 => Some(BTH),
        2 => Some(BTH + RDETH),
        _ => None,
    }
}

/// Opcodes that take one PSN each, in order, on their QP (SEND, WRITE, READ responses):
/// a gap is loss, a PSN seen again a retransmission. READ requests take as many PSNs as
/// responses they ask for, and acknowledgements repeat PSNs: not followed.
fn sequential(op: u8) -> bool {
    op >> 5 <= 1 && matches!(op & 0x1f, 0x00..=0x0b | 0x0d..=0x10 | 0x16 | 0x17)
}

/// Decode one frame (`link`: its pcap link type).
pub fn decode(link: u32, f: &Frame<'_>) -> Decoded {
    decode_opt(link, f).unwrap_or(Decoded::Other)
}

/// [`decode`], `None` where the frame is too short to tell.
fn decode_opt(link: u32, f: &Frame<'_>) -> Option<Decoded> {
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
    // The IP type of service (IPv4) or traffic class (IPv6): DSCP and ECN.
    let (tos, udp_at) = match ethertype {
        0x0800 => {
            let vihl = *d.get(at)?;
            let ihl = usize::from(vihl & 0x0f) * 4;
            if vihl >> 4 != 4 || ihl < 20 || *d.get(at + 9)? != 17 {
                return None;
            }
            // A fragment after the first carries no UDP header.
            if u16::from_be_bytes([*d.get(at + 6)?, *d.get(at + 7)?]) & 0x1fff != 0 {
                return None;
            }
            (*d.get(at + 1)?, at + ihl)
        }
        0x86dd => {
            let tc = (u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]) >> 4) as u8;
            if *d.get(at + 6)? != 17 {
                return None;
            }
            (tc, at + 40)
        }
        _ => return None,
    };
    let dport = u16::from_be_bytes([*d.get(udp_at + 2)?, *d.get(udp_at + 3)?]);
    if dport != ROCE_PORT {
        return Some(Decoded::Other);
    }
    Some(Decoded::from(roce(d, udp_at, tos, f.wire_len)))
}

impl From<Result<Packet, NotRoce>> for Decoded {
    fn from(r: Result<Packet, NotRoce>) -> Decoded {
        match r {
            Ok(p) => Decoded::Roce(p),
            Err(n) => Decoded::NotRoce(n),
        }
    }
}

/// The RoCE v2 packet in the UDP datagram at `udp_at` of `d`. Its length is the UDP
/// length's (the capture may hold less: a snap length); the checks are soft-RoCE's before
/// it reads a packet (drivers/infiniband/sw/rxe/rxe_recv.c: an opcode with an entry in
/// its table, `bth_tver() == BTH_TVER` (0), and `paylen >= header_size + bth_pad +
/// RXE_ICRC_SIZE`, commit 7244491dab34 "Validate pad and ICRC before payload_size()").
fn roce(d: &[u8], udp_at: usize, tos: u8, wire_len: u32) -> Result<Packet, NotRoce> {
    let udp_len = d
        .get(udp_at + 4..udp_at + 6)
        .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        .ok_or(NotRoce::NotCaptured)?;
    let paylen = udp_len.checked_sub(8).ok_or(NotRoce::UdpLength)?;
    let bth = udp_at + 8;
    let b = d.get(bth..bth + BTH).ok_or(NotRoce::NotCaptured)?;
    let opcode = b[0];
    let headers = header_len(opcode).ok_or(NotRoce::Opcode)?;
    if b[1] & 0x0f != 0 {
        return Err(NotRoce::Version);
    }
    let pad = usize::from((b[1] >> 4) & 3);
    if paylen < headers + pad + ICRC {
        return Err(NotRoce::Length);
    }
    let aeth = match aeth_at(opcode) {
        Some(at) => Some(*d.get(bth + at).ok_or(NotRoce::NotCaptured)?),
        None => None,
    };
    Ok(Packet {
        opcode,
        dest_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
        psn: u32::from_be_bytes([0, b[9], b[10], b[11]]),
        ecn_ce: tos & 3 == 3,
        dscp: tos >> 2,
        aeth,
        bytes: wire_len,
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

/// At most this many destination QPs are followed one by one (a BTreeMap entry each: a
/// few MiB at most); packets to others are summed in [`Summary::qps_not_followed`]. A real
/// capture holds far fewer; a crafted one could name all 2^24.
pub const MAX_QPS: usize = 65_536;

/// What a capture holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub frames: u64,
    /// RoCE v2 packets.
    pub roce: Count,
    /// Frames to UDP 4791 whose payload is not RoCE v2.
    pub not_roce: u64,
    /// Why, for each of them ([`NotRoce::why`]).
    pub not_roce_why: BTreeMap<&'static str, u64>,
    /// Frames not to UDP 4791 (other traffic, or too short to tell).
    pub other: u64,
    pub by_opcode: BTreeMap<String, Count>,
    pub by_dest_qp: BTreeMap<u32, QpSummary>,
    /// RoCE packets to destination QPs beyond the first [`MAX_QPS`], summed.
    pub qps_not_followed: Count,
    pub cnp: u64,
    pub ecn_ce: u64,
    /// RoCE v2 packets by the DSCP of their IP header (what the connection's type of
    /// service put on the wire; a switch classifies by it).
    pub by_dscp: BTreeMap<u8, u64>,
    pub acks: u64,
    /// NAKs by code (`PSN sequence error`, `remote access error`...).
    pub naks: BTreeMap<String, u64>,
    pub rnr_naks: u64,
    /// Where the file ends inside its last record, when it does (a capture cut short).
    pub truncated: Option<Truncated>,
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
        let p = match decode(link, f) {
            Decoded::Roce(p) => p,
            Decoded::NotRoce(why) => {
                self.not_roce += 1;
                *self.not_roce_why.entry(why.why()).or_default() += 1;
                return;
            }
            Decoded::Other => {
                self.other += 1;
                return;
            }
        };
        self.roce.add(p.bytes);
        self.by_opcode
            .entry(opcode_name(p.opcode))
            .or_default()
            .add(p.bytes);
        if p.ecn_ce {
            self.ecn_ce += 1;
        }
        *self.by_dscp.entry(p.dscp).or_default() += 1;
        if p.opcode == CNP {
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
        let full = self.by_dest_qp.len() >= MAX_QPS;
        let qp = match self.by_dest_qp.get_mut(&p.dest_qp) {
            Some(qp) => qp,
            None if full => {
                self.qps_not_followed.add(p.bytes);
                return;
            }
            None => self.by_dest_qp.entry(p.dest_qp).or_default(),
        };
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
            "{} frames: {} RoCE v2 packets ({} bytes), {} UDP 4791 not RoCE, {} other",
            self.frames, self.roce.packets, self.roce.bytes, self.not_roce, self.other
        );
        for (why, n) in &self.not_roce_why {
            let _ = writeln!(s, "  UDP 4791 not RoCE, {why}: {n}");
        }
        if let Some(t) = &self.truncated {
            let _ = writeln!(s, "{t}");
        }
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
        if !self.by_dscp.is_empty() {
            let by: Vec<String> = self
                .by_dscp
                .iter()
                .map(|(d, n)| format!("DSCP {d} (ToS {}): {n}", d << 2))
                .collect();
            let _ = writeln!(s, "{}", by.join("   "));
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
        if self.qps_not_followed.packets > 0 {
            let _ = writeln!(
                s,
                "{} packets ({} bytes) to QPs beyond the first {MAX_QPS}, not followed one by one",
                self.qps_not_followed.packets, self.qps_not_followed.bytes
            );
        }
        s
    }
}

/// Sum up a pcap file read from `r`, one record at a time.
pub fn summarize<R: Read>(r: R) -> Result<Summary, PcapError> {
    let mut reader = PcapReader::new(r)?;
    let link = reader.link();
    let mut s = Summary::default();
    while let Some(f) = reader.next_frame()? {
        s.add(link, &f);
    }
    s.truncated = reader.truncated();
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
        let s = summarize(&pcap(&frames)[..]).unwrap();
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
        // Every frame of the test is DSCP 26 (ToS 104 with its ECN bits).
        assert_eq!(s.by_dscp, [(26, 10)].into());
        assert!(t.contains("DSCP 26 (ToS 104): 10"), "{t}");
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
        let s = summarize(&file[..]).unwrap();
        assert_eq!(s.roce.packets, 3);
        assert_eq!(s.truncated.map(|t| t.record), Some(3), "{s:?}");
        assert!(
            s.text().contains("the file ends inside record 3"),
            "{}",
            s.text()
        );
        assert_eq!(s.by_dest_qp[&9].psn_gaps, 0);
    }

    #[test]
    fn psn_wraps_at_24_bits() {
        let frames: Vec<_> = [0xff_fffe, 0xff_ffff, 0, 1]
            .iter()
            .map(|p| frame(0x04, 7, *p, 0, None, false))
            .collect();
        let s = summarize(&pcap(&frames)[..]).unwrap();
        assert_eq!(
            (s.by_dest_qp[&7].psn_gaps, s.by_dest_qp[&7].retransmitted),
            (0, 0)
        );
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        assert_eq!(summarize(&b"short"[..]).unwrap_err(), PcapError::Short(5));
        let ng = [0x0a, 0x0d, 0x0d, 0x0a].repeat(8);
        assert!(summarize(&ng[..])
            .unwrap_err()
            .to_string()
            .contains("pcapng is not read"));
        let mut truncated = pcap(&[frame(0x04, 1, 1, 0, None, false)]);
        truncated.truncate(truncated.len() - 10);
        let e = summarize(&truncated[..]).unwrap_err().to_string();
        assert!(e.starts_with("record 0 at byte 24:"), "{e}");
    }

    /// An Ethernet (or, `v6`, IPv6) frame to UDP 4791 whose UDP payload is `payload`, the
    /// UDP length saying so; ECN CE.
    fn udp(payload: &[u8], v6: bool) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        let udp_len = (8 + payload.len()) as u16;
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd]);
            // Version 6, traffic class 0x6b (DSCP 26, ECN 3).
            f.extend_from_slice(&[0x66, 0xb0, 0, 0]);
            f.extend_from_slice(&udp_len.to_be_bytes());
            f.extend_from_slice(&[17, 64]);
            f.extend_from_slice(&[0xfe; 32]);
        } else {
            f.extend_from_slice(&[0x08, 0x00, 0x45, (26 << 2) | 3]);
            f.extend_from_slice(&(20 + udp_len).to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        }
        f.extend_from_slice(&[0xc0, 0x00]);
        f.extend_from_slice(&ROCE_PORT.to_be_bytes());
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    /// A BTH (`flags`: SE, M, pad count, TVer) to QP 0x33, PSN 5, then `rest` bytes.
    fn bth(opcode: u8, flags: u8, rest: &[u8]) -> Vec<u8> {
        let mut b = vec![opcode, flags, 0xff, 0xff, 0, 0, 0, 0x33, 0, 0, 0, 5];
        b.extend_from_slice(rest);
        b
    }

    fn decoded(link: u32, data: &[u8]) -> Decoded {
        decode(
            link,
            &Frame {
                data,
                wire_len: data.len() as u32,
            },
        )
    }

    #[test]
    fn the_opcodes_the_ibta_defines_and_their_headers() {
        // 25 RC (include/rdma/ib_pack.h, FLUSH and ATOMIC WRITE included), 12 UC, 21 RD
        // with RESYNC and FLUSH 23, 2 UD, the CNP, 23 XRC.
        let defined: Vec<u8> = (0..=255u8).filter(|o| header_len(*o).is_some()).collect();
        assert_eq!(defined.len(), 25 + 12 + 23 + 2 + 1 + 23, "{defined:x?}");
        for (op, len) in [
            (0x04, Some(12)), // RC SEND Only
            (0x06, Some(28)), // RC RDMA WRITE First: RETH
            (0x0b, Some(32)), // RC RDMA WRITE Only with Immediate: RETH, ImmDt
            (0x11, Some(16)), // RC Acknowledge: AETH
            (0x12, Some(24)), // RC ATOMIC Acknowledge: AETH, AtomicAckETH
            (0x13, Some(40)), // RC CmpSwap: AtomicETH
            (0x15, None),     // reserved
            (0x17, Some(16)), // RC SEND Only with Invalidate: IETH
            (0x1c, Some(32)), // RC FLUSH: FETH, RETH
            (0x1d, Some(28)), // RC ATOMIC WRITE: RETH
            (0x1e, None),
            (0x2a, Some(28)), // UC RDMA WRITE Only
            (0x2c, None),     // UC has no READ
            (0x3c, None),     // nor FLUSH
            (0x44, Some(24)), // RD SEND Only: RDETH, DETH
            (0x4d, Some(20)), // RD READ Response First: RDETH, AETH
            (0x51, Some(20)), // RD Acknowledge
            (0x56, None),     // RD has no SEND with Invalidate
            (0x64, Some(20)), // UD SEND Only: DETH
            (0x65, Some(24)), // UD SEND Only with Immediate
            (0x60, None),     // UD sends only whole messages
            (0x80, None),
            (0x81, Some(28)), // CNP: 16 reserved bytes
            (0xa0, Some(16)), // XRC SEND First: XRCETH
            (0xad, Some(16)), // XRC READ Response First: AETH, no XRCETH
            (0xb3, Some(44)), // XRC CmpSwap: XRCETH, AtomicETH
            (0xbc, None),     // no XRC FLUSH
            (0xc0, None),     // manufacturer specific
            (0xff, None),
        ] {
            assert_eq!(header_len(op), len, "{op:#04x}");
        }
    }

    #[test]
    fn only_payloads_that_decode_as_roce_v2_count() {
        let roce = |d: &[u8]| matches!(decoded(1, d), Decoded::Roce(_));
        // RC SEND Only: BTH, then the ICRC and nothing else: the least a packet is.
        assert!(roce(&udp(&bth(0x04, 0, &[0; 4]), false)));
        assert_eq!(
            decoded(1, &udp(&bth(0x04, 0, &[0; 3]), false)),
            Decoded::NotRoce(NotRoce::Length),
            "no room for the ICRC"
        );
        // Pad count 3: 3 pad bytes and the ICRC after the BTH at least.
        assert!(roce(&udp(&bth(0x04, 3 << 4, &[0; 7]), false)));
        assert_eq!(
            decoded(1, &udp(&bth(0x04, 3 << 4, &[0; 6]), false)),
            Decoded::NotRoce(NotRoce::Length)
        );
        // An RDMA WRITE First needs its RETH too.
        assert_eq!(
            decoded(1, &udp(&bth(0x06, 0, &[0; 19]), false)),
            Decoded::NotRoce(NotRoce::Length)
        );
        assert!(roce(&udp(&bth(0x06, 0, &[0; 20]), false)));
        for op in [0x15, 0x2c, 0x80, 0xc0, 0xe5] {
            assert_eq!(
                decoded(1, &udp(&bth(op, 0, &[0; 64]), false)),
                Decoded::NotRoce(NotRoce::Opcode),
                "{op:#x}"
            );
        }
        assert_eq!(
            decoded(1, &udp(&bth(0x04, 1, &[0; 64]), false)),
            Decoded::NotRoce(NotRoce::Version)
        );
        // The UDP length, not what the capture kept, is the packet's: a snap length of
        // 64 keeps the BTH and decides nothing else.
        let mut long = udp(&bth(0x0a, 0, &[0; 1000]), false);
        long.truncate(64);
        assert!(roce(&long));
        let mut cut = udp(&bth(0x0a, 0, &[0; 1000]), false);
        cut.truncate(14 + 20 + 8 + 6);
        assert_eq!(decoded(1, &cut), Decoded::NotRoce(NotRoce::NotCaptured));
        let mut bad_len = udp(&bth(0x04, 0, &[0; 4]), false);
        bad_len[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&4u16.to_be_bytes());
        assert_eq!(decoded(1, &bad_len), Decoded::NotRoce(NotRoce::UdpLength));
        // Another port, and a later IPv4 fragment (no UDP header in it), are other traffic.
        let mut other = udp(&bth(0x04, 0, &[0; 4]), false);
        other[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&4790u16.to_be_bytes());
        assert_eq!(decoded(1, &other), Decoded::Other);
        let mut fragment = udp(&bth(0x04, 0, &[0; 4]), false);
        fragment[14 + 6..14 + 8].copy_from_slice(&0x0010u16.to_be_bytes());
        assert_eq!(decoded(1, &fragment), Decoded::Other);
    }

    #[test]
    fn ipv6_cooked_captures_and_the_rd_aeth() {
        let Decoded::Roce(p) = decoded(1, &udp(&bth(0x0a, 0, &[0; 20]), true)) else {
            panic!("RoCE v2 over IPv6")
        };
        assert_eq!(
            (p.opcode, p.dest_qp, p.psn, p.ecn_ce),
            (0x0a, 0x33, 5, true)
        );
        // Linux cooked v1: a 16-byte header, the protocol at 14; v2: 20 bytes, at 0.
        let eth = udp(&bth(0x04, 0, &[0; 4]), false);
        let mut v1 = vec![0u8; 14];
        v1.extend_from_slice(&[0x08, 0x00]);
        v1.extend_from_slice(&eth[14..]);
        assert!(matches!(decoded(113, &v1), Decoded::Roce(_)));
        let mut v2 = vec![0x08, 0x00];
        v2.extend_from_slice(&[0u8; 18]);
        v2.extend_from_slice(&eth[14..]);
        assert!(matches!(decoded(276, &v2), Decoded::Roce(_)));
        // RD Acknowledge: the AETH after the RDETH.
        let rd_ack = bth(0x51, 0, &[0, 0, 0, 0, 0x60, 0, 0, 1, 0, 0, 0, 0]);
        let Decoded::Roce(p) = decoded(1, &udp(&rd_ack, false)) else {
            panic!("RD ACK")
        };
        assert_eq!(p.aeth, Some(0x60));
    }

    #[test]
    fn both_byte_orders_and_nanoseconds_sum_up_alike() {
        let frames = [
            frame(0x0a, 7, 1, 2, None, false),
            frame(0x11, 7, 1, 2, Some(0), false),
        ];
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let want = summarize(&pcap(&frames)[..]).unwrap();
        assert_eq!(want.roce.packets, 2);
        for (magic, le) in [
            (0xa1b2_3c4d, true),
            (0xa1b2_c3d4, false),
            (0xa1b2_3c4d, false),
        ] {
            let f = crate::reader::tests::file(magic, le, 0, 1, &refs);
            let mut got = summarize(&f[..]).unwrap();
            // The records' wire lengths are 4 more than the frames (an FCS) there.
            assert_eq!(got.roce.bytes, want.roce.bytes + 8);
            got.roce.bytes = want.roce.bytes;
            got.by_opcode = want.by_opcode.clone();
            got.by_dest_qp = want.by_dest_qp.clone();
            assert_eq!(got, want, "{magic:#x} le={le}");
        }
    }

    #[test]
    fn qps_beyond_the_bound_are_summed_not_followed() {
        let frames: Vec<Vec<u8>> = (0..MAX_QPS as u32 + 10)
            .map(|qp| frame(0x04, qp, 1, 0, None, false))
            .collect();
        let s = summarize(&pcap(&frames)[..]).unwrap();
        assert_eq!(s.roce.packets, MAX_QPS as u64 + 10);
        assert_eq!(s.by_dest_qp.len(), MAX_QPS);
        assert_eq!(s.qps_not_followed.packets, 10);
        assert!(
            s.text()
                .contains("10 packets (1180 bytes) to QPs beyond the first 65536"),
            "{}",
            &s.text()[s.text().len() - 200..]
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = summarize(&b[..]);
            let mut file = pcap(&[]);
            file.extend_from_slice(&(b.len() as u32).to_le_bytes().repeat(4));
            file.extend_from_slice(&b);
            let _ = summarize(&file[..]);
            for link in [1, 113, 276] {
                let _ = decode(link, &Frame { data: &b, wire_len: 0 });
            }
        }
    }
}
