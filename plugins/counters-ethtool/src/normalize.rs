//! Vendor driver statistics → one set of metrics with `rdma.priority` and
//! `network.io.direction` attributes.
//!
//! | vendor | names | metric |
//! |---|---|---|
//! | mlx5 | `rx_prio<N>_pause`, `tx_prio<N>_pause` | `rdma.pfc.pause_frames` |
//! | mlx5 | `rx_prio<N>_pause_duration`, `tx_prio<N>_pause_duration` (µs) | `rdma.pfc.pause_duration` |
//! | mlx5 | `rx_prio<N>_pause_transition` | `rdma.pfc.pause_transitions` |
//! | mlx5 | `rx_prio<N>_bytes`, `tx_prio<N>_bytes` | `rdma.priority.io` |
//! | mlx5 | `rx_prio<N>_packets`, `tx_prio<N>_packets` | `rdma.priority.packets` |
//! | mlx5 | `rx_prio<N>_discards`, `rx_prio<N>_buf_discard` | `rdma.priority.discards` |
//! | mlx5 | `tx_pause_storm_warning_events`, `tx_pause_storm_error_events` | `rdma.pfc.storm_events` |
//! | mlx5 | `rx_pause_ctrl_phy`, `tx_pause_ctrl_phy` | `rdma.link.pause_frames` |
//! | mlx5 | `rx_discards_phy`, `tx_discards_phy` | `rdma.link.discards` |
//! | mlx5 | `rx_out_of_buffer` | `rdma.netdev.out_of_buffer` |
//! | mlx5 | `rx_crc_errors_phy`, `rx_symbol_err_phy`, `rx_corrected_bits_phy`, `link_down_events_phy` | `rdma.link.*` |
//! | ice | `rx_priority_<N>_xoff.nic`, `tx_priority_<N>_xoff.nic` | `rdma.pfc.pause_frames` |
//! | ice | `rx_priority_<N>_xon.nic`, `tx_priority_<N>_xon.nic` | `rdma.pfc.resume_frames` |
//! | ice | `rx_priority_<N>_xon_2_xoff.nic` | `rdma.pfc.pause_transitions` |
//! | bnxt | `rx_pfc_ena_frames_pri<N>`, `tx_pfc_ena_frames_pri<N>` | `rdma.pfc.pause_frames` |
//! | bnxt | `rx_pfc_xon2xoff_frames_pri<N>` | `rdma.pfc.pause_transitions` |
//! | bnxt | `rx_pfc_ena_frames`, `tx_pfc_ena_frames` (all priorities) | `rdma.link.pause_frames` |
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
    let (d, rest) = name.split_once('_')?;
    let direction = dir(d);
    // ice: rx_priority_3_xoff.nic, tx_priority_3_xon.nic, rx_priority_3_xon_2_xoff.nic
    if let (Some(dir), Some(r)) = (direction, rest.strip_prefix("priority_")) {
        let r = r.strip_suffix(".nic")?;
        let (p, what) = r.split_once('_')?;
        let p = prio(p)?;
        let metric = match what {
            "xoff" => names::PFC_PAUSE_FRAMES,
            "xon" => names::PFC_RESUME_FRAMES,
            "xon_2_xoff" => names::PFC_PAUSE_TRANSITIONS,
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
            "discards" | "buf_discard" => names::PRIORITY_DISCARDS,
            _ => return None,
        };
        return n(metric, Some(p), Some(dir));
    }
    // bnxt: rx_pfc_ena_frames_pri3, rx_pfc_xon2xoff_frames_pri3, rx_pfc_ena_frames
    if let (Some(dir), Some(r)) = (direction, rest.strip_prefix("pfc_")) {
        if let Some((what, p)) = r.rsplit_once("_pri") {
            let p = prio(p)?;
            let metric = match what {
                "ena_frames" => names::PFC_PAUSE_FRAMES,
                "xon2xoff_frames" => names::PFC_PAUSE_TRANSITIONS,
                _ => return None,
            };
            return n(metric, Some(p), Some(dir));
        }
        return (r == "ena_frames").then_some(Normalized {
            metric: names::LINK_PAUSE_FRAMES,
            priority: None,
            direction: Some(dir),
            extra: None,
        });
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
        "rx_pause_ctrl_phy" | "tx_pause_ctrl_phy" => n(names::LINK_PAUSE_FRAMES, None, direction),
        "rx_discards_phy" | "tx_discards_phy" => n(names::LINK_DISCARDS, None, direction),
        "rx_out_of_buffer" => n(names::NETDEV_OUT_OF_BUFFER, None, Some("receive")),
        "rx_crc_errors_phy" => n(names::LINK_CRC_ERRORS, None, Some("receive")),
        "rx_symbol_err_phy" => n(names::LINK_SYMBOL_ERRORS, None, Some("receive")),
        "rx_corrected_bits_phy" => n(names::LINK_CORRECTED_BITS, None, Some("receive")),
        "link_down_events_phy" => n(names::LINK_DOWN_EVENTS, None, None),
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
            (
                "rx_priority_4_xon_2_xoff.nic",
                Some(("rdma.pfc.pause_transitions", Some(4), Some("receive"))),
            ),
            ("rx_priority_3_xoff", None),
            (
                "rx_pfc_ena_frames_pri3",
                Some(("rdma.pfc.pause_frames", Some(3), Some("receive"))),
            ),
            (
                "tx_pfc_ena_frames_pri5",
                Some(("rdma.pfc.pause_frames", Some(5), Some("transmit"))),
            ),
            (
                "rx_pfc_xon2xoff_frames_pri3",
                Some(("rdma.pfc.pause_transitions", Some(3), Some("receive"))),
            ),
            (
                "rx_pfc_ena_frames",
                Some(("rdma.link.pause_frames", None, Some("receive"))),
            ),
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
