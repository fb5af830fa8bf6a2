//! Slurm, as rocewatch meets it: keeping a host with broken RDMA out of jobs.
//!
//! This crate depends on nothing of rocewatch but the bounded runner of outside programs
//! (`rocewatch-process`, through which scontrol runs); the health command, the
//! remediation action and preflight use it.
//!
//! - [`hostlist`]: compressed host lists (`node[01-04,07]`, `SLURM_JOB_NODELIST`),
//!   expanded as `scontrol show hostnames` does (Slurm's `src/common/hostlist.c`).
//! - [`node`]: `scontrol show node NAME` output read into the node's state and drain
//!   reason (Slurm's `src/api/node_info.c`, `slurm_sprint_node_table`, and
//!   `node_state_string_complete` in `src/common/slurm_protocol_defs.c`).
//! - [`scontrol`]: drain this node with a reason that starts with `rocewatch: `, and
//!   resume it only when the drain is rocewatch's, as LBNL Node Health Check does
//!   (an administrator's "maintenance" drain stays); this node's Slurm name.
//! - `harness` (feature `harness`): a real local Slurm (munged, slurmctld, slurmd on
//!   loopback, in a temporary directory) for tests.
//!
//! Facts about Slurm's formats were read from Slurm's sources (cited in each module) and
//! checked against Slurm 22.05.8 (Debian 12) in `core/slurm/tests/real_slurm.rs`.

#[cfg(feature = "harness")]
pub mod harness;
pub mod hostlist;
pub mod node;
pub mod scontrol;

pub use hostlist::{expand, HostlistError};
pub use node::{parse_one_node, parse_show_node, Node, NodeReason, NodeState};
pub use scontrol::{
    reason, this_node_name, DrainOutcome, ResumeOutcome, Scontrol, ScontrolError, REASON_PREFIX,
};
