//! `[exporters.otlp]`: endpoint, protocol, interval, timeout, headers, compression, TLS,
//! retry and the outage queue.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rocewatch_duration::de_duration;
use serde::Deserialize;

/// OTLP transport.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (port 4318, path `/v1/metrics`).
    #[default]
    #[serde(rename = "http/protobuf")]
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/gRPC (port 4317).
    #[serde(rename = "grpc")]
    #[value(name = "grpc")]
    Grpc,
}

pub(super) fn default_export_interval() -> Duration {
    Duration::from_secs(10)
}

pub(super) fn default_export_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_machine_id_file() -> PathBuf {
    PathBuf::from("/etc/machine-id")
}

/// `[exporters.otlp]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// Endpoint URL: `http://collector:4318/v1/metrics` for `http/protobuf`,
    /// `http://collector:4317` for `grpc`. For `http/protobuf` a base URL (no path, or
    /// `/`) gets `/v1/metrics` appended when the configuration is loaded, as the
    /// OpenTelemetry specification does with `OTEL_EXPORTER_OTLP_ENDPOINT`; any other
    /// path is used as given.
    pub endpoint: String,
    /// `http/protobuf` (default) or `grpc`.
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// How often to export (default `10s`).
    #[serde(default = "default_export_interval", deserialize_with = "de_duration")]
    pub interval: Duration,
    /// Export request timeout (default `10s`).
    #[serde(default = "default_export_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Extra resource attributes; a key given here wins over rocewatch's own
    /// (`service.name`, `host.name`, `host.id`, `service.instance.id`...).
    #[serde(default)]
    pub resource: BTreeMap<String, String>,
    /// The host's machine id (default `/etc/machine-id`; `/host/etc/machine-id` in a pod
    /// that mounts the host's there): `host.id`, and the source of the stable
    /// `service.instance.id` (a UUID v5, as the semantic conventions recommend).
    #[serde(default = "default_machine_id_file")]
    pub machine_id_file: PathBuf,
    /// Extra request headers (HTTP) or metadata (gRPC), e.g. `authorization`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `gzip` (default: OTLP receivers accept it over HTTP and gRPC) or `none`.
    #[serde(default)]
    pub compression: Compression,
    /// Snapshots kept while the endpoint is unreachable (default: 10 minutes' worth,
    /// i.e. 600 s / `interval`). When full, the oldest is dropped and counted.
    #[serde(default)]
    pub queue_size: Option<usize>,
    /// Bytes the queue holds at most, encoded (default 64 MiB): past it the oldest
    /// snapshots are dropped and counted, whatever `queue_size` says (a snapshot of a host
    /// with thousands of ports is tens of megabytes).
    #[serde(default = "default_queue_max_bytes")]
    pub queue_max_bytes: usize,
    /// Bytes a request carries at most, uncompressed (default 4 MiB, gRPC's and the
    /// OpenTelemetry Collector's default bound on a message): a larger export is sent as
    /// several requests, split by metric and series, and a backlog is merged only up to it.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
    /// First retry delay (default `1s`); doubles up to `retry_max`, with ±20 % jitter.
    #[serde(default = "default_retry_initial", deserialize_with = "de_duration")]
    pub retry_initial: Duration,
    /// Longest retry delay (default `30s`).
    #[serde(default = "default_retry_max", deserialize_with = "de_duration")]
    pub retry_max: Duration,
    /// TLS settings (for `https://` endpoints; the system's web PKI roots are used when
    /// no CA is given).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The agent's own logs (what it writes to standard error, at its log level) sent as
    /// OTLP logs as well, to this endpoint's `/v1/logs` (HTTP) or this endpoint (gRPC),
    /// with the same TLS, headers, timeout and resource (default `false`).
    #[serde(default)]
    pub agent_logs: bool,
    /// Events (remediation decisions and results, rule transitions, quarantine entered
    /// and released) sent as OTLP log records to this endpoint's `/v1/logs` (HTTP) or
    /// this endpoint (gRPC), with the same TLS, headers, retry and resource as the
    /// metrics (default `true`; the audit log stays the record either way).
    #[serde(default = "default_events")]
    pub events: bool,
    /// Aggregation temporality of counters: `cumulative` (default), `delta` or
    /// `lowmemory`, as `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` names them.
    #[serde(default)]
    pub temporality: Temporality,
    /// Where logs go (events, the agent's own logs), the URL as is, as
    /// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` is used; a base URL gets `/v1/logs` appended
    /// for `http/protobuf` when the configuration is loaded. Unset: beside the metrics
    /// (see [`OtlpConfig::logs_url`]).
    #[serde(default)]
    pub logs_endpoint: Option<String>,
}

/// The temporality preference of the OpenTelemetry metrics exporter specification.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Temporality {
    /// Every point counts from the counter's start (what rocewatch reads from the NIC).
    #[default]
    Cumulative,
    /// Counters and histograms as increases over each interval.
    Delta,
    /// Delta for synchronous counters and histograms, cumulative for the rest (the
    /// specification's `lowmemory`).
    #[serde(rename = "lowmemory")]
    LowMemory,
}

/// Request compression.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    #[default]
    Gzip,
}

/// `[exporters.otlp.tls]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CA that signed the receiver's certificate.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for receivers that require mutual TLS.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

pub(super) fn default_retry_initial() -> Duration {
    Duration::from_secs(1)
}

/// The default `max_request_bytes`: 4 MiB, gRPC's and the OpenTelemetry Collector's
/// default bound on a message (a receiver's bound on a request is commonly a few MiB, and
/// a gzip'd merge is inflated and compressed again whole).
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

pub(super) fn default_max_request_bytes() -> usize {
    MAX_REQUEST_BYTES
}

pub(super) fn default_queue_max_bytes() -> usize {
    64 << 20
}

fn default_events() -> bool {
    true
}

pub(super) fn default_retry_max() -> Duration {
    Duration::from_secs(30)
}

impl OtlpConfig {
    /// The queue size in snapshots.
    pub fn queue_capacity(&self) -> usize {
        self.queue_size.unwrap_or_else(|| {
            let per = self.interval.as_secs_f64().max(0.001);
            ((600.0 / per).ceil() as usize).clamp(2, 100_000)
        })
    }
}

impl OtlpConfig {
    /// Where logs go (events, the agent's own logs): `logs_endpoint` when set; else, for
    /// OTLP/HTTP, the metrics endpoint's `/v1/metrics` as `/v1/logs` (a base URL, no path
    /// or `/`, gets `/v1/logs`), as the OTLP exporter specification builds each signal's
    /// path from one base; gRPC has one endpoint for every signal. A metrics URL with any
    /// other path says nothing of where logs go (the specification's signal-specific
    /// endpoint is for its signal alone): an error that names the fix.
    pub fn logs_url(&self) -> Result<String, String> {
        if let Some(url) = &self.logs_endpoint {
            return Ok(url.clone());
        }
        if self.protocol == OtlpProtocol::Grpc {
            return Ok(self.endpoint.clone());
        }
        // A query (`?tenant=a`) stays after the path it belongs to.
        let (url, query) = match self.endpoint.split_once('?') {
            Some((u, q)) => (u, Some(q)),
            None => (self.endpoint.as_str(), None),
        };
        let trimmed = url.trim_end_matches('/');
        let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, r)| r);
        let base = match trimmed.strip_suffix("/v1/metrics") {
            Some(base) => base,
            None if !after_scheme.contains('/') => trimmed,
            None => {
                return Err(format!(
                    "where logs go is not known: the metrics endpoint {} does not end in /v1/metrics (set exporters.otlp.logs_endpoint or OTEL_EXPORTER_OTLP_LOGS_ENDPOINT to the logs URL, or turn events off with exporters.otlp.events = false)",
                    self.endpoint
                ))
            }
        };
        Ok(match query {
            Some(q) => format!("{base}/v1/logs?{q}"),
            None => format!("{base}/v1/logs"),
        })
    }

    /// [`OtlpConfig::logs_url`] for messages: the metrics endpoint when none is known.
    pub fn logs_endpoint(&self) -> String {
        self.logs_url().unwrap_or_else(|_| self.endpoint.clone())
    }

    pub fn new(endpoint: impl Into<String>, protocol: OtlpProtocol) -> Self {
        OtlpConfig {
            endpoint: endpoint.into(),
            protocol,
            interval: default_export_interval(),
            timeout: default_export_timeout(),
            resource: BTreeMap::new(),
            machine_id_file: default_machine_id_file(),
            headers: BTreeMap::new(),
            compression: Compression::Gzip,
            queue_size: None,
            queue_max_bytes: default_queue_max_bytes(),
            max_request_bytes: default_max_request_bytes(),
            retry_initial: default_retry_initial(),
            retry_max: default_retry_max(),
            tls: None,
            agent_logs: false,
            events: true,
            temporality: Temporality::Cumulative,
            logs_endpoint: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The logs endpoint beside the metrics': `/v1/metrics` becomes `/v1/logs`, a base URL
    /// gets it, a query stays last; gRPC's is the same endpoint; an explicit one is used
    /// as is; a metrics URL of any other path is refused, naming the fix.
    #[test]
    fn the_logs_endpoint_is_the_metrics_endpoints_base_with_v1_logs() {
        let http = OtlpProtocol::HttpProtobuf;
        let logs = |metrics: &str| OtlpConfig::new(metrics, http).logs_url();
        for (metrics, want) in [
            ("http://c:4318/v1/metrics", "http://c:4318/v1/logs"),
            ("http://c:4318/v1/metrics/", "http://c:4318/v1/logs"),
            ("http://c:4318", "http://c:4318/v1/logs"),
            ("http://c:4318/", "http://c:4318/v1/logs"),
            (
                "https://vm:8428/opentelemetry/v1/metrics",
                "https://vm:8428/opentelemetry/v1/logs",
            ),
            (
                "http://c:4318/v1/metrics?tenant=a",
                "http://c:4318/v1/logs?tenant=a",
            ),
        ] {
            assert_eq!(logs(metrics).as_deref(), Ok(want), "{metrics}");
        }
        // A signal-specific metrics URL: nothing invented (it gave .../metrics/v1/logs).
        for metrics in [
            "http://c:4318/otlp",
            "http://c:4318/metrics",
            "http://c/a/b?x=1",
        ] {
            let e = logs(metrics).unwrap_err();
            assert!(
                e.contains("exporters.otlp.logs_endpoint")
                    && e.contains("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"),
                "{metrics}: {e}"
            );
        }
        let grpc = OtlpConfig::new("http://c:4317", OtlpProtocol::Grpc);
        assert_eq!(grpc.logs_url().as_deref(), Ok("http://c:4317"));
        let mut explicit = OtlpConfig::new("http://c:4318/metrics", http);
        explicit.logs_endpoint = Some("http://l:4318/ingest/logs".into());
        assert_eq!(
            explicit.logs_url().as_deref(),
            Ok("http://l:4318/ingest/logs")
        );
    }
}
