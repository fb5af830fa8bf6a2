//! A pcap file read record by record: the 24-byte file header (µs or ns timestamps, either
//! byte order; Ethernet, Linux cooked v1 and v2), then one record at a time into one
//! buffer of at most [`MAX_CAPLEN`] bytes, so memory does not grow with the file. A record
//! longer than that is an error naming its offset, never an allocation; a file that ends
//! inside its last record keeps the frames before it and says where it ends
//! ([`Truncated`]).
//!
//! [`open_capture`] opens what a user names and refuses anything but a regular file (a
//! FIFO or `/dev/zero` never ends), looking at the opened descriptor, not at the path
//! before opening it.

use std::io::{BufReader, Read};
use std::path::Path;

use serde::Serialize;

/// The most bytes a record may hold: libpcap's `MAXIMUM_SNAPLEN` (`pcap-int.h`), the
/// largest snapshot length it writes or reads for any link type ours are.
pub const MAX_CAPLEN: u32 = 262_144;

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
        index: u64,
        offset: u64,
        what: String,
    },
    #[error("reading at byte {offset}: {error}")]
    Read { offset: u64, error: String },
    #[error(
        "{0}, not a capture file (only a regular file is read: a pipe or a device may never end)"
    )]
    NotAFile(&'static str),
    #[error("{0}")]
    Open(String),
}

/// One captured frame: its bytes (as captured) and its length on the wire.
pub struct Frame<'a> {
    pub data: &'a [u8],
    pub wire_len: u32,
}

/// Where a capture cut short ends: inside record `record` (counted from 0), which starts
/// at byte `offset`, with `have` of the `need` bytes its header and data take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Truncated {
    pub record: u64,
    pub offset: u64,
    pub have: u64,
    pub need: u64,
}

impl std::fmt::Display for Truncated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the file ends inside record {} (at byte {}: {} of its {} bytes): a capture cut short; the records before it are counted",
            self.record, self.offset, self.have, self.need
        )
    }
}

/// Open `path` to read a capture: a regular file only. The descriptor is opened without
/// blocking (a FIFO opens at once instead of waiting for a writer) and without becoming
/// a controlling terminal, and its type is read from the descriptor (`fstat`), so a path
/// swapped between a check and the open cannot slip a device in.
pub fn open_capture(path: &Path) -> Result<std::fs::File, PcapError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| PcapError::Open(e.to_string()))?;
    let t = f
        .metadata()
        .map_err(|e| PcapError::Open(e.to_string()))?
        .file_type();
    let kind = if t.is_file() {
        None
    } else if t.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_dir() {
        Some("a directory")
    } else {
        Some("not a regular file")
    };
    if let Some(kind) = kind {
        return Err(PcapError::NotAFile(kind));
    }
    // A regular file ignores O_NONBLOCK; cleared all the same, so reads are plain reads.
    {
        use std::os::fd::AsRawFd;
        let fd = f.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
    }
    Ok(f)
}

/// Read until `buf` is full or the input ends: how many bytes were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The records of a pcap file, one at a time.
pub struct PcapReader<R: Read> {
    r: BufReader<R>,
    le: bool,
    link: u32,
    /// Bytes read so far (where the next record starts).
    offset: u64,
    /// Records read so far.
    index: u64,
    buf: Vec<u8>,
    truncated: Option<Truncated>,
    done: bool,
}

impl<R: Read> PcapReader<R> {
    /// Read the file header of `r`.
    pub fn new(r: R) -> Result<PcapReader<R>, PcapError> {
        let mut r = BufReader::with_capacity(64 * 1024, r);
        let mut h = [0u8; 24];
        let n = read_full(&mut r, &mut h).map_err(|e| PcapError::Read {
            offset: 0,
            error: e.to_string(),
        })?;
        if n < 24 {
            return Err(PcapError::Short(n));
        }
        let magic = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
        // The magic as written in the file's own byte order: µs (a1b2c3d4) or ns
        // (a1b23c4d); read little-endian, the swapped forms are a big-endian file.
        let le = match magic {
            0xa1b2_c3d4 | 0xa1b2_3c4d => true,
            0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
            m => return Err(PcapError::Magic(m)),
        };
        let mut me = PcapReader {
            r,
            le,
            link: 0,
            offset: 24,
            index: 0,
            buf: Vec::new(),
            truncated: None,
            done: false,
        };
        // The link type's low 28 bits (the upper 4 are the FCS length and its flag).
        let link = me.u32_at(&h, 20) & 0x0fff_ffff;
        if !matches!(link, 1 | 113 | 276) {
            return Err(PcapError::LinkType(link));
        }
        me.link = link;
        Ok(me)
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let a: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
        if self.le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }

    /// The pcap link type of its frames (1 Ethernet, 113 Linux cooked, 276 cooked v2).
    pub fn link(&self) -> u32 {
        self.link
    }

    /// Where the file ended inside a record, once [`PcapReader::next_frame`] said there
    /// are no more.
    pub fn truncated(&self) -> Option<Truncated> {
        self.truncated
    }

    fn read_error(&self, e: std::io::Error) -> PcapError {
        PcapError::Read {
            offset: self.offset,
            error: e.to_string(),
        }
    }

    /// The next frame; `None` at the end of the file (or inside a last record cut short:
    /// see [`PcapReader::truncated`]). A first record cut short is an error: a file of
    /// nothing but a partial record is not a capture worth summing up.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, PcapError> {
        if self.done {
            return Ok(None);
        }
        let (index, offset) = (self.index, self.offset);
        let mut h = [0u8; 16];
        let n = read_full(&mut self.r, &mut h).map_err(|e| self.read_error(e))?;
        if n == 0 {
            self.done = true;
            return Ok(None);
        }
        if n < 16 {
            if index == 0 {
                return Err(PcapError::Record {
                    index,
                    offset,
                    what: format!("{n} bytes left, a record header is 16"),
                });
            }
            self.done = true;
            self.truncated = Some(Truncated {
                record: index,
                offset,
                have: n as u64,
                need: 16,
            });
            return Ok(None);
        }
        let incl = self.u32_at(&h, 8);
        let wire_len = self.u32_at(&h, 12);
        if incl > MAX_CAPLEN {
            return Err(PcapError::Record {
                index,
                offset,
                what: format!(
                    "captured length {incl} is more than {MAX_CAPLEN}, the most a pcap record holds (libpcap's limit): the file is damaged or not a capture"
                ),
            });
        }
        let incl = incl as usize;
        self.buf.resize(incl, 0);
        let got = read_full(&mut self.r, &mut self.buf).map_err(|e| self.read_error(e))?;
        if got < incl {
            if index == 0 {
                return Err(PcapError::Record {
                    index,
                    offset,
                    what: format!("{incl} captured bytes, {got} left in the file"),
                });
            }
            self.done = true;
            self.truncated = Some(Truncated {
                record: index,
                offset,
                have: 16 + got as u64,
                need: 16 + incl as u64,
            });
            return Ok(None);
        }
        self.index += 1;
        self.offset += 16 + incl as u64;
        Ok(Some(Frame {
            data: &self.buf,
            wire_len,
        }))
    }
}

/// Open `path` ([`open_capture`]) and read its header.
pub fn open(path: &Path) -> Result<PcapReader<std::fs::File>, PcapError> {
    PcapReader::new(open_capture(path)?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A pcap header (`magic` as the file holds it, in `le` or big-endian order; snap
    /// length `snaplen`; link type `link`) and records of these frames.
    pub(crate) fn file(magic: u32, le: bool, snaplen: u32, link: u32, frames: &[&[u8]]) -> Vec<u8> {
        let w = |v: u32| {
            if le {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            }
        };
        let mut b = Vec::new();
        b.extend_from_slice(&w(magic));
        b.extend_from_slice(&[0, 2, 0, 4][..]);
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&w(snaplen));
        b.extend_from_slice(&w(link));
        for (i, f) in frames.iter().enumerate() {
            b.extend_from_slice(&w(i as u32));
            b.extend_from_slice(&w(0));
            b.extend_from_slice(&w(f.len() as u32));
            b.extend_from_slice(&w(f.len() as u32 + 4));
            b.extend_from_slice(f);
        }
        b
    }

    /// Each frame's bytes and wire length.
    type Frames = Vec<(Vec<u8>, u32)>;

    fn frames(b: &[u8]) -> Result<(Frames, Option<Truncated>), PcapError> {
        let mut r = PcapReader::new(b)?;
        let mut out = Vec::new();
        while let Some(f) = r.next_frame()? {
            out.push((f.data.to_vec(), f.wire_len));
        }
        Ok((out, r.truncated()))
    }

    #[test]
    fn both_byte_orders_micro_and_nanoseconds_and_a_snap_length_of_zero() {
        let a: &[u8] = &[1, 2, 3];
        let b: &[u8] = &[4; 70];
        for (magic, le) in [
            (0xa1b2_c3d4, true),
            (0xa1b2_3c4d, true),
            (0xa1b2_c3d4, false),
            (0xa1b2_3c4d, false),
        ] {
            // snaplen 0 (some writers leave it so): the records' own lengths count.
            let (got, t) = frames(&file(magic, le, 0, 1, &[a, b])).unwrap();
            assert_eq!(
                got,
                vec![(a.to_vec(), 7), (b.to_vec(), 74)],
                "{magic:#x} le={le}"
            );
            assert_eq!(t, None);
        }
        for link in [113, 276, 1 | 0x1000_0000] {
            let f = file(0xa1b2_c3d4, true, 65535, link, &[a]);
            assert_eq!(PcapReader::new(&f[..]).unwrap().link(), link & 0x0fff_ffff);
        }
        let e = PcapReader::new(&file(0xa1b2_c3d4, true, 65535, 105, &[])[..])
            .err()
            .unwrap();
        assert_eq!(e, PcapError::LinkType(105));
    }

    #[test]
    fn a_record_longer_than_any_is_an_error_naming_its_offset() {
        let a: &[u8] = &[1, 2, 3];
        for caplen in [MAX_CAPLEN + 1, u32::MAX] {
            let mut b = file(0xa1b2_c3d4, true, 65535, 1, &[a]);
            let at = b.len();
            for v in [0, 0, caplen, caplen] {
                b.extend_from_slice(&u32::to_le_bytes(v));
            }
            b.extend_from_slice(&[0; 100]);
            let e = frames(&b).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!(
                    "record 1 at byte {at}: captured length {caplen} is more than 262144"
                )),
                "{e}"
            );
        }
        // The bound itself is a record.
        let big = vec![0u8; MAX_CAPLEN as usize];
        let (got, _) = frames(&file(0xa1b2_c3d4, true, 0, 1, &[&big])).unwrap();
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn the_end_of_a_file_cut_short_is_said() {
        let a: &[u8] = &[1, 2, 3];
        let whole = file(0xa1b2_c3d4, true, 65535, 1, &[a, &[9; 40]]);
        // Inside the second record's data: 16 + 3 + 16 + 40 bytes of records.
        let (got, t) = frames(&whole[..whole.len() - 10]).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            t,
            Some(Truncated {
                record: 1,
                offset: 24 + 19,
                have: 16 + 30,
                need: 56
            })
        );
        assert!(t
            .unwrap()
            .to_string()
            .starts_with("the file ends inside record 1 (at byte 43: 46 of its 56 bytes)"));
        // Inside the second record's header.
        let (_, t) = frames(&whole[..24 + 19 + 5]).unwrap();
        assert_eq!(t.map(|t| (t.have, t.need)), Some((5, 16)));
        // The first record cut short is an error, as it was.
        let e = frames(&whole[..24 + 10]).unwrap_err().to_string();
        assert_eq!(
            e,
            "record 0 at byte 24: 10 bytes left, a record header is 16"
        );
        let e = frames(&whole[..24 + 17]).unwrap_err().to_string();
        assert_eq!(
            e,
            "record 0 at byte 24: 3 captured bytes, 1 left in the file"
        );
        assert_eq!(frames(&whole[..20]).unwrap_err(), PcapError::Short(20));
        assert_eq!(frames(b"0123456789").unwrap_err(), PcapError::Short(10));
        assert_eq!(
            frames(&[7u8; 24]).unwrap_err().to_string(),
            "not a pcap file (magic 0x07070707; pcapng is not read: capture with tcpdump -w, or convert with editcap -F pcap)"
        );
    }

    #[test]
    fn a_reader_that_fails_names_the_offset() {
        struct Failing(usize);
        impl Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("disk on fire"));
                }
                let n = buf.len().min(self.0);
                let h = file(0xa1b2_c3d4, true, 65535, 1, &[]);
                buf[..n].copy_from_slice(&h[24 - self.0..24 - self.0 + n]);
                self.0 -= n;
                Ok(n)
            }
        }
        let mut r = PcapReader::new(Failing(24)).unwrap();
        let e = r.next_frame().err().unwrap();
        assert_eq!(e.to_string(), "reading at byte 24: disk on fire");
    }

    #[test]
    fn only_a_regular_file_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pcap");
        std::fs::write(&p, file(0xa1b2_c3d4, true, 65535, 1, &[&[1]])).unwrap();
        assert_eq!(open(&p).unwrap().link(), 1);
        assert_eq!(
            open(dir.path()).err().unwrap(),
            PcapError::NotAFile("a directory")
        );
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Opened without waiting for a writer, then refused.
        assert_eq!(
            open(&fifo).err().unwrap(),
            PcapError::NotAFile("a FIFO (named pipe)")
        );
        assert!(matches!(
            open(&dir.path().join("missing")).err().unwrap(),
            PcapError::Open(_)
        ));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_never_panic_and_a_long_record_is_refused(
            b in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
            caplen in proptest::num::u32::ANY,
        ) {
            let _ = frames(&b);
            let mut f = file(0xa1b2_3c4d, false, 0, 1, &[]);
            for v in [0, 0, caplen, caplen] {
                f.extend_from_slice(&u32::to_be_bytes(v));
            }
            f.extend_from_slice(&b);
            match frames(&f) {
                Ok((got, _)) => {
                    proptest::prop_assert!(caplen <= MAX_CAPLEN);
                    proptest::prop_assert!(
                        got.iter().all(|(d, _)| d.len() <= MAX_CAPLEN as usize)
                    );
                }
                Err(e) if caplen > MAX_CAPLEN => proptest::prop_assert!(
                    e.to_string().starts_with("record 0 at byte 24: captured length"),
                    "{}", e
                ),
                Err(e) => proptest::prop_assert!(e.to_string().starts_with("record "), "{}", e),
            }
        }
    }
}
