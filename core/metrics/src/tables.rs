//! Every catalog table, in one list ([`TABLES`]): what [`all_entries`] reads, and the
//! sections of `docs/METRICS.md` in their order (`doc.rs` renders each as its
//! [`Columns`] say). A new collector's metrics are its table (`&[CatalogEntry]`, in
//! `catalog.rs` or a file of its own) and one element here.

use rocewatch_plugin_api::MetricKind;

use crate::catalog::{
    CatalogEntry, CATALOG, DRIVER_CATALOG, ETHTOOL_CATALOG, FLEET_CATALOG, HOST_CATALOG,
    KERNEL_LOG_CATALOG, PCIE_CATALOG, PROBE_CATALOG, QOS_CATALOG, RESOURCE_CATALOG, SELF_METRICS,
};
use crate::derived::DERIVED_CATALOG;
use crate::link_health::{LINK_HEALTH_CATALOG, OPTICS_CATALOG};
use crate::vf::VF_CATALOG;

/// One catalog table and its section of `docs/METRICS.md`.
pub struct Table {
    /// The section's title.
    pub title: &'static str,
    /// What the section says before its rows (Markdown; empty: nothing): who reads the
    /// metrics, when, with which attributes.
    pub about: &'static str,
    /// The columns of its rows.
    pub columns: Columns,
    /// The entries (none for a section of prose only).
    pub entries: &'static [CatalogEntry],
    /// What the section shows after its rows.
    pub then: Then,
}

/// The columns of a table's rows in `docs/METRICS.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    /// Name, unit, kind, Prometheus name, description.
    Plain,
    /// As `Plain`, with the source (`from`) before the description.
    Source,
    /// The port metrics': collectd type, source and scale, attributes, seen on, top.
    Port,
    /// The ethtool metrics': the driver statistics per vendor, seen on.
    DriverStatistics,
}

/// What a section shows after its rows (rendered by `doc.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    Nothing,
    /// Which counters saturate, roll over or are 64 bits wide.
    CounterWidths,
    /// The kernel log's patterns.
    KernelLogPatterns,
    /// The files of a port directory that are not counters.
    NotCounters,
}

/// Every catalog table, in the order of `docs/METRICS.md`.
pub static TABLES: &[Table] = &[
    Table {
        title: "Port metrics",
        about: "",
        columns: Columns::Port,
        entries: CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Counter widths",
        about: "",
        columns: Columns::Plain,
        entries: &[],
        then: Then::CounterWidths,
    },
    Table {
        title: "PCIe link",
        about: "The link of each port's PCI function (the RDMA device's `device/` directory), read by counters-sysfs once per device and collection, with the port's attributes (`rdma.device`, `rdma.port`, `network.interface.name`). A width or speed below its maximum caps the port: `rocewatch doctor` says at how many Gb/s.",
        columns: Columns::Source,
        entries: PCIE_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Driver",
        about: "The kernel module serving each RDMA device, read by counters-sysfs when it plans the device (a module is not replaced under a device: reloading the driver recreates the device), with `rdma.device`. The module's build is also part of `rdma.qos.fingerprint`.",
        columns: Columns::Source,
        entries: DRIVER_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "NIC driver statistics (ethtool)",
        about: "Read with the ethtool ioctls from the netdevs of RDMA ports and normalized across vendors. Every sample carries `network.interface.name` (plus `rdma.device` and `rdma.port` of the RDMA port behind it), `rdma.priority` for per-priority metrics and `network.io.direction`.",
        columns: Columns::DriverStatistics,
        entries: ETHTOOL_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "SR-IOV virtual functions",
        about: "Read by counters-ethtool from the netdevs of RDMA ports that are SR-IOV physical functions: the VF count from the PF's `sriov_*` files, each VF's settings and statistics from rtnetlink (`RTM_GETLINK` with `RTEXT_FILTER_VF`, what `ip -s link show dev PF` prints). Every sample carries the PF port's attributes (`network.interface.name`, `rdma.device`, `rdma.port`); a VF's also `rdma.vf` (its index) and `rdma.vf.pci_address`. One set of series per VF the PF has enabled. See VMS.md.",
        columns: Columns::Source,
        entries: VF_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Link history: flaps, FEC, down reasons",
        about: "Read by counters-ethtool on the netdevs of RDMA ports: the carrier counters from sysfs (any sysfs root), the down reason and FEC from ethtool netlink (the live `/sys` only; a driver without them gives none of their series). Every sample carries the port's attributes (`network.interface.name`, `rdma.device`, `rdma.port`). See OPTICS.md.",
        columns: Columns::Source,
        entries: LINK_HEALTH_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Transceiver modules",
        about: "Read by counters-ethtool from each port's module EEPROM (ethtool netlink by page, the ioctls where netlink cannot), at its own slower interval (`options.module_interval`, 300 s by default: an I2C read costs milliseconds per page and some drivers go through firmware), the last reading repeated in between. A reading the module does not give, a module whose diagnostics answer zeros or whose checksums fail, exports no sample, never a zero. With the port's attributes. See OPTICS.md.",
        columns: Columns::Source,
        entries: OPTICS_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Derived signals",
        about: "Computed by the agent from counter rates after every collection (pseudo-plugin `derived`), with the attributes of the series they come from. Rates are per second over the last collection interval; a reset or a saturated counter yields no value for that interval, never a negative or zero one; only a counter known to roll over counts the increase across its top.",
        columns: Columns::Source,
        entries: DERIVED_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Verbs probes",
        about: "Per peer (`rdma.probe.peer`), from the agent's prober (`[probes]`, the probe-verbs plugin).",
        columns: Columns::Plain,
        entries: PROBE_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Fleet probing",
        about: "With `[fleet]` the prober probes this host's pinglist (see FLEET.md) and exports, instead of the per-peer series, series bounded per host: results by rail, class, path and outcome, RTTs by rail and class, and the failing flows only while they fail. The NIC info series is the fleet's map on the metrics backend.",
        columns: Columns::Plain,
        entries: FLEET_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "RoCE/PFC/ECN configuration",
        about: "Per port (`rdma.device`, `rdma.port`, `network.interface.name`), from the configuration plugins every `[qos] interval` (pseudo-plugin `qos`). The settings are those of `rocewatch qos show`; drift compares them with `[[qos.desired]]`.",
        columns: Columns::Plain,
        entries: QOS_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Kernel log",
        about: "From the kernel-log collector (`/dev/kmsg`, read from the agent's start; `[plugins.builtin.kernel-log.options]`), the same patterns `rocewatch doctor` reports over its window.",
        columns: Columns::Source,
        entries: KERNEL_LOG_CATALOG,
        then: Then::KernelLogPatterns,
    },
    Table {
        title: "Host CPU",
        about: "From the host collector (`<procfs>/stat`, one file read per collection; `[plugins.builtin.host.options]`): the CPU time the hypervisor stole, which makes this host's probes late whatever the network does; `rocewatch doctor` reports the share over its window (the `virtualization` topic, and beside a late probe). A host without the file (or a fixture tree given without its proc tree) reports the collector unsupported, never a zero. See VMS.md.",
        columns: Columns::Source,
        entries: HOST_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "RDMA resources per workload",
        about: "From the resources collector (RDMA netlink: what `rdma resource show qp|cq|mr|pd` prints; `[plugins.builtin.resources.options]`), each resource attributed to the workload of the process holding it, found from `/proc/<pid>/cgroup`: a Kubernetes pod (`k8s.pod.uid`, `container.id`), a Slurm job (`slurm.job.id`, `slurm.step.id`), a systemd unit (`systemd.unit`), else the command (`process.command`); the kernel's own QPs to the kernel consumer. `rdma.workload` is one identifier across them. A pod, job or unit is recognised only where the kubelet, slurmstepd or systemd create its cgroup (from the root of the hierarchy, never below a `user@UID.service`), and carries the path of its own cgroup (`rdma.workload.cgroup`: one per workload). Never per process; beyond `max_workloads` (default 64) the smallest are summed under `rdma.workload=\"other\"` and counted.",
        columns: Columns::Source,
        entries: RESOURCE_CATALOG,
        then: Then::Nothing,
    },
    Table {
        title: "Files that are not counters",
        about: "",
        columns: Columns::Plain,
        entries: &[],
        then: Then::NotCounters,
    },
    Table {
        title: "Agent self-metrics",
        about: "",
        columns: Columns::Plain,
        entries: SELF_METRICS,
        then: Then::Nothing,
    },
];

/// Every entry of every table ([`TABLES`]): port metrics, PCIe link and driver metrics,
/// ethtool metrics, derived signals, probes, QoS, kernel log, resources and self-metrics.
pub fn all_entries() -> impl Iterator<Item = &'static CatalogEntry> {
    TABLES.iter().flat_map(|t| t.entries.iter())
}

/// The instrument kind of the catalogued metric `name` (every entry of one name has the
/// same kind), or `None` when nothing by that name is catalogued.
pub fn kind_of(name: &str) -> Option<MetricKind> {
    all_entries().find(|e| e.name == name).map(|e| e.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names;

    #[test]
    fn every_name_is_one_constant_and_every_constant_a_catalogued_name() {
        let mut seen = std::collections::BTreeSet::new();
        for n in names::ALL {
            assert!(seen.insert(*n), "{n} has two constants");
            assert!(
                all_entries().any(|e| e.name == *n),
                "{n} has a constant but no catalog entry (is its table in TABLES?)"
            );
        }
        for e in all_entries() {
            assert!(
                seen.contains(e.name),
                "{} is catalogued without a constant",
                e.name
            );
        }
    }

    #[test]
    fn every_table_is_listed_once() {
        for (i, a) in TABLES.iter().enumerate() {
            for b in &TABLES[i + 1..] {
                assert_ne!(a.title, b.title, "two sections with one title");
                assert!(
                    a.entries.is_empty() || !std::ptr::eq(a.entries, b.entries),
                    "{} and {} list the same table",
                    a.title,
                    b.title
                );
            }
        }
    }
}
