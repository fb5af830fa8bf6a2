//! The kernel log as operators keep it in files: the format is detected from the file's
//! first lines, then every line is read in it. Where each layout comes from:
//!
//! - `/dev/kmsg` records, one per line (`Documentation/ABI/testing/dev-kmsg`; [`kmsg`]).
//! - `dmesg` (util-linux `sys-utils/dmesg.c`, `print_record`): `[%5ld.%06ld] MESSAGE`,
//!   seconds since boot; `-r` puts `<PRI>` before it, `-x` puts `%-6s:%-6s: ` (facility
//!   and level names); `-T` writes `[Thu Dec  5 08:12:19 2026]` (local time, ctime);
//!   `--time-format iso` writes `2026-12-05T08:12:19,000000+00:00`; `-t` no time at all.
//! - syslog files (rsyslog `tools/smtradfile.c`, RSYSLOG_TraditionalFileFormat:
//!   `%TIMESTAMP% %HOSTNAME% %syslogtag%%msg%`, `Dec  5 08:12:01 host kernel: ...`;
//!   `tools/smfile.c`, RSYSLOG_FileFormat, the same with `%TIMESTAMP:::date-rfc3339%`:
//!   `2026-12-05T08:12:01.123456+00:00 host kernel: ...`). imklog may keep the kernel's
//!   `[  123.456789] ` at the start of the message; it is dropped.
//! - `journalctl -k` (systemd `src/shared/logs-show.c`, `output_timestamp_realtime` and
//!   `output_short`): `%b %d %H:%M:%S` (`-o short`), with `.%06u` (`short-precise`),
//!   `%Y-%m-%dT%H:%M:%S` with `%+03d:%02d` (`short-iso`, older releases `%z`) and
//!   `.%06u` before it (`short-iso-precise`), `[%5llu.%06llu]` (`short-monotonic`); then
//!   ` HOSTNAME IDENTIFIER: MESSAGE`, IDENTIFIER `kernel` for the kernel's records; lines
//!   `-- Boot ... --`, `-- No entries --` between, continuation lines indented.
//!
//! Times: seconds since boot are compared with the boot clock, wall-clock times with the
//! wall clock. Times without a zone (BSD syslog, `journalctl -o short`, `dmesg -T`) are
//! local: they are read with the current UTC offset, and a BSD time without a year is
//! put in the year that makes it not later than a day from now.

use crate::kmsg::{parse_record, Record};
use crate::time::days_in_month;
pub use crate::time::{civil_from_days, days_from_civil, format_unix_us, Clock, Since, Stamp};

/// A layout of kernel log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Kmsg,
    JournalMonotonic,
    Dmesg,
    DmesgCtime,
    SyslogIso,
    DmesgIso,
    SyslogBsd,
    /// `dmesg -t`: messages without a time (chosen only when no other layout fits).
    DmesgUntimed,
}

/// The layouts that detection tries, the more specific first (they win ties).
const DETECTED: [Format; 7] = [
    Format::Kmsg,
    Format::JournalMonotonic,
    Format::Dmesg,
    Format::DmesgCtime,
    Format::SyslogIso,
    Format::DmesgIso,
    Format::SyslogBsd,
];

impl Format {
    /// What the layout is, for evidence.
    pub fn describe(self) -> &'static str {
        match self {
            Format::Kmsg => "/dev/kmsg records",
            Format::JournalMonotonic => "journalctl -k -o short-monotonic",
            Format::Dmesg => "dmesg",
            Format::DmesgCtime => "dmesg -T",
            Format::SyslogIso => "syslog or journalctl -k with ISO 8601 times",
            Format::DmesgIso => "dmesg --time-format iso",
            Format::SyslogBsd => "syslog (kern.log) or journalctl -k",
            Format::DmesgUntimed => "dmesg -t, without times",
        }
    }

    /// Whether its records are dated since boot (the clock that starts again at each
    /// boot).
    pub fn since_boot(self) -> bool {
        matches!(
            self,
            Format::Kmsg | Format::JournalMonotonic | Format::Dmesg
        )
    }

    /// Whether its lines say when they were logged.
    pub fn timed(self) -> bool {
        self != Format::DmesgUntimed
    }
}

/// What one line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A record of the kernel.
    Kernel(Record),
    /// A line of another program (a syslog file holds more than the kernel's).
    Other,
    /// Not a record: blank, a continuation line, journalctl's `-- No entries --`.
    Skip,
    /// journalctl's line between two boots' records: `-- Boot ID --` (`-- Reboot --` in
    /// older releases).
    Boot,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A date and time read from a line, before a zone or a year is applied.
#[derive(Debug, Clone, Copy)]
struct Civil {
    year: Option<i64>,
    month: u32,
    day: u32,
    secs: i64,
    micros: i64,
}

impl Civil {
    /// Microseconds since the epoch if this were UTC.
    fn as_utc_us(&self, year: i64) -> Option<i64> {
        if self.day == 0 || self.day > days_in_month(year, self.month) {
            return None;
        }
        let days = days_from_civil(year, self.month, self.day);
        Some((days * 86_400 + self.secs) * 1_000_000 + self.micros)
    }

    /// As local time at `clock`'s offset; a year-less time goes in the year that puts it
    /// no more than a day after now.
    fn local_us(&self, clock: &Clock) -> Option<i64> {
        let offset_us = clock.utc_offset_s * 1_000_000;
        let year = match self.year {
            Some(y) => y,
            None => {
                let now_local = clock.unix_us + offset_us;
                let (y, _, _) = civil_from_days(now_local.div_euclid(86_400_000_000));
                let this = self.as_utc_us(y);
                match this {
                    Some(t) if t <= now_local + 86_400_000_000 => y,
                    _ => y - 1,
                }
            }
        };
        Some(self.as_utc_us(year)? - offset_us)
    }
}

/// `08:12:01` or `08:12:01.123456` (also with `,`): seconds of the day and microseconds.
fn clock_time(s: &str) -> Option<(i64, i64)> {
    let (hms, frac) = match s.find(['.', ',']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mut parts = hms.split(':');
    let mut num = |max: i64| -> Option<i64> {
        let p = parts.next()?;
        if p.len() != 2 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let v: i64 = p.parse().ok()?;
        (v <= max).then_some(v)
    };
    let (h, m, sec) = (num(23)?, num(59)?, num(60)?);
    if parts.next().is_some() {
        return None;
    }
    let micros = match frac {
        None => 0,
        Some(f) => fraction_us(f)?,
    };
    Some((h * 3600 + m * 60 + sec, micros))
}

/// Digits after the point as microseconds (1 to 9 digits).
fn fraction_us(f: &str) -> Option<i64> {
    if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let padded = format!("{f:0<9}");
    padded[..6].parse().ok()
}

/// The first word of `s` (after spaces) and what follows it.
fn word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches(' ');
    if s.is_empty() {
        return None;
    }
    let end = s.find(' ').unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

/// `Dec  5 08:12:01[.123456]` at the start of `s`: the time and the rest.
fn bsd_time(s: &str) -> Option<(Civil, &str)> {
    let (mon, rest) = word(s)?;
    let month = MONTHS.iter().position(|m| *m == mon)? as u32 + 1;
    let (day, rest) = word(rest)?;
    if day.is_empty() || day.len() > 2 || !day.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (time, rest) = word(rest)?;
    let (secs, micros) = clock_time(time)?;
    Some((
        Civil {
            year: None,
            month,
            day: day.parse().ok()?,
            secs,
            micros,
        },
        rest,
    ))
}

/// `2026-12-05T08:12:01[.123456](Z|+01:00|+0100)` at the start of `s`: microseconds
/// since the epoch, and the rest.
fn iso_time(s: &str) -> Option<(i64, &str)> {
    let (stamp, rest) = word(s)?;
    let (date, time) = stamp.split_once('T')?;
    let mut d = date.split('-');
    let y: i64 = digits(d.next()?, 4)?;
    let mo: u32 = u32::try_from(digits(d.next()?, 2)?).ok()?;
    let day: u32 = u32::try_from(digits(d.next()?, 2)?).ok()?;
    if d.next().is_some() || !(1..=12).contains(&mo) {
        return None;
    }
    // The zone: Z, or a sign after the time of day.
    let (clock, offset_s) = if let Some(t) = time.strip_suffix('Z') {
        (t, 0)
    } else {
        let at = time.rfind(['+', '-'])?;
        let (t, z) = time.split_at(at);
        let sign = if z.starts_with('-') { -1 } else { 1 };
        let z = z[1..].replace(':', "");
        if z.len() != 4 {
            return None;
        }
        let (zh, zm) = (digits(&z[..2], 2)?, digits(&z[2..], 2)?);
        (t, sign * (zh * 3600 + zm * 60))
    };
    let (secs, micros) = clock_time(clock)?;
    let c = Civil {
        year: Some(y),
        month: mo,
        day,
        secs,
        micros,
    };
    Some((c.as_utc_us(y)? - offset_s * 1_000_000, rest))
}

/// Exactly `n` ASCII digits.
fn digits(s: &str, n: usize) -> Option<i64> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// `[  123.456789]` at the start of `s`: microseconds since boot, and the rest.
fn boot_time(s: &str) -> Option<(u64, &str)> {
    let inner_end = s.find(']')?;
    let inner = s.strip_prefix('[')?.get(..inner_end - 1)?.trim_start();
    let (secs, frac) = inner.split_once('.')?;
    if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let micros = u64::try_from(fraction_us(frac)?).ok()?;
    Some((
        secs.checked_mul(1_000_000)?.checked_add(micros)?,
        &s[inner_end + 1..],
    ))
}

/// A syslog tag (`kernel:`, `systemd[1]:`): no space, colon or bracket but a `[PID]`
/// before the final colon.
fn is_tag(w: &str) -> bool {
    let Some(w) = w.strip_suffix(':') else {
        return false;
    };
    let (name, pid) = match w.find('[') {
        Some(i) => (&w[..i], Some(&w[i..])),
        None => (w, None),
    };
    !name.is_empty()
        && !name.contains([':', '[', ']'])
        && pid.is_none_or(|p| {
            p.len() > 2 && p.ends_with(']') && !p[1..p.len() - 1].contains(['[', ']'])
        })
}

/// After a syslog or journal time: `HOST TAG: MESSAGE` (or `TAG: MESSAGE` without a host
/// name): the kernel's message, or another program's line.
fn tagged(rest: &str) -> Result<Option<&str>, String> {
    let (w1, r1) = word(rest).ok_or("nothing after the time")?;
    let (tag, msg) = if is_tag(w1) {
        (w1, r1)
    } else {
        let (w2, r2) = word(r1).ok_or("no tag after the host name")?;
        if !is_tag(w2) {
            return Err(format!("{w2:?} after the host name is not a syslog tag"));
        }
        (w2, r2)
    };
    if tag != "kernel:" {
        return Ok(None);
    }
    let msg = msg.strip_prefix(' ').unwrap_or(msg);
    // imklog (or an old klogd) may keep the kernel's own time at the start.
    Ok(Some(match boot_time(msg) {
        Some((_, m)) => m.strip_prefix(' ').unwrap_or(m),
        None => msg,
    }))
}

/// A record of the kernel read from a text line.
fn record(message: &str, level: u8, facility: u32, stamp: Stamp) -> Record {
    Record {
        level,
        facility,
        seq: 0,
        timestamp_us: match stamp {
            Stamp::SinceBoot(us) => us,
            _ => 0,
        },
        message: message.to_string(),
        properties: Vec::new(),
        stamp,
    }
}

/// The level that text without one gets: informational.
const NO_LEVEL: u8 = 6;

/// util-linux's facility names (`dmesg -x`).
const FACILITIES: [&str; 12] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp",
];
const LEVELS: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
];

/// `dmesg`: `[<PRI>]` or `FAC   :LEVEL : `, then `[  SECONDS.MICROS] MESSAGE`.
fn dmesg(line: &str) -> Result<Line, String> {
    let (mut level, mut facility, mut rest) = (NO_LEVEL, 0u32, line);
    if let Some(r) = rest.strip_prefix('<') {
        let (pri, r) = r.split_once('>').ok_or("'<' without '>'")?;
        let pri: u32 = pri
            .parse()
            .map_err(|_| format!("<{pri}> is not a priority"))?;
        level = (pri & 7) as u8;
        facility = pri >> 3;
        rest = r;
    } else if !rest.starts_with('[') {
        let (fac, r) = rest.split_once(':').ok_or("no '[' time")?;
        let (lev, r) = r.split_once(':').ok_or("no '[' time")?;
        facility = FACILITIES
            .iter()
            .position(|f| *f == fac.trim_end())
            .ok_or("no '[' time")? as u32;
        level = LEVELS
            .iter()
            .position(|l| *l == lev.trim_end())
            .ok_or("no '[' time")? as u8;
        rest = r.strip_prefix(' ').unwrap_or(r);
    }
    let (us, msg) = boot_time(rest).ok_or("no [SECONDS.MICROSECONDS] time")?;
    let msg = msg.strip_prefix(' ').unwrap_or(msg);
    Ok(Line::Kernel(record(
        msg,
        level,
        facility,
        Stamp::SinceBoot(us),
    )))
}

/// `journalctl -o short-monotonic`: `[  SECONDS.MICROS] HOST TAG: MESSAGE`.
fn journal_monotonic(line: &str) -> Result<Line, String> {
    let (us, rest) = boot_time(line).ok_or("no [SECONDS.MICROSECONDS] time")?;
    Ok(match tagged(rest)? {
        Some(m) => Line::Kernel(record(m, NO_LEVEL, 0, Stamp::SinceBoot(us))),
        None => Line::Other,
    })
}

/// `dmesg -T`: `[Thu Dec  5 08:12:19 2026] MESSAGE`, local time.
fn dmesg_ctime(line: &str, clock: &Clock) -> Result<Line, String> {
    let inner = line.strip_prefix('[').ok_or("no '[' time")?;
    let (stamp, msg) = inner.split_once(']').ok_or("no ']' after the time")?;
    let (dow, rest) = word(stamp).ok_or("no day of the week")?;
    if !["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].contains(&dow) {
        return Err(format!("{dow:?} is not a day of the week"));
    }
    let (mut c, rest) = bsd_time(rest).ok_or("no 'Mon DD HH:MM:SS' time")?;
    let (year, rest) = word(rest).ok_or("no year")?;
    if !rest.trim().is_empty() {
        return Err("more than a time in the brackets".into());
    }
    c.year = Some(digits(year, 4).ok_or("no four-digit year")?);
    let at = c.local_us(clock).ok_or("no such date")?;
    let msg = msg.strip_prefix(' ').unwrap_or(msg);
    Ok(Line::Kernel(record(msg, NO_LEVEL, 0, Stamp::Wall(at))))
}

/// `dmesg --time-format iso`: `2026-12-05T08:12:19,000000+00:00 MESSAGE`.
fn dmesg_iso(line: &str) -> Result<Line, String> {
    let (at, msg) = iso_time(line).ok_or("no ISO 8601 time")?;
    let msg = msg.strip_prefix(' ').unwrap_or(msg);
    Ok(Line::Kernel(record(msg, NO_LEVEL, 0, Stamp::Wall(at))))
}

fn syslog_iso(line: &str) -> Result<Line, String> {
    let (at, rest) = iso_time(line).ok_or("no ISO 8601 time")?;
    Ok(match tagged(rest)? {
        Some(m) => Line::Kernel(record(m, NO_LEVEL, 0, Stamp::Wall(at))),
        None => Line::Other,
    })
}

fn syslog_bsd(line: &str, clock: &Clock) -> Result<Line, String> {
    let (c, rest) = bsd_time(line).ok_or("no 'Mon DD HH:MM:SS' time")?;
    let at = c.local_us(clock).ok_or("no such date")?;
    Ok(match tagged(rest)? {
        Some(m) => Line::Kernel(record(m, NO_LEVEL, 0, Stamp::Wall(at))),
        None => Line::Other,
    })
}

/// Read one line (without its line break) as `format`; `Err` says why it is not one.
pub fn parse_line(format: Format, line: &str, clock: &Clock) -> Result<Line, String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.trim().is_empty() {
        return Ok(Line::Skip);
    }
    if format != Format::DmesgUntimed && line.starts_with([' ', '\t']) {
        // Continuation lines: kmsg's ` KEY=VALUE`, a multi-line message's next lines.
        return Ok(Line::Skip);
    }
    if line.starts_with("-- ") && line.ends_with(" --") {
        // journalctl: `-- Boot 0f3c... --`, `-- Reboot --`, `-- No entries --`,
        // `-- Logs begin at ... --`.
        if line.starts_with("-- Boot ") || line == "-- Reboot --" {
            return Ok(Line::Boot);
        }
        return Ok(Line::Skip);
    }
    match format {
        Format::Kmsg => parse_record(line)
            .map(Line::Kernel)
            .map_err(|e| e.to_string()),
        Format::JournalMonotonic => journal_monotonic(line),
        Format::Dmesg => dmesg(line),
        Format::DmesgCtime => dmesg_ctime(line, clock),
        Format::SyslogIso => syslog_iso(line),
        Format::DmesgIso => dmesg_iso(line),
        Format::SyslogBsd => syslog_bsd(line, clock),
        Format::DmesgUntimed => {
            if line.chars().any(|c| c.is_control() && c != '\t') {
                Err("control characters: not text".into())
            } else {
                Ok(Line::Kernel(record(line, NO_LEVEL, 0, Stamp::Untimed)))
            }
        }
    }
}

/// The layout of `sample` (a file's first lines): the one that reads the most of them
/// (the more specific on a tie); without one, text without times when there is any.
pub fn detect<S: AsRef<str>>(sample: &[S], clock: &Clock) -> Option<Format> {
    let mut best: Option<(Format, usize)> = None;
    for f in DETECTED {
        let read = sample
            .iter()
            .filter(|l| {
                matches!(
                    parse_line(f, l.as_ref(), clock),
                    Ok(Line::Kernel(_) | Line::Other)
                )
            })
            .count();
        if read > 0 && best.is_none_or(|(_, n)| read > n) {
            best = Some((f, read));
        }
    }
    match best {
        Some((f, _)) => Some(f),
        None => sample
            .iter()
            .any(|l| {
                matches!(
                    parse_line(Format::DmesgUntimed, l.as_ref(), clock),
                    Ok(Line::Kernel(_))
                )
            })
            .then_some(Format::DmesgUntimed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 2026-12-05 08:30:00 UTC, 10000 s after boot, in UTC.
    const CLOCK: Clock = Clock {
        since_boot_us: 10_000_000_000,
        unix_us: 1_796_459_400_000_000,
        utc_offset_s: 0,
    };

    fn kernel(f: Format, l: &str) -> Record {
        match parse_line(f, l, &CLOCK) {
            Ok(Line::Kernel(r)) => r,
            other => panic!("{l:?} as {f:?}: {other:?}"),
        }
    }

    #[test]
    fn each_layout_reads_as_its_source_writes_it() {
        let m = "mlx5_core 0000:03:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count";
        let at = Stamp::Wall(1_796_458_321_000_000); // 08:12:01 UTC
        let r = kernel(Format::Dmesg, &format!("[ 9123.456789] {m}"));
        assert_eq!(
            (r.message.as_str(), r.stamp),
            (m, Stamp::SinceBoot(9_123_456_789))
        );
        let r = kernel(Format::Dmesg, &format!("<3>[ 9123.456789] {m}"));
        assert_eq!((r.level, r.facility), (3, 0));
        let r = kernel(Format::Dmesg, &format!("kern  :err   : [ 9123.456789] {m}"));
        assert_eq!((r.level, r.message.as_str()), (3, m));
        assert_eq!(
            kernel(
                Format::DmesgCtime,
                &format!("[Sat Dec  5 08:12:01 2026] {m}")
            )
            .stamp,
            at
        );
        assert_eq!(
            kernel(
                Format::DmesgIso,
                &format!("2026-12-05T09:12:01,000000+01:00 {m}")
            )
            .stamp,
            at
        );
        for l in [
            format!("Dec  5 08:12:01 node7 kernel: {m}"),
            format!("Dec 05 08:12:01 node7 kernel: {m}"),
            format!("Dec  5 08:12:01 node7 kernel: [ 9123.456789] {m}"),
            format!("Dec 05 08:12:01 kernel: {m}"),
        ] {
            let r = kernel(Format::SyslogBsd, &l);
            assert_eq!((r.message.as_str(), r.stamp), (m, at), "{l}");
        }
        let r = kernel(
            Format::SyslogBsd,
            &format!("Dec 05 08:12:01.250000 node7 kernel: {m}"),
        );
        assert_eq!(r.stamp, Stamp::Wall(1_796_458_321_250_000));
        for l in [
            format!("2026-12-05T08:12:01.000000+00:00 node7 kernel: {m}"),
            format!("2026-12-05T10:12:01+0200 node7 kernel: {m}"),
            format!("2026-12-05T08:12:01Z node7 kernel: {m}"),
        ] {
            assert_eq!(kernel(Format::SyslogIso, &l).stamp, at, "{l}");
        }
        let r = kernel(
            Format::JournalMonotonic,
            &format!("[ 9123.456789] node7 kernel: {m}"),
        );
        assert_eq!(
            (r.message.as_str(), r.stamp),
            (m, Stamp::SinceBoot(9_123_456_789))
        );
        assert_eq!(kernel(Format::DmesgUntimed, m).stamp, Stamp::Untimed);
        // Other programs' lines, markers, continuations.
        for (f, l) in [
            (
                Format::SyslogBsd,
                "Dec  5 08:12:02 node7 systemd[1]: Started foo.",
            ),
            (
                Format::SyslogIso,
                "2026-12-05T08:12:02+00:00 node7 rsyslogd: start",
            ),
        ] {
            assert_eq!(parse_line(f, l, &CLOCK), Ok(Line::Other), "{l}");
        }
        for l in [
            "-- Boot 0f3c2b8a1d7e4c5b9a6f8e7d6c5b4a39 --",
            "-- Reboot --",
        ] {
            assert_eq!(
                parse_line(Format::JournalMonotonic, l, &CLOCK),
                Ok(Line::Boot)
            );
        }
        for l in [
            "-- Logs begin at Mon 2025-11-24 00:00:01 UTC, end at Mon 2025-12-01 00:00:00 UTC. --",
            "-- No entries --",
            "",
            " SUBSYSTEM=pci",
        ] {
            assert_eq!(
                parse_line(Format::SyslogBsd, l, &CLOCK),
                Ok(Line::Skip),
                "{l}"
            );
        }
    }

    #[test]
    fn a_bsd_time_goes_in_the_year_that_is_not_in_the_future() {
        // On 5 Dec 2026, "Dec 31" is last year's and "Jan  2" this year's.
        let dec31 = kernel(Format::SyslogBsd, "Dec 31 23:00:00 h kernel: x").stamp;
        let Stamp::Wall(us) = dec31 else { panic!() };
        assert!(
            format_unix_us(us).starts_with("2025-12-31"),
            "{}",
            format_unix_us(us)
        );
        let Stamp::Wall(us) = kernel(Format::SyslogBsd, "Jan  2 00:00:00 h kernel: x").stamp else {
            panic!()
        };
        assert!(format_unix_us(us).starts_with("2026-01-02"));
        // Local time: an hour east of UTC is an hour earlier in UTC.
        let east = Clock {
            utc_offset_s: 3600,
            ..CLOCK
        };
        let Ok(Line::Kernel(r)) =
            parse_line(Format::SyslogBsd, "Dec  5 09:12:01 h kernel: x", &east)
        else {
            panic!()
        };
        assert_eq!(r.stamp, Stamp::Wall(1_796_458_321_000_000));
    }

    #[test]
    fn errors_say_what_is_missing() {
        assert_eq!(
            parse_line(Format::Dmesg, "mlx5_core: no time", &CLOCK),
            Err("no '[' time".into())
        );
        assert_eq!(
            parse_line(Format::SyslogBsd, "Dec 32 08:12:01 h kernel: x", &CLOCK),
            Err("no such date".into())
        );
        assert!(
            parse_line(Format::SyslogIso, "2026-12-05T08:12:01+00:00 h x y", &CLOCK)
                .unwrap_err()
                .contains("not a syslog tag")
        );
        assert!(parse_line(Format::DmesgUntimed, "a\u{1b}b", &CLOCK).is_err());
    }

    #[test]
    fn detection_prefers_the_layout_that_reads_the_most() {
        let dmesg = [
            "[    5.000000] usb 1-1: new device",
            "[    6.000000] mlx5_core 0000:03:00.0: x",
        ];
        assert_eq!(detect(&dmesg, &CLOCK), Some(Format::Dmesg));
        let mono = ["[    5.000000] node7 kernel: usb 1-1: new device"];
        assert_eq!(detect(&mono, &CLOCK), Some(Format::JournalMonotonic));
        let iso = [
            "2026-12-05T08:12:19,000000+00:00 mlx5_core 0000:03:00.0: x",
            "2026-12-05T08:12:19,000000+00:00 usb 1-1: y",
        ];
        assert_eq!(detect(&iso, &CLOCK), Some(Format::DmesgIso));
        let sys = ["2026-12-05T08:12:19.000000+00:00 node7 kernel: usb 1-1: y"];
        assert_eq!(detect(&sys, &CLOCK), Some(Format::SyslogIso));
        assert_eq!(detect(&["6,1,10,-;x"], &CLOCK), Some(Format::Kmsg));
        assert_eq!(
            detect(&["Dec  5 08:12:01 h kernel: x"], &CLOCK),
            Some(Format::SyslogBsd)
        );
        assert_eq!(
            detect(&["mlx5_core 0000:03:00.0: x"], &CLOCK),
            Some(Format::DmesgUntimed)
        );
        assert_eq!(detect(&["", "\u{1}\u{2}"], &CLOCK), None);
        assert_eq!(detect::<&str>(&[], &CLOCK), None);
    }

    proptest! {
        #[test]
        fn never_panics(s in ".*") {
            for f in DETECTED.into_iter().chain([Format::DmesgUntimed]) {
                let _ = parse_line(f, &s, &CLOCK);
            }
            let _ = detect(&[&s], &CLOCK);
        }

        #[test]
        fn iso_and_bsd_times_agree(days in 0i64..40_000, secs in 0i64..86_400) {
            let us = (days * 86_400 + secs) * 1_000_000;
            let (y, m, d) = civil_from_days(days);
            let t = format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
            let iso = format!("{y:04}-{m:02}-{d:02}T{t}+00:00 h kernel: x");
            prop_assert_eq!(kernel(Format::SyslogIso, &iso).stamp, Stamp::Wall(us));
            let clock = Clock { unix_us: us, ..CLOCK };
            let Ok(Line::Kernel(r)) = parse_line(Format::SyslogBsd, &format!("{} {d:>2} {t} h kernel: x", MONTHS[m as usize - 1]), &clock) else {
                panic!()
            };
            prop_assert_eq!(r.stamp, Stamp::Wall(us));
        }
    }
}
