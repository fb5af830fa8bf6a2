//! Exporters: OTLP (HTTP protobuf and gRPC) and JSON lines on standard output.

pub mod otlp;
pub mod stdout;

/// Why an exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("OTLP exporter for {endpoint}: {message}")]
    Otlp { endpoint: String, message: String },
}
