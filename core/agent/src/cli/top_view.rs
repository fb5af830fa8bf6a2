//! `rocewatch top`'s view, pure: the resources collector's samples of one collection
//! (`rdma.resource.*`, `rdma.workload.counter`), and those of the collection before it for
//! the rates, turned into one row per workload, sorted, and rendered as text or JSON.
//!
//! Counts (QPs, CQs, MRs, MR bytes, PDs) are the gauges summed over the workload's devices
//! and ports: what `rdma resource show` lists for its processes. Rates come from the per-QP
//! counters (`rdma.workload.counter`, opt-in in the collector): the increase of each
//! series between the two collections over the seconds between them. A series that went
//! backwards (a counter reset, a QP destroyed and another bound) or seen for the first time
//! adds nothing: a rate is never negative and never made up.
//!
//! What the rate columns sum, by the drivers' counter names (`rdma.counter`):
//! - retransmissions ([`RETRANS_COUNTERS`]): what makes a requester send again. mlx5
//!   (`drivers/infiniband/hw/mlx5/counters.c`): `packet_seq_err` (NAK sequence errors
//!   received), `implied_nak_seq_err`, `local_ack_timeout_err` (ACK timeouts), and
//!   `roce_adp_retrans` (adaptive retransmissions); rxe (`rxe_hw_counters.c`):
//!   `completer_retry_err`, `rcvd_seq_err`. The responder's view of the peer's resends
//!   (`duplicate_request`, `out_of_sequence`) is left out: it is the other side's
//!   retransmission, not this workload's.
//! - CNPs ([`CNP_COUNTERS`]): `np_cnp_sent` (congestion seen arriving) plus
//!   `rp_cnp_handled` (its own sends slowed down).
//! - throughput ([`REQUEST_COUNTERS`]): requests received per second, mlx5's
//!   `rx_write_requests`, `rx_read_requests`, `rx_atomic_requests` and rxe's `rdma_recvs`.
//!   No driver counts bytes per QP, so it is requests/s, not bytes/s.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use clap::ValueEnum;
use rocewatch_metrics::{
    ATTR_COUNTER, ATTR_DEVICE, ATTR_PORT, ATTR_WORKLOAD, ATTR_WORKLOAD_KIND, ATTR_WORKLOAD_STATE,
    OTHER_WORKLOAD, RESOURCE_CQS, RESOURCE_MRS, RESOURCE_MR_BYTES, RESOURCE_PDS, RESOURCE_QPS,
    RESOURCE_WORKLOADS, WORKLOAD_COUNTER, WORKLOAD_FOLDED, WORKLOAD_REPORTED,
};
use rocewatch_plugin_api::Sample;
use serde::Serialize;

use rocewatch_metrics::counter::{counter_move_from, Move};

/// Per-QP counters summed as retransmissions (see the module's doc).
pub const RETRANS_COUNTERS: &[&str] = &[
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "roce_adp_retrans",
    "completer_retry_err",
    "rcvd_seq_err",
];
/// Per-QP counters summed as CNPs.
pub const CNP_COUNTERS: &[&str] = &["np_cnp_sent", "rp_cnp_handled"];
/// Per-QP counters summed as requests received (the throughput column).
pub const REQUEST_COUNTERS: &[&str] = &[
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rdma_recvs",
];

/// What turns per-QP counters on, said where rates are missing.
pub const COUNTERS_HOW: &str = "[plugins.builtin.resources.options] qp_counters = true";

/// The column rows are sorted by: counts and rates descending, the workload ascending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Queue pairs.
    #[default]
    Qps,
    /// Memory regions.
    Mrs,
    /// Bytes registered in memory regions.
    MrBytes,
    /// Completion queues.
    Cqs,
    /// Protection domains.
    Pds,
    /// Retransmissions per second (per-QP counters).
    Retrans,
    /// CNPs per second (per-QP counters).
    Cnps,
    /// Requests received per second (per-QP counters).
    Throughput,
    /// The workload's id, ascending.
    Workload,
}

/// A workload's rates, per second, over the seconds between two collections.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Rates {
    /// Retransmissions ([`RETRANS_COUNTERS`]); `None`: its driver counts none of them.
    pub retrans_per_s: Option<f64>,
    /// CNPs sent and handled ([`CNP_COUNTERS`]); `None`: not counted per QP.
    pub cnps_per_s: Option<f64>,
    /// Requests received ([`REQUEST_COUNTERS`]); `None`: not counted per QP.
    pub requests_per_s: Option<f64>,
    /// Every per-QP counter's rate, by the driver's name.
    pub counters: BTreeMap<String, f64>,
}

/// One workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Row {
    /// `rdma.workload`.
    pub workload: String,
    /// `rdma.workload.kind`.
    pub kind: String,
    /// The rest of what identifies it (`k8s.pod.uid`, `container.id`, `slurm.job.id`, ...).
    pub attributes: BTreeMap<String, String>,
    pub qps: u64,
    pub cqs: u64,
    pub mrs: u64,
    pub mr_bytes: u64,
    pub pds: u64,
    /// `mlx5_0/1`, or the device alone when none of its resources is bound to a port.
    pub ports: Vec<String>,
    /// `None`: no per-QP counters, or only one reading of them.
    pub rates: Option<Rates>,
}

/// The host's totals, over every workload (not only those shown).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Workloads holding resources: those reported plus those folded into `other`.
    pub workloads: u64,
    pub qps: u64,
    pub cqs: u64,
    pub mrs: u64,
    pub mr_bytes: u64,
    pub pds: u64,
    /// Workloads beyond the collector's `max_workloads`, summed into `other`.
    pub folded: u64,
}

/// The rows of one frame, unsorted, with the totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    pub rows: Vec<Row>,
    pub totals: Totals,
    /// Whether the collector reported per-QP counters.
    pub counters: bool,
    /// The seconds the rates are over; `None`: one reading only.
    pub rates_over_s: Option<f64>,
}

/// What a frame says besides the rows.
#[derive(Debug, Clone, Default)]
pub struct Frame<'a> {
    pub host: &'a str,
    /// RFC 3339.
    pub time: &'a str,
    pub sort: SortKey,
    /// At most this many rows (`--limit`).
    pub limit: Option<usize>,
    /// The live view's refresh, for the header (`None`: one frame).
    pub every: Option<&'a str>,
    /// The collector's partial errors and failures: (target, message).
    pub errors: &'a [(String, String)],
}

fn value(s: &Sample) -> u64 {
    s.value.as_f64().max(0.0).round() as u64
}

fn attr<'a>(s: &'a Sample, k: &str) -> Option<&'a str> {
    s.attributes.get(k)
}

/// The attributes of a resources sample that are not the workload's identity.
const NOT_IDENTITY: &[&str] = &[
    ATTR_DEVICE,
    ATTR_PORT,
    ATTR_WORKLOAD,
    ATTR_WORKLOAD_KIND,
    ATTR_COUNTER,
];

/// A per-QP counter series: (workload, device, port, counter).
type CounterKey<'a> = (&'a str, &'a str, &'a str, &'a str);

fn counter_key(s: &Sample) -> Option<CounterKey<'_>> {
    Some((
        attr(s, ATTR_WORKLOAD)?,
        attr(s, ATTR_DEVICE).unwrap_or(""),
        attr(s, ATTR_PORT).unwrap_or(""),
        attr(s, ATTR_COUNTER)?,
    ))
}

/// The rows of `cur`; with `prev` (the collection before and the seconds since), the rates.
pub fn build(cur: &[Sample], prev: Option<(&[Sample], f64)>) -> View {
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let mut places: BTreeMap<String, BTreeSet<(String, Option<String>)>> = BTreeMap::new();
    let mut state: HashMap<&str, u64> = HashMap::new();
    let mut counters = false;
    for s in cur {
        if s.name == RESOURCE_WORKLOADS {
            if let Some(st) = attr(s, ATTR_WORKLOAD_STATE) {
                *state.entry(st).or_default() += value(s);
            }
            continue;
        }
        let Some(id) = attr(s, ATTR_WORKLOAD) else {
            continue;
        };
        let row = rows.entry(id.to_string()).or_insert_with(|| Row {
            workload: id.to_string(),
            ..Row::default()
        });
        if row.kind.is_empty() {
            row.kind = attr(s, ATTR_WORKLOAD_KIND).unwrap_or_default().to_string();
        }
        for (k, v) in s.attributes.iter() {
            if !NOT_IDENTITY.contains(&k) {
                row.attributes
                    .entry(k.to_string())
                    .or_insert_with(|| v.to_string());
            }
        }
        if let Some(dev) = attr(s, ATTR_DEVICE) {
            places
                .entry(id.to_string())
                .or_default()
                .insert((dev.to_string(), attr(s, ATTR_PORT).map(str::to_string)));
        }
        match s.name.as_ref() {
            RESOURCE_QPS => row.qps += value(s),
            RESOURCE_CQS => row.cqs += value(s),
            RESOURCE_MRS => row.mrs += value(s),
            RESOURCE_MR_BYTES => row.mr_bytes += value(s),
            RESOURCE_PDS => row.pds += value(s),
            WORKLOAD_COUNTER => counters = true,
            _ => {}
        }
    }
    for (id, set) in places {
        let row = rows.get_mut(&id).expect("placed rows exist");
        let bound: BTreeSet<&str> = set
            .iter()
            .filter(|(_, p)| p.is_some())
            .map(|(d, _)| d.as_str())
            .collect();
        row.ports = set
            .iter()
            .filter_map(|(d, p)| match p {
                Some(p) => Some(format!("{d}/{p}")),
                None if !bound.contains(d.as_str()) => Some(d.clone()),
                None => None,
            })
            .collect();
    }
    let rates_over_s = prev.map(|(_, dt)| dt).filter(|dt| *dt > 0.0 && counters);
    if let (Some(dt), Some((before, _))) = (rates_over_s, prev) {
        add_rates(&mut rows, cur, before, dt);
    }
    // A workload whose last resources were released reads 0 for a while (so that every
    // scraper sees its count fall): it holds nothing, and is not listed.
    let rows: Vec<Row> = rows
        .into_values()
        .filter(|r| r.qps + r.cqs + r.mrs + r.mr_bytes + r.pds > 0)
        .collect();
    let named = rows.iter().filter(|r| r.workload != OTHER_WORKLOAD).count() as u64;
    let folded = state.get(WORKLOAD_FOLDED).copied().unwrap_or(0);
    let totals = Totals {
        workloads: state
            .get(WORKLOAD_REPORTED)
            .map_or(named + folded, |r| r + folded),
        qps: rows.iter().map(|r| r.qps).sum(),
        cqs: rows.iter().map(|r| r.cqs).sum(),
        mrs: rows.iter().map(|r| r.mrs).sum(),
        mr_bytes: rows.iter().map(|r| r.mr_bytes).sum(),
        pds: rows.iter().map(|r| r.pds).sum(),
        folded,
    };
    View {
        rows,
        totals,
        counters,
        rates_over_s,
    }
}

/// The per-QP counters' increases from `before` to `cur`, per second, into the rows.
fn add_rates(rows: &mut BTreeMap<String, Row>, cur: &[Sample], before: &[Sample], dt: f64) {
    let old: HashMap<CounterKey<'_>, f64> = before
        .iter()
        .filter(|s| s.name == WORKLOAD_COUNTER)
        .filter_map(|s| Some((counter_key(s)?, s.value.as_f64())))
        .collect();
    for s in cur.iter().filter(|s| s.name == WORKLOAD_COUNTER) {
        let Some(key) = counter_key(s) else {
            continue;
        };
        let Some(&was) = old.get(&key) else {
            continue; // first seen: no rate yet
        };
        let Move::Increase(d) = counter_move_from(&s.source, was, s.value.as_f64(), None) else {
            continue; // a reset or a saturated counter says nothing about this interval
        };
        let Some(row) = rows.get_mut(key.0) else {
            continue;
        };
        let rates = row.rates.get_or_insert_with(Rates::default);
        let per_s = d / dt;
        *rates.counters.entry(key.3.to_string()).or_default() += per_s;
        for (set, slot) in [
            (RETRANS_COUNTERS, &mut rates.retrans_per_s),
            (CNP_COUNTERS, &mut rates.cnps_per_s),
            (REQUEST_COUNTERS, &mut rates.requests_per_s),
        ] {
            if set.contains(&key.3) {
                *slot.get_or_insert(0.0) += per_s;
            }
        }
    }
}

/// The value a row is sorted by (`None` sorts after every value).
fn sort_value(r: &Row, key: SortKey) -> Option<f64> {
    let rate = |f: fn(&Rates) -> Option<f64>| r.rates.as_ref().and_then(f);
    match key {
        SortKey::Qps => Some(r.qps as f64),
        SortKey::Mrs => Some(r.mrs as f64),
        SortKey::MrBytes => Some(r.mr_bytes as f64),
        SortKey::Cqs => Some(r.cqs as f64),
        SortKey::Pds => Some(r.pds as f64),
        SortKey::Retrans => rate(|x| x.retrans_per_s),
        SortKey::Cnps => rate(|x| x.cnps_per_s),
        SortKey::Throughput => rate(|x| x.requests_per_s),
        SortKey::Workload => None,
    }
}

/// Sort by `key`: descending (the workload ascending), ties by workload; `other` (the
/// folded workloads' sum, not one workload) always last.
pub fn sort(rows: &mut [Row], key: SortKey) {
    rows.sort_by(|a, b| {
        let other = |r: &Row| r.workload == OTHER_WORKLOAD;
        other(a).cmp(&other(b)).then_with(|| {
            let by_value = match (sort_value(a, key), sort_value(b, key)) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            };
            by_value.then_with(|| a.workload.cmp(&b.workload))
        })
    });
}

/// `512 MiB`, `1.5 GiB`, `0 B`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn rate_cell(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
    }
}

/// The workload column's widest; longer ids are cut (the JSON has them whole).
const MAX_WORKLOAD_WIDTH: usize = 56;

fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(width - 1).collect();
        t.push('…');
        t
    }
}

fn sort_name(key: SortKey) -> String {
    key.to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

/// The rows shown: sorted, then cut to the limit; and how many were left out.
fn shown(view: &View, frame: &Frame<'_>) -> (Vec<Row>, usize) {
    let mut rows = view.rows.clone();
    sort(&mut rows, frame.sort);
    let limit = frame.limit.unwrap_or(usize::MAX);
    let left_out = rows.len().saturating_sub(limit);
    rows.truncate(limit);
    (rows, left_out)
}

/// The frame as text: a header with the totals, the table, what the rates need.
pub fn render_text(view: &View, frame: &Frame<'_>) -> String {
    let t = &view.totals;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "rocewatch top: {}  {}{}",
        frame.host,
        frame.time,
        frame
            .every
            .map(|e| format!("  every {e} (q or Ctrl-C to quit)"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        s,
        "workloads {}{}  QPs {}  CQs {}  MRs {} ({})  PDs {}  sorted by {}",
        t.workloads,
        if t.folded > 0 {
            format!(" ({} folded into {OTHER_WORKLOAD})", t.folded)
        } else {
            String::new()
        },
        t.qps,
        t.cqs,
        t.mrs,
        bytes(t.mr_bytes),
        t.pds,
        sort_name(frame.sort)
    );
    let _ = writeln!(s);
    let (rows, left_out) = shown(view, frame);
    if view.rows.is_empty() {
        let _ = writeln!(s, "no RDMA resources held");
    } else {
        let w = rows
            .iter()
            .map(|r| r.workload.chars().count())
            .max()
            .unwrap_or(0)
            .clamp("WORKLOAD".len(), MAX_WORKLOAD_WIDTH);
        let _ = writeln!(
            s,
            "{:<w$}  {:<7} {:>6} {:>6} {:>6} {:>9} {:>5} {:>8} {:>8} {:>9}  PORTS",
            "WORKLOAD",
            "KIND",
            "QPS",
            "CQS",
            "MRS",
            "MR BYTES",
            "PDS",
            "RETX/s",
            "CNP/s",
            "RX REQ/s"
        );
        for r in &rows {
            let rate = |f: fn(&Rates) -> Option<f64>| rate_cell(r.rates.as_ref().and_then(f));
            let _ = writeln!(
                s,
                "{:<w$}  {:<7} {:>6} {:>6} {:>6} {:>9} {:>5} {:>8} {:>8} {:>9}  {}",
                cut(&r.workload, w),
                r.kind,
                r.qps,
                r.cqs,
                r.mrs,
                bytes(r.mr_bytes),
                r.pds,
                rate(|x| x.retrans_per_s),
                rate(|x| x.cnps_per_s),
                rate(|x| x.requests_per_s),
                r.ports.join(",")
            );
        }
        if left_out > 0 {
            let _ = writeln!(s, "({left_out} more not shown: --limit)");
        }
    }
    let _ = writeln!(s);
    if !view.counters {
        let _ = writeln!(
            s,
            "rates: - (no per-QP counters: the running agent binds them with {COUNTERS_HOW}, and top reads them given that configuration, --config; some drivers bind none)"
        );
    } else if let Some(dt) = view.rates_over_s {
        let _ = writeln!(
            s,
            "rates over {dt:.1} s of per-QP counters; RX REQ/s: requests received (no driver counts bytes per QP); the counters summed: rocewatch top --help"
        );
    } else {
        let _ = writeln!(s, "rates: - until the next collection");
    }
    for (target, message) in frame.errors {
        let _ = writeln!(s, "error: {target}: {message}");
    }
    s
}

/// The frame as JSON: `{host, time, sort, totals, folded, rates_over_s, per_qp_counters,
/// workloads: [{workload, kind, attributes, qps, cqs, mrs, mr_bytes, pds, ports,
/// rates}], not_shown, errors: [{target, message}]}`.
pub fn render_json(view: &View, frame: &Frame<'_>) -> serde_json::Value {
    let (rows, left_out) = shown(view, frame);
    serde_json::json!({
        "host": frame.host,
        "time": frame.time,
        "sort": sort_name(frame.sort),
        "totals": view.totals,
        "folded": view.totals.folded,
        "rates_over_s": view.rates_over_s,
        "per_qp_counters": view.counters,
        "workloads": rows,
        "not_shown": left_out,
        "errors": frame.errors.iter().map(|(t, m)| serde_json::json!({"target": t, "message": m})).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_metrics::{ATTR_K8S_POD_UID, ATTR_SLURM_JOB, ATTR_SLURM_STEP};
    use rocewatch_plugin_api::{MetricKind, Value};
    use std::sync::Arc;

    const POD: &str = "pod:7c1d5e2a-0000-4000-8000-00000000beef/3f9a1c2b7d4e";

    fn sample(name: &'static str, kind: MetricKind, v: u64, attrs: &[(&str, &str)]) -> Sample {
        Sample {
            name: name.into(),
            unit: "1".into(),
            value: Value::U64(v),
            attributes: Arc::new(
                attrs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            source: "netlink".into(),
            kind,
        }
    }

    /// The attributes of a workload: its id, kind and identity.
    fn who(id: &str) -> Vec<(&str, &str)> {
        match id {
            POD => vec![
                (ATTR_WORKLOAD, POD),
                (ATTR_WORKLOAD_KIND, "pod"),
                (ATTR_K8S_POD_UID, "7c1d5e2a-0000-4000-8000-00000000beef"),
            ],
            "slurm:42.0" => vec![
                (ATTR_WORKLOAD, "slurm:42.0"),
                (ATTR_WORKLOAD_KIND, "slurm"),
                (ATTR_SLURM_JOB, "42"),
                (ATTR_SLURM_STEP, "0"),
            ],
            "kernel:ib_core" => vec![
                (ATTR_WORKLOAD, "kernel:ib_core"),
                (ATTR_WORKLOAD_KIND, "kernel"),
                ("process.command", "ib_core"),
            ],
            "unit:nccl-tests.service" => vec![
                (ATTR_WORKLOAD, "unit:nccl-tests.service"),
                (ATTR_WORKLOAD_KIND, "unit"),
                ("systemd.unit", "nccl-tests.service"),
            ],
            _ => vec![(ATTR_WORKLOAD, "other"), (ATTR_WORKLOAD_KIND, "other")],
        }
    }

    fn gauge(name: &'static str, id: &str, dev: &str, port: Option<&str>, v: u64) -> Sample {
        let mut a = who(id);
        a.push((ATTR_DEVICE, dev));
        if let Some(p) = port {
            a.push((ATTR_PORT, p));
        }
        sample(name, MetricKind::Gauge, v, &a)
    }

    fn counter(id: &str, dev: &str, port: &str, name: &str, v: u64) -> Sample {
        let mut a = who(id);
        a.extend([(ATTR_DEVICE, dev), (ATTR_PORT, port), (ATTR_COUNTER, name)]);
        sample(WORKLOAD_COUNTER, MetricKind::Counter, v, &a)
    }

    /// Two workloads on two ports, a kernel consumer, the folded rest; no counters.
    fn resources() -> Vec<Sample> {
        vec![
            gauge(RESOURCE_QPS, "slurm:42.0", "mlx5_0", Some("1"), 40),
            gauge(RESOURCE_QPS, "slurm:42.0", "mlx5_1", Some("1"), 24),
            gauge(RESOURCE_QPS, POD, "mlx5_0", Some("1"), 12),
            gauge(RESOURCE_QPS, POD, "mlx5_0", None, 1),
            gauge(RESOURCE_QPS, "kernel:ib_core", "mlx5_0", Some("1"), 2),
            gauge(RESOURCE_QPS, "other", "mlx5_1", Some("1"), 90),
            gauge(RESOURCE_CQS, "slurm:42.0", "mlx5_0", None, 64),
            gauge(RESOURCE_CQS, POD, "mlx5_0", None, 13),
            gauge(RESOURCE_MRS, "slurm:42.0", "mlx5_0", None, 8),
            gauge(RESOURCE_MRS, POD, "mlx5_0", None, 300),
            gauge(RESOURCE_MR_BYTES, "slurm:42.0", "mlx5_0", None, 8 << 30),
            gauge(RESOURCE_MR_BYTES, POD, "mlx5_0", None, 600 << 20),
            gauge(RESOURCE_PDS, "slurm:42.0", "mlx5_0", None, 2),
            gauge(RESOURCE_PDS, POD, "mlx5_0", None, 1),
            gauge(RESOURCE_PDS, "kernel:ib_core", "mlx5_0", None, 1),
            // A workload gone a moment ago: its series read 0 for a while.
            gauge(
                RESOURCE_QPS,
                "unit:nccl-tests.service",
                "mlx5_0",
                Some("1"),
                0,
            ),
            gauge(RESOURCE_MRS, "unit:nccl-tests.service", "mlx5_0", None, 0),
            sample(
                RESOURCE_WORKLOADS,
                MetricKind::Gauge,
                3,
                &[(ATTR_WORKLOAD_STATE, "reported")],
            ),
            sample(
                RESOURCE_WORKLOADS,
                MetricKind::Gauge,
                7,
                &[(ATTR_WORKLOAD_STATE, "folded")],
            ),
        ]
    }

    fn ids(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.workload.as_str()).collect()
    }

    fn frame(sort: SortKey) -> Frame<'static> {
        Frame {
            host: "node7",
            time: "2026-01-02T03:04:05Z",
            sort,
            ..Frame::default()
        }
    }

    #[test]
    fn one_row_per_workload_summed_over_its_devices_and_ports() {
        let v = build(&resources(), None);
        assert_eq!(v.rows.len(), 4, "the gone unit holds nothing: not listed");
        let slurm = v.rows.iter().find(|r| r.workload == "slurm:42.0").unwrap();
        assert_eq!(
            (slurm.qps, slurm.cqs, slurm.mrs, slurm.mr_bytes, slurm.pds),
            (64, 64, 8, 8 << 30, 2)
        );
        assert_eq!(slurm.kind, "slurm");
        assert_eq!(slurm.ports, ["mlx5_0/1", "mlx5_1/1"]);
        assert_eq!(
            slurm.attributes,
            [("slurm.job.id", "42"), ("slurm.step.id", "0")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into()
        );
        let pod = v.rows.iter().find(|r| r.workload == POD).unwrap();
        assert_eq!(pod.qps, 13, "its unbound QP counts too");
        assert_eq!(
            pod.ports,
            ["mlx5_0/1"],
            "the device alone only when nothing is bound"
        );
        let kernel = v
            .rows
            .iter()
            .find(|r| r.workload == "kernel:ib_core")
            .unwrap();
        assert_eq!(kernel.ports, ["mlx5_0/1"]);
        assert_eq!(
            v.totals,
            Totals {
                workloads: 10,
                qps: 169,
                cqs: 77,
                mrs: 308,
                mr_bytes: (8 << 30) + (600 << 20),
                pds: 4,
                folded: 7
            }
        );
        assert!(!v.counters && v.rates_over_s.is_none());
        assert!(v.rows.iter().all(|r| r.rates.is_none()));
    }

    #[test]
    fn sorted_by_a_column_with_the_folded_rest_last() {
        let v = build(&resources(), None);
        let mut rows = v.rows.clone();
        sort(&mut rows, SortKey::Qps);
        assert_eq!(
            ids(&rows),
            ["slurm:42.0", POD, "kernel:ib_core", "other"],
            "other has 90 QPs, yet last"
        );
        sort(&mut rows, SortKey::Mrs);
        assert_eq!(ids(&rows), [POD, "slurm:42.0", "kernel:ib_core", "other"]);
        sort(&mut rows, SortKey::MrBytes);
        assert_eq!(ids(&rows), ["slurm:42.0", POD, "kernel:ib_core", "other"]);
        sort(&mut rows, SortKey::Workload);
        assert_eq!(ids(&rows), ["kernel:ib_core", POD, "slurm:42.0", "other"]);
        // Without rates, a rate column keeps the workload order.
        sort(&mut rows, SortKey::Retrans);
        assert_eq!(ids(&rows), ["kernel:ib_core", POD, "slurm:42.0", "other"]);
        let text = render_text(
            &v,
            &Frame {
                limit: Some(2),
                ..frame(SortKey::Qps)
            },
        );
        assert!(text.contains("(2 more not shown: --limit)"), "{text}");
        let json = render_json(
            &v,
            &Frame {
                limit: Some(2),
                ..frame(SortKey::Qps)
            },
        );
        assert_eq!(json["workloads"].as_array().unwrap().len(), 2);
        assert_eq!(json["not_shown"], 2);
        assert_eq!(json["folded"], 7);
    }

    /// Per-QP counters of the two workloads at `t` seconds: the Slurm step resends, the
    /// pod is congested.
    fn counters(t: u64) -> Vec<Sample> {
        vec![
            counter("slurm:42.0", "mlx5_0", "1", "packet_seq_err", 100 + 3 * t),
            counter("slurm:42.0", "mlx5_0", "1", "local_ack_timeout_err", 10 + t),
            counter("slurm:42.0", "mlx5_0", "1", "out_of_sequence", 500 + 50 * t),
            counter(
                "slurm:42.0",
                "mlx5_0",
                "1",
                "rx_write_requests",
                1000 + 2000 * t,
            ),
            counter("slurm:42.0", "mlx5_1", "1", "roce_adp_retrans", 5 + t),
            counter(POD, "mlx5_0", "1", "np_cnp_sent", 40 * t),
            counter(POD, "mlx5_0", "1", "rp_cnp_handled", 10 * t),
            counter(POD, "mlx5_0", "1", "rx_read_requests", 7 + 100 * t),
        ]
    }

    #[test]
    fn rates_from_two_collections_never_negative_after_a_reset() {
        let before: Vec<Sample> = resources().into_iter().chain(counters(10)).collect();
        let now: Vec<Sample> = resources().into_iter().chain(counters(12)).collect();
        let v = build(&now, Some((&before, 2.0)));
        assert_eq!(v.rates_over_s, Some(2.0));
        let slurm = v.rows.iter().find(|r| r.workload == "slurm:42.0").unwrap();
        let r = slurm.rates.as_ref().unwrap();
        // packet_seq_err 3/s + local_ack_timeout_err 1/s + roce_adp_retrans 1/s (mlx5_1);
        // out_of_sequence is the peer's resending, not counted.
        assert_eq!(r.retrans_per_s, Some(5.0));
        assert_eq!(r.cnps_per_s, None, "its driver reported no CNP counter");
        assert_eq!(r.requests_per_s, Some(2000.0));
        assert_eq!(r.counters["out_of_sequence"], 50.0);
        let pod = v.rows.iter().find(|r| r.workload == POD).unwrap();
        let p = pod.rates.as_ref().unwrap();
        assert_eq!(
            (p.cnps_per_s, p.retrans_per_s, p.requests_per_s),
            (Some(50.0), None, Some(100.0))
        );
        assert!(v
            .rows
            .iter()
            .find(|r| r.workload == "kernel:ib_core")
            .unwrap()
            .rates
            .is_none());
        let mut rows = v.rows.clone();
        sort(&mut rows, SortKey::Cnps);
        assert_eq!(ids(&rows)[0], POD);
        sort(&mut rows, SortKey::Throughput);
        assert_eq!(ids(&rows)[..2], ["slurm:42.0", POD]);
        sort(&mut rows, SortKey::Retrans);
        assert_eq!(ids(&rows)[0], "slurm:42.0");

        // The Slurm step's QP was destroyed and a new one bound: its counters start over.
        // That series says nothing for this interval (no negative rate); the others do.
        let mut reset = counters(13);
        reset[0] = counter("slurm:42.0", "mlx5_0", "1", "packet_seq_err", 2);
        let after: Vec<Sample> = resources().into_iter().chain(reset).collect();
        let v = build(&after, Some((&now, 1.0)));
        let r = v
            .rows
            .iter()
            .find(|r| r.workload == "slurm:42.0")
            .unwrap()
            .rates
            .clone()
            .unwrap();
        assert_eq!(
            r.retrans_per_s,
            Some(2.0),
            "local_ack_timeout_err and roce_adp_retrans only"
        );
        assert!(r.counters.values().all(|v| *v >= 0.0));
        assert!(!r.counters.contains_key("packet_seq_err"));

        // One reading only: counters, no rates yet.
        let v = build(&now, None);
        assert!(v.counters && v.rates_over_s.is_none());
        assert!(
            render_text(&v, &frame(SortKey::Qps)).contains("rates: - until the next collection")
        );
    }

    #[test]
    fn nothing_held_says_so() {
        let v = build(
            &[sample(
                RESOURCE_WORKLOADS,
                MetricKind::Gauge,
                0,
                &[(ATTR_WORKLOAD_STATE, "reported")],
            )],
            None,
        );
        let text = render_text(&v, &frame(SortKey::Qps));
        assert!(text.contains("workloads 0  QPs 0"), "{text}");
        assert!(text.contains("\nno RDMA resources held\n"), "{text}");
        assert_eq!(
            render_json(&v, &frame(SortKey::Qps))["workloads"],
            serde_json::json!([])
        );
    }

    #[test]
    fn bytes_read_like_ls_h() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(600 << 20), "600 MiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(bytes(8 << 30), "8 GiB");
    }

    /// The text and JSON of a frame with rates, as `rocewatch top` prints them (printed
    /// with --nocapture for the docs).
    #[test]
    fn a_whole_frame() {
        let before: Vec<Sample> = resources().into_iter().chain(counters(10)).collect();
        let now: Vec<Sample> = resources().into_iter().chain(counters(12)).collect();
        let v = build(&now, Some((&before, 2.0)));
        let errors = [(
            "mlx5_1".to_string(),
            "per-QP counters: EOPNOTSUPP".to_string(),
        )];
        let f = Frame {
            errors: &errors,
            every: Some("2s"),
            ..frame(SortKey::Qps)
        };
        let text = render_text(&v, &f);
        println!("{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "rocewatch top: node7  2026-01-02T03:04:05Z  every 2s (q or Ctrl-C to quit)"
        );
        assert_eq!(lines[1], "workloads 10 (7 folded into other)  QPs 169  CQs 77  MRs 308 (8.6 GiB)  PDs 4  sorted by qps");
        assert!(
            lines[3].starts_with("WORKLOAD") && lines[3].ends_with("PORTS"),
            "{text}"
        );
        assert!(
            lines[4].starts_with("slurm:42.0 ") && lines[4].ends_with("mlx5_0/1,mlx5_1/1"),
            "{text}"
        );
        assert!(lines[4].contains("  5.0 "), "{text}");
        assert!(lines[7].starts_with("other "), "{text}");
        assert!(text.contains("error: mlx5_1: per-QP counters: EOPNOTSUPP"));
        let json = render_json(&v, &Frame { every: None, ..f });
        println!("{}", serde_json::to_string_pretty(&json).unwrap());
        assert_eq!(json["workloads"][0]["workload"], "slurm:42.0");
        assert_eq!(json["workloads"][0]["rates"]["retrans_per_s"], 5.0);
        assert_eq!(json["workloads"][0]["attributes"]["slurm.job.id"], "42");
        assert_eq!(json["workloads"][2]["rates"], serde_json::Value::Null);
        assert_eq!(json["totals"]["workloads"], 10);
        assert_eq!(json["errors"][0]["target"], "mlx5_1");
    }

    #[test]
    fn without_counters_the_rates_say_how_to_get_them() {
        let v = build(&resources(), Some((&resources(), 2.0)));
        assert!(v.rates_over_s.is_none());
        let text = render_text(&v, &frame(SortKey::Qps));
        assert!(text.contains(COUNTERS_HOW), "{text}");
        let slurm = text.lines().find(|l| l.starts_with("slurm:42.0")).unwrap();
        assert_eq!(
            slurm.split_whitespace().filter(|c| *c == "-").count(),
            3,
            "{slurm}"
        );
    }
}
