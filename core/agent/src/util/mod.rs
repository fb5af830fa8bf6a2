//! Small pieces every component may use: configuration durations.

pub mod duration;
