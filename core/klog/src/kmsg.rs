//! `/dev/kmsg` records: the parser and the reader.
//!
//! Each `read()` of `/dev/kmsg` returns one record (`Documentation/ABI/testing/dev-kmsg`):
//! `PRIORITY,SEQ,TIMESTAMP_US,FLAGS[,...];MESSAGE\n`, then optional continuation lines
//! ` KEY=VALUE\n` (` SUBSYSTEM=pci`, ` DEVICE=+pci:0000:03:00.0`). PRIORITY is the syslog
//! facility times 8 plus the level; TIMESTAMP_US is microseconds since boot; non-printable
//! bytes of MESSAGE are escaped as `\xNN`. `EAGAIN` means no more records (the file is
//! opened non-blocking); `EPIPE` means records were overwritten before we read them (the
//! next read goes on from the oldest one left).
//!
//! A regular file holding records one per line (with their continuation lines) reads the
//! same way: recorded kernel logs in tests.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use crate::time::{now_since_boot_us, Stamp};

/// One kernel log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Syslog level (0 emergency ... 7 debug).
    pub level: u8,
    /// Syslog facility (0 is the kernel; 1 a message written into /dev/kmsg by a user).
    pub facility: u32,
    pub seq: u64,
    /// Microseconds since boot.
    pub timestamp_us: u64,
    pub message: String,
    /// The continuation lines' `KEY=VALUE` pairs.
    pub properties: Vec<(String, String)>,
    /// When, on its source's clock (`SinceBoot(timestamp_us)` for a kmsg record).
    pub stamp: Stamp,
}

/// What was wrong with a record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("kmsg record without the ';' that ends its header: {0:?}")]
    NoHeaderEnd(String),
    #[error("kmsg record header {header:?}: {field} is not a number")]
    BadField { header: String, field: &'static str },
    #[error(
        "kmsg record header {0:?} has fewer than the four fields PRIORITY,SEQ,TIMESTAMP,FLAGS"
    )]
    ShortHeader(String),
}

/// Parse one record: its first line, then its continuation lines.
pub fn parse_record(text: &str) -> Result<Record, ParseError> {
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or_default();
    let (header, message) = first
        .split_once(';')
        .ok_or_else(|| ParseError::NoHeaderEnd(first.chars().take(80).collect()))?;
    let fields: Vec<&str> = header.split(',').collect();
    if fields.len() < 4 {
        return Err(ParseError::ShortHeader(header.into()));
    }
    let num = |i: usize, field: &'static str| {
        fields[i]
            .trim()
            .parse::<u64>()
            .map_err(|_| ParseError::BadField {
                header: header.into(),
                field,
            })
    };
    let priority = num(0, "PRIORITY")?;
    let seq = num(1, "SEQ")?;
    let timestamp_us = num(2, "TIMESTAMP")?;
    let properties = lines
        .filter_map(|l| l.strip_prefix(' '))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(Record {
        level: (priority & 7) as u8,
        facility: (priority >> 3).min(u64::from(u32::MAX)) as u32,
        seq,
        timestamp_us,
        message: message.to_string(),
        properties,
        stamp: Stamp::SinceBoot(timestamp_us),
    })
}

/// Where reading starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// The oldest record the kernel still holds (a window over the past).
    Start,
    /// Records written after the open (a collector counting from its start).
    End,
}

/// What one [`KmsgReader::read_available`] call found.
#[derive(Debug, Default)]
pub struct Batch {
    pub records: Vec<Record>,
    /// Records that did not parse, with why.
    pub errors: Vec<ParseError>,
    /// Times the kernel overwrote records before they were read (`EPIPE`).
    pub overwritten: u64,
}

/// Reads records from `/dev/kmsg` (or a file of recorded ones) without blocking.
pub struct KmsgReader {
    path: PathBuf,
    file: std::fs::File,
    /// Bytes read but not yet a whole line (regular files only: the device returns whole
    /// records).
    pending: Vec<u8>,
}

/// The largest record the kernel returns is under 8 KiB (`CONSOLE_EXT_LOG_MAX`); a read
/// with a smaller buffer fails with `EINVAL`.
const READ_SIZE: usize = 16 * 1024;

impl KmsgReader {
    /// Open `path` non-blocking, positioned at `from`.
    pub fn open(path: &Path, from: From) -> std::io::Result<Self> {
        use std::io::Seek;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        if from == From::End {
            file.seek(std::io::SeekFrom::End(0))?;
        }
        Ok(KmsgReader {
            path: path.to_path_buf(),
            file,
            pending: Vec::new(),
        })
    }

    /// Read records from `file`, already open (non-blocking) at `path`, from where it is.
    pub fn from_file(path: &Path, file: std::fs::File) -> Self {
        KmsgReader {
            path: path.to_path_buf(),
            file,
            pending: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record available now, at most `max` (the rest stays for the next call).
    pub fn read_available(&mut self, max: usize) -> std::io::Result<Batch> {
        let mut batch = Batch::default();
        let mut buf = vec![0u8; READ_SIZE];
        while batch.records.len() + batch.errors.len() < max {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    self.pending.extend_from_slice(&buf[..n]);
                    self.take_records(&mut batch);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => batch.overwritten += 1,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(batch)
    }

    /// Split the complete lines of `pending` into records: a line starting with a space
    /// continues the record before it. (A regular file's continuation lines that arrive
    /// in a later read than their record are dropped; the device returns whole records.)
    fn take_records(&mut self, batch: &mut Batch) {
        let Some(end) = self.pending.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        let whole: Vec<u8> = self.pending.drain(..=end).collect();
        let text = String::from_utf8_lossy(&whole);
        let mut current: Option<String> = None;
        for line in text.split_terminator('\n') {
            if line.starts_with(' ') {
                if let Some(c) = current.as_mut() {
                    c.push('\n');
                    c.push_str(line);
                }
                continue;
            }
            if let Some(c) = current.take() {
                push(batch, &c);
            }
            if !line.is_empty() {
                current = Some(line.to_string());
            }
        }
        if let Some(c) = current {
            push(batch, &c);
        }
    }
}

fn push(batch: &mut Batch, text: &str) {
    match parse_record(text) {
        Ok(r) => batch.records.push(r),
        Err(e) => batch.errors.push(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_documented_format() {
        let r = parse_record(
            "3,1042,5123456789,-;mlx5_core 0000:03:00.0: wait_func:1165:(pid 4242): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0",
        )
        .unwrap();
        assert_eq!(
            (r.level, r.facility, r.seq, r.timestamp_us),
            (3, 0, 1042, 5123456789)
        );
        assert!(r.message.starts_with("mlx5_core 0000:03:00.0: wait_func"));
        assert_eq!(
            r.properties[1],
            ("DEVICE".into(), "+pci:0000:03:00.0".into())
        );
        // Written into /dev/kmsg by a user: facility 1 (LOG_USER), level 4.
        let u = parse_record("12,7,100,-,caller=T1;hello").unwrap();
        assert_eq!((u.facility, u.level, u.message.as_str()), (1, 4, "hello"));
    }

    #[test]
    fn errors_name_what_was_wrong() {
        assert_eq!(
            parse_record("no header here").unwrap_err().to_string(),
            "kmsg record without the ';' that ends its header: \"no header here\""
        );
        assert!(parse_record("3,x,1,-;m")
            .unwrap_err()
            .to_string()
            .contains("SEQ is not a number"));
        assert!(parse_record("3,1;m")
            .unwrap_err()
            .to_string()
            .contains("fewer than the four"));
    }

    #[test]
    fn reads_a_file_of_records_and_continues_after_appends() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kmsg");
        std::fs::write(&p, "6,1,10,-;first\n SUBSYSTEM=pci\n4,2,20,-;second\n").unwrap();
        let mut r = KmsgReader::open(&p, From::Start).unwrap();
        let b = r.read_available(100).unwrap();
        assert_eq!(b.records.len(), 2);
        assert_eq!(
            b.records[0].properties,
            vec![("SUBSYSTEM".into(), "pci".into())]
        );
        let mut tail = KmsgReader::open(&p, From::End).unwrap();
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"garbage\n3,3,30,-;third\n").unwrap();
        let b = tail.read_available(100).unwrap();
        assert_eq!(b.records.len(), 1);
        assert_eq!(b.records[0].message, "third");
        assert_eq!(b.errors.len(), 1);
    }

    #[test]
    fn reads_the_live_device_when_there_is_one() {
        // /dev/kmsg needs CAP_SYSLOG (or dmesg_restrict=0); where it opens, it must read.
        match KmsgReader::open(Path::new("/dev/kmsg"), From::Start) {
            Ok(mut r) => {
                let b = r.read_available(10_000).unwrap();
                assert!(b.errors.is_empty(), "{:?}", b.errors);
            }
            Err(e) => eprintln!("SKIPPED: /dev/kmsg: {e}"),
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in ".*") {
            let _ = parse_record(&s);
        }

        #[test]
        fn headers_round_trip(p in 0u64..200, seq in any::<u64>(), ts in any::<u64>(), m in "[^\n]*") {
            let r = parse_record(&format!("{p},{seq},{ts},-;{m}")).unwrap();
            prop_assert_eq!((u64::from(r.level) + u64::from(r.facility) * 8, r.seq, r.timestamp_us), (p, seq, ts));
            prop_assert_eq!(r.message, m);
        }
    }
}
