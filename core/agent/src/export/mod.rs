//! Exporters: OTLP (HTTP protobuf and gRPC), the Prometheus endpoint, and JSON lines on
//! standard output. Each runs on its own task or thread and only reads the store, so a slow
//! or failing exporter never stalls another or the collection.

pub mod collectd;
pub mod config;
pub mod otlp;
pub mod prometheus;
pub mod stdout;

/// Why an exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("OTLP exporter for {endpoint}: {message}")]
    Otlp { endpoint: String, message: String },
    #[error("cannot listen on {addr}: {message}")]
    Listen { addr: String, message: String },
}
