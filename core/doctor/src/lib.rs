//! `rocewatch doctor`: the RoCE troubleshooting guide as checks. Each check is pass,
//! warn, fail, skip (it cannot be decided here, and why) or info, with the evidence it
//! read and, when it is not a pass, the exact command or change that fixes it.
//!
//! Order follows the guide: devices, ports, netdev and its IP, the RoCE v2 GID for that
//! IP, RoCE mode, PFC/trust/ECN on the expected priority, MTU, the link layer, the NICs'
//! PCIe links and NUMA locality, SR-IOV VFs (each PF's VFs and the settings it imposes
//! on them: `checks/sriov.rs`, over rtnetlink), multi-rail networking (RoCE netdevs
//! sharing a subnet: ARP and reverse-path sysctls, a policy route per rail; `checks/multirail.rs`, read over
//! rtnetlink), GPUs against NICs (topology, GPUDirect, ACS),
//! firewall rules for UDP 4791, interrupts, driver and firmware, the kernel log's driver
//! messages, live counters over a short window, a verbs probe
//! to the peer, and how to capture the traffic.
//!
//! Also here: what NCCL, UCX and Open MPI need on the host (`appenv`, `rocewatch env`),
//! and text for a shell (`shell`: every name doctor and `env` print for a shell is quoted
//! for where it lands). RoCE v2 in packet captures is `rocewatch_pcap`.
//! It needs the runtime and the readers, nothing of the command line.
//!
//! Direction (each imports only what is to its right): `guide` → `checks`, `appenv` →
//! `check` → `shell`, `tool`, `config`. `core/agent/tests/architecture.rs` checks it.
//!
//! Where things live (grouped by who imports whom, so a folder reaches only to its right):
//! - `guide/`: the guide itself. `mod.rs` runs it (`run`: discovery, the QoS state, the
//!   live steps: two collections, the probe, the bandwidth test) and holds its order
//!   (`GUIDE`, a list of topics, each a `fn(&Host) -> Vec<Check>`); `topics.rs` the
//!   topics after the ports, `ports.rs` the devices, ports and MTU topics,
//!   `userspace_topic.rs` who the workload is (asked of systemd); `host.rs` the `Host`
//!   they all read, read once. Only the guide knows the order and the `Host`.
//! - `checks/`: the checks, one file per topic or part of one (acs, bandwidth, buffers,
//!   capture, cm_path, congestion, counters, dcbx, driver, firewall, gpu, interrupts,
//!   fec_margin, kernel_log, link, linklayer, mtu, multirail, numa, optics, pcie, qos, sriov,
//!   userspace). Each takes what
//!   it judges (a sysfs root, the inventory, the QoS state, two collections) rather than
//!   the `Host`, so the tests call it alone and `health` uses `userspace` and the kernel
//!   log check without the guide; a few share a sibling's helper (`qos::setting`,
//!   `gpu::Placed`).
//! - `appenv/`: what an application needs on the host (`mod.rs`: NCCL, UCX, Open MPI;
//!   `rocewatch env` prints it), which ports their lists select (`select.rs`), and
//!   `doctor --env`'s check of an application's settings against it (`check.rs`). It
//!   needs no check and no guide: `rocewatch env` uses it alone.
//! - At the top, what every folder uses: `check.rs` the report (`Check`, `Status`,
//!   `Options`, the text form; below the guide, since the checks and appenv make
//!   `Check`s without it), `shell.rs` text for a shell, `tool.rs` a host tool (`nft`,
//!   `iptables-save`, `ping`, `systemctl`) run within a bound, `config.rs` the `[doctor]`
//!   section of the `-c` file (`DoctorConfig`; the agent's configuration holds it).
//! - Tests of the whole crate, beside this file: `no_evidence_tests.rs` (no check passes
//!   on empty input, and every check name in the sources runs there) and
//!   `fix_quoting_tests.rs` (every fix keeps the names it prints quoted); they reach into
//!   every folder.
//!
//! The public API is flat at the root (`run`, `Check`, `capture`, `userspace`, ...): the
//! folders are the crate's own business.

pub mod appenv;
mod check;
mod checks;
mod config;
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
pub use config::DoctorConfig;
pub use guide::{run, run_telling, Waiting};
