//! What one run of `health` is given.

use std::path::PathBuf;

/// What one run of `health` reads.
#[derive(Debug, Clone)]
pub struct Options {
    /// The sysfs root (`/sys`, or a fixture tree).
    pub sysfs_root: PathBuf,
    /// Whether the root is the live host's (addresses, netlink and the kernel log device
    /// are read only then).
    pub live: bool,
    /// The kernel-log plugin's options (`[plugins.builtin.kernel-log.options]`): where the
    /// log is read and what matches.
    pub kernel_log: serde_json::Value,
    /// The devices `[devices]` selects.
    pub devices: rocewatch_sysfs::inventory::DeviceSelection,
    /// Where the quarantine file is (the state directory).
    pub state_dir: PathBuf,
    /// The proc tree that goes with the sysfs root (`/proc`, `/host/proc` in a pod, or a
    /// fixture's): the uptime the kernel-log window is measured from, the userspace
    /// checks' processes.
    pub procfs_root: PathBuf,
    /// This host's rows of the fleet topology (`[fleet] topology`), when one is
    /// configured: a row no RDMA port carries is a NIC missing (the `devices` check).
    /// An error says why the topology could not be read.
    pub rail_rows: Result<Option<Vec<rocewatch_sysfs::railmap::RailRow>>, String>,
}
