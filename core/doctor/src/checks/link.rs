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
use rocewatch_plugin_api::{Sample, ScrapeResult};
use rocewatch_sysfs::verdict::{judge_flaps, Weight, DEFAULT_MAX_FLAPS};

use crate::check::{check, Check, Status};
use crate::shell::one_line;

const NETDEV: &str = rocewatch_metrics::ATTR_NETDEV;

/// Pre-FEC bit error rate above which the link is said to be short of margin. IEEE 802.3
/// clause 91.5.3.3 marks errors downstream past 417 symbol errors in 8192 codewords for
/// RS(528,514), about 9.6e-6 per bit at one bit per symbol error (6380, about 1.4e-4,
/// for RS(544,514)); the series carry no RS variant, so the lower figure, halved, as the
/// default rule `pre-fec-ber-high` does.
pub(crate) const PRE_FEC_BER_WARN: f64 = 5e-6;

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

/// The link checks of every netdev of `roce_netdevs`.
pub(crate) fn link_checks(
    roce_netdevs: &[String],
    first: &ScrapeResult,
    second: &ScrapeResult,
    window: std::time::Duration,
) -> Vec<Check> {
    if roce_netdevs.is_empty() {
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
    for nd in roce_netdevs {
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
        out.push(one_link(nd, first, second, window));
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

/// The flap verdict over the window (`rocewatch_sysfs::verdict::flap`, the one `health`
/// gives), said and weighed: one flap warns, [`DEFAULT_MAX_FLAPS`] (the default rule
/// `link-flapping`'s two) fail. `None` when it could not judge, else whether it flapped.
fn flaps(
    nd: &str,
    first: &ScrapeResult,
    second: &ScrapeResult,
    window: std::time::Duration,
    said: &mut Vec<String>,
    status: &mut Status,
) -> Option<bool> {
    // Counters are whole numbers: the increase is one.
    let moved = |name| increase(first, second, name, nd).map(|d| d as u64);
    let v = judge_flaps(
        moved(names::LINK_CARRIER_CHANGES),
        moved(names::LINK_DOWN_EVENTS),
        window,
        DEFAULT_MAX_FLAPS,
    );
    match v.weight() {
        Weight::CannotTell | Weight::NotApplicable => return None,
        Weight::Fine => {}
        Weight::Note => worse(status, Status::Warn),
        Weight::Fault => worse(status, Status::Fail),
    }
    let flapped = v.weight() != Weight::Fine;
    said.push(v.evidence);
    Some(flapped)
}

/// What the window says of one netdev's link.
fn one_link(
    nd: &str,
    first: &ScrapeResult,
    second: &ScrapeResult,
    window: std::time::Duration,
) -> Check {
    let mut said = Vec::new();
    let mut status = Status::Info;
    let mut fixes: BTreeMap<u8, String> = BTreeMap::new();
    // Whether the window gave anything to judge by: only then can it pass.
    let mut judged = false;
    if let Some(down) = total(second, names::LINK_DOWN_REASON, nd) {
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
        said.push(format!("link down: {}", one_line(&why)));
        worse(&mut status, Status::Fail);
        fixes.insert(0, "check the cable and the far end: the switch port up, the same speed and FEC on both ends; reseat the optic or cable".into());
    }
    if let Some(c) = total(second, names::LINK_CARRIER_CHANGES, nd) {
        let since = c.value.as_f64();
        said.push(format!("{since} carrier changes since the netdev appeared"));
    }
    if let Some(flapped) = flaps(nd, first, second, window, &mut said, &mut status) {
        judged = true;
        if flapped {
            fixes.insert(1, "the link flaps: reseat or replace the cable or optic, check the switch port's log for the same flaps".into());
        }
    }
    if let Some(m) = total(second, names::LINK_FEC_MODE, nd) {
        let mode = m
            .attributes
            .get(rocewatch_metrics::ATTR_FEC_MODE)
            .unwrap_or("?");
        said.push(format!("FEC {}", one_line(mode)));
    }
    let corrected = increase(first, second, names::LINK_FEC_CORRECTED_BLOCKS, nd);
    let uncorrectable = increase(first, second, names::LINK_FEC_UNCORRECTABLE_BLOCKS, nd);
    if let Some(c) = corrected {
        said.push(format!("{c} codewords corrected over the window"));
    }
    if let Some(u) = uncorrectable {
        judged = true;
        said.push(format!("{u} uncorrectable"));
        if u > 0.0 {
            worse(&mut status, Status::Warn);
            fixes.insert(2, "FEC loses codewords: clean the connectors, reseat the optic; replace the optic or cable if it persists, and check the far end's".into());
        }
    }
    let bits = increase(first, second, names::LINK_RECEIVED_BITS, nd);
    let errs = increase(first, second, names::LINK_CORRECTED_BITS, nd);
    if let (Some(b), Some(e)) = (bits, errs) {
        if b > 0.0 {
            judged = true;
            let ber = e / b;
            said.push(format!("pre-FEC BER {ber:.1e} over the window"));
            if ber > PRE_FEC_BER_WARN {
                worse(&mut status, Status::Warn);
                fixes.insert(3, format!("the pre-FEC bit error rate is above {PRE_FEC_BER_WARN:.0e} (little FEC margin left): clean or replace the optic or cable, check the far end"));
            }
        }
    }
    if status == Status::Info && judged {
        status = Status::Pass;
    }
    let fix = (!fixes.is_empty()).then(|| fixes.into_values().collect::<Vec<_>>().join("; "));
    check("link", nd, status, said.join("; "), fix)
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
        let mut c = link_checks(&["eth0".into()], first, second, Duration::from_secs(10));
        assert_eq!(c.len(), 1, "{c:?}");
        c.remove(0)
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
        let (mut a, mut b) = window(carrier, (10, 10), (0, 1_000_000), (0, 0));
        if let Some((x, y)) = phy {
            a.samples.push(s(names::LINK_DOWN_EVENTS, "eth0", &[], x));
            b.samples.push(s(names::LINK_DOWN_EVENTS, "eth0", &[], y));
        }
        one(&a, &b)
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
        assert!(c.evidence.contains("pre-FEC BER 1.0e-5"), "{c:?}");
        let fix = c.fix.unwrap();
        assert!(
            fix.contains("FEC loses codewords") && fix.contains("above 5e-6"),
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
