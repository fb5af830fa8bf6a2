//! The verdict on whether a link flaps: `doctor` (topic `link`) and `health` judge the
//! same increases of the same two counters over their window by this one rule.
//!
//! Two counters say a link went down, and they do not count the same things:
//! - `carrier_changes` (`/sys/class/net/IF/carrier_changes`, net/core/net-sysfs.c) is
//!   `carrier_up_count + carrier_down_count`, raised by `netif_carrier_on()` /
//!   `netif_carrier_off()` (net/sched/sch_generic.c) whoever calls them. A driver calls
//!   them for a physical link change, but also when it closes or reconfigures the netdev:
//!   mlx5's `mlx5e_close_locked()` calls `netif_carrier_off()` and `mlx5e_open_locked()`
//!   turns it back on (drivers/net/ethernet/mellanox/mlx5/core/en_main.c), and so does
//!   `mlx5e_switch_priv_channels()` (`ethtool -L`/`-G`). So `ip link set IF down; ip link
//!   set IF up` raises it by two, as a real flap (a down and an up) does.
//! - mlx5's `link_down_events_phy` (`ethtool -S`, en_stats.c) is the firmware's physical
//!   layer counter `phys_layer_cntrs.link_down_events` of the PPCNT register: the times
//!   the port's operational state went down (Documentation/networking/device_drivers/
//!   ethernet/mellanox/mlx5/counters.rst: "may imply on port flapping"). It does not move
//!   for a channel reconfiguration. `mlx5e_close()` also sets the port's admin state
//!   down (`mlx5_set_port_admin_status()`, `mlx5e_modify_admin_state()` in newer
//!   kernels), so an `ip link set down` does take the physical link down: whether the
//!   firmware counts a down it was asked for, the driver source cannot say.
//!
//! So the PHY counter is preferred where the port has it; with `carrier_changes` alone a
//! flap is two changes (rounded up: one change in the window is a link that went down or
//! came back in it), and the evidence says the count may include administrative toggles.

use std::time::Duration;

use super::weight::Weight;

/// The flaps in a window at which a link is flapping: the default rule `link-flapping`
/// (configs/rules.toml) fires at two flaps in 10 minutes; doctor's window is shorter, so
/// two there is at least as bad.
pub const DEFAULT_MAX_FLAPS: u64 = 2;

/// Where a flap count comes from.
pub const SOURCE_PHY: &str = "link_down_events_phy";
pub const SOURCE_CARRIER: &str = "carrier_changes";

/// The verdict on a link's flaps over a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlapKind {
    /// No flap in the window.
    Steady,
    /// At least one flap, fewer than the limit: worth a warning, not a fault.
    Flapped,
    /// As many flaps as the limit or more.
    Flapping,
    /// Neither counter moved readably over the window (absent, or it went back).
    Unknown,
}

/// A link's flaps over a window, judged, with the evidence both commands print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlapVerdict {
    pub kind: FlapKind,
    /// Flaps in the window: link down events, or carrier changes halved (rounded up).
    pub flaps: Option<u64>,
    /// [`SOURCE_PHY`] or [`SOURCE_CARRIER`]: the counter the count comes from.
    pub source: Option<&'static str>,
    /// The limit the count was held to.
    pub max_flaps: u64,
    pub evidence: String,
}

/// `10s`, `10m`, `1.5s`: a window as the rules write it.
fn window_text(w: Duration) -> String {
    let s = w.as_secs_f64();
    if w.subsec_nanos() == 0 && w.as_secs() >= 60 && w.as_secs().is_multiple_of(60) {
        format!("{}m", w.as_secs() / 60)
    } else {
        format!("{s}s")
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Judge a link's flaps from how much `carrier_changes` and `phy_down_events` (mlx5's
/// `link_down_events_phy`) went up over `window` (`None`: absent from either reading, or
/// it went back). At `max_flaps` or more (at least 1) the link is flapping; the PHY
/// counter is preferred where present (module doc).
pub fn judge_flaps(
    carrier_changes: Option<u64>,
    phy_down_events: Option<u64>,
    window: Duration,
    max_flaps: u64,
) -> FlapVerdict {
    let max_flaps = max_flaps.max(1);
    let w = window_text(window);
    let (flaps, source, mut evidence) = match (phy_down_events, carrier_changes) {
        (Some(d), carrier) => {
            let mut e = format!(
                "{} in the {w} window ({SOURCE_PHY})",
                plural(d, "link down event", "link down events")
            );
            // Carrier changes beyond the PHY's downs and ups: the netdev was closed or
            // reconfigured, not the physical link.
            if let Some(c) = carrier.filter(|c| *c > d.saturating_mul(2)) {
                e.push_str(&format!(
                    "; {} beyond them: the netdev was taken down or reconfigured (ip link set down/up, ethtool -L/-G), not the physical link",
                    plural(c - d.saturating_mul(2), "carrier change", "carrier changes")
                ));
            }
            (d, SOURCE_PHY, e)
        }
        (None, Some(c)) => {
            let f = c.div_ceil(2);
            let mut e = format!(
                "{} in the {w} window ({SOURCE_CARRIER}",
                plural(c, "carrier change", "carrier changes")
            );
            if c > 0 {
                e.push_str(&format!(
                    ": {}, a flap is a down and an up; the count may include administrative toggles, ip link set down/up counts two)",
                    plural(f, "flap", "flaps")
                ));
            } else {
                e.push(')');
            }
            (f, SOURCE_CARRIER, e)
        }
        (None, None) => {
            return FlapVerdict {
                kind: FlapKind::Unknown,
                flaps: None,
                source: None,
                max_flaps,
                evidence: format!(
                    "no flap count over the {w} window: neither {SOURCE_PHY} nor {SOURCE_CARRIER} was read twice"
                ),
            };
        }
    };
    let kind = if flaps == 0 {
        FlapKind::Steady
    } else if flaps >= max_flaps {
        evidence.push_str(&format!(
            "; flapping: {} is the limit",
            plural(max_flaps, "flap", "flaps")
        ));
        FlapKind::Flapping
    } else {
        FlapKind::Flapped
    };
    FlapVerdict {
        kind,
        flaps: Some(flaps),
        source: Some(source),
        max_flaps,
        evidence,
    }
}

impl FlapVerdict {
    pub fn weight(&self) -> Weight {
        match self.kind {
            FlapKind::Steady => Weight::Fine,
            FlapKind::Flapped => Weight::Note,
            FlapKind::Flapping => Weight::Fault,
            FlapKind::Unknown => Weight::CannotTell,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(10);

    #[test]
    fn the_phy_counter_is_preferred_over_carrier_changes() {
        // An administrator's down/up: four carrier changes, no PHY down event.
        let v = judge_flaps(Some(4), Some(0), W, 2);
        assert_eq!(
            (v.kind, v.flaps, v.source),
            (FlapKind::Steady, Some(0), Some(SOURCE_PHY))
        );
        assert_eq!(
            v.evidence,
            "0 link down events in the 10s window (link_down_events_phy); 4 carrier changes beyond them: the netdev was taken down or reconfigured (ip link set down/up, ethtool -L/-G), not the physical link"
        );
        assert_eq!(v.weight(), Weight::Fine);
        // The PHY's own downs count, whatever carrier_changes says.
        let v = judge_flaps(Some(2), Some(3), W, 2);
        assert_eq!((v.kind, v.flaps), (FlapKind::Flapping, Some(3)));
        assert_eq!(
            v.evidence,
            "3 link down events in the 10s window (link_down_events_phy); flapping: 2 flaps is the limit"
        );
        assert_eq!(judge_flaps(None, Some(1), W, 2).kind, FlapKind::Flapped);
    }

    #[test]
    fn carrier_changes_alone_count_two_a_flap_and_say_they_may_be_toggles() {
        let v = judge_flaps(Some(4), None, Duration::from_secs(600), 2);
        assert_eq!(
            (v.kind, v.flaps, v.source),
            (FlapKind::Flapping, Some(2), Some(SOURCE_CARRIER))
        );
        assert_eq!(
            v.evidence,
            "4 carrier changes in the 10m window (carrier_changes: 2 flaps, a flap is a down and an up; the count may include administrative toggles, ip link set down/up counts two); flapping: 2 flaps is the limit"
        );
        // One change: the link went down (or came back) in the window, one flap.
        let v = judge_flaps(Some(1), None, W, 2);
        assert_eq!((v.kind, v.flaps), (FlapKind::Flapped, Some(1)));
        assert_eq!(v.weight(), Weight::Note);
        let v = judge_flaps(Some(0), None, W, 2);
        assert_eq!(
            (v.kind, v.evidence.as_str()),
            (
                FlapKind::Steady,
                "0 carrier changes in the 10s window (carrier_changes)"
            )
        );
    }

    #[test]
    fn nothing_read_is_unknown_and_a_zero_limit_is_one() {
        let v = judge_flaps(None, None, W, 2);
        assert_eq!(
            (v.kind, v.weight()),
            (FlapKind::Unknown, Weight::CannotTell)
        );
        assert!(v.evidence.starts_with("no flap count"), "{}", v.evidence);
        let v = judge_flaps(Some(2), None, W, 0);
        assert_eq!((v.kind, v.max_flaps), (FlapKind::Flapping, 1));
    }

    proptest::proptest! {
        /// Whatever the counts: flapping exactly at the limit or above, steady exactly at
        /// zero flaps, and the PHY's count wins whenever it is there.
        #[test]
        fn flapping_exactly_at_the_limit(c in proptest::option::of(0u64..1_000), d in proptest::option::of(0u64..1_000), max in 0u64..10) {
            let v = judge_flaps(c, d, W, max);
            let flaps = d.or(c.map(|c| c.div_ceil(2)));
            proptest::prop_assert_eq!(v.flaps, flaps);
            match flaps {
                None => proptest::prop_assert_eq!(v.kind, FlapKind::Unknown),
                Some(0) => proptest::prop_assert_eq!(v.kind, FlapKind::Steady),
                Some(f) if f >= max.max(1) => proptest::prop_assert_eq!(v.kind, FlapKind::Flapping),
                Some(_) => proptest::prop_assert_eq!(v.kind, FlapKind::Flapped),
            }
        }
    }
}
