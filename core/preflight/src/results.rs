//! One host's results as JSON lines (`{"rails": HostRails}` first: the host and its NICs
//! in rank order, then `{"test": TestResult}` a line), and every host's lines read back
//! for the verdict. No host sees the whole sweep: it measures the tests it
//! drives, while a NIC is named bad only by its partners' other tests. So each host
//! writes its lines, and the verdict reads all of them (the job's hosts' output gathered
//! by `srun`, or files on a shared directory).
//!
//! Reading is strict: an unknown key, a missing one or a value of the wrong type is an
//! error naming the line; blank lines and `#` comments are skipped; a test given twice
//! (the same round, rail and ends) or a host's rails given twice is refused, never counted
//! twice. A host whose rails line is missing is one the verdict cannot judge (see
//! `Plan::unknown_hosts`).
//!
//! The verdict is about the hosts of one job: a line that names a host outside its list,
//! or a test that its schedule never paired (a sweep over another list, `--all-pairs`
//! or not), is refused with the file, the line and the host, not skipped. A results
//! directory can hold other jobs' files, and their tests judged with this job's would
//! blame its hosts (two strangers failing into one NIC name it bad); skipping them
//! silently would hide that the files given are not this job's.
//!
//! A host's lines are about that host: each test line is one the host of the rails line
//! above it drove (`from`), and a test before any rails line is refused. A file that
//! carries tests another host drove (`ha.jsonl` with `hb → ha` lines, written by anyone
//! who can write `ha`'s file) would have `ha`'s file speak for `hb` and blame a NIC on
//! the word of a host that did not measure it. Several hosts' lines one after another
//! (`srun`'s gathered output) read as each section's host's.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::rails::HostRails;
use crate::schedule::Schedule;
use crate::verdict::TestResult;

/// One line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    Rails(HostRails),
    Test(TestResult),
}

/// Every host's rails and results, as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gathered {
    pub rails: Vec<HostRails>,
    pub results: Vec<TestResult>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResultsError {
    #[error("{source_name} line {line}: not a preflight test result: {why}")]
    Line {
        source_name: String,
        line: usize,
        why: String,
    },
    #[error("{source_name} line {line}: the rails of {host} are given twice")]
    RailsTwice {
        source_name: String,
        line: usize,
        host: String,
    },
    #[error("{source_name} line {line}: the test {from} → {to} (rail {rank}, round {round}) is given twice")]
    Twice {
        source_name: String,
        line: usize,
        from: String,
        to: String,
        rank: usize,
        round: usize,
    },
    /// `test`: `FROM → TO (rail K, round R)`.
    #[error("{source_name} line {line}: the test {test} was driven by {driver}, not by {host} whose lines these are (a test is reported by the host that drove it)")]
    NotItsHosts {
        source_name: String,
        line: usize,
        test: String,
        driver: String,
        host: String,
    },
    #[error("{source_name} line {line}: a test before any rails line: the lines of a host start with its rails")]
    NoRails { source_name: String, line: usize },
    #[error("{source_name} line {line}: {host:?} is not in the host list: the verdict is about this job's hosts (a file of another job?)")]
    Stranger {
        source_name: String,
        line: usize,
        host: String,
    },
    #[error("{source_name} line {line}: the test {from} → {to} (rail {rank}, round {round}) is not one of this sweep's: its schedule does not pair them in that round (judge with the sweep's host list, and its --all-pairs)")]
    NotScheduled {
        source_name: String,
        line: usize,
        from: String,
        to: String,
        rank: usize,
        round: usize,
    },
}

/// A host's rails and the results it measured, as JSON lines.
pub fn to_lines(rails: &HostRails, results: &[TestResult]) -> String {
    let mut out = String::new();
    let lines =
        std::iter::once(Line::Rails(rails.clone())).chain(results.iter().cloned().map(Line::Test));
    for l in lines {
        // Strings, numbers and options: serializing cannot fail.
        out.push_str(&serde_json::to_string(&l).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// The lines of `text` that are not blank or `#` comments, each with its index (from 0),
/// parsed.
fn parsed_lines<'a>(
    source_name: &'a str,
    text: &'a str,
) -> impl Iterator<Item = Result<(usize, Line), ResultsError>> + 'a {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(move |(i, l)| {
            serde_json::from_str(l)
                .map(|parsed| (i, parsed))
                .map_err(|e| ResultsError::Line {
                    source_name: source_name.to_string(),
                    line: i + 1,
                    why: e.to_string(),
                })
        })
}

/// The hosts the lines of `text` name (a rails line's host, a test's two ends), added to
/// `into`: a sweep's host list when none is given, since every host's partners name it
/// (a host only its own lost file would have named is missing: no test of its is
/// judged). Errors name the line, as [`read_lines`]'s do.
pub fn hosts_named(
    source_name: &str,
    text: &str,
    into: &mut BTreeSet<String>,
) -> Result<(), ResultsError> {
    for got in parsed_lines(source_name, text) {
        match got?.1 {
            Line::Rails(r) => {
                into.insert(r.host);
            }
            Line::Test(t) => {
                into.insert(t.from.host);
                into.insert(t.to.host);
            }
        }
    }
    Ok(())
}

/// The lines of `text` (named `source_name` in errors), added to `into`: only those of
/// `schedule`'s hosts and tests.
pub fn read_lines(
    schedule: &Schedule,
    source_name: &str,
    text: &str,
    into: &mut Gathered,
) -> Result<(), ResultsError> {
    let mut seen: BTreeSet<(usize, usize, String, String)> = into
        .results
        .iter()
        .map(|r| (r.round, r.rank, r.from.to_string(), r.to.to_string()))
        .collect();
    // The host whose lines these are: the last rails line's.
    let mut host: Option<String> = None;
    for got in parsed_lines(source_name, text) {
        let (i, parsed) = got?;
        of_this_sweep(schedule, &parsed, source_name, i + 1)?;
        match parsed {
            Line::Rails(r) => {
                if into.rails.iter().any(|x| x.host == r.host) {
                    return Err(ResultsError::RailsTwice {
                        source_name: source_name.to_string(),
                        line: i + 1,
                        host: r.host,
                    });
                }
                host = Some(r.host.clone());
                into.rails.push(r);
            }
            Line::Test(r) => {
                driven_by(host.as_deref(), &r, source_name, i + 1)?;
                let key = (r.round, r.rank, r.from.to_string(), r.to.to_string());
                if !seen.insert(key) {
                    return Err(ResultsError::Twice {
                        source_name: source_name.to_string(),
                        line: i + 1,
                        from: r.from.to_string(),
                        to: r.to.to_string(),
                        rank: r.rank,
                        round: r.round,
                    });
                }
                into.results.push(r);
            }
        }
    }
    Ok(())
}

/// Whether `test` (line `at` of `source_name`) was driven by `host`, the host whose lines
/// these are.
fn driven_by(
    host: Option<&str>,
    test: &TestResult,
    source_name: &str,
    at: usize,
) -> Result<(), ResultsError> {
    match host {
        None => Err(ResultsError::NoRails {
            source_name: source_name.to_string(),
            line: at,
        }),
        Some(h) if h == test.from.host => Ok(()),
        Some(h) => Err(ResultsError::NotItsHosts {
            source_name: source_name.to_string(),
            line: at,
            test: format!(
                "{} → {} (rail {}, round {})",
                test.from, test.to, test.rank, test.round
            ),
            driver: test.from.host.clone(),
            host: h.to_string(),
        }),
    }
}

/// Whether `line` (line `at` of `source_name`) is about `schedule`'s sweep: its hosts
/// are in the list, and its test is one of a pair the schedule makes in that round.
fn of_this_sweep(
    schedule: &Schedule,
    line: &Line,
    source_name: &str,
    at: usize,
) -> Result<(), ResultsError> {
    let index = |host: &str| {
        schedule.index(host).map_err(|_| ResultsError::Stranger {
            source_name: source_name.to_string(),
            line: at,
            host: host.to_string(),
        })
    };
    match line {
        Line::Rails(r) => index(&r.host).map(|_| ()),
        Line::Test(t) => {
            let (from, to) = (index(&t.from.host)?, index(&t.to.host)?);
            if t.round < schedule.rounds() && schedule.partner(from, t.round) == Some(to) {
                return Ok(());
            }
            Err(ResultsError::NotScheduled {
                source_name: source_name.to_string(),
                line: at,
                from: t.from.to_string(),
                to: t.to.to_string(),
                rank: t.rank,
                round: t.round,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rails::{Endpoint, Nic};

    fn rails(host: &str) -> HostRails {
        HostRails {
            host: host.into(),
            nics: vec![Nic {
                name: "mlx5_3:1".into(),
                netdev: Some("ens3np0".into()),
                up: true,
                line_rate_gbps: Some(400.0),
                addr: None,
            }],
        }
    }
    use proptest::prelude::*;

    /// The two hosts of `result`'s tests, partners in their one round.
    fn sched() -> Schedule {
        Schedule::new(
            vec!["gpu01".into(), "gpu02".into()],
            crate::schedule::Mode::Default,
        )
        .unwrap()
    }

    fn result(round: usize, bw: Option<f64>, error: Option<&str>) -> TestResult {
        TestResult {
            round,
            rank: 3,
            from: Endpoint {
                host: "gpu01".into(),
                nic: "mlx5_3:1".into(),
            },
            to: Endpoint {
                host: "gpu02".into(),
                nic: "mlx5_3:1".into(),
            },
            bandwidth_gbps: bw,
            latency_us: Some(2.5),
            line_rate_gbps: Some(400.0),
            error: error.map(String::from),
        }
    }

    #[test]
    fn lines_read_back_and_faults_name_the_line() {
        let s = sched();
        let rs = vec![result(0, Some(391.5), None), {
            let mut r = result(0, None, Some("refused"));
            r.rank = 2;
            r
        }];
        let text = format!("# gpu01\n\n{}", to_lines(&rails("gpu01"), &rs));
        let mut got = Gathered::default();
        read_lines(&s, "gpu01.jsonl", &text, &mut got).unwrap();
        assert_eq!(got.results, rs);
        assert_eq!(got.rails, vec![rails("gpu01")]);
        // The same lines again, from another file: refused, not counted twice.
        let e = read_lines(&s, "again.jsonl", &text, &mut got)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "again.jsonl line 3: the rails of gpu01 are given twice");
        // The tests again, under gpu01's rails read as if for the first time.
        got.rails.clear();
        let e = read_lines(&s, "again.jsonl", &text, &mut got)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("again.jsonl line 4: the test gpu01/mlx5_3:1 → gpu02/mlx5_3:1 (rail 3, round 0) is given twice"), "{e}");
        let bad = r#"{"test":{"round":0,"rank":1,"from":{"host":"a","nic":"x"},"to":{"host":"b","nic":"y"},"bandwidth_gbps":1,"latency_us":null,"line_rate_gbps":null,"error":null,"extra":1}}"#;
        let e = read_lines(&s, "h.jsonl", &format!("\n{bad}"), &mut Gathered::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("h.jsonl line 2: not a preflight test result: unknown field `extra`"),
            "{e}"
        );
        let e = read_lines(
            &s,
            "h.jsonl",
            r#"{"test":{"round":-1}}"#,
            &mut Gathered::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 1") && e.contains("-1"), "{e}");
        let e = read_lines(&s, "h.jsonl", r#"{"round":1}"#, &mut Gathered::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1") && e.contains("round"), "{e}");
    }

    /// Lines of hosts outside the list, or of a pair the schedule does not make in that
    /// round, are refused with the file, the line and the host.
    #[test]
    fn lines_of_other_sweeps_are_refused_naming_them() {
        let s = Schedule::new(
            ["gpu01", "gpu02", "gpu03", "gpu04"]
                .map(String::from)
                .to_vec(),
            crate::schedule::Mode::Default,
        )
        .unwrap();
        let e = read_lines(
            &s,
            "job41/gpu09.jsonl",
            &to_lines(&rails("gpu09"), &[]),
            &mut Gathered::default(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "job41/gpu09.jsonl line 1: \"gpu09\" is not in the host list: the verdict is about this job's hosts (a file of another job?)");
        let mut stray = result(0, Some(100.0), None);
        stray.to.host = "gpu09".into();
        let text = format!(
            "# a test into a stranger\n{}",
            to_lines(&rails("gpu01"), &[stray])
        );
        let mut got = Gathered::default();
        let e = read_lines(&s, "gpu01.jsonl", &text, &mut got)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("gpu01.jsonl line 3: \"gpu09\" is not in the host list"),
            "{e}"
        );
        // Nothing of a refused line is kept.
        assert!(got.results.is_empty());
        // gpu01's partner in round 0 is one host; the others are not.
        let p = s.partner(0, 0).unwrap();
        let o = (1..4).find(|&o| o != p).unwrap();
        let mut unpaired = result(0, Some(100.0), None);
        unpaired.to.host = s.hosts()[o].clone();
        let e = read_lines(
            &s,
            "gpu01.jsonl",
            &to_lines(&rails("gpu01"), &[unpaired]),
            &mut Gathered::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with(&format!("gpu01.jsonl line 2: the test gpu01/mlx5_3:1 → {}/mlx5_3:1 (rail 3, round 0) is not one of this sweep's", s.hosts()[o])), "{e}");
        let mut past = result(0, Some(100.0), None);
        past.to.host = s.hosts()[p].clone();
        past.round = s.rounds();
        let e = read_lines(
            &s,
            "gpu01.jsonl",
            &to_lines(&rails("gpu01"), &[past]),
            &mut Gathered::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("is not one of this sweep's"), "{e}");
    }

    /// A file is one host's: its tests are those that host drove. A test another host
    /// drove, in this host's file (ha.jsonl carrying hb → ha), is refused with the file
    /// and the line: counted, it would be judged as hb's and blame it on ha's say.
    #[test]
    fn a_test_another_host_drove_is_refused_in_this_hosts_lines() {
        let s = sched();
        let mut theirs = result(0, Some(100.0), None);
        std::mem::swap(&mut theirs.from, &mut theirs.to);
        let text = to_lines(&rails("gpu01"), &[result(0, Some(391.0), None), theirs]);
        let mut got = Gathered::default();
        let e = read_lines(&s, "gpu01.jsonl", &text, &mut got)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "gpu01.jsonl line 3: the test gpu02/mlx5_3:1 → gpu01/mlx5_3:1 (rail 3, round 0) was driven by gpu02, not by gpu01 whose lines these are (a test is reported by the host that drove it)");
        // A test before any rails line: whose lines these are is not known.
        let tests_only: String = text
            .lines()
            .skip(1)
            .take(1)
            .map(|l| format!("{l}\n"))
            .collect();
        let e = read_lines(&s, "x.jsonl", &tests_only, &mut Gathered::default())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "x.jsonl line 1: a test before any rails line: the lines of a host start with its rails");
        // Several hosts' lines one after the other (srun's gathered output): each test
        // is its section's host's.
        let both = format!(
            "{}{}",
            to_lines(&rails("gpu01"), &[result(0, Some(391.0), None)]),
            to_lines(
                &rails("gpu02"),
                &[{
                    let mut r = result(0, Some(390.0), None);
                    std::mem::swap(&mut r.from, &mut r.to);
                    r
                }]
            )
        );
        let mut got = Gathered::default();
        read_lines(&s, "srun.out", &both, &mut got).unwrap();
        assert_eq!(got.results.len(), 2);
    }

    /// The hosts of every rails line and both ends of every test, whatever the
    /// schedule; a line that is no result is refused naming it.
    #[test]
    fn the_hosts_the_lines_name_are_gathered() {
        let mut far = result(0, Some(100.0), None);
        far.to.host = "gpu09".into();
        let mut named = BTreeSet::new();
        hosts_named("a", &to_lines(&rails("gpu01"), &[far]), &mut named).unwrap();
        hosts_named(
            "b",
            &format!("# b\n{}", to_lines(&rails("gpu03"), &[])),
            &mut named,
        )
        .unwrap();
        assert_eq!(
            named.into_iter().collect::<Vec<_>>(),
            ["gpu01", "gpu03", "gpu09"]
        );
        let e = hosts_named("c", "\n{\"x\":1}", &mut BTreeSet::new()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("c line 2: not a preflight test result"),
            "{e}"
        );
    }

    proptest! {
        /// Whatever a line holds: hosts or an error, never a panic.
        #[test]
        fn any_text_names_hosts_or_is_refused_without_panic(text in "\\PC*(\n\\PC*){0,3}") {
            let _ = hosts_named("x", &text, &mut BTreeSet::new());
        }

        /// Whatever a line holds: an error or results, never a panic.
        #[test]
        fn any_text_is_read_or_refused_without_panic(text in "\\PC*(\n\\PC*){0,3}") {
            let _ = read_lines(&sched(), "x", &text, &mut Gathered::default());
        }

        /// Any results go out and come back the same.
        #[test]
        fn results_round_trip(ranks in proptest::collection::vec(0usize..1000, 0..20), bw in proptest::option::of(0.0f64..1e4)) {
            let s = sched();
            let mut rs: Vec<TestResult> = ranks.into_iter().collect::<BTreeSet<_>>().into_iter().map(|k| TestResult { rank: k, ..result(0, bw, None) }).collect();
            rs.iter_mut().enumerate().for_each(|(i, r)| r.error = (i % 3 == 0).then(|| format!("e\"{i}\n")));
            let mut g = Gathered::default();
            read_lines(&s, "x", &to_lines(&rails("gpu01"), &rs), &mut g).unwrap();
            let mut got = g.results;
            // serde_json reads a float back to within the last bit (its exact reading is
            // a feature the workspace does not turn on): equal up to that.
            prop_assert_eq!(got.len(), rs.len());
            for (g, r) in got.iter_mut().zip(&rs) {
                if let (Some(a), Some(b)) = (g.bandwidth_gbps, r.bandwidth_gbps) {
                    prop_assert!((a - b).abs() <= b.abs() * 1e-12, "{a} vs {b}");
                    g.bandwidth_gbps = r.bandwidth_gbps;
                }
            }
            prop_assert_eq!(got, rs);
        }
    }
}
