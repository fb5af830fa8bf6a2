//! Rail matching: the NIC of rank k on one host is tested against the NIC of rank k on the
//! other (on a rail-optimized fabric rank k of every host hangs off the same switch
//! plane; a cross-rail test would measure the spine, not the NIC).
//!
//! A host's ranks are its rails, from the one rail map (`rocewatch_sysfs::railmap`, what
//! `rocewatch env`, `fleet topology` and doctor print): the fleet topology's row whose
//! address is on the port when `[fleet] topology` names one, else the ports in PCI address
//! order. Every port of the map counts, ACTIVE or not: a port that is down keeps its
//! rank and is reported down, untested; so does a rail of the topology no port carries
//! (a NIC gone from the bus), so that the ranks after it do not slide onto another rail.
//! (`env`'s `NCCL_IB_HCA` leaves down ports out; ranks here count them.)
//!
//! Hosts with different rail counts are tested on the ranks both have; the extra ranks
//! are reported untested against that partner.

use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::railmap::RailMap;
use serde::{Deserialize, Serialize};

use crate::schedule::{Phase, Schedule};

/// One RDMA port of a host, at its rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    /// `device:port`, as `rocewatch env` names it (`mlx5_0:1`).
    pub name: String,
    /// The netdev (RoCE), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    /// ACTIVE/LinkUp.
    pub up: bool,
    /// The port's line rate, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_rate_gbps: Option<f64>,
    /// The address its RoCE v2 GID carries (what a partner's test connects to), when
    /// known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
}

/// A host's NICs in rank order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRails {
    pub host: String,
    pub nics: Vec<Nic>,
}

/// One end of a test.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    pub host: String,
    pub nic: String,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.host, self.nic)
    }
}

/// One test of the schedule: `from` writes into `to` on rail `rank`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedTest {
    pub round: usize,
    pub phase: Phase,
    pub rank: usize,
    pub from: Endpoint,
    pub to: Endpoint,
}

/// A rank of a host that a pairing could not test, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Untested {
    pub round: usize,
    pub rank: usize,
    pub host: String,
    /// The NIC, when the host has that rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    pub peer: String,
    pub why: String,
}

/// Every test of a schedule, and what could not be tested.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Plan {
    pub tests: Vec<PlannedTest>,
    pub untested: Vec<Untested>,
    /// Hosts of the schedule of which no rails were given (their results, and the line
    /// that says their NICs, are missing).
    pub unknown_hosts: Vec<String>,
}

/// This host's NICs by rail, from its rail map (`rocewatch_sysfs::railmap`: the fleet
/// topology's row whose address is on the port, else PCI address order): rank k is rail
/// k. A rail of the topology that no port carries keeps its rank as a NIC that is not
/// ACTIVE, named for it (so the rails after it stay where they are); a port on no rail of
/// the topology is not tested.
pub fn rails_of(host: &str, inv: &Inventory, map: &RailMap) -> HostRails {
    let nics = (0..map.width())
        .map(|rail| match map.port_on(rail) {
            Some(p) => {
                let rate = inv
                    .devices
                    .iter()
                    .find(|d| d.name == p.device)
                    .and_then(|d| d.ports.iter().find(|x| x.port == p.port))
                    .and_then(|x| x.rate_bps);
                let addr = p.addrs.iter().find(|a| a.is_ipv4()).or(p.addrs.first());
                Nic {
                    name: p.name(),
                    netdev: p.netdev.clone(),
                    up: p.up,
                    line_rate_gbps: rate.map(|b| b as f64 / 1e9),
                    addr: addr.map(ToString::to_string),
                }
            }
            None => {
                let addr = map.missing.iter().find(|m| m.rail == rail).map(|m| m.addr);
                Nic {
                    name: match addr {
                        Some(a) => format!("rail {rail} (missing: no port has {a})"),
                        None => format!("rail {rail} (no row in the topology)"),
                    },
                    netdev: None,
                    up: false,
                    line_rate_gbps: None,
                    addr: addr.map(|a| a.to_string()),
                }
            }
        })
        .collect();
    HostRails {
        host: host.to_string(),
        nics,
    }
}

/// The ranks `a` and `b` test together (both have the rank and both ports are up), and
/// for each rank either lacks or has down, why (said once per host that cannot test it).
pub fn match_rails(a: &HostRails, b: &HostRails) -> (Vec<usize>, Vec<(String, usize, String)>) {
    let mut common = Vec::new();
    let mut untested = Vec::new();
    for rank in 0..a.nics.len().max(b.nics.len()) {
        match (a.nics.get(rank), b.nics.get(rank)) {
            (Some(x), Some(y)) if x.up && y.up => common.push(rank),
            (Some(x), Some(y)) => {
                for (h, n, other) in [(a, x, (b, y)), (b, y, (a, x))] {
                    let why = if !n.up {
                        format!("{} is not ACTIVE", n.name)
                    } else {
                        format!(
                            "{}'s {} at this rank is not ACTIVE",
                            other.0.host, other.1.name
                        )
                    };
                    untested.push((h.host.clone(), rank, why));
                }
            }
            (Some(_), None) => untested.push((
                a.host.clone(),
                rank,
                format!("{} has {} rails, no rank {rank}", b.host, b.nics.len()),
            )),
            (None, Some(_)) => untested.push((
                b.host.clone(),
                rank,
                format!("{} has {} rails, no rank {rank}", a.host, a.nics.len()),
            )),
            (None, None) => {}
        }
    }
    (common, untested)
}

/// Every test of `schedule` over the hosts' rails. A host missing from `rails` has no
/// NICs (every rank of its partners is untested against it) and is listed in
/// `unknown_hosts`.
pub fn plan(schedule: &Schedule, rails: &[HostRails]) -> Plan {
    let empty = |h: &str| HostRails {
        host: h.to_string(),
        nics: Vec::new(),
    };
    let find = |h: &str| {
        rails
            .iter()
            .find(|r| r.host == h)
            .cloned()
            .unwrap_or_else(|| empty(h))
    };
    let hosts = schedule.hosts();
    let mut out = Plan {
        unknown_hosts: hosts
            .iter()
            .filter(|h| !rails.iter().any(|r| &r.host == *h))
            .cloned()
            .collect(),
        ..Plan::default()
    };
    for round in 0..schedule.rounds() {
        for (i, j) in schedule.pairs(round) {
            let (a, b) = (find(&hosts[i]), find(&hosts[j]));
            let (common, untested) = match_rails(&a, &b);
            for (host, rank, why) in untested {
                let (me, peer) = if host == a.host { (&a, &b) } else { (&b, &a) };
                out.untested.push(Untested {
                    round,
                    rank,
                    host,
                    nic: me.nics.get(rank).map(|n| n.name.clone()),
                    peer: peer.host.clone(),
                    why,
                });
            }
            for phase in Phase::BOTH {
                let (from, to) = match phase {
                    Phase::Forward => (&a, &b),
                    Phase::Reverse => (&b, &a),
                };
                for &rank in &common {
                    out.tests.push(PlannedTest {
                        round,
                        phase,
                        rank,
                        from: Endpoint {
                            host: from.host.clone(),
                            nic: from.nics[rank].name.clone(),
                        },
                        to: Endpoint {
                            host: to.host.clone(),
                            nic: to.nics[rank].name.clone(),
                        },
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Mode;

    fn host(name: &str, nics: &[(&str, bool)]) -> HostRails {
        HostRails {
            host: name.into(),
            nics: nics
                .iter()
                .map(|(n, up)| Nic {
                    name: (*n).into(),
                    netdev: None,
                    up: *up,
                    line_rate_gbps: Some(400.0),
                    addr: None,
                })
                .collect(),
        }
    }

    #[test]
    fn rank_k_meets_rank_k_and_extra_ranks_are_untested() {
        let a = host(
            "a",
            &[("mlx5_0:1", true), ("mlx5_1:1", true), ("mlx5_2:1", true)],
        );
        let b = host("b", &[("mlx5_4:1", true), ("mlx5_5:1", true)]);
        let s = Schedule::new(vec!["a".into(), "b".into()], Mode::Default).unwrap();
        let p = plan(&s, &[a, b]);
        // Two common ranks, both directions.
        assert_eq!(p.tests.len(), 4);
        let t = &p.tests[1];
        assert_eq!((t.rank, t.phase), (1, Phase::Forward));
        assert_eq!(t.from.to_string(), "a/mlx5_1:1");
        assert_eq!(t.to.to_string(), "b/mlx5_5:1");
        let r = &p.tests[3];
        assert_eq!(
            (r.from.to_string(), r.to.to_string()),
            ("b/mlx5_5:1".into(), "a/mlx5_1:1".into())
        );
        assert_eq!(p.untested.len(), 1);
        let u = &p.untested[0];
        assert_eq!(
            (u.host.as_str(), u.rank, u.nic.as_deref()),
            ("a", 2, Some("mlx5_2:1"))
        );
        assert!(u.why.contains("b has 2 rails"), "{}", u.why);
    }

    #[test]
    fn a_down_port_keeps_its_rank_so_later_ranks_stay_on_their_rail() {
        let a = host(
            "a",
            &[("mlx5_0:1", true), ("mlx5_1:1", false), ("mlx5_2:1", true)],
        );
        let b = host(
            "b",
            &[("mlx5_0:1", true), ("mlx5_1:1", true), ("mlx5_2:1", true)],
        );
        let (common, untested) = match_rails(&a, &b);
        assert_eq!(common, vec![0, 2]);
        assert_eq!(untested.len(), 2, "{untested:?}");
        assert!(untested[0].2.contains("mlx5_1:1 is not ACTIVE"));
        assert!(untested[1].2.contains("a's mlx5_1:1"));
    }

    #[test]
    fn a_host_without_rails_leaves_its_partners_untested() {
        let a = host("a", &[("mlx5_0:1", true)]);
        let s = Schedule::new(vec!["a".into(), "b".into()], Mode::Default).unwrap();
        let p = plan(&s, &[a]);
        assert!(p.tests.is_empty());
        assert_eq!(p.untested.len(), 1);
        assert!(p.untested[0].why.contains("b has 0 rails"));
        assert_eq!(p.unknown_hosts, vec!["b".to_string()]);
    }
}
