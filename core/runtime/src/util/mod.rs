//! Small pieces every component may use: configuration durations and their bounds (the
//! leaf crate `rocewatch-duration`, re-exported for the crates above the runtime),
//! shutdown signals, giving freed memory back, an error said with its causes (`error`), and the state files root writes or trusts,
//! never through a link (`fs`).

pub use rocewatch_duration as duration;
pub mod error;
pub mod fs;
pub mod memory;
pub mod signals;
