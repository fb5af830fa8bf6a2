//! Every built-in plugin, explicitly, in the order they are registered: the one place the
//! agent names a plugin crate (a test reads `cargo metadata` and the sources to keep it
//! so). Add a built-in here: its name and constructor.

use rocewatch_counters_ethtool::EthtoolCounters;
use rocewatch_counters_sysfs::SysfsCounters;
use rocewatch_discovery_sysfs::SysfsDiscovery;
use rocewatch_kernel_log::KernelLog;
use rocewatch_qos_linux::QosLinux;
use rocewatch_resources::Resources;
use rocewatch_runtime::host::registry::{Builtin, Instance};

/// The built-in plugins.
pub const BUILTINS: &[Builtin] = &[
    (SysfsDiscovery::NAME, || {
        Instance::Discovery(Box::new(SysfsDiscovery::new()))
    }),
    (SysfsCounters::NAME, || {
        Instance::Collector(Box::new(SysfsCounters::new()))
    }),
    (EthtoolCounters::NAME, || {
        Instance::Collector(Box::new(EthtoolCounters::new()))
    }),
    (KernelLog::NAME, || {
        Instance::Collector(Box::new(KernelLog::new()))
    }),
    (Resources::NAME, || {
        Instance::Collector(Box::new(Resources::new()))
    }),
    (QosLinux::NAME, || {
        Instance::Configuration(Box::new(QosLinux::new()))
    }),
];

/// The counters collector's name (`counters-sysfs`).
pub const COUNTERS_SYSFS: &str = SysfsCounters::NAME;
/// The NIC statistics collector's name (`counters-ethtool`).
pub const COUNTERS_ETHTOOL: &str = EthtoolCounters::NAME;
/// The kernel-log collector's name, whose options doctor reads too.
pub const KERNEL_LOG: &str = KernelLog::NAME;
/// The resources collector's name, whose `qp_counters` option `run` acts on.
pub const RESOURCES: &str = Resources::NAME;

/// Names of every built-in plugin.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(n, _)| *n).collect()
}
