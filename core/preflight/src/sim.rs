//! A simulated fabric for the tests: every test's result from which NICs, hosts and
//! directions are broken.

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::rails::{plan, Endpoint, HostRails, Nic, Plan};
use crate::report;
use crate::runner::{run_host, Measurement, PairRunner, Step};
use crate::schedule::{Mode, Role, Schedule};
use crate::verdict::{judge, FailedDirection, Finding, Status, TestResult, Thresholds, Verdict};

const LINE: f64 = 400.0;

#[derive(Debug, Clone, Default)]
struct Fabric {
    /// (host, rank): slow both ways.
    bad_nics: BTreeSet<(String, usize)>,
    /// (host, rank): slow when sending only.
    slow_senders: BTreeSet<(String, usize)>,
    bad_hosts: BTreeSet<String>,
    /// (from, to, rank).
    slow: BTreeSet<(String, String, usize)>,
}

impl Fabric {
    fn measure(&self, rank: usize, from: &str, to: &str) -> Measurement {
        let bad =
            |h: &str| self.bad_hosts.contains(h) || self.bad_nics.contains(&(h.to_string(), rank));
        let slow = bad(from)
            || bad(to)
            || self.slow_senders.contains(&(from.to_string(), rank))
            || self
                .slow
                .contains(&(from.to_string(), to.to_string(), rank));
        Measurement {
            peer_nic: Some(format!("mlx5_{rank}:1")),
            // A healthy link reaches 97.5 %, a broken one 30 %.
            bandwidth_gbps: Some(if slow { 120.0 } else { 390.0 }),
            latency_us: Some(if slow { 40.0 } else { 3.5 }),
            line_rate_gbps: Some(LINE),
            error: None,
        }
    }

    fn results(&self, p: &Plan) -> Vec<TestResult> {
        p.tests
            .iter()
            .map(|t| {
                let m = self.measure(t.rank, &t.from.host, &t.to.host);
                TestResult {
                    round: t.round,
                    rank: t.rank,
                    from: t.from.clone(),
                    to: t.to.clone(),
                    bandwidth_gbps: m.bandwidth_gbps,
                    latency_us: m.latency_us,
                    line_rate_gbps: m.line_rate_gbps,
                    error: m.error,
                }
            })
            .collect()
    }
}

fn rails_of(hosts: &[String], rails: usize) -> Vec<HostRails> {
    hosts
        .iter()
        .map(|h| HostRails {
            host: h.clone(),
            nics: (0..rails)
                .map(|k| Nic {
                    name: format!("mlx5_{k}:1"),
                    netdev: None,
                    up: true,
                    line_rate_gbps: Some(LINE),
                    addr: None,
                })
                .collect(),
        })
        .collect()
}

fn hosts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("node{i:04}")).collect()
}

fn sweep(n: usize, rails: usize, f: &Fabric) -> (Schedule, Verdict) {
    let s = Schedule::new(hosts(n), Mode::Default).unwrap();
    let r = rails_of(s.hosts(), rails);
    let p = plan(&s, &r);
    let v = judge(&p, &r, &f.results(&p), &Thresholds::default());
    (s, v)
}

/// A table row (rows start with a space) of a passing test.
fn is_pass_row(l: &str) -> bool {
    l.starts_with(' ') && l.ends_with(" pass")
}

const SIZES: [usize; 7] = [2, 3, 4, 5, 16, 128, 1024];

#[test]
fn a_clean_fabric_blames_no_one() {
    for n in SIZES {
        let (s, v) = sweep(n, 4, &Fabric::default());
        assert_eq!(v.status, Status::Pass, "n={n}: {:?}", v.findings);
        assert!(v.findings.is_empty());
        assert_eq!(report::exit_code(&v), 0);
        // Every host tested on every rail, both directions.
        let tested: BTreeSet<(&str, usize)> = v
            .tests
            .iter()
            .map(|t| (t.result.from.host.as_str(), t.result.rank))
            .collect();
        assert_eq!(tested.len(), n * 4, "n={n}");
        if n == 4 {
            let t = report::text(&s, &v, true);
            assert!(t.contains("PASS: 48 tests"), "{t}");
            assert_eq!(t.lines().filter(|l| is_pass_row(l)).count(), 48, "{t}");
            let short = report::text(&s, &v, false);
            assert!(short.contains("(48 passing tests not shown"), "{short}");
            assert!(!short.lines().any(is_pass_row), "{short}");
        }
    }
}

#[test]
fn one_bad_nic_is_named_and_only_it() {
    for n in SIZES {
        let victim = format!("node{:04}", n / 2);
        let f = Fabric {
            bad_nics: [(victim.clone(), 1)].into(),
            ..Fabric::default()
        };
        let (s, v) = sweep(n, 4, &f);
        if n == 2 {
            // One partner: which end cannot be told.
            assert_eq!(v.status, Status::CannotTell, "{:?}", v.findings);
            assert_eq!(v.findings.len(), 1, "{:?}", v.findings);
            let Finding::Inconclusive { why } = &v.findings[0] else {
                panic!()
            };
            assert!(
                why.contains("node0000/mlx5_1:1") && why.contains("node0001/mlx5_1:1"),
                "{why}"
            );
            assert_eq!(report::exit_code(&v), 2);
            continue;
        }
        assert_eq!(v.status, Status::Fail, "n={n}");
        assert_eq!(v.findings.len(), 1, "n={n}: {:?}", v.findings);
        match &v.findings[0] {
            Finding::BadNic {
                host,
                nic,
                rank,
                partners,
                direction,
            } => {
                assert_eq!((host, nic.as_str(), *rank), (&victim, "mlx5_1:1", 1));
                assert!(partners.len() >= 2);
                assert_eq!(*direction, FailedDirection::Both);
            }
            f => panic!("n={n}: {f:?}"),
        }
        assert_eq!(report::exit_code(&v), 1);
        let t = report::text(&s, &v, false);
        // The failing rows with their numbers, then the finding.
        let row = t
            .lines()
            .find(|l| l.contains(&format!(" {victim} ")) && l.contains("FAIL"))
            .unwrap_or_else(|| panic!("no failing row of {victim}: {t}"));
        assert!(
            row.contains("120.00") && row.contains(" 30 ") && row.contains("40.00"),
            "{row}"
        );
        assert!(!t.lines().any(is_pass_row), "passing rows hidden: {t}");
        assert!(
            t.contains(&format!("FAIL: bad NIC {victim}/mlx5_1:1 (rail 1)")),
            "{t}"
        );
        let j = report::json(&s, &v);
        assert_eq!(j["findings"][0]["finding"], "bad_nic");
        assert_eq!(j["findings"][0]["host"], victim.as_str());
        assert_eq!(j["exit_code"], 1);
    }
}

#[test]
fn one_bad_host_is_named_as_a_host() {
    for n in SIZES {
        let victim = format!("node{:04}", n - 1);
        let f = Fabric {
            bad_hosts: [victim.clone()].into(),
            ..Fabric::default()
        };
        let (_, v) = sweep(n, 4, &f);
        if n == 2 {
            assert_eq!(v.status, Status::CannotTell);
            assert_eq!(v.findings.len(), 4, "one per rail: {:?}", v.findings);
            continue;
        }
        assert_eq!(v.findings.len(), 1, "n={n}: {:?}", v.findings);
        let Finding::BadHost { host, nics, .. } = &v.findings[0] else {
            panic!("n={n}: {:?}", v.findings)
        };
        assert_eq!(host, &victim);
        assert_eq!(nics.len(), 4);
        assert_eq!(v.status, Status::Fail);
    }
}

#[test]
fn a_slow_direction_is_named_with_both_ends() {
    for n in SIZES {
        let s = Schedule::new(hosts(n), Mode::Default).unwrap();
        let (a, b) = s.pairs(0)[0];
        let (from, to) = (s.hosts()[b].clone(), s.hosts()[a].clone());
        let f = Fabric {
            slow: [(from.clone(), to.clone(), 2)].into(),
            ..Fabric::default()
        };
        let (sch, v) = sweep(n, 4, &f);
        assert_eq!(v.status, Status::Fail, "n={n}");
        assert_eq!(v.findings.len(), 1, "n={n}: {:?}", v.findings);
        let Finding::SlowDirection {
            rank,
            from: f0,
            to: t0,
            why,
        } = &v.findings[0]
        else {
            panic!("n={n}: {:?}", v.findings)
        };
        assert_eq!(*rank, 2);
        assert_eq!(
            f0,
            &Endpoint {
                host: from.clone(),
                nic: "mlx5_2:1".into()
            }
        );
        assert_eq!(
            t0,
            &Endpoint {
                host: to.clone(),
                nic: "mlx5_2:1".into()
            }
        );
        assert!(why.contains("30 % of the line rate 400 Gb/s"), "{why}");
        let t = report::text(&sch, &v, false);
        assert!(
            t.contains(&format!("slow direction {from}/mlx5_2:1 → {to}/mlx5_2:1")),
            "{t}"
        );
    }
}

#[test]
fn a_nic_slow_only_when_sending_is_named_so() {
    let f = Fabric {
        slow_senders: [("node0003".to_string(), 0)].into(),
        ..Fabric::default()
    };
    let (_, v) = sweep(16, 2, &f);
    assert_eq!(v.findings.len(), 1, "{:?}", v.findings);
    assert!(matches!(
        &v.findings[0],
        Finding::BadNic { host, direction: FailedDirection::Sending, .. } if host == "node0003"
    ));
}

#[test]
fn errors_missing_results_and_down_ports_are_never_a_pass() {
    let s = Schedule::new(hosts(4), Mode::Default).unwrap();
    let mut r = rails_of(s.hosts(), 2);
    r[3].nics[1].up = false;
    let p = plan(&s, &r);
    let mut res = Fabric::default().results(&p);
    // A test whose line rate is unknown, and one missing.
    res[0].line_rate_gbps = None;
    res.pop();
    let v = judge(&p, &r, &res, &Thresholds::default());
    assert_eq!(v.status, Status::Fail, "the down port is named");
    let lines: Vec<String> = v.findings.iter().map(report::finding_line).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("node0003/mlx5_1:1 (rail 1) is not ACTIVE")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("line rate is unknown")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("no result")), "{lines:?}");
    // node0003's rank 1 against its 3 partners, said for both ends.
    assert_eq!(v.untested.len(), 6, "{:?}", v.untested);
    // Every test erroring (the runner cannot run at all): no one is blamed.
    let all_err: Vec<TestResult> = Fabric::default()
        .results(&plan(&s, &rails_of(s.hosts(), 2)))
        .into_iter()
        .map(|mut t| {
            t.error = Some("connection refused".into());
            t
        })
        .collect();
    let v = judge(
        &plan(&s, &rails_of(s.hosts(), 2)),
        &rails_of(s.hosts(), 2),
        &all_err,
        &Thresholds::default(),
    );
    assert_eq!(v.status, Status::CannotTell, "{:?}", v.findings);
}

#[test]
fn thresholds_are_checked_and_configurable() {
    assert!(Thresholds::new(0.0, 10.0)
        .unwrap_err()
        .to_string()
        .contains("share 0"));
    assert!(Thresholds::new(1.5, 10.0).is_err());
    assert!(Thresholds::new(0.9, f64::NAN)
        .unwrap_err()
        .to_string()
        .contains("latency"));
    // 97.5 % fails a 99 % bar; 3.5 µs fails a 2 µs bound.
    let s = Schedule::new(hosts(4), Mode::Default).unwrap();
    let r = rails_of(s.hosts(), 1);
    let p = plan(&s, &r);
    let res = Fabric::default().results(&p);
    for th in [
        Thresholds::new(0.99, 100.0).unwrap(),
        Thresholds::new(0.5, 2.0).unwrap(),
    ] {
        let v = judge(&p, &r, &res, &th);
        assert!(v
            .tests
            .iter()
            .all(|t| matches!(t.judgement, crate::verdict::Judgement::Fail { .. })));
        assert_eq!(
            v.status,
            Status::CannotTell,
            "every NIC fails: no one can be blamed"
        );
    }
}

/// The simulated runner: a host's view, driving through the fabric.
struct SimRunner<'a> {
    me: String,
    fabric: &'a Fabric,
}

impl PairRunner for SimRunner<'_> {
    fn run_step(
        &mut self,
        step: &Step,
    ) -> impl std::future::Future<Output = Vec<Measurement>> + Send {
        let out: Vec<Measurement> = match step.role {
            Role::Serve => Vec::new(),
            Role::Drive => step
                .rails
                .iter()
                .map(|(k, _)| self.fabric.measure(*k, &self.me, &step.peer))
                .collect(),
        };
        async move { out }
    }
}

#[tokio::test]
async fn every_host_running_its_part_gives_the_planned_results() {
    let f = Fabric {
        bad_nics: [("node0002".to_string(), 0)].into(),
        ..Fabric::default()
    };
    let s = Schedule::new(hosts(7), Mode::Default).unwrap();
    let r = rails_of(s.hosts(), 2);
    let mut all = crate::results::Gathered::default();
    for h in &r {
        let mut run = SimRunner {
            me: h.host.clone(),
            fabric: &f,
        };
        // Each host writes its lines; the verdict reads every host's.
        let lines = crate::results::to_lines(h, &run_host(&s, h, &mut run).await.unwrap());
        crate::results::read_lines(&s, &h.host, &lines, &mut all).unwrap();
    }
    assert_eq!(all.rails, r);
    let all = all.results;
    let p = plan(&s, &r);
    assert_eq!(all.len(), p.tests.len());
    let v = judge(&p, &r, &all, &Thresholds::default());
    assert_eq!(v.findings.len(), 1, "{:?}", v.findings);
    assert!(matches!(&v.findings[0], Finding::BadNic { host, rank: 0, .. } if host == "node0002"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// N ≥ 4, any rail count, one bad NIC anywhere: that NIC and only it is named.
    #[test]
    fn a_random_bad_nic_is_the_only_one_named(n in 4usize..300, rails in 1usize..9, h in 0usize..300, k in 0usize..8) {
        let (h, k) = (h % n, k % rails);
        let victim = format!("node{h:04}");
        let f = Fabric { bad_nics: [(victim.clone(), k)].into(), ..Fabric::default() };
        let (_, v) = sweep(n, rails, &f);
        prop_assert_eq!(v.findings.len(), 1, "{:?}", &v.findings);
        let named = matches!(&v.findings[0], Finding::BadNic { host, rank, .. } if *host == victim && *rank == k);
        prop_assert!(named, "{:?}", &v.findings);
    }

    /// Two bad NICs on different rails: both named, nothing else.
    #[test]
    fn two_bad_nics_on_different_rails_are_both_named(n in 4usize..200, a in 0usize..200, b in 0usize..200) {
        let (a, b) = (format!("node{:04}", a % n), format!("node{:04}", b % n));
        let f = Fabric { bad_nics: [(a.clone(), 0), (b.clone(), 1)].into(), ..Fabric::default() };
        let (_, v) = sweep(n, 2, &f);
        let mut got: Vec<(String, usize)> = v.findings.iter().filter_map(|f| match f {
            Finding::BadNic { host, rank, .. } => Some((host.clone(), *rank)),
            _ => None,
        }).collect();
        got.sort();
        if a == b {
            // Both rails of a two-rail host: a bad host.
            prop_assert!(matches!(&v.findings[..], [Finding::BadHost { host, .. }] if *host == a), "{:?}", &v.findings);
        } else {
            let mut want = vec![(a, 0), (b, 1)];
            want.sort();
            prop_assert_eq!(got, want);
            prop_assert_eq!(v.findings.len(), 2);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Up to four bad NICs on one rail, anywhere: whatever is named is bad (never a good
    /// NIC blamed), the sweep never passes, and a bad NIC not named leaves "cannot tell"
    /// or a named failure behind.
    #[test]
    fn a_good_nic_is_never_blamed(n in 2usize..80, bad in proptest::collection::btree_set(0usize..80, 1..5), all in any::<bool>()) {
        let bad: BTreeSet<(String, usize)> = bad.into_iter().map(|h| (format!("node{:04}", h % n), 0)).collect();
        let f = Fabric { bad_nics: bad.clone(), ..Fabric::default() };
        let mode = if all { Mode::AllPairs } else { Mode::Default };
        let s = Schedule::new(hosts(n), mode).unwrap();
        let r = rails_of(s.hosts(), 1);
        let p = plan(&s, &r);
        let v = judge(&p, &r, &f.results(&p), &Thresholds::default());
        prop_assert_ne!(v.status, Status::Pass);
        for finding in &v.findings {
            match finding {
                Finding::BadNic { host, rank, .. } => prop_assert!(bad.contains(&(host.clone(), *rank)), "blamed {host}: {:?}", &v.findings),
                Finding::BadHost { host, .. } | Finding::NicDown { host, .. } => prop_assert!(false, "{host}: {:?}", &v.findings),
                Finding::SlowDirection { .. } => prop_assert!(false, "no direction is slow: {:?}", &v.findings),
                Finding::Inconclusive { .. } => {}
            }
        }
    }
}

/// Three bad NICs on one rail whose partners overlap (found by enumerating every triple
/// of 12 hosts): node0000 has only one partner whose other tests pass until the NICs named
/// bad are left out of its partners' "other tests"; then all three are named.
#[test]
fn bad_nics_sharing_partners_are_all_named() {
    let bad: BTreeSet<(String, usize)> = [0, 1, 4]
        .iter()
        .map(|h| (format!("node{h:04}"), 0))
        .collect();
    let f = Fabric {
        bad_nics: bad.clone(),
        ..Fabric::default()
    };
    let (_, v) = sweep(12, 1, &f);
    let named: BTreeSet<(String, usize)> = v
        .findings
        .iter()
        .filter_map(|f| match f {
            Finding::BadNic { host, rank, .. } => Some((host.clone(), *rank)),
            _ => None,
        })
        .collect();
    assert_eq!(named, bad, "{:?}", v.findings);
    assert_eq!(v.findings.len(), 3, "{:?}", v.findings);
}

/// A partner with no other test on that rail is no witness: here node0000's rank 1 meets
/// only two hosts that have a rank 1, both bad, which never meet each other. node0000
/// fails against both; blaming it would be blaming the only good NIC.
#[test]
fn a_partner_without_other_tests_is_no_witness() {
    let s = Schedule::new(hosts(16), Mode::Default).unwrap();
    let x = 0;
    let ps = s.partners(x);
    let (y, z) = ps
        .iter()
        .flat_map(|a| ps.iter().map(move |b| (*a, *b)))
        .find(|(a, b)| a < b && !s.partners(*a).contains(b))
        .expect("two partners of node0000 that do not meet");
    let mut r = rails_of(s.hosts(), 1);
    for h in [x, y, z] {
        let mut nic = r[h].nics[0].clone();
        nic.name = "mlx5_1:1".into();
        r[h].nics.push(nic);
    }
    let f = Fabric {
        bad_nics: [(s.hosts()[y].clone(), 1), (s.hosts()[z].clone(), 1)].into(),
        ..Fabric::default()
    };
    let p = plan(&s, &r);
    let v = judge(&p, &r, &f.results(&p), &Thresholds::default());
    assert!(
        !v.findings
            .iter()
            .any(|f| matches!(f, Finding::BadNic { host, .. } if host == "node0000")),
        "{:?}",
        v.findings
    );
    assert_eq!(v.status, Status::CannotTell, "{:?}", v.findings);
}

/// A host that sent nothing (no rails line, no results) leaves its partners' tests
/// against it untested and the sweep "cannot tell", naming it: never a silent pass.
#[test]
fn a_host_that_sent_nothing_is_named_and_nothing_passes() {
    let s = Schedule::new(hosts(6), Mode::Default).unwrap();
    let mut r = rails_of(s.hosts(), 2);
    let p_all = plan(&s, &r);
    let silent = r.remove(4);
    let p = plan(&s, &r);
    let res: Vec<TestResult> = Fabric::default()
        .results(&p_all)
        .into_iter()
        .filter(|t| t.from.host != silent.host)
        .collect();
    let v = judge(&p, &r, &res, &Thresholds::default());
    assert_eq!(v.status, Status::CannotTell, "{:?}", v.findings);
    let lines: Vec<String> = v.findings.iter().map(report::finding_line).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("node0004: its NICs are not known")),
        "{lines:?}"
    );
}
