//! The side channel of a bandwidth test: what the prober and the responder say to each
//! other over TCP before, and after, the test (pure encoding; no I/O beyond `Read`).
//!
//! A bandwidth prober opens with [`HELLO_LEN`] bytes that start with [`MAGIC`] where a
//! latency prober sends its message size (at most 1 MiB, so the high bit tells them
//! apart; an older responder reads the hello as a latency prober's and answers without
//! the magic, which the prober reports as "does not serve bandwidth tests"). Network
//! order throughout:
//!
//! ```text
//! prober    hello   MAGIC u32, version u8, op u8, flags u8 (1: bidirectional,
//!                   2: says abort), 0 u8, size u32, qps u16, 0 u16, duration_ms u32,
//!                   8 zero bytes
//! responder answer  MAGIC u32, then 0 u8 + qps u16 + qps x QpInfo (accepted)
//!                              or   1 u8 + len u16 + reason (refused, UTF-8)
//! prober            qps x QpInfo
//! responder ready   0 u8 (queue pairs connected, receives posted) or 1 u8 + len u16 + reason
//!   ... the test ...
//! prober    done    b'D' (or b'A': abort, its test failed)
//! responder report  len u32 + JSON (Report)
//! ```
//!
//! Revision 2 adds the abort: a prober whose test failed says b'A' instead of done, and
//! the responder then moves its queue pairs to error and frees them at once (`bwend`)
//! instead of answering until the test's end. The version byte stays 1, since a version
//! 1 responder refuses any other; the hello's flag 2 says the prober is of revision 2,
//! and a version 1 responder ignores it and takes the abort for a done (any byte ends its
//! test), so either side may be the older one.
//! A QpInfo is 36 bytes: qpn u32, psn u32, gid 16 bytes, rkey u32, addr u64.

use std::io::Read;

use rocewatch_plugin_api::{BandwidthOp, BandwidthSide, PortSnapshot};
use serde::{Deserialize, Serialize};

/// First word of a bandwidth prober's hello and of the responder's answer.
pub const MAGIC: u32 = 0x8042_5754;
pub const VERSION: u8 = 1;
/// The hello's length: as long as a latency prober's first message (28 bytes), so that
/// an older responder reads all of it and answers instead of waiting for more.
pub const HELLO_LEN: usize = 28;
pub const QP_INFO_LEN: usize = 36;
/// Most queue pairs a test may ask for.
pub const MAX_QPS: u16 = 64;
/// Longest refusal or failure text read.
const MAX_REASON: usize = 4096;
/// Largest report read.
const MAX_REPORT: u32 = 1 << 20;
/// The done message.
pub const DONE: u8 = b'D';
/// The abort message, said instead of done when the prober's test failed (revision 2;
/// an older responder takes any byte for done).
pub const ABORT: u8 = b'A';

/// What was wrong with bytes read from the side channel.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    #[error("the hello does not start with the bandwidth magic ({0:#010x})")]
    NotBandwidth(u32),
    #[error("protocol version {0} is not supported (this responder speaks version {VERSION})")]
    Version(u8),
    #[error("unknown operation code {0} (0 write, 1 read, 2 send)")]
    Op(u8),
    #[error("message size 0: give at least 1 byte")]
    ZeroSize,
    #[error("{0} queue pairs: give 1 to {MAX_QPS}")]
    Qps(u16),
    #[error("duration 0 ms: give a positive duration")]
    ZeroDuration,
    #[error("the responder's answer does not start with the bandwidth magic ({0:#010x}): it does not serve bandwidth tests (an older rocewatch?)")]
    OldResponder(u32),
    #[error("unknown status byte {0} in the {1}")]
    Status(u8, &'static str),
    #[error("the answer lists {got} queue pairs, {want} were asked for")]
    QpCount { got: u16, want: u16 },
    #[error("a {what} of {len} bytes is over the limit of {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("the report is not valid JSON: {0}")]
    Report(String),
    #[error("side channel: {0}")]
    Io(String),
}

impl From<std::io::Error> for ProtoError {
    fn from(e: std::io::Error) -> Self {
        ProtoError::Io(match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "the other side closed the connection".into(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                "no answer in time".into()
            }
            _ => e.to_string(),
        })
    }
}

/// The hello's flags.
const FLAG_BIDIRECTIONAL: u8 = 1;
const FLAG_SAYS_ABORT: u8 = 2;

/// A bandwidth prober's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub op: BandwidthOp,
    pub bidirectional: bool,
    /// The prober says abort when its test fails (revision 2).
    pub says_abort: bool,
    pub size: u32,
    pub qps: u16,
    pub duration_ms: u32,
}

fn op_code(op: BandwidthOp) -> u8 {
    match op {
        BandwidthOp::Write => 0,
        BandwidthOp::Read => 1,
        BandwidthOp::Send => 2,
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        b[4] = VERSION;
        b[5] = op_code(self.op);
        b[6] = if self.bidirectional {
            FLAG_BIDIRECTIONAL
        } else {
            0
        } | if self.says_abort { FLAG_SAYS_ABORT } else { 0 };
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..14].copy_from_slice(&self.qps.to_be_bytes());
        b[16..20].copy_from_slice(&self.duration_ms.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8; HELLO_LEN]) -> Result<Hello, ProtoError> {
        let magic = be32(&b[0..4]);
        if magic != MAGIC {
            return Err(ProtoError::NotBandwidth(magic));
        }
        if b[4] != VERSION {
            return Err(ProtoError::Version(b[4]));
        }
        let op = match b[5] {
            0 => BandwidthOp::Write,
            1 => BandwidthOp::Read,
            2 => BandwidthOp::Send,
            o => return Err(ProtoError::Op(o)),
        };
        let h = Hello {
            op,
            bidirectional: b[6] & FLAG_BIDIRECTIONAL != 0,
            says_abort: b[6] & FLAG_SAYS_ABORT != 0,
            size: be32(&b[8..12]),
            qps: be16(&b[12..14]),
            duration_ms: be32(&b[16..20]),
        };
        if h.size == 0 {
            return Err(ProtoError::ZeroSize);
        }
        if h.qps == 0 || h.qps > MAX_QPS {
            return Err(ProtoError::Qps(h.qps));
        }
        if h.duration_ms == 0 {
            return Err(ProtoError::ZeroDuration);
        }
        Ok(h)
    }
}

/// One queue pair as the other side needs it: where to connect, and (write, read) the
/// buffer it may access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    pub qpn: u32,
    pub psn: u32,
    pub gid: [u8; 16],
    pub rkey: u32,
    pub addr: u64,
}

impl QpInfo {
    pub fn encode(&self) -> [u8; QP_INFO_LEN] {
        let mut b = [0u8; QP_INFO_LEN];
        b[0..4].copy_from_slice(&self.qpn.to_be_bytes());
        b[4..8].copy_from_slice(&self.psn.to_be_bytes());
        b[8..24].copy_from_slice(&self.gid);
        b[24..28].copy_from_slice(&self.rkey.to_be_bytes());
        b[28..36].copy_from_slice(&self.addr.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8; QP_INFO_LEN]) -> QpInfo {
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[8..24]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[28..36]);
        QpInfo {
            qpn: be32(&b[0..4]),
            psn: be32(&b[4..8]),
            gid,
            rkey: be32(&b[24..28]),
            addr: u64::from_be_bytes(addr),
        }
    }
}

/// A list of queue pairs, as sent.
pub fn encode_qps(qps: &[QpInfo]) -> Vec<u8> {
    qps.iter().flat_map(|q| q.encode()).collect()
}

/// `n` queue pairs read from `r`.
pub fn read_qps(r: &mut impl Read, n: u16) -> Result<Vec<QpInfo>, ProtoError> {
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let mut b = [0u8; QP_INFO_LEN];
        r.read_exact(&mut b)?;
        out.push(QpInfo::decode(&b));
    }
    Ok(out)
}

fn encode_text(status: u8, reason: &str) -> Vec<u8> {
    let mut text = reason.as_bytes();
    if text.len() > MAX_REASON {
        let mut end = MAX_REASON;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        text = &text[..end];
    }
    let mut b = vec![status];
    b.extend_from_slice(&(text.len() as u16).to_be_bytes());
    b.extend_from_slice(text);
    b
}

fn read_text(r: &mut impl Read) -> Result<String, ProtoError> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len)?;
    let len = u16::from_be_bytes(len) as usize;
    if len > MAX_REASON {
        return Err(ProtoError::TooLong {
            what: "reason",
            len,
            max: MAX_REASON,
        });
    }
    let mut text = vec![0u8; len];
    r.read_exact(&mut text)?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The responder's answer to a hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Accepted(Vec<QpInfo>),
    Refused(String),
}

impl Answer {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = MAGIC.to_be_bytes().to_vec();
        match self {
            Answer::Accepted(qps) => {
                b.push(0);
                b.extend_from_slice(&(qps.len() as u16).to_be_bytes());
                b.extend(encode_qps(qps));
            }
            Answer::Refused(why) => b.extend(encode_text(1, why)),
        }
        b
    }

    /// The answer to a hello that asked for `qps` queue pairs.
    pub fn read(r: &mut impl Read, qps: u16) -> Result<Answer, ProtoError> {
        let mut head = [0u8; 5];
        r.read_exact(&mut head)?;
        let magic = be32(&head[0..4]);
        if magic != MAGIC {
            return Err(ProtoError::OldResponder(magic));
        }
        match head[4] {
            0 => {
                let mut n = [0u8; 2];
                r.read_exact(&mut n)?;
                let n = u16::from_be_bytes(n);
                if n != qps {
                    return Err(ProtoError::QpCount { got: n, want: qps });
                }
                Ok(Answer::Accepted(read_qps(r, n)?))
            }
            1 => Ok(Answer::Refused(read_text(r)?)),
            s => Err(ProtoError::Status(s, "answer")),
        }
    }
}

/// The ready message: `Ok` or why the responder could not set up.
pub fn encode_ready(r: &Result<(), String>) -> Vec<u8> {
    match r {
        Ok(()) => vec![0],
        Err(why) => encode_text(1, why),
    }
}

/// `Ok(Ok(()))` ready, `Ok(Err(why))` the responder failed, `Err` garbage.
pub fn read_ready(r: &mut impl Read) -> Result<Result<(), String>, ProtoError> {
    let mut s = [0u8; 1];
    r.read_exact(&mut s)?;
    match s[0] {
        0 => Ok(Ok(())),
        1 => Ok(Err(read_text(r)?)),
        s => Err(ProtoError::Status(s, "ready message")),
    }
}

/// What the responder sends back after the test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Its own messages towards the prober (bidirectional tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<BandwidthSide>,
    /// Its port's counters before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortSnapshot>,
    /// What went wrong on its side, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Report {
    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec());
        let mut b = (json.len() as u32).to_be_bytes().to_vec();
        b.extend(json);
        b
    }

    pub fn read(r: &mut impl Read) -> Result<Report, ProtoError> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len)?;
        let len = u32::from_be_bytes(len);
        if len > MAX_REPORT {
            return Err(ProtoError::TooLong {
                what: "report",
                len: len as usize,
                max: MAX_REPORT as usize,
            });
        }
        let mut b = vec![0u8; len as usize];
        r.read_exact(&mut b)?;
        serde_json::from_slice(&b).map_err(|e| ProtoError::Report(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hello() -> Hello {
        Hello {
            op: BandwidthOp::Read,
            bidirectional: true,
            says_abort: true,
            size: 65536,
            qps: 4,
            duration_ms: 10_000,
        }
    }

    #[test]
    fn hello_round_trips_and_a_latency_probers_first_word_is_not_one() {
        let h = hello();
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        // A latency prober's size (at most 1 MiB) never has the high bit.
        let mut b = h.encode();
        b[0..4].copy_from_slice(&64u32.to_be_bytes());
        assert_eq!(Hello::decode(&b), Err(ProtoError::NotBandwidth(64)));
    }

    #[test]
    fn the_abort_flag_is_one_a_version_1_responder_reads_past() {
        let h = Hello {
            bidirectional: false,
            ..hello()
        };
        let b = h.encode();
        // A version 1 responder checks the version byte and reads bit 0 of the flags.
        assert_eq!(b[4], 1);
        assert_eq!(b[6] & 1, 0, "not bidirectional");
        assert_eq!(b[6], 2);
        // A revision 1 prober's hello (no abort flag) reads as before.
        let mut old = b;
        old[6] = 1;
        let got = Hello::decode(&old).unwrap();
        assert!(got.bidirectional && !got.says_abort, "{got:?}");
    }

    #[test]
    fn bad_hellos_say_what_was_wrong() {
        let cases: [(usize, u8, &str); 4] = [
            (4, 9, "protocol version 9"),
            (5, 7, "operation code 7"),
            (13, 0, "0 queue pairs"),
            (19, 0, "duration 0 ms"),
        ];
        for (at, v, want) in cases {
            let mut b = Hello {
                duration_ms: 5,
                ..hello()
            }
            .encode();
            b[at] = v;
            let e = Hello::decode(&b).unwrap_err().to_string();
            assert!(e.contains(want), "byte {at} = {v}: {e}");
        }
        let mut b = hello().encode();
        b[8..12].copy_from_slice(&[0; 4]);
        assert!(Hello::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("size 0"));
        let mut b = hello().encode();
        b[12..14].copy_from_slice(&65u16.to_be_bytes());
        assert_eq!(Hello::decode(&b), Err(ProtoError::Qps(65)));
    }

    #[test]
    fn answers_round_trip_and_a_refusal_keeps_its_text() {
        let q = QpInfo {
            qpn: 17,
            psn: 0xabcdef,
            gid: [7; 16],
            rkey: 0x1234,
            addr: 0xdead_beef_0000,
        };
        let a = Answer::Accepted(vec![q, q]);
        assert_eq!(Answer::read(&mut &a.encode()[..], 2), Ok(a.clone()));
        assert_eq!(
            Answer::read(&mut &a.encode()[..], 3),
            Err(ProtoError::QpCount { got: 2, want: 3 })
        );
        let r = Answer::Refused("serve_bandwidth is off on the responder".into());
        assert_eq!(Answer::read(&mut &r.encode()[..], 4), Ok(r));
        // An older responder answers a latency prober's 28 bytes: size first.
        let mut old = 1048576u32.to_be_bytes().to_vec();
        old.extend([0u8; 24]);
        let e = Answer::read(&mut &old[..], 4).unwrap_err();
        assert!(
            e.to_string().contains("does not serve bandwidth tests"),
            "{e}"
        );
        assert_eq!(read_ready(&mut &encode_ready(&Ok(()))[..]), Ok(Ok(())));
        assert_eq!(
            read_ready(&mut &encode_ready(&Err("no QP".into()))[..]),
            Ok(Err("no QP".into()))
        );
        let rep = Report {
            error: Some("x".into()),
            ..Default::default()
        };
        assert_eq!(Report::read(&mut &rep.encode()[..]), Ok(rep));
        let e = Report::read(&mut &[0u8, 0, 0, 2, b'{', b'x'][..]).unwrap_err();
        assert!(e.to_string().contains("not valid JSON"), "{e}");
        let e = Answer::read(&mut &MAGIC.to_be_bytes()[..], 1).unwrap_err();
        assert!(e.to_string().contains("closed the connection"), "{e}");
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), qps in 0u16..100) {
            let mut h = [0u8; HELLO_LEN];
            let n = bytes.len().min(HELLO_LEN);
            h[..n].copy_from_slice(&bytes[..n]);
            let _ = Hello::decode(&h);
            let _ = Answer::read(&mut &bytes[..], qps);
            let _ = read_ready(&mut &bytes[..]);
            let _ = Report::read(&mut &bytes[..]);
            let mut with_magic = MAGIC.to_be_bytes().to_vec();
            with_magic.extend(&bytes);
            let _ = Answer::read(&mut &with_magic[..], qps);
        }

        #[test]
        fn valid_hellos_round_trip(op in 0u8..3, bidi in any::<bool>(), aborts in any::<bool>(), size in 1u32.., qps in 1u16..=MAX_QPS, ms in 1u32..) {
            let op = [BandwidthOp::Write, BandwidthOp::Read, BandwidthOp::Send][op as usize];
            let h = Hello { op, bidirectional: bidi, says_abort: aborts, size, qps, duration_ms: ms };
            prop_assert_eq!(Hello::decode(&h.encode()), Ok(h));
        }
    }
}
