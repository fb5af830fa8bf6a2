//! How long a sweep takes, from the schedule's rounds and per-test durations.
//!
//! Measured in the soft-RoCE lab (`integration-tests/lab/preflight.sh`, two emulated
//! guests): one round of 3 s RDMA WRITE and 10 probes each way took 7.2 to 7.4 s per
//! host, start included; start and setup together cost 1.2 to 1.4 s, well under the
//! 5 s + 3 s assumed below, which stay as a margin for a fleet's slowest host.
//!
//! The assumptions:
//! - the rails of a host run in parallel within a round (on a rail-optimized fabric rank
//!   k of every host is its own switch plane, and each NIC its own PCIe link), so a round
//!   takes as long as one rail's tests, whatever the rail count;
//! - the two directions of a pair run in sequence (a NIC's transmit is measured alone,
//!   not against its own receive), each a bandwidth test then a latency test;
//! - every pair of a round runs at once (the matching keeps each host in one pair), and
//!   the rounds run one after the other, each starting with `setup` (connecting the
//!   queue pairs, exchanging addresses, waiting for the slowest host of the last round);
//! - `start` is paid once: the agent's start, discovery, reading the host list.
//!
//! So: `start + rounds × (setup + 2 × (bandwidth + latency))`, independent of the number
//! of hosts and rails except through `rounds`.

use std::time::Duration;

/// Per-test durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durations {
    /// Once per sweep.
    pub start: Duration,
    /// Once per round.
    pub setup: Duration,
    /// One bandwidth test, one direction (`ib_write_bw -D`).
    pub bandwidth: Duration,
    /// One latency test, one direction.
    pub latency: Duration,
}

impl Default for Durations {
    /// 5 s of RDMA WRITE per direction ("a few seconds": long enough for the bandwidth
    /// to settle past the queue pairs' ramp, the shortest `rocewatch bandwidth` allows
    /// is 1 s), 1 s of latency, 3 s of setup per round, 5 s of start.
    fn default() -> Self {
        Durations {
            start: Duration::from_secs(5),
            setup: Duration::from_secs(3),
            bandwidth: Duration::from_secs(5),
            latency: Duration::from_secs(1),
        }
    }
}

/// The wall time of a sweep of `rounds` rounds.
pub fn wall_time(rounds: usize, d: &Durations) -> Duration {
    let round = d.setup + (d.bandwidth + d.latency) * 2;
    d.start + round * u32::try_from(rounds).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Mode, Schedule};

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("gpu{i:03}")).collect()
    }

    /// 128 hosts × 8 rails (rails in parallel, so the count of rails does not enter):
    /// 3 rounds × (3 s + 2 × (5 s + 1 s)) + 5 s = 50 s, under the 2 minutes; an
    /// odd count takes 4 rounds, 65 s. All pairs would take 127 rounds, over half an hour.
    #[test]
    fn default_sweep_of_128_hosts_fits_in_two_minutes() {
        let d = Durations::default();
        let even = Schedule::new(hosts(128), Mode::Default).unwrap();
        assert_eq!(wall_time(even.rounds(), &d), Duration::from_secs(50));
        let odd = Schedule::new(hosts(129), Mode::Default).unwrap();
        assert_eq!(wall_time(odd.rounds(), &d), Duration::from_secs(65));
        for n in [2, 3, 128, 129, 1024, 4097] {
            let s = Schedule::new(hosts(n), Mode::Default).unwrap();
            assert!(
                wall_time(s.rounds(), &d) < Duration::from_secs(120),
                "n={n}"
            );
        }
        let all = Schedule::new(hosts(128), Mode::AllPairs).unwrap();
        assert_eq!(
            wall_time(all.rounds(), &d),
            Duration::from_secs(5 + 127 * 15)
        );
    }
}
