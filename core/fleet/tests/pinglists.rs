//! Pinglist properties on generated fleets of 10 to 10,000 hosts with uneven racks (ToRs
//! of 1, 2 and 48 hosts, hosts missing rails): the ToR mesh complete, every ordered pair
//! of ToRs probed on every rail by 2 different hosts (1 where the rack has one host on
//! that rail), the bound respected, the same list whether a host computes its own or the
//! whole plan is drawn, and how many other hosts' lists change when a host joins.

use std::collections::{BTreeMap, BTreeSet};

use rocewatch_fleet::pinglist::{coverage, fnv1a, score, FNV_OFFSET};
use rocewatch_fleet::{Class, Options, Pinglist, Plan, Topology};

/// A fleet of `hosts` hosts with `rails` rails in racks: the first rack has 1 host, the
/// second 2, the rest 48 (the last one what is left); every 7th host lacks its last rail.
fn fleet(hosts: usize, rails: u8) -> Topology {
    fleet_of(hosts, rails, 48)
}

/// The same with racks of `big` hosts after the first two.
fn fleet_of(hosts: usize, rails: u8, big: usize) -> Topology {
    let mut csv = String::from("host,rail,addr,tor\n");
    let (mut rack, mut in_rack, mut size) = (0usize, 0usize, 1usize);
    for h in 0..hosts {
        if in_rack == size {
            rack += 1;
            in_rack = 0;
            size = if rack == 1 { 2 } else { big };
        }
        in_rack += 1;
        for r in 0..rails {
            if h % 7 == 6 && r == rails - 1 && rails > 1 {
                continue;
            }
            let addr = format!("10.{}.{}.{}", r, h / 250, h % 250 + 1);
            csv.push_str(&format!("gpu{h:05},{r},{addr},leaf{rack:03}-r{r}\n"));
        }
    }
    Topology::parse("generated", &csv).unwrap()
}

/// A pair's probers and the hosts they aim at.
type Aims<'a> = (BTreeSet<&'a str>, BTreeSet<&'a str>);

/// Every property, for one fleet; returns the largest list and the share of ordered
/// (ToR, ToR, rail) pairs with their full count of probers.
///
/// A rack too small to carry its share (one host probing 208 other ToRs on 8 rails is
/// 1,664 peers) has its hosts' cross-ToR peers cut to the bound: only there may a pair
/// have fewer probers, and only hosts of such racks may be cut.
fn check(t: &Topology, lists: &[Pinglist], opts: Options) -> (usize, f64) {
    let groups = t.groups();
    let by_host: BTreeMap<&str, &Pinglist> = lists.iter().map(|l| (l.host.as_str(), l)).collect();
    assert_eq!(by_host.len(), t.hosts().len());
    let cut: BTreeSet<&str> = lists
        .iter()
        .filter(|l| l.truncated > 0)
        .map(|l| l.host.as_str())
        .collect();
    for l in lists {
        assert!(
            l.peers.len() <= opts.max_peers,
            "{} has {}",
            l.host,
            l.peers.len()
        );
        if l.truncated > 0 {
            // Only a host of a rack too small for its share of the fleet's pairs.
            let smallest = t
                .nics_of(&l.host)
                .map(|n| groups[&(n.tor.as_str(), n.rail)].len())
                .min()
                .unwrap();
            // In these fleets: the racks of 1 and 2 hosts, nobody else.
            assert!(
                smallest <= 2,
                "{} was cut by {} in a group of {smallest}",
                l.host,
                l.truncated
            );
        }
        assert!(
            l.peers.iter().all(|p| p.host != l.host),
            "{} probes itself",
            l.host
        );
        let set: BTreeSet<_> = l.peers.iter().map(|p| (p.rail, &p.host)).collect();
        assert_eq!(set.len(), l.peers.len(), "{} lists a peer twice", l.host);
    }
    // The mesh: every other host on the same ToR and rail, as same_tor.
    for ((tor, rail), nics) in &groups {
        for a in nics {
            if cut.contains(a.host.as_str()) {
                continue;
            }
            let mesh: BTreeSet<&str> = by_host[a.host.as_str()]
                .peers
                .iter()
                .filter(|p| p.rail == *rail && p.class == Class::SameTor)
                .map(|p| p.host.as_str())
                .collect();
            let want: BTreeSet<&str> = nics
                .iter()
                .map(|n| n.host.as_str())
                .filter(|h| *h != a.host)
                .collect();
            assert_eq!(mesh, want, "mesh of {} on {tor} rail {rail}", a.host);
        }
    }
    // Cross-ToR coverage of every ordered pair, per rail.
    let cov = coverage(lists, t);
    let (mut pairs, mut full) = (0usize, 0usize);
    for ((a, ra), mine) in &groups {
        let thinned = mine.iter().any(|n| cut.contains(n.host.as_str()));
        for (b, rb) in groups.keys() {
            if ra != rb || a == b {
                continue;
            }
            let got = cov
                .get(&(a.to_string(), b.to_string(), *ra))
                .copied()
                .unwrap_or(0);
            pairs += 1;
            if got >= opts.probers.min(mine.len()) {
                full += 1;
            } else {
                assert!(thinned, "{a} -> {b} rail {ra}: {got} probers");
            }
        }
    }
    // A pair's probers aim at different hosts of B where B has several.
    let tor_of: BTreeMap<(&str, u8), &str> = t
        .nics()
        .iter()
        .map(|n| ((n.host.as_str(), n.rail), n.tor.as_str()))
        .collect();
    let mut aims: BTreeMap<(&str, &str, u8), Aims> = BTreeMap::new();
    for l in lists.iter().filter(|l| l.truncated == 0) {
        for p in l.peers.iter().filter(|p| p.class == Class::CrossTor) {
            let a = tor_of[&(l.host.as_str(), p.rail)];
            let e = aims.entry((a, p.tor.as_str(), p.rail)).or_default();
            e.0.insert(&l.host);
            e.1.insert(&p.host);
        }
    }
    for ((a, b, r), (probers, targets)) in &aims {
        let there = groups[&(*b, *r)].len();
        assert_eq!(
            targets.len(),
            probers.len().min(there),
            "{a} -> {b} rail {r}: probers {probers:?} aim at {targets:?}"
        );
    }
    let biggest = lists.iter().map(|l| l.peers.len()).max().unwrap_or(0);
    (biggest, full as f64 / pairs.max(1) as f64)
}

#[test]
fn pinglists_cover_every_tor_pair_within_the_bound_from_10_to_2000_hosts() {
    let opts = Options::default();
    for (hosts, rails) in [(10, 1), (10, 8), (51, 2), (200, 8), (2000, 8)] {
        let t = fleet(hosts, rails);
        let plan = Plan::new(&t, opts);
        let lists = plan.all();
        let (biggest, share) = check(&t, &lists, opts);
        assert_eq!(share, 1.0, "{hosts} hosts: every pair covered");
        // A host computes its own list alone: the same as the whole plan's.
        for l in lists.iter().step_by(37) {
            assert_eq!(&plan.of(&l.host).unwrap(), l);
        }
        eprintln!("{hosts} hosts × {rails} rails: at most {biggest} peers a host");
    }
}

/// 10,000 hosts × 8 rails (209 racks of 48): complete, within 600, and one host joining
/// changes the lists of its rack (their mesh) and of few others.
#[test]
fn ten_thousand_hosts_stay_under_600_peers_and_a_join_moves_few_lists() {
    let opts = Options::default();
    let t = fleet(10_000, 8);
    let lists = Plan::new(&t, opts).all();
    let (biggest, share) = check(&t, &lists, opts);
    assert!(biggest <= 600, "{biggest}");
    // Only the racks of 1 and 2 hosts cannot carry their pairs (3 of 209 racks).
    assert!(share > 0.99, "{share}");
    // The summary `fleet plan --all` prints counts the same.
    let c = rocewatch_fleet::pinglist::Coverage::of(&t, &lists, opts);
    assert_eq!(c.full as f64 / c.pairs as f64, share);
    assert_eq!(c.short.len(), 20, "the first 20 named");
    let total: usize = lists.iter().map(|l| l.peers.len()).sum();
    let cut = lists.iter().filter(|l| l.truncated > 0).count();
    eprintln!(
        "10,000 hosts × 8 rails: at most {biggest} peers a host, {:.0} on average; {cut} hosts cut to the bound; {:.2} % of ordered ToR pairs × rails fully covered",
        total as f64 / lists.len() as f64,
        share * 100.0
    );

    // One more host (the last rack has room: 10,000 = 1 + 2 + 208 × 48 + 13).
    let bigger = fleet(10_001, 8);
    let after = Plan::new(&bigger, opts).all();
    let before: BTreeMap<&str, &Pinglist> = lists.iter().map(|l| (l.host.as_str(), l)).collect();
    let rack = |tor: &str| tor.split('-').next().unwrap().to_string();
    let theirs = rack(&bigger.nics_of("gpu10000").next().unwrap().tor);
    let newcomer_rack: BTreeSet<&str> = bigger
        .nics()
        .iter()
        .filter(|n| rack(&n.tor) == theirs)
        .map(|n| n.host.as_str())
        .collect();
    let changed: Vec<&str> = after
        .iter()
        .filter(|l| before.get(l.host.as_str()).is_some_and(|b| *b != *l))
        .map(|l| l.host.as_str())
        .collect();
    let outside = changed
        .iter()
        .filter(|h| !newcomer_rack.contains(*h))
        .count();
    eprintln!(
        "a host joining: {} other lists changed, {} in its rack, {outside} elsewhere ({:.2} % of the fleet)",
        changed.len(),
        changed.len() - outside,
        changed.len() as f64 * 100.0 / 10_000.0
    );
    // Expected elsewhere: the probers of other ToRs whose targets on the newcomer's ToR
    // shift (it ranks first among the rack's targets with odds 1 in rack size, moving
    // both probers' targets, second with the same odds, moving one), i.e.
    // probers × (probers + 1) / 2 × (ToRs − 1) × rails / rack size.
    let tors = t.groups().keys().filter(|(_, r)| *r == 0).count();
    let size = newcomer_rack.len();
    let k = opts.probers;
    let expected = (k * (k + 1) / 2 * (tors - 1) * 8) as f64 / size as f64;
    eprintln!("expected elsewhere about {expected:.0} (rack of {size})");
    assert!(
        (outside as f64) < 2.0 * expected,
        "{outside} lists elsewhere changed, about {expected:.0} expected"
    );
    assert!(changed.len() - outside <= size, "{changed:?}");
}

#[test]
fn a_small_bound_cuts_cross_tor_peers_first_and_counts_them() {
    let t = fleet(200, 2);
    let opts = Options {
        probers: 2,
        max_peers: 5,
    };
    let plan = Plan::new(&t, opts);
    // gpu00001's rack has two hosts: one mesh peer a rail, and it probes every other ToR.
    let whole = Plan::new(&t, Options::default()).of("gpu00001").unwrap();
    let l = plan.of("gpu00001").unwrap();
    assert_eq!(l.peers.len(), 5);
    assert_eq!(l.truncated, whole.peers.len() - 5, "{whole:?}");
    let mesh = |l: &Pinglist| l.peers.iter().filter(|p| p.class == Class::SameTor).count();
    assert_eq!(mesh(&l), 2, "the mesh is kept whole: {l:?}");
    assert_eq!(mesh(&whole), 2);
    assert!(l.peers.iter().all(|p| whole.peers.contains(p)));
}

#[test]
fn an_unknown_host_is_named_with_the_spelling_the_topology_uses() {
    let t = fleet(10, 1);
    let e = Plan::new(&t, Options::default())
        .of("gpu00003.cluster.example")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "gpu00003.cluster.example is not in the topology (10 hosts there; did you mean gpu00003?)"
    );
}

#[test]
fn the_score_is_fnv1a_and_stable_across_builds() {
    // FNV-1a 64's published test vectors (Fowler, Noll and Vo's reference code).
    assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
    // Fields are length-prefixed: moving a byte across a boundary changes the score.
    assert_ne!(score(&["ab", "c"]), score(&["a", "bc"]));
    // Pinned (computed once by this code): a change here changes every host's lists, and
    // hosts running the old and the new build would no longer agree.
    assert_eq!(
        score(&["prober", "leaf001", "leaf002", "0", "gpu00001"]),
        PINNED
    );
}

const PINNED: u64 = 15_793_451_910_406_000_421;

/// Racks of 100 hosts on 8 rails: the mesh alone (8 × 99) is past the bound of 600, and
/// still every ordered pair of ToRs is probed on every rail (the first prober's peers are
/// kept before the mesh), each host's list full to the bound.
#[test]
fn a_rack_whose_mesh_fills_the_bound_still_probes_every_other_tor() {
    let opts = Options::default();
    let t = fleet_of(1_000, 8, 100);
    let plan = Plan::new(&t, opts);
    let lists = plan.all();
    let cov = coverage(&lists, &t);
    let groups = t.groups();
    for (a, ra) in groups.keys() {
        for (b, _) in groups.keys().filter(|(b, rb)| rb == ra && b != a) {
            let got = cov
                .get(&(a.to_string(), b.to_string(), *ra))
                .copied()
                .unwrap_or(0);
            assert!(got >= 1, "{a} -> {b} rail {ra}: no prober");
        }
    }
    let big = plan.of("gpu00050").unwrap();
    assert_eq!(big.peers.len(), 600);
    assert!(big.truncated > 0);
    assert!(big.peers.iter().any(|p| p.class == Class::SameTor));
    assert_eq!(&big, lists.iter().find(|l| l.host == "gpu00050").unwrap());
}

/// A whole plan pinned (its peers folded into one score): reordering the fields of the
/// rendezvous keys, or any change of the draw, changes every host's list, and hosts
/// running the old and the new build would probe past each other.
#[test]
fn a_whole_plan_is_pinned() {
    let t = fleet(60, 2);
    let lists = Plan::new(&t, Options::default()).all();
    let mut folded = Vec::new();
    for l in &lists {
        for p in &l.peers {
            folded.push(format!(
                "{}>{}:{}:{}",
                l.host,
                p.rail,
                p.class.as_str(),
                p.host
            ));
        }
    }
    let refs: Vec<&str> = folded.iter().map(String::as_str).collect();
    assert_eq!(folded.len(), PLAN_PEERS);
    assert_eq!(score(&refs), PLAN_SCORE);
}

const PLAN_PEERS: usize = 4070;
const PLAN_SCORE: u64 = 12_318_276_026_862_711_971;

/// A placeholder ToR (`unknown`) for 10,000 hosts: one host's list costs its own mesh, not
/// the group's (10⁸ peers, which every agent would build), and is cut to the bound.
#[test]
fn one_hosts_list_in_a_huge_placeholder_tor_costs_only_its_own_mesh() {
    let mut csv = String::from("host,rail,addr,tor\n");
    for h in 0..10_000u32 {
        csv.push_str(&format!(
            "gpu{h:05},0,10.{}.{}.{},unknown\n",
            h >> 16,
            (h >> 8) & 255,
            h & 255
        ));
    }
    let t = Topology::parse("placeholder", &csv).unwrap();
    let l = Plan::new(&t, Options::default()).of("gpu04242").unwrap();
    assert_eq!(l.peers.len(), 600);
    assert_eq!(l.truncated, 9_999 - 600);
    assert!(l.peers.iter().all(|p| p.class == Class::SameTor));
}

/// `fleet plan --all` hands the lists out one at a time (the fleet's lists are not held:
/// that grew with ToRs² and took 2 GB at 20,000 hosts): each list the same as the host
/// computes alone, in host order, and the coverage the same as `Coverage::of` the whole
/// plan says, also where the bound cuts most pairs short.
#[test]
fn the_plan_handed_out_a_host_at_a_time_is_the_whole_plan() {
    for (hosts, rails, max_peers) in [(200, 8, 600), (500, 4, 20), (60, 2, 3)] {
        let t = fleet(hosts, rails);
        let opts = Options {
            probers: 2,
            max_peers,
        };
        let plan = Plan::new(&t, opts);
        let mut lists = Vec::new();
        let cov = plan.each(|l| lists.push(l));
        let hosts_in_order: Vec<&str> = lists.iter().map(|l| l.host.as_str()).collect();
        assert_eq!(hosts_in_order, t.hosts());
        for l in &lists {
            assert_eq!(
                &plan.of(&l.host).unwrap(),
                l,
                "{hosts} hosts, bound {max_peers}"
            );
        }
        let whole = rocewatch_fleet::pinglist::Coverage::of(&t, &lists, opts);
        assert_eq!(cov, whole, "{hosts} hosts, bound {max_peers}");
        if max_peers < 600 {
            assert!(whole.full < whole.pairs, "the bound cuts: {whole:?}");
        }
    }
}
