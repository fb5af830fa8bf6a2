//! What a second signal must not leave behind. The agent then exits at once
//! (`util::signals`), and no destructor runs: every process of the commands still running
//! is killed here (`processes`), and the actions still running get their `result` record
//! (`killed at shutdown`), before the exit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How to write the result of each action running now, should the agent exit at once.
type WriteResult = Box<dyn FnOnce() + Send>;
static RESULTS: Mutex<BTreeMap<u64, WriteResult>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

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

/// Before the process exits at once: kill every process of every running command, then
/// write the result of every running action.
fn fast_exit() {
    let mut owed = RESULTS.lock().unwrap_or_else(|p| p.into_inner());
    super::processes::kill_every_action();
    for (_, write) in std::mem::take(&mut *owed) {
        write();
    }
}
