//! The rocewatch plugin contract.
//!
//! Layout:
//! - [`model`]: the data every plugin speaks (devices, ports, GIDs, samples, QoS state,
//!   probe results, remediation requests). Everything is `serde`-serializable because the
//!   same values cross the C ABI of external plugins as JSON.
//! - [`traits`]: the five plugin kinds. Signatures are synchronous and free of any async
//!   runtime: the host calls plugins on blocking threads with a per-call timeout, so a
//!   plugin (built-in or loaded from a `.so`) never needs to know about tokio.
//! - [`attributes`]: a series' attributes as a compact, shared set ([`AttrSet`]).
//! - [`bandwidth`]: bandwidth tests, an optional capability of probe plugins.
//! - [`PluginError`]: what a plugin returns when a call fails.

pub mod attributes;
pub mod bandwidth;
pub mod model;
pub mod options;
pub mod traits;
pub mod unsupported;

pub use attributes::{AttrSet, SetCache};
pub use bandwidth::*;
pub use model::*;
pub use traits::*;
pub use unsupported::UnsupportedHere;

/// An error returned by a plugin call.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PluginError {
    /// The plugin cannot run here (no devices of its kind, platform not supported...).
    /// The host reports it as "unsupported", not as a failure.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The options given to the plugin are invalid.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// Anything else, with a message naming what went wrong (file, device, ...).
    #[error("{0}")]
    Failed(String),
    /// The plugin panicked; the panic was caught at the boundary.
    #[error("panicked: {0}")]
    Panicked(String),
}

impl PluginError {
    pub fn failed(msg: impl Into<String>) -> Self {
        PluginError::Failed(msg.into())
    }
}
