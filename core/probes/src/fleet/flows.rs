//! Several flows per peer, each with its own UDP source port, rotated across rounds so
//! that a window sees most of the equal-cost paths between two racks.
//!
//! The kernel takes a RoCE v2 queue pair's UDP source port from the flow label of its
//! address vector where the driver uses it (rxe: `rdma_get_udp_sport`, the label's low 14
//! bits, the high 6 folded in, ORed with 0xC000; hardware drivers vary); switches hash
//! the 5-tuple, so the source port picks the path. A
//! flow's label is drawn from (this host, the peer, the path index, the rotation epoch),
//! below 2^14 and never 0, so its source port is `0xC000 | label`. Flows rotate at
//! staggered times (an offset per flow), so a round moves about `1 / rotation` of them.
//!
//! Coverage ([`coverage_probability`]): with `m` distinct source ports hashed uniformly
//! and independently onto `n` paths, the chance that at least `need` paths are hit is
//! exact by inclusion–exclusion. Four flows rotated every 16 s give at least 76 distinct
//! ports per peer in a 5-minute window: at least 15 of 16 paths (94 %) are covered with
//! probability above 0.99.

use rocewatch_fleet::pinglist::score;

/// Flows per peer at most.
pub const MAX_PATHS: u16 = 16;

/// The flow label of `path` from `host` to `peer` in rotation `epoch`: 1..=0x3fff.
pub fn flow_label(host: &str, peer: &str, path: u16, epoch: u64) -> u32 {
    let h = score(&[host, peer, &path.to_string(), &epoch.to_string()]);
    1 + (h % 0x3fff) as u32
}

/// The UDP source port a RoCE v2 device uses for `label` (the kernel's
/// `rdma_flow_label_to_udp_sport`).
pub fn udp_sport(label: u32) -> u16 {
    let lo = label & 0x3fff;
    let hi = label & 0xf_c000;
    ((lo ^ (hi >> 14)) | 0xc000) as u16
}

/// The rotation epoch of a flow at `now_s` seconds: each flow's epochs start at its own
/// offset within the rotation period, so rotations spread over the rounds. A zero
/// rotation never rotates.
pub fn epoch(host: &str, peer: &str, path: u16, now_s: u64, rotation_s: u64) -> u64 {
    epoch_at(now_s, offset(host, peer, path, rotation_s), rotation_s)
}

/// A flow's offset within the rotation period (0 for a zero rotation).
pub fn offset(host: &str, peer: &str, path: u16, rotation_s: u64) -> u64 {
    if rotation_s == 0 {
        return 0;
    }
    score(&[host, peer, &path.to_string(), "offset"]) % rotation_s
}

/// The epoch at `now_s` of a flow with `offset`.
pub fn epoch_at(now_s: u64, offset: u64, rotation_s: u64) -> u64 {
    (now_s + offset).checked_div(rotation_s).unwrap_or(0)
}

/// The least number of distinct source ports a flow set of `paths` flows rotated every
/// `rotation_s` gives one peer in a window of `window_s` (each flow rotates at least
/// `window / rotation` times in it, rounded down).
pub fn ports_per_window(paths: u16, window_s: u64, rotation_s: u64) -> u64 {
    let rotations = window_s.checked_div(rotation_s).unwrap_or(0);
    u64::from(paths) * (rotations + 1)
}

/// The probability that `m` distinct flows, each hashed uniformly and independently onto
/// one of `n` paths, hit at least `need` of them: Σ over k ≥ need of P(exactly k hit), with
/// P(exactly k) = C(n, k) Σ_j (-1)^j C(k, j) ((k - j) / n)^m.
pub fn coverage_probability(m: u64, n: u32, need: u32) -> f64 {
    let choose = |a: u32, b: u32| -> f64 {
        (0..b).fold(1.0, |acc, i| acc * f64::from(a - i) / f64::from(i + 1))
    };
    let m = i32::try_from(m).unwrap_or(i32::MAX);
    (need..=n)
        .map(|k| {
            let inner: f64 = (0..=k)
                .map(|j| {
                    let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
                    sign * choose(k, j) * (f64::from(k - j) / f64::from(n)).powi(m)
                })
                .sum();
            choose(n, k) * inner
        })
        .sum::<f64>()
        .clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_give_distinct_ports_in_the_rdma_range() {
        assert_eq!(udp_sport(1), 0xc001);
        assert_eq!(udp_sport(0x3fff), 0xffff);
        // The high six bits fold onto the low ones, as the kernel does.
        assert_eq!(udp_sport(0x4001), 0xc000);
        let mut ports = std::collections::HashSet::new();
        for epoch in 0..20 {
            for path in 0..4 {
                let l = flow_label("a", "10.0.0.2", path, epoch);
                assert!((1..=0x3fff).contains(&l), "{l}");
                assert_eq!(u32::from(udp_sport(l)), 0xc000 | l);
                ports.insert(udp_sport(l));
            }
        }
        assert!(ports.len() >= 78, "{} of 80 distinct", ports.len());
        assert_eq!(flow_label("a", "p", 1, 7), flow_label("a", "p", 1, 7));
    }

    #[test]
    fn rotations_are_staggered_and_every_flow_rotates_once_a_period() {
        let rotation = 16;
        // Of 400 flows, about 1/16 change epoch from one second to the next.
        let moved = (0..100u16)
            .flat_map(|p| (0..4).map(move |path| (format!("10.0.{p}.1"), path)))
            .filter(|(peer, path)| {
                epoch("a", peer, *path, 1000, rotation) != epoch("a", peer, *path, 1001, rotation)
            })
            .count();
        assert!((10..=45).contains(&moved), "{moved} of 400 moved");
        for s in [0, 5, 15] {
            assert_eq!(
                epoch("a", "p", 0, s + rotation, rotation),
                epoch("a", "p", 0, s, rotation) + 1
            );
        }
        assert_eq!(epoch("a", "p", 0, 12345, 0), 0);
    }

    #[test]
    fn coverage_of_sixteen_paths() {
        // One flow hits one path; 16 flows hit all 16 with probability 16!/16^16.
        assert!((coverage_probability(1, 16, 1) - 1.0).abs() < 1e-12);
        assert_eq!(coverage_probability(1, 16, 2), 0.0);
        let all16 = (1..=16).fold(1.0, |a, i| a * f64::from(i) / 16.0);
        assert!((coverage_probability(16, 16, 16) - all16).abs() < 1e-12);
        // Exactly one path hit by two flows: 1/16.
        assert!((1.0 - coverage_probability(2, 16, 2) - 1.0 / 16.0).abs() < 1e-12);
        // The defaults: 4 flows, rotated every 16 s, over a 5-minute window.
        let m = ports_per_window(4, 300, 16);
        assert_eq!(m, 76);
        let p = coverage_probability(m, 16, 15);
        assert!(p > 0.99, "{p}");
        // A single fixed flow per peer sees one path: 90 % of 16 is out of reach.
        assert_eq!(
            coverage_probability(ports_per_window(1, 300, 0), 16, 15),
            0.0
        );
        // And a 1-minute window of the defaults would not be enough.
        assert!(coverage_probability(ports_per_window(4, 60, 16), 16, 15) < 0.5);
    }
}
