//! The kernel log's RDMA/NIC driver messages: the default patterns `rdma.kernel.events`
//! (in [`crate::catalog::KERNEL_LOG_CATALOG`]) counts by (regular expressions over the message text of
//! `/dev/kmsg` records). The kernel-log collector and `rocewatch doctor` both use this
//! table; `[plugins.builtin.kernel-log.options] patterns` adds to or replaces it.
//!
//! The message formats are the mlx5 driver's (`drivers/net/ethernet/mellanox/mlx5/core/`):
//! `cmd.c` `wait_func` "%s(0x%x) timeout. Will cause a leak of a command resource" and
//! `mlx5_cmd_out_err` "... failed, status ...(0x%x), syndrome (0x%x)"; `health.c`
//! `poll_health` "device's health compromised - reached miss count"; `events.c`
//! `mlx5_pcie_event` "Detected insufficient power on the PCIe slot (%uW).", `temp_warn`
//! "High temperature on sensors with bit set ..." and `port_module_event` "Port module
//! event[error]: module %u, Cable error, High Temperature"; `en_main.c` "Link up"/"Link
//! down" through `netdev_info` (`DRIVER BDF NETDEV: `).

/// One default pattern: its name (the `rdma.kernel.pattern` value), the regular
/// expression, what it means and what to do.
#[derive(Debug, Clone, Copy)]
pub struct KernelLogPattern {
    pub name: &'static str,
    pub regex: &'static str,
    pub meaning: &'static str,
    pub fix: &'static str,
}

/// The default patterns, in the order doctor reports them.
pub static KERNEL_LOG_PATTERNS: &[KernelLogPattern] = &[
    KernelLogPattern {
        name: "cmd_timeout",
        regex: r"cmd_work_handler.*timeout|wait_func.*timeout",
        meaning: "a firmware command timed out",
        fix: "the firmware stopped answering commands: collect `mstdump`/`devlink health show` output, update the firmware (mlxfwmanager), then reset the function (devlink dev reload pci/PCI) or reboot",
    },
    KernelLogPattern {
        name: "health_compromised",
        regex: r"health compromised|Fatal error|internal error",
        meaning: "the driver's health poller reported the device unhealthy",
        fix: "the NIC reported a fatal error: `devlink health show` and `devlink health diagnose pci/PCI reporter fw_fatal` say which; update the firmware; a recurring one is a hardware case with the vendor",
    },
    KernelLogPattern {
        name: "fw_syndrome",
        regex: r"syndrome",
        meaning: "a firmware command failed with a syndrome",
        fix: "a command failed in firmware (the syndrome names why): check that driver and firmware versions are a supported pair (ethtool -i IF), update the firmware",
    },
    KernelLogPattern {
        name: "access_reg",
        regex: r"ACCESS_REG",
        meaning: "a register access was refused",
        fix: "ACCESS_REG errors on restricted functions (multi-host, DGX/HGX PFs) come from tools or counters reading registers the function may not: exclude the device from collection ([devices] exclude) or stop the tool; elsewhere update the firmware",
    },
    KernelLogPattern {
        name: "pcie_power",
        regex: r"insufficient power|PCIe slot power",
        meaning: "the PCIe slot gives the card less power than it needs",
        fix: "the card draws more than the slot provides: move it to a slot with enough power or enable the slot's auxiliary power in the BIOS; the NIC may throttle or shut its ports",
    },
    KernelLogPattern {
        name: "module_temperature",
        regex: r"(?i)temperature|overheat",
        meaning: "a temperature warning (NIC or cable module)",
        fix: "check airflow and the module's temperature (ethtool -m IF); replace an overheating transceiver",
    },
    KernelLogPattern {
        name: "link_flap",
        regex: r"Link down|Link up",
        meaning: "the link went down or up",
        fix: "a flapping link: check the cable, the optics and the switch port (ethtool IF, ethtool -m IF; the switch's interface counters)",
    },
];

/// The default pattern `name`.
pub fn kernel_log_pattern(name: &str) -> Option<&'static KernelLogPattern> {
    KERNEL_LOG_PATTERNS.iter().find(|p| p.name == name)
}
