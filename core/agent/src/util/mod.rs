//! Small pieces every component may use: configuration durations, shutdown signals, the
//! HTTP accept loop of the listeners.

pub mod duration;
pub mod http;
pub mod signals;
