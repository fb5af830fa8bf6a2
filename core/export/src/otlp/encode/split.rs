//! One export cut into requests under a size bound (`max_request_bytes`): a receiver's
//! bound on a message is commonly 4 MiB (gRPC's default, the OpenTelemetry Collector's),
//! and a host of 600 ports exports about 7.6 MiB at once. The cut is planned from the
//! lengths the encoder measures in its first pass, so the points are still written
//! once, straight from the store, into one request after another: whole metrics while
//! they fit, a metric larger than a request split by series, the same resource and
//! scope in each.

use std::io::{self, Write};

use super::{field_len, string_len, Family};

/// Where the requests of an export go: each begun with its length uncompressed, then
/// written whole before the next one begins.
pub(in crate::otlp) trait Sink {
    fn begin(&mut self, len: usize) -> io::Result<&mut dyn Write>;
}

/// A writer as a sink of one request (every export fits it: tests and benches).
#[cfg(test)]
impl<W: Write> Sink for W {
    fn begin(&mut self, _len: usize) -> io::Result<&mut dyn Write> {
        Ok(self)
    }
}

/// The points `from..to` of family `family`, as one `Metric` of a request, measured.
pub(super) struct Piece {
    pub family: usize,
    pub from: usize,
    pub to: usize,
    /// The length of its `Sum` or `Gauge`, and of the whole `Metric`.
    pub data: usize,
    pub metric: usize,
}

/// The length of a metric's name, description and unit fields.
fn metric_head(f: &Family<'_>) -> usize {
    string_len(f.name) + string_len(f.description) + string_len(f.unit)
}

/// `families` cut into requests whose contents (their metrics, and the tail in the last)
/// take at most `budget` bytes each: whole metrics while they fit, a metric larger than a
/// request split by series. Each request's pieces, and where the tail goes.
pub(super) fn plan(
    families: &[Family<'_>],
    lengths: &[u32],
    tail: usize,
    budget: usize,
) -> (Vec<Vec<Piece>>, usize) {
    let mut requests: Vec<Vec<Piece>> = vec![Vec::new()];
    let mut used = 0;
    for (i, f) in families.iter().enumerate() {
        let whole = field_len(f.metric);
        if used + whole > budget && used > 0 && whole <= budget {
            requests.push(Vec::new());
            used = 0;
        }
        if used + whole <= budget {
            requests.last_mut().expect("a request").push(Piece {
                family: i,
                from: f.from,
                to: f.to,
                data: f.data,
                metric: f.metric,
            });
            used += whole;
            continue;
        }
        // Larger than a request: its series, as many a request as fit (one at least).
        let head = metric_head(f);
        let extra = if f.counter { 4 } else { 0 };
        let mut at = f.from;
        while at < f.to {
            // A piece's metric and data lengths take 5 bytes each at most, with a tag.
            let room = budget.saturating_sub(used + head + extra + 12);
            let mut points = 0;
            let mut to = at;
            while to < f.to {
                let p = field_len(lengths[to] as usize);
                if to > at && points + p > room {
                    break;
                }
                points += p;
                to += 1;
            }
            if to == at + 1 && points > room && used > 0 {
                // Not even one series fits beside what the request holds: the next one.
                requests.push(Vec::new());
                used = 0;
                continue;
            }
            let data = points + extra;
            let metric = head + field_len(data);
            requests.last_mut().expect("a request").push(Piece {
                family: i,
                from: at,
                to,
                data,
                metric,
            });
            used += field_len(metric);
            at = to;
            if at < f.to {
                requests.push(Vec::new());
                used = 0;
            }
        }
    }
    if used + tail > budget && used > 0 {
        requests.push(Vec::new());
    }
    let tail_at = requests.len() - 1;
    (requests, tail_at)
}

#[cfg(test)]
mod tests {
    use super::super::Encoder;
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use prost::Message;
    use rocewatch_plugin_api::{AttrSet, MetricDescriptor, MetricKind, Sample, Value};
    use rocewatch_runtime::selfmetrics::SelfMetrics;
    use rocewatch_runtime::store::Store;
    use std::time::SystemTime;

    /// Each request begun, with the length it was begun with.
    #[derive(Default)]
    struct Collect(Vec<(usize, Vec<u8>)>);

    impl Sink for Collect {
        fn begin(&mut self, len: usize) -> io::Result<&mut dyn Write> {
            self.0.push((len, Vec::new()));
            Ok(&mut self.0.last_mut().expect("begun").1)
        }
    }

    fn family(name: &'static str, from: usize, to: usize, lengths: &[u32]) -> Family<'static> {
        let data = lengths[from..to]
            .iter()
            .map(|l| field_len(*l as usize))
            .sum::<usize>()
            + 4;
        Family {
            from,
            to,
            name,
            description: "",
            unit: "By",
            counter: true,
            data,
            metric: string_len(name) + string_len("By") + field_len(data),
        }
    }

    /// Whole metrics while they fit, a larger one by series; every point in one piece, in
    /// order; each request within the budget; the tail in the last request when it fits.
    #[test]
    fn a_plan_keeps_each_request_within_its_budget() {
        let lengths = vec![100u32; 100];
        let families = [
            family("a", 0, 10, &lengths),
            family("b", 10, 20, &lengths),
            family("c", 20, 100, &lengths),
        ];
        let budget = 2500;
        let (requests, tail_at) = plan(&families, &lengths, 300, budget);
        let mut next = 0;
        for (n, r) in requests.iter().enumerate() {
            let used: usize = r.iter().map(|p| field_len(p.metric)).sum::<usize>()
                + if n == tail_at { 300 } else { 0 };
            assert!(used <= budget, "request {n}: {used}");
            for p in r {
                assert_eq!(p.from, next, "in order, none twice");
                assert!(p.to > p.from);
                next = p.to;
            }
        }
        assert_eq!(next, 100, "every point");
        // a and b whole (about 1 KB each) in the first two... a beside b: 2 x 1030 fit.
        assert_eq!((requests[0][0].from, requests[0][0].to), (0, 10));
        assert_eq!((requests[0][1].from, requests[0][1].to), (10, 20));
        assert_eq!(tail_at, requests.len() - 1);
        // No bound: one request of whole metrics.
        let (one, _) = plan(&families, &lengths, 300, usize::MAX);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].len(), 3);
    }

    /// An export larger than the bound goes as several requests, each under it, each
    /// with the resource and the scope, that together hold every point once.
    #[test]
    fn a_large_export_is_cut_into_requests_under_the_bound() {
        let store = Store::new();
        let m = SelfMetrics::default();
        let d = |name: &str, kind| MetricDescriptor {
            name: name.into(),
            unit: "By".into(),
            kind,
            description: format!("{name} described"),
        };
        store.declare(&[
            d("rdma.port.rx", MetricKind::Counter),
            d("rdma.port.tx", MetricKind::Counter),
            d("rdma.qos.setting", MetricKind::Gauge),
        ]);
        let mut samples = Vec::new();
        for i in 0..3000u64 {
            let a: AttrSet = [("rdma.device".to_string(), format!("mlx5_{i}"))]
                .into_iter()
                .collect::<std::collections::BTreeMap<_, _>>()
                .into();
            let a = std::sync::Arc::new(a);
            for (name, kind) in [
                ("rdma.port.rx", MetricKind::Counter),
                ("rdma.port.tx", MetricKind::Counter),
                ("rdma.qos.setting", MetricKind::Gauge),
            ] {
                samples.push(Sample {
                    name: name.to_string().into(),
                    unit: "By".into(),
                    value: Value::U64(i),
                    attributes: a.clone(),
                    source: "counters/x".into(),
                    kind,
                });
            }
        }
        store.ingest("c", &samples, &m);
        let resource = [("host.name".to_string(), "h".to_string())];
        // One request without a bound.
        let mut whole = Collect::default();
        let all = Encoder::new(&resource, SystemTime::now())
            .encode(&store, &m, SystemTime::now(), usize::MAX, &mut whole)
            .unwrap();
        assert_eq!(whole.0.len(), 1);
        let bound = 64 << 10;
        assert!(all > 3 * bound, "{all}: the test needs several requests");
        let mut cut = Collect::default();
        let total = Encoder::new(&resource, SystemTime::now())
            .encode(&store, &m, SystemTime::now(), bound, &mut cut)
            .unwrap();
        assert!(cut.0.len() > 3, "{} requests", cut.0.len());
        assert_eq!(total, cut.0.iter().map(|(_, b)| b.len()).sum::<usize>());
        let mut points: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (len, body) in &cut.0 {
            assert_eq!(*len, body.len(), "begun with its length");
            assert!(body.len() <= bound, "a request of {}", body.len());
            let r = ExportMetricsServiceRequest::decode(body.as_slice()).expect("decodes");
            assert_eq!(r.resource_metrics.len(), 1);
            let rm = &r.resource_metrics[0];
            assert_eq!(rm.resource.as_ref().unwrap().attributes[0].key, "host.name");
            let sm = &rm.scope_metrics[0];
            assert_eq!(sm.scope.as_ref().unwrap().name, "rocewatch");
            for metric in &sm.metrics {
                let devices: Vec<String> = match &metric.data {
                    Some(Data::Sum(s)) => s
                        .data_points
                        .iter()
                        .map(|p| format!("{:?}", p.attributes))
                        .collect(),
                    Some(Data::Gauge(g)) => g
                        .data_points
                        .iter()
                        .map(|p| format!("{:?}", p.attributes))
                        .collect(),
                    _ => continue,
                };
                points
                    .entry(metric.name.clone())
                    .or_default()
                    .extend(devices);
            }
        }
        for name in ["rdma.port.rx", "rdma.port.tx", "rdma.qos.setting"] {
            let got = &points[name];
            let distinct: std::collections::BTreeSet<&String> = got.iter().collect();
            assert_eq!(
                (got.len(), distinct.len()),
                (3000, 3000),
                "{name}: each point once"
            );
        }
    }
}
