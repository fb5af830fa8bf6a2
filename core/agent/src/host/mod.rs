//! The plugin host: the registry of built-in and `.so` plugins, and the guarded call.

pub mod call;
pub mod registry;
pub mod settings;
