//! Per-QP counters: binding them changes the device's counter mode, a change on the host
//! that the agent makes (audited, like a QoS change) when `qp_counters = true`, and
//! undoes when it stops: each port to auto mode per QP type and process (`rdma
//! statistic qp set link DEV/PORT auto type,pid on`), its previous mode remembered.

use rocewatch_netlink::rdma_stat::{
    CounterMode, QpCounterMode, COUNTER_MASK_PID, COUNTER_MASK_QP_TYPE,
};

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
