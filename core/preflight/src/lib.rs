//! `rocewatch preflight`'s brain: a sweep across a job's hosts before the job starts,
//! with no coordinator. Every host runs the same command on the same host list; each
//! derives the same [`Schedule`] from the sorted list and knows its partner and role in
//! every round.
//!
//! Layout:
//! - [`schedule`]: rounds in which every host has at most one partner (the circle
//!   method); the default takes a constant number of rounds, `all_pairs` N−1 (N even) or
//!   N (N odd); who drives and who serves in each direction.
//! - [`rails`]: the NIC of rank k on one host against the NIC of rank k on the other; the
//!   plan of every test, the ranks one side lacks reported untested.
//! - [`verdict`]: each test judged against the share of line rate and the latency bound,
//!   then the inference: a NIC is named bad only when it fails against at least two
//!   partners whose other tests pass; a host whose every rail is bad is a bad host; a
//!   slow direction is named as such; anything else that failed is "cannot tell", saying
//!   why.
//! - [`report`]: text in `ib_write_bw`'s spirit (a row per test) and JSON; the exit
//!   status (0 pass, 1 a named failure, 2 cannot tell).
//! - [`timing`]: the wall time a schedule takes, from per-test durations.
//! - [`results`]: the tests one host drove as JSON lines, and those lines read back:
//!   each host measures only what it drives, so the verdict over the whole job judges
//!   every host's lines together (`srun` gathers the tasks' output in one place).
//! - [`control`]: the line protocol between partners (the serving host's rail addresses,
//!   and the driver's "done" that ends a step), so two tests never share a NIC.
//! - [`runner`]: [`PairRunner`], the measurement a caller supplies ([`verbs`]; tests:
//!   simulated results), and [`run_host`], this host's part of the schedule.
//! - [`verbs`]: the measurement for real: [`verbs::VerbsRunner`], the control port's
//!   server and client over TCP, and per rail the verbs probe plugin's RDMA WRITE
//!   bandwidth test and latency probes (the plugins started by the caller).
//!
//! Everything but [`verbs`] is pure and deterministic (nothing read from the host or
//! the network), so every host and every test derives the same answer.

pub mod control;
pub mod rails;
pub mod report;
pub mod results;
pub mod runner;
pub mod schedule;
pub mod timing;
pub mod verbs;
pub mod verdict;

pub use rails::{match_rails, plan, Endpoint, HostRails, Nic, Plan, PlannedTest, Untested};
pub use report::{exit_code, json, text};
pub use runner::{run_host, steps, Measurement, PairRunner, Step};
pub use schedule::{Mode, Phase, Role, Schedule, ScheduleError, DEFAULT_PARTNERS};
pub use timing::{wall_time, Durations};
pub use verdict::{
    judge, judge_test, FailedDirection, Finding, Judged, Judgement, Status, TestResult, Thresholds,
    ThresholdsError, Verdict,
};

#[cfg(test)]
mod sim;
