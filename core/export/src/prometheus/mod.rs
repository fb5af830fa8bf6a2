//! The Prometheus exposition: `/metrics` (text format 0.0.4, or OpenMetrics 1.0 when the
//! scraper asks for it), `/healthz`, and the same text for `collect --format prometheus`.
//!
//! Names come from `rocewatch_metrics::naming` (the catalog), so `/metrics`, OTLP into
//! VictoriaMetrics and docs/METRICS.md agree. The server only reads the store: a scrape
//! never triggers a collection and never waits for one.

pub mod config;
mod kept;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use flate2::write::GzEncoder;
use flate2::Compression;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use rocewatch_metrics::naming::{
    prometheus_family, prometheus_labels, prometheus_unit, write_prometheus_labels,
};
use rocewatch_plugin_api::{MetricDescriptor, MetricKind, Sample, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::{Series, Store};

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
        Value::U64(u) => push_u64(out, u),
        Value::F64(f) if f.is_nan() => out.push_str("NaN"),
        Value::F64(f) if f.is_infinite() => out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" }),
        Value::F64(f) => {
            let _ = write!(out, "{f}");
        }
    }
}

/// `u` in decimal, as `{u}` writes it, without the formatting machinery (most samples
/// are counters: this is the bulk of a scrape's numbers).
fn push_u64(out: &mut String, mut u: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
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

/// At most this much of a body is held as text when it is compressed as it is rendered.
const CHUNK: usize = 256 * 1024;

/// Render the store and the self-metrics: the whole body, as text.
pub fn render(store: &Store, metrics: &SelfMetrics, format: Format) -> String {
    // Sized from the last body (plus a little): growing a 14 MB body by doubling copies it
    // several times and leaves up to twice its size allocated.
    static LAST: AtomicUsize = AtomicUsize::new(0);
    let last = LAST.load(Ordering::Relaxed);
    let mut out = String::with_capacity((last + last / 32).max(64 * 1024));
    render_into(store, metrics, format, &mut out, &mut |_| {});
    LAST.store(out.len(), Ordering::Relaxed);
    out
}

/// The same body gzip'd as it is rendered, for a scraper that accepts it (Prometheus
/// does): never more than [`CHUNK`] of it as text at once, where at 2000 ports the whole
/// text is 18 MB (and its gzip about a tenth of that).
pub fn render_gzip(store: &Store, metrics: &SelfMetrics, format: Format) -> io::Result<Vec<u8>> {
    static LAST: AtomicUsize = AtomicUsize::new(0);
    let last = LAST.load(Ordering::Relaxed);
    let sink = Vec::with_capacity((last + last / 8).max(16 * 1024));
    let mut gz = GzEncoder::new(sink, Compression::fast());
    let mut failed: Option<io::Error> = None;
    let mut out = String::with_capacity(CHUNK + 4096);
    render_into(
        store,
        metrics,
        format,
        &mut out,
        &mut |text: &mut String| {
            if failed.is_none() {
                failed = gz.write_all(text.as_bytes()).err();
            }
            text.clear();
        },
    );
    if let Some(e) = failed {
        return Err(e);
    }
    gz.write_all(out.as_bytes())?;
    let body = gz.finish()?;
    LAST.store(body.len(), Ordering::Relaxed);
    Ok(body)
}

/// Whether an `Accept-Encoding` value accepts gzip (`gzip`, any case, without `q=0`).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|v| {
        v.split(',').any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or_default().trim();
            name.eq_ignore_ascii_case("gzip")
                && !parts.any(|p| {
                    let (k, q) = p.split_once('=').unwrap_or((p, ""));
                    k.trim().eq_ignore_ascii_case("q")
                        && q.trim().parse::<f64>().is_ok_and(|q| q <= 0.0)
                })
        })
    })
}

/// Render into `out`, handing it to `spill` whenever it holds [`CHUNK`] or more (`spill`
/// takes the text and leaves `out` empty, or leaves it to grow).
fn render_into(
    store: &Store,
    metrics: &SelfMetrics,
    format: Format,
    out: &mut String,
    spill: &mut dyn FnMut(&mut String),
) {
    // The store is sorted by series key (name first), so each family's series are
    // contiguous: render them as they come, under the read lock, without copies, with
    // the label set each series rendered once when it appeared.
    fn flush(
        out: &mut String,
        spill: &mut dyn FnMut(&mut String),
        group: &[&Series],
        descriptors: &BTreeMap<String, MetricDescriptor>,
        format: Format,
        kept: &mut kept::Families,
    ) {
        let Some(d) = group
            .first()
            .and_then(|g| descriptors.get(g.sample.name.as_ref()))
        else {
            return;
        };
        // A family as it was at the last scrapes is written from the text kept then (the
        // QoS view between its reads); one to keep is rendered aside (at its size) first.
        let mut aside = match kept.plan(&d.name, group) {
            kept::Plan::Kept(text) => {
                out.push_str(text);
                if out.len() >= CHUNK {
                    spill(out);
                }
                return;
            }
            kept::Plan::Render => None,
            kept::Plan::RenderAndKeep(len) => Some(String::with_capacity(len)),
        };
        // What of `out` is this family's, and how much of it went to `spill` already.
        let (mut start, mut written) = (out.len(), 0);
        let name = family_header(aside.as_mut().unwrap_or(out), d, format);
        for s in group {
            let o = aside.as_mut().unwrap_or(out);
            o.push_str(&name);
            s.write_labels(o);
            o.push(' ');
            write_number(o, s.sample.value);
            o.push('\n');
            if out.len() >= CHUNK {
                written += out.len() - start;
                spill(out);
                start = out.len();
            }
        }
        match aside {
            Some(text) => {
                out.push_str(&text);
                kept.keep(&d.name, text);
                if out.len() >= CHUNK {
                    spill(out);
                }
            }
            None => kept.rendered(&d.name, written + out.len() - start),
        }
    }
    kept::with_kept(store, format.content_type(), |kept| {
        store.with_series(|all, descriptors| {
            let mut group: Vec<&Series> = Vec::new();
            for s in all {
                if group
                    .first()
                    .is_some_and(|g| g.sample.name != s.sample.name)
                {
                    flush(out, spill, &group, descriptors, format, kept);
                    group.clear();
                }
                group.push(s);
            }
            flush(out, spill, &group, descriptors, format, kept);
            store.with_histograms(|h| render_histograms(out, h, descriptors, format));
        })
    });
    render_self(out, metrics, format);
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
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
    families: &BTreeMap<String, rocewatch_runtime::store::HistogramFamily>,
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
    pub pipeline: Option<Arc<rocewatch_runtime::pipeline::Pipeline>>,
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
            let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
            let format = Format::from_accept(header("accept"));
            let response = Response::builder()
                .header("content-type", format.content_type())
                .header("vary", "Accept-Encoding");
            // Compressed under the store's read lock (so the text is never held whole):
            // an ingest waits for the compression too, about as long as the rendering.
            let body = if accepts_gzip(header("accept-encoding")) {
                render_gzip(&state.store, &state.metrics, format).map(|body| {
                    response.header("content-encoding", "gzip").body(Full::new(Bytes::from(body)))
                })
            } else {
                Ok(response.body(Full::new(Bytes::from(render(&state.store, &state.metrics, format)))))
            };
            match body {
                Ok(r) => r.expect("static response parts"),
                Err(e) => {
                    tracing::error!("prometheus endpoint: compressing /metrics failed: {e}");
                    reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("compressing the body failed: {e}\n"))
                }
            }
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
    web: Option<Arc<rocewatch_web::server::WebListener>>,
    shutdown: watch::Receiver<bool>,
) {
    let opts = rocewatch_web::http::ServeOptions {
        name: "prometheus endpoint",
        max_connections,
        // The rendered body is the bulk of every scrape: to the socket as it is.
        writev: true,
        web,
        on_refused: None,
    };
    rocewatch_web::http::serve(
        listener,
        opts,
        move |req| handle(req, state.clone()),
        shutdown,
    )
    .await;
}

/// Bind `addr`; the error names the address.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, crate::ExportError> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| crate::ExportError::Listen {
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

    proptest::proptest! {
        /// Counters are written as `{u}` writes them, at every magnitude.
        #[test]
        fn counters_print_as_the_formatter_does(u in proptest::num::u64::ANY, shift in 0u32..64) {
            for v in [u, u >> shift, 0, u64::MAX] {
                proptest::prop_assert_eq!(number(Value::U64(v)), v.to_string());
            }
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
    fn a_gzip_body_is_the_text_body_compressed_chunk_by_chunk() {
        use std::io::Read as _;
        let store = Store::new();
        let metrics = SelfMetrics::default();
        store.declare(&[MetricDescriptor {
            name: "rdma.port.io".into(),
            unit: "By".into(),
            kind: MetricKind::Counter,
            description: "Data".into(),
        }]);
        // Well over one chunk of text, so the body is compressed in several pieces.
        let samples: Vec<Sample> = (0..12000)
            .map(|i| {
                let dev = format!("mlx5_{i}");
                sample(
                    "rdma.port.io",
                    Value::U64(i),
                    &[("rdma.device", &dev), ("rdma.port", "1")],
                    MetricKind::Counter,
                )
            })
            .collect();
        store.ingest("counters-sysfs", &samples, &metrics);
        for format in [Format::Text, Format::OpenMetrics] {
            let text = render(&store, &metrics, format);
            assert!(text.len() > 2 * CHUNK, "{} bytes", text.len());
            let gz = render_gzip(&store, &metrics, format).unwrap();
            let mut back = String::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_string(&mut back)
                .unwrap();
            assert_eq!(back, text);
            assert!(gz.len() * 5 < text.len(), "{} of {}", gz.len(), text.len());
        }
    }

    #[test]
    fn accept_encoding_is_read_as_http_says() {
        for (v, gzip) in [
            ("gzip", true),
            ("GZip", true),
            ("deflate, gzip;q=0.5", true),
            ("gzip ; q=1.0, identity", true),
            ("gzip;q=0", false),
            ("gzip; Q=0.000", false),
            ("identity", false),
            ("x-gzip", false),
            ("*", false),
            ("", false),
        ] {
            assert_eq!(accepts_gzip(Some(v)), gzip, "{v:?}");
        }
        assert!(!accepts_gzip(None));
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

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any header value: an answer, never a panic; gzip only where it is named.
        #[test]
        fn any_accept_encoding_is_answered(v in "\\PC{0,60}") {
            if accepts_gzip(Some(&v)) {
                prop_assert!(v.to_ascii_lowercase().contains("gzip"), "{v:?}");
            }
        }
    }
}
