//! Every built-in plugin, explicitly, in the order they are registered: the one place the
//! agent names a plugin crate (a test reads `cargo metadata` and the sources to keep it
//! so). Add a built-in here: its name, constructor and options' check.

use rocewatch_counters_ethtool::EthtoolCounters;
use rocewatch_counters_sysfs::SysfsCounters;
use rocewatch_discovery_sysfs::SysfsDiscovery;
use rocewatch_host::HostCpu;
use rocewatch_kernel_log::KernelLog;
use rocewatch_qos_linux::QosLinux;
use rocewatch_resources::Resources;
use rocewatch_runtime::host::registry::{Builtin, Instance};

/// The built-in plugins.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: SysfsDiscovery::NAME,
        make: || Instance::Discovery(Box::new(SysfsDiscovery::new())),
        check_options: |o| SysfsDiscovery::check_options(o).map(drop),
    },
    Builtin {
        name: SysfsCounters::NAME,
        make: || Instance::Collector(Box::new(SysfsCounters::new())),
        check_options: |o| rocewatch_counters_sysfs::Options::from_json(o).map(drop),
    },
    Builtin {
        name: EthtoolCounters::NAME,
        make: || Instance::Collector(Box::new(EthtoolCounters::new())),
        check_options: |o| rocewatch_counters_ethtool::Options::from_json(o).map(drop),
    },
    Builtin {
        name: KernelLog::NAME,
        make: || Instance::Collector(Box::new(KernelLog::new())),
        check_options: |o| rocewatch_kernel_log::Options::from_json(o).map(drop),
    },
    Builtin {
        name: Resources::NAME,
        make: || Instance::Collector(Box::new(Resources::new())),
        check_options: |o| rocewatch_resources::Options::from_json(o).map(drop),
    },
    Builtin {
        name: HostCpu::NAME,
        make: || Instance::Collector(Box::new(HostCpu::new())),
        check_options: |o| rocewatch_host::Options::from_json(o).map(drop),
    },
    Builtin {
        name: QosLinux::NAME,
        make: || Instance::Configuration(Box::new(QosLinux::new())),
        check_options: |o| rocewatch_qos_linux::Options::from_json(o).map(drop),
    },
];

/// The counters collector's name (`counters-sysfs`).
pub const COUNTERS_SYSFS: &str = SysfsCounters::NAME;
/// The NIC statistics collector's name (`counters-ethtool`).
pub const COUNTERS_ETHTOOL: &str = EthtoolCounters::NAME;
/// The kernel-log collector's name, whose options doctor reads too.
pub const KERNEL_LOG: &str = KernelLog::NAME;
/// The resources collector's name, whose `qp_counters` option `run` acts on.
pub const RESOURCES: &str = Resources::NAME;

/// The host collector's name (`host`), whose `procfs_root` `--procfs-root` sets.
pub const HOST: &str = HostCpu::NAME;

/// Names of every built-in plugin.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.name).collect()
}

/// The built-in plugin `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}
