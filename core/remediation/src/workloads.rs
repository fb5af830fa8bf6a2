//! The workloads holding QPs on a transition's port, so that an action can page the owner
//! or drain the right job: read from the store's latest `rdma.resource.qps` series (the
//! resources collector's, attributed to pods, Slurm jobs, units or commands), most QPs
//! first.
//!
//! The port is the one the transition's labels name: `rdma.device` and `rdma.port` (or
//! their Prometheus forms `rdma_device`, `rdma_port`, as an Alertmanager alert carries
//! them); a device without a port means every port of the device, and its QPs not bound to
//! a port yet. `None` (the breach and the audit record then have no `workloads`) when the
//! labels name no device, or when the store holds no `rdma.resource.qps` series of that
//! device (the collector is not loaded, reports unsupported, or its dump of the device
//! failed; a device it read always has some: the kernel's own QP1, or the zeros of QPs
//! gone): "unknown", never "nobody". An empty list means the collector read the device
//! and no workload holds a QP on that port.

use std::collections::BTreeMap;

use rocewatch_metrics::{ATTR_DEVICE, ATTR_PORT, ATTR_WORKLOAD, ATTR_WORKLOAD_KIND, RESOURCE_QPS};
use serde::Serialize;

use rocewatch_runtime::store::Store;

/// At most this many workloads go with a breach; the others are counted
/// ([`Workloads::truncated`]).
pub const MAX_WORKLOADS: usize = 20;

/// One workload holding QPs on the port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Its `rdma.workload`: `pod:<uid>/<container>`, `slurm:<job>.<step>`, `unit:<name>`,
    /// `process:<command>`, `kernel:<consumer>` or `other`.
    pub workload: String,
    /// Its `rdma.workload.kind`: `pod`, `slurm`, `unit`, `process`, `kernel` or `other`.
    pub kind: String,
    /// What else the series says of it (`k8s.pod.uid`, `container.id`, `slurm.job.id`,
    /// `slurm.step.id`, `systemd.unit`, `process.command`, and `rdma.workload.cgroup`,
    /// the path of a pod's, job's or unit's cgroup).
    pub attributes: BTreeMap<String, String>,
    /// Its QPs on the port (on every port of the device when the labels name no port).
    pub qps: u64,
}

/// The workloads on a port, most QPs first, and how many more there were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workloads {
    pub list: Vec<Workload>,
    /// Workloads beyond [`MAX_WORKLOADS`], left out.
    pub truncated: usize,
}

impl Workloads {
    /// The `ROCEWATCH_WORKLOADS` value: the `rdma.workload` ids, comma-separated, most QPs
    /// first.
    pub fn ids(&self) -> String {
        self.list
            .iter()
            .map(|w| w.workload.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The value of the first of `keys` that `labels` has.
fn label<'a>(labels: &'a BTreeMap<String, String>, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| labels.get(*k)).map(String::as_str)
}

/// The workloads holding QPs on the port `labels` name (see the module's doc for `None`).
pub fn on_port(store: &Store, labels: &BTreeMap<String, String>) -> Option<Workloads> {
    let device = label(labels, &[ATTR_DEVICE, "rdma_device"])?;
    let port = label(labels, &[ATTR_PORT, "rdma_port"]);
    let mut known = false;
    let mut by_id: BTreeMap<String, Workload> = BTreeMap::new();
    store.for_each_named(RESOURCE_QPS, |s| {
        let a = &s.sample.attributes;
        if a.get(ATTR_DEVICE) != Some(device) {
            return;
        }
        // A device the collector read has series (the kernel's own QPs, or zeros of
        // those gone); one whose dump failed has none: unknown, not nobody.
        known = true;
        if port.is_some() && a.get(ATTR_PORT) != port {
            return;
        }
        let Some(id) = a.get(ATTR_WORKLOAD) else {
            return;
        };
        let qps = s.sample.value.as_f64().max(0.0).round() as u64;
        let w = by_id.entry(id.to_string()).or_insert_with(|| Workload {
            workload: id.to_string(),
            kind: a
                .get(ATTR_WORKLOAD_KIND)
                .map(str::to_string)
                .unwrap_or_default(),
            attributes: a
                .iter()
                .filter(|(k, _)| {
                    ![ATTR_DEVICE, ATTR_PORT, ATTR_WORKLOAD, ATTR_WORKLOAD_KIND].contains(k)
                })
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            qps: 0,
        });
        w.qps += qps;
    });
    if !known {
        return None;
    }
    let mut list: Vec<Workload> = by_id.into_values().filter(|w| w.qps > 0).collect();
    list.sort_by(|a, b| b.qps.cmp(&a.qps).then_with(|| a.workload.cmp(&b.workload)));
    let truncated = list.len().saturating_sub(MAX_WORKLOADS);
    list.truncate(MAX_WORKLOADS);
    Some(Workloads { list, truncated })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rocewatch_metrics::{ATTR_K8S_POD_UID, ATTR_SLURM_JOB, ATTR_SLURM_STEP};
    use rocewatch_plugin_api::{MetricKind, Sample, Value};
    use std::sync::Arc;

    /// One `rdma.resource.qps` sample, as the resources collector emits it.
    pub(crate) fn qps(
        device: &str,
        port: Option<&str>,
        id: &str,
        extra: &[(&str, &str)],
        n: u64,
    ) -> Sample {
        let mut a: BTreeMap<String, String> = [
            (ATTR_DEVICE.to_string(), device.to_string()),
            (ATTR_WORKLOAD.to_string(), id.to_string()),
            (
                ATTR_WORKLOAD_KIND.to_string(),
                id.split(':').next().unwrap_or("other").to_string(),
            ),
        ]
        .into();
        if let Some(p) = port {
            a.insert(ATTR_PORT.into(), p.into());
        }
        a.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Sample {
            name: RESOURCE_QPS.into(),
            unit: "{qp}".into(),
            value: Value::U64(n),
            attributes: Arc::new(a.into()),
            source: "netlink".into(),
            kind: MetricKind::Gauge,
        }
    }

    /// A store holding two workloads on mlx5_0/1 (the pod with 12 QPs, the Slurm step with
    /// 40), the pod also on mlx5_1/1 with 3, and a third workload on mlx5_1/1 only.
    pub(crate) fn seeded() -> Arc<Store> {
        let store = Arc::new(Store::new());
        store.declare(&rocewatch_metrics::resource_descriptors());
        let pod = "pod:0f1e2d3c-aaaa-bbbb-cccc-000000000001/trainer";
        store.ingest(
            "resources",
            &[
                qps(
                    "mlx5_0",
                    Some("1"),
                    pod,
                    &[(ATTR_K8S_POD_UID, "0f1e2d3c-aaaa-bbbb-cccc-000000000001")],
                    12,
                ),
                qps(
                    "mlx5_0",
                    Some("1"),
                    "slurm:42.0",
                    &[(ATTR_SLURM_JOB, "42"), (ATTR_SLURM_STEP, "0")],
                    40,
                ),
                qps(
                    "mlx5_1",
                    Some("1"),
                    pod,
                    &[(ATTR_K8S_POD_UID, "0f1e2d3c-aaaa-bbbb-cccc-000000000001")],
                    3,
                ),
                qps(
                    "mlx5_1",
                    Some("1"),
                    "unit:nccl-tests.service",
                    &[("systemd.unit", "nccl-tests.service")],
                    8,
                ),
                qps(
                    "mlx5_0",
                    None,
                    "process:ib_write_bw",
                    &[("process.command", "ib_write_bw")],
                    2,
                ),
            ],
            &Default::default(),
        );
        store
    }

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_workloads_of_one_port_most_qps_first() {
        let store = seeded();
        let w = on_port(
            &store,
            &labels(&[
                ("rdma.device", "mlx5_0"),
                ("rdma.port", "1"),
                ("rdma.priority", "3"),
            ]),
        )
        .unwrap();
        let ids: Vec<(&str, u64)> = w
            .list
            .iter()
            .map(|w| (w.workload.as_str(), w.qps))
            .collect();
        assert_eq!(
            ids,
            [
                ("slurm:42.0", 40),
                ("pod:0f1e2d3c-aaaa-bbbb-cccc-000000000001/trainer", 12)
            ]
        );
        assert_eq!(w.list[0].kind, "slurm");
        assert_eq!(
            w.list[0].attributes,
            labels(&[("slurm.job.id", "42"), ("slurm.step.id", "0")])
        );
        assert_eq!(w.truncated, 0);
        assert_eq!(
            w.ids(),
            "slurm:42.0,pod:0f1e2d3c-aaaa-bbbb-cccc-000000000001/trainer"
        );
        // The Prometheus forms of the labels (an Alertmanager alert) name the same port.
        assert_eq!(
            on_port(
                &store,
                &labels(&[("rdma_device", "mlx5_1"), ("rdma_port", "1")])
            )
            .unwrap()
            .ids(),
            "unit:nccl-tests.service,pod:0f1e2d3c-aaaa-bbbb-cccc-000000000001/trainer"
        );
    }

    #[test]
    fn a_device_alone_means_all_its_ports_and_unbound_qps() {
        let store = seeded();
        let w = on_port(&store, &labels(&[("rdma.device", "mlx5_0")])).unwrap();
        assert_eq!(
            w.ids(),
            "slurm:42.0,pod:0f1e2d3c-aaaa-bbbb-cccc-000000000001/trainer,process:ib_write_bw"
        );
    }

    #[test]
    fn unknown_is_not_nobody() {
        let store = seeded();
        assert_eq!(
            on_port(&store, &labels(&[("rdma.priority", "3")])),
            None,
            "no device named"
        );
        // The collector read mlx5_0: nobody on its port 2.
        let empty = on_port(
            &store,
            &labels(&[("rdma.device", "mlx5_0"), ("rdma.port", "2")]),
        )
        .unwrap();
        assert!(empty.list.is_empty(), "nobody on mlx5_0/2");
        // No series of mlx5_9 at all (not read: its dump failed): unknown.
        assert_eq!(
            on_port(
                &store,
                &labels(&[("rdma.device", "mlx5_9"), ("rdma.port", "1")])
            ),
            None,
            "mlx5_9 unknown"
        );
        let bare = Store::new();
        assert_eq!(
            on_port(&bare, &labels(&[("rdma.device", "mlx5_0")])),
            None,
            "no resources collector"
        );
    }

    #[test]
    fn each_workload_carries_the_path_of_its_cgroup() {
        let store = Store::new();
        store.declare(&rocewatch_metrics::resource_descriptors());
        let path = "/system.slice/slurmstepd.scope/job_42/step_0";
        store.ingest(
            "resources",
            &[qps(
                "mlx5_0",
                Some("1"),
                "slurm:42.0",
                &[
                    (ATTR_SLURM_JOB, "42"),
                    (ATTR_SLURM_STEP, "0"),
                    (rocewatch_metrics::ATTR_WORKLOAD_CGROUP, path),
                ],
                3,
            )],
            &Default::default(),
        );
        let w = on_port(
            &store,
            &labels(&[("rdma.device", "mlx5_0"), ("rdma.port", "1")]),
        )
        .unwrap();
        // The list as the transition's audit record and the breach carry it.
        let j = serde_json::to_value(&w.list).unwrap();
        assert_eq!(j[0]["attributes"]["rdma.workload.cgroup"], path, "{j}");
        assert_eq!(j[0]["workload"], "slurm:42.0", "{j}");
    }

    #[test]
    fn at_most_twenty_and_the_rest_counted() {
        let store = Store::new();
        store.declare(&rocewatch_metrics::resource_descriptors());
        let samples: Vec<Sample> = (0..25)
            .map(|i| {
                qps(
                    "mlx5_0",
                    Some("1"),
                    &format!("process:job{i:02}"),
                    &[],
                    100 - i,
                )
            })
            .collect();
        store.ingest("resources", &samples, &Default::default());
        let w = on_port(
            &store,
            &labels(&[("rdma.device", "mlx5_0"), ("rdma.port", "1")]),
        )
        .unwrap();
        assert_eq!(w.list.len(), MAX_WORKLOADS);
        assert_eq!(w.truncated, 5);
        assert_eq!(w.list[0].workload, "process:job00");
        assert_eq!(w.list[19].workload, "process:job19");
    }
}
