//! Small pieces every component may use: configuration durations and their bounds,
//! shutdown signals, giving freed memory back, and the state files root writes or trusts,
//! never through a link (`fs`).

pub mod duration;
pub mod fs;
pub mod memory;
pub mod signals;
