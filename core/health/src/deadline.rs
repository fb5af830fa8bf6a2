//! The checks within `[health] timeout`. Each part runs on a thread of its own and says
//! on a shared [`Board`] what it is reading before it reads; the verdict is given at the
//! deadline on what is known. A scheduler's gate that never answers never drains: slurmd
//! kills its HealthCheckProgram, node-problem-detector's rule times out into `Unknown`.
//!
//! A part still reading at the deadline is an unhealthy finding naming what it reads: a
//! sysfs file or a netlink dump that does not answer within seconds is what a job's
//! setup would wait on too (`ibv_open_device` reads the same sysfs). The kernel log and
//! the verbs libraries are the host's files, not the NIC: slow there is "cannot tell"
//! (a slow disk or a large journal must not drain every busy node). A part that
//! never started (it waited on one that did not finish) cannot tell. The threads of
//! parts that did not finish are left to end with the process: a read blocked in the
//! kernel cannot be taken back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::config::CheckName;
use super::finding::{Finding, Status};

/// The parts in the order their findings are reported: what `scope` says of the ports
/// (and the inventory's own errors), then each check.
pub const ORDER: [CheckName; 13] = [
    CheckName::Devices,
    CheckName::Ports,
    CheckName::Pcie,
    CheckName::Gid,
    CheckName::Mtu,
    CheckName::Builds,
    CheckName::Link,
    CheckName::Optics,
    CheckName::KernelLog,
    CheckName::Qps,
    CheckName::Quarantine,
    CheckName::Userspace,
    CheckName::Agent,
];

/// A part of the run: the inventory and port scope, or one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Scope,
    Check(CheckName),
}

impl Part {
    fn index(self) -> usize {
        match self {
            Part::Scope => 0,
            Part::Check(c) => 1 + ORDER.iter().position(|&o| o == c).expect("in ORDER"),
        }
    }
}

#[derive(Debug, Clone)]
enum Slot {
    /// Not started: waits on this.
    Waiting(String),
    /// Reading this, for this check.
    Reading(&'static str, String),
    Done(Vec<Finding>),
}

/// Where each part of one run stands.
pub struct Board {
    slots: Mutex<Vec<Slot>>,
    changed: tokio::sync::Notify,
}

impl Board {
    pub fn new() -> Arc<Board> {
        Arc::new(Board {
            slots: Mutex::new(vec![Slot::Waiting("the start".into()); ORDER.len() + 1]),
            changed: tokio::sync::Notify::new(),
        })
    }

    fn set(&self, part: Part, slot: Slot) {
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        // A part's findings, once given, stay.
        if !matches!(s[part.index()], Slot::Done(_)) {
            s[part.index()] = slot;
        }
        drop(s);
        self.changed.notify_one();
    }

    /// `part` waits on `on` (another part that has yet to finish).
    pub fn waiting(&self, part: Part, on: impl Into<String>) {
        self.set(part, Slot::Waiting(on.into()));
    }

    /// `part` reads `what` (for the check named `check`) next.
    pub fn reading(&self, part: Part, check: &'static str, what: impl Into<String>) {
        self.set(part, Slot::Reading(check, what.into()));
    }

    /// `part` finished with `findings`.
    pub fn done(&self, part: Part, findings: Vec<Finding>) {
        self.set(part, Slot::Done(findings));
    }

    fn all_done(&self) -> bool {
        let s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        s.iter().all(|s| matches!(s, Slot::Done(_)))
    }

    /// Until every part is done or `deadline` passes.
    pub async fn wait(&self, deadline: tokio::time::Instant) {
        while !self.all_done() {
            if tokio::time::timeout_at(deadline, self.changed.notified())
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Every finding in [`ORDER`]: a part that did not finish within `timeout` as a
    /// finding of its own.
    pub fn findings(&self, timeout: Duration) -> Vec<Finding> {
        let within = humantime::format_duration(timeout);
        let s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let name = |i: usize| match i {
            0 => "devices",
            i => ORDER[i - 1].as_str(),
        };
        s.iter()
            .enumerate()
            .flat_map(|(i, slot)| match slot {
                Slot::Done(f) => f.clone(),
                Slot::Reading(check, what) => vec![Finding::host(
                    check,
                    slow_status(check),
                    format!("did not finish within {within} ([health] timeout): reading {what}"),
                )],
                Slot::Waiting(on) => vec![Finding::host(
                    name(i),
                    Status::Unknown,
                    format!("not run within {within} ([health] timeout): waited on {on}"),
                )],
            })
            .collect()
    }
}

/// What a part still reading at the deadline weighs. The NIC's own state (sysfs, the
/// RDMA netlink dump, the quarantine) not answering is unfit for jobs; the host's files
/// (the kernel log through `journalctl` or a log file, the verbs libraries under
/// `rootfs`) being slow is a slow disk or a large journal, which says nothing of the
/// NIC: cannot tell, never a drain of every busy node. So is a transceiver module's read
/// (an I2C transaction, through the NIC's firmware on mlx5) or the `link` check's history
/// in the state directory: a read's trouble, not the link's.
fn slow_status(check: &str) -> Status {
    const HOST_FILES_OR_SLOW_READS: [CheckName; 4] = [
        CheckName::KernelLog,
        CheckName::Userspace,
        CheckName::Optics,
        CheckName::Link,
    ];
    if HOST_FILES_OR_SLOW_READS.iter().any(|c| c.as_str() == check) {
        Status::Unknown
    } else {
        Status::Unhealthy
    }
}

/// Threads of parts still running, of every run in this process: a read blocked in the
/// kernel keeps its thread after the verdict.
static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many threads of earlier runs are still reading (a caller that runs health again
/// and again, the agent's recovery self-test, waits for none before the next run rather
/// than leave one more blocked thread at every tick).
pub fn threads_in_flight() -> usize {
    IN_FLIGHT.load(std::sync::atomic::Ordering::SeqCst)
}

/// Run `f` on a thread of its own named `name`; a thread that cannot be started makes
/// `part` a finding that says so.
pub fn spawn(board: &Arc<Board>, part: Part, name: &str, f: impl FnOnce() + Send + 'static) {
    use std::sync::atomic::Ordering;
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let counted = move || {
        // Counted down however `f` ends (a panic included).
        struct Done;
        impl Drop for Done {
            fn drop(&mut self) {
                IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _done = Done;
        f()
    };
    if let Err(e) = std::thread::Builder::new()
        .name(format!("health-{name}"))
        .spawn(counted)
    {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        board.done(
            part,
            vec![Finding::host(
                match part {
                    Part::Scope => "devices",
                    Part::Check(c) => c.as_str(),
                },
                Status::Unknown,
                format!("cannot start a thread to read it: {e}"),
            )],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_counted_while_it_runs() {
        // Other tests of this binary run health beside it: only "at least this one".
        let board = Board::new();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        spawn(&board, Part::Scope, "test", move || {
            let _ = rx.recv();
        });
        assert!(threads_in_flight() >= 1);
        drop(tx);
    }

    /// A module's I2C read or the flap history still going at the deadline is the read's
    /// trouble: cannot tell, never a drain.
    #[tokio::test]
    async fn a_module_read_or_the_flap_history_still_going_at_the_deadline_cannot_tell() {
        for (check, what) in [
            (CheckName::Optics, "ens1f0np0's module EEPROM"),
            (CheckName::Link, "/var/lib/rocewatch/link-history.json"),
        ] {
            let b = Board::new();
            b.done(Part::Scope, vec![]);
            for c in ORDER.into_iter().filter(|&c| c != check) {
                b.done(Part::Check(c), vec![]);
            }
            b.reading(Part::Check(check), check.as_str(), what);
            let deadline = tokio::time::Instant::now() + Duration::from_millis(20);
            b.wait(deadline).await;
            let f = b.findings(Duration::from_millis(20));
            assert_eq!(f.len(), 1, "{f:?}");
            assert_eq!(f[0].status, Status::Unknown, "{f:?}");
            assert!(f[0].what.ends_with(what), "{f:?}");
        }
    }

    #[tokio::test]
    async fn a_part_still_reading_at_the_deadline_is_unhealthy_and_names_what_it_reads() {
        let b = Board::new();
        for c in ORDER {
            b.done(Part::Check(c), vec![]);
        }
        b.reading(Part::Scope, "ports", "class/net/eth0/flags");
        let deadline = tokio::time::Instant::now() + Duration::from_millis(50);
        b.wait(deadline).await;
        let f = b.findings(Duration::from_millis(50));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].status, Status::Unhealthy);
        assert_eq!(
            f[0].what,
            "did not finish within 50ms ([health] timeout): reading class/net/eth0/flags"
        );
    }
}
