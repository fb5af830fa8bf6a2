//! The verdict on a RoCE netdev's MTU. What RDMA traffic uses is the RoCE MTU, the IB MTU
//! the netdev's MTU leaves room for ([`rdma_mtu_for`], the kernel's `iboe_get_mtu()` in
//! include/rdma/ib_addr.h, which drivers report as the port's `active_mtu` and the RDMA CM
//! puts in the path it resolves): netdevs at 4200 and at 9000 both give 4096, and carry the
//! same RDMA packets. So the RoCE MTUs are compared; a difference of the IP MTUs alone is a
//! note.

use crate::parse::rdma_mtu_for;

use super::weight::Weight;

/// The verdict on one RoCE netdev's MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MtuKind {
    /// The RoCE MTU of the other RoCE netdevs, at least what the minimum gives, and the
    /// same IP MTU as theirs.
    Fine,
    /// The RoCE MTU is as it should be, but the IP MTU differs from another RoCE
    /// netdev's or is below the minimum: IP traffic sees it, RDMA does not.
    IpDiffers,
    /// A RoCE MTU below the one the configured minimum (an IP MTU) gives.
    BelowMinimum,
    /// A RoCE MTU below another RoCE netdev's.
    BelowOthers,
    /// An MTU too small for any RoCE MTU (the RoCE headers and 256 bytes do not fit):
    /// `iboe_get_mtu()` gives 0 and the RDMA CM refuses the route.
    NoRoceMtu,
    /// The netdev's `mtu` could not be read.
    Unreadable,
}

/// One RoCE netdev's MTU against the minimum and the other RoCE netdevs', with the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MtuVerdict {
    pub kind: MtuKind,
    pub netdev: String,
    /// Its MTU (`class/net/<netdev>/mtu`), an IP MTU.
    pub mtu: Option<u32>,
    /// The RoCE MTU it gives.
    pub roce_mtu: Option<u32>,
    /// The configured minimum (an IP MTU), when there is one.
    pub min_mtu: Option<u32>,
    /// The netdev the comparison is with: the one with the largest RoCE MTU (then IP MTU)
    /// for [`MtuKind::BelowOthers`], one with another IP MTU for [`MtuKind::IpDiffers`].
    pub other: Option<(String, u32)>,
}

/// `MTU 9000 (RoCE MTU 4096)`
fn shape(mtu: u32) -> String {
    match rdma_mtu_for(mtu) {
        Some(r) => format!("MTU {mtu} (RoCE MTU {r})"),
        None => format!("MTU {mtu} (no RoCE MTU)"),
    }
}

/// Judge each RoCE netdev's MTU (`(netdev, mtu)`, an unreadable MTU `None`) against
/// `min_mtu` (an IP MTU: the RoCE MTU it gives is the least allowed) and against the other
/// netdevs' RoCE MTUs. One verdict a netdev, in the order given.
pub fn judge_mtus(netdevs: &[(&str, Option<u32>)], min_mtu: Option<u32>) -> Vec<MtuVerdict> {
    let roce = |m: Option<u32>| m.and_then(rdma_mtu_for);
    // The largest RoCE MTU, then the largest IP MTU giving it: what the others are held to.
    let best = netdevs
        .iter()
        .filter_map(|(n, m)| Some((roce(*m)?, (*m)?, *n)))
        .max_by_key(|(r, m, _)| (*r, *m));
    let want = min_mtu.and_then(rdma_mtu_for);
    netdevs
        .iter()
        .map(|(netdev, mtu)| {
            let verdict = |kind, other: Option<(&str, u32)>| MtuVerdict {
                kind,
                netdev: netdev.to_string(),
                mtu: *mtu,
                roce_mtu: roce(*mtu),
                min_mtu,
                other: other.map(|(n, m)| (n.to_string(), m)),
            };
            let Some(m) = *mtu else {
                return verdict(MtuKind::Unreadable, None);
            };
            let Some(r) = rdma_mtu_for(m) else {
                return verdict(MtuKind::NoRoceMtu, None);
            };
            if want.is_some_and(|w| r < w) {
                return verdict(MtuKind::BelowMinimum, None);
            }
            if let Some((top, top_mtu, top_nd)) = best {
                if r < top {
                    return verdict(MtuKind::BelowOthers, Some((top_nd, top_mtu)));
                }
            }
            // Another netdev with the same RoCE MTU and another IP MTU (one with another
            // RoCE MTU has a verdict of its own).
            let ip_other = netdevs.iter().find_map(|(n, o)| {
                o.filter(|o| *o != m && rdma_mtu_for(*o) == Some(r))
                    .map(|o| (*n, o))
            });
            if min_mtu.is_some_and(|w| m < w) || ip_other.is_some() {
                return verdict(MtuKind::IpDiffers, ip_other);
            }
            verdict(MtuKind::Fine, None)
        })
        .collect()
}

impl MtuVerdict {
    pub fn weight(&self) -> Weight {
        match self.kind {
            MtuKind::Fine => Weight::Fine,
            MtuKind::IpDiffers => Weight::Note,
            MtuKind::BelowMinimum | MtuKind::BelowOthers | MtuKind::NoRoceMtu => Weight::Fault,
            MtuKind::Unreadable => Weight::CannotTell,
        }
    }

    /// `MTU 1500 (RoCE MTU 1024), below ens1f1np1's RoCE MTU 4096 (MTU 9000)`
    pub fn text(&self) -> String {
        let Some(m) = self.mtu else {
            return "MTU unreadable".into();
        };
        let now = shape(m);
        let min = self.min_mtu.unwrap_or_default();
        match (self.kind, &self.other) {
            (MtuKind::BelowMinimum, _) => format!(
                "{now}, below the RoCE MTU {} [health] min_mtu {min} gives",
                rdma_mtu_for(min).unwrap_or_default()
            ),
            (MtuKind::BelowOthers, Some((nd, o))) => format!(
                "{now}, below {nd}'s RoCE MTU {} (MTU {o})",
                rdma_mtu_for(*o).unwrap_or_default()
            ),
            (MtuKind::NoRoceMtu, _) => format!(
                "MTU {m}: too small for RoCE (its headers take 96 bytes, the least RoCE MTU is 256)"
            ),
            (MtuKind::IpDiffers, Some((nd, o))) => format!(
                "{now}; the IP MTU differs from {nd}'s {o} (the same RoCE MTU: RDMA is not affected)"
            ),
            (MtuKind::IpDiffers, None) => format!(
                "{now}; the IP MTU is below [health] min_mtu {min} (the RoCE MTU is the one it gives: RDMA is not affected)"
            ),
            _ => now,
        }
    }

    /// The MTU that brings the netdev up to the others or to the minimum, where it is a
    /// fault: the largest IP MTU among the others, or the minimum.
    pub fn wanted(&self) -> Option<u32> {
        match (self.kind, &self.other) {
            (MtuKind::BelowOthers, Some((_, o))) => Some(*o),
            (MtuKind::BelowMinimum, _) => self.min_mtu,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(netdevs: &[(&str, Option<u32>)], min: Option<u32>) -> Vec<(String, MtuKind)> {
        judge_mtus(netdevs, min)
            .into_iter()
            .map(|v| (v.netdev, v.kind))
            .collect()
    }

    #[test]
    fn netdevs_that_give_the_same_roce_mtu_are_no_fault() {
        let v = judge_mtus(&[("a", Some(4200)), ("b", Some(9000))], None);
        assert_eq!(
            v.iter().map(MtuVerdict::weight).collect::<Vec<_>>(),
            [Weight::Note, Weight::Note]
        );
        assert_eq!(
            v[0].text(),
            "MTU 4200 (RoCE MTU 4096); the IP MTU differs from b's 9000 (the same RoCE MTU: RDMA is not affected)"
        );
        let v = judge_mtus(&[("a", Some(9000)), ("b", Some(9000))], None);
        assert_eq!(v[1].weight(), Weight::Fine);
        assert_eq!(v[1].text(), "MTU 9000 (RoCE MTU 4096)");
    }

    #[test]
    fn a_roce_mtu_below_the_others_or_the_minimum_is_a_fault() {
        let v = judge_mtus(&[("a", Some(1500)), ("b", Some(9000)), ("c", None)], None);
        assert_eq!(v[0].kind, MtuKind::BelowOthers);
        // The netdev it is below is fine: its IP MTU differs from one whose RoCE MTU
        // does too, which has its own verdict.
        assert_eq!(v[1].kind, MtuKind::Fine);
        assert_eq!(v[0].weight(), Weight::Fault);
        assert_eq!(
            v[0].text(),
            "MTU 1500 (RoCE MTU 1024), below b's RoCE MTU 4096 (MTU 9000)"
        );
        assert_eq!(v[0].wanted(), Some(9000));
        assert_eq!(v[2].weight(), Weight::CannotTell);
        assert_eq!(v[2].text(), "MTU unreadable");
        // The minimum is an IP MTU, held as the RoCE MTU it gives.
        assert_eq!(
            kinds(&[("a", Some(4200)), ("b", Some(4200))], Some(9000)),
            [
                ("a".into(), MtuKind::IpDiffers),
                ("b".into(), MtuKind::IpDiffers)
            ]
        );
        let v = judge_mtus(&[("a", Some(4200))], Some(9000));
        assert_eq!(
            v[0].text(),
            "MTU 4200 (RoCE MTU 4096); the IP MTU is below [health] min_mtu 9000 (the RoCE MTU is the one it gives: RDMA is not affected)"
        );
        let v = judge_mtus(&[("a", Some(4000)), ("b", Some(4000))], Some(9000));
        assert_eq!(v[0].kind, MtuKind::BelowMinimum);
        assert_eq!(
            v[0].text(),
            "MTU 4000 (RoCE MTU 2048), below the RoCE MTU 4096 [health] min_mtu 9000 gives"
        );
        assert_eq!(v[0].wanted(), Some(9000));
        let v = judge_mtus(&[("a", Some(300))], None);
        assert_eq!(
            (v[0].kind, v[0].weight()),
            (MtuKind::NoRoceMtu, Weight::Fault)
        );
    }

    proptest::proptest! {
        /// Whatever the MTUs: a fault exactly when a netdev's RoCE MTU is below the
        /// minimum's or another's (or none), never for the IP MTU alone.
        #[test]
        fn a_fault_only_for_the_roce_mtu(
            mtus in proptest::collection::vec(proptest::option::of(68u32..10000), 1..5),
            min in proptest::option::of(68u32..10000),
        ) {
            let names: Vec<String> = (0..mtus.len()).map(|i| format!("n{i}")).collect();
            let netdevs: Vec<(&str, Option<u32>)> =
                names.iter().map(String::as_str).zip(mtus.iter().copied()).collect();
            let top = mtus.iter().filter_map(|m| m.and_then(rdma_mtu_for)).max();
            let want = min.and_then(rdma_mtu_for);
            for v in judge_mtus(&netdevs, min) {
                let r = v.roce_mtu;
                let fault = v.mtu.is_some()
                    && (r.is_none() || r < want || r < top);
                proptest::prop_assert_eq!(v.weight() == Weight::Fault, fault, "{:?}", v);
                proptest::prop_assert_eq!(v.mtu.is_none(), v.weight() == Weight::CannotTell);
            }
        }
    }
}
