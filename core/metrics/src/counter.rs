//! What "a counter increased" means: the one definition every reader of counters uses
//! (the store's rates, the rules' increases, doctor's trouble counters, the bandwidth
//! test's deltas, the per-QP counters summed per workload, `top`).
//!
//! A counter read twice moves one of three ways ([`Move`]):
//! - it went up (or stayed): the difference is its increase;
//! - it sits at the top of a counter that stops there ([`Overflow::Saturates`]): the
//!   increase is unknown (reported as saturated, never as idle);
//! - it went back: a **reset** (`perfquery -R`, a driver reload, a VF reset, a counter
//!   object made again), which yields no increase and no rate for that interval, unless
//!   the source is known to roll over at its width ([`Overflow::Wraps`]) *and* the move
//!   across the top fits the counter's recent pace.
//!
//! Which sources saturate, roll over or are 64 bits wide is the table in
//! [`overflow_of`], each line citing the kernel, driver or IBTA source it comes from.
//! Taking a reset for a wrap is what makes a rule fire on traffic that never happened
//! (a 64-bit counter going 3 000 000 000 → 100 read as a 32-bit wrap was a rate of
//! 4.3e8/s); taking a wrap for a reset costs one interval's rate. The table and the pace
//! bound are therefore on the side of "reset".

/// How a counter behaves at the top of its range, in the sample's unit (after the
/// catalog's scale: the IB data counters count 4-octet words and are exported in bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Stops at `max` and stays there until cleared (IBTA PortCounters: "the counter
    /// stops at its maximum value").
    Saturates { max: u64 },
    /// Rolls over to 0 after `2^bits - 1`, `scale` units per count.
    Wraps { bits: u8, scale: u64 },
    /// 64 bits wide: it does not roll over in the life of a host, so going back is a reset.
    Wide,
}

/// How a counter moved between two reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Move {
    /// It went up by this much (0 when it did not move).
    Increase(f64),
    /// It is at the top of a counter that stops there: how much it moved is unknown.
    Saturated,
    /// It went back (cleared, or its driver or object made again): no increase is known
    /// for this interval, and a new cumulative series starts.
    Reset,
}

impl Move {
    /// The increase, when one is known.
    pub fn increase(self) -> Option<f64> {
        match self {
            Move::Increase(d) => Some(d),
            Move::Saturated | Move::Reset => None,
        }
    }
}

/// A move across the top of a rolling counter counts as a wrap only when the increase
/// it implies is at most this many times what the counter's last rate predicts for the
/// interval (traffic varies; a reset near the top at the same pace is the residual risk).
pub const WRAP_PACE_FACTOR: f64 = 4.0;

/// Classify the move of a counter from `old` to `new` (both in the sample's unit).
///
/// `overflow` is asked only when the answer depends on it (a backward move, or a value
/// that is the top of some counter), so the common case costs two comparisons.
/// `expected`: the increase the counter's last known rate predicts over this interval
/// (`None` when there is no rate: first reads, right after a reset); a wrap is accepted
/// only within [`WRAP_PACE_FACTOR`] of it.
pub fn counter_move(
    old: f64,
    new: f64,
    overflow: impl FnOnce() -> Overflow,
    expected: Option<f64>,
) -> Move {
    if new >= old {
        if is_some_counters_top(new) {
            if let Overflow::Saturates { max } = overflow() {
                if new == max as f64 {
                    return Move::Saturated;
                }
            }
        }
        return Move::Increase(new - old);
    }
    // Backwards (or NaN): a reset unless the source rolls over and the pace says so.
    let Overflow::Wraps { bits, scale } = overflow() else {
        return Move::Reset;
    };
    let span = (1u128 << bits) as f64 * scale as f64;
    if !(old < span && new >= 0.0) {
        return Move::Reset;
    }
    let across = span - old + new;
    match expected {
        Some(e) if e > 0.0 && across <= WRAP_PACE_FACTOR * e => Move::Increase(across),
        _ => Move::Reset,
    }
}

/// [`counter_move`] for a sample from `source` (its `Sample::source`).
pub fn counter_move_from(source: &str, old: f64, new: f64, expected: Option<f64>) -> Move {
    counter_move(old, new, || overflow_of(source), expected)
}

/// Whether `v` is the top of one of the saturating counters (a cheap test before the
/// source is looked up): 2^w − 1 for the PortCounters widths 4, 8, 16 and 32, and the
/// 32-bit data counters' top in bytes (×4).
fn is_some_counters_top(v: f64) -> bool {
    v == 15.0 || v == 255.0 || v == 65_535.0 || v == 4_294_967_295.0 || v == 4.0 * 4_294_967_295.0
}

/// Widths of the IBTA PortCounters attributes as the kernel reads them
/// (`drivers/infiniband/core/sysfs.c`, `PORT_PMA_ATTR(name, counter, width, offset)`;
/// IBTA Vol. 1, PortCounters, 16.1.3.5: the counters stop at their maximum value). The
/// 32-bit data counters are scaled ×4 to bytes by the catalog.
const PMA_WIDTHS: &[(&str, u8, u64)] = &[
    ("symbol_error", 16, 1),
    ("link_error_recovery", 8, 1),
    ("link_downed", 8, 1),
    ("port_rcv_errors", 16, 1),
    ("port_rcv_remote_physical_errors", 16, 1),
    ("port_rcv_switch_relay_errors", 16, 1),
    ("port_xmit_discards", 16, 1),
    ("port_xmit_constraint_errors", 8, 1),
    ("port_rcv_constraint_errors", 8, 1),
    ("local_link_integrity_errors", 4, 1),
    ("excessive_buffer_overrun_errors", 4, 1),
    ("VL15_dropped", 16, 1),
    ("port_xmit_data", 32, 4),
    ("port_rcv_data", 32, 4),
    ("port_xmit_packets", 32, 1),
    ("port_rcv_packets", 32, 1),
    ("port_xmit_wait", 32, 1),
];

/// mlx5's queue counters (`drivers/infiniband/hw/mlx5/counters.c`: `basic_q_cnts`,
/// `out_of_seq_q_cnts`, `retrans_q_cnts`, `extended_err_cnts`, `roce_accl_cnts`):
/// `mlx5_ib_query_q_counters` reads each as a `__be32` and hands it out as a u64, so
/// they roll over at 2^32. The congestion counters (`cong_cnts`: `rp_cnp_*`, `np_*`)
/// and `rx_icrc_encapsulated` (`ext_ppcnt_cnts`) are read with `be64_to_cpup`: 64 bits.
/// Where bnxt_re reports a counter of the same name it is 64 bits wide; the pace bound
/// of [`counter_move`] keeps a reset of such a counter from passing for a wrap.
const MLX5_Q_COUNTERS: &[&str] = &[
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
];

/// mlx5e's queue-counter statistics (`drivers/net/ethernet/mellanox/mlx5/core/en_stats.h`:
/// `struct mlx5e_qcounter_stats { u32 rx_out_of_buffer; u32 rx_if_down_packets; }`,
/// filled with `MLX5_GET(query_q_counter_out, ...)`): 32 bits, rolling over. Every other
/// ethtool statistic of mlx5, ice and bnxt is a u64 the driver accumulates.
const MLX5E_Q_STATS: &[&str] = &["rx_out_of_buffer", "rx_if_down_packets"];

/// How the counter read from `source` behaves at the top of its range. `source` is a
/// sample's source: a file relative to the port directory (`counters/port_xmit_data`,
/// `hw_counters/out_of_buffer`), the same read over RDMA netlink
/// (`netlink:hw_counters/out_of_buffer`), or an ethtool statistic (`ethtool:rx_out_of_buffer`).
/// Everything else (counters_ext, efa, irdma, rxe and bnxt_re hw_counters, ethtool,
/// the agent's own counters) is 64 bits wide.
///
/// `counters/` of a device with extended width counters (`PORT_PMA_ATTR_EXT`) is 64 bits
/// under the same names: it saturates only in theory (it would have to rest exactly on the
/// 32-bit top), and going back is a reset either way.
pub fn overflow_of(source: &str) -> Overflow {
    let source = source.strip_prefix("netlink:").unwrap_or(source);
    if let Some(file) = source.strip_prefix("counters/") {
        return PMA_WIDTHS
            .iter()
            .find(|(name, _, _)| *name == file)
            .map(|&(_, bits, scale)| Overflow::Saturates {
                max: ((1u64 << bits) - 1) * scale,
            })
            .unwrap_or(Overflow::Wide);
    }
    if let Some(name) = source.strip_prefix("hw_counters/") {
        return hw_counter_overflow(name);
    }
    if let Some(stat) = source.strip_prefix("ethtool:") {
        if MLX5E_Q_STATS.contains(&stat) {
            return Overflow::Wraps { bits: 32, scale: 1 };
        }
    }
    Overflow::Wide
}

/// How the hw counter `name` (of `hw_counters/`, or of a per-QP counter, which has the
/// same names) behaves at its top.
pub fn hw_counter_overflow(name: &str) -> Overflow {
    if MLX5_Q_COUNTERS.contains(&name) {
        Overflow::Wraps { bits: 32, scale: 1 }
    } else {
        Overflow::Wide
    }
}

/// A sentence for docs and messages: how a counter from `source` ends.
pub fn describe(overflow: Overflow) -> String {
    match overflow {
        Overflow::Saturates { max } => format!("saturates at {max}"),
        Overflow::Wraps { bits, scale: 1 } => format!("wraps at 2^{bits}"),
        Overflow::Wraps { bits, scale } => format!("wraps at {scale}×2^{bits}"),
        Overflow::Wide => "64-bit".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WIDE: fn() -> Overflow = || Overflow::Wide;

    #[test]
    fn a_64_bit_counter_going_back_is_a_reset_never_a_wrap() {
        // The defect this module replaces: 3e9 → 100 was read as a 32-bit wrap.
        assert_eq!(counter_move(3e9, 100.0, WIDE, Some(1e9)), Move::Reset);
        assert_eq!(
            counter_move_from("counters_ext/port_xmit_data_64", 3e9, 100.0, Some(1e9)),
            Move::Reset
        );
        assert_eq!(
            counter_move_from("hw_counters/rp_cnp_handled", 3e9, 100.0, Some(1e9)),
            Move::Reset
        );
        assert_eq!(
            counter_move_from("ethtool:rx_prio3_pause", 3e9, 100.0, Some(1e9)),
            Move::Reset
        );
    }

    #[test]
    fn ib_port_counters_saturate_and_never_wrap() {
        let s = "counters/symbol_error";
        assert_eq!(overflow_of(s), Overflow::Saturates { max: 65_535 });
        assert_eq!(
            counter_move_from(s, 65_000.0, 65_535.0, None),
            Move::Saturated
        );
        assert_eq!(
            counter_move_from(s, 65_535.0, 65_535.0, None),
            Move::Saturated
        );
        // Cleared (perfquery -R): a reset, not a wrap, whatever the pace.
        assert_eq!(counter_move_from(s, 65_535.0, 3.0, Some(1e9)), Move::Reset);
        assert_eq!(counter_move_from(s, 12.0, 12.0, None), Move::Increase(0.0));
        // The 4-bit ones, and the 32-bit data counters in bytes.
        assert_eq!(
            counter_move_from("counters/local_link_integrity_errors", 15.0, 15.0, None),
            Move::Saturated
        );
        let top = 4.0 * 4_294_967_295.0;
        assert_eq!(
            counter_move_from("counters/port_xmit_data", top, top, None),
            Move::Saturated
        );
        assert_eq!(
            counter_move_from("netlink:counters/port_rcv_data", 8.0, top, None),
            Move::Saturated
        );
        // 65535 on a 32-bit counter is just a value.
        assert_eq!(
            counter_move_from("counters/port_xmit_packets", 65_000.0, 65_535.0, None),
            Move::Increase(535.0)
        );
        // A 64-bit counter at a round value is a value.
        assert_eq!(
            counter_move_from(
                "hw_counters/np_cnp_sent",
                4_294_967_295.0,
                4_294_967_295.0,
                None
            ),
            Move::Increase(0.0)
        );
    }

    #[test]
    fn mlx5_queue_counters_wrap_at_32_bits_when_the_pace_says_so() {
        let s = "hw_counters/out_of_buffer";
        assert_eq!(overflow_of(s), Overflow::Wraps { bits: 32, scale: 1 });
        assert_eq!(
            overflow_of("netlink:hw_counters/local_ack_timeout_err"),
            overflow_of(s)
        );
        // At 1e6 per interval, 4294000000 → 500000 is the increase across the top.
        let top = 4_294_967_296.0;
        let m = counter_move_from(s, 4_294_000_000.0, 500_000.0, Some(1e6));
        assert_eq!(m, Move::Increase(top - 4_294_000_000.0 + 500_000.0));
        // The same move at a pace of 100 per interval is a reset.
        assert_eq!(
            counter_move_from(s, 4_294_000_000.0, 500_000.0, Some(100.0)),
            Move::Reset
        );
        // No pace known (first reads, right after a reset): a reset.
        assert_eq!(
            counter_move_from(s, 4_294_000_000.0, 5.0, None),
            Move::Reset
        );
        // A value above 32 bits going back is no 32-bit wrap.
        assert_eq!(counter_move_from(s, 5e9, 5.0, Some(1e10)), Move::Reset);
        assert_eq!(
            overflow_of("ethtool:rx_out_of_buffer"),
            Overflow::Wraps { bits: 32, scale: 1 }
        );
        assert_eq!(overflow_of("hw_counters/rp_cnp_handled"), Overflow::Wide);
        assert_eq!(
            overflow_of("hw_counters/rx_icrc_encapsulated"),
            Overflow::Wide
        );
    }

    #[test]
    fn nan_is_never_an_increase() {
        assert_eq!(counter_move(f64::NAN, 5.0, WIDE, None), Move::Reset);
        assert_eq!(counter_move(5.0, f64::NAN, WIDE, None), Move::Reset);
    }

    #[test]
    fn every_catalogued_counter_file_has_a_known_end() {
        // Every counters/ file the catalog reads is in the PMA width table, or is one of
        // the 64-bit extended ones (unicast_/multicast_, PORT_PMA_ATTR_EXT only).
        for e in crate::CATALOG
            .iter()
            .filter(|e| e.source.starts_with("counters/"))
        {
            let file = &e.source["counters/".len()..];
            let o = overflow_of(e.source);
            assert!(
                matches!(o, Overflow::Saturates { .. })
                    || file.starts_with("unicast_")
                    || file.starts_with("multicast_"),
                "{}: {o:?}",
                e.source
            );
            if let Overflow::Saturates { max } = o {
                assert!(is_some_counters_top(max as f64), "{}: {max}", e.source);
            }
        }
    }

    proptest! {
        /// Whatever the values, source and pace: an increase is never negative, and never
        /// larger than what the counter could have moved.
        #[test]
        fn moves_are_never_negative_nor_larger_than_the_span(
            old in any::<u64>(), new in any::<u64>(), pace in proptest::option::of(0.0f64..1e20),
            source in prop::sample::select(vec![
                "counters/symbol_error", "counters/port_xmit_data", "hw_counters/out_of_buffer",
                "hw_counters/np_cnp_sent", "ethtool:rx_out_of_buffer", "ethtool:tx_prio3_pause",
                "netlink:hw_counters/duplicate_request", "probe", "",
            ]),
        ) {
            let (o, n) = (old as f64, new as f64);
            match counter_move_from(source, o, n, pace) {
                Move::Increase(d) => {
                    prop_assert!(d >= 0.0);
                    if n < o {
                        // Only a rolling counter crosses its top, within the pace.
                        prop_assert!(matches!(overflow_of(source), Overflow::Wraps { .. }), "{source}");
                        prop_assert!(d <= WRAP_PACE_FACTOR * pace.unwrap());
                    } else {
                        prop_assert_eq!(d, n - o);
                    }
                }
                Move::Reset => prop_assert!(n < o),
                Move::Saturated => prop_assert!(matches!(overflow_of(source), Overflow::Saturates { .. }), "{source}"),
            }
        }
    }
}
