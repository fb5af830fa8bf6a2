//! Bandwidth tests (`rocewatch bandwidth`, `doctor --bandwidth`): the call to the probe
//! plugin, what moved on each port (counter deltas, the local ones from the collectors'
//! samples, the peer's from the raw files its responder sent, both named through the
//! metric catalog), and the sentence that explains a shortfall; `measure.rs` runs a test
//! between two collections and holds it against the port's line rate.

mod measure;

pub use measure::{line_rate, measure, LineRate, MeasureError, Measured, Verdict};

use rocewatch_metrics::names;
use std::collections::BTreeMap;
use std::time::Duration;

use rocewatch_metrics::catalog;
use rocewatch_metrics::counter::counter_move_from;
use rocewatch_metrics::{ATTR_DEVICE, ATTR_DIRECTION, ATTR_NETDEV, ATTR_PORT};
use rocewatch_plugin_api::{AttrSet, BandwidthRequest, BandwidthResult, PortSnapshot, Sample};
use serde::Serialize;

use rocewatch_runtime::host::call::CallError;
use rocewatch_runtime::host::registry::{Entry, Instance};

use rocewatch_metrics::ATTR_PRIORITY;

/// Run `request` through the probe plugin `entry`: the call may take the test's duration,
/// its connection and the responder's report, plus a minute.
pub async fn run_test(
    entry: &Entry,
    request: BandwidthRequest,
    metrics: &rocewatch_runtime::selfmetrics::SelfMetrics,
) -> Result<BandwidthResult, CallError> {
    let limit = Duration::from_millis(request.duration_ms + 2 * request.timeout_ms)
        + Duration::from_secs(60);
    rocewatch_runtime::host::call::call(entry, limit, metrics, move |i| match i {
        Instance::Probe(p) => p.bandwidth(&request),
        _ => Err(rocewatch_plugin_api::PluginError::failed(
            "not a probe plugin",
        )),
    })
    .await
}

/// What moved on one port during a test. Absent counters stay `None` / out of the maps
/// (a port without them is not a port where nothing moved).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PortMoves {
    pub tx_bytes: Option<u64>,
    pub rx_bytes: Option<u64>,
    pub tx_packets: Option<u64>,
    pub rx_packets: Option<u64>,
    /// PFC pause frames per priority, received (the other end asked this port to stop)
    /// and sent.
    pub pause_rx: BTreeMap<u8, u64>,
    pub pause_tx: BTreeMap<u8, u64>,
    /// Link-level pause frames (all priorities), received and sent.
    pub link_pause_rx: Option<u64>,
    pub link_pause_tx: Option<u64>,
    pub cnp_sent: Option<u64>,
    pub cnp_handled: Option<u64>,
    pub ecn_marked: Option<u64>,
    pub retransmissions: Option<u64>,
    pub out_of_sequence: Option<u64>,
    pub out_of_buffer: Option<u64>,
    pub discards: Option<u64>,
}

/// Saturating: the peer's figures come from its report, which this side cannot trust.
fn add(slot: &mut Option<u64>, v: u64) {
    *slot = Some(slot.unwrap_or(0).saturating_add(v));
}

impl PortMoves {
    /// Add one series' increase.
    pub fn add(&mut self, name: &str, attrs: &AttrSet, delta: u64) {
        let dir = attrs.get(ATTR_DIRECTION);
        let tx = dir == Some("transmit");
        let prio = attrs.get(ATTR_PRIORITY).and_then(|p| p.parse::<u8>().ok());
        match name {
            names::PORT_IO => add(
                if tx {
                    &mut self.tx_bytes
                } else {
                    &mut self.rx_bytes
                },
                delta,
            ),
            names::PORT_PACKETS => add(
                if tx {
                    &mut self.tx_packets
                } else {
                    &mut self.rx_packets
                },
                delta,
            ),
            names::PFC_PAUSE_FRAMES => {
                if let Some(p) = prio {
                    let m = if tx {
                        &mut self.pause_tx
                    } else {
                        &mut self.pause_rx
                    };
                    let e = m.entry(p).or_default();
                    *e = e.saturating_add(delta);
                }
            }
            names::LINK_PAUSE_FRAMES => add(
                if tx {
                    &mut self.link_pause_tx
                } else {
                    &mut self.link_pause_rx
                },
                delta,
            ),
            names::PORT_CNP_SENT => add(&mut self.cnp_sent, delta),
            names::PORT_CNP_HANDLED => add(&mut self.cnp_handled, delta),
            names::PORT_ECN_MARKED_PACKETS => add(&mut self.ecn_marked, delta),
            names::PORT_RETRANSMISSIONS_ADAPTIVE
            | names::PORT_RETRANSMISSIONS_PACKETS
            | names::PORT_LOCAL_ACK_TIMEOUTS
            | names::PORT_RETRY_ERRORS => add(&mut self.retransmissions, delta),
            names::PORT_OUT_OF_SEQUENCE | names::PORT_SEQUENCE_ERRORS => {
                add(&mut self.out_of_sequence, delta)
            }
            names::PORT_OUT_OF_BUFFER | names::NETDEV_OUT_OF_BUFFER => {
                add(&mut self.out_of_buffer, delta)
            }
            names::PORT_TRANSMIT_DISCARDS
            | names::PRIORITY_DISCARDS
            | names::LINK_DISCARDS
            | names::PORT_DROPS => add(&mut self.discards, delta),
            _ => {}
        }
    }

    /// The moves of the peer's port, from the raw files its responder read before and
    /// after (named and scaled by the catalog; files it does not know are left out).
    pub fn from_snapshot(s: &PortSnapshot) -> PortMoves {
        let mut m = PortMoves::default();
        for (file, after) in &s.after {
            let (Some(before), Some((group, name))) = (s.before.get(file), file.split_once('/'))
            else {
                continue;
            };
            let Some(e) = catalog::lookup(group, name) else {
                continue;
            };
            // The peer's raw values, scaled as its collector would; a reset or a counter
            // resting at its top says nothing about the test.
            let scaled = |v: u64| v.saturating_mul(e.scale) as f64;
            let Some(d) = counter_move_from(file, scaled(*before), scaled(*after), None).increase()
            else {
                continue;
            };
            let attrs: AttrSet = e.attributes.iter().copied().collect();
            m.add(e.name, &attrs, d as u64);
        }
        m
    }

    /// The moves of the local port `device`/`port` (netdev `netdev`) between two
    /// collections: samples of other ports are left out; a counter that went backwards
    /// (a reset) or rests at its top (saturated) adds nothing, its move being unknown.
    pub fn from_samples(
        before: &[Sample],
        after: &[Sample],
        device: &str,
        port: u8,
        netdev: Option<&str>,
    ) -> PortMoves {
        let port = port.to_string();
        let ours = |s: &Sample| {
            let a = &s.attributes;
            a.get(ATTR_DEVICE).is_none_or(|d| d == device)
                && a.get(ATTR_PORT).is_none_or(|p| *p == port)
                && a.get(ATTR_NETDEV)
                    .is_none_or(|n| netdev.is_none_or(|want| n == want))
        };
        let was: BTreeMap<String, f64> = before
            .iter()
            .filter(|s| ours(s))
            .map(|s| (s.series_key(), s.value.as_f64()))
            .collect();
        let mut m = PortMoves::default();
        for s in after.iter().filter(|s| ours(s)) {
            let Some(&then) = was.get(&s.series_key()) else {
                continue;
            };
            if let Some(d) = counter_move_from(&s.source, then, s.value.as_f64(), None).increase() {
                m.add(&s.name, &s.attributes, d as u64);
            }
        }
        m
    }
}

/// `12000` → `12 000`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Gb/s with a sensible number of digits.
pub fn gbps(bps: f64) -> String {
    let g = bps / 1e9;
    if g >= 10.0 {
        format!("{g:.0}")
    } else if g >= 1.0 {
        format!("{g:.1}")
    } else {
        format!("{g:.3}")
    }
}

/// What in the counters explains a shortfall, most telling first: pauses (back-pressure),
/// congestion notifications, losses (retransmissions, out-of-sequence, drops), missing
/// receive buffers. `remote` is the peer's port, when its responder sent its counters.
pub fn causes(local: &PortMoves, remote: Option<&PortMoves>) -> Vec<String> {
    let mut out = Vec::new();
    let n = thousands;
    for (p, c) in local.pause_rx.iter().filter(|(_, c)| **c > 0) {
        out.push(format!(
            "{} pause frames received on priority {p}: the switch is back-pressuring this port",
            n(*c)
        ));
    }
    if let Some(r) = remote {
        for (p, c) in r.pause_tx.iter().filter(|(_, c)| **c > 0) {
            out.push(format!(
                "the peer's port sent {} pause frames on priority {p}: its receive buffers filled",
                n(*c)
            ));
        }
        for (p, c) in r.pause_rx.iter().filter(|(_, c)| **c > 0) {
            out.push(format!(
                "the peer's port received {} pause frames on priority {p}: the switch is back-pressuring it",
                n(*c)
            ));
        }
    }
    for (p, c) in local.pause_tx.iter().filter(|(_, c)| **c > 0) {
        out.push(format!(
            "this port sent {} pause frames on priority {p}: it could not take traffic in fast enough",
            n(*c)
        ));
    }
    if let Some(c) = local.link_pause_rx.filter(|c| *c > 0) {
        if local.pause_rx.values().all(|v| *v == 0) {
            out.push(format!(
                "{} link-level pause frames received: the switch is back-pressuring this port",
                n(c)
            ));
        }
    }
    if let Some(c) = local.cnp_handled.filter(|c| *c > 0) {
        out.push(format!(
            "{} CNPs received: the path is congested (ECN marks) and this sender slowed down",
            n(c)
        ));
    }
    let sides = [("this port", Some(local)), ("the peer's port", remote)];
    for (who, m) in sides {
        let Some(m) = m else { continue };
        if let Some(c) = m.ecn_marked.filter(|c| *c > 0) {
            out.push(format!(
                "{} ECN-marked packets arrived at {who}: a queue on the path is building up",
                n(c)
            ));
        }
        if let Some(c) = m.cnp_sent.filter(|c| *c > 0) {
            out.push(format!("{who} sent {} CNPs: it saw congestion marks", n(c)));
        }
    }
    for (who, m) in sides {
        let Some(m) = m else { continue };
        if let Some(c) = m.retransmissions.filter(|c| *c > 0) {
            out.push(format!(
                "{} retransmissions at {who}: packets were lost",
                n(c)
            ));
        }
        if let Some(c) = m.out_of_sequence.filter(|c| *c > 0) {
            out.push(format!(
                "{} out-of-sequence packets at {who}: packets were dropped or reordered on the path",
                n(c)
            ));
        }
        if let Some(c) = m.discards.filter(|c| *c > 0) {
            out.push(format!("{} packets discarded at {who}", n(c)));
        }
        if let Some(c) = m.out_of_buffer.filter(|c| *c > 0) {
            out.push(format!(
                "{} packets found no receive buffer at {who} (out_of_buffer): the receiver did not keep up",
                n(c)
            ));
        }
    }
    out
}

/// The verdict's sentence for a share below the minimum: `81 % of 100 Gb/s; ...`.
pub fn shortfall_sentence(share: f64, line_bps: f64, causes: &[String]) -> String {
    let head = format!("{:.0} % of {} Gb/s", share * 100.0, gbps(line_bps));
    if causes.is_empty() {
        format!(
            "{head}; no pause frames, congestion notifications, retransmissions or drops moved on the counters read: \
             the limit is at the hosts (CPU, PCIe, NUMA placement) or the test (try a larger --size or more --qps)"
        )
    } else {
        format!("{head}; {}", causes.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(kv: &[(&str, &str)]) -> AttrSet {
        kv.iter().copied().collect()
    }

    #[test]
    fn pauses_on_priority_3_explain_a_shortfall() {
        let mut local = PortMoves::default();
        local.add(
            "rdma.pfc.pause_frames",
            &attrs(&[(ATTR_PRIORITY, "3"), (ATTR_DIRECTION, "receive")]),
            12000,
        );
        local.add(
            "rdma.port.io",
            &attrs(&[(ATTR_DIRECTION, "transmit")]),
            1 << 30,
        );
        let c = causes(&local, None);
        assert_eq!(
            shortfall_sentence(0.81, 100e9, &c),
            "81 % of 100 Gb/s; 12 000 pause frames received on priority 3: the switch is back-pressuring this port"
        );
        assert_eq!(local.tx_bytes, Some(1 << 30));
        assert_eq!(local.rx_bytes, None, "absent, not zero");
    }

    #[test]
    fn the_peers_congestion_and_losses_are_named_with_their_side() {
        let mut remote = PortMoves::default();
        remote.add("rdma.port.ecn_marked_packets", &attrs(&[]), 500);
        remote.add("rdma.port.cnp.sent", &attrs(&[]), 250);
        let mut local = PortMoves::default();
        local.add("rdma.port.cnp.handled", &attrs(&[]), 250);
        local.add("rdma.port.retransmissions.adaptive", &attrs(&[]), 3);
        local.add("rdma.port.out_of_sequence", &attrs(&[]), 0);
        let c = causes(&local, Some(&remote));
        assert_eq!(
            c,
            [
                "250 CNPs received: the path is congested (ECN marks) and this sender slowed down",
                "500 ECN-marked packets arrived at the peer's port: a queue on the path is building up",
                "the peer's port sent 250 CNPs: it saw congestion marks",
                "3 retransmissions at this port: packets were lost",
            ]
        );
        let quiet = shortfall_sentence(0.5, 25e9, &[]);
        assert!(
            quiet.starts_with("50 % of 25 Gb/s; no pause frames"),
            "{quiet}"
        );
    }

    #[test]
    fn the_peers_raw_files_go_through_the_catalog() {
        let mut s = PortSnapshot {
            device: "mlx5_0".into(),
            port: 1,
            ..Default::default()
        };
        for (f, b, a) in [
            ("counters/port_xmit_data", 100, 350),
            ("hw_counters/out_of_sequence", 1, 8),
            ("hw_counters/sent_pkts", 10, 30),
            ("hw_counters/not_catalogued", 1, 9),
        ] {
            s.before.insert(f.into(), b);
            s.after.insert(f.into(), a);
        }
        let m = PortMoves::from_snapshot(&s);
        assert_eq!(m.tx_bytes, Some(1000), "4-octet words");
        assert_eq!(m.tx_packets, Some(20));
        assert_eq!(m.out_of_sequence, Some(7));
    }

    #[test]
    fn a_peers_absurd_report_saturates_instead_of_overflowing() {
        // The peer's figures come over the network: u64::MAX words of data (scaled ×4)
        // and two files adding to the same figure must neither panic nor wrap.
        let mut s = PortSnapshot::default();
        for f in ["counters/port_xmit_data", "counters_ext/port_xmit_data_64"] {
            s.before.insert(f.into(), 0);
            s.after.insert(f.into(), u64::MAX);
        }
        let m = PortMoves::from_snapshot(&s);
        assert_eq!(m.tx_bytes, Some(u64::MAX));
        let mut p = PortMoves::default();
        for _ in 0..2 {
            p.add(
                "rdma.pfc.pause_frames",
                &attrs(&[("rdma.priority", "3")]),
                u64::MAX,
            );
        }
        assert_eq!(p.pause_rx.get(&3), Some(&u64::MAX), "{p:?}");
    }

    #[test]
    fn local_moves_keep_to_the_tested_port() {
        use rocewatch_plugin_api::Value;
        let sample = |dev: &str, v: u64| Sample {
            name: "rdma.port.packets".into(),
            unit: "{packet}".into(),
            value: Value::U64(v),
            attributes: attrs(&[
                (ATTR_DEVICE, dev),
                (ATTR_PORT, "1"),
                (ATTR_DIRECTION, "transmit"),
            ])
            .into(),
            source: "hw_counters/sent_pkts".into(),
            kind: rocewatch_plugin_api::MetricKind::Counter,
        };
        let m = PortMoves::from_samples(
            &[sample("rxe0", 10), sample("rxe1", 0)],
            &[sample("rxe0", 25), sample("rxe1", 99)],
            "rxe0",
            1,
            None,
        );
        assert_eq!(m.tx_packets, Some(15));
        assert_eq!(thousands(1234567), "1 234 567");
        assert_eq!(gbps(81.4e9), "81");
    }

    /// A counter that went back during the test (cleared, driver reset) moved by an
    /// unknown amount: it adds nothing (it used to count its whole new value, or a 32-bit
    /// wrap's worth), and neither does one resting at its top.
    #[test]
    fn a_reset_or_saturated_counter_adds_nothing_to_a_test() {
        use rocewatch_plugin_api::Value;
        let sample = |name: &str, source: &str, v: u64| Sample {
            name: name.to_string().into(),
            unit: "{packet}".into(),
            value: Value::U64(v),
            attributes: attrs(&[(ATTR_DEVICE, "mlx5_0"), (ATTR_PORT, "1")]).into(),
            source: source.into(),
            kind: rocewatch_plugin_api::MetricKind::Counter,
        };
        let m = PortMoves::from_samples(
            &[
                sample(
                    "rdma.port.out_of_sequence",
                    "hw_counters/out_of_sequence",
                    3_000_000_000,
                ),
                sample(
                    "rdma.port.transmit.discards",
                    "counters/port_xmit_discards",
                    65_535,
                ),
                sample("rdma.port.out_of_buffer", "hw_counters/out_of_buffer", 5),
            ],
            &[
                sample(
                    "rdma.port.out_of_sequence",
                    "hw_counters/out_of_sequence",
                    100,
                ),
                sample(
                    "rdma.port.transmit.discards",
                    "counters/port_xmit_discards",
                    65_535,
                ),
                sample("rdma.port.out_of_buffer", "hw_counters/out_of_buffer", 9),
            ],
            "mlx5_0",
            1,
            None,
        );
        assert_eq!(
            m.out_of_sequence, None,
            "a reset: unknown, not 100 nor 1.29e9"
        );
        assert_eq!(m.discards, None, "saturated: unknown");
        assert_eq!(m.out_of_buffer, Some(4));
        let mut s = PortSnapshot::default();
        s.before
            .insert("counters/port_rcv_data".into(), 4_000_000_000);
        s.after.insert("counters/port_rcv_data".into(), 10);
        s.before
            .insert("counters/port_xmit_packets".into(), 4_294_967_000);
        s.after
            .insert("counters/port_xmit_packets".into(), 4_294_967_295);
        let m = PortMoves::from_snapshot(&s);
        assert_eq!((m.rx_bytes, m.tx_packets), (None, None), "{m:?}");
    }
}
