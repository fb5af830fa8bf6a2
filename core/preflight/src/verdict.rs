//! The verdict over a sweep's results: each test judged, then who is to blame.
//!
//! A test passes when its bandwidth reaches `min_share` of the line rate (default 90 %,
//! the criterion `rocewatch bandwidth --min-share` uses) and its latency, when measured,
//! stays within `max_latency_us`. The default bound, 100 µs, sits an order of magnitude
//! above a healthy RDMA round trip (a few µs on the wire, tens of µs through the probe's
//! software path: see `default_rtt_buckets` in `core/probes/src/config.rs`) and far below
//! what a fault brings (milliseconds: a retransmission timeout, a pause storm, a route
//! through a congested spine), so jitter does not keep a healthy host out of a job while
//! a real fault does. A test that errored fails; one whose bandwidth or line rate is
//! unknown is not judged (cannot tell).
//!
//! Then, on each rail separately (rank k of every host is its own fabric plane):
//! - a NIC is named bad only when it fails (either direction) against at least two
//!   partners whose other tests pass (tests against NICs already named bad left out:
//!   naming repeats until nothing changes, so two bad NICs that share a partner are both
//!   found); it is said whether it fails sending, receiving or both;
//! - a host whose every tested rail (at least two) is named bad is named a bad host;
//! - a port that is not ACTIVE is named down;
//! - a failure no named NIC explains: one direction failing while the reverse passes is
//!   a slow direction, named with both ends (with two hosts that is all that can be
//!   said); both directions failing, a test not judged, a planned test without a result
//!   or a NIC never tested is "cannot tell", saying why.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::rails::{Endpoint, HostRails, Plan, Untested};

/// The pass criteria.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// The share of the line rate a test must reach (0 < share ≤ 1).
    pub min_share: f64,
    /// The latency a test may not exceed, in µs.
    pub max_latency_us: f64,
}

pub const DEFAULT_MIN_SHARE: f64 = 0.90;
pub const DEFAULT_MAX_LATENCY_US: f64 = 100.0;

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_share: DEFAULT_MIN_SHARE,
            max_latency_us: DEFAULT_MAX_LATENCY_US,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ThresholdsError {
    #[error("minimum bandwidth share {0} is not a fraction above 0 and at most 1 (0.9 is 90 % of the line rate)")]
    Share(f64),
    #[error("maximum latency {0} µs is not a positive number of microseconds")]
    Latency(f64),
}

impl Thresholds {
    pub fn new(min_share: f64, max_latency_us: f64) -> Result<Thresholds, ThresholdsError> {
        if !(min_share > 0.0 && min_share <= 1.0) {
            return Err(ThresholdsError::Share(min_share));
        }
        if !(max_latency_us.is_finite() && max_latency_us > 0.0) {
            return Err(ThresholdsError::Latency(max_latency_us));
        }
        Ok(Thresholds {
            min_share,
            max_latency_us,
        })
    }
}

/// One test's result: `from` wrote into `to` on rail `rank` in `round`. Each host
/// measures only the tests it drives; the verdict needs every host's (see
/// [`crate::results`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestResult {
    pub round: usize,
    pub rank: usize,
    pub from: Endpoint,
    pub to: Endpoint,
    pub bandwidth_gbps: Option<f64>,
    pub latency_us: Option<f64>,
    /// The rate the path can carry: the slower of the two ports' line rates.
    pub line_rate_gbps: Option<f64>,
    /// Why the test could not run or finish.
    pub error: Option<String>,
}

/// One test's judgement.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Judgement {
    Pass,
    Fail { reasons: Vec<String> },
    Unknown { why: String },
}

/// A result with its judgement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judged {
    #[serde(flatten)]
    pub result: TestResult,
    /// Bandwidth over line rate, when both are known.
    pub share: Option<f64>,
    #[serde(flatten)]
    pub judgement: Judgement,
}

/// Which of a bad NIC's directions fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailedDirection {
    Sending,
    Receiving,
    Both,
}

/// What the sweep concludes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
pub enum Finding {
    /// Every tested rail of the host is bad.
    BadHost {
        host: String,
        nics: Vec<String>,
        partners: Vec<String>,
    },
    BadNic {
        host: String,
        nic: String,
        rank: usize,
        /// The partners it failed against whose other tests pass.
        partners: Vec<String>,
        direction: FailedDirection,
    },
    /// The port is not ACTIVE: never tested.
    NicDown {
        host: String,
        nic: String,
        rank: usize,
    },
    SlowDirection {
        rank: usize,
        from: Endpoint,
        to: Endpoint,
        why: String,
    },
    /// Something failed or could not be judged and cannot be pinned on anyone.
    Inconclusive { why: String },
}

impl Finding {
    /// A NIC, host or direction is named.
    pub fn named(&self) -> bool {
        !matches!(self, Finding::Inconclusive { .. })
    }
}

/// The sweep's outcome (and exit status: 0, 1, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    CannotTell,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub status: Status,
    pub findings: Vec<Finding>,
    pub thresholds: Thresholds,
    pub tests: Vec<Judged>,
    pub untested: Vec<Untested>,
}

/// A rate in Gb/s with `decimals` decimals, or three significant digits below 1 Gb/s
/// (a throttled or software link: "0.0 Gb/s" would say nothing).
pub fn gbps(v: f64, decimals: usize) -> String {
    if v.abs() >= 1.0 || v == 0.0 {
        format!("{v:.decimals$}")
    } else {
        let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
        format!("{v:.digits$}")
    }
}

/// One test against the thresholds.
pub fn judge_test(t: &TestResult, th: &Thresholds) -> (Option<f64>, Judgement) {
    if let Some(e) = &t.error {
        return (
            None,
            Judgement::Fail {
                reasons: vec![format!("the test failed: {e}")],
            },
        );
    }
    let bad = |v: Option<f64>| v.is_some_and(|v| !v.is_finite() || v < 0.0);
    if bad(t.bandwidth_gbps) || bad(t.latency_us) || bad(t.line_rate_gbps) {
        return (
            None,
            Judgement::Unknown {
                why: "a measurement is not a non-negative number".into(),
            },
        );
    }
    let mut reasons = Vec::new();
    let mut unknown = None;
    let share = match (t.bandwidth_gbps, t.line_rate_gbps) {
        (Some(bw), Some(line)) if line > 0.0 => Some(bw / line),
        (None, _) => {
            unknown = Some("no bandwidth measured".to_string());
            None
        }
        _ => {
            unknown = Some("the line rate is unknown: the share cannot be judged".into());
            None
        }
    };
    if let (Some(s), Some(bw), Some(line)) = (share, t.bandwidth_gbps, t.line_rate_gbps) {
        if s < th.min_share {
            reasons.push(format!(
                "{} Gb/s is {:.0} % of the line rate {} Gb/s (at least {:.0} % asked)",
                gbps(bw, 1),
                s * 100.0,
                gbps(line, 0),
                th.min_share * 100.0
            ));
        }
    }
    if let Some(l) = t.latency_us.filter(|l| *l > th.max_latency_us) {
        reasons.push(format!(
            "latency {l:.1} µs is above {:.1} µs",
            th.max_latency_us
        ));
    }
    let j = match (reasons.is_empty(), unknown) {
        (false, _) => Judgement::Fail { reasons },
        (true, Some(why)) => Judgement::Unknown { why },
        (true, None) => Judgement::Pass,
    };
    (share, j)
}

/// A NIC of the sweep: (rank, host).
type Node = (usize, String);

/// The tests each NIC took part in, by index.
fn by_node(tests: &[Judged]) -> BTreeMap<Node, Vec<usize>> {
    let mut m: BTreeMap<Node, Vec<usize>> = BTreeMap::new();
    for (i, t) in tests.iter().enumerate() {
        let r = &t.result;
        m.entry((r.rank, r.from.host.clone())).or_default().push(i);
        m.entry((r.rank, r.to.host.clone())).or_default().push(i);
    }
    m
}

fn other_end<'a>(t: &'a TestResult, host: &str) -> &'a str {
    if t.from.host == host {
        &t.to.host
    } else {
        &t.from.host
    }
}

fn failed(j: &Judged) -> bool {
    matches!(j.judgement, Judgement::Fail { .. })
}

/// The NICs named bad, each with the partners that bear witness, until nothing changes.
fn name_bad_nics(
    tests: &[Judged],
    nodes: &BTreeMap<Node, Vec<usize>>,
) -> BTreeMap<Node, Vec<String>> {
    let mut named: BTreeMap<Node, Vec<String>> = BTreeMap::new();
    loop {
        let mut changed = false;
        for ((rank, host), idx) in nodes {
            let me = (*rank, host.clone());
            if named.contains_key(&me) {
                continue;
            }
            let failing: BTreeSet<&str> = idx
                .iter()
                .map(|i| &tests[*i])
                .filter(|t| failed(t))
                .map(|t| other_end(&t.result, host))
                .filter(|p| !named.contains_key(&(*rank, p.to_string())))
                .collect();
            let witnesses: Vec<String> = failing
                .into_iter()
                .filter(|p| {
                    let theirs = nodes.get(&(*rank, p.to_string())).map_or(&[][..], |v| v);
                    let others: Vec<&Judged> = theirs
                        .iter()
                        .map(|i| &tests[*i])
                        .filter(|t| {
                            let o = other_end(&t.result, p);
                            o != host && !named.contains_key(&(*rank, o.to_string()))
                        })
                        .collect();
                    !others.is_empty() && others.iter().all(|t| t.judgement == Judgement::Pass)
                })
                .map(str::to_string)
                .collect();
            if witnesses.len() >= 2 {
                named.insert(me, witnesses);
                changed = true;
            }
        }
        if !changed {
            return named;
        }
    }
}

fn direction(tests: &[Judged], idx: &[usize], host: &str) -> FailedDirection {
    let fails = idx.iter().map(|i| &tests[*i]).filter(|t| failed(t));
    let (mut send, mut recv) = (false, false);
    for t in fails {
        if t.result.from.host == host {
            send = true;
        } else {
            recv = true;
        }
    }
    match (send, recv) {
        (true, false) => FailedDirection::Sending,
        (false, true) => FailedDirection::Receiving,
        _ => FailedDirection::Both,
    }
}

/// Judges `results` of the sweep `plan` over `rails`.
pub fn judge(plan: &Plan, rails: &[HostRails], results: &[TestResult], th: &Thresholds) -> Verdict {
    let tests: Vec<Judged> = results
        .iter()
        .map(|r| {
            let (share, judgement) = judge_test(r, th);
            Judged {
                result: r.clone(),
                share,
                judgement,
            }
        })
        .collect();
    let nodes = by_node(&tests);
    let named = name_bad_nics(&tests, &nodes);
    let mut findings = named_findings(&tests, &nodes, &named, rails);
    findings.extend(unexplained(plan, rails, &tests, &nodes, &named));
    let status = if findings.iter().any(Finding::named) {
        Status::Fail
    } else if findings.is_empty() {
        Status::Pass
    } else {
        Status::CannotTell
    };
    Verdict {
        status,
        findings,
        thresholds: *th,
        tests,
        untested: plan.untested.clone(),
    }
}

fn nic_name(tests: &[Judged], idx: &[usize], host: &str) -> String {
    idx.first()
        .map(|i| {
            let r = &tests[*i].result;
            if r.from.host == host {
                r.from.nic.clone()
            } else {
                r.to.nic.clone()
            }
        })
        .unwrap_or_default()
}

/// Bad hosts, bad NICs (those of bad hosts folded into them) and down ports.
fn named_findings(
    tests: &[Judged],
    nodes: &BTreeMap<Node, Vec<usize>>,
    named: &BTreeMap<Node, Vec<String>>,
    rails: &[HostRails],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let hosts: BTreeSet<&String> = nodes.keys().map(|(_, h)| h).collect();
    let mut bad_hosts = BTreeSet::new();
    for h in hosts {
        let tested: Vec<&Node> = nodes.keys().filter(|(_, x)| x == h).collect();
        if tested.len() >= 2 && tested.iter().all(|n| named.contains_key(*n)) {
            bad_hosts.insert(h.clone());
            let partners: BTreeSet<String> = tested
                .iter()
                .flat_map(|n| named[*n].iter().cloned())
                .collect();
            out.push(Finding::BadHost {
                host: h.clone(),
                nics: tested
                    .iter()
                    .map(|n| nic_name(tests, &nodes[*n], h))
                    .collect(),
                partners: partners.into_iter().collect(),
            });
        }
    }
    for ((rank, host), partners) in named {
        if bad_hosts.contains(host) {
            continue;
        }
        let idx = &nodes[&(*rank, host.clone())];
        out.push(Finding::BadNic {
            host: host.clone(),
            nic: nic_name(tests, idx, host),
            rank: *rank,
            partners: partners.clone(),
            direction: direction(tests, idx, host),
        });
    }
    for r in rails {
        for (rank, n) in r.nics.iter().enumerate().filter(|(_, n)| !n.up) {
            out.push(Finding::NicDown {
                host: r.host.clone(),
                nic: n.name.clone(),
                rank,
            });
        }
    }
    out
}

/// Whether every test of `host` on `rank` other than those with `except` passes (and
/// there is one).
fn others_pass(
    tests: &[Judged],
    nodes: &BTreeMap<Node, Vec<usize>>,
    rank: usize,
    host: &str,
    except: &str,
) -> bool {
    let others: Vec<&Judged> = nodes
        .get(&(rank, host.to_string()))
        .map_or(&[][..], |v| v)
        .iter()
        .map(|i| &tests[*i])
        .filter(|t| other_end(&t.result, host) != except)
        .collect();
    !others.is_empty() && others.iter().all(|t| t.judgement == Judgement::Pass)
}

/// What no named NIC explains: slow directions, and what cannot be told.
fn unexplained(
    plan: &Plan,
    rails: &[HostRails],
    tests: &[Judged],
    nodes: &BTreeMap<Node, Vec<usize>>,
    named: &BTreeMap<Node, Vec<String>>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let explained = |r: &TestResult| {
        named.contains_key(&(r.rank, r.from.host.clone()))
            || named.contains_key(&(r.rank, r.to.host.clone()))
    };
    let find = |rank: usize, from: &str, to: &str| {
        tests
            .iter()
            .find(|t| t.result.rank == rank && t.result.from.host == from && t.result.to.host == to)
    };
    let mut seen_pairs = BTreeSet::new();
    for t in tests.iter().filter(|t| !explained(&t.result)) {
        let r = &t.result;
        match &t.judgement {
            Judgement::Pass => {}
            Judgement::Unknown { why } => out.push(Finding::Inconclusive {
                why: format!("{} → {} (rail {}): not judged: {why}", r.from, r.to, r.rank),
            }),
            Judgement::Fail { reasons } => {
                let reverse = find(r.rank, &r.to.host, &r.from.host);
                match reverse.map(|x| &x.judgement) {
                    Some(Judgement::Pass) => {
                        let clean = others_pass(tests, nodes, r.rank, &r.from.host, &r.to.host)
                            && others_pass(tests, nodes, r.rank, &r.to.host, &r.from.host);
                        let why = if clean {
                            format!("{}; the reverse passes and both ends pass with their other partners: the path in this direction (a cable, optic or switch port one way) is suspect", reasons.join("; "))
                        } else {
                            format!("{}; the reverse passes: which end (the sender's transmit or the receiver's receive path) or the link between cannot be told without more partners", reasons.join("; "))
                        };
                        out.push(Finding::SlowDirection {
                            rank: r.rank,
                            from: r.from.clone(),
                            to: r.to.clone(),
                            why,
                        });
                    }
                    Some(Judgement::Fail { .. }) => {
                        let key = (
                            r.rank,
                            r.from.host.clone().min(r.to.host.clone()),
                            r.from.host.clone().max(r.to.host.clone()),
                        );
                        if seen_pairs.insert(key) {
                            out.push(Finding::Inconclusive {
                                why: format!(
                                    "{} ↔ {} (rail {}) fails both ways ({}), and neither end fails against two partners whose other tests pass: which end is at fault cannot be told (with two hosts there is only one partner; test each against a third host)",
                                    r.from, r.to, r.rank, reasons.join("; ")
                                ),
                            });
                        }
                    }
                    // One direction tested: nothing is said of the other.
                    other => {
                        let reverse = match other {
                            Some(Judgement::Unknown { why }) => format!("was not judged ({why})"),
                            _ => "has no result".to_string(),
                        };
                        out.push(Finding::Inconclusive {
                            why: format!(
                                "{} → {} (rail {}) fails ({}); the reverse, {} → {}, {reverse}: which end is at fault cannot be told from one direction",
                                r.from, r.to, r.rank, reasons.join("; "), r.to.host, r.from.host
                            ),
                        });
                    }
                }
            }
        }
    }
    out.extend(missing(plan, rails, tests));
    out
}

/// Planned tests without a result, and ACTIVE NICs that no planned test reaches.
fn missing(plan: &Plan, rails: &[HostRails], tests: &[Judged]) -> Vec<Finding> {
    let mut out: Vec<Finding> = plan
        .unknown_hosts
        .iter()
        .map(|h| Finding::Inconclusive {
            why: format!(
                "{h}: its NICs are not known (no results from it?): its tests cannot be judged"
            ),
        })
        .collect();
    let done: BTreeSet<(usize, usize, &str, &str)> = tests
        .iter()
        .map(|t| {
            let r = &t.result;
            (r.round, r.rank, r.from.host.as_str(), r.to.host.as_str())
        })
        .collect();
    for p in &plan.tests {
        if !done.contains(&(p.round, p.rank, p.from.host.as_str(), p.to.host.as_str())) {
            out.push(Finding::Inconclusive {
                why: format!(
                    "{} → {} (rail {}, round {}): no result",
                    p.from, p.to, p.rank, p.round
                ),
            });
        }
    }
    let reached: BTreeSet<(usize, &str)> = plan
        .tests
        .iter()
        .flat_map(|p| [(p.rank, p.from.host.as_str()), (p.rank, p.to.host.as_str())])
        .collect();
    for h in rails {
        for (rank, n) in h.nics.iter().enumerate() {
            if n.up && !reached.contains(&(rank, h.host.as_str())) {
                out.push(Finding::Inconclusive {
                    why: format!(
                        "{}/{} (rail {rank}) was never tested: no partner has an ACTIVE port at that rank",
                        h.host, n.name
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::gbps;

    #[test]
    fn rates_below_one_gbps_keep_three_significant_digits() {
        assert_eq!(gbps(120.04, 1), "120.0");
        assert_eq!(gbps(400.0, 0), "400");
        assert_eq!(gbps(0.0098, 1), "0.00980");
        assert_eq!(gbps(0.215, 1), "0.215");
        assert_eq!(gbps(0.0, 1), "0.0");
        assert_eq!(gbps(1e-300, 1), "0.000000000");
    }
}
