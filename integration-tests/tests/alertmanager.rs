//! The Alertmanager webhook receiver in a running agent: authentication, limits, malformed
//! payloads, real payload shapes (grouped, truncated, resolved) routed to remediation, and
//! a burst of 1000 alerts per second for 10 s with memory staying flat and every decision
//! audited.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

struct Agent {
    _agent: RunningAgent,
    pid: u32,
    url: String,
    audit: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn start(extra: &str) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[remediation]
audit_log = {audit:?}
kill_switch = {stop:?}

[remediation.actions.page]
type = "log"

[remediation.actions.drain]
type = "exec"
command = ["/usr/local/sbin/drain-this-node"]

[alertmanager]
listen = "127.0.0.1:0"
bearer_token = "s3cret"
{extra}

[[alertmanager.routes]]
match = {{ alertname = "RoCE*" }}
actions = ["page"]

[[alertmanager.routes]]
match = {{ alertname = "RoCEPauseStorm", severity = "critical" }}
actions = ["drain"]
"#,
            stop = dir.path().join("STOP"),
        ),
    )
    .unwrap();
    // Port 0: the agent says where it listens (--ready-file); its stderr is printed when
    // a test fails.
    let agent = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        fixture("no-devices").to_str().unwrap(),
    ]);
    let pid = agent.pid();
    let url = format!("http://{}/alertmanager", agent.addr("alertmanager"));
    Agent {
        _agent: agent,
        pid,
        url,
        audit,
        _dir: dir,
    }
}

fn post(url: &str, token: Option<&str>, body: String) -> (u16, String) {
    let mut r = reqwest::blocking::Client::new()
        .post(url)
        .timeout(Duration::from_secs(10))
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().unwrap();
    (resp.status().as_u16(), resp.text().unwrap())
}

fn alert(name: &str, status: &str, extra: &[(&str, &str)]) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    labels.insert("alertname".into(), json!(name));
    labels.insert("instance".into(), json!("node7:9464"));
    for (k, v) in extra {
        labels.insert(k.to_string(), json!(v));
    }
    json!({
        "status": status,
        "labels": labels,
        "annotations": {"summary": format!("{name} on node7")},
        "startsAt": "2026-12-02T10:00:00.000Z",
        "endsAt": if status == "resolved" { "2026-12-02T10:05:00.000Z" } else { "0001-01-01T00:00:00Z" },
        "generatorURL": "http://prometheus:9090/graph?g0.expr=rdma_pfc_pause_ratio+%3E+0.2",
        "fingerprint": format!("{:016x}", name.len())
    })
}

/// A payload as Alertmanager 0.2x sends it (version 4).
fn payload(status: &str, alerts: Vec<serde_json::Value>, truncated: u64) -> String {
    json!({
        "receiver": "rocewatch",
        "status": status,
        "alerts": alerts,
        "groupLabels": {"alertname": "RoCEPauseStorm"},
        "commonLabels": {"alertname": "RoCEPauseStorm"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "version": "4",
        "groupKey": "{}:{alertname=\"RoCEPauseStorm\"}",
        "truncatedAlerts": truncated
    })
    .to_string()
}

fn audit(a: &Agent) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&a.audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn alertmanager_auth_limits_and_malformed_payloads() {
    let a = start("max_body_bytes = 4096\nmax_requests_per_second = 5");
    let ok = payload("firing", vec![alert("RoCELinkDown", "firing", &[])], 0);
    assert_eq!(post(&a.url, None, ok.clone()).0, 401);
    assert_eq!(post(&a.url, Some("wrong"), ok.clone()).0, 401);
    let (code, body) = post(&a.url, Some("s3cret"), "{\"version\":\"4\",".into());
    assert_eq!(code, 400);
    assert!(
        body.contains("not an Alertmanager webhook payload"),
        "{body}"
    );
    let (code, body) = post(
        &a.url,
        Some("s3cret"),
        json!({"version": "3", "alerts": []}).to_string(),
    );
    assert_eq!((code, body.contains("version")), (400, true), "{body}");
    std::thread::sleep(Duration::from_millis(1100)); // refill the bucket
    let big = payload(
        "firing",
        (0..100)
            .map(|i| alert("RoCELinkDown", "firing", &[("port", &i.to_string())]))
            .collect(),
        0,
    );
    assert_eq!(post(&a.url, Some("s3cret"), big).0, 413);
    let get = reqwest::blocking::get(&a.url).unwrap().status().as_u16();
    assert_eq!(get, 405);
    // Past 5 requests per second: 429s, and the agent is still there.
    std::thread::sleep(Duration::from_millis(1100));
    let codes: Vec<u16> = (0..12)
        .map(|_| post(&a.url, Some("s3cret"), ok.clone()).0)
        .collect();
    assert!(codes.contains(&200) && codes.contains(&429), "{codes:?}");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(post(&a.url, Some("s3cret"), ok).0, 200);
}

#[test]
fn alertmanager_grouped_truncated_and_resolved_alerts_reach_remediation() {
    let a = start("");
    let firing = payload(
        "firing",
        vec![
            alert(
                "RoCEPauseStorm",
                "firing",
                &[("severity", "critical"), ("rdma_device", "mlx5_0")],
            ),
            alert(
                "RoCEPauseStorm",
                "firing",
                &[("severity", "warning"), ("rdma_device", "mlx5_1")],
            ),
            alert("DiskFull", "firing", &[]),
        ],
        2,
    );
    let (code, body) = post(&a.url, Some("s3cret"), firing);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("3 alerts accepted"));
    let resolved = payload(
        "resolved",
        vec![alert(
            "RoCEPauseStorm",
            "resolved",
            &[("severity", "critical"), ("rdma_device", "mlx5_0")],
        )],
        0,
    );
    assert_eq!(post(&a.url, Some("s3cret"), resolved).0, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    let recs = loop {
        let r = audit(&a);
        if r.iter().filter(|r| r["decision"] == "cleared").count() == 1 {
            break r;
        }
        assert!(Instant::now() < deadline, "{r:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // The labels are on the first record of each decision; the others name it by id.
    let labels: std::collections::HashMap<&str, &serde_json::Value> = recs
        .iter()
        .filter_map(|r| Some((r["decision_id"].as_str()?, r.get("labels")?)))
        .collect();
    let lines: Vec<String> = recs
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r["decision"].as_str().unwrap(),
                r["rule"].as_str().unwrap(),
                labels[r["decision_id"].as_str().unwrap()]["rdma_device"]
                    .as_str()
                    .unwrap_or("-"),
                r["action"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            // critical storm: both routes match, actions once each, dry runs by default
            "fired alertmanager/RoCEPauseStorm mlx5_0 -",
            "dry_run alertmanager/RoCEPauseStorm mlx5_0 page",
            "dry_run alertmanager/RoCEPauseStorm mlx5_0 drain",
            // warning storm: only the first route
            "fired alertmanager/RoCEPauseStorm mlx5_1 -",
            "dry_run alertmanager/RoCEPauseStorm mlx5_1 page",
            // not routed: audited, no action
            "fired alertmanager/DiskFull - -",
            // resolved: clears, and the clearing runs the same actions
            "cleared alertmanager/RoCEPauseStorm mlx5_0 -",
            "dry_run alertmanager/RoCEPauseStorm mlx5_0 page",
            "dry_run alertmanager/RoCEPauseStorm mlx5_0 drain",
        ],
        "{recs:#?}"
    );
    assert!(recs[2]["detail"]
        .as_str()
        .unwrap()
        .contains("drain-this-node"));
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn alertmanager_burst_of_1000_alerts_per_second_keeps_memory_flat_and_audits_everything() {
    let a = start("max_requests_per_second = 50\nmax_body_bytes = 4194304");
    let client = reqwest::blocking::Client::new();
    let started = Instant::now();
    let mut rss = Vec::new();
    let mut sent = 0u64;
    // 10 requests per second of 100 distinct alerts each, for 10 s.
    for second in 0..10u64 {
        let tick = Instant::now();
        for r in 0..10u64 {
            let alerts: Vec<_> = (0..100u64)
                .map(|i| {
                    let n = (second * 10 + r) * 100 + i;
                    alert(
                        "RoCEPauseStorm",
                        "firing",
                        &[
                            ("severity", "warning"),
                            ("rdma_device", &format!("mlx5_{n}")),
                        ],
                    )
                })
                .collect();
            let resp = client
                .post(&a.url)
                .bearer_auth("s3cret")
                .body(payload("firing", alerts, 0))
                .timeout(Duration::from_secs(10))
                .send()
                .unwrap();
            assert_eq!(resp.status().as_u16(), 200, "{}", resp.text().unwrap());
            sent += 100;
        }
        rss.push(rss_kib(a.pid));
        if let Some(rest) = Duration::from_secs(1).checked_sub(tick.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the receiver kept up"
    );
    // Every alert: one "fired" and one decision (dry run, or suppressed by the hourly limit).
    let deadline = Instant::now() + Duration::from_secs(10);
    let recs = loop {
        let r = audit(&a);
        if r.len() as u64 >= 2 * sent || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let fired = recs.iter().filter(|r| r["decision"] == "fired").count() as u64;
    let decided = recs.iter().filter(|r| r["action"] == "page").count() as u64;
    assert_eq!(
        (fired, decided),
        (sent, sent),
        "every alert and decision audited"
    );
    let dry = recs.iter().filter(|r| r["decision"] == "dry_run").count();
    assert_eq!(
        dry, 20,
        "max_actions_per_hour (default 20) holds under the burst"
    );
    // Flat: after the first second, resident memory grows by less than 8 MiB.
    let (first, last) = (rss[1], *rss.last().unwrap());
    assert!(
        last < first + 8 * 1024,
        "RSS {first} KiB -> {last} KiB: {rss:?}"
    );
}
