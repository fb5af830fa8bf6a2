//! Exporters, one folder each with its configuration section: OTLP (HTTP protobuf and
//! gRPC, with an outage queue), the Prometheus endpoint (`/metrics`, `/healthz`, `/rules`),
//! collectd (network protocol and the Exec plugin's PUTVAL lines). Each runs on its own
//! task or thread and reads the store on its own schedule, so every exporter sees every
//! series (collected, derived, probe and QoS) and a slow or failing exporter never stalls
//! another or the collection. `stdout` is the exception by design: it prints each
//! collection as it happens (JSON lines), from the pipeline's collection events.

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
