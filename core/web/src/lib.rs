//! The agent's listeners: the one HTTP accept loop (`/metrics`, the Alertmanager
//! receiver), and their web configuration in exporter-toolkit's format (TLS, client
//! certificates, basic auth, headers, rate limit), reloaded without a restart unless a
//! change would weaken it.
//!
//! Layout: [`http`] accepts, bounds and serves connections; [`server`] loads and checks
//! the web configuration (`config`, `tls`, `auth`, `weaken`); [`token_bucket`] limits
//! request rates. Nothing here knows the agent: the handlers are handed in.

pub mod http;
pub mod server;
pub mod token_bucket;
