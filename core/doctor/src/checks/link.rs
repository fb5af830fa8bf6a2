//! The link's own history per netdev, from the two collections a window apart that the
//! counters topic also reads (counters-ethtool's link series, docs/OPTICS.md): why the
//! link is down (ethtool's extended state, in words), carrier changes since the netdev
//! appeared, the flaps over the window (`rocewatch_sysfs::verdict::flap`: mlx5's
//! `link_down_events_phy` where present, else carrier changes, two a flap; one flap
//! warns, the default rule's two fail), the FEC mode, the codewords FEC
//! corrected and could not correct over the window, and the pre-FEC bit error rate
//! (mlx5's corrected bits over the bits received). A netdev with none of these series
//! (virtio-net, a fixture tree) is skipped: absent readings are never a pass.

use std::collections::BTreeMap;

use rocewatch_metrics::counter::counter_move_from;
use rocewatch_metrics::names;
use rocewatch_plugin_api::{Inventory, Sample, ScrapeResult};
use rocewatch_sysfs::verdict::{judge_flaps, Weight};

use super::fec_margin::{ber_limit, lane_gbps, BerLimit};
use crate::check::{check, Check, Status};
use crate::shell::one_line;

const NETDEV: &str = rocewatch_metrics::ATTR_NETDEV;

/// A RoCE netdev and its port's lane rate in Gb/s (`rate` over its width), when known.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LinkPort {
    pub netdev: String,
    pub lane_gbps: Option<f64>,
}

/// The netdevs of the RoCE ports, in inventory order, each with its first port's lane
/// rate.
pub(crate) fn link_ports(inv: &Inventory) -> Vec<LinkPort> {
    let mut out: Vec<LinkPort> = Vec::new();
    for p in inv.devices.iter().flat_map(|d| &d.ports) {
        if let Some(nd) = &p.netdev {
            if !out.iter().any(|o| &o.netdev == nd) {
                out.push(LinkPort {
                    netdev: nd.clone(),
                    lane_gbps: p.rate.as_deref().and_then(lane_gbps),
                });
            }
        }
    }
    out
}

/// A series of `name` on `netdev` with no other attribute than the port's (no lane, no
/// histogram bin): the port's total.
fn total<'a>(r: &'a ScrapeResult, name: &str, netdev: &str) -> Option<&'a Sample> {
    r.samples.iter().find(|s| {
        s.name == name
            && s.attributes.get(NETDEV) == Some(netdev)
            && s.attributes.get(rocewatch_metrics::ATTR_LANE).is_none()
    })
}

/// How much counter `name` of `netdev` went up over the window; `None` when it is absent
/// from either collection, or went back (a reset) or rests at its top.
fn increase(first: &ScrapeResult, second: &ScrapeResult, name: &str, netdev: &str) -> Option<f64> {
    let (a, b) = (total(first, name, netdev)?, total(second, name, netdev)?);
    counter_move_from(&b.source, a.value.as_f64(), b.value.as_f64(), None).increase()
}

/// The netdevs that have any link series in the second collection.
fn netdevs(second: &ScrapeResult) -> Vec<String> {
    let mut out: Vec<String> = second
        .samples
        .iter()
        .filter(|s| s.name.starts_with("rdma.link.") && s.name != names::LINK_PAUSE_FRAMES)
        .filter_map(|s| s.attributes.get(NETDEV).map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What the `link` check holds a link to, from the `-c` file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limits {
    /// `[doctor] pre_fec_ber_warn`, when set (else the figure of the port's FEC,
    /// `fec_margin`).
    pub pre_fec_ber_warn: Option<f64>,
    /// `[health] max_flaps`: the flaps in the window that fail (default
    /// `DEFAULT_MAX_FLAPS`, the default rule `link-flapping`'s two).
    pub max_flaps: u64,
}

/// The link checks of every RoCE netdev of `ports`.
pub(crate) fn link_checks(
    ports: &[LinkPort],
    first: &ScrapeResult,
    second: &ScrapeResult,
    window: std::time::Duration,
    limits: &Limits,
) -> Vec<Check> {
    if ports.is_empty() {
        return vec![check(
            "link",
            "",
            Status::Skip,
            "no RoCE port with a netdev: no link to read",
            None,
        )];
    }
    let with_series = netdevs(second);
    let mut out = Vec::new();
    for port in ports {
        let nd = &port.netdev;
        if !with_series.contains(nd) {
            out.push(check(
                "link",
                nd,
                Status::Skip,
                "no link readings (virtio/fixture): no carrier, FEC or PHY counters for this netdev",
                None,
            ));
            continue;
        }
        let window = Window {
            first,
            second,
            length: window,
        };
        out.push(one_link(port, &window, limits));
    }
    out
}

/// `status` made `s` where `s` is worse.
fn worse(status: &mut Status, s: Status) {
    let rank = |s: Status| match s {
        Status::Fail => 3,
        Status::Warn => 2,
        Status::Pass => 1,
        _ => 0,
    };
    if rank(s) > rank(*status) {
        *status = s;
    }
}

/// The two collections a window apart.
struct Window<'a> {
    first: &'a ScrapeResult,
    second: &'a ScrapeResult,
    length: std::time::Duration,
}

impl Window<'_> {
    fn increase(&self, name: &str, netdev: &str) -> Option<f64> {
        increase(self.first, self.second, name, netdev)
    }
}

/// What one netdev's check has found so far.
struct Finding {
    said: Vec<String>,
    status: Status,
    /// The fixes, in the order they are said.
    fixes: BTreeMap<u8, String>,
    /// Whether the window gave anything to judge by: only then can it pass.
    judged: bool,
}

impl Finding {
    /// Say `what`, at `status` or worse, with `fix` in place `order`.
    fn found(&mut self, what: String, status: Status, fix: Option<(u8, String)>) {
        self.said.push(what);
        worse(&mut self.status, status);
        if let Some((order, fix)) = fix {
            self.fixes.insert(order, fix);
        }
    }
}

/// The flap verdict over the window (`rocewatch_sysfs::verdict::flap`, the one `health`
/// gives), said and weighed: one flap warns, `max_flaps` (`[health] max_flaps`, default the
/// rule `link-flapping`'s two) fail.
fn flaps(nd: &str, w: &Window, max_flaps: u64, f: &mut Finding) {
    // Counters are whole numbers: the increase is one.
    let moved = |name| w.increase(name, nd).map(|d| d as u64);
    let v = judge_flaps(
        moved(names::LINK_CARRIER_CHANGES),
        moved(names::LINK_DOWN_EVENTS),
        w.length,
        max_flaps,
    );
    let status = match v.weight() {
        Weight::CannotTell | Weight::NotApplicable => return,
        Weight::Fine => Status::Info,
        Weight::Note => Status::Warn,
        Weight::Fault => Status::Fail,
    };
    f.judged = true;
    let fix = (status != Status::Info).then(|| (1, "the link flaps: reseat or replace the cable or optic, check the switch port's log for the same flaps".to_string()));
    f.found(v.evidence, status, fix);
}

/// The pre-FEC BER over the window against what the port's FEC carries (`fec_margin`),
/// or why it cannot be judged: FEC off.
fn pre_fec_ber(
    port: &LinkPort,
    mode: Option<&str>,
    w: &Window,
    ber_warn: Option<f64>,
    f: &mut Finding,
) {
    let nd = port.netdev.as_str();
    let warn = match ber_limit(mode, port.lane_gbps, ber_warn) {
        BerLimit::NoFec { why, warns } => {
            let status = if warns { Status::Warn } else { Status::Info };
            let fix = warns.then(|| (3, "turn FEC on at both ends (ethtool --set-fec IF encoding rs, the same on the switch port), or check the CRC errors the link has instead".to_string()));
            f.found(why, status, fix);
            return;
        }
        BerLimit::Warn { warn, why } => (warn, why),
    };
    let bits = w.increase(names::LINK_RECEIVED_BITS, nd);
    let errs = w.increase(names::LINK_CORRECTED_BITS, nd);
    let (Some(b), Some(e)) = (bits, errs) else {
        return;
    };
    if b <= 0.0 {
        return;
    }
    f.judged = true;
    let ber = e / b;
    let (limit, why) = warn;
    if ber > limit {
        f.found(
            format!("pre-FEC BER {ber:.1e} over the window, above {limit:.1e} ({why})"),
            Status::Warn,
            Some((
                3,
                "little FEC margin is left: clean or replace the optic or cable, check the far end"
                    .into(),
            )),
        );
    } else {
        f.said.push(format!(
            "pre-FEC BER {ber:.1e} over the window (warns above {limit:.1e}: {why})"
        ));
    }
}

/// What the window says of one netdev's link.
fn one_link(port: &LinkPort, w: &Window, limits: &Limits) -> Check {
    let nd = port.netdev.as_str();
    let mut f = Finding {
        said: Vec::new(),
        status: Status::Info,
        fixes: BTreeMap::new(),
        judged: false,
    };
    if let Some(down) = total(w.second, names::LINK_DOWN_REASON, nd) {
        let reason = down
            .attributes
            .get(rocewatch_metrics::ATTR_DOWN_REASON)
            .unwrap_or("");
        let detail = down
            .attributes
            .get(rocewatch_metrics::ATTR_DOWN_DETAIL)
            .unwrap_or("");
        let why = if detail.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}, {detail}")
        };
        f.found(
            format!("link down: {}", one_line(&why)),
            Status::Fail,
            Some((0, "check the cable and the far end: the switch port up, the same speed and FEC on both ends; reseat the optic or cable".into())),
        );
    }
    if let Some(c) = total(w.second, names::LINK_CARRIER_CHANGES, nd) {
        let since = c.value.as_f64();
        f.said
            .push(format!("{since} carrier changes since the netdev appeared"));
    }
    flaps(nd, w, limits.max_flaps, &mut f);
    let mode = total(w.second, names::LINK_FEC_MODE, nd).map(|m| {
        m.attributes
            .get(rocewatch_metrics::ATTR_FEC_MODE)
            .unwrap_or("?")
    });
    if let Some(m) = mode {
        f.said.push(format!("FEC {}", one_line(m)));
    }
    if let Some(c) = w.increase(names::LINK_FEC_CORRECTED_BLOCKS, nd) {
        f.said
            .push(format!("{c} codewords corrected over the window"));
    }
    if let Some(u) = w.increase(names::LINK_FEC_UNCORRECTABLE_BLOCKS, nd) {
        f.judged = true;
        let fix = (u > 0.0).then(|| (2, "FEC loses codewords: clean the connectors, reseat the optic; replace the optic or cable if it persists, and check the far end's".to_string()));
        let status = if u > 0.0 { Status::Warn } else { Status::Info };
        f.found(format!("{u} uncorrectable"), status, fix);
    }
    pre_fec_ber(port, mode, w, limits.pre_fec_ber_warn, &mut f);
    if f.status == Status::Info && f.judged {
        f.status = Status::Pass;
    }
    let fix = (!f.fixes.is_empty()).then(|| f.fixes.into_values().collect::<Vec<_>>().join("; "));
    check("link", nd, f.status, f.said.join("; "), fix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_plugin_api::{Attributes, MetricKind, Value};
    use std::time::Duration;

    fn s(name: &'static str, nd: &str, extra: &[(&str, &str)], v: u64) -> Sample {
        let mut a: std::collections::BTreeMap<String, String> =
            [(NETDEV.to_string(), nd.to_string())].into();
        for (k, x) in extra {
            a.insert(k.to_string(), x.to_string());
        }
        Sample {
            name: name.into(),
            unit: "1".into(),
            value: Value::U64(v),
            attributes: Attributes::new(a.into()),
            source: "counters-ethtool:test".into(),
            kind: MetricKind::Counter,
        }
    }

    /// Two collections of eth0: carrier changes, FEC codewords and PHY bits, before and
    /// after the window.
    fn window(
        carrier: (u64, u64),
        uncorr: (u64, u64),
        bits: (u64, u64),
        corr_bits: (u64, u64),
    ) -> (ScrapeResult, ScrapeResult) {
        let at = |i: usize| {
            let pick = |p: (u64, u64)| if i == 0 { p.0 } else { p.1 };
            ScrapeResult {
                samples: vec![
                    s(names::LINK_CARRIER_CHANGES, "eth0", &[], pick(carrier)),
                    s(
                        names::LINK_FEC_MODE,
                        "eth0",
                        &[(rocewatch_metrics::ATTR_FEC_MODE, "RS")],
                        1,
                    ),
                    s(
                        names::LINK_FEC_CORRECTED_BLOCKS,
                        "eth0",
                        &[],
                        pick(corr_bits) / 3,
                    ),
                    s(
                        names::LINK_FEC_UNCORRECTABLE_BLOCKS,
                        "eth0",
                        &[],
                        pick(uncorr),
                    ),
                    s(
                        names::LINK_FEC_UNCORRECTABLE_BLOCKS,
                        "eth0",
                        &[(rocewatch_metrics::ATTR_LANE, "0")],
                        999,
                    ),
                    s(names::LINK_RECEIVED_BITS, "eth0", &[], pick(bits)),
                    s(names::LINK_CORRECTED_BITS, "eth0", &[], pick(corr_bits)),
                ],
                errors: vec![],
            }
        };
        (at(0), at(1))
    }

    fn one(first: &ScrapeResult, second: &ScrapeResult) -> Check {
        on_lanes(first, second, None, None)
    }

    /// eth0's check with its port's lane rate and `[doctor] pre_fec_ber_warn`.
    fn on_lanes(
        first: &ScrapeResult,
        second: &ScrapeResult,
        lane_gbps: Option<f64>,
        ber_warn: Option<f64>,
    ) -> Check {
        let max_flaps = rocewatch_sysfs::verdict::DEFAULT_MAX_FLAPS;
        checked(first, second, lane_gbps, ber_warn, max_flaps)
    }

    /// eth0's check with its port's lane rate and both limits.
    fn checked(
        first: &ScrapeResult,
        second: &ScrapeResult,
        lane_gbps: Option<f64>,
        pre_fec_ber_warn: Option<f64>,
        max_flaps: u64,
    ) -> Check {
        let port = LinkPort {
            netdev: "eth0".into(),
            lane_gbps,
        };
        let limits = Limits {
            pre_fec_ber_warn,
            max_flaps,
        };
        let mut c = link_checks(&[port], first, second, Duration::from_secs(10), &limits);
        assert_eq!(c.len(), 1, "{c:?}");
        c.remove(0)
    }

    /// `b` with eth0's FEC mode `mode`.
    fn with_mode(mut b: ScrapeResult, mode: &str) -> ScrapeResult {
        for x in &mut b.samples {
            if x.name == names::LINK_FEC_MODE {
                *x = s(
                    names::LINK_FEC_MODE,
                    "eth0",
                    &[(rocewatch_metrics::ATTR_FEC_MODE, mode)],
                    1,
                );
            }
        }
        b
    }

    /// A quiet window of eth0 whose FEC mode is `mode` and whose pre-FEC BER is 1e-5.
    fn ber_1e5_with(mode: &str) -> (ScrapeResult, ScrapeResult) {
        let (a, b) = window((4, 4), (10, 10), (0, 1_000_000_000), (0, 10_000));
        (a, with_mode(b, mode))
    }

    #[test]
    fn the_pre_fec_ber_is_held_to_what_the_ports_fec_carries() {
        // 1e-5 is past RS(528,514)'s margin on 25 Gb/s lanes, within RS(544,514)'s on
        // 50 Gb/s (PAM4) lanes.
        let (a, b) = ber_1e5_with("RS");
        let c = on_lanes(&a, &b, Some(25.0), None);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence.contains("pre-FEC BER 1.0e-5 over the window, above 5.0e-6 (a tenth of the 5.0e-5 RS(528,514) carries (25 Gb/s lanes))"),
            "{c:?}"
        );
        assert!(c.fix.unwrap().contains("little FEC margin is left"));
        let c = on_lanes(&a, &b, Some(50.0), None);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.evidence.contains("pre-FEC BER 1.0e-5 over the window (warns above 2.4e-5: a tenth of the 2.4e-4 RS(544,514) carries (50 Gb/s lanes))"),
            "{c:?}"
        );
        // The operator's figure, from the -c file, for every FEC.
        let c = on_lanes(&a, &b, Some(50.0), Some(5e-6));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence
                .contains("above 5.0e-6 ([doctor] pre_fec_ber_warn)"),
            "{c:?}"
        );
        // BASE-R carries far less.
        let (a, b) = ber_1e5_with("BaseR");
        assert_eq!(on_lanes(&a, &b, Some(25.0), None).status, Status::Warn);
    }

    #[test]
    fn no_fec_on_fast_lanes_is_never_a_pass_on_its_error_rate() {
        // FEC off: mlx5 counts no corrected bits, a BER of 0 that says nothing.
        let (a, b) = window((4, 4), (10, 10), (0, 1_000_000_000), (0, 0));
        let b = with_mode(b, "Off");
        let c = on_lanes(&a, &b, Some(50.0), None);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence
                .contains("no FEC on 50 Gb/s lanes: 802.3 runs every PAM4 lane with RS(544,514)"),
            "{c:?}"
        );
        assert!(!c.evidence.contains("pre-FEC BER"), "{c:?}");
        assert!(c.fix.unwrap().contains("ethtool --set-fec"));
        assert_eq!(on_lanes(&a, &b, Some(25.0), None).status, Status::Warn);
        // 10 Gb/s lanes run without FEC: said, not judged, the rest passes.
        let c = on_lanes(&a, &b, Some(10.0), None);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(c.evidence.contains("no FEC (10 Gb/s lanes)"), "{c:?}");
    }

    #[test]
    fn ports_carry_their_lane_rate() {
        use rocewatch_plugin_api::{Device, Port};
        let port = |n: u32, nd: &str, rate: Option<&str>| Port {
            port: n,
            netdev: Some(nd.into()),
            rate: rate.map(str::to_string),
            ..Default::default()
        };
        let inv = Inventory {
            devices: vec![Device {
                name: "mlx5_0".into(),
                ports: vec![
                    port(1, "eth0", Some("200 Gb/sec (4X HDR)")),
                    port(2, "eth1", None),
                    port(3, "eth0", Some("100 Gb/sec (4X EDR)")),
                ],
                ..Default::default()
            }],
        };
        assert_eq!(
            link_ports(&inv),
            [
                LinkPort {
                    netdev: "eth0".into(),
                    lane_gbps: Some(50.0)
                },
                LinkPort {
                    netdev: "eth1".into(),
                    lane_gbps: None
                },
            ]
        );
    }

    #[test]
    fn a_quiet_link_passes_with_what_was_read() {
        let (a, b) = window((4, 4), (10, 10), (0, 1_000_000_000_000), (0, 100_000));
        let c = one(&a, &b);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.evidence
                .contains("4 carrier changes since the netdev appeared"),
            "{c:?}"
        );
        assert!(c.evidence.contains("FEC RS"), "{c:?}");
        assert!(c.evidence.contains("0 uncorrectable"), "{c:?}");
        assert!(c.evidence.contains("pre-FEC BER 1.0e-7"), "{c:?}");
    }

    /// The quiet window of [`window`] with eth0's carrier changes and, where given, its
    /// `link_down_events_phy` before and after.
    fn flapping(carrier: (u64, u64), phy: Option<(u64, u64)>) -> Check {
        flapping_to(carrier, phy, rocewatch_sysfs::verdict::DEFAULT_MAX_FLAPS)
    }

    /// [`flapping`], failing at `max_flaps` (`[health] max_flaps`).
    fn flapping_to(carrier: (u64, u64), phy: Option<(u64, u64)>, max_flaps: u64) -> Check {
        let (mut a, mut b) = window(carrier, (10, 10), (0, 1_000_000), (0, 0));
        if let Some((x, y)) = phy {
            a.samples.push(s(names::LINK_DOWN_EVENTS, "eth0", &[], x));
            b.samples.push(s(names::LINK_DOWN_EVENTS, "eth0", &[], y));
        }
        checked(&a, &b, None, None, max_flaps)
    }

    #[test]
    fn one_flap_in_the_window_warns_and_the_rules_two_fail() {
        let c = flapping((4, 6), None);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence.contains(
                "2 carrier changes in the 10s window (carrier_changes: 1 flap, a flap is a down and an up; the count may include administrative toggles"
            ),
            "{c:?}"
        );
        assert!(c.fix.unwrap().contains("the link flaps"));
        let c = flapping((4, 8), None);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.evidence.contains("flapping: 2 flaps is the limit"),
            "{c:?}"
        );
    }

    #[test]
    fn health_max_flaps_is_the_failing_count() {
        // [health] max_flaps = 3: two PHY downs in the window warn, three fail.
        let at = |downs| flapping_to((4, 4), Some((0, downs)), 3);
        assert_eq!(at(2).status, Status::Warn, "{:?}", at(2));
        let c = at(3);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.evidence.contains("flapping: 3 flaps is the limit"),
            "{c:?}"
        );
    }

    #[test]
    fn the_phy_counter_outweighs_an_administrators_toggle() {
        // ip link set down/up twice: four carrier changes, the PHY never went down.
        let c = flapping((4, 8), Some((3, 3)));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.evidence.contains("0 link down events in the 10s window (link_down_events_phy); 4 carrier changes beyond them"),
            "{c:?}"
        );
        assert!(c.fix.is_none(), "{c:?}");
        // The PHY's own down, whatever the carrier did.
        let c = flapping((4, 4), Some((3, 4)));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence.contains("1 link down event in the 10s window"),
            "{c:?}"
        );
    }

    #[test]
    fn uncorrectable_codewords_and_a_high_pre_fec_ber_warn() {
        let (a, b) = window((4, 4), (10, 12), (0, 1_000_000_000), (0, 10_000));
        let c = one(&a, &b);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.evidence.contains("2 uncorrectable"), "{c:?}");
        assert!(
            c.evidence
                .contains("pre-FEC BER 1.0e-5 over the window, above 5.0e-6"),
            "{c:?}"
        );
        let fix = c.fix.unwrap();
        assert!(
            fix.contains("FEC loses codewords") && fix.contains("little FEC margin"),
            "{fix}"
        );
    }

    #[test]
    fn a_down_link_says_why() {
        let (a, mut b) = window((4, 5), (10, 10), (0, 0), (0, 0));
        b.samples.push(s(
            names::LINK_DOWN_REASON,
            "eth0",
            &[
                (rocewatch_metrics::ATTR_DOWN_REASON, "cable issue"),
                (rocewatch_metrics::ATTR_DOWN_DETAIL, "unsupported cable"),
            ],
            1,
        ));
        let c = one(&a, &b);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.evidence
                .starts_with("link down: cable issue, unsupported cable"),
            "{c:?}"
        );
    }

    #[test]
    fn a_netdev_without_link_series_is_skipped_never_passed() {
        let empty = ScrapeResult::default();
        let c = one(&empty, &empty);
        assert_eq!(c.status, Status::Skip, "{c:?}");
        assert!(
            c.evidence.starts_with("no link readings (virtio/fixture)"),
            "{c:?}"
        );
        // Only the since-boot count, no window: said, not passed.
        let (_, b) = window((4, 4), (0, 0), (0, 0), (0, 0));
        let only: Vec<Sample> = b
            .samples
            .into_iter()
            .filter(|x| x.name == names::LINK_CARRIER_CHANGES)
            .collect();
        let second = ScrapeResult {
            samples: only,
            errors: vec![],
        };
        assert_eq!(one(&empty, &second).status, Status::Info);
    }
}
