//! Events as OTLP logs, through the binary: an in-test OTLP/HTTP receiver (`agent_logs`'s)
//! decodes the `ExportLogsServiceRequest`s at `/v1/logs` and finds a quarantining rule's
//! firing transition, its remediation decisions (a dry run; an executed action's
//! `executing` and `result`) sharing one decision id with the audit log, configuration
//! reloads (refused, then taken), and the quarantine entered and released by the recovery
//! policy, each with its event name, severity, the RDMA labels and the metrics' resource;
//! a port's link going down and up (in a copy of the tree); with `events = false` nothing
//! arrives there, and a reload that turns them off leaves nothing to send late.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

use crate::agent_logs::{receiver, Requests};
use crate::support::*;

/// One event as the test reads it.
#[derive(Debug, Clone)]
struct Event {
    name: String,
    severity: String,
    body: String,
    attrs: BTreeMap<String, String>,
    resource: BTreeMap<String, String>,
}

fn strings(attrs: &[KeyValue]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some((kv.key.clone(), s.clone())),
            _ => None,
        })
        .collect()
}

/// Every log record at `/v1/logs` that has an event name.
fn events(got: &Requests) -> Vec<Event> {
    let mut out = Vec::new();
    for (path, body) in got.lock().unwrap().iter() {
        if path != "/v1/logs" {
            continue;
        }
        let req = ExportLogsServiceRequest::decode(body.as_slice())
            .unwrap_or_else(|e| panic!("an ExportLogsServiceRequest at /v1/logs: {e}"));
        for rl in req.resource_logs {
            let resource = strings(&rl.resource.map(|r| r.attributes).unwrap_or_default());
            for lr in rl.scope_logs.into_iter().flat_map(|s| s.log_records) {
                let attrs = strings(&lr.attributes);
                if lr.event_name.is_empty() {
                    continue;
                }
                assert_eq!(
                    attrs.get("event.name"),
                    Some(&lr.event_name),
                    "event.name as an attribute too"
                );
                out.push(Event {
                    name: lr.event_name,
                    severity: lr.severity_text,
                    body: match lr.body.and_then(|b| b.value) {
                        Some(Value::StringValue(s)) => s,
                        other => format!("{other:?}"),
                    },
                    attrs,
                    resource: resource.clone(),
                });
            }
        }
    }
    out
}

/// The slow-link rule (both mlx5 ports of the tree run at 100 Gb/s: it fires below
/// `threshold`) on mlx5_0, quarantining, with a dry-run action and a `log` action that
/// runs; the recovery policy releases a second after it clears.
fn config(dir: &Path, state: &Path, port: u16, threshold: &str, otlp: &str) -> PathBuf {
    let cfg = dir.join("events.toml");
    let audit = state.join("audit.jsonl");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nhost_name = \"events-test-host\"\n\n\
             [[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\n\
             match = {{ \"rdma.device\" = \"mlx5_0\" }}\nop = \"<\"\nthreshold = {threshold}\n\
             quarantine = true\nactions = [\"drain\", \"note\"]\n\n\
             [remediation]\naudit_log = {audit:?}\n\n\
             [remediation.actions.drain]\ntype = \"exec\"\ncommand = [\"/usr/local/sbin/drain-this-node\"]\n\n\
             [remediation.actions.note]\ntype = \"log\"\ndry_run = false\n\n\
             [health]\nrelease_after = \"1s\"\n\n\
             [exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}/v1/metrics\"\n\
             interval = \"300ms\"\ncompression = \"none\"\n{otlp}"
        ),
    )
    .unwrap();
    cfg
}

fn agent(cfg: &Path, state: &Path) -> RunningAgent {
    RunningAgent::start_with(
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            fixture("mlx5-roce-dual-port").to_str().unwrap(),
            "--interval",
            "300ms",
        ],
        &[("STATE_DIRECTORY", state.to_str().unwrap())],
        None,
    )
}

fn until<T>(what: &str, within: Duration, a: &RunningAgent, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} within {within:?}\n{}",
            a.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn named<'a>(evs: &'a [Event], name: &str) -> Vec<&'a Event> {
    evs.iter().filter(|e| e.name == name).collect()
}

#[test]
fn a_rule_its_decisions_and_the_quarantine_arrive_as_otlp_log_records() {
    let (port, got) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), state.path(), port, "200e9", "");
    let mut a = agent(&cfg, state.path());
    let evs = until(
        "the quarantine's event",
        Duration::from_secs(30),
        &a,
        || {
            let evs = events(&got);
            let done = !named(&evs, "rocewatch.quarantine.entered").is_empty()
                && named(&evs, "rocewatch.remediation.result").len() == 1;
            done.then_some(evs)
        },
    );
    let firing = named(&evs, "rocewatch.rule.transition");
    let firing = firing
        .iter()
        .find(|e| e.attrs["rocewatch.rule.state"] == "firing")
        .unwrap_or_else(|| panic!("a firing transition: {evs:#?}"));
    assert_eq!(firing.severity, "WARN", "{firing:?}");
    assert_eq!(firing.attrs["rocewatch.rule"], "slow-link");
    assert_eq!(firing.attrs["rdma.device"], "mlx5_0");
    assert!(firing.attrs.contains_key("rdma.port"), "{firing:?}");
    assert!(
        firing
            .body
            .starts_with("rule slow-link firing on mlx5_0 port "),
        "{firing:?}"
    );
    // The metrics' resource.
    assert_eq!(firing.resource["service.name"], "rocewatch");
    assert_eq!(firing.resource["host.name"], "events-test-host");
    assert!(
        firing.resource.contains_key("service.instance.id"),
        "{firing:?}"
    );

    // The decisions: a dry run, then the `log` action's executing and result, one id.
    let decisions = named(&evs, "rocewatch.remediation.decision");
    let dry = decisions
        .iter()
        .find(|e| e.attrs["rocewatch.decision"] == "dry_run")
        .unwrap_or_else(|| panic!("a dry-run decision: {evs:#?}"));
    assert_eq!(dry.attrs["rocewatch.action"], "drain");
    assert_eq!(dry.attrs["rdma.device"], "mlx5_0");
    let executing = decisions
        .iter()
        .find(|e| e.attrs["rocewatch.decision"] == "executing")
        .unwrap_or_else(|| panic!("an executing decision: {evs:#?}"));
    assert_eq!(executing.attrs["rocewatch.action"], "note");
    let result = named(&evs, "rocewatch.remediation.result")[0];
    assert_eq!(result.attrs["rocewatch.outcome"], "ok", "{result:?}");
    assert_eq!(result.severity, "INFO");
    let id = &dry.attrs["rocewatch.decision_id"];
    assert!(!id.is_empty());
    assert_eq!(&executing.attrs["rocewatch.decision_id"], id, "{evs:#?}");
    assert_eq!(&result.attrs["rocewatch.decision_id"], id, "{evs:#?}");
    assert_eq!(
        result.attrs["rdma.device"], "mlx5_0",
        "labels on the result too"
    );
    // The same id as the audit log's records of the decision.
    let audit = std::fs::read_to_string(state.path().join("audit.jsonl")).unwrap();
    assert!(
        audit.contains(&format!("\"decision_id\":\"{id}\"")),
        "{audit}"
    );

    let entered = named(&evs, "rocewatch.quarantine.entered")[0];
    assert_eq!(entered.severity, "WARN", "{entered:?}");
    assert_eq!(
        entered.attrs["rocewatch.origin"], "rule:slow-link",
        "{entered:?}"
    );
    assert_eq!(entered.attrs["rdma.device"], "mlx5_0");

    // A reload refused: an ERROR event, and the agent runs on.
    std::fs::write(&cfg, "[agent]\nno_such_key = 1\n").unwrap();
    a.proc.signal("HUP");
    let evs = until(
        "the refused reload's event",
        Duration::from_secs(20),
        &a,
        || {
            let evs = events(&got);
            (!named(&evs, "rocewatch.config.reload").is_empty()).then_some(evs)
        },
    );
    let refused = named(&evs, "rocewatch.config.reload")[0];
    assert_eq!(refused.severity, "ERROR", "{refused:?}");
    assert_eq!(refused.attrs["rocewatch.reload.result"], "error");

    // The rule clears (a reload with a threshold it meets): the reload said, then the
    // quarantine released by the recovery policy.
    config(dir.path(), state.path(), port, "50e9", "");
    a.proc.signal("HUP");
    let evs = until("the release's event", Duration::from_secs(30), &a, || {
        let evs = events(&got);
        (!named(&evs, "rocewatch.quarantine.released").is_empty()).then_some(evs)
    });
    let reloaded = named(&evs, "rocewatch.config.reload");
    assert!(
        reloaded
            .iter()
            .any(|e| e.attrs["rocewatch.reload.result"] == "ok" && e.severity == "INFO"),
        "{reloaded:#?}"
    );
    let released = named(&evs, "rocewatch.quarantine.released")[0];
    assert_eq!(released.severity, "INFO", "{released:?}");
    assert!(released.body.contains("recovered"), "{released:?}");
    let (status, log, _) = a.proc.stop();
    assert!(status.success(), "{log}");
}

#[test]
fn with_events_false_nothing_arrives_at_v1_logs() {
    let (port, got) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), state.path(), port, "200e9", "events = false\n");
    let mut a = agent(&cfg, state.path());
    let audit = state.path().join("audit.jsonl");
    // The rule fired, its action ran and the metrics went out meanwhile.
    until("the action's result", Duration::from_secs(30), &a, || {
        let recs = std::fs::read_to_string(&audit).unwrap_or_default();
        let metrics = got
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == "/v1/metrics")
            .count();
        (recs.contains("\"decision\":\"result\"") && metrics >= 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let (status, log, _) = a.proc.stop();
    assert!(status.success(), "{log}");
    let logs: Vec<String> = got
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p != "/v1/metrics")
        .map(|(p, _)| p.clone())
        .collect();
    assert!(
        logs.is_empty(),
        "requests besides the metrics: {logs:?}\n{log}"
    );
}

/// A reload that turns `events` off takes the events' bus out: what happens while they are
/// off (here the reload itself, said as a `rocewatch.config.reload` event) is not kept,
/// and a reload that turns them on again does not send it late. Only the reload that
/// turned them on again arrives.
#[test]
fn a_reload_that_turns_events_off_stops_the_bus_filling() {
    let (port, got) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    // A threshold the rule meets: no rule fires, the reloads are the only events.
    let cfg = config(dir.path(), state.path(), port, "50e9", "");
    let mut a = agent(&cfg, state.path());
    let starts = |a: &RunningAgent| a.stderr().matches("exporting over OTLP").count();
    until("the first agent", Duration::from_secs(20), &a, || {
        (starts(&a) >= 1).then_some(())
    });
    config(dir.path(), state.path(), port, "50e9", "events = false\n");
    a.proc.signal("HUP");
    until(
        "the agent without events",
        Duration::from_secs(20),
        &a,
        || (starts(&a) >= 2).then_some(()),
    );
    // Its reload's event would have been published by now.
    std::thread::sleep(Duration::from_secs(1));
    config(dir.path(), state.path(), port, "50e9", "");
    a.proc.signal("HUP");
    let evs = until("the reload's event", Duration::from_secs(20), &a, || {
        let evs = events(&got);
        (!named(&evs, "rocewatch.config.reload").is_empty()).then_some(evs)
    });
    // Time for a late one to come too.
    std::thread::sleep(Duration::from_secs(2));
    let evs = {
        let later = events(&got);
        if later.len() > evs.len() {
            later
        } else {
            evs
        }
    };
    let (status, log, _) = a.proc.stop();
    let reloads = named(&evs, "rocewatch.config.reload");
    assert_eq!(
        reloads.len(),
        1,
        "only the reload that turned events on again: {reloads:#?}\n{log}"
    );
    assert_eq!(reloads[0].attrs["rocewatch.reload.result"], "ok");
    assert!(status.success(), "{log}");
}

/// A port whose link goes down and comes back (its `state` file rewritten in a copy of
/// the tree) gives `rocewatch.link.down` (WARN) then `rocewatch.link.up` (INFO), with the
/// port's labels; the ports that did not change give none.
#[test]
fn a_link_going_down_and_up_is_an_event_each_way() {
    let (port, got) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(st.success());
    let cfg = dir.path().join("links.toml");
    std::fs::write(
        &cfg,
        format!(
            "[exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}/v1/metrics\"\n\
             interval = \"300ms\"\ncompression = \"none\"\n"
        ),
    )
    .unwrap();
    let mut a = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        root.to_str().unwrap(),
        "--interval",
        "300ms",
    ]);
    let state = root.join("class/infiniband/mlx5_0/ports/1/state");
    // Read up at least once (metrics went out twice), then down.
    until("two exports", Duration::from_secs(20), &a, || {
        let n = got
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == "/v1/metrics")
            .count();
        (n >= 2).then_some(())
    });
    std::fs::write(&state, "1: DOWN\n").unwrap();
    let down = until("the link's down event", Duration::from_secs(20), &a, || {
        named(&events(&got), "rocewatch.link.down")
            .first()
            .map(|e| (*e).clone())
    });
    std::fs::write(&state, "4: ACTIVE\n").unwrap();
    let up = until("the link's up event", Duration::from_secs(20), &a, || {
        named(&events(&got), "rocewatch.link.up")
            .first()
            .map(|e| (*e).clone())
    });
    let (status, log, _) = a.proc.stop();
    assert!(status.success(), "{log}");
    assert_eq!(down.severity, "WARN", "{down:?}");
    assert_eq!(down.attrs["rdma.device"], "mlx5_0", "{down:?}");
    assert_eq!(down.attrs["rdma.port"], "1", "{down:?}");
    assert_eq!(up.severity, "INFO", "{up:?}");
    assert_eq!(up.attrs["rdma.port"], "1", "{up:?}");
    let evs = events(&got);
    let links: Vec<_> = evs
        .iter()
        .filter(|e| e.name.starts_with("rocewatch.link."))
        .collect();
    assert_eq!(
        links.len(),
        2,
        "one event each way, none for the other ports: {links:#?}"
    );
}
