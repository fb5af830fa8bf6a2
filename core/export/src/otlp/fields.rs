//! The protobuf field numbers the OTLP encoder writes (and the splitter of a request too
//! large reads), one module per message, each constant named after its field in
//! opentelemetry-proto's `.proto` files (`collector/metrics/v1/metrics_service.proto`,
//! `metrics/v1/metrics.proto`, `common/v1/common.proto`, `resource/v1/resource.proto`).
//! The numbers are the protos' own: the tests decode what is written with the official
//! generated code (`opentelemetry-proto`) and pin its bytes (`encode/golden.hex`).

/// `ExportMetricsServiceRequest` (metrics_service.proto).
pub(super) mod export_metrics_service_request {
    pub(crate) const RESOURCE_METRICS: u32 = 1;
}

/// `ResourceMetrics` (metrics.proto).
pub(super) mod resource_metrics {
    pub(crate) const RESOURCE: u32 = 1;
    pub(crate) const SCOPE_METRICS: u32 = 2;
    pub(crate) const SCHEMA_URL: u32 = 3;
}

/// `ScopeMetrics` (metrics.proto).
pub(super) mod scope_metrics {
    pub(crate) const SCOPE: u32 = 1;
    pub(crate) const METRICS: u32 = 2;
    pub(crate) const SCHEMA_URL: u32 = 3;
}

/// `Metric` (metrics.proto): its head, and the `data` oneof.
pub(super) mod metric {
    pub(crate) const NAME: u32 = 1;
    pub(crate) const DESCRIPTION: u32 = 2;
    pub(crate) const UNIT: u32 = 3;
    pub(crate) const GAUGE: u32 = 5;
    pub(crate) const SUM: u32 = 7;
    pub(crate) const HISTOGRAM: u32 = 9;
    pub(crate) const EXPONENTIAL_HISTOGRAM: u32 = 10;
    pub(crate) const SUMMARY: u32 = 11;
}

/// `Gauge`, `Sum`, `Histogram`, `ExponentialHistogram`, `Summary` (metrics.proto): the
/// fields they share, by the same numbers.
pub(super) mod data {
    pub(crate) const DATA_POINTS: u32 = 1;
    /// Not in `Gauge` and `Summary`.
    pub(crate) const AGGREGATION_TEMPORALITY: u32 = 2;
    /// `Sum` only.
    pub(crate) const IS_MONOTONIC: u32 = 3;
}

/// `AggregationTemporality` (metrics.proto), the enum's values.
pub(super) mod aggregation_temporality {
    pub(crate) const DELTA: u64 = 1;
    pub(crate) const CUMULATIVE: u64 = 2;
}

/// `NumberDataPoint` (metrics.proto).
pub(super) mod number_data_point {
    pub(crate) const START_TIME_UNIX_NANO: u32 = 2;
    pub(crate) const TIME_UNIX_NANO: u32 = 3;
    pub(crate) const AS_DOUBLE: u32 = 4;
    pub(crate) const AS_INT: u32 = 6;
    pub(crate) const ATTRIBUTES: u32 = 7;
}

/// `HistogramDataPoint` (metrics.proto).
pub(super) mod histogram_data_point {
    pub(crate) const START_TIME_UNIX_NANO: u32 = 2;
    pub(crate) const TIME_UNIX_NANO: u32 = 3;
    pub(crate) const COUNT: u32 = 4;
    pub(crate) const SUM: u32 = 5;
    pub(crate) const BUCKET_COUNTS: u32 = 6;
    pub(crate) const EXPLICIT_BOUNDS: u32 = 7;
    pub(crate) const ATTRIBUTES: u32 = 9;
}

/// `Resource` (resource.proto).
pub(super) mod resource {
    pub(crate) const ATTRIBUTES: u32 = 1;
}

/// `InstrumentationScope` (common.proto).
pub(super) mod instrumentation_scope {
    pub(crate) const NAME: u32 = 1;
    pub(crate) const VERSION: u32 = 2;
}

/// `KeyValue` (common.proto).
pub(super) mod key_value {
    pub(crate) const KEY: u32 = 1;
    pub(crate) const VALUE: u32 = 2;
}

/// `AnyValue` (common.proto).
pub(super) mod any_value {
    pub(crate) const STRING_VALUE: u32 = 1;
}
