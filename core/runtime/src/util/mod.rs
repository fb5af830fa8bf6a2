//! Small pieces every component may use: configuration durations, shutdown signals, the
//! HTTP accept loop of the listeners and their web configuration (TLS, basic auth), the
//! state files root writes or trusts, never through a link (`fs`), and text for a shell
//! (`shell`: quoting, one-line text).

pub mod duration;
pub mod fs;
pub mod http;
pub mod memory;
pub mod rate;
pub mod shell;
pub mod signals;
pub mod web;
