//! RDMA resources (`rdma resource show qp|cq|mr|pd`) attributed to workloads: the
//! resources collector's metrics and the attribute names of a workload.
//!
//! A workload is what a process belongs to, found from its cgroup: a Kubernetes pod (and
//! container), a Slurm job (and step), a systemd unit, else the command; QPs the kernel
//! itself holds (no process) belong to the kernel consumer netlink names. The attribute
//! names are OpenTelemetry's where it has them (`k8s.pod.uid`, `container.id`,
//! `process.command`); Slurm and systemd have none there, so ours are `slurm.job.id`,
//! `slurm.step.id` and `systemd.unit`. Resources are never broken down per process.

use rocewatch_plugin_api::{MetricDescriptor, MetricKind};

use crate::catalog::CatalogEntry;

/// One identifier of a workload, the same across every metric: `pod:<uid>/<container>`,
/// `slurm:<job>.<step>`, `unit:<name>`, `process:<command>`, `kernel:<consumer>`, or
/// `other` (the workloads beyond `max_workloads`, summed).
pub const ATTR_WORKLOAD: &str = "rdma.workload";
/// `pod`, `slurm`, `unit`, `process`, `kernel` or `other`.
pub const ATTR_WORKLOAD_KIND: &str = "rdma.workload.kind";
/// The pod's UID (OpenTelemetry's name).
pub const ATTR_K8S_POD_UID: &str = "k8s.pod.uid";
/// The container's id (OpenTelemetry's name).
pub const ATTR_CONTAINER_ID: &str = "container.id";
/// The Slurm job id.
pub const ATTR_SLURM_JOB: &str = "slurm.job.id";
/// The Slurm step (`0`, `batch`, `extern`).
pub const ATTR_SLURM_STEP: &str = "slurm.step.id";
/// The systemd unit (`nccl-tests.service`).
pub const ATTR_SYSTEMD_UNIT: &str = "systemd.unit";
/// The command (OpenTelemetry's name), for workloads known only by it and for kernel
/// consumers.
pub const ATTR_PROCESS_COMMAND: &str = "process.command";

/// The workload that sums those beyond `max_workloads`.
pub const OTHER_WORKLOAD: &str = "other";

macro_rules! e {
    ($name:expr, $unit:expr, $kind:ident, $desc:expr) => {
        CatalogEntry {
            name: $name,
            unit: $unit,
            kind: MetricKind::$kind,
            source: "RDMA netlink (RDMA_NLDEV_CMD_RES_*_GET, STAT_GET), /proc/<pid>/cgroup",
            attributes: &[],
            scale: 1,
            seen_on: "every RDMA driver with resource tracking (mlx5, irdma, bnxt_re, rxe)",
            description: $desc,
        }
    };
}

/// The resources collector's metrics.
pub static RESOURCE_CATALOG: &[CatalogEntry] = &[
    e!("rdma.resource.qps", "{qp}", Gauge,
        "Queue pairs per `rdma.device`, `rdma.port` (absent for a QP not bound to a port yet) and workload (`rdma.workload`, `rdma.workload.kind`, and `k8s.pod.uid`/`container.id`, `slurm.job.id`/`slurm.step.id`, `systemd.unit` or `process.command`)."),
    e!("rdma.resource.cqs", "{cq}", Gauge,
        "Completion queues per `rdma.device` and workload."),
    e!("rdma.resource.mrs", "{mr}", Gauge,
        "Memory regions per `rdma.device` and workload."),
    e!("rdma.resource.mr.bytes", "By", Gauge,
        "Bytes registered in memory regions per `rdma.device` and workload."),
    e!("rdma.resource.pds", "{pd}", Gauge,
        "Protection domains per `rdma.device` and workload."),
    e!("rdma.resource.workloads", "{workload}", Gauge,
        "Workloads holding RDMA resources on the host, by `rdma.workload.state`: `reported` (a series of their own) or `folded` (beyond `max_workloads`, summed into `rdma.workload=\"other\"`)."),
    e!("rdma.workload.counter", "{event}", Counter,
        "Per-QP hw counters (opt-in: `qp_counters = true` binds a counter per process, `rdma statistic qp set link DEV/PORT auto type,pid on`) summed per `rdma.device`, `rdma.port`, workload and `rdma.counter` (the driver's counter name: `out_of_sequence`, `np_cnp_sent`, `roce_adp_retrans`...)."),
];

/// `reported` or `folded`, on `rdma.resource.workloads`.
pub const ATTR_WORKLOAD_STATE: &str = "rdma.workload.state";

/// Descriptors of the resources collector.
pub fn resource_descriptors() -> Vec<MetricDescriptor> {
    crate::catalog::descriptors_of(RESOURCE_CATALOG)
}
