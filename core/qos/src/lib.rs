//! Desired RoCE/PFC/ECN state (`[[qos.desired]]`) and the plan that takes the observed
//! state there: which setting of which port differs, and which cannot be compared (the
//! device lacks it, or it could not be read).
//!
//! ```toml
//! [[qos.desired]]
//! devices = "mlx5_*"          # glob on the RDMA device (default: every device)
//! netdevs = "*"               # glob on the netdev (default: every netdev)
//! settings = { roce_mode = "RoCE v2", pfc_enabled = "3", trust = "dscp", ecn_np_enabled = "3", mtu = "9000" }
//! ```
//!
//! Entries apply in order; a later one overrides an earlier one's value for a setting.
//!
//! On a port of an SR-IOV virtual function, the settings its physical function owns (PFC,
//! trust, ECN where the VF lacks it) are shown as the physical function's and refused by
//! a plan, with what to set on the hypervisor instead (`vf`).

pub mod apply;
mod config;
pub mod counter_mode;
mod diff;
pub mod metrics;
pub mod observe;
mod plan;
pub mod qp_mode;
pub mod snapshot;
mod text;
pub mod vf;

pub use config::{
    canonical_roce_mode, check_value, normalize, validate, DesiredEntry, QosConfig, SETTABLE,
};
pub use diff::{compare_hosts, setting_text, HostComparison, HostDiff, HostQos};
pub use plan::{
    blocked_line, covered_line, desired_for, plan, plan_text, port_label, refused_line, Blocked,
    Change, Plan, SettingAt,
};
pub use text::{diff_text, show_text};
#[cfg(test)]
mod tests {
    use rocewatch_plugin_api::{QosState, Setting};

    /// Port 1 of `dev` on netdev `nd` with settings `s`.
    pub(crate) fn state(dev: &str, nd: &str, s: &[(&str, Setting)]) -> QosState {
        QosState {
            device: dev.into(),
            port: 1,
            netdev: Some(nd.into()),
            settings: s.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            settable_unread: Vec::new(),
        }
    }
}
