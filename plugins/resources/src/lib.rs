//! Built-in collector plugin `resources`: the RDMA resources of the host (what `rdma
//! resource show qp|cq|mr|pd` prints), read over RDMA netlink, attributed to workloads
//! (a Kubernetes pod, a Slurm job, a systemd unit, else the command; see [`workload`])
//! and summed per device, port and workload ([`aggregate`]): `rdma.resource.qps`,
//! `.cqs`, `.mrs`, `.mr.bytes`, `.pds`, never per process. Where per-QP counters are bound
//! (auto mode per process: `rdma statistic qp set link DEV/PORT auto type,pid on`), their
//! hw counters are summed per workload too (`rdma.workload.counter`).
//!
//! Options (`[plugins.builtin.resources.options]`):
//! - `max_workloads` (default 64): workloads with series of their own; the rest are summed
//!   under `rdma.workload="other"` and counted in `rdma.resource.workloads{state="folded"}`.
//! - `procfs_root` (default `/proc`): where `<pid>/cgroup` and `<pid>/comm` are read.
//! - `qp_counters` (default false): read the per-QP counters (the agent binds them, see
//!   `rocewatch_qos::qp_mode`, which sets the counter mode).
//!
//! A series that is gone (a workload's last QP closed) reads 0 for five minutes
//! ([`ZERO_FOR`]) before it is dropped, so every scraper sees the count fall.
//!
//! Netlink is the live kernel's: when the agent's sysfs root is not the live `/sys` (a
//! fixture tree), the plugin is unsupported, as it is on a kernel without RDMA.

pub mod aggregate;
pub mod workload;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rocewatch_metrics::counter::{counter_move, hw_counter_overflow};
use rocewatch_netlink::rdma::RdmaNetlink;
use rocewatch_netlink::rdma_stat::QpCounter;
use rocewatch_netlink::NetlinkError;
use rocewatch_plugin_api::*;
use rocewatch_sysfs::inventory::{DeviceFilter, DeviceSelection};

use aggregate::{aggregate, Owner};
use workload::Workload;

/// How long a process's workload is trusted before its cgroup is read again.
const WORKLOAD_TTL: Duration = Duration::from_secs(60);

fn default_max_workloads() -> usize {
    64
}

/// Options of the plugin.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default = "default_max_workloads")]
    pub max_workloads: usize,
    #[serde(default)]
    pub procfs_root: Option<PathBuf>,
    #[serde(default)]
    pub qp_counters: bool,
    /// Device globs (`[devices]`, shared by the plugins).
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl Options {
    pub fn from_json(v: &serde_json::Value) -> Result<Options, PluginError> {
        let o: Options = rocewatch_plugin_api::options::decode(v)?;
        DeviceFilter::new(&DeviceSelection {
            include: o.include.clone(),
            exclude: o.exclude.clone(),
        })?;
        if o.max_workloads == 0 || o.max_workloads > 10_000 {
            return Err(PluginError::InvalidOptions(format!(
                "resources: max_workloads = {}: must be 1..=10000",
                o.max_workloads
            )));
        }
        Ok(o)
    }
}

/// The plugin.
#[derive(Default)]
pub struct Resources {
    nl: Option<RdmaNetlink>,
    opts: Option<Options>,
    filter: Option<DeviceFilter>,
    proc_root: PathBuf,
    unsupported: UnsupportedHere,
    /// pid -> its workload, when it was read, and when the process started (a pid reused
    /// by a new process is read again).
    cache: HashMap<u32, (Workload, Instant, Option<u64>)>,
    /// When each gauge series was last emitted (one gone is reported 0 for [`ZERO_FOR`]).
    seen: HashMap<(Name, Attributes), Instant>,
    /// Devices whose QP counters the kernel refused (said once).
    refused: HashSet<String>,
    /// Per-QP counters as monotonic sums: see [`Monotonic`].
    monotonic: Monotonic,
}

/// A per-QP counter's identity: (device, counter id, owning pid, counter name).
type CounterIdentity = (String, u32, Option<u32>, String);

/// `rdma.workload.counter` as a counter that never goes back: a bound counter's value
/// per (device, counter id, name) is remembered and only its increase is added to the
/// workload's total, so a process that exits (its counter freed) or a workload that moves
/// into or out of `other` does not make the sum fall. A total untouched for [`ZERO_FOR`]
/// is forgotten (its series ends).
#[derive(Debug, Default)]
struct Monotonic {
    /// Per (device, counter id, owning pid, name): the value last read and its increase
    /// then (the pace a 32-bit mlx5 queue counter's wrap is judged by). The pid is part of
    /// the identity: a counter id freed and made again for another process is a new
    /// counter, not a reset of the old one.
    last: HashMap<CounterIdentity, (u64, Option<f64>)>,
    totals: HashMap<Attributes, (u64, Instant)>,
}

impl Monotonic {
    /// The counters with each value replaced by its increase since the last collection.
    /// A counter seen first is one made since (a new QP's counter starts at 0): all of
    /// its value. One that went back is judged as every counter is
    /// (`rocewatch_metrics::counter`): a reset adds nothing; an mlx5 queue counter
    /// crossing 2^32 at its pace adds what it moved across.
    fn deltas(&mut self, counters: &[QpCounter]) -> Vec<QpCounter> {
        let mut last = HashMap::with_capacity(self.last.len());
        let out = counters
            .iter()
            .map(|c| {
                let mut d = c.clone();
                for (name, v) in d.hw_counters.iter_mut() {
                    let key = (c.dev_name.clone(), c.id, c.pid, name.clone());
                    let increase = match self.last.get(&key) {
                        None => Some(*v as f64),
                        Some(&(prev, pace)) => {
                            counter_move(prev as f64, *v as f64, || hw_counter_overflow(name), pace)
                                .increase()
                        }
                    };
                    let keep = if self.last.contains_key(&key) {
                        increase
                    } else {
                        None
                    };
                    last.insert(key, (*v, keep));
                    *v = increase.map_or(0, |i| i as u64);
                }
                d
            })
            .collect();
        self.last = last;
        out
    }

    /// Replaces each `rdma.workload.counter` sample's increase by the series' running total,
    /// and adds the totals of series without an increase now (until [`ZERO_FOR`]).
    fn totals(&mut self, samples: &mut Vec<Sample>, now: Instant) {
        let mut touched = HashSet::new();
        for s in samples
            .iter_mut()
            .filter(|s| s.name == rocewatch_metrics::WORKLOAD_COUNTER)
        {
            let Value::U64(delta) = s.value else { continue };
            let e = self.totals.entry(s.attributes.clone()).or_insert((0, now));
            *e = (e.0.saturating_add(delta), now);
            s.value = Value::U64(e.0);
            touched.insert(s.attributes.clone());
        }
        self.totals
            .retain(|_, (_, at)| now.duration_since(*at) < ZERO_FOR);
        let entry = rocewatch_metrics::RESOURCE_CATALOG
            .iter()
            .find(|e| e.name == rocewatch_metrics::WORKLOAD_COUNTER)
            .expect("catalogued");
        let source: std::sync::Arc<str> = entry.source.into();
        for (a, (total, _)) in &self.totals {
            if touched.contains(a) {
                continue;
            }
            samples.push(Sample {
                name: entry.name.into(),
                unit: entry.unit.into(),
                value: Value::U64(*total),
                attributes: a.clone(),
                source: source.clone(),
                kind: entry.kind,
            });
        }
    }
}

impl Resources {
    pub const NAME: &'static str = "resources";

    pub fn new() -> Self {
        Self::default()
    }

    fn open(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let opts = Options::from_json(&ctx.options)?;
        self.filter = Some(DeviceFilter::new(&DeviceSelection {
            include: opts.include.clone(),
            exclude: opts.exclude.clone(),
        })?);
        self.proc_root = opts
            .procfs_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/proc"));
        self.opts = Some(opts);
        if !rocewatch_sysfs::read::is_sysfs(&ctx.sysfs_root) {
            return Err(PluginError::Unsupported(format!(
                "{} is not the live /sys: this host's RDMA resources say nothing about that tree",
                ctx.sysfs_root.display()
            )));
        }
        let nl = RdmaNetlink::open().map_err(|e| match e {
            NetlinkError::Open { .. } => {
                PluginError::Unsupported(format!("{e} (a kernel without RDMA support)"))
            }
            e => PluginError::Failed(e.to_string()),
        })?;
        self.nl = Some(nl);
        Ok(())
    }

    /// The workload of an owner, from the cache or the proc tree.
    fn workload_of(
        cache: &mut HashMap<u32, (Workload, Instant, Option<u64>)>,
        proc_root: &std::path::Path,
        now: Instant,
        owner: Owner<'_>,
    ) -> Workload {
        match owner {
            Owner::Pid(pid) => {
                let started = workload::start_time(proc_root, pid);
                if let Some((w, at, s)) = cache.get(&pid) {
                    if now.duration_since(*at) < WORKLOAD_TTL && *s == started {
                        return w.clone();
                    }
                }
                let w = workload::of_pid(proc_root, pid).unwrap_or(Workload::Process {
                    command: "exited".into(),
                });
                cache.insert(pid, (w.clone(), now, started));
                w
            }
            Owner::Kernel(k) => Workload::Kernel {
                consumer: k.to_string(),
            },
            Owner::Unknown => Workload::Process {
                command: "unknown".into(),
            },
        }
    }
}

impl Plugin for Resources {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        self.stop();
        let opened = self.open(ctx);
        self.unsupported.start(opened)
    }

    fn stop(&mut self) {
        self.nl = None;
        self.unsupported.clear();
        self.cache.clear();
        self.seen.clear();
        self.refused.clear();
        self.monotonic = Monotonic::default();
    }
}

impl CollectorPlugin for Resources {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        rocewatch_metrics::resource_descriptors()
    }

    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        self.unsupported.check()?;
        let (Some(nl), Some(opts)) = (self.nl.as_mut(), self.opts.as_ref()) else {
            return Err(PluginError::failed("resources: not started"));
        };
        let mut out = ScrapeResult::default();
        let devices = nl
            .devices()
            .map_err(|e| PluginError::Failed(e.to_string()))?;
        let filter = self.filter.as_ref();
        let devices: Vec<_> = devices
            .into_iter()
            .filter(|d| filter.is_none_or(|f| f.allows(&d.name)))
            .collect();
        let snap = nl.resources(&devices);
        for e in &snap.errors {
            out.errors.push(PartialError {
                target: format!("{} {} dump", e.device, e.kind.name()),
                message: e.error.to_string(),
            });
        }
        let mut counters = Vec::new();
        if opts.qp_counters {
            for d in &devices {
                match nl.qp_counters(d.index, None) {
                    Ok(c) => counters.extend(c),
                    Err(e) => {
                        // Said once, as a partial error (the agent logs it).
                        if self.refused.insert(d.name.clone()) {
                            out.errors.push(PartialError {
                                target: format!("{} QP counters", d.name),
                                                message: format!("per-QP counters cannot be read ({e}); the resource counts go on without them"),
                            });
                        }
                    }
                }
            }
        }
        if opts.qp_counters {
            // A driver may accept auto mode and still bind nothing (rxe cannot allocate a
            // counter): the dump, not the mode, tells. Said once per device, as a partial
            // error (the agent logs it).
            for d in &devices {
                let user_qps = snap
                    .qps
                    .iter()
                    .any(|q| q.dev_name == d.name && q.pid.is_some());
                let bound = counters.iter().any(|c| c.dev_name == d.name);
                if user_qps && !bound && self.refused.insert(d.name.clone()) {
                    let why = "no QP of a process is bound to a counter: auto mode binds only QPs made after it was set, and some drivers bind none (rxe cannot allocate a counter); per-workload traffic shows for QPs made from now on, where the driver binds them; the resource counts go on";
                    out.errors.push(PartialError {
                        target: format!("{} QP counters", d.name),
                        message: why.into(),
                    });
                }
            }
        }
        let now = Instant::now();
        let (cache, proc_root) = (&mut self.cache, &self.proc_root);
        let deltas = self.monotonic.deltas(&counters);
        let mut agg = aggregate(
            &snap,
            &deltas,
            |o| Self::workload_of(cache, proc_root, now, o),
            opts.max_workloads,
        );
        self.monotonic.totals(&mut agg.samples, now);
        // Forget processes that hold nothing now.
        let live: HashSet<u32> = snap
            .qps
            .iter()
            .filter_map(|q| q.pid)
            .chain(snap.cqs.iter().filter_map(|c| c.pid))
            .chain(snap.mrs.iter().filter_map(|m| m.pid))
            .chain(snap.pds.iter().filter_map(|p| p.pid))
            .chain(counters.iter().filter_map(|c| c.pid))
            .collect();
        self.cache.retain(|pid, _| live.contains(pid));
        out.samples = agg.samples;
        let unread: HashSet<String> = snap
            .errors
            .iter()
            .filter(|e| e.kind == rocewatch_netlink::rdma_res::ResKind::Qp)
            .map(|e| e.device.clone())
            .collect();
        let gone = Gone {
            hold: ZERO_FOR,
            max: opts.max_workloads.saturating_mul(16),
            unread: &unread,
        };
        zero_the_gone(&mut out.samples, &mut self.seen, now, &gone);
        Ok(out)
    }
}

/// How long a gauge series that is gone (the last QP of a workload closed) is still
/// reported, as 0: the default look-back of Prometheus queries, so a scraper at any
/// interval sees the count fall to zero rather than the series go stale at its last value.
pub const ZERO_FOR: Duration = Duration::from_secs(300);

/// What [`zero_the_gone`] keeps to itself.
struct Gone<'a> {
    /// How long a gone series reads 0.
    hold: Duration,
    /// At most this many gone series read 0 (the most recently gone): workloads that come
    /// and go (job arrays, short pods) cannot add series without bound.
    max: usize,
    /// Devices whose dump failed now: their series are neither zeroed nor forgotten (what
    /// they hold is unknown, not nothing).
    unread: &'a HashSet<String>,
}

/// Adds the series seen within `hold` but not now, at 0; `seen` remembers when each
/// gauge series was last emitted.
fn zero_the_gone(
    samples: &mut Vec<Sample>,
    seen: &mut HashMap<(Name, Attributes), Instant>,
    now: Instant,
    g: &Gone<'_>,
) {
    let source: std::sync::Arc<str> = rocewatch_metrics::RESOURCE_CATALOG[0].source.into();
    for s in samples.iter().filter(|s| s.kind == MetricKind::Gauge) {
        seen.insert((s.name.clone(), s.attributes.clone()), now);
    }
    let unread = |a: &Attributes| {
        a.get(rocewatch_metrics::ATTR_DEVICE)
            .is_some_and(|d| g.unread.contains(d))
    };
    seen.retain(|(_, a), at| now.duration_since(*at) < g.hold || unread(a));
    let mut gone: Vec<(&(Name, Attributes), &Instant)> = seen
        .iter()
        .filter(|((_, a), at)| **at != now && !unread(a))
        .collect();
    if gone.len() > g.max {
        gone.sort_by(|x, y| y.1.cmp(x.1));
        let dropped: Vec<(Name, Attributes)> =
            gone.drain(g.max..).map(|(k, _)| k.clone()).collect();
        for k in dropped {
            seen.remove(&k);
        }
        gone = seen
            .iter()
            .filter(|((_, a), at)| **at != now && !unread(a))
            .collect();
    }
    let zeros: Vec<Sample> = gone
        .into_iter()
        .map(|((name, attributes), _)| {
            let unit = rocewatch_metrics::RESOURCE_CATALOG
                .iter()
                .find(|e| e.name == name.as_ref())
                .map_or("1", |e| e.unit);
            Sample {
                name: name.clone(),
                unit: unit.into(),
                value: Value::U64(0),
                attributes: attributes.clone(),
                source: source.clone(),
                kind: MetricKind::Gauge,
            }
        })
        .collect();
    samples.extend(zeros);
}

#[cfg(test)]
mod tests {
    use rocewatch_netlink::rdma_res::ResourceSnapshot;
    use rocewatch_netlink::rdma_stat::QpCounter;

    use super::*;
    use crate::aggregate::tests::qp;

    #[test]
    fn a_workload_whose_qps_closed_reads_zero_for_a_while_then_is_gone() {
        let wl = |_: Owner<'_>| Workload::Process {
            command: "ib_write_bw".into(),
        };
        let mut seen = HashMap::new();
        let none = HashSet::new();
        let g = Gone {
            hold: Duration::from_secs(10),
            max: 100,
            unread: &none,
        };
        let t0 = Instant::now();
        let snap = ResourceSnapshot {
            qps: vec![qp("rxe0", Some(1), 17, Some(124), None)],
            ..Default::default()
        };
        let qps = |s: &[Sample]| {
            s.iter()
                .filter(|s| s.name == "rdma.resource.qps")
                .map(|s| s.value)
                .collect::<Vec<_>>()
        };
        let mut s = aggregate(&snap, &[], wl, 64).samples;
        zero_the_gone(&mut s, &mut seen, t0, &g);
        assert_eq!(qps(&s), [Value::U64(1)]);
        for secs in [1, 9] {
            let mut s = aggregate(&ResourceSnapshot::default(), &[], wl, 64).samples;
            zero_the_gone(&mut s, &mut seen, t0 + Duration::from_secs(secs), &g);
            assert_eq!(qps(&s), [Value::U64(0)], "{secs} s later");
        }
        let mut s = aggregate(&ResourceSnapshot::default(), &[], wl, 64).samples;
        zero_the_gone(&mut s, &mut seen, t0 + Duration::from_secs(11), &g);
        assert!(qps(&s).is_empty());
    }

    #[test]
    fn gone_series_are_bounded_and_an_unread_device_is_not_zeroed() {
        let t0 = Instant::now();
        let mut seen = HashMap::new();
        let snap = |n: u32, dev: &str| ResourceSnapshot {
            qps: (0..n)
                .map(|p| qp(dev, Some(1), p, Some(1000 + p), None))
                .collect(),
            ..Default::default()
        };
        let each = |o: Owner<'_>| match o {
            Owner::Pid(p) => Workload::Process {
                command: format!("c{p}"),
            },
            _ => unreachable!(),
        };
        let none = HashSet::new();
        let g = Gone {
            hold: Duration::from_secs(300),
            max: 3,
            unread: &none,
        };
        let mut s = aggregate(&snap(10, "mlx5_0"), &[], each, 64).samples;
        zero_the_gone(&mut s, &mut seen, t0, &g);
        // All ten gone at once: only three read 0.
        let mut s = aggregate(&ResourceSnapshot::default(), &[], each, 64).samples;
        zero_the_gone(&mut s, &mut seen, t0 + Duration::from_secs(1), &g);
        let zeros = s.iter().filter(|s| s.name == "rdma.resource.qps").count();
        assert_eq!(zeros, 3);
        // A device whose dump failed: its series are not zeroed (unknown, not nothing).
        let mut seen = HashMap::new();
        let mut s = aggregate(&snap(2, "mlx5_1"), &[], each, 64).samples;
        zero_the_gone(&mut s, &mut seen, t0, &g);
        let unread = HashSet::from(["mlx5_1".to_string()]);
        let g = Gone {
            unread: &unread,
            ..g
        };
        let mut s = aggregate(&ResourceSnapshot::default(), &[], each, 64).samples;
        zero_the_gone(&mut s, &mut seen, t0 + Duration::from_secs(1), &g);
        assert_eq!(
            s.iter().filter(|s| s.name == "rdma.resource.qps").count(),
            0
        );
        let kept = seen
            .keys()
            .filter(|(_, a)| a.get(rocewatch_metrics::ATTR_DEVICE).is_some())
            .count();
        assert_eq!(kept, 2, "kept for when the device is read again");
    }

    #[test]
    fn per_qp_counters_never_go_back_when_a_process_exits_or_a_counter_resets() {
        let c = |id: u32, pid: u32, v: u64| QpCounter {
            dev_index: 0,
            dev_name: "mlx5_0".into(),
            port: Some(1),
            id,
            mode: None,
            qp_type: None,
            pid: Some(pid),
            kern_name: None,
            lqpns: vec![],
            hw_counters: vec![("out_of_sequence".into(), v)],
        };
        let job = |_: Owner<'_>| Workload::Slurm {
            job: "42".into(),
            step: Some("0".into()),
            cgroup: "/system.slice/slurmstepd.scope/job_42/step_0".into(),
        };
        let mut m = Monotonic::default();
        let t0 = Instant::now();
        let mut total = |counters: &[QpCounter], secs: u64| {
            let d = m.deltas(counters);
            let mut s = aggregate(&ResourceSnapshot::default(), &d, job, 64).samples;
            m.totals(&mut s, t0 + Duration::from_secs(secs));
            let v: Vec<Value> = s
                .iter()
                .filter(|s| s.name == rocewatch_metrics::WORKLOAD_COUNTER)
                .map(|s| s.value)
                .collect();
            assert_eq!(v.len(), 1, "{s:?}");
            v[0]
        };
        // Two ranks of the job: 10 + 5.
        assert_eq!(total(&[c(1, 100, 10), c(2, 101, 5)], 0), Value::U64(15));
        assert_eq!(total(&[c(1, 100, 12), c(2, 101, 9)], 1), Value::U64(21));
        // Rank 101 exits: its counter is freed; the job's total does not fall.
        assert_eq!(total(&[c(1, 100, 13)], 2), Value::U64(22));
        // Counter 1 freed and made again (a new process got the id): all of it counts.
        assert_eq!(total(&[c(1, 102, 4)], 3), Value::U64(26));
        // The same counter going back (cleared, the device reset): no increase is known;
        // it used to count all of its new value.
        assert_eq!(total(&[c(1, 102, 3)], 4), Value::U64(26));
        assert_eq!(total(&[c(1, 102, 5)], 5), Value::U64(28));
        // Nothing bound for a while: the total stays, then the series ends.
        assert_eq!(total(&[], 6), Value::U64(28));
    }

    #[test]
    fn a_reused_pid_is_not_given_the_workload_of_the_process_before() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("700");
        std::fs::create_dir_all(&d).unwrap();
        let set = |cgroup: &str, start: u64| {
            std::fs::write(d.join("cgroup"), cgroup).unwrap();
            std::fs::write(d.join("comm"), "w\n").unwrap();
            let stat = format!("700 (w) S 1 700 700 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1 1");
            std::fs::write(d.join("stat"), stat).unwrap();
        };
        let mut cache = HashMap::new();
        let now = Instant::now();
        let of =
            |c: &mut HashMap<_, _>| Resources::workload_of(c, t.path(), now, Owner::Pid(700)).id();
        set("0::/slurm/uid_0/job_42/step_0\n", 100);
        assert_eq!(of(&mut cache), "slurm:42.0");
        // The same process (same start): cached, even if its cgroup file changed.
        set("0::/system.slice/other.service\n", 100);
        assert_eq!(of(&mut cache), "slurm:42.0");
        // Another process with the same pid: read again.
        set("0::/system.slice/other.service\n", 200);
        assert_eq!(of(&mut cache), "unit:other.service");
    }

    #[test]
    fn options_are_checked_and_a_fixture_tree_is_unsupported() {
        let e = Options::from_json(&serde_json::json!({"max_workloads": 0})).unwrap_err();
        assert!(e.to_string().contains("max_workloads = 0"), "{e}");
        let e = Options::from_json(&serde_json::json!({"max_workload": 3})).unwrap_err();
        assert!(
            e.to_string().contains("unknown field `max_workload`"),
            "{e}"
        );
        let t = tempfile::tempdir().unwrap();
        let mut p = Resources::new();
        p.start(&PluginContext::new(t.path())).unwrap();
        let e = p.collect().unwrap_err();
        assert!(
            matches!(&e, PluginError::Unsupported(m) if m.contains("is not the live /sys")),
            "{e}"
        );
    }
}
