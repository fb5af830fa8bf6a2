//! Delta temporality for what the agent counts itself: its own counters, the plugin call
//! durations and the probes' RTT histograms, whose cumulative totals the agent keeps from
//! their true start (unlike a NIC counter, nothing of theirs happened before the agent
//! saw it). A delta is the totals' increase since the export that last sent the series,
//! whose time is its start; the first is the totals since the series' own start.
//!
//! The state is what the last written export sent, by series: a few dozen entries (an
//! agent series, a histogram per probe peer), not the store's series (those keep their
//! own, see `Series::mark_published`). What an export would send is held apart until the
//! export is known to be written ([`Previous::settle`]): an encoding that fails sends
//! nothing, and the next one covers its interval.

use std::collections::HashMap;
use std::time::SystemTime;

/// What was last sent of each series, and what the export being encoded sends.
#[derive(Debug, Default)]
pub(super) struct Previous {
    /// By series key: the time and the cumulative totals last sent.
    sent: HashMap<String, (SystemTime, Vec<f64>)>,
    /// This export's, until it is written.
    pending: Vec<(String, SystemTime, Vec<f64>)>,
}

impl Previous {
    /// The start and the increases to send for the series `key`, whose cumulative
    /// `totals` (counts, sums) started at `start` and were last updated at `time`. `None`
    /// when it has not changed since it was last sent (`time` not after that: nothing new,
    /// and an increase is sent once). Totals lower than those sent (the series gone and
    /// made again under the same key) start over from `start`.
    pub(super) fn delta(
        &mut self,
        key: String,
        start: SystemTime,
        time: SystemTime,
        totals: &[f64],
    ) -> Option<(SystemTime, Vec<f64>)> {
        let out = match self.sent.get(&key) {
            Some((t, _)) if *t >= time => return None,
            Some((t, before))
                if before.len() == totals.len()
                    && before.iter().zip(totals).all(|(b, n)| n >= b) =>
            {
                let d = totals.iter().zip(before).map(|(n, b)| n - b).collect();
                (*t, d)
            }
            _ => (start, totals.to_vec()),
        };
        self.pending.push((key, time, totals.to_vec()));
        Some(out)
    }

    /// The export was `written`: what it sent is the base of the next. It was not: the
    /// next one sends the same increases (and more).
    pub(super) fn settle(&mut self, written: bool) {
        for (key, time, totals) in self.pending.drain(..) {
            if written {
                self.sent.insert(key, (time, totals));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn increases_are_sent_once_from_the_last_written_export() {
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let mut p = Previous::default();
        assert_eq!(
            p.delta("a".into(), t(1), t(5), &[3.0, 0.5]),
            Some((t(1), vec![3.0, 0.5]))
        );
        p.settle(true);
        // Not changed since: nothing.
        assert_eq!(p.delta("a".into(), t(1), t(5), &[3.0, 0.5]), None);
        assert_eq!(
            p.delta("a".into(), t(1), t(9), &[7.0, 1.5]),
            Some((t(5), vec![4.0, 1.0]))
        );
        // Not written: the next one covers it.
        p.settle(false);
        assert_eq!(
            p.delta("a".into(), t(1), t(12), &[8.0, 2.0]),
            Some((t(5), vec![5.0, 1.5]))
        );
        p.settle(true);
        // Made again under the same key: from its own start.
        assert_eq!(
            p.delta("a".into(), t(20), t(21), &[1.0, 0.25]),
            Some((t(20), vec![1.0, 0.25]))
        );
    }
}
