//! The remediation actions.

mod exec;

pub use exec::{describe, Breach};
pub(crate) use exec::{run_exec, slurm_drain};
