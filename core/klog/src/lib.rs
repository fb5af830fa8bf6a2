//! The kernel log, read as operators have it: `/dev/kmsg` records, and the files they
//! keep (`dmesg` output with or without timestamps, syslog `kern.log`, `journalctl -k`
//! output; [`text`] detects the layout), with their clocks ([`time`]), and the RDMA/NIC
//! driver messages in it matched by pattern and attributed to devices ([`matcher`]).
//! The kernel-log collector plugin counts them from its start; `rocewatch doctor` reads a
//! window of them with [`scan`].
//!
//! [`Options`] are the collector's options (`[plugins.builtin.kernel-log.options]`), which
//! doctor reads too:
//! - `path`: the kernel log device, default `/dev/kmsg`, or a file of a layout above. When
//!   the sysfs root is not the live `/sys` (a fixture tree) and no `path` is given, there
//!   is nothing to read: this host's kernel log says nothing about that tree.
//! - `patterns`: a table of name = regular expression, added to the catalog's default set
//!   (`rocewatch_metrics::KERNEL_LOG_PATTERNS`; a default's name replaces it).
//! - `default_patterns`: false to count only `patterns` (default true).
//! - `drivers`: the drivers whose messages count (the first word of a message), default
//!   [`matcher::DEFAULT_DRIVERS`].

pub mod kmsg;
pub mod matcher;
pub mod text;
pub mod time;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rocewatch_plugin_api::PluginError;

use kmsg::KmsgReader;
use matcher::{DeviceMap, Matcher, Tally};
use text::Format;
use time::{Boots, Clock, Since, Stamp};

/// Most records read at once from the kernel log device (a flood is counted over the
/// next reads).
pub const MAX_PER_COLLECTION: usize = 100_000;

/// The kernel log device.
pub const DEFAULT_PATH: &str = "/dev/kmsg";

fn default_true() -> bool {
    true
}

/// Options of the plugin (and of doctor's kernel-log check).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// The kernel log device or a file of recorded records.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Extra patterns, name = regular expression.
    #[serde(default)]
    pub patterns: BTreeMap<String, String>,
    /// Start from the catalog's default patterns.
    #[serde(default = "default_true")]
    pub default_patterns: bool,
    /// Drivers whose messages count (default: the RDMA/RoCE NIC drivers).
    #[serde(default)]
    pub drivers: Option<Vec<String>>,
    /// Device globs (shared with the sysfs plugins through `[devices]`; unused here, the
    /// device filter applies to what the other plugins read).
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            path: None,
            patterns: BTreeMap::new(),
            default_patterns: true,
            drivers: None,
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

impl Options {
    /// Decode the plugin's options; errors name the key.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, PluginError> {
        let o: Options = rocewatch_plugin_api::options::decode(v)?;
        matcher::compile(o.default_patterns, &o.patterns)
            .map_err(|e| PluginError::InvalidOptions(format!("patterns: {e}")))?;
        Ok(o)
    }

    /// The path to read, or why there is none: on a fixture sysfs root the live kernel
    /// log is not about that tree.
    pub fn source(&self, sysfs_root: &Path) -> Result<PathBuf, String> {
        match &self.path {
            Some(p) => Ok(p.clone()),
            None if rocewatch_sysfs::read::is_sysfs(sysfs_root) => Ok(DEFAULT_PATH.into()),
            None => Err(format!(
                "{} is not the live /sys and no kernel-log path is set: this host's kernel log says nothing about that tree",
                sysfs_root.display()
            )),
        }
    }

    /// The matcher these options describe, devices read through the sysfs root.
    pub fn matcher(&self, sysfs_root: &Path) -> Result<Matcher, PluginError> {
        let patterns = matcher::compile(self.default_patterns, &self.patterns)
            .map_err(|e| PluginError::InvalidOptions(format!("patterns: {e}")))?;
        let drivers = match &self.drivers {
            Some(d) => d.clone(),
            None => matcher::DEFAULT_DRIVERS
                .iter()
                .map(|d| d.to_string())
                .collect(),
        };
        Ok(Matcher {
            patterns,
            drivers,
            devices: DeviceMap::read(&rocewatch_sysfs::SysRoot::new(sysfs_root)),
        })
    }
}

/// What doctor reads: the kernel records of a log in a window, counted, and what could not
/// be read.
#[derive(Debug, Default)]
pub struct Scan {
    /// The records in the window, counted (`tally.records` of them).
    pub tally: Tally,
    /// The patterns used, in order.
    pub patterns: Vec<String>,
    /// The layout read; `None` when no line was in one.
    pub format: Option<Format>,
    /// Read from the kernel log device itself, not a file.
    pub device: bool,
    /// Lines read (records, from the device), blank and marker lines included.
    pub lines: u64,
    /// The kernel's records read, in the window or not.
    pub records: u64,
    /// Lines of other programs (a syslog file holds more than the kernel's).
    pub other: u64,
    /// Lines that are no record in `format`, and the first of them with why.
    pub unparsed: u64,
    pub first_unparsed: Option<String>,
    /// When the last kernel record was logged.
    pub last: Option<Stamp>,
    /// Records dated after this boot's uptime: logged in another boot (a log kept across
    /// reboots), counted apart and never in the window (`another_boot.records` of them).
    pub another_boot: Tally,
    /// Of `another_boot`'s records, those before the log's last boot (a log of several
    /// boots, whose since-boot times start again at each); the rest are dated after the
    /// uptime.
    pub before_last_boot: u64,
    /// Where the log's last boot starts, and how it shows: `line 3: times since boot go
    /// back from ...`, a kmsg sequence number going back, journalctl's boot line.
    pub last_boot: Option<String>,
    /// Where the boots of a file part.
    boots: Boots,
    /// The current boot's records before the window (set apart with the window's when
    /// another boot follows).
    earlier: Tally,
}

/// Lines detection looks at.
const SAMPLE: usize = 200;
/// The longest line kept (longer ones are not records of any layout).
const MAX_LINE: usize = 64 * 1024;

/// `/dev/kmsg`'s device number (drivers/char/mem.c `devlist`: minor 11 of the memory
/// devices' major 1): the one character device read as the kernel log.
const KMSG_DEV: (u32, u32) = (1, 11);

/// Read the kernel log at `path` and count its records of the `window` before `clock`.
/// The kernel log device is read as records; a regular file in the layout its first lines
/// show ([`text::detect`]); anything else (a FIFO, another device) is refused.
pub fn scan(
    path: &Path,
    matcher: &Matcher,
    window: Duration,
    clock: &Clock,
) -> std::io::Result<Scan> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    let since = clock.since(u64::try_from(window.as_micros()).unwrap_or(u64::MAX));
    let mut out = Scan {
        patterns: matcher.patterns.iter().map(|p| p.name.clone()).collect(),
        ..Scan::default()
    };
    let rdev = meta.rdev();
    if meta.file_type().is_char_device() && (libc::major(rdev), libc::minor(rdev)) == KMSG_DEV {
        out.device = true;
        out.format = Some(Format::Kmsg);
        // The device holds this boot's records only.
        let since = since.of_this_boot_only();
        let mut reader = KmsgReader::from_file(path, file);
        loop {
            let b = reader.read_available(MAX_PER_COLLECTION)?;
            let done = b.records.len() + b.errors.len() < MAX_PER_COLLECTION;
            for r in &b.records {
                out.count(r, None, matcher, &since);
            }
            out.lines += (b.records.len() + b.errors.len()) as u64;
            for e in &b.errors {
                out.unread(out.lines, e.to_string());
            }
            if done {
                return Ok(out);
            }
        }
    }
    if !meta.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "neither a regular file nor the kernel log device (/dev/kmsg)",
        ));
    }
    let mut reader = std::io::BufReader::new(file);
    let mut buf = Vec::new();
    let mut sample: Vec<(String, bool)> = Vec::new();
    while sample.len() < SAMPLE {
        match next_line(&mut reader, &mut buf)? {
            Some(truncated) => sample.push((String::from_utf8_lossy(&buf).into_owned(), truncated)),
            None => break,
        }
    }
    let texts: Vec<&str> = sample.iter().map(|(l, _)| l.as_str()).collect();
    out.format = text::detect(&texts, clock);
    for (line, truncated) in &sample {
        out.line(line, *truncated, matcher, &since, clock);
    }
    while let Some(truncated) = next_line(&mut reader, &mut buf)? {
        let line = String::from_utf8_lossy(&buf);
        out.line(&line, truncated, matcher, &since, clock);
    }
    Ok(out)
}

impl Scan {
    /// Count a record (`seq`: its kmsg sequence number, in a file of kmsg records) in the
    /// window, or apart as another boot's: dated after the uptime, or followed by another
    /// boot in the file.
    fn count(&mut self, r: &kmsg::Record, seq: Option<u64>, matcher: &Matcher, since: &Since) {
        self.records += 1;
        self.last = Some(r.stamp);
        if !self.device {
            if let Some(why) = self.boots.starts_a_boot(r.stamp, seq) {
                self.new_boot(why);
            }
        }
        if since.of_another_boot(r.stamp) {
            matcher.count(r, &mut self.another_boot);
        } else if since.covers(r.stamp) {
            matcher.count(r, &mut self.tally);
        } else if !self.device && matches!(r.stamp, Stamp::SinceBoot(_)) {
            matcher.count(r, &mut self.earlier);
        }
    }

    /// Another boot starts at the current line, for `why`: every record counted so far
    /// is another boot's.
    fn new_boot(&mut self, why: String) {
        let earlier = std::mem::take(&mut self.earlier);
        let window = std::mem::take(&mut self.tally);
        self.before_last_boot += earlier.records + window.records;
        self.another_boot.absorb(earlier);
        self.another_boot.absorb(window);
        self.last_boot = Some(format!("line {}: {why}", self.lines));
    }

    fn unread(&mut self, line: u64, why: String) {
        self.unparsed += 1;
        if self.first_unparsed.is_none() {
            self.first_unparsed = Some(format!("line {line}: {why}"));
        }
    }

    fn line(
        &mut self,
        line: &str,
        truncated: bool,
        matcher: &Matcher,
        since: &Since,
        clock: &Clock,
    ) {
        self.lines += 1;
        if truncated {
            self.unread(self.lines, format!("longer than {MAX_LINE} bytes"));
            return;
        }
        let Some(format) = self.format else {
            if !line.trim().is_empty() {
                self.unread(
                    self.lines,
                    "in no layout doctor reads (/dev/kmsg records, dmesg, syslog, journalctl -k)"
                        .into(),
                );
            }
            return;
        };
        match text::parse_line(format, line, clock) {
            Ok(text::Line::Kernel(r)) => {
                let seq = (format == Format::Kmsg).then_some(r.seq);
                self.count(&r, seq, matcher, since);
            }
            Ok(text::Line::Other) => self.other += 1,
            Ok(text::Line::Boot) if format.since_boot() => {
                self.boots = Boots::default();
                self.new_boot(format!("journalctl's boot line {:?}", line.trim_end()));
            }
            // A wall-clock journal's records are dated across boots.
            Ok(text::Line::Boot | text::Line::Skip) => {}
            Err(why) => {
                let shown: String = line.chars().take(100).collect();
                self.unread(self.lines, format!("{why}: {shown:?}"));
            }
        }
    }
}

/// The next line of `r` into `line` (without its line break, at most [`MAX_LINE`] bytes
/// kept): `Some(truncated)`, or `None` at the end.
fn next_line<R: std::io::BufRead>(r: &mut R, line: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    line.clear();
    let (mut truncated, mut any) = (false, false);
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any.then_some(truncated));
        }
        any = true;
        let (take, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let keep = take.min(MAX_LINE.saturating_sub(line.len()));
        truncated |= keep < take - usize::from(done);
        line.extend_from_slice(&buf[..keep]);
        r.consume(take);
        if done {
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            return Ok(Some(truncated));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_counts_the_window_only() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        std::fs::write(
            &log,
            "3,1,1000,-;mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): QUERY_VPORT_STATE(0x750) timeout. Will cause a leak of a command resource\n3,2,5000,-;mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n",
        )
        .unwrap();
        let m = Options::default().matcher(dir.path()).unwrap();
        let clock = Clock {
            since_boot_us: 10_000,
            unix_us: 0,
            utc_offset_s: 0,
        };
        let s = scan(&log, &m, Duration::from_micros(8000), &clock).unwrap();
        let hit = &s.tally.counts[&("cmd_timeout".into(), "0000:03:00.0".into())];
        assert_eq!(hit.count, 1);
        assert!(hit.last_message.contains("ACCESS_REG"));
        assert_eq!(s.tally.records, 1);
        assert_eq!(
            s.patterns.len(),
            rocewatch_metrics::KERNEL_LOG_PATTERNS.len()
        );
    }

    /// A log kept across a reboot: the record dated after the uptime (1021 s at 900 s)
    /// is of another boot, counted apart, never in the window however short.
    #[test]
    fn scan_counts_records_of_another_boot_apart() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        std::fs::write(
            &log,
            "3,7,1021000000,-;mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n\
             6,1,850000000,-;mlx5_core 0000:03:00.0 ens1f0np0: Link up\n",
        )
        .unwrap();
        let m = Options::default().matcher(dir.path()).unwrap();
        let clock = Clock {
            since_boot_us: 900_000_000,
            unix_us: 0,
            utc_offset_s: 0,
        };
        let s = scan(&log, &m, Duration::from_secs(60), &clock).unwrap();
        assert_eq!(
            (s.records, s.tally.records, s.another_boot.records),
            (2, 1, 1),
            "{s:?}"
        );
        let keys: Vec<&str> = s.tally.counts.keys().map(|(p, _)| p.as_str()).collect();
        assert_eq!(keys, ["link_flap"]);
        let hit = &s.another_boot.counts[&("cmd_timeout".into(), "0000:03:00.0".into())];
        assert_eq!(hit.count, 1);
        let s = scan(&log, &m, Duration::from_secs(1), &clock).unwrap();
        assert!(s.tally.counts.is_empty(), "{s:?}");
        assert_eq!(s.another_boot.records, 1);
    }

    /// A log kept across a reboot whose since-boot times restart (issue 49): the previous
    /// boot's firmware timeout at 300 s, then this boot's records from 1 s to 390 s, read
    /// at an uptime of 400 s over an hour. The timeout is before this boot's uptime but of
    /// another boot: set apart, never in the window, in each layout that tells the boot
    /// (times going back, a kmsg sequence going back, journalctl's boot line).
    #[test]
    fn scan_sets_apart_the_records_before_the_last_boot() {
        let timeout = "mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource";
        let flap = "mlx5_core 0000:03:00.0 ens1f0np0: Link up";
        let kmsg = format!(
            "6,10,200000000,-;{flap}\n3,11,300000000,-;{timeout}\n6,0,1000000,-;Linux version 6.1.0\n6,1,390000000,-;{flap}\n"
        );
        let dmesg = format!(
            "[  200.000000] {flap}\n[  300.000000] {timeout}\n[    1.000000] Linux version 6.1.0\n[  390.000000] {flap}\n"
        );
        let journal = format!(
            "[  200.000000] node7 kernel: {flap}\n[  300.000000] node7 kernel: {timeout}\n-- Boot 3c1f0e2a9b7d4f6e8a5c2d1b0e9f8a7c --\n[    1.000000] node7 kernel: Linux version 6.1.0\n[  390.000000] node7 kernel: {flap}\n"
        );
        // Only the sequence tells this boot: its first record is dated later than the
        // last of the boot before (a boot of 2 s, then this one's record at 3 s).
        let seq = format!("6,10,1000000,-;{flap}\n3,11,2000000,-;{timeout}\n6,0,3000000,-;Linux version 6.1.0\n6,1,390000000,-;{flap}\n");
        let journal_reboot = journal.replace(
            "-- Boot 3c1f0e2a9b7d4f6e8a5c2d1b0e9f8a7c --",
            "-- Reboot --",
        );
        let dir = tempfile::tempdir().unwrap();
        let m = Options::default().matcher(dir.path()).unwrap();
        let clock = Clock {
            since_boot_us: 400_000_000,
            unix_us: 0,
            utc_offset_s: 0,
        };
        for (name, text) in [
            ("kmsg", kmsg),
            ("dmesg", dmesg),
            ("journal", journal),
            ("seq", seq),
            ("journal-reboot", journal_reboot),
        ] {
            let log = dir.path().join(name);
            std::fs::write(&log, text).unwrap();
            let s = scan(&log, &m, Duration::from_secs(3600), &clock).unwrap();
            let keys: Vec<&str> = s.tally.counts.keys().map(|(p, _)| p.as_str()).collect();
            assert_eq!(keys, ["link_flap"], "{name}: {s:?}");
            assert_eq!(
                s.tally.counts[&("link_flap".into(), "0000:03:00.0".into())].count,
                1,
                "{name}"
            );
            assert_eq!(
                (s.records, s.tally.records, s.another_boot.records),
                (4, 2, 2),
                "{name}: {s:?}"
            );
            assert_eq!(s.before_last_boot, 2, "{name}");
            let hit = &s.another_boot.counts[&("cmd_timeout".into(), "0000:03:00.0".into())];
            assert_eq!(hit.count, 1, "{name}");
            assert!(
                s.another_boot
                    .counts
                    .contains_key(&("link_flap".into(), "0000:03:00.0".into())),
                "{name}"
            );
        }
    }

    /// Times going back by less than a second are this boot's: the kernel stamps a record
    /// before it takes its place in the log, so records of two CPUs may cross.
    #[test]
    fn scan_keeps_records_whose_times_cross_slightly() {
        let timeout = "mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource";
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dmesg");
        std::fs::write(
            &log,
            format!("[  300.500000] usb 1-1: new device\n[  300.000000] {timeout}\n"),
        )
        .unwrap();
        let m = Options::default().matcher(dir.path()).unwrap();
        let clock = Clock {
            since_boot_us: 400_000_000,
            unix_us: 0,
            utc_offset_s: 0,
        };
        let s = scan(&log, &m, Duration::from_secs(3600), &clock).unwrap();
        assert_eq!((s.tally.records, s.another_boot.records), (2, 0), "{s:?}");
        assert!(s
            .tally
            .counts
            .contains_key(&("cmd_timeout".into(), "0000:03:00.0".into())));
    }

    /// The recorded logs of integration-tests/fixtures/kernel-log (see its SOURCE.md):
    /// each read in its layout, every record parsed, both mlx5 failures counted.
    #[test]
    fn scan_reads_each_recorded_layout() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/kernel-log");
        let m = Options::default().matcher(dir.as_path()).unwrap();
        // 2025-12-01 00:00 UTC, a day and a half after the recorded boot; 2000 s since boot.
        let clock = Clock {
            since_boot_us: 2_000_000_000,
            unix_us: 1_764_547_200_000_000,
            utc_offset_s: 0,
        };
        let cases = [
            ("kmsg.txt", Format::Kmsg),
            ("dmesg.txt", Format::Dmesg),
            ("dmesg-r.txt", Format::Dmesg),
            ("dmesg-x.txt", Format::Dmesg),
            ("dmesg-T.txt", Format::DmesgCtime),
            ("dmesg-iso.txt", Format::DmesgIso),
            ("dmesg-t.txt", Format::DmesgUntimed),
            ("kern.log", Format::SyslogBsd),
            ("kern.log-rfc3339", Format::SyslogIso),
            ("journalctl-k.txt", Format::SyslogBsd),
            ("journalctl-k-short-precise.txt", Format::SyslogBsd),
            ("journalctl-k-short-iso.txt", Format::SyslogIso),
            ("journalctl-k-short-monotonic.txt", Format::JournalMonotonic),
        ];
        let files = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(
            files,
            cases.len() + 2,
            "a case per file (and SOURCE.md, generate.py)"
        );
        for (file, format) in cases {
            let s = scan(&dir.join(file), &m, Duration::from_secs(7 * 86_400), &clock).unwrap();
            assert_eq!(s.format, Some(format), "{file}");
            assert_eq!((s.records, s.unparsed), (5, 0), "{file}: {s:?}");
            for p in ["cmd_timeout", "health_compromised"] {
                let hit = &s.tally.counts[&(p.to_string(), "0000:3b:00.0".to_string())];
                assert_eq!(hit.count, 1, "{file} {p}");
            }
            // The window: one hour before the clock holds none of the wall-clock ones.
            let s = scan(&dir.join(file), &m, Duration::from_secs(3600), &clock).unwrap();
            let wall = matches!(s.last, Some(Stamp::Wall(_)));
            assert_eq!(s.tally.counts.is_empty(), wall, "{file}: {s:?}");
        }
    }

    #[test]
    fn scan_counts_what_it_cannot_read_and_refuses_what_is_no_log() {
        let dir = tempfile::tempdir().unwrap();
        let m = Options::default().matcher(dir.path()).unwrap();
        let clock = Clock::now();
        let log = dir.path().join("kern.log");
        std::fs::write(
            &log,
            "Nov 30 08:12:01 node7 kernel: mlx5_core 0000:3b:00.0: x\ngarbage in the middle\nNov 30 08:12:02 node7 systemd[1]: Started x.\n",
        )
        .unwrap();
        let s = scan(&log, &m, Duration::from_secs(1), &clock).unwrap();
        assert_eq!(
            (s.lines, s.records, s.other, s.unparsed),
            (3, 1, 1, 1),
            "{s:?}"
        );
        assert!(
            s.first_unparsed
                .as_deref()
                .unwrap()
                .starts_with("line 2: no 'Mon DD HH:MM:SS' time"),
            "{s:?}"
        );
        let binary = dir.path().join("bin");
        std::fs::write(&binary, b"\x01\x02\x03\n\x04").unwrap();
        let s = scan(&binary, &m, Duration::from_secs(1), &clock).unwrap();
        assert_eq!((s.format, s.records, s.unparsed), (None, 0, 2), "{s:?}");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        let s = scan(&empty, &m, Duration::from_secs(1), &clock).unwrap();
        assert_eq!((s.format, s.lines), (None, 0));
        // A character device that is not /dev/kmsg (it could be /dev/zero), a FIFO.
        let e = scan(Path::new("/dev/null"), &m, Duration::from_secs(1), &clock).unwrap_err();
        assert!(e.to_string().contains("neither a regular file nor"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = scan(&fifo, &m, Duration::from_secs(1), &clock).unwrap_err();
        assert!(e.to_string().contains("neither a regular file nor"), "{e}");
    }
}
