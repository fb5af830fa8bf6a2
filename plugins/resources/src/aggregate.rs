//! Resources summed per workload: the pure part of a collection (a snapshot of the
//! kernel's QPs, CQs, MRs and PDs and each owner's workload in, samples out), bounded by
//! `max_workloads`: the workloads holding the most QPs (then MR bytes) get series of their
//! own, the rest are summed under `other` and counted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rocewatch_metrics::{
    CatalogEntry, ATTR_COUNTER, ATTR_DEVICE, ATTR_PORT, ATTR_QP_STATE, ATTR_WORKLOAD_STATE,
    RESOURCE_CATALOG, RESOURCE_CQS, RESOURCE_MRS, RESOURCE_MR_BYTES, RESOURCE_PDS, RESOURCE_QPS,
    RESOURCE_WORKLOADS, WORKLOAD_COUNTER, WORKLOAD_FOLDED, WORKLOAD_REPORTED,
};
use rocewatch_netlink::rdma_res::ResourceSnapshot;
use rocewatch_netlink::rdma_stat::QpCounter;
use rocewatch_plugin_api::{Attributes, Sample, Value};

use crate::workload::Workload;

/// Who holds a resource: a process, or a kernel consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner<'a> {
    Pid(u32),
    Kernel(&'a str),
    Unknown,
}

impl<'a> Owner<'a> {
    pub fn of(pid: Option<u32>, kern_name: Option<&'a str>) -> Self {
        match (pid, kern_name) {
            (Some(p), _) => Owner::Pid(p),
            (None, Some(k)) => Owner::Kernel(k),
            (None, None) => Owner::Unknown,
        }
    }
}

/// The totals of one workload, for ranking.
#[derive(Debug, Default, Clone, Copy)]
struct Weight {
    qps: u64,
    mr_bytes: u64,
    any: u64,
}

/// What one collection found.
#[derive(Debug, Default)]
pub struct Aggregate {
    pub samples: Vec<Sample>,
    /// Workloads with series of their own.
    pub reported: usize,
    /// Workloads summed under `other`.
    pub folded: usize,
}

fn entry(name: &str) -> &'static CatalogEntry {
    RESOURCE_CATALOG
        .iter()
        .find(|e| e.name == name)
        .expect("resource metric is catalogued")
}

/// The per-collection sums, keyed by device name (borrowed from the snapshot) and index
/// into the workload table.
#[derive(Default)]
struct Sums<'a> {
    /// By device, port, workload and QP state (`rdma`'s names: RTS, ERR...).
    qps: HashMap<(&'a str, Option<u32>, usize, &'static str), u64>,
    cqs: HashMap<(&'a str, usize), u64>,
    mrs: HashMap<(&'a str, usize), (u64, u64)>,
    pds: HashMap<(&'a str, usize), u64>,
    counters: HashMap<(&'a str, Option<u32>, usize, &'a str), u64>,
}

/// Sums `snap` (and the per-QP `counters`) per device, port and workload. `workload_of`
/// names the workload of an owner (called once per distinct owner).
pub fn aggregate<'a>(
    snap: &'a ResourceSnapshot,
    counters: &'a [QpCounter],
    mut workload_of: impl FnMut(Owner<'_>) -> Workload,
    max_workloads: usize,
) -> Aggregate {
    // Owner -> index into `table` (workloads are few: 50 for 1000 QPs).
    let mut table: Vec<Workload> = Vec::new();
    let mut index: HashMap<Workload, usize> = HashMap::new();
    let mut owners: HashMap<(Option<u32>, Option<&'a str>), usize> = HashMap::new();
    let mut idx = |pid: Option<u32>, kern: Option<&'a str>| -> usize {
        if let Some(i) = owners.get(&(pid, kern)) {
            return *i;
        }
        let w = workload_of(Owner::of(pid, kern));
        let i = *index.entry(w.clone()).or_insert_with(|| {
            table.push(w);
            table.len() - 1
        });
        owners.insert((pid, kern), i);
        i
    };
    let mut sums = Sums::default();
    let mut weight: Vec<Weight> = Vec::new();
    let weigh = |i: usize, qps: u64, bytes: u64, weight: &mut Vec<Weight>| {
        if weight.len() <= i {
            weight.resize(i + 1, Weight::default());
        }
        weight[i].qps += qps;
        weight[i].mr_bytes += bytes;
        weight[i].any += 1;
    };
    for q in &snap.qps {
        let i = idx(q.pid, q.kern_name.as_deref());
        *sums
            .qps
            .entry((&q.dev_name, q.port, i, q.state.name()))
            .or_default() += 1;
        weigh(i, 1, 0, &mut weight);
    }
    for c in &snap.cqs {
        let i = idx(c.pid, c.kern_name.as_deref());
        *sums.cqs.entry((&c.dev_name, i)).or_default() += 1;
        weigh(i, 0, 0, &mut weight);
    }
    for m in &snap.mrs {
        let i = idx(m.pid, m.kern_name.as_deref());
        let e = sums.mrs.entry((&m.dev_name, i)).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(m.mrlen);
        weigh(i, 0, m.mrlen, &mut weight);
    }
    for p in &snap.pds {
        let i = idx(p.pid, p.kern_name.as_deref());
        *sums.pds.entry((&p.dev_name, i)).or_default() += 1;
        weigh(i, 0, 0, &mut weight);
    }
    for c in counters {
        let i = idx(c.pid, c.kern_name.as_deref());
        for (name, v) in &c.hw_counters {
            let k = (c.dev_name.as_str(), c.port, i, name.as_str());
            let e = sums.counters.entry(k).or_default();
            *e = e.saturating_add(*v);
        }
    }
    // The bound: the heaviest workloads keep their own series.
    weight.resize(table.len(), Weight::default());
    let mut order: Vec<usize> = (0..table.len()).collect();
    order.sort_by(|a, b| {
        let (x, y) = (weight[*a], weight[*b]);
        (y.qps, y.mr_bytes, y.any)
            .cmp(&(x.qps, x.mr_bytes, x.any))
            .then_with(|| table[*a].cmp(&table[*b]))
    });
    let keep = max_workloads.min(table.len());
    let folded = table.len() - keep;
    // Index -> the attributes it is reported under (its own, or other's).
    let other = {
        let mut a = BTreeMap::new();
        Workload::Other.attributes(&mut a);
        a
    };
    let mut attrs: Vec<&BTreeMap<String, String>> = vec![&other; table.len()];
    let own: Vec<BTreeMap<String, String>> = order[..keep]
        .iter()
        .map(|i| {
            let mut a = BTreeMap::new();
            table[*i].attributes(&mut a);
            a
        })
        .collect();
    for (k, i) in order[..keep].iter().enumerate() {
        attrs[*i] = &own[k];
    }
    let mut out = sums.samples(&attrs);
    for (state, n) in [(WORKLOAD_REPORTED, keep), (WORKLOAD_FOLDED, folded)] {
        let a = BTreeMap::from([(ATTR_WORKLOAD_STATE.to_string(), state.to_string())]);
        out.add(RESOURCE_WORKLOADS, a, n as u64);
    }
    Aggregate {
        samples: out.into_samples(),
        reported: keep,
        folded,
    }
}

impl Sums<'_> {
    /// The sums as samples, each workload under `attrs[index]` (its own attributes, or
    /// those of `other`).
    fn samples(&self, attrs: &[&BTreeMap<String, String>]) -> Samples {
        let sums = self;
        let mut out = Samples::default();
        let with = |device: &str, port: Option<u32>, i: usize| {
            let mut a = attrs[i].clone();
            a.insert(ATTR_DEVICE.into(), device.to_string());
            if let Some(p) = port {
                a.insert(ATTR_PORT.into(), p.to_string());
            }
            a
        };
        for ((d, p, i, state), n) in &sums.qps {
            let mut a = with(d, *p, *i);
            a.insert(ATTR_QP_STATE.into(), state.to_string());
            out.add(RESOURCE_QPS, a, *n);
        }
        for ((d, i), n) in &sums.cqs {
            out.add(RESOURCE_CQS, with(d, None, *i), *n);
        }
        for ((d, i), (n, bytes)) in &sums.mrs {
            out.add(RESOURCE_MRS, with(d, None, *i), *n);
            out.add(RESOURCE_MR_BYTES, with(d, None, *i), *bytes);
        }
        for ((d, i), n) in &sums.pds {
            out.add(RESOURCE_PDS, with(d, None, *i), *n);
        }
        for ((d, p, i, name), v) in &sums.counters {
            let mut a = with(d, *p, *i);
            a.insert(ATTR_COUNTER.into(), name.to_string());
            out.add(WORKLOAD_COUNTER, a, *v);
        }
        out
    }
}

/// Samples summed by name and attributes (the folded workloads land on one `other`
/// series per device and port).
#[derive(Default)]
struct Samples {
    sums: BTreeMap<(&'static str, BTreeMap<String, String>), u64>,
}

impl Samples {
    fn add(&mut self, name: &'static str, attributes: BTreeMap<String, String>, v: u64) {
        let e = self.sums.entry((name, attributes)).or_default();
        *e = e.saturating_add(v);
    }

    fn into_samples(self) -> Vec<Sample> {
        let source: Arc<str> = Arc::from(RESOURCE_CATALOG[0].source);
        self.sums
            .into_iter()
            .map(|((name, a), v)| {
                let e = entry(name);
                Sample {
                    name: name.into(),
                    unit: e.unit.into(),
                    value: Value::U64(v),
                    attributes: Attributes::new(a.into()),
                    source: Arc::clone(&source),
                    kind: e.kind,
                }
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use rocewatch_metrics::{ATTR_WORKLOAD, OTHER_WORKLOAD};
    use rocewatch_netlink::rdma_res::{QpState, QpType, ResMr, ResQp};

    use super::*;

    pub(crate) fn qp(
        dev: &str,
        port: Option<u32>,
        lqpn: u32,
        pid: Option<u32>,
        kern: Option<&str>,
    ) -> ResQp {
        ResQp {
            dev_index: 0,
            dev_name: dev.into(),
            port,
            lqpn,
            rqpn: None,
            qp_type: QpType(2),
            state: QpState(3),
            pdn: None,
            sq_psn: None,
            rq_psn: None,
            pid,
            kern_name: kern.map(str::to_string),
        }
    }

    pub(crate) fn mr(dev: &str, len: u64, pid: Option<u32>) -> ResMr {
        ResMr {
            dev_index: 0,
            dev_name: dev.into(),
            mrn: None,
            mrlen: len,
            rkey: None,
            lkey: None,
            iova: None,
            pdn: None,
            pid,
            kern_name: None,
        }
    }

    fn by_pid(o: Owner<'_>) -> Workload {
        match o {
            Owner::Pid(p) if p < 100 => Workload::Slurm {
                job: p.to_string(),
                step: Some("0".into()),
                cgroup: format!("/system.slice/slurmstepd.scope/job_{p}/step_0"),
            },
            Owner::Pid(p) => Workload::Process {
                command: format!("cmd{p}"),
            },
            Owner::Kernel(k) => Workload::Kernel { consumer: k.into() },
            Owner::Unknown => Workload::Process {
                command: "unknown".into(),
            },
        }
    }

    fn value(a: &Aggregate, name: &str, attrs: &[(&str, &str)]) -> Option<u64> {
        a.samples
            .iter()
            .find(|s| s.name == name && attrs.iter().all(|(k, v)| s.attributes.get(k) == Some(*v)))
            .map(|s| match s.value {
                Value::U64(v) => v,
                v => panic!("{v:?}"),
            })
    }

    #[test]
    fn counted_per_device_port_and_workload_never_per_process() {
        let snap = ResourceSnapshot {
            qps: vec![
                // Two processes of job 42 on mlx5_0/1, one QP of job 43, the kernel's QP1.
                qp("mlx5_0", Some(1), 10, Some(42), None),
                qp("mlx5_0", Some(1), 11, Some(42), None),
                qp("mlx5_0", Some(1), 12, Some(43), None),
                qp("mlx5_0", Some(1), 1, None, Some("ib_core")),
                qp("mlx5_0", None, 13, Some(42), None),
            ],
            mrs: vec![mr("mlx5_0", 4096, Some(42)), mr("mlx5_0", 8192, Some(42))],
            ..Default::default()
        };
        let a = aggregate(&snap, &[], by_pid, 64);
        let q = |w: &str, port: Option<&str>| {
            let mut at = vec![(ATTR_WORKLOAD, w), (ATTR_DEVICE, "mlx5_0")];
            if let Some(p) = port {
                at.push((ATTR_PORT, p));
            }
            value(&a, "rdma.resource.qps", &at)
        };
        assert_eq!(q("slurm:42.0", Some("1")), Some(2));
        assert_eq!(q("slurm:43.0", Some("1")), Some(1));
        // Each series says the workload's cgroup (the audit record's), one per workload.
        assert_eq!(
            value(
                &a,
                "rdma.resource.qps",
                &[
                    (ATTR_WORKLOAD, "slurm:42.0"),
                    (ATTR_PORT, "1"),
                    (
                        rocewatch_metrics::ATTR_WORKLOAD_CGROUP,
                        "/system.slice/slurmstepd.scope/job_42/step_0"
                    )
                ]
            ),
            Some(2)
        );
        assert_eq!(q("kernel:ib_core", Some("1")), Some(1));
        // The QP not bound to a port yet has a series without `rdma.port`.
        let unbound = a
            .samples
            .iter()
            .filter(|s| s.name == "rdma.resource.qps" && s.attributes.get(ATTR_PORT).is_none())
            .count();
        assert_eq!(unbound, 1);
        assert_eq!(
            value(&a, "rdma.resource.mrs", &[(ATTR_WORKLOAD, "slurm:42.0")]),
            Some(2)
        );
        assert_eq!(
            value(
                &a,
                "rdma.resource.mr.bytes",
                &[(ATTR_WORKLOAD, "slurm:42.0")]
            ),
            Some(12288)
        );
        assert_eq!(
            value(
                &a,
                "rdma.resource.workloads",
                &[(ATTR_WORKLOAD_STATE, "reported")]
            ),
            Some(3)
        );
        assert!(a
            .samples
            .iter()
            .all(|s| s.attributes.get("process.pid").is_none()));
    }

    #[test]
    fn qps_are_counted_per_state_so_a_qp_in_error_names_its_workload_and_port() {
        let mut err = qp("mlx5_0", Some(1), 12, Some(43), None);
        err.state = QpState(6);
        let snap = ResourceSnapshot {
            qps: vec![
                qp("mlx5_0", Some(1), 10, Some(42), None),
                qp("mlx5_0", Some(1), 11, Some(43), None),
                err,
            ],
            ..Default::default()
        };
        let a = aggregate(&snap, &[], by_pid, 64);
        let q = |w: &str, state: &str| {
            value(
                &a,
                "rdma.resource.qps",
                &[(ATTR_WORKLOAD, w), (ATTR_PORT, "1"), (ATTR_QP_STATE, state)],
            )
        };
        assert_eq!(q("slurm:43.0", "ERR"), Some(1));
        assert_eq!(q("slurm:43.0", "RTS"), Some(1));
        assert_eq!(q("slurm:42.0", "RTS"), Some(1));
        assert_eq!(q("slurm:42.0", "ERR"), None);
    }

    #[test]
    fn beyond_max_workloads_the_smallest_are_summed_under_other_and_counted() {
        // Workload p holds p QPs (pids 100..110: commands), so the 3 biggest stay.
        let mut qps = Vec::new();
        for p in 101..=110u32 {
            for n in 0..(p - 100) {
                qps.push(qp("mlx5_1", Some(1), p * 100 + n, Some(p), None));
            }
        }
        let snap = ResourceSnapshot {
            qps,
            ..Default::default()
        };
        let a = aggregate(&snap, &[], by_pid, 3);
        assert_eq!((a.reported, a.folded), (3, 7));
        for (w, n) in [
            ("process:cmd110", 10),
            ("process:cmd109", 9),
            ("process:cmd108", 8),
        ] {
            assert_eq!(
                value(&a, "rdma.resource.qps", &[(ATTR_WORKLOAD, w)]),
                Some(n),
                "{w}"
            );
        }
        // 1 + 2 + ... + 7 QPs in one series of `other`.
        assert_eq!(
            value(&a, "rdma.resource.qps", &[(ATTR_WORKLOAD, OTHER_WORKLOAD)]),
            Some(28)
        );
        assert_eq!(
            value(
                &a,
                "rdma.resource.workloads",
                &[(ATTR_WORKLOAD_STATE, "folded")]
            ),
            Some(7)
        );
        assert_eq!(
            a.samples
                .iter()
                .filter(|s| s.name == "rdma.resource.qps")
                .count(),
            4
        );
    }

    #[test]
    fn per_qp_counters_summed_per_workload_and_counter() {
        let c = |pid, v| QpCounter {
            dev_index: 0,
            dev_name: "mlx5_0".into(),
            port: Some(1),
            id: pid,
            mode: None,
            qp_type: None,
            pid: Some(pid),
            kern_name: None,
            lqpns: vec![pid],
            hw_counters: vec![("out_of_sequence".into(), v), ("np_cnp_sent".into(), 2 * v)],
        };
        let a = aggregate(
            &ResourceSnapshot::default(),
            &[c(42, 5), c(42, 7), c(43, 1)],
            by_pid,
            64,
        );
        let get = |w: &str, counter: &str| {
            value(
                &a,
                "rdma.workload.counter",
                &[
                    (ATTR_WORKLOAD, w),
                    (ATTR_COUNTER, counter),
                    (ATTR_PORT, "1"),
                ],
            )
        };
        assert_eq!(get("slurm:42.0", "out_of_sequence"), Some(12));
        assert_eq!(get("slurm:42.0", "np_cnp_sent"), Some(24));
        assert_eq!(get("slurm:43.0", "out_of_sequence"), Some(1));
        let s = a
            .samples
            .iter()
            .find(|s| s.name == "rdma.workload.counter")
            .unwrap();
        assert_eq!(s.kind, rocewatch_plugin_api::MetricKind::Counter);
    }
}
