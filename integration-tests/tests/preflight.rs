//! `rocewatch preflight` through the binary: `--plan` on a fixture tree (this host's part
//! of the schedule, its rails in `env`'s order), `--judge` on results written as each host
//! would write them (a clean sweep, one bad NIC, a host that sent nothing), and the
//! sweep whose partner never comes.

use std::path::Path;

use rocewatch_preflight as pf;

use crate::support::*;

fn hosts_file(dir: &Path, hosts: &[&str]) -> String {
    let p = dir.join("hosts");
    std::fs::write(&p, format!("# the job's hosts\n{}\n", hosts.join("\n"))).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn plan_shows_this_hosts_partners_roles_and_rails() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &["node03", "node01", "node02"]);
    let root = fixture("mlx5-roce-dual-port");
    let args = [
        "preflight",
        "--hosts",
        &hosts,
        "--this-host",
        "node02",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--plan",
    ];
    let o = rocewatch(&args, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "node02: 3 hosts, 3 rounds; rails (rank: NIC): 0: mlx5_0:1, 1: mlx5_1:1\n\
         round 0 first: writes into node03 on rails 0,1\n\
         round 0 then: is written by node03 on rails 0,1\n\
         round 1: no partner (odd number of hosts): idle\n\
         round 2 first: is written by node01 on rails 0,1\n\
         round 2 then: writes into node01 on rails 0,1\n"
    );
    // A port that is not ACTIVE keeps its rank (the ranks after it stay on their rail)
    // and is left out of the tests.
    let ib = fixture("ib-hca");
    let o = rocewatch(
        &[
            "preflight",
            "--host-list",
            "a,b",
            "--this-host",
            "b",
            "--sysfs-root",
            ib.to_str().unwrap(),
            "--plan",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "b: 2 hosts, 1 rounds; rails (rank: NIC): 0: mlx4_0:1, 1: mlx4_0:2 (not ACTIVE)\n\
         round 0 first: is written by a on rails 0\n\
         round 0 then: writes into a on rails 0\n"
    );
    // A host the list lacks is refused, naming it.
    let mut bad = args.to_vec();
    bad[4] = "node09";
    let o = rocewatch(&bad, &[]);
    // Errors exit 2, as every command's do (main.rs): cannot tell.
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("\"node09\" is not in the host list"),
        "{}",
        stderr(&o)
    );
}

/// The sweep against a partner that never comes: the driving step gives up after the
/// patience and records each rail's test as failed with why, the serving step goes on
/// after its wait, the lines name this host's rails and the failed tests, exit 1.
#[test]
fn a_sweep_whose_partner_never_comes_fails_its_tests_saying_why() {
    let root = fixture("mlx5-roce-dual-port");
    let args = [
        "preflight",
        "--host-list",
        "pf-a.invalid,pf-b.invalid",
        "--this-host",
        "pf-a.invalid",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--control-port",
        "28621",
        "--tcp-port",
        "28640",
        "--patience",
        "1s",
        "--duration",
        "1s",
        "--probes",
        "1",
    ];
    let o = rocewatch(&args, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "the rails, then one test per rail: {out}");
    assert_eq!(lines[0]["rails"]["host"], "pf-a.invalid", "{out}");
    for t in &lines[1..] {
        let e = t["test"]["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("cannot reach pf-b.invalid's preflight on TCP port 28621"),
            "{out}"
        );
    }
    assert!(
        stderr(&o).contains("FAIL: the test failed"),
        "{}",
        stderr(&o)
    );
}

/// `--out` names a file an earlier run left (or a link): refused before the sweep, so the
/// host's tests are not run and thrown away; a directory gets HOST.jsonl, made once.
#[test]
fn an_out_file_that_exists_is_refused_before_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("mlx5-roce-dual-port");
    let _built = artifacts();
    let run = |out: &std::path::Path| {
        let started = std::time::Instant::now();
        let o = rocewatch(
            &[
                "preflight",
                "--host-list",
                "pf-a.invalid,pf-b.invalid",
                "--this-host",
                "pf-a.invalid",
                "--sysfs-root",
                root.to_str().unwrap(),
                "--control-port",
                "28623",
                "--tcp-port",
                "28660",
                "--patience",
                "5s",
                "--duration",
                "1s",
                "--probes",
                "1",
                "--out",
                out.to_str().unwrap(),
            ],
            &[],
        );
        (o, started.elapsed())
    };
    let left = dir.path().join("pf-a.invalid.jsonl");
    std::fs::write(&left, "an earlier run\n").unwrap();
    for out in [left.clone(), dir.path().to_path_buf()] {
        let (o, took) = run(&out);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot create it (an existing file is never overwritten)"),
            "{}",
            stderr(&o)
        );
        // Refused at once: the sweep (5 s of patience for an absent partner) never ran.
        assert!(took < std::time::Duration::from_secs(3), "{took:?}");
    }
    assert_eq!(std::fs::read_to_string(&left).unwrap(), "an earlier run\n");
    // A link is refused too, even to a file that does not exist.
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
    let (o, _) = run(&link);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!dir.path().join("elsewhere").exists());

    // A sweep that fails after creating its file (its control port is taken) removes it
    // again: an empty file left behind would make the rerun refuse it.
    let v6 = std::net::TcpListener::bind("[::]:28624");
    let v4 = std::net::TcpListener::bind("0.0.0.0:28624");
    assert!(v6.is_ok() || v4.is_ok(), "the test cannot take port 28624");
    let fresh = dir.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    let o = rocewatch(
        &[
            "preflight",
            "--host-list",
            "pf-a.invalid,pf-b.invalid",
            "--this-host",
            "pf-a.invalid",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--control-port",
            "28624",
            "--out",
            fresh.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("listening on control port 28624"),
        "{}",
        stderr(&o)
    );
    let left: Vec<_> = std::fs::read_dir(&fresh).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Each host's file, as the host would write it: its rails, then the tests it drove.
fn write_results(
    dir: &Path,
    hosts: &[&str],
    bad: Option<(&str, usize)>,
    silent: Option<&str>,
) -> Vec<String> {
    let s = pf::Schedule::new(
        hosts.iter().map(|h| h.to_string()).collect(),
        pf::Mode::Default,
    )
    .unwrap();
    let rails: Vec<pf::HostRails> = s
        .hosts()
        .iter()
        .map(|h| pf::HostRails {
            host: h.clone(),
            nics: (0..2)
                .map(|k| pf::Nic {
                    name: format!("mlx5_{k}:1"),
                    netdev: Some(format!("ens{k}np0")),
                    up: true,
                    line_rate_gbps: Some(400.0),
                    addr: None,
                })
                .collect(),
        })
        .collect();
    let plan = pf::plan(&s, &rails);
    let mut files = Vec::new();
    for r in &rails {
        if Some(r.host.as_str()) == silent {
            continue;
        }
        let tests: Vec<pf::TestResult> = plan
            .tests
            .iter()
            .filter(|t| t.from.host == r.host)
            .map(|t| {
                let broken =
                    bad.is_some_and(|(h, k)| t.rank == k && (t.from.host == h || t.to.host == h));
                pf::TestResult {
                    round: t.round,
                    rank: t.rank,
                    from: t.from.clone(),
                    to: t.to.clone(),
                    bandwidth_gbps: Some(if broken { 150.0 } else { 388.0 }),
                    latency_us: Some(3.0),
                    line_rate_gbps: Some(400.0),
                    error: None,
                }
            })
            .collect();
        let p = dir.join(format!("{}.jsonl", r.host));
        std::fs::write(&p, pf::results::to_lines(r, &tests)).unwrap();
        files.push(p.to_str().unwrap().to_string());
    }
    files
}

fn judge(hosts: &str, files: &[String], extra: &[&str]) -> std::process::Output {
    let mut args = vec!["preflight", "--hosts", hosts];
    args.extend_from_slice(extra);
    args.push("--judge");
    args.extend(files.iter().map(String::as_str));
    rocewatch(&args, &[])
}

#[test]
fn judge_names_the_bad_nic_from_every_hosts_results() {
    let names = ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "gpu06"];
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &names);

    let clean = write_results(dir.path(), &names, None, None);
    let o = judge(&hosts, &clean, &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("PASS: 36 tests, every one passed"),
        "{}",
        stdout(&o)
    );

    let bad = write_results(dir.path(), &names, Some(("gpu04", 1)), None);
    let o = judge(&hosts, &bad, &[]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("FAIL: bad NIC gpu04/mlx5_1:1 (rail 1): fails both ways against"),
        "{out}"
    );
    assert!(
        out.contains("150.00") && out.contains(" 38 "),
        "the numbers: {out}"
    );
    let o = judge(&hosts, &bad, &["--json"]);
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["exit_code"], 1);
    assert_eq!(j["findings"][0]["finding"], "bad_nic");
    assert_eq!(j["findings"][0]["nic"], "mlx5_1:1");
    // A stricter bar fails every test: no one can be blamed.
    let o = judge(&hosts, &clean, &["--min-bandwidth-share", "0.99"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));

    let partial = write_results(dir.path(), &names, None, Some("gpu02"));
    std::fs::remove_file(dir.path().join("gpu02.jsonl")).unwrap();
    let o = judge(&hosts, &partial, &[]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("CANNOT TELL: gpu02: its NICs are not known"),
        "{}",
        stdout(&o)
    );

    // A file given twice is refused, naming it and the line.
    let twice = [clean[0].clone(), clean[0].clone()];
    let o = judge(&hosts, &twice, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("gpu01.jsonl line 1: the rails of gpu01 are given twice"),
        "{}",
        stderr(&o)
    );
}

/// A results directory can hold other jobs' files: lines naming a host outside this job's
/// list are refused, naming the file, the line and the host, never judged (two strangers
/// failing against gpu04 would otherwise name it a bad NIC); so is a test between two of
/// the job's hosts that this sweep's schedule never paired.
#[test]
fn judge_refuses_results_of_hosts_outside_the_list() {
    let names = ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "gpu06"];
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &names);
    let mut files = write_results(dir.path(), &names, None, None);
    // Another job's lines: gpu08 and gpu09 each pass with one host of this job and fail
    // into gpu04 on rail 1.
    let test = |from: &str, to: &str, round: usize, bw: f64| pf::TestResult {
        round,
        rank: 1,
        from: pf::Endpoint {
            host: from.into(),
            nic: "mlx5_1:1".into(),
        },
        to: pf::Endpoint {
            host: to.into(),
            nic: "mlx5_1:1".into(),
        },
        bandwidth_gbps: Some(bw),
        latency_us: Some(3.0),
        line_rate_gbps: Some(400.0),
        error: None,
    };
    let stray_tests = [
        test("gpu08", "gpu01", 0, 388.0),
        test("gpu08", "gpu04", 1, 150.0),
        test("gpu09", "gpu02", 0, 388.0),
        test("gpu09", "gpu04", 1, 150.0),
    ];
    let lines: String = pf::results::to_lines(
        &pf::HostRails {
            host: "gpu08".into(),
            nics: Vec::new(),
        },
        &stray_tests,
    )
    .lines()
    .skip(1) // the test lines only (a file whose rails line was lost)
    .map(|l| format!("{l}\n"))
    .collect();
    let stray = dir.path().join("stray.jsonl");
    std::fs::write(&stray, format!("# job 41\n{lines}")).unwrap();
    files.push(stray.to_str().unwrap().to_string());
    let o = judge(&hosts, &files, &[]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("stray.jsonl line 2: \"gpu08\" is not in the host list"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(!stdout(&o).contains("bad NIC"), "{}", stdout(&o));

    // Rails of a host the list lacks: named with the file and the line too.
    let other = dir.path().join("gpu07.jsonl");
    std::fs::write(
        &other,
        pf::results::to_lines(
            &pf::HostRails {
                host: "gpu07".into(),
                nics: Vec::new(),
            },
            &[],
        ),
    )
    .unwrap();
    let mut files = write_results(dir.path(), &names, None, None);
    files.push(other.to_str().unwrap().to_string());
    let o = judge(&hosts, &files, &[]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("gpu07.jsonl line 1: \"gpu07\" is not in the host list"),
        "{}",
        stderr(&o)
    );

    // Two hosts of the job that the schedule never paired in that round (a sweep over
    // another list of the same hosts, or judged without its --all-pairs).
    let s = pf::Schedule::new(
        names.iter().map(|h| h.to_string()).collect(),
        pf::Mode::Default,
    )
    .unwrap();
    let (a, round) = (0..s.rounds())
        .find_map(|r| {
            let p = s.partner(0, r)?;
            (0..names.len()).find(|&o| o != 0 && o != p).map(|o| (o, r))
        })
        .unwrap();
    let unpaired = dir.path().join("unpaired.jsonl");
    let line: String = pf::results::to_lines(
        &pf::HostRails {
            host: "x".into(),
            nics: Vec::new(),
        },
        &[test(&s.hosts()[0], &s.hosts()[a], round, 388.0)],
    )
    .lines()
    .nth(1)
    .unwrap()
    .to_string();
    std::fs::write(&unpaired, format!("{line}\n")).unwrap();
    let mut files = write_results(dir.path(), &names, None, None);
    files.push(unpaired.to_str().unwrap().to_string());
    let o = judge(&hosts, &files, &[]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "unpaired.jsonl line 1: the test {}/mlx5_1:1 → {}/mlx5_1:1 (rail 1, round {round}) is not one of this sweep's",
            s.hosts()[0],
            s.hosts()[a]
        )),
        "{}",
        stderr(&o)
    );
}

/// A host's file speaks for that host only: `ha.jsonl` carrying tests `hb` drove (one
/// slow `hb → ha`) while `hb.jsonl` has its rails alone is refused, naming the file and
/// the line, never judged (it blamed `hb`'s NIC on `ha`'s word).
#[test]
fn judge_refuses_tests_a_file_reports_for_another_host() {
    let names = ["ha", "hb"];
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &names);
    let files = write_results(dir.path(), &names, None, None);
    let ha = dir.path().join("ha.jsonl");
    let hb = dir.path().join("hb.jsonl");
    let hb_text = std::fs::read_to_string(&hb).unwrap();
    let mut hb_lines = hb_text.lines();
    let hb_rails = hb_lines.next().unwrap().to_string();
    // hb's tests, one made slow, moved into ha's file.
    let moved: Vec<String> = hb_lines
        .enumerate()
        .map(|(i, l)| {
            if i == 1 {
                l.replace("\"bandwidth_gbps\":388.0", "\"bandwidth_gbps\":100.0")
            } else {
                l.to_string()
            }
        })
        .collect();
    assert!(moved.len() >= 2 && moved[1].contains("100.0"), "{moved:?}");
    let ha_text = std::fs::read_to_string(&ha).unwrap();
    let first_moved = ha_text.lines().count() + 1;
    std::fs::write(&ha, format!("{ha_text}{}\n", moved.join("\n"))).unwrap();
    std::fs::write(&hb, format!("{hb_rails}\n")).unwrap();
    let o = judge(&hosts, &files, &[]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains(&format!("ha.jsonl line {first_moved}: the test hb/")),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("was driven by hb, not by ha whose lines these are"),
        "{}",
        stderr(&o)
    );
    assert!(!stdout(&o).contains("FAIL"), "{}", stdout(&o));
}

/// The control port under 40 idle connections (more than it keeps open at once, none of
/// which says hello): the real partner's hello is still answered with this host's rails
/// and its done ends the step, not an EOF that fails the step and blames this host.
#[test]
fn idle_connections_do_not_keep_the_partner_off_the_control_port() {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    let root = fixture("mlx5-roce-dual-port");
    let _built = artifacts();
    // This host is the later of the two: it serves the first phase, driven by the test.
    let mut child = std::process::Command::new(&artifacts().rocewatch);
    child.args([
        "preflight",
        "--host-list",
        "pf-a.invalid,pf-b.invalid",
        "--this-host",
        "pf-b.invalid",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--control-port",
        "28625",
        "--tcp-port",
        "28680",
        "--patience",
        "5s",
        "--duration",
        "1s",
        "--probes",
        "1",
    ]);
    let mut host = Spawned::start("rocewatch preflight", &mut child, None);
    let mut idle = vec![control_connection(&mut host, 28625)];
    while idle.len() < 40 {
        idle.push(TcpStream::connect("127.0.0.1:28625").unwrap());
    }
    // Accepted, each holding what it holds.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let step = r#"{"from":"pf-a.invalid","round":0,"phase":"forward"}"#;
    let mut partner = TcpStream::connect("127.0.0.1:28625").unwrap();
    partner
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    partner
        .write_all(format!("{{\"hello\":{step}}}\n").as_bytes())
        .unwrap();
    let mut reply = String::new();
    let got = BufReader::new(partner.try_clone().unwrap()).read_line(&mut reply);
    assert!(
        reply.starts_with("{\"rails\":{\"host\":\"pf-b.invalid\""),
        "the partner's hello got {got:?} {reply:?}\n{}",
        host.log()
    );
    partner
        .write_all(format!("{{\"done\":{step}}}\n").as_bytes())
        .unwrap();
    drop(idle);
    // The second phase drives into pf-a.invalid, which no one can reach: the host gives
    // that step up after its patience and exits 1 (its test failed).
    let status = host.wait_exit(std::time::Duration::from_secs(60));
    let log = host.log();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    assert!(!log.contains("ended early"), "{log}");
    assert!(!log.contains("never came to test this host"), "{log}");
}

/// `--judge DIR` without a host list (outside Slurm, after the job): the hosts are those
/// the result files name; with a list that disagrees, the hosts that differ are named.
#[test]
fn judge_reads_a_directory_and_takes_the_hosts_from_the_files() {
    let names = ["gpu01", "gpu02", "gpu03", "gpu04"];
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    write_results(&results, &names, Some(("gpu03", 0)), None);
    let o = rocewatch(
        &["preflight", "--judge", results.to_str().unwrap()],
        &[("SLURM_JOB_NODELIST", "")],
    );
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("rocewatch preflight: 4 hosts"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("FAIL: bad NIC gpu03/mlx5_0:1 (rail 0)"),
        "{}",
        stdout(&o)
    );
    // A list that lacks two of the files' hosts: both named at once, with where the
    // list came from.
    let o = rocewatch(
        &[
            "preflight",
            "--host-list",
            "gpu01,gpu02",
            "--judge",
            results.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("the results name hosts that --host-list lacks: gpu03, gpu04"),
        "{}",
        stderr(&o)
    );
    // A list with a host no file names (another job's list?): named, whatever else is
    // said of the results.
    let hosts = hosts_file(dir.path(), &["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"]);
    let o = rocewatch(
        &[
            "preflight",
            "--hosts",
            &hosts,
            "--judge",
            results.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("names hosts that no result names: gpu05"),
        "{}",
        stderr(&o)
    );
}

/// A test that failed one way whose reverse has no result is said as such, never as
/// failing both ways.
#[test]
fn judge_says_which_direction_was_tested() {
    let names = ["ha", "hb"];
    let dir = tempfile::tempdir().unwrap();
    let files = write_results(dir.path(), &names, Some(("ha", 0)), None);
    // hb's tests lost: its rails alone.
    let hb = dir.path().join("hb.jsonl");
    let rails = std::fs::read_to_string(&hb)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    std::fs::write(&hb, format!("{rails}\n")).unwrap();
    let mut args = vec!["preflight", "--judge"];
    args.extend(files.iter().map(String::as_str));
    let o = rocewatch(&args, &[]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("fails both ways"), "{out}");
    assert!(
        out.contains("ha/mlx5_0:1 → hb/mlx5_0:1 (rail 0) fails ("),
        "{out}"
    );
    assert!(out.contains("the reverse, hb → ha, has no result"), "{out}");
}

/// The args of a sweep of two unreachable hosts seen from the later one, which serves the
/// first phase (its partner never comes) and then drives into it (never reached).
fn absent_partner_args<'a>(root: &'a str, control: &'a str, tcp: &'a str) -> Vec<&'a str> {
    vec![
        "preflight",
        "--host-list",
        "pf-a.invalid,pf-b.invalid",
        "--this-host",
        "pf-b.invalid",
        "--sysfs-root",
        root,
        "--control-port",
        control,
        "--tcp-port",
        tcp,
        "--patience",
        "2s",
    ]
}

/// `--patience` bounds the wait for a partner that never comes: two steps of 2 s, not
/// the patience plus a whole test's limit (5 s of RDMA WRITE, 10 probes) each; why the
/// step took that long is said at the default log level; the table is for humans (no
/// shell quoting: `pf-a.invalid's`); on a pipe there is no progress line.
#[test]
fn patience_bounds_the_wait_for_a_partner_that_never_comes() {
    let root = fixture("mlx5-roce-dual-port");
    let _built = artifacts();
    let started = std::time::Instant::now();
    let o = rocewatch(
        &absent_partner_args(root.to_str().unwrap(), "28627", "28700"),
        &[("RUST_LOG", "")],
    );
    let took = started.elapsed();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(took < std::time::Duration::from_secs(12), "{took:?}: {err}");
    assert!(
        err.contains("rocewatch preflight: round 0 first: pf-a.invalid never came to test this host (waited 2s"),
        "{err}"
    );
    assert!(
        err.contains("cannot reach pf-a.invalid's preflight"),
        "{err}"
    );
    assert!(!err.contains("\\'"), "{err}");
    assert!(!err.contains('\r'), "a progress line on a pipe: {err:?}");
}

/// Runs `args` with its standard error on a pseudo-terminal: what it wrote there, and its
/// exit status.
fn on_a_terminal(args: &[&str], limit: std::time::Duration) -> (String, Option<i32>) {
    use std::io::Read as _;
    use std::os::fd::FromRawFd as _;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the integers given; no name, termios
    // or size.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are fresh from openpty and owned here alone.
    let (mut master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    };
    let mut child = std::process::Command::new(&artifacts().rocewatch)
        .args(args)
        .current_dir(root())
        .stdout(std::process::Stdio::null())
        .stderr(slave)
        .spawn()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the child closed the terminal's last descriptor.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    (reader.join().unwrap(), status)
}

/// On a terminal the sweep says what it waits for while it waits: a progress line,
/// redrawn in place.
#[test]
fn a_sweep_on_a_terminal_shows_what_it_waits_for() {
    let root = fixture("mlx5-roce-dual-port");
    let _built = artifacts();
    let args = absent_partner_args(root.to_str().unwrap(), "28628", "28710");
    let (err, status) = on_a_terminal(&args, std::time::Duration::from_secs(30));
    assert_eq!(status, Some(1), "{err}");
    assert!(
        err.contains("preflight: round 0 first: waiting for pf-a.invalid to write into this host"),
        "{err:?}"
    );
    assert!(err.contains('\r'), "redrawn in place: {err:?}");
    assert!(
        err.contains("pf-a.invalid never came to test this host"),
        "{err:?}"
    );
}

/// Connects to the control port at `port`, retrying while `host` starts.
fn control_connection(host: &mut Spawned, port: u16) -> std::net::TcpStream {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => {
                s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
                    .unwrap();
                return s;
            }
            Err(_) if std::time::Instant::now() < deadline => {
                assert!(host.alive(), "preflight exited: {}", host.log());
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => panic!("the control port never opened: {e}\n{}", host.log()),
        }
    }
}

/// Says `line` on a new control connection and returns the answer's line.
fn say(host: &mut Spawned, port: u16, line: &str) -> (std::net::TcpStream, String) {
    use std::io::{BufRead, BufReader, Write};
    let mut s = control_connection(host, port);
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut reply = String::new();
    let _ = BufReader::new(s.try_clone().unwrap()).read_line(&mut reply);
    (s, reply)
}

/// With a token (`--token-file`, mode 0600) a hello without it, or with another, is
/// refused saying why and logged with the address it came from, and its done ends
/// nothing: the partner's hello with the token is still answered and its done ends the
/// step. A token file others can read is refused before the sweep.
#[test]
fn a_hello_without_the_jobs_token_is_refused_and_the_step_goes_on() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt as _;
    let root = fixture("mlx5-roce-dual-port");
    let _built = artifacts();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "job-1234-0f9e8d7c\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args = |token: &str| {
        let mut a = absent_partner_args(root.to_str().unwrap(), "28629", "28720");
        a.extend(["--duration", "1s", "--probes", "1", "--token-file"]);
        a.push(token);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let o = rocewatch(
        &args(token.to_str().unwrap())
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("mode 0644 lets others read or change the job's token"),
        "{}",
        stderr(&o)
    );
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut child = std::process::Command::new(&artifacts().rocewatch);
    // Long enough for the hellos below, however slow the machine.
    let args: Vec<String> = args(token.to_str().unwrap())
        .into_iter()
        .map(|a| if a == "2s" { "10s".into() } else { a })
        .collect();
    child.args(&args).env("RUST_LOG", "");
    let mut host = Spawned::start("rocewatch preflight", &mut child, None);
    let step = r#""from":"pf-a.invalid","round":0,"phase":"forward""#;
    let strays = [
        (format!("{{\"hello\":{{{step}}}}}"), "carries no token"),
        (
            format!("{{\"hello\":{{{step},\"token\":\"job-1234-guess\"}}}}"),
            "token is not this sweep's",
        ),
    ];
    for (hello, why) in strays {
        let (mut s, reply) = say(&mut host, 28629, &hello);
        assert!(
            reply.starts_with("{\"refused\":") && reply.contains(why),
            "{hello}: {reply:?}\n{}",
            host.log()
        );
        // Its done, were it read, would end the step.
        let _ = s.write_all(format!("{{\"done\":{{{step}}}}}\n").as_bytes());
    }
    let hello = format!("{{\"hello\":{{{step},\"token\":\"job-1234-0f9e8d7c\"}}}}");
    let (mut partner, reply) = say(&mut host, 28629, &hello);
    assert!(
        reply.starts_with("{\"rails\":{\"host\":\"pf-b.invalid\""),
        "the partner's hello got {reply:?}\n{}",
        host.log()
    );
    partner
        .write_all(format!("{{\"done\":{{{step}}}}}\n").as_bytes())
        .unwrap();
    // The second phase drives into pf-a.invalid, which no one can reach.
    let status = host.wait_exit(std::time::Duration::from_secs(90));
    let log = host.log();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    for why in ["carries no token", "token is not this sweep's"] {
        let said = log.lines().any(|l| {
            l.starts_with("rocewatch preflight: refused a hello from 127.0.0.1:")
                && l.contains("naming pf-a.invalid round 0 first: the hello")
                && l.contains(why)
        });
        assert!(said, "each refusal said with its address ({why}): {log}");
    }
    assert!(
        !log.contains("job-1234-0f9e8d7c"),
        "the token was shown: {log}"
    );
    assert!(!log.contains("ended early"), "{log}");
    assert!(!log.contains("never came to test this host"), "{log}");
    assert!(!log.contains("warning: no --token-file"), "{log}");
}
