//! Clocks and times of kernel log records: since boot (`/dev/kmsg`, `dmesg`) or wall
//! clock (syslog, `journalctl`), dates without a calendar crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// When a record was logged, on the clock its source keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Stamp {
    /// Microseconds since boot (`/dev/kmsg`, `dmesg`, `journalctl -o short-monotonic`).
    SinceBoot(u64),
    /// Microseconds since the Unix epoch (syslog files, `journalctl`, `dmesg -T`).
    Wall(i64),
    /// Not said (`dmesg -t`).
    #[default]
    Untimed,
}

impl Stamp {
    /// `91.000 s after boot`, `2025-11-30 08:12:01 UTC`, `no time`.
    pub fn describe(&self) -> String {
        match self {
            Stamp::SinceBoot(us) => format!("{:.3} s after boot", *us as f64 / 1e6),
            Stamp::Wall(us) => format_unix_us(*us),
            Stamp::Untimed => "no time".into(),
        }
    }
}

/// Microseconds since boot now, on the clock the kernel stamps records with
/// (`CLOCK_MONOTONIC`; both stop during suspend).
pub fn now_since_boot_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000) + (ts.tv_nsec as u64) / 1000
}

/// The time since boot in `/proc/uptime` (fs/proc/uptime.c prints the uptime and the
/// idle time as `"%lu.%02lu %lu.%02lu\n"`, seconds and hundredths), in microseconds.
pub fn uptime_us(text: &str) -> Option<u64> {
    let first = text.split_ascii_whitespace().next()?;
    let (secs, hundredths) = first.split_once('.').unwrap_or((first, "0"));
    if secs.is_empty()
        || !secs.bytes().all(|b| b.is_ascii_digit())
        || hundredths.is_empty()
        || hundredths.len() > 2
        || !hundredths.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let frac: u64 = hundredths.parse().ok()?;
    let frac_us = if hundredths.len() == 1 {
        frac * 100_000
    } else {
        frac * 10_000
    };
    secs.checked_mul(1_000_000)?.checked_add(frac_us)
}

/// The clocks a window is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// Microseconds since boot (the `/dev/kmsg` and `dmesg` clock).
    pub since_boot_us: u64,
    /// Microseconds since the Unix epoch.
    pub unix_us: i64,
    /// Seconds east of UTC of local time now.
    pub utc_offset_s: i64,
}

impl Clock {
    /// The clocks now.
    pub fn now() -> Clock {
        let unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        Clock {
            since_boot_us: now_since_boot_us(),
            unix_us,
            utc_offset_s: local_utc_offset(unix_us / 1_000_000),
        }
    }

    /// The clocks of the host whose proc tree is `procfs`: now, with that host's time
    /// since boot where `procfs` is not this one's `/proc` (a recorded host's or a
    /// fixture's `<procfs>/uptime`), so a recorded log is judged against the uptime it was
    /// recorded at. A proc tree without a readable `uptime` leaves this host's (said at
    /// debug). `health` and `doctor` measure the kernel-log window on it.
    pub fn of_procfs(procfs: &std::path::Path) -> Clock {
        let now = Clock::now();
        if procfs == std::path::Path::new("/proc") {
            return now;
        }
        let file = procfs.join("uptime");
        match std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| uptime_us(&t))
        {
            Some(us) => Clock {
                since_boot_us: us,
                ..now
            },
            None => {
                tracing::debug!(file = %file.display(), "no uptime there: the kernel-log window ends at this host's");
                now
            }
        }
    }

    /// Where a window of `window_us` before now starts, on each clock, and where this
    /// boot's records end.
    pub fn since(&self, window_us: u64) -> Since {
        Since {
            boot_us: self.since_boot_us.saturating_sub(window_us),
            unix_us: self
                .unix_us
                .saturating_sub(i64::try_from(window_us).unwrap_or(i64::MAX)),
            boot_until_us: self
                .since_boot_us
                .saturating_add(boot_clock_margin_us(self.since_boot_us)),
        }
    }
}

/// How far after the clock's time since boot a record of this boot may still be dated.
/// The kernel stamps records with `local_clock()` (kernel/printk/printk.c), which NTP
/// never slews, while NTP slews `CLOCK_MONOTONIC` by up to 500 ppm (`MAXFREQ`,
/// include/linux/timex.h): the two drift apart by up to that share of the uptime, and a
/// record logged while the log is read is dated after the clock was read. Allowed: 1 s
/// and 1000 ppm of the uptime.
fn boot_clock_margin_us(since_boot_us: u64) -> u64 {
    1_000_000 + since_boot_us / 1000
}

/// The start of a window on both clocks, and the end of this boot's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Since {
    pub boot_us: u64,
    pub unix_us: i64,
    /// A record dated later since boot than this was logged in another boot (a recorded
    /// log, or a file kept across reboots): the clock's time since boot, and a margin for
    /// the clocks' drift.
    pub boot_until_us: u64,
}

impl Since {
    /// Whether a record stamped `s` is in the window (one without a time always is; one
    /// of another boot never is).
    pub fn covers(&self, s: Stamp) -> bool {
        match s {
            Stamp::SinceBoot(us) => us >= self.boot_us && us <= self.boot_until_us,
            Stamp::Wall(us) => us >= self.unix_us,
            Stamp::Untimed => true,
        }
    }

    /// Whether a record stamped `s` is dated after this boot's uptime: logged in
    /// another boot, whatever the window.
    pub fn of_another_boot(&self, s: Stamp) -> bool {
        matches!(s, Stamp::SinceBoot(us) if us > self.boot_until_us)
    }
}

/// How far a record's time since boot may go back from the one before it in the same
/// boot: the kernel stamps a record before it takes its place in the log
/// (kernel/printk/printk.c `vprintk_store`), so two CPUs' records may cross by the time
/// between, microseconds; a boot that restarts the clock goes back further (but after
/// a boot shorter than this, which the kmsg sequence numbers still tell).
const CROSSING_US: u64 = 1_000_000;

impl Since {
    /// The window over a log that holds only this boot's records (the kernel log device):
    /// nothing in it is dated after the uptime, whatever the clocks' drift or a read slow
    /// enough to outlast the margin.
    pub fn of_this_boot_only(self) -> Since {
        Since {
            boot_until_us: u64::MAX,
            ..self
        }
    }
}

/// Where a log of several boots passes from one boot to the next: a record whose time
/// since boot goes back (by more than records of two CPUs cross), or whose kmsg sequence
/// number does (both start again at each boot). Wall-clock and untimed records tell
/// nothing.
#[derive(Debug, Clone, Default)]
pub struct Boots {
    last_us: Option<u64>,
    last_seq: Option<u64>,
}

impl Boots {
    /// Whether a record stamped `stamp`, with its kmsg sequence number `seq` (`None` for
    /// a layout without one), begins another boot than the records before it, and why.
    pub fn starts_a_boot(&mut self, stamp: Stamp, seq: Option<u64>) -> Option<String> {
        let mut why = None;
        if let Stamp::SinceBoot(us) = stamp {
            if let Some(last) = self.last_us.filter(|l| us.saturating_add(CROSSING_US) < *l) {
                why = Some(format!(
                    "times since boot go back from {} to {}",
                    Stamp::SinceBoot(last).describe(),
                    stamp.describe()
                ));
            }
            self.last_us = Some(us);
        }
        if let Some(n) = seq {
            if let Some(last) = self.last_seq.filter(|l| n < *l) {
                why.get_or_insert_with(|| {
                    format!("kmsg sequence numbers go back from {last} to {n}")
                });
            }
            self.last_seq = Some(n);
        }
        why
    }
}

/// Local time's offset from UTC at `unix_s` (localtime_r's `tm_gmtoff`).
fn local_utc_offset(unix_s: i64) -> i64 {
    let t = unix_s as libc::time_t;
    // SAFETY: tm is plain data for localtime_r to fill; t outlives the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        0
    } else {
        tm.tm_gmtoff as i64 // c_long: i64 here, i32 on 32-bit targets
    }
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar (H. Hinnant's
/// `days_from_civil`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (`civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub(crate) fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// `2026-12-05 08:12:01 UTC` for microseconds since the epoch.
pub fn format_unix_us(us: i64) -> String {
    let s = us.div_euclid(1_000_000);
    let (y, m, d) = civil_from_days(s.div_euclid(86_400));
    let t = s.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn uptime_as_the_kernel_prints_it() {
        assert_eq!(uptime_us("900.00 1800.55\n"), Some(900_000_000));
        assert_eq!(uptime_us("1021.37 4.01\n"), Some(1_021_370_000));
        assert_eq!(uptime_us("12.5 1.0"), Some(12_500_000));
        assert_eq!(uptime_us("7"), Some(7_000_000));
        for bad in [
            "",
            "\n",
            "x.00 1.00",
            "-1.00 2",
            "1.234 5",
            "1. 2",
            ".5 1",
            "1e3 2",
        ] {
            assert_eq!(uptime_us(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        /// Whatever a proc tree holds: no panic, and what the kernel prints reads back.
        #[test]
        fn uptime_never_panics_and_reads_back(text in ".{0,40}", secs in 0u64..1u64 << 40, c in 0u64..100) {
            let _ = uptime_us(&text);
            proptest::prop_assert_eq!(
                uptime_us(&format!("{secs}.{c:02} 3.00\n")),
                Some(secs * 1_000_000 + c * 10_000)
            );
        }
    }

    use super::*;

    const CLOCK_US: i64 = 1_796_459_400_000_000;

    #[test]
    fn dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2026, 12, 5), 20_792);
        assert_eq!(civil_from_days(20_792), (2026, 12, 5));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(format_unix_us(CLOCK_US), "2026-12-05 08:30:00 UTC");
    }

    /// A record dated after the uptime is of another boot, never in the window; one
    /// dated just after the clock was read (the clocks drift apart) is of this boot.
    #[test]
    fn records_after_the_uptime_are_of_another_boot() {
        let clock = Clock {
            since_boot_us: 900_000_000,
            unix_us: CLOCK_US,
            utc_offset_s: 0,
        };
        let since = clock.since(60_000_000);
        let at = |s: u64| Stamp::SinceBoot(s * 1000);
        // 1021 s with an uptime of 900 s: another boot, whatever the window.
        assert!(!since.covers(at(1_021_000)));
        assert!(since.of_another_boot(at(1_021_000)));
        assert!(!clock.since(u64::MAX).covers(at(1_021_000)));
        // In the window, at its edges, and within the clocks' drift after now.
        for ms in [840_000, 899_999, 900_000, 901_000] {
            assert!(since.covers(at(ms)), "{ms} ms");
            assert!(!since.of_another_boot(at(ms)), "{ms} ms");
        }
        // Before the window: of this boot, not in the window.
        assert!(!since.covers(at(839_999)));
        assert!(!since.of_another_boot(at(839_999)));
        // The margin grows with the uptime (1000 ppm): 1 s + 0.9 s at 900 s.
        assert!(since.covers(at(901_900)));
        assert!(since.of_another_boot(at(901_901)));
        // Wall-clock and untimed records are not told apart by boot.
        assert!(!since.of_another_boot(Stamp::Wall(CLOCK_US + 3_600_000_000)));
        assert!(!since.of_another_boot(Stamp::Untimed));
    }

    /// A log of two boots: times since boot or kmsg sequence numbers going back start
    /// another boot; records of two CPUs crossing by less than a second do not.
    #[test]
    fn times_or_sequences_going_back_start_another_boot() {
        let at = |s: f64| Stamp::SinceBoot((s * 1e6) as u64);
        let mut b = Boots::default();
        assert_eq!(b.starts_a_boot(at(200.0), None), None);
        assert_eq!(b.starts_a_boot(at(300.0), None), None);
        assert_eq!(b.starts_a_boot(at(299.1), None), None, "crossing");
        assert_eq!(
            b.starts_a_boot(at(1.0), None).as_deref(),
            Some("times since boot go back from 299.100 s after boot to 1.000 s after boot")
        );
        assert_eq!(b.starts_a_boot(at(390.0), None), None);
        // A boot shorter than the crossing allowed: only the sequence tells it.
        let mut b = Boots::default();
        assert_eq!(b.starts_a_boot(at(1.0), Some(10)), None);
        assert_eq!(b.starts_a_boot(at(2.0), Some(11)), None);
        assert_eq!(b.starts_a_boot(at(2.0), Some(11)), None, "a record twice");
        assert_eq!(
            b.starts_a_boot(at(3.0), Some(0)).as_deref(),
            Some("kmsg sequence numbers go back from 11 to 0")
        );
        // Wall-clock and untimed records tell nothing.
        let mut b = Boots::default();
        assert_eq!(b.starts_a_boot(Stamp::Wall(CLOCK_US), None), None);
        assert_eq!(b.starts_a_boot(Stamp::Wall(0), None), None);
        assert_eq!(b.starts_a_boot(Stamp::Untimed, None), None);
    }

    /// The kernel log device holds only this boot's records: none is set apart as dated
    /// after the uptime (a slow read soon after boot may outlast the margin).
    #[test]
    fn a_window_of_this_boot_only_sets_nothing_apart() {
        let clock = Clock {
            since_boot_us: 2_000_000,
            unix_us: CLOCK_US,
            utc_offset_s: 0,
        };
        let since = clock.since(60_000_000);
        let late = Stamp::SinceBoot(3_500_000);
        assert!(since.of_another_boot(late));
        let device = since.of_this_boot_only();
        assert!(!device.of_another_boot(late));
        assert!(device.covers(late));
        assert_eq!(device.boot_us, since.boot_us);
    }

    #[test]
    fn stamps_describe_themselves() {
        assert_eq!(
            Stamp::SinceBoot(91_000_000).describe(),
            "91.000 s after boot"
        );
        assert_eq!(Stamp::Wall(CLOCK_US).describe(), "2026-12-05 08:30:00 UTC");
        assert_eq!(Stamp::Untimed.describe(), "no time");
    }
}
