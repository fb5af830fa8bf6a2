//! The localization rules (`configs/prometheus/rocewatch-fleet.rules.yml`) on the fleet
//! simulator's series: 1,000 hosts (racks of 1, 2, 48 and 24 to 40 hosts) on 2 rails,
//! each rail on its own leaves, each kind of fault in its own hour of a real
//! VictoriaMetrics (on the last rail where the fault has one), and a clean stretch. vmalert replays
//! the rules over all of it in steps, as it or Prometheus evaluates them live (one group
//! after the other: recording rules, suspects, alerts), writing the recorded series and
//! `ALERTS` back. Every firing alert is then checked: nothing before a fault or in the
//! clean stretch; after a fault only the injected suspect on its rail (nothing on the
//! other rails), named within two failing windows (2 minutes) and firing for the rest of
//! the scenario. Precision and recall per
//! kind, and the time one evaluation of all the rules takes, are printed for
//! docs/FLEET.md and docs/PERFORMANCE.md.
//!
//! `ROCEWATCH_FLEET_RULES_HOSTS=10000` runs it on 10,000 hosts,
//! `ROCEWATCH_FLEET_RULES_RAILS=8` on 8 rails (the faults on rail 5), and
//! `ROCEWATCH_FLEET_RULES_CLEAN_DAY=1` makes the clean stretch a whole day (both take
//! long: the suite runs 1,000 hosts and a clean 10 minutes; their figures are in
//! docs/PERFORMANCE.md); `ROCEWATCH_FLEET_RULES_BIN=target/release/rocewatch` simulates
//! with a release build (about twice as fast as the test's build: its profile already optimises the simulator's crates).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

const RULES: &str = "configs/prometheus/rocewatch-fleet.rules.yml";

/// (scenario, fault), the faults of a NIC, a link or a leaf on `rail`.
fn scenarios(rail: u8) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("clean", None),
        ("nic_down", Some(format!("nic_down:gpu00100/{rail}"))),
        ("host_overloaded", Some("host_overloaded:gpu00300".into())),
        ("tor_down", Some(format!("tor_down:leaf-r005-{rail}"))),
        ("uplink_loss", Some(format!("uplink_loss:leaf-r007-{rail}"))),
        ("ecmp_blackhole", Some("ecmp_blackhole:3".into())),
        ("link_loss", Some(format!("link_loss:gpu00200/{rail}"))),
    ]
}

/// `hosts` hosts on `rails` rails, each rail on its own leaves (rack 5's leaf of rail 1
/// is `leaf-r005-1`): racks of 1, 2 and 48 hosts, then 24 to 40.
fn topology(hosts: usize, rails: u8) -> String {
    let mut sizes = vec![1usize, 2, 48];
    let mut total: usize = sizes.iter().sum();
    let mut k = 0;
    while total < hosts {
        let n = (24 + (k * 7) % 17).min(hosts - total);
        sizes.push(n);
        total += n;
        k += 1;
    }
    let mut csv = String::from("host,rail,addr,tor\n");
    let mut h = 0;
    for (rack, n) in sizes.iter().enumerate() {
        for _ in 0..*n {
            for rail in 0..rails {
                csv.push_str(&format!(
                    "gpu{h:05},{rail},10.{rail}.{}.{},leaf-r{rack:03}-{rail}\n",
                    h / 250,
                    h % 250 + 1
                ));
            }
            h += 1;
        }
    }
    csv
}

/// Who an alert names: (kind, target, rail), from the labels the alert gives `ALERTS`.
fn suspect(metric: &Value) -> (String, String, Option<String>) {
    let get = |k: &str| metric[k].as_str().unwrap_or("?").to_string();
    let rail = metric["rail"].as_str().map(str::to_string);
    let kind = get("suspect_kind");
    let target = match kind.as_str() {
        "spine" => "fleet".to_string(),
        "tor" | "uplink" => get("peer_tor"),
        "nic" | "link" => get("peer_host"),
        _ => get("host"),
    };
    (kind, target, rail)
}

/// The suspect an injected fault on `rail` must be named as: the rail for a NIC, link,
/// ToR or uplink; none for an overloaded host or the spine.
fn expected(fault: &str, rail: u8) -> (String, String, Option<String>) {
    let (kind, target) = fault.split_once(':').unwrap();
    let target = target.split('/').next().unwrap();
    let kind = match kind {
        "nic_down" => "nic",
        "host_overloaded" => "prober",
        "tor_down" => "tor",
        "uplink_loss" => "uplink",
        "ecmp_blackhole" => "spine",
        _ => "link",
    };
    let target = if kind == "spine" { "fleet" } else { target };
    let rail = (!matches!(kind, "spine" | "prober")).then(|| rail.to_string());
    (kind.to_string(), target.to_string(), rail)
}

/// A rules group: its name, its interval, and per rule the rule itself, its expression
/// and, for an alert, its name and `for`.
struct Group {
    name: String,
    interval: u64,
    rules: Vec<Rule>,
}

struct Rule {
    yaml: serde_yaml::Value,
    expr: String,
    alert: Option<(String, u64)>,
}

fn seconds(d: &str) -> u64 {
    match d.split_at(d.len() - 1) {
        (n, "s") => n.parse().unwrap(),
        (n, "m") => n.parse::<u64>().unwrap() * 60,
        _ => panic!("{RULES}: duration {d:?}"),
    }
}

fn groups() -> Vec<Group> {
    let text = std::fs::read_to_string(root().join(RULES)).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    doc["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|g| Group {
            name: g["name"].as_str().unwrap().to_string(),
            // vmalert's and Prometheus' default evaluation interval: 1 minute.
            interval: g["interval"].as_str().map_or(60, seconds),
            rules: g["rules"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|r| Rule {
                    yaml: r.clone(),
                    expr: r["expr"].as_str().unwrap().to_string(),
                    alert: r["alert"]
                        .as_str()
                        .map(|a| (a.to_string(), r["for"].as_str().map_or(0, seconds))),
                })
                .collect(),
        })
        .collect()
}

fn rfc3339(t: u64) -> String {
    let o = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{t}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// vmalert replays one rule of `group` from `from` to `to` against VictoriaMetrics at
/// `url`, writing what it records (or `ALERTS` and `ALERTS_FOR_STATE`) back there; then
/// waits until VictoriaMetrics returns every sample vmalert says it wrote. One rule at a
/// time: vmalert replays the groups of a file in no set order and the rules of a group
/// after a fixed delay, while each rule here reads what the ones before it recorded.
fn replay(
    bin: &std::path::Path,
    dir: &std::path::Path,
    group: &Group,
    rule: &Rule,
    url: &str,
    (from, to): (u64, u64),
    client: &reqwest::blocking::Client,
) {
    let file = dir.join("rule.yml");
    let mut one = serde_yaml::Mapping::new();
    one.insert("name".into(), group.name.clone().into());
    one.insert("interval".into(), format!("{}s", group.interval).into());
    one.insert("rules".into(), vec![rule.yaml.clone()].into());
    let doc = serde_yaml::to_string(&serde_json::json!({ "groups": [one] })).unwrap();
    std::fs::write(&file, doc).unwrap();
    let o = std::process::Command::new(bin)
        .arg(format!("-rule={}", file.display()))
        .arg(format!("-datasource.url={url}"))
        .arg(format!("-remoteWrite.url={url}"))
        .arg(format!("-replay.timeFrom={}", rfc3339(from)))
        .arg(format!("-replay.timeTo={}", rfc3339(to)))
        .args([
            "-replay.disableProgressBar",
            "-replay.rulesDelay=0s",
            // Half an hour of the 30 s groups per range query: the whole span at once at
            // 10,000 hosts asks VictoriaMetrics for 7.6 GB (600,000 failing flows' series
            // of the black-holed path's hour, 741 points each), and it refuses.
            "-replay.maxDatapointsPerQuery=60",
            // The default queue (100,000 samples) drops what does not fit, silently (the
            // count below catches it); a much larger one costs a second of page zeroing
            // per run.
            "-remoteWrite.maxQueueSize=2000000",
        ])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stderr);
    let name = rule.alert.as_ref().map_or_else(
        || rule.yaml["record"].as_str().unwrap().to_string(),
        |(a, _)| a.clone(),
    );
    let tail = || log[log.len().saturating_sub(6000)..].to_string();
    assert!(
        o.status.success() && !log.contains("\terror\t"),
        "vmalert replay of {name}: {}\n--- its log (the end)\n{}",
        o.status,
        tail()
    );
    // "replay evaluation finished, generated 107126 samples"
    let generated: usize = log
        .split("generated ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("vmalert replay of {name}: no sample count\n{}", tail()));
    let selector = match &rule.alert {
        Some((a, _)) => format!("{{__name__=~\"ALERTS|ALERTS_FOR_STATE\",alertname=\"{a}\"}}"),
        None => name.clone(),
    };
    // Samples become searchable when VictoriaMetrics flushes its buffers, every few
    // seconds on its own: ask for it now (a rule takes 0.3 s instead of 10).
    let r = client
        .get(format!("{url}/internal/force_flush"))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "force_flush: {:?}", r.text());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = client
            .get(format!("{url}/api/v1/export"))
            .query(&[
                ("match[]", selector.as_str()),
                ("start", &from.to_string()),
                ("end", &(to + 3600).to_string()),
            ])
            .send()
            .unwrap()
            .text()
            .unwrap();
        let stored: usize = body
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["timestamps"].as_array().unwrap().len()
            })
            .sum();
        if stored == generated {
            return;
        }
        assert!(
            Instant::now() < deadline && stored < generated,
            "{name}: vmalert wrote {generated} samples, VictoriaMetrics has {stored}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Scenario {
    name: &'static str,
    fault: Option<String>,
    start: u64,
    secs: u64,
}

/// Faults start this long into their scenario.
const FAULT_AFTER: u64 = 240;
/// ... and their suspect must be named (the alert pending or firing) this soon after:
/// two failing windows (the agent's default `failing_window`, 60 s).
const NAMED_WITHIN: u64 = 120;

#[test]
fn fleet_rules_name_the_injected_suspect_and_nothing_else_on_1000_simulated_hosts() {
    let Some(vm_bin) = crate::otlp::vm_bin() else {
        return;
    };
    let Some(vmalert) = require(
        "vmalert",
        receiver(
            "ROCEWATCH_VMALERT",
            ".cache/victoria-metrics/usr/bin/vmalert",
            "vmalert",
        ),
    ) else {
        return;
    };
    // Seven simulations and the replay load both cores: never beside a lab boot's timing
    // comparisons.
    let _heavy = crate::lab::HEAVY.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("fleet.csv");
    let hosts: usize = std::env::var("ROCEWATCH_FLEET_RULES_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rails: u8 = std::env::var("ROCEWATCH_FLEET_RULES_RAILS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    // The faulted rail: rail 5 of eight, else the last.
    let fault_rail = rails.saturating_sub(1).min(5);
    let clean_day = std::env::var("ROCEWATCH_FLEET_RULES_CLEAN_DAY").as_deref() == Ok("1");
    std::fs::write(&topo, topology(hosts, rails)).unwrap();

    // Each scenario from the start of its own hour (the clean day its own 25), the last
    // ending an hour ago.
    let secs_of = |fault: Option<&str>| -> u64 {
        match fault {
            None if clean_day => 86_400,
            _ => 600,
        }
    };
    let all = scenarios(fault_rail);
    let hours: u64 = all
        .iter()
        .map(|(_, f)| secs_of(f.as_deref()).div_ceil(3600))
        .sum();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut at = now / 3600 * 3600 - 3600 * (hours + 1);
    let from = at;
    let mut scenarios = Vec::new();
    for (name, fault) in all {
        let secs = secs_of(fault.as_deref());
        scenarios.push(Scenario {
            name,
            fault,
            start: at,
            secs,
        });
        at += secs.div_ceil(3600) * 3600;
    }
    let to = scenarios.last().map(|s| s.start + s.secs).unwrap();

    let data = tempfile::tempdir().unwrap();
    let vm = crate::otlp::start_vm(
        &vm_bin,
        "127.0.0.1:0",
        data.path(),
        &[
            // A clean day and the hours after it are older than the 1 day kept by default.
            "-retentionPeriod=3d".to_string(),
            "-search.maxQueryDuration=10m".to_string(),
            "-search.maxUniqueTimeseries=2000000".to_string(),
        ],
    );
    let url = format!("http://{}", vm.addr);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let sim_time = Instant::now();
    for s in &scenarios {
        let out = dir.path().join(s.name);
        let mut args = vec![
            "fleet".to_string(),
            "simulate".into(),
            "--topology".into(),
            topo.display().to_string(),
            "--out".into(),
            out.display().to_string(),
            "--duration".into(),
            format!("{}s", s.secs),
            "--fault-after".into(),
            format!("{FAULT_AFTER}s"),
            "--start".into(),
            s.start.to_string(),
        ];
        if let Some(f) = &s.fault {
            args.extend(["--fault".to_string(), f.clone()]);
        }
        let o = match std::env::var_os("ROCEWATCH_FLEET_RULES_BIN") {
            Some(bin) => std::process::Command::new(bin)
                .args(&args)
                .output()
                .unwrap(),
            None => {
                let argv: Vec<&str> = args.iter().map(String::as_str).collect();
                rocewatch(&argv, &[])
            }
        };
        assert!(o.status.success(), "{}: {}", s.name, stderr(&o));
        let series = std::fs::File::open(out.join("series.prom")).unwrap();
        let r = client
            .post(format!("{url}/api/v1/import/prometheus"))
            .body(series)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}: {:?}", s.name, r.text());
        std::fs::remove_file(out.join("series.prom")).unwrap();
    }
    eprintln!(
        "simulated and loaded {} scenarios of {hosts} hosts ({} s of series) in {:.1} s",
        scenarios.len(),
        scenarios.iter().map(|s| s.secs).sum::<u64>(),
        sim_time.elapsed().as_secs_f64()
    );
    let query = |q: &str, at: u64| -> Vec<Value> {
        let body = client
            .post(format!("{url}/api/v1/query"))
            .form(&[("query", q), ("time", &at.to_string())])
            .send()
            .unwrap()
            .text()
            .unwrap();
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{q}: {body}");
        v["data"]["result"].as_array().unwrap().clone()
    };
    // Wait until the last scenario's samples are searchable.
    let deadline = Instant::now() + Duration::from_secs(120);
    while query("count(rdma_fleet_nic_info)", to - 10).is_empty() {
        assert!(
            Instant::now() < deadline,
            "VictoriaMetrics never had the series"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let groups = groups();
    let replay_time = Instant::now();
    for g in &groups {
        for r in &g.rules {
            replay(&vmalert, dir.path(), g, r, &url, (from, to), &client);
        }
    }
    let replay_secs = replay_time.elapsed().as_secs_f64();
    // `for` of each alert.
    let hold: BTreeMap<String, u64> = groups
        .iter()
        .flat_map(|g| g.rules.iter().filter_map(|r| r.alert.clone()))
        .collect();
    assert_eq!(hold.len(), 6, "one alert per kind");
    let alert_step = groups.last().unwrap().interval;

    // Every sample of ALERTS: (state, suspect, alert, time).
    let body = client
        .get(format!("{url}/api/v1/export"))
        .query(&[
            ("match[]", "ALERTS"),
            ("start", &from.to_string()),
            ("end", &to.to_string()),
        ])
        .send()
        .unwrap()
        .text()
        .unwrap();
    let mut samples = Vec::new();
    for line in body.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let m = &v["metric"];
        for t in v["timestamps"].as_array().unwrap() {
            samples.push((
                m["alertstate"].as_str().unwrap().to_string(),
                suspect(m),
                m["alertname"].as_str().unwrap().to_string(),
                t.as_u64().unwrap() / 1000,
            ));
        }
    }

    let (mut table, mut wrong) = (Vec::new(), Vec::new());
    for s in &scenarios {
        let fault_at = s.start + FAULT_AFTER;
        let end = s.start + s.secs;
        let want = s.fault.as_deref().map(|f| expected(f, fault_rail));
        let mine: Vec<_> = samples
            .iter()
            .filter(|(_, _, _, t)| (s.start..=end).contains(t))
            .collect();
        let (mut right, mut false_firing, mut false_pending) = (0usize, 0usize, 0usize);
        for (state, sus, alert, t) in &mine {
            let ok = *t >= fault_at && want.as_ref() == Some(sus);
            if state == "firing" {
                if ok {
                    right += 1;
                } else {
                    false_firing += 1;
                    wrong.push(format!(
                        "{} at +{}s: {alert} fires for {sus:?}",
                        s.name,
                        t - s.start
                    ));
                }
            } else if !ok && (*t < fault_at || want.is_none()) {
                false_pending += 1;
                wrong.push(format!(
                    "{} at +{}s: {alert} pending for {sus:?} before any fault",
                    s.name,
                    t - s.start
                ));
            }
        }
        let Some(want) = want else {
            table.push(format!(
                "{:<16} {:>6} s clean: alerts firing {false_firing}, pending {false_pending}",
                s.name, s.secs
            ));
            continue;
        };
        let named = mine
            .iter()
            .filter(|(_, sus, _, t)| *sus == want && *t >= fault_at)
            .map(|(_, _, _, t)| *t)
            .min();
        let firing: BTreeSet<u64> = mine
            .iter()
            .filter(|(st, sus, _, t)| st == "firing" && *sus == want && *t >= fault_at)
            .map(|(_, _, _, t)| *t)
            .collect();
        let alert = mine
            .iter()
            .find(|(_, sus, _, _)| *sus == want)
            .map(|(_, _, a, _)| a.clone())
            .unwrap_or_default();
        // From when the alert must fire (named, then held for its `for`) to the end:
        // every step of the alerts group.
        let must_fire = fault_at + NAMED_WITHIN + hold.get(&alert).copied().unwrap_or(0);
        let steps: Vec<u64> = (s.start..=end)
            .step_by(alert_step as usize)
            .filter(|t| *t >= must_fire + alert_step)
            .collect();
        let fired = steps.iter().filter(|t| firing.contains(t)).count();
        match named {
            Some(n) if n - fault_at <= NAMED_WITHIN => {}
            Some(n) => wrong.push(format!(
                "{}: {want:?} named only {} s after the fault",
                s.name,
                n - fault_at
            )),
            None => wrong.push(format!("{}: {want:?} never named", s.name)),
        }
        if fired < steps.len() {
            wrong.push(format!(
                "{}: {want:?} firing at {fired} of the {} steps from +{} s",
                s.name,
                steps.len(),
                must_fire + alert_step - s.start
            ));
        }
        table.push(format!(
            "{:<16} named +{:>3} s, firing +{:>3} s; precision {right}/{}, recall {fired}/{} steps",
            s.name,
            named.map_or("-".into(), |n| (n - fault_at).to_string()),
            firing
                .first()
                .map_or("-".into(), |f| (f - fault_at).to_string()),
            right + false_firing,
            steps.len()
        ));
    }

    // One evaluation of every rule, group after group, as it runs live (each rule reads
    // the series recorded before it): a few instants after each fault.
    let mut evals = Vec::new();
    for s in &scenarios {
        for offset in [FAULT_AFTER + 60, FAULT_AFTER + 180, s.secs.min(590)] {
            let t0 = Instant::now();
            for g in &groups {
                for r in &g.rules {
                    query(&r.expr, s.start + offset);
                }
            }
            evals.push(t0.elapsed());
        }
    }
    let mean = evals.iter().sum::<Duration>() / evals.len() as u32;
    let max = evals.iter().max().unwrap();
    let rules: usize = groups.iter().map(|g| g.rules.len()).sum();
    eprintln!(
        "fleet rules on {hosts} simulated hosts x {rails} rails, faults on rail {fault_rail} (vmalert replay of {:.1} h in {replay_secs:.0} s):\n  {}\n  one evaluation of the {rules} rules: mean {:.0} ms, max {:.0} ms",
        (to - from) as f64 / 3600.0,
        table.join("\n  "),
        mean.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    );
    assert!(
        wrong.is_empty(),
        "{}\n{}",
        wrong.join("\n"),
        table.join("\n")
    );
}
