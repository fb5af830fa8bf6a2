//! The plugin host: the explicit list of built-in plugins and `.so` loading
//! ([`registry`]), each plugin's settings ([`settings`]), the one guarded way to call a
//! plugin: blocking thread, timeout, panic caught, status and self-metrics ([`call`]),
//! and discovery across the discovery plugins ([`discovery`]).

pub mod call;
pub mod discovery;
pub mod registry;
pub mod settings;
