//! The host's quarantine, in one place: the state file ([`file`]: read, entered and
//! released under a lock, audited) and the watcher ([`watcher`]: the rules that
//! quarantine, the export, the recovery policy); [`operator`] is what an operator's
//! `rocewatch quarantine enter` and `release` do. The self-test the recovery waits for is
//! handed in ([`SelfTest`]): `rocewatch health` reads this file, so the health checks
//! cannot be below it; the agent implements it with them.

mod file;
pub mod operator;
mod watcher;

pub use file::{
    Quarantine, QuarantineError, QuarantineFile, ACTION_ENTER, ACTION_RELEASE, FILE, LOCK_WAIT,
};
pub use watcher::{SelfTest, SelfTestReport, Settings, Watcher};
