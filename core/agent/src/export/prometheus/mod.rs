//! The Prometheus exposition: `/metrics` (text format 0.0.4, or OpenMetrics 1.0 when the
//! scraper asks for it), `/healthz`, and the same text for `collect --format prometheus`.
//!
//! Names come from `rocewatch_metrics::naming` (the catalog), so `/metrics`, OTLP into
//! VictoriaMetrics and docs/METRICS.md agree. The server only reads the store: a scrape
//! never triggers a collection and never waits for one.

pub mod config;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use rocewatch_metrics::naming::{
    prometheus_family, prometheus_labels, prometheus_unit, write_prometheus_labels,
};
use rocewatch_plugin_api::{MetricDescriptor, MetricKind, Sample, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::selfmetrics::SelfMetrics;
use crate::store::{Series, Store};

/// Which exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`
    Text,
    /// `application/openmetrics-text; version=1.0.0`
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// Pick the format from an `Accept` header, as Prometheus negotiates it.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }
}

fn escape_help(s: &str, format: Format) -> String {
    let s = s.replace('\\', "\\\\").replace('\n', "\\n");
    match format {
        Format::OpenMetrics => s.replace('"', "\\\""),
        Format::Text => s,
    }
}

#[cfg(test)]
fn number(v: Value) -> String {
    let mut s = String::new();
    write_number(&mut s, v);
    s
}

fn write_number(out: &mut String, v: Value) {
    match v {
        Value::U64(u) => {
            let _ = write!(out, "{u}");
        }
        Value::F64(f) if f.is_nan() => out.push_str("NaN"),
        Value::F64(f) if f.is_infinite() => out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" }),
        Value::F64(f) => {
            let _ = write!(out, "{f}");
        }
    }
}

/// One metric family: its metadata lines, then its samples.
fn family(out: &mut String, d: &MetricDescriptor, samples: &[&Sample], format: Format) {
    let sample_name = family_header(out, d, format);
    for s in samples {
        out.push_str(&sample_name);
        write_prometheus_labels(out, &s.attributes);
        out.push(' ');
        write_number(out, s.value);
        out.push('\n');
    }
}

/// The HELP/TYPE/UNIT lines of a family; returns the name its sample lines start with.
fn family_header(out: &mut String, d: &MetricDescriptor, format: Format) -> String {
    let fam = prometheus_family(&d.name, &d.unit, d.kind);
    let (type_name, sample_name, type_word) = match (d.kind, format) {
        (MetricKind::Counter, Format::Text) => {
            (format!("{fam}_total"), format!("{fam}_total"), "counter")
        }
        (MetricKind::Counter, Format::OpenMetrics) => {
            (fam.clone(), format!("{fam}_total"), "counter")
        }
        (MetricKind::Gauge, _) => (fam.clone(), fam.clone(), "gauge"),
        (MetricKind::Histogram, _) => (fam.clone(), fam.clone(), "histogram"),
    };
    let _ = writeln!(
        out,
        "# HELP {type_name} {}",
        escape_help(&d.description, format)
    );
    let _ = writeln!(out, "# TYPE {type_name} {type_word}");
    if let Some(u) = prometheus_unit(&d.unit, d.kind) {
        let _ = writeln!(out, "# UNIT {type_name} {u}");
    }
    sample_name
}

/// Render the store and the self-metrics.
pub fn render(store: &Store, metrics: &SelfMetrics, format: Format) -> String {
    // Sized from the last body (plus a little): growing a 14 MB body by doubling copies it
    // several times and leaves up to twice its size allocated.
    static LAST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let last = LAST.load(std::sync::atomic::Ordering::Relaxed);
    let mut out = String::with_capacity((last + last / 32).max(64 * 1024));
    // The store is sorted by series key (name first), so each family's series are
    // contiguous: render them as they come, under the read lock, without copies, with
    // the label set each series rendered once when it appeared.
    let flush =
        |out: &mut String, group: &[&Series], descriptors: &BTreeMap<String, MetricDescriptor>| {
            let Some(d) = group
                .first()
                .and_then(|g| descriptors.get(g.sample.name.as_ref()))
            else {
                return;
            };
            let name = family_header(out, d, format);
            for s in group {
                out.push_str(&name);
                out.push_str(&s.labels);
                out.push(' ');
                write_number(out, s.sample.value);
                out.push('\n');
            }
        };
    store.with_series(|all, descriptors| {
        let mut group: Vec<&Series> = Vec::new();
        for s in all {
            if group
                .first()
                .is_some_and(|g| g.sample.name != s.sample.name)
            {
                flush(&mut out, &group, descriptors);
                group.clear();
            }
            group.push(s);
        }
        flush(&mut out, &group, descriptors);
        store.with_histograms(|h| render_histograms(&mut out, h, descriptors, format));
    });
    render_self(&mut out, metrics, format);
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    LAST.store(out.len(), std::sync::atomic::Ordering::Relaxed);
    out
}

/// Render samples that are not in a store (`collect --once --format prometheus`).
pub fn render_samples(
    samples: &[Sample],
    descriptors: &[MetricDescriptor],
    format: Format,
) -> String {
    let mut by_name: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_name.entry(s.name.as_ref()).or_default().push(s);
    }
    let mut out = String::new();
    for (name, samples) in &by_name {
        if let Some(d) = descriptors.iter().find(|d| d.name == *name) {
            family(&mut out, d, samples, format);
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// Histogram families: cumulative `_bucket{le}` lines (the last `+Inf`), `_sum`, `_count`.
fn render_histograms(
    out: &mut String,
    families: &BTreeMap<String, crate::store::HistogramFamily>,
    descriptors: &BTreeMap<String, MetricDescriptor>,
    format: Format,
) {
    for (name, f) in families {
        let Some(d) = descriptors.get(name) else {
            continue;
        };
        if f.series.is_empty() {
            continue;
        }
        let fam = family_header(out, d, format);
        let les: Vec<String> = f
            .bounds
            .iter()
            .map(|b| format_float(*b))
            .chain(["+Inf".to_string()])
            .collect();
        for s in f.series.values() {
            // `{a="b"}` → `{a="b",le="..."}`; `` → `{le="..."}`.
            let head = s.labels.strip_suffix('}').unwrap_or("{");
            let sep = if head == "{" { "" } else { "," };
            let mut cumulative = 0u64;
            for (c, le) in s.counts.iter().zip(&les) {
                cumulative += c;
                let _ = writeln!(out, "{fam}_bucket{head}{sep}le=\"{le}\"}} {cumulative}");
            }
            let _ = writeln!(out, "{fam}_sum{} {}", s.labels, format_float(s.sum));
            let _ = writeln!(out, "{fam}_count{} {}", s.labels, s.count);
        }
    }
}

/// A float as the sample lines write one.
fn format_float(v: f64) -> String {
    let mut out = String::new();
    write_number(&mut out, rocewatch_plugin_api::Value::F64(v));
    out
}

fn render_self(out: &mut String, metrics: &SelfMetrics, format: Format) {
    let samples = metrics.samples();
    for e in rocewatch_metrics::SELF_METRICS {
        let d = MetricDescriptor {
            name: e.name.into(),
            unit: e.unit.into(),
            kind: e.kind,
            description: e.description.into(),
        };
        if e.kind == MetricKind::Histogram {
            let durations = metrics.durations();
            if durations.is_empty() {
                continue;
            }
            let fam = prometheus_family(e.name, e.unit, e.kind);
            let _ = writeln!(out, "# HELP {fam} {}", escape_help(e.description, format));
            let _ = writeln!(out, "# TYPE {fam} summary");
            let _ = writeln!(out, "# UNIT {fam} seconds");
            for (plugin, kind, count, sum) in durations {
                let l = prometheus_labels(&[("plugin", plugin), ("kind", kind)].into());
                let _ = writeln!(out, "{fam}_sum{l} {sum}");
                let _ = writeln!(out, "{fam}_count{l} {count}");
            }
            continue;
        }
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.name == e.name).collect();
        if !mine.is_empty() {
            family(out, &d, &mine, format);
        }
    }
}

/// What the HTTP handlers read.
#[derive(Clone)]
pub struct Exposition {
    pub store: Arc<Store>,
    pub metrics: Arc<SelfMetrics>,
    /// The pipeline whose rule states `/rules` shows (what `rocewatch rules` reads).
    pub pipeline: Option<Arc<crate::pipeline::Pipeline>>,
}

async fn handle(
    req: Request<Incoming>,
    state: Exposition,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, ctype: &str, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", ctype)
            .body(Full::new(Bytes::from(body)))
            .expect("static response parts")
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".into(),
        ));
    }
    Ok(match req.uri().path() {
        "/metrics" => {
            let accept = req.headers().get("accept").and_then(|v| v.to_str().ok());
            let format = Format::from_accept(accept);
            reply(StatusCode::OK, format.content_type(), render(&state.store, &state.metrics, format))
        }
        "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/rules" => {
            let rules = state.pipeline.as_ref().map(|p| p.rule_status());
            let body = serde_json::json!({ "rules": rules.unwrap_or_default() });
            reply(StatusCode::OK, "application/json", format!("{body}\n"))
        }
        "/" => reply(StatusCode::OK, "text/html", "<html><body><a href=\"/metrics\">/metrics</a> <a href=\"/healthz\">/healthz</a></body></html>\n".into()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found; try /metrics or /healthz\n".into()),
    })
}

/// Serve `/metrics`, `/healthz` and `/rules` on `listener` until `shutdown` turns true,
/// with at most `max_connections` connections at once, with TLS and authentication when
/// `web` says so.
pub async fn serve(
    listener: TcpListener,
    state: Exposition,
    max_connections: usize,
    web: Option<Arc<crate::util::web::WebListener>>,
    shutdown: watch::Receiver<bool>,
) {
    let opts = crate::util::http::ServeOptions {
        name: "prometheus endpoint",
        max_connections,
        // The rendered body is the bulk of every scrape: to the socket as it is.
        writev: true,
        web,
        on_refused: None,
    };
    crate::util::http::serve(
        listener,
        opts,
        move |req| handle(req, state.clone()),
        shutdown,
    )
    .await;
}

/// Bind `addr`; the error names the address.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, crate::export::ExportError> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| crate::export::ExportError::Listen {
            addr: addr.to_string(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_metrics::naming::prometheus_label;

    fn sample(name: &str, v: Value, attrs: &[(&str, &str)], kind: MetricKind) -> Sample {
        Sample {
            name: name.to_string().into(),
            unit: "By".into(),
            value: v,
            attributes: std::sync::Arc::new(attrs.iter().copied().collect()),
            source: "x".into(),
            kind,
        }
    }

    #[test]
    fn text_and_openmetrics() {
        let d = vec![MetricDescriptor {
            name: "rdma.port.io".into(),
            unit: "By".into(),
            kind: MetricKind::Counter,
            description: "Data \"octets\"\nline two \\ end".into(),
        }];
        let s = vec![sample(
            "rdma.port.io",
            Value::U64(400),
            &[("rdma.device", "mlx5_0"), ("weird", "a\"b\\c\nd")],
            MetricKind::Counter,
        )];
        let text = render_samples(&s, &d, Format::Text);
        assert_eq!(
            text,
            "# HELP rdma_port_io_bytes_total Data \"octets\"\\nline two \\\\ end\n\
             # TYPE rdma_port_io_bytes_total counter\n\
             # UNIT rdma_port_io_bytes_total bytes\n\
             rdma_port_io_bytes_total{rdma_device=\"mlx5_0\",weird=\"a\\\"b\\\\c\\nd\"} 400\n"
        );
        let om = render_samples(&s, &d, Format::OpenMetrics);
        assert!(
            om.contains("# TYPE rdma_port_io_bytes counter\n# UNIT rdma_port_io_bytes bytes\n"),
            "{om}"
        );
        assert!(
            om.contains("# HELP rdma_port_io_bytes Data \\\"octets\\\""),
            "{om}"
        );
        assert!(om.contains("\nrdma_port_io_bytes_total{"), "{om}");
        assert!(om.ends_with("# EOF\n"));
    }

    #[test]
    fn label_fast_path_matches_the_sanitizer() {
        for k in [
            "rdma.device",
            "network.io.direction",
            "a..b",
            "x_.y",
            "1x",
            "ünï",
            "a__b",
            "plain",
        ] {
            let attrs: rocewatch_plugin_api::AttrSet = [(k, "v\"\\\n")].into();
            assert_eq!(
                prometheus_labels(&attrs),
                format!("{{{}=\"v\\\"\\\\\\n\"}}", prometheus_label(k)),
                "{k}"
            );
        }
    }

    #[test]
    fn floats_and_accept() {
        assert_eq!(number(Value::F64(f64::NAN)), "NaN");
        assert_eq!(number(Value::F64(f64::INFINITY)), "+Inf");
        assert_eq!(number(Value::F64(0.25)), "0.25");
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_accept(None), Format::Text);
    }
}
