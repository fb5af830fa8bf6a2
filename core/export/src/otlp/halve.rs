//! A request the receiver refused as too large though it is under `max_request_bytes` (a
//! receiver whose bound is lower than ours: HTTP 413, gRPC's "message larger than max"),
//! cut in two where it is encoded, so that both halves can be sent again instead of
//! dropping the snapshot: its resource metrics in two when it holds several, else its
//! scope's metrics in two, else its one metric's points in two; each half keeps
//! everything else of the messages it is in (the resource, the scope, the metric's name,
//! unit and temporality), so each decodes as a request of its own. Only a request of one
//! point cannot be cut.
//!
//! The bytes are walked, not decoded: the queue holds encoded requests, and a request at
//! a receiver's bound is megabytes of points a decoding would copy into structures.

use super::fields::{
    data, export_metrics_service_request, metric, resource_metrics, scope_metrics,
};

/// The protobuf wire types a message may hold.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// One field of an encoded message.
struct Field<'a> {
    number: u32,
    /// Its whole encoding: tag, length and contents.
    whole: &'a [u8],
    /// A length-delimited field's contents.
    contents: Option<&'a [u8]>,
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The fields of `msg`, in order; `None` when it is not a well-formed message.
fn fields(msg: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < msg.len() {
        let (key, k) = varint(&msg[i..])?;
        let start = i;
        i += k;
        let mut contents = None;
        match key & 7 {
            VARINT => i += varint(&msg[i..])?.1,
            FIXED64 => i += 8,
            FIXED32 => i += 4,
            LEN => {
                let (len, k) = varint(&msg[i..])?;
                let from = i + k;
                let to = from.checked_add(usize::try_from(len).ok()?)?;
                contents = Some(msg.get(from..to)?);
                i = to;
            }
            _ => return None,
        }
        let whole = msg.get(start..i)?;
        out.push(Field {
            number: u32::try_from(key >> 3).ok()?,
            whole,
            contents,
        });
    }
    Some(out)
}

/// What each level of a request is cut by, from the request down to a metric's data: the
/// fields holding its children, and whether they are repeated (cut in two) or one (a
/// metric's `data`: cut inside).
const LEVELS: [(&[u32], bool); 5] = [
    (&[export_metrics_service_request::RESOURCE_METRICS], true),
    (&[resource_metrics::SCOPE_METRICS], true),
    (&[scope_metrics::METRICS], true),
    (
        &[
            metric::GAUGE,
            metric::SUM,
            metric::HISTOGRAM,
            metric::EXPONENTIAL_HISTOGRAM,
            metric::SUMMARY,
        ],
        false,
    ),
    (&[data::DATA_POINTS], true),
];

/// An encoded `ExportMetricsServiceRequest` cut in two requests that hold its points
/// between them, each once; `None` when it holds a single point (or is not one).
pub(super) fn halve(request: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    halve_at(request, 0)
}

fn halve_at(msg: &[u8], level: usize) -> Option<(Vec<u8>, Vec<u8>)> {
    let (numbers, repeated) = LEVELS.get(level)?;
    let fields = fields(msg)?;
    let children: Vec<usize> = (0..fields.len())
        .filter(|&i| numbers.contains(&fields[i].number) && fields[i].contents.is_some())
        .collect();
    match children.len() {
        0 => None,
        1 => {
            let at = children[0];
            let child = &fields[at];
            let (a, b) = halve_at(child.contents?, level + 1)?;
            let with = |half: &[u8]| {
                let mut out = Vec::with_capacity(msg.len());
                for (i, f) in fields.iter().enumerate() {
                    if i == at {
                        put_varint(&mut out, (u64::from(child.number) << 3) | LEN);
                        put_varint(&mut out, half.len() as u64);
                        out.extend_from_slice(half);
                    } else {
                        out.extend_from_slice(f.whole);
                    }
                }
                out
            };
            Some((with(&a), with(&b)))
        }
        n if *repeated => {
            // The children up to half their bytes in one (one at least), the rest in the
            // other (one at least); every other field in both. Halved by size, not count,
            // a refused half is about half as large: a receiver refusing everything sees
            // about log2(size / floor) requests a snapshot.
            let size = |k: usize| fields[children[k]].whole.len();
            let total: usize = (0..n).map(size).sum();
            let (mut k, mut first) = (1, size(0));
            while k < n - 1 && 2 * (first + size(k)) <= total {
                first += size(k);
                k += 1;
            }
            let second = children[k];
            let keep = |first: bool| {
                let mut out = Vec::with_capacity(msg.len());
                for (i, f) in fields.iter().enumerate() {
                    let child = numbers.contains(&f.number) && f.contents.is_some();
                    if !child || (i < second) == first {
                        out.extend_from_slice(f.whole);
                    }
                }
                out
            };
            Some((keep(true), keep(false)))
        }
        // Two `data` in one metric: not a metric this encoder wrote.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics,
        ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use prost::Message;

    fn point(i: i64) -> NumberDataPoint {
        NumberDataPoint {
            attributes: vec![KeyValue {
                key: "rdma.device".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(format!("mlx5_{i}"))),
                }),
                ..Default::default()
            }],
            time_unix_nano: 7,
            value: Some(number_data_point::Value::AsInt(i)),
            ..Default::default()
        }
    }

    fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: point(0).attributes,
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    schema_url: "s".into(),
                    ..Default::default()
                }],
                schema_url: "r".into(),
            }],
        }
    }

    fn sum(name: &str, points: std::ops::Range<i64>) -> Metric {
        Metric {
            name: name.into(),
            unit: "By".into(),
            data: Some(Data::Sum(Sum {
                data_points: points.map(point).collect(),
                aggregation_temporality: 2,
                is_monotonic: true,
            })),
            ..Default::default()
        }
    }

    /// Every (metric, point) of a request, with the metric's head and the resource and
    /// scope it came with.
    fn points(r: &ExportMetricsServiceRequest) -> Vec<String> {
        let mut out = Vec::new();
        for rm in &r.resource_metrics {
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    let (pts, tail) = match &m.data {
                        Some(Data::Sum(s)) => (
                            &s.data_points,
                            format!("{} {}", s.aggregation_temporality, s.is_monotonic),
                        ),
                        Some(Data::Gauge(g)) => (&g.data_points, String::new()),
                        other => panic!("{other:?}"),
                    };
                    for p in pts {
                        out.push(format!(
                            "{:?} {} {} {} {} {tail} {:?}",
                            rm.resource, rm.schema_url, sm.schema_url, m.name, m.unit, p
                        ));
                    }
                }
            }
        }
        out
    }

    /// Cut again and again, down to one point a request: every point once, each with its
    /// resource, scope and metric head, whatever level a cut falls at.
    #[test]
    fn halves_hold_every_point_once_down_to_one_a_request() {
        let gauge = Metric {
            name: "rdma.port.up".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: (100..103).map(point).collect(),
            })),
            ..Default::default()
        };
        let mut r = request(vec![sum("rx", 0..5), gauge, sum("tx", 10..11)]);
        // Two resource metrics (a merged backlog's request).
        let again = request(vec![sum("rx", 20..22)]).resource_metrics;
        r.resource_metrics.extend(again);
        let want = points(&r);
        let mut pending = vec![r.encode_to_vec()];
        let mut single = Vec::new();
        while let Some(body) = pending.pop() {
            match halve(&body) {
                Some((a, b)) => {
                    assert!(a.len() < body.len() && b.len() < body.len());
                    pending.push(b);
                    pending.push(a);
                }
                None => single.push(body),
            }
        }
        let mut got = Vec::new();
        for body in &single {
            let r = ExportMetricsServiceRequest::decode(body.as_slice()).expect("a request");
            let p = points(&r);
            assert_eq!(p.len(), 1, "only a one-point request is left whole: {r:?}");
            got.extend(p);
        }
        assert_eq!(got, want, "every point once, in order, with its heads");
        assert!(halve(b"\xff").is_none(), "not a message");
        assert!(halve(&[]).is_none());
    }
}
