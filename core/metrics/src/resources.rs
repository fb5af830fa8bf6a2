//! RDMA resources (`rdma resource show qp|cq|mr|pd`) attributed to workloads: the
//! resources collector's metrics and the attribute names of a workload.
//!
//! A workload is what a process belongs to, found from its cgroup: a Kubernetes pod (and
//! container), a Slurm job (and step), a systemd unit, else the command; QPs the kernel
//! itself holds (no process) belong to the kernel consumer netlink names. The attribute
//! names are OpenTelemetry's where it has them (`k8s.pod.uid`, `container.id`,
//! `process.command`); Slurm and systemd have none there, so ours are `slurm.job.id`,
//! `slurm.step.id` and `systemd.unit`. Resources are never broken down per process.

use rocewatch_plugin_api::MetricDescriptor;

use crate::catalog::RESOURCE_CATALOG;

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
/// The path of the workload's own cgroup (down to the step, the container or the
/// service that names it: one per workload, never per process), for pods, Slurm jobs and
/// units; as the agent reads it (relative, `/../..`, from inside a cgroup namespace).
pub const ATTR_WORKLOAD_CGROUP: &str = "rdma.workload.cgroup";

/// A QP's state as `rdma resource show qp` prints it (`RESET`, `INIT`, `RTR`, `RTS`,
/// `SQD`, `SQE`, `ERR`: `enum ib_qp_state`), on `rdma.resource.qps`. A QP in `ERR` moves
/// no data: every rank of a job on it waits.
pub const ATTR_QP_STATE: &str = "rdma.qp.state";
/// The state of a QP in error.
pub const QP_STATE_ERR: &str = "ERR";

/// The workload that sums those beyond `max_workloads`.
pub const OTHER_WORKLOAD: &str = "other";

/// `reported` or `folded`, on `rdma.resource.workloads`.
pub const ATTR_WORKLOAD_STATE: &str = "rdma.workload.state";
/// `rdma.workload.state` of the workloads with series of their own.
pub const WORKLOAD_REPORTED: &str = "reported";
/// `rdma.workload.state` of the workloads summed into [`OTHER_WORKLOAD`].
pub const WORKLOAD_FOLDED: &str = "folded";

/// The names of [`RESOURCE_CATALOG`]'s metrics, for the readers of its samples (`rocewatch
/// top`, remediation's workloads on a port).
pub use crate::names::{
    RESOURCE_CQS, RESOURCE_MRS, RESOURCE_MR_BYTES, RESOURCE_PDS, RESOURCE_QPS, RESOURCE_WORKLOADS,
    WORKLOAD_COUNTER,
};

/// Descriptors of the resources collector.
pub fn resource_descriptors() -> Vec<MetricDescriptor> {
    crate::catalog::descriptors_of(RESOURCE_CATALOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_constant_is_in_the_catalog_and_back() {
        let names = [
            RESOURCE_QPS,
            RESOURCE_CQS,
            RESOURCE_MRS,
            RESOURCE_MR_BYTES,
            RESOURCE_PDS,
            RESOURCE_WORKLOADS,
            WORKLOAD_COUNTER,
        ];
        let catalog: Vec<&str> = RESOURCE_CATALOG.iter().map(|e| e.name).collect();
        assert_eq!(names.as_slice(), catalog.as_slice());
    }
}
