//! Per-QP counters: binding them changes the device's counter mode, a change on the host
//! that the agent makes (audited, like a QoS change) when `qp_counters = true`, and
//! undoes when it stops: each port to auto mode per QP type and process (`rdma
//! statistic qp set link DEV/PORT auto type,pid on`), its previous mode remembered.

use rocewatch_netlink::rdma::{RdmaDevice, RdmaNetlink};
use rocewatch_netlink::rdma_stat::{
    CounterMode, QpCounterMode, COUNTER_MASK_PID, COUNTER_MASK_QP_TYPE,
};
use rocewatch_netlink::NetlinkError;

/// The auto-mode criteria the collector needs: a counter per QP type and process.
pub const MASK: u32 = COUNTER_MASK_QP_TYPE | COUNTER_MASK_PID;

/// How a mode reads in logs and the audit log (`auto type,pid`, `none`, `manual`).
pub fn describe(m: &QpCounterMode) -> String {
    match m.mode {
        CounterMode::Auto => {
            let mut c = Vec::new();
            if m.auto_mask & COUNTER_MASK_QP_TYPE != 0 {
                c.push("type");
            }
            if m.auto_mask & COUNTER_MASK_PID != 0 {
                c.push("pid");
            }
            format!("auto {}", c.join(","))
        }
        CounterMode::None => "none".into(),
        CounterMode::Manual => "manual".into(),
        CounterMode::Other(v) => format!("mode {v}"),
    }
}

/// What was done to one port.
#[derive(Debug)]
pub enum PortOutcome {
    /// Already in auto mode with the criteria: left as it is (nothing to restore).
    AlreadyAuto(QpCounterMode),
    /// Set to auto mode; `saved` is what to restore.
    Changed { saved: QpCounterMode },
    /// The mode could not be read or set (the driver refuses, or no CAP_NET_ADMIN).
    Refused {
        device: String,
        port: u32,
        error: NetlinkError,
    },
}

/// Puts every port of `devices` in auto mode (type,pid) unless it is already.
pub fn enable(nl: &mut RdmaNetlink, devices: &[RdmaDevice]) -> Vec<PortOutcome> {
    let mut out = Vec::new();
    for d in devices {
        for port in 1..=d.ports {
            let refused = |error| PortOutcome::Refused {
                device: d.name.clone(),
                port,
                error,
            };
            let saved = match nl.qp_counter_mode(d.index, port) {
                Ok(m) => m,
                Err(e) => {
                    out.push(refused(e));
                    continue;
                }
            };
            if saved.mode == CounterMode::Auto && saved.auto_mask & MASK == MASK {
                out.push(PortOutcome::AlreadyAuto(saved));
                continue;
            }
            out.push(match nl.set_qp_counter_auto(d.index, port, MASK) {
                Ok(()) => PortOutcome::Changed { saved },
                Err(e) => refused(e),
            });
        }
    }
    out
}

/// Puts a port back as it was found.
pub fn restore(nl: &mut RdmaNetlink, saved: &QpCounterMode) -> Result<(), NetlinkError> {
    nl.restore_qp_counter_mode(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_rdma_statistic_prints_them() {
        let m = |mode, auto_mask| QpCounterMode {
            dev_index: 0,
            dev_name: "mlx5_0".into(),
            port: 1,
            mode,
            auto_mask,
        };
        assert_eq!(describe(&m(CounterMode::Auto, MASK)), "auto type,pid");
        assert_eq!(
            describe(&m(CounterMode::Auto, COUNTER_MASK_QP_TYPE)),
            "auto type"
        );
        assert_eq!(describe(&m(CounterMode::None, 0)), "none");
        assert_eq!(describe(&m(CounterMode::Manual, 0)), "manual");
    }
}
