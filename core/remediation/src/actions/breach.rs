//! What every action receives when a rule fires or clears: the breach.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::Event;
use crate::workloads::Workload;

/// What the action receives (stdin of `exec`, body of `webhook`).
#[derive(Debug, Clone, Serialize)]
pub struct Breach {
    pub rule: String,
    pub metric: String,
    pub event: Event,
    pub action: String,
    pub severity: String,
    pub labels: BTreeMap<String, String>,
    pub value: Option<f64>,
    /// Recent values, oldest first: (seconds ago, value).
    pub recent: Vec<(f64, f64)>,
    pub dry_run: bool,
    /// The workloads holding QPs on the port the labels name, most QPs first (at most
    /// [`crate::MAX_WORKLOADS`]): absent when the labels name no `rdma.device` or rocewatch has
    /// no resources series (unknown), `[]` when nobody holds a QP there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workloads: Option<Vec<Workload>>,
    /// Workloads on the port beyond the list, left out.
    #[serde(skip_serializing_if = "is_zero")]
    pub workloads_truncated: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
