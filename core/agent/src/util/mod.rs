//! Small pieces every component may use: configuration durations, shutdown signals, the
//! HTTP accept loop of the listeners and their web configuration (TLS, basic auth), and
//! the state files root writes or trusts, never through a link (`fs`).

pub mod duration;
pub mod fs;
pub mod http;
pub mod memory;
pub mod rate;
pub mod signals;
pub mod web;
