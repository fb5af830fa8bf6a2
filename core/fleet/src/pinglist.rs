//! The pinglist each host derives alone, deterministic from the topology and its own
//! name, with no controller (the shape of Pingmesh and R-Pingmesh, without their central
//! service):
//!
//! - **the ToR mesh**: on each of its rails, every other host on the same ToR and rail;
//! - **cross-ToR**: for every ordered pair of ToRs (A, B) and rail r, the `probers`
//!   hosts of A on rail r with the highest rendezvous score for (A, B, r) probe the
//!   `probers` hosts of B on rail r with the highest score for (A, B, r), the first prober
//!   the first target and so on: different destinations where B has them, so that one
//!   failing while the other answers points at a NIC, both at B's ToR or the path. Every host of
//!   the fleet computes the same choice, so every ordered pair of ToRs is probed on every
//!   rail by `probers` different hosts (fewer only where A has fewer hosts on that rail,
//!   or where the bound below cuts),
//!   and a host carries about `probers × (ToRs − 1) / hosts per ToR` cross-ToR peers per
//!   rail instead of one per ToR: at 10,000 hosts in 209 racks of 48 with 8 rails, 47
//!   mesh peers and about 9 cross-ToR peers per rail, 448 in all.
//! - Rendezvous (highest-random-weight) hashing keeps churn small: a host joining or
//!   leaving ToR A changes the lists of A's hosts on its rails (their mesh), and of the
//!   few hosts elsewhere whose choice of prober or target it wins or held (about
//!   `probers × (ToRs − 1) / hosts per ToR` per rail).
//! - `max_peers` bounds a list (counted in `truncated` when it cuts): kept first are the
//!   cross-ToR peers the host probes as its pair's first prober, then its ToR mesh, then
//!   its other cross-ToR peers. So a big rack (8 rails × 76 hosts fill 600 with mesh)
//!   still probes every other ToR once, and only where a rack is too small to carry its
//!   pairs (one host alone against 208 ToRs on 8 rails) do pairs get fewer probers than
//!   `probers`; `fleet plan --all` says which. Every host must use the same `probers` and
//!   `max_peers`.
//!
//! The score is FNV-1a 64 over the length-prefixed fields, finished by SplitMix64's
//! mixer: stable across builds, platforms and Rust versions (the standard library's hash
//! is not), so hosts running different rocewatch builds agree.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Serialize;

use crate::topology::{Nic, Topology};

/// Cross-ToR probers per ordered pair of ToRs and rail.
pub const DEFAULT_PROBERS: usize = 2;
/// Peers per host at most.
pub const DEFAULT_MAX_PEERS: usize = 600;

/// How pinglists are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Options {
    pub probers: usize,
    pub max_peers: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            probers: DEFAULT_PROBERS,
            max_peers: DEFAULT_MAX_PEERS,
        }
    }
}

/// Same ToR or across ToRs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    SameTor,
    CrossTor,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::SameTor => "same_tor",
            Class::CrossTor => "cross_tor",
        }
    }
}

/// One peer to probe, from one of this host's NICs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Peer {
    pub rail: u8,
    pub class: Class,
    pub host: String,
    pub addr: IpAddr,
    pub tor: String,
    /// For a cross-ToR peer, this host's rank among the pair's probers (0: the first);
    /// what the bound keeps first.
    #[serde(skip)]
    pub prober_rank: u8,
}

/// One host's pinglist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pinglist {
    pub host: String,
    /// By rail, class, then host.
    pub peers: Vec<Peer>,
    /// Peers cut by `max_peers`.
    pub truncated: usize,
}

/// A host the topology does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host} is not in the topology ({hosts} hosts there{near})")]
pub struct UnknownHost {
    pub host: String,
    pub hosts: usize,
    near: String,
}

/// FNV-1a 64 of `bytes`, continuing from `h` (start from [`FNV_OFFSET`]).
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// FNV-1a 64's offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The rendezvous score of `fields`.
pub fn score(fields: &[&str]) -> u64 {
    let mut h = FNV_OFFSET;
    for f in fields {
        h = fnv1a(h, &(f.len() as u64).to_le_bytes());
        h = fnv1a(h, f.as_bytes());
    }
    // SplitMix64's finalizer: FNV's low bits mix poorly on their own.
    let mut z = h;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `n` NICs of `group` with the highest score for `key` + the NIC's host.
fn top<'a>(group: &[&'a Nic], key: [&str; 4], n: usize) -> Vec<&'a Nic> {
    top_by(group, |nic| nic.host.as_str(), key, n)
}

/// The `n` members of `group` (NICs, or their indices) whose host, as `host_of` names
/// it, has the highest score for `key` + the host.
fn top_by<'h, T: Copy>(
    group: &[T],
    host_of: impl Fn(T) -> &'h str,
    key: [&str; 4],
    n: usize,
) -> Vec<T> {
    let mut scored: Vec<(u64, &str, T)> = group
        .iter()
        .map(|&m| {
            let h = host_of(m);
            (score(&[key[0], key[1], key[2], key[3], h]), h, m)
        })
        .collect();
    // Ties (never in practice) fall to the host name: still deterministic.
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().take(n).map(|(_, _, m)| m).collect()
}

/// The fleet's pinglists, computed once per (ToR, rail) group.
pub struct Plan<'t> {
    topo: &'t Topology,
    groups: BTreeMap<(&'t str, u8), Vec<&'t Nic>>,
    opts: Options,
}

impl<'t> Plan<'t> {
    pub fn new(topo: &'t Topology, opts: Options) -> Plan<'t> {
        Plan {
            topo,
            groups: topo.groups(),
            opts,
        }
    }

    /// The peers of the hosts of group (tor, rail), of every host or `only` one: host →
    /// peers (before the bound). For one host the work is its own mesh and one score per
    /// host of its group and ToR, never the group's whole mesh (a placeholder ToR holding
    /// thousands of hosts would be millions of peers).
    fn group_peers(&self, tor: &str, rail: u8, only: Option<&str>) -> BTreeMap<&'t str, Vec<Peer>> {
        let wanted = |h: &str| only.is_none_or(|o| o == h);
        let mut out: BTreeMap<&str, Vec<Peer>> = BTreeMap::new();
        let Some(mine) = self.groups.get(&(tor, rail)) else {
            return out;
        };
        let rail_s = rail.to_string();
        let peer = |n: &Nic, class, prober_rank| Peer {
            rail,
            class,
            host: n.host.clone(),
            addr: n.addr,
            tor: n.tor.clone(),
            prober_rank,
        };
        for a in mine.iter().filter(|a| wanted(&a.host)) {
            let list = out.entry(a.host.as_str()).or_default();
            list.extend(
                mine.iter()
                    .filter(|b| b.host != a.host)
                    .map(|b| peer(b, Class::SameTor, 0)),
            );
        }
        for ((other, r), theirs) in &self.groups {
            if *r != rail || *other == tor {
                continue;
            }
            let probers = top(mine, ["prober", tor, other, &rail_s], self.opts.probers);
            if !probers.iter().any(|p| wanted(&p.host)) {
                continue;
            }
            // The pair's probers aim at different hosts of B where B has them: one
            // destination failing while the other answers is a NIC, both failing is B's
            // ToR or the path.
            let targets = top(theirs, ["target", tor, other, &rail_s], self.opts.probers);
            for (rank, prober) in probers.into_iter().enumerate() {
                if !wanted(&prober.host) || targets.is_empty() {
                    continue;
                }
                let t = targets[rank % targets.len()];
                let list = out.entry(prober.host.as_str()).or_default();
                let rank = u8::try_from(rank).unwrap_or(u8::MAX);
                list.push(peer(t, Class::CrossTor, rank));
            }
        }
        out
    }

    /// Every host's pinglist, in host order.
    pub fn all(&self) -> Vec<Pinglist> {
        let mut out = Vec::new();
        self.each(|l| out.push(l));
        out
    }

    /// Every host's pinglist in host order, handed to `f` one at a time, and the plan's
    /// cross-ToR coverage (what [`Coverage::of`] says of the lists `f` was given).
    ///
    /// Held meanwhile: the cross-ToR choices of the (ToR, rail) groups whose hosts are
    /// not all handed out yet, as NIC indices (8 bytes a peer), each group's computed
    /// when its first host comes and dropped after its last; the ToR mesh is drawn as a
    /// host comes. Hosts named rack by rack keep about one rack's groups alive, not the
    /// fleet's lists: holding every host's peers grew with ToRs² (ToR pairs × rails × the
    /// probers, each peer with its names) and took 2 GB at 20,000 hosts.
    pub fn each(&self, mut f: impl FnMut(Pinglist)) -> Coverage {
        let nics = self.topo.nics();
        let mut groups: BTreeMap<(&str, u8), Vec<u32>> = BTreeMap::new();
        // Each NIC's place in its group.
        let mut place = vec![0u32; nics.len()];
        for (i, n) in nics.iter().enumerate() {
            let g = groups.entry((n.tor.as_str(), n.rail)).or_default();
            place[i] = g.len() as u32;
            g.push(i as u32);
        }
        let mut by_rail: BTreeMap<u8, Vec<(&str, &[u32])>> = BTreeMap::new();
        for ((tor, rail), members) in &groups {
            by_rail.entry(*rail).or_default().push((tor, members));
        }
        let mut cov = Tally::new(self.opts, &by_rail);
        let mut live: BTreeMap<(&str, u8), Live> = BTreeMap::new();
        let mut i = 0;
        while i < nics.len() {
            let host = nics[i].host.as_str();
            let mut peers = Vec::new();
            let mut mine = Vec::new();
            while i < nics.len() && nics[i].host == host {
                let n = &nics[i];
                let key = (n.tor.as_str(), n.rail);
                mine.push(key);
                let members = &groups[&key];
                peers.extend(
                    members
                        .iter()
                        .map(|&m| &nics[m as usize])
                        .filter(|b| b.host != host)
                        .map(|b| peer(b, Class::SameTor, 0)),
                );
                let g = live.entry(key).or_insert_with(|| Live {
                    cross: self.cross_of(nics, key, members, &place, &by_rail[&n.rail]),
                    left: members.len(),
                    cut: BTreeMap::new(),
                });
                peers.extend(
                    g.cross[place[i] as usize]
                        .iter()
                        .map(|&(t, rank)| peer(&nics[t as usize], Class::CrossTor, rank)),
                );
                g.left -= 1;
                i += 1;
            }
            let (list, cut) = self.finish_with_cut(host, peers);
            for p in cut.into_iter().filter(|p| p.class == Class::CrossTor) {
                if let Some(g) = mine
                    .iter()
                    .find(|(_, r)| *r == p.rail)
                    .and_then(|k| live.get_mut(k))
                {
                    *g.cut.entry(p.tor).or_default() += 1;
                }
            }
            f(list);
            // A group whose hosts are all out: its pairs' coverage is known.
            for key in mine {
                if live.get(&key).is_some_and(|g| g.left == 0) {
                    let g = live.remove(&key).expect("just seen");
                    cov.group_done(key, groups[&key].len(), g.cut);
                }
            }
        }
        cov.coverage()
    }

    /// The cross-ToR peers of each member of group `key` (by its place there), as
    /// (target NIC, rank among the pair's probers): what [`Plan::group_peers`] draws.
    fn cross_of(
        &self,
        nics: &[Nic],
        (tor, rail): (&str, u8),
        mine: &[u32],
        place: &[u32],
        rail_groups: &[(&str, &[u32])],
    ) -> Vec<Vec<(u32, u8)>> {
        let rail_s = rail.to_string();
        let host_of = |m: u32| nics[m as usize].host.as_str();
        let mut out = vec![Vec::new(); mine.len()];
        for (other, theirs) in rail_groups {
            if *other == tor {
                continue;
            }
            let key = |what| [what, tor, *other, rail_s.as_str()];
            let probers = top_by(mine, host_of, key("prober"), self.opts.probers);
            let targets = top_by(theirs, host_of, key("target"), self.opts.probers);
            if targets.is_empty() {
                continue;
            }
            for (rank, prober) in probers.into_iter().enumerate() {
                let t = targets[rank % targets.len()];
                let rank = u8::try_from(rank).unwrap_or(u8::MAX);
                out[place[prober as usize] as usize].push((t, rank));
            }
        }
        out
    }

    /// One host's pinglist.
    pub fn of(&self, host: &str) -> Result<Pinglist, UnknownHost> {
        let nics: Vec<&Nic> = self.topo.nics_of(host).collect();
        if nics.is_empty() {
            return Err(unknown(self.topo, host));
        }
        let mut peers = Vec::new();
        for n in nics {
            if let Some(p) = self.group_peers(&n.tor, n.rail, Some(host)).remove(host) {
                peers.extend(p);
            }
        }
        Ok(self.finish(host, peers))
    }

    /// Sorted, and cut to the bound. Kept first: the cross-ToR peers this host probes as
    /// its pair's first prober (without them the pair may go unprobed), then the ToR mesh,
    /// then the other probers' peers; within a tier, by score.
    fn finish(&self, host: &str, peers: Vec<Peer>) -> Pinglist {
        self.finish_with_cut(host, peers).0
    }

    /// [`Plan::finish`], and the peers the bound cut.
    fn finish_with_cut(&self, host: &str, mut peers: Vec<Peer>) -> (Pinglist, Vec<Peer>) {
        let mut truncated = 0;
        let mut cut = Vec::new();
        if peers.len() > self.opts.max_peers {
            truncated = peers.len() - self.opts.max_peers;
            let key = |p: &Peer| {
                let tier = match (p.class, p.prober_rank) {
                    (Class::CrossTor, 0) => 2,
                    (Class::SameTor, _) => 1,
                    (Class::CrossTor, _) => 0,
                };
                (tier, score(&["keep", host, &p.rail.to_string(), &p.host]))
            };
            peers.sort_by_key(|p| std::cmp::Reverse(key(p)));
            cut = peers.split_off(self.opts.max_peers);
        }
        peers.sort();
        let list = Pinglist {
            host: host.to_string(),
            peers,
            truncated,
        };
        (list, cut)
    }
}

/// `n` as a peer of `class`.
fn peer(n: &Nic, class: Class, prober_rank: u8) -> Peer {
    Peer {
        rail: n.rail,
        class,
        host: n.host.clone(),
        addr: n.addr,
        tor: n.tor.clone(),
        prober_rank,
    }
}

/// A (ToR, rail) group while its hosts are handed out: its members' cross-ToR choices
/// (by their place in the group), how many hosts are still to come, and the probers the
/// bound cut by the ToR they aimed at.
struct Live {
    cross: Vec<Vec<(u32, u8)>>,
    left: usize,
    cut: BTreeMap<String, usize>,
}

/// The coverage of a plan handed out a list at a time: a pair's probers are
/// `min(probers, hosts of A on the rail)` different hosts of A, each with one peer in B,
/// so the pair is short by the cross-ToR peers the bound cut, known once A's group is
/// out. Kept: how many pairs are short and the first 20 (what [`Coverage::of`] names).
struct Tally {
    opts: Options,
    pairs: usize,
    short: usize,
    first: BTreeMap<(String, u8, String), usize>,
}

impl Tally {
    fn new(opts: Options, by_rail: &BTreeMap<u8, Vec<(&str, &[u32])>>) -> Tally {
        let pairs = by_rail.values().map(|g| g.len() * (g.len() - 1)).sum();
        Tally {
            opts,
            pairs,
            short: 0,
            first: BTreeMap::new(),
        }
    }

    fn group_done(&mut self, (a, rail): (&str, u8), hosts: usize, cut: BTreeMap<String, usize>) {
        for (b, cut) in cut {
            self.short += 1;
            let n = self.opts.probers.min(hosts).saturating_sub(cut);
            self.first.insert((a.to_string(), rail, b), n);
            if self.first.len() > 20 {
                self.first.pop_last();
            }
        }
    }

    fn coverage(self) -> Coverage {
        Coverage {
            pairs: self.pairs,
            full: self.pairs - self.short,
            short: self
                .first
                .into_iter()
                .map(|((a, ra, b), n)| format!("{a} -> {b} rail {ra}: {n} probers"))
                .collect(),
        }
    }
}

fn unknown(topo: &Topology, host: &str) -> UnknownHost {
    let hosts = topo.hosts();
    // A host given with its domain, or without: say which the topology spells.
    let short = host.split('.').next().unwrap_or(host);
    let near = hosts
        .iter()
        .find(|h| h.split('.').next() == Some(short))
        .map(|h| format!("; did you mean {h}?"))
        .unwrap_or_default();
    UnknownHost {
        host: host.to_string(),
        hosts: hosts.len(),
        near,
    }
}

/// For tests and `fleet plan --all`: per ordered (ToR A, ToR B, rail), the distinct hosts
/// of A that probe a host of B.
pub fn coverage(lists: &[Pinglist], topo: &Topology) -> BTreeMap<(String, String, u8), usize> {
    let tor_of: BTreeMap<(&str, u8), &str> = topo
        .nics()
        .iter()
        .map(|n| ((n.host.as_str(), n.rail), n.tor.as_str()))
        .collect();
    let mut probers: BTreeMap<(String, String, u8), BTreeSet<&str>> = BTreeMap::new();
    for l in lists {
        for p in l.peers.iter().filter(|p| p.class == Class::CrossTor) {
            if let Some(a) = tor_of.get(&(l.host.as_str(), p.rail)) {
                probers
                    .entry((a.to_string(), p.tor.clone(), p.rail))
                    .or_default()
                    .insert(&l.host);
            }
        }
    }
    probers.into_iter().map(|(k, v)| (k, v.len())).collect()
}

/// The cross-ToR coverage of a whole plan: ordered (ToR, ToR, rail) pairs, how many have
/// their full count of probers (`probers`, or every host the rack has on that rail), and
/// the first 20 of those left short (only where the bound cut).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Coverage {
    pub pairs: usize,
    pub full: usize,
    pub short: Vec<String>,
}

impl Coverage {
    pub fn of(topo: &Topology, lists: &[Pinglist], opts: Options) -> Coverage {
        let got = coverage(lists, topo);
        let groups = topo.groups();
        let mut c = Coverage {
            pairs: 0,
            full: 0,
            short: Vec::new(),
        };
        for ((a, ra), mine) in &groups {
            for (b, _) in groups.keys().filter(|(b, rb)| rb == ra && b != a) {
                c.pairs += 1;
                let n = got
                    .get(&(a.to_string(), b.to_string(), *ra))
                    .copied()
                    .unwrap_or(0);
                if n >= opts.probers.min(mine.len()) {
                    c.full += 1;
                } else if c.short.len() < 20 {
                    c.short.push(format!("{a} -> {b} rail {ra}: {n} probers"));
                }
            }
        }
        c
    }
}
