//! Vendor driver statistics → one set of metrics with `rdma.priority` and
//! `network.io.direction` attributes. Every name is the driver's own string as `ethtool -S`
//! prints it, checked against the driver's source (Linux mainline):
//!
//! - mlx5: `drivers/net/ethernet/mellanox/mlx5/core/en_stats.c`, arrays
//!   `pport_per_prio_pfc_stats_desc` (`rx_%s_pause`... with `prio<N>` for each priority
//!   with PFC on, and with `global` while 802.3x pause is on), `pport_per_prio_traffic_stats_desc`,
//!   `pport_pfc_stall_stats_desc`, `pport_802_3_stats_desc`, `pport_phy_statistical_stats_desc`;
//!   units from the kernel's `Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst`
//!   (durations in µs);
//! - ice: `drivers/net/ethernet/intel/ice/ice_ethtool.c`, `ice_gstrings_pf_stats` (`ICE_PF_STAT`,
//!   the `.nic` suffix is part of each literal) and the per-priority strings of
//!   `__ice_get_strings`; ice has no pause duration and no storm counter;
//! - bnxt_en: `drivers/net/ethernet/broadcom/bnxt/bnxt_ethtool.c`, `bnxt_port_stats_arr` and
//!   `bnxt_port_stats_ext_arr`/`bnxt_tx_port_stats_ext_arr` (each name is the firmware
//!   field's, `__stringify`d; the extended ones appear as far as the firmware reports them).
//!
//! | vendor | names | metric |
//! |---|---|---|
//! | mlx5 | `rx_prio<N>_pause`, `tx_prio<N>_pause` | `rdma.pfc.pause_frames` |
//! | mlx5 | `rx_prio<N>_pause_duration`, `tx_prio<N>_pause_duration` (µs) | `rdma.pfc.pause_duration` |
//! | mlx5 | `rx_prio<N>_pause_transition` | `rdma.pfc.pause_transitions` |
//! | mlx5 | `rx_prio<N>_bytes`, `tx_prio<N>_bytes` | `rdma.priority.io` |
//! | mlx5 | `rx_prio<N>_packets`, `tx_prio<N>_packets` | `rdma.priority.packets` |
//! | mlx5 | `rx_prio<N>_discards`; `rx_prio<N>_buf_discard` (with `rdma.discard.cause=buffer`) | `rdma.priority.discards` |
//! | mlx5 | `tx_pause_storm_warning_events`, `tx_pause_storm_error_events` | `rdma.pfc.storm_events` |
//! | mlx5 | `rx_pause_ctrl_phy`, `tx_pause_ctrl_phy` (802.3x pause frames, always present) | `rdma.link.pause_frames` |
//! | mlx5 | `rx_global_pause_duration`, `tx_global_pause_duration` (µs) | `rdma.link.pause_duration` |
//! | mlx5 | `rx_global_pause_transition` | `rdma.link.pause_transitions` |
//! | mlx5 | `rx_discards_phy`, `tx_discards_phy` | `rdma.link.discards` |
//! | mlx5 | `rx_out_of_buffer` | `rdma.netdev.out_of_buffer` |
//! | mlx5 | `rx_crc_errors_phy`, `rx_symbol_err_phy`, `rx_corrected_bits_phy`, `link_down_events_phy`, `rx_bits_phy`, `rx_pcs_symbol_err_phy` (en_stats.c `pport_phy_statistical_stats_desc`) | `rdma.link.*` |
//! | ice | `rx_priority_<N>_xoff.nic`, `tx_priority_<N>_xoff.nic` | `rdma.pfc.pause_frames` |
//! | ice | `rx_priority_<N>_xon.nic`, `tx_priority_<N>_xon.nic` | `rdma.pfc.resume_frames` |
//! | ice | `link_xoff_rx.nic`, `link_xoff_tx.nic` | `rdma.link.pause_frames` |
//! | ice | `link_xon_rx.nic`, `link_xon_tx.nic` | `rdma.link.resume_frames` |
//! | bnxt | `rx_pfc_ena_frames_pri<N>`, `tx_pfc_ena_frames_pri<N>` | `rdma.pfc.pause_frames` |
//! | bnxt | `pfc_pri<N>_rx_duration_us`, `pfc_pri<N>_tx_duration_us` | `rdma.pfc.pause_duration` |
//! | bnxt | `pfc_pri<N>_rx_transitions`, `pfc_pri<N>_tx_transitions` | `rdma.pfc.pause_transitions` |
//! | bnxt | `rx_pause_frames`, `tx_pause_frames` (802.3x) | `rdma.link.pause_frames` |
//! | bnxt | `rx_bytes_pri<N>`, `tx_bytes_pri<N>` | `rdma.priority.io` |
//! | bnxt | `rx_packets_pri<N>`, `tx_packets_pri<N>` | `rdma.priority.packets` |
//!
//! mlx5's `rx_global_pause`/`tx_global_pause` count the same frames as its
//! `*_pause_ctrl_phy` (and only while 802.3x pause is on): not mapped, so one frame is
//! not counted twice. bnxt's `continuous_*pause_events` and `resume_*pause_events` are
//! left to the raw passthrough: what they count is not documented in the driver (the
//! firmware's field names; FreeBSD's descriptions say only "pause events"), and as storm
//! events they would fire the critical storm alerts on a guess.
//!
//! Everything else is left to the opt-in raw passthrough.
use rocewatch_metrics::names;

/// A statistic's place in the normalized set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    pub metric: &'static str,
    pub priority: Option<u8>,
    /// `receive` or `transmit`.
    pub direction: Option<&'static str>,
    /// Extra attribute (e.g. `severity=warning`).
    pub extra: Option<(&'static str, &'static str)>,
}

fn dir(prefix: &str) -> Option<&'static str> {
    match prefix {
        "rx" => Some("receive"),
        "tx" => Some("transmit"),
        _ => None,
    }
}

fn prio(s: &str) -> Option<u8> {
    s.parse::<u8>().ok().filter(|p| *p < 8)
}

fn n(
    metric: &'static str,
    priority: Option<u8>,
    direction: Option<&'static str>,
) -> Option<Normalized> {
    Some(Normalized {
        metric,
        priority,
        direction,
        extra: None,
    })
}

/// Normalize one driver statistic name; `None` when it is not one of ours.
pub fn normalize(name: &str) -> Option<Normalized> {
    // ice: link_xoff_rx.nic, link_xon_tx.nic (802.3x: every priority)
    if let Some(r) = name
        .strip_prefix("link_")
        .and_then(|r| r.strip_suffix(".nic"))
    {
        let (what, d) = r.split_once('_')?;
        let metric = match what {
            "xoff" => names::LINK_PAUSE_FRAMES,
            "xon" => names::LINK_RESUME_FRAMES,
            _ => return None,
        };
        return n(metric, None, Some(dir(d)?));
    }
    // bnxt: pfc_pri3_rx_duration_us, pfc_pri3_tx_transitions
    if let Some(r) = name.strip_prefix("pfc_pri") {
        let (p, r) = r.split_once('_')?;
        let p = prio(p)?;
        let (d, what) = r.split_once('_')?;
        let metric = match what {
            "duration_us" => names::PFC_PAUSE_DURATION,
            "transitions" => names::PFC_PAUSE_TRANSITIONS,
            _ => return None,
        };
        return n(metric, Some(p), Some(dir(d)?));
    }
    let (d, rest) = name.split_once('_')?;
    let direction = dir(d);
    // ice: rx_priority_3_xoff.nic, tx_priority_3_xon.nic
    if let (Some(dir), Some(r)) = (direction, rest.strip_prefix("priority_")) {
        let r = r.strip_suffix(".nic")?;
        let (p, what) = r.split_once('_')?;
        let p = prio(p)?;
        let metric = match what {
            "xoff" => names::PFC_PAUSE_FRAMES,
            "xon" => names::PFC_RESUME_FRAMES,
            _ => return None,
        };
        return n(metric, Some(p), Some(dir));
    }
    // mlx5: rx_prio3_pause, tx_prio3_pause_duration, rx_prio3_bytes ... (after ice:
    // "priority_" also starts with "prio")
    if let (Some(dir), Some(r)) = (direction, rest.strip_prefix("prio")) {
        let (p, what) = r.split_once('_')?;
        let p = prio(p)?;
        let metric = match what {
            "pause" => names::PFC_PAUSE_FRAMES,
            "pause_duration" => names::PFC_PAUSE_DURATION,
            "pause_transition" => names::PFC_PAUSE_TRANSITIONS,
            "bytes" => names::PRIORITY_IO,
            "packets" => names::PRIORITY_PACKETS,
            "discards" => names::PRIORITY_DISCARDS,
            // Printed beside `discards` (ConnectX-5 on): its own series, or the two
            // would take turns on one and read as a reset every collection.
            "buf_discard" => {
                return Some(Normalized {
                    metric: names::PRIORITY_DISCARDS,
                    priority: Some(p),
                    direction: Some(dir),
                    extra: Some(("rdma.discard.cause", "buffer")),
                })
            }
            _ => return None,
        };
        return n(metric, Some(p), Some(dir));
    }
    // bnxt: rx_bytes_pri3, tx_packets_pri3 (bnxt_rx_bytes_pri_arr and the like: the
    // priority's CoS queue, as the driver maps it)
    if let (Some(dir), Some((what, p))) = (direction, rest.rsplit_once("_pri")) {
        if let Some(p) = prio(p) {
            match what {
                "bytes" => return n(names::PRIORITY_IO, Some(p), Some(dir)),
                "packets" => return n(names::PRIORITY_PACKETS, Some(p), Some(dir)),
                _ => {}
            }
        }
    }
    // bnxt: rx_pfc_ena_frames_pri3
    if let (Some(dir), Some(p)) = (
        direction,
        rest.strip_prefix("pfc_ena_frames_pri").and_then(prio),
    ) {
        return n(names::PFC_PAUSE_FRAMES, Some(p), Some(dir));
    }
    match name {
        "tx_pause_storm_warning_events" => Some(Normalized {
            metric: names::PFC_STORM_EVENTS,
            priority: None,
            direction: Some("transmit"),
            extra: Some(("rdma.severity", "warning")),
        }),
        "tx_pause_storm_error_events" => Some(Normalized {
            metric: names::PFC_STORM_EVENTS,
            priority: None,
            direction: Some("transmit"),
            extra: Some(("rdma.severity", "error")),
        }),
        // mlx5 and bnxt: 802.3x pause frames.
        "rx_pause_ctrl_phy" | "tx_pause_ctrl_phy" | "rx_pause_frames" | "tx_pause_frames" => {
            n(names::LINK_PAUSE_FRAMES, None, direction)
        }
        "rx_global_pause_duration" | "tx_global_pause_duration" => {
            n(names::LINK_PAUSE_DURATION, None, direction)
        }
        "rx_global_pause_transition" => n(names::LINK_PAUSE_TRANSITIONS, None, Some("receive")),
        "rx_discards_phy" | "tx_discards_phy" => n(names::LINK_DISCARDS, None, direction),
        "rx_out_of_buffer" => n(names::NETDEV_OUT_OF_BUFFER, None, Some("receive")),
        "rx_crc_errors_phy" => n(names::LINK_CRC_ERRORS, None, Some("receive")),
        "rx_symbol_err_phy" => n(names::LINK_SYMBOL_ERRORS, None, Some("receive")),
        "rx_corrected_bits_phy" => n(names::LINK_CORRECTED_BITS, None, Some("receive")),
        "link_down_events_phy" => n(names::LINK_DOWN_EVENTS, None, None),
        "rx_bits_phy" => n(names::LINK_RECEIVED_BITS, None, Some("receive")),
        "rx_pcs_symbol_err_phy" => n(names::LINK_PCS_SYMBOL_ERRORS, None, Some("receive")),
        _ => None,
    }
}

/// Parse the text `ethtool -S IF` prints (`NIC statistics:` then `     name: value`).
/// Used for recorded outputs of NICs this machine does not have.
pub fn parse_ethtool_s(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().rsplit_once(':')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str) -> Option<(&'static str, Option<u8>, Option<&'static str>)> {
        normalize(name).map(|n| (n.metric, n.priority, n.direction))
    }

    #[test]
    fn vendor_names() {
        for (name, want) in [
            (
                "rx_prio3_pause",
                Some(("rdma.pfc.pause_frames", Some(3), Some("receive"))),
            ),
            (
                "tx_prio3_pause_duration",
                Some(("rdma.pfc.pause_duration", Some(3), Some("transmit"))),
            ),
            (
                "rx_prio0_pause_transition",
                Some(("rdma.pfc.pause_transitions", Some(0), Some("receive"))),
            ),
            (
                "tx_prio7_bytes",
                Some(("rdma.priority.io", Some(7), Some("transmit"))),
            ),
            (
                "rx_prio3_discards",
                Some(("rdma.priority.discards", Some(3), Some("receive"))),
            ),
            ("rx_prio8_pause", None),
            ("rx_prio3_something", None),
            (
                "rx_priority_3_xoff.nic",
                Some(("rdma.pfc.pause_frames", Some(3), Some("receive"))),
            ),
            (
                "tx_priority_4_xon.nic",
                Some(("rdma.pfc.resume_frames", Some(4), Some("transmit"))),
            ),
            // ice counts these internally but prints no such string.
            ("rx_priority_4_xon_2_xoff.nic", None),
            (
                "link_xoff_tx.nic",
                Some(("rdma.link.pause_frames", None, Some("transmit"))),
            ),
            (
                "link_xon_rx.nic",
                Some(("rdma.link.resume_frames", None, Some("receive"))),
            ),
            ("link_xoff_rx", None),
            ("link_down_events", None),
            ("rx_priority_3_xoff", None),
            (
                "rx_pfc_ena_frames_pri3",
                Some(("rdma.pfc.pause_frames", Some(3), Some("receive"))),
            ),
            (
                "tx_pfc_ena_frames_pri5",
                Some(("rdma.pfc.pause_frames", Some(5), Some("transmit"))),
            ),
            // In bnxt's firmware structure, not in Linux's ethtool strings.
            ("rx_pfc_xon2xoff_frames_pri3", None),
            // PFC frames of all priorities: not link (802.3x) pause.
            ("rx_pfc_frames", None),
            ("rx_pfc_ena_frames_pri8", None),
            (
                "pfc_pri3_tx_duration_us",
                Some(("rdma.pfc.pause_duration", Some(3), Some("transmit"))),
            ),
            (
                "pfc_pri5_rx_transitions",
                Some(("rdma.pfc.pause_transitions", Some(5), Some("receive"))),
            ),
            ("pfc_pri9_rx_transitions", None),
            ("pfc_pri3_xx_transitions", None),
            (
                "rx_pause_frames",
                Some(("rdma.link.pause_frames", None, Some("receive"))),
            ),
            (
                "tx_global_pause_duration",
                Some(("rdma.link.pause_duration", None, Some("transmit"))),
            ),
            ("tx_global_pause", None),
            ("continuous_pause_events", None),
            ("resume_pause_events", None),
            (
                "tx_bytes_pri3",
                Some(("rdma.priority.io", Some(3), Some("transmit"))),
            ),
            (
                "rx_packets_pri0",
                Some(("rdma.priority.packets", Some(0), Some("receive"))),
            ),
            ("rx_bytes_pri9", None),
            ("rx_discard_bytes_cos0", None),
            (
                "rx_pause_ctrl_phy",
                Some(("rdma.link.pause_frames", None, Some("receive"))),
            ),
            (
                "rx_out_of_buffer",
                Some(("rdma.netdev.out_of_buffer", None, Some("receive"))),
            ),
            (
                "link_down_events_phy",
                Some(("rdma.link.down_events", None, None)),
            ),
            (
                "rx_bits_phy",
                Some(("rdma.link.received_bits", None, Some("receive"))),
            ),
            (
                "rx_pcs_symbol_err_phy",
                Some(("rdma.link.pcs_symbol_errors", None, Some("receive"))),
            ),
            ("rx_packets", None),
            ("rx_queue_0_packets", None),
            ("", None),
        ] {
            assert_eq!(m(name), want, "{name}");
        }
        assert_eq!(
            normalize("tx_pause_storm_error_events").unwrap().extra,
            Some(("rdma.severity", "error"))
        );
    }

    #[test]
    fn ethtool_s_text() {
        let s = "NIC statistics:\n     rx_packets: 12\n     rx_priority_3_xoff.nic: 7\n     bogus line\n";
        assert_eq!(
            parse_ethtool_s(s),
            vec![
                ("rx_packets".to_string(), 12),
                ("rx_priority_3_xoff.nic".to_string(), 7)
            ]
        );
    }
}
