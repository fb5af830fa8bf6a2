//! What a second signal must not leave behind. The agent then exits at once
//! (`util::signals`), and no destructor runs: the process groups of the commands still
//! running are killed here, and the actions still running get their `result` record
//! (`killed at shutdown`), before the exit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The process groups of the `exec` commands running now.
static GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// How to write the result of each action running now, should the agent exit at once.
type WriteResult = Box<dyn FnOnce() + Send>;
static RESULTS: Mutex<BTreeMap<u64, WriteResult>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A command's process group, from its start until it is killed as a whole. Killing it
/// here and the fast exit's kill exclude each other: the group's id is never signalled
/// after its leader could have been reaped (and the number given to someone else).
pub(super) struct Group(i32);

impl Group {
    pub(super) fn started(pgid: i32) -> Group {
        GROUPS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pgid);
        Group(pgid)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let mut groups = GROUPS.lock().unwrap_or_else(|p| p.into_inner());
        groups.remove(&self.0);
        // SAFETY: killpg only sends a signal; ESRCH (nothing left) is fine.
        unsafe {
            libc::killpg(self.0, libc::SIGKILL);
        }
    }
}

/// An action's result, owed until it is written: by the action when it ends
/// ([`Owed::settle`]), or by a fast exit, whichever comes first (never both).
pub(super) struct Owed(u64);

impl Owed {
    /// `at_fast_exit` writes the result if the agent exits at once before the action ends.
    pub(super) fn new(at_fast_exit: WriteResult) -> Owed {
        rocewatch_runtime::util::signals::before_fast_exit(fast_exit);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        RESULTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, at_fast_exit);
        Owed(id)
    }

    /// The action ended: `write` its result, unless a fast exit wrote one already. Held
    /// while it writes, so that a fast exit does not end the process half-way.
    pub(super) fn settle(self, write: impl FnOnce()) {
        let mut owed = RESULTS.lock().unwrap_or_else(|p| p.into_inner());
        if owed.remove(&self.0).is_some() {
            write();
        }
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        // Settled, or the task ended without a result (the runtime going away).
        RESULTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.0);
    }
}

/// Before the process exits at once: kill every running command's group, then write the
/// result of every running action.
fn fast_exit() {
    let mut owed = RESULTS.lock().unwrap_or_else(|p| p.into_inner());
    {
        let groups = GROUPS.lock().unwrap_or_else(|p| p.into_inner());
        for pgid in groups.iter() {
            // SAFETY: as in Group::drop; the lock keeps the leaders unreaped.
            unsafe {
                libc::killpg(*pgid, libc::SIGKILL);
            }
        }
    }
    for (_, write) in std::mem::take(&mut *owed) {
        write();
    }
}
