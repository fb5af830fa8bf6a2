//! One export cut into requests under a size bound (`max_request_bytes`): a receiver's
//! bound on a message is commonly 4 MiB (gRPC's default, the OpenTelemetry Collector's),
//! and a host of 600 ports exports about 7.6 MiB at once. The cut is planned from the
//! lengths the encoder measures in its first pass, so the points are still written
//! once, straight from the store, into one request after another: whole metrics while
//! they fit, a metric larger than a request split by series, the same resource and
//! scope in each.

use std::io::{self, Write};

use rocewatch_runtime::store::Series;

use super::wire::{field_len, string, string_len, tag, uint, varint, LEN};
use crate::otlp::fields::{
    data, export_metrics_service_request, metric, resource_metrics, scope_metrics,
};

/// One metric of the store's series, measured in the encoder's first pass.
pub(super) struct Family<'a> {
    /// Its series: `series[from..to]`.
    pub from: usize,
    pub to: usize,
    pub name: &'a str,
    pub description: &'a str,
    pub unit: &'a str,
    pub counter: bool,
    /// The length of its `Sum` or `Gauge`, and of the whole `Metric`.
    pub data: usize,
    pub metric: usize,
}

/// Where the requests of an export go: each begun with its length uncompressed, then
/// written whole before the next one begins.
pub(crate) trait Sink {
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
fn metric_head_len(name: &str, description: &str, unit: &str) -> usize {
    string_len(name) + string_len(description) + string_len(unit)
}

/// The length of a whole `Metric` whose `data` takes `data` bytes.
pub(super) fn metric_len(name: &str, description: &str, unit: &str, data: usize) -> usize {
    metric_head_len(name, description, unit) + field_len(data)
}

/// The head of a `Metric` (an element of `ScopeMetrics.metrics`): its tag and length,
/// its name, description and unit, then the tag and length of its `data` (`data_field`:
/// [`metric::SUM`], [`metric::GAUGE`], [`metric::HISTOGRAM`]) of `data` bytes, whose
/// contents the caller writes next. The one writer of a metric's head: the store's series
/// ([`Cut::write`]) and the histograms' and the agent's own metrics alike.
pub(super) fn metric_head(
    buf: &mut Vec<u8>,
    name: &str,
    description: &str,
    unit: &str,
    data_field: u32,
    data: usize,
) {
    tag(buf, scope_metrics::METRICS, LEN);
    varint(buf, metric_len(name, description, unit, data) as u64);
    string(buf, metric::NAME, name);
    string(buf, metric::DESCRIPTION, description);
    string(buf, metric::UNIT, unit);
    tag(buf, data_field, LEN);
    varint(buf, data as u64);
}

/// The end of a `Sum`'s contents, after its points: its temporality (`DELTA` or
/// `CUMULATIVE`), monotonic. [`SUM_TAIL`] bytes.
pub(super) fn sum_tail(buf: &mut Vec<u8>, temporality: u64) {
    uint(buf, data::AGGREGATION_TEMPORALITY, temporality);
    uint(buf, data::IS_MONOTONIC, 1);
}

/// The length [`sum_tail`] writes: two varint fields of one byte each, with their tags.
pub(super) const SUM_TAIL: usize = 4;

/// A metric's `data` field: a counter's `Sum`, else a `Gauge`.
pub(super) fn number_data(counter: bool) -> u32 {
    if counter {
        metric::SUM
    } else {
        metric::GAUGE
    }
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
        let head = metric_head_len(f.name, f.description, f.unit);
        let extra = if f.counter { SUM_TAIL } else { 0 };
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

/// The series' encoding goes to the writer in pieces of about this size: at 2000 ports a
/// request is over 20 MB before compression, and never held whole.
pub(super) const CHUNK: usize = 256 * 1024;

/// What the requests of one export are written from: the resource and scope, encoded,
/// and the store's series as the first pass measured them.
pub(super) struct Cut<'a> {
    pub resource: &'a [u8],
    pub scope: &'a [u8],
    pub families: &'a [Family<'a>],
    pub series: &'a [&'a Series],
    pub lengths: &'a [u32],
    /// Writes a series' point (cumulative, or its increases).
    pub point: &'a dyn Fn(&mut Vec<u8>, &Series, bool),
    /// `AggregationTemporality` of the sums ([`crate::otlp::fields::aggregation_temporality`]).
    pub temporality: u64,
}

impl Cut<'_> {
    /// One request of `pieces`, `tail` after them, into `out` (begun with its length),
    /// [`CHUNK`] at a time through `chunk`. Returns its length.
    pub(super) fn write(
        &self,
        pieces: &[Piece],
        tail: &[u8],
        chunk: &mut Vec<u8>,
        out: &mut dyn Sink,
    ) -> io::Result<usize> {
        let scope_metrics_len = self.scope.len()
            + pieces.iter().map(|p| field_len(p.metric)).sum::<usize>()
            + tail.len();
        let resource_metrics_len = self.resource.len() + field_len(scope_metrics_len);
        let total = field_len(resource_metrics_len);
        let out = out.begin(total)?;
        // ExportMetricsServiceRequest { resource_metrics: [{ resource, scope_metrics: [..] }] }.
        tag(chunk, export_metrics_service_request::RESOURCE_METRICS, LEN);
        varint(chunk, resource_metrics_len as u64);
        chunk.extend_from_slice(self.resource);
        tag(chunk, resource_metrics::SCOPE_METRICS, LEN);
        varint(chunk, scope_metrics_len as u64);
        chunk.extend_from_slice(self.scope);
        let mut written = 0;
        for p in pieces {
            let f = &self.families[p.family];
            debug_assert_eq!(p.metric, metric_len(f.name, f.description, f.unit, p.data));
            let data_field = number_data(f.counter);
            metric_head(chunk, f.name, f.description, f.unit, data_field, p.data);
            let points = self.series[p.from..p.to].iter();
            for (s, len) in points.zip(&self.lengths[p.from..p.to]) {
                tag(chunk, data::DATA_POINTS, LEN);
                varint(chunk, u64::from(*len));
                (self.point)(chunk, s, f.counter);
                if chunk.len() >= CHUNK {
                    out.write_all(chunk)?;
                    written += chunk.len();
                    chunk.clear();
                }
            }
            if f.counter {
                sum_tail(chunk, self.temporality);
            }
        }
        out.write_all(chunk)?;
        out.write_all(tail)?;
        written += chunk.len() + tail.len();
        chunk.clear();
        if written != total {
            // A length in front of its contents would be wrong: the receiver could not
            // decode the request. Never sent.
            return Err(io::Error::other(format!(
                "OTLP encoder: a request measured {total} bytes and {written} were written"
            )));
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family(name: &'static str, from: usize, to: usize, lengths: &[u32]) -> Family<'static> {
        let data = lengths[from..to]
            .iter()
            .map(|l| field_len(*l as usize))
            .sum::<usize>()
            + SUM_TAIL;
        Family {
            from,
            to,
            name,
            description: "",
            unit: "By",
            counter: true,
            data,
            metric: metric_len(name, "", "By", data),
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
}
