//! `rocewatch doctor`: the RoCE troubleshooting guide as checks. Each check is pass,
//! warn, fail, skip (it cannot be decided here, and why) or info, with the evidence it
//! read and, when it is not a pass, the exact command or change that fixes it.
//!
//! Order follows the guide: devices, ports, netdev and its IP, the RoCE v2 GID for that
//! IP, RoCE mode, PFC/trust/ECN on the expected priority, MTU, the link layer, the NICs'
//! PCIe links and NUMA locality, multi-rail networking (RoCE netdevs sharing a subnet:
//! ARP and reverse-path sysctls, a policy route per rail; `multirail.rs`, read over
//! rtnetlink), GPUs against NICs (topology, GPUDirect, ACS),
//! firewall rules for UDP 4791, interrupts, driver and firmware, the kernel log's driver
//! messages, live counters over a short window, a verbs probe
//! to the peer, and how to capture the traffic.
//!
//! Also here: what NCCL, UCX and Open MPI need on the host (`appenv`, `rocewatch env`),
//! and text for a shell (`shell`: every name doctor and `env` print for a shell is quoted
//! for where it lands). RoCE v2 in packet captures is `rocewatch_pcap`.
//! It needs the runtime and the readers, nothing of the command line.

pub mod appenv;
mod check;
mod checks;
#[cfg(test)]
mod fix_quoting_tests;
mod guide;
#[cfg(test)]
mod no_evidence_tests;
pub mod shell;
mod tool;

pub use appenv::check::{env_checks, parse_env, relevant};
pub use check::{text, Check, Options, Status, ROCE_PORT};
pub use checks::firewall::{iptables_blocking, nft_blocking};
pub use checks::kernel_log::kernel_log_checks;
pub use checks::linklayer::{ETHERNET, INFINIBAND};
pub use checks::{capture, userspace};
pub use guide::run;
