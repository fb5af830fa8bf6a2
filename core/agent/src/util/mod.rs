//! Small pieces every component may use: configuration durations, shutdown signals.

pub mod duration;
pub mod signals;
