//! OTLP export through the OpenTelemetry SDK and `opentelemetry-otlp`.
//!
//! Every catalog metric (and every metric an external collector declares) becomes an
//! observable instrument whose callback reads the latest values from the [`Store`]; the
//! SDK's periodic reader exports them with cumulative temporality on its own interval,
//! on its own thread, so collection never waits for export. HTTP uses the blocking
//! reqwest client (the async one needs a reactor on the reader's thread); gRPC uses
//! tonic, which captures the tokio runtime it is built in.

use std::sync::Arc;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;
use rocewatch_plugin_api::{MetricKind, Sample, Value};

use super::ExportError;
use crate::config::{OtlpConfig, OtlpProtocol};
use crate::selfmetrics::SelfMetrics;
use crate::store::Store;

/// A running OTLP exporter. Call [`OtlpExporter::shutdown`] for the final export.
pub struct OtlpExporter {
    provider: SdkMeterProvider,
    endpoint: String,
}

fn key_values(s: &Sample) -> Vec<KeyValue> {
    s.attributes
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect()
}

fn u64_of(v: Value) -> u64 {
    match v {
        Value::U64(v) => v,
        Value::F64(f) if f.is_finite() && f >= 0.0 => f.round() as u64,
        Value::F64(_) => 0,
    }
}

/// The resource of every export: `service.name`, `service.version`, `host.name`, plus
/// the configured extras.
pub fn resource(cfg: &OtlpConfig, host: &str) -> Resource {
    let mut attrs = vec![
        KeyValue::new("host.name", host.to_string()),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    ];
    for (k, v) in &cfg.resource {
        attrs.push(KeyValue::new(k.clone(), v.clone()));
    }
    Resource::builder()
        .with_service_name("rocewatch")
        .with_attributes(attrs)
        .build()
}

impl OtlpExporter {
    /// Build the exporter and register every instrument. Must run inside the tokio
    /// runtime (tonic captures it).
    pub fn start(
        cfg: &OtlpConfig,
        host: &str,
        store: Arc<Store>,
        metrics: Arc<SelfMetrics>,
    ) -> Result<OtlpExporter, ExportError> {
        let err = |message: String| ExportError::Otlp {
            endpoint: cfg.endpoint.clone(),
            message,
        };
        let exporter = match cfg.protocol {
            OtlpProtocol::HttpProtobuf => opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(cfg.endpoint.clone())
                .with_timeout(cfg.timeout)
                .with_temporality(Temporality::Cumulative)
                .build(),
            OtlpProtocol::Grpc => opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .with_endpoint(cfg.endpoint.clone())
                .with_timeout(cfg.timeout)
                .with_temporality(Temporality::Cumulative)
                .build(),
        }
        .map_err(|e| err(e.to_string()))?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(cfg.interval)
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource(cfg, host))
            .build();
        let meter = provider.meter("rocewatch");
        register_store_instruments(&meter, &store);
        register_self_metrics(&meter, &metrics);
        Ok(OtlpExporter {
            provider,
            endpoint: cfg.endpoint.clone(),
        })
    }

    /// Export now (used by tests and the demo).
    pub fn flush(&self) -> Result<(), ExportError> {
        self.provider.force_flush().map_err(|e| ExportError::Otlp {
            endpoint: self.endpoint.clone(),
            message: e.to_string(),
        })
    }

    /// The final export, then release the exporter. Blocking: call it off the runtime's
    /// worker threads (`spawn_blocking`).
    pub fn shutdown(self) -> Result<(), ExportError> {
        self.provider.shutdown().map_err(|e| ExportError::Otlp {
            endpoint: self.endpoint,
            message: e.to_string(),
        })
    }
}

fn register_store_instruments(meter: &Meter, store: &Arc<Store>) {
    for d in store.descriptors() {
        let name = d.name.clone();
        let s = Arc::clone(store);
        match d.kind {
            MetricKind::Counter => {
                meter
                    .u64_observable_counter(d.name.clone())
                    .with_unit(d.unit.clone())
                    .with_description(d.description.clone())
                    .with_callback(move |obs| {
                        for series in s.by_name(&name) {
                            obs.observe(u64_of(series.sample.value), &key_values(&series.sample));
                        }
                    })
                    .build();
            }
            MetricKind::Gauge | MetricKind::Histogram => {
                meter
                    .f64_observable_gauge(d.name.clone())
                    .with_unit(d.unit.clone())
                    .with_description(d.description.clone())
                    .with_callback(move |obs| {
                        for series in s.by_name(&name) {
                            obs.observe(series.sample.value.as_f64(), &key_values(&series.sample));
                        }
                    })
                    .build();
            }
        }
    }
}

fn register_self_metrics(meter: &Meter, metrics: &Arc<SelfMetrics>) {
    for entry in rocewatch_metrics::SELF_METRICS {
        match entry.kind {
            MetricKind::Histogram => {
                let h = meter
                    .f64_histogram(entry.name)
                    .with_unit(entry.unit)
                    .with_description(entry.description)
                    .build();
                let _ = metrics.otel_duration.set(h);
            }
            _ => {
                let m = Arc::clone(metrics);
                let name = entry.name;
                meter
                    .u64_observable_counter(entry.name)
                    .with_unit(entry.unit)
                    .with_description(entry.description)
                    .with_callback(move |obs| {
                        for s in m.samples().iter().filter(|s| s.name == name) {
                            obs.observe(u64_of(s.value), &key_values(s));
                        }
                    })
                    .build();
            }
        }
    }
}
