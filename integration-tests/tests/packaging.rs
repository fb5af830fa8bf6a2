//! What operators deploy: the systemd unit (verified and scored by systemd-analyze), the
//! Kubernetes DaemonSet (its embedded configuration passes `rocewatch config check`), the
//! OpenTelemetry Collector snippet (pipelines reference defined components; ports agree
//! with the DaemonSet), the Prometheus rules and the Grafana dashboard (every metric
//! they query is one rocewatch exports). The rules' own unit tests run in `qos.rs`.

use std::collections::BTreeSet;

use crate::support::*;

/// Every Prometheus metric name rocewatch exports, from the catalog (`metrics-doc`).
fn exported_names() -> BTreeSet<String> {
    let o = rocewatch(&["metrics-doc"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut out = BTreeSet::new();
    for line in stdout(&o).lines().filter(|l| l.starts_with("| `")) {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        for c in cols {
            let name = c.trim_matches('`');
            if (name.starts_with("rdma_") || name.starts_with("rocewatch_"))
                && c.starts_with('`')
                && !name.contains(' ')
            {
                out.insert(name.to_string());
            }
        }
    }
    assert!(
        out.contains("rdma_port_up_ratio") && out.contains("rdma_qos_fingerprint"),
        "{out:?}"
    );
    out
}

/// The metric names a PromQL expression reads (histogram series mapped to the family):
/// label matchers `{...}` and the label lists of by/without/on/ignoring/group_left/
/// group_right are removed first; every rdma_/rocewatch_ word left is a metric.
fn names_in(expr: &str) -> Vec<String> {
    let mut s = String::new();
    let mut depth = 0;
    for ch in expr.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ if depth == 0 => s.push(ch),
            _ => {}
        }
    }
    for kw in [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ] {
        loop {
            let found = s.match_indices(kw).find(|(i, _)| {
                let before_ok = *i == 0
                    || !s.as_bytes()[i - 1].is_ascii_alphanumeric() && s.as_bytes()[i - 1] != b'_';
                let rest = s[i + kw.len()..].trim_start();
                before_ok && rest.starts_with('(')
            });
            let Some((i, _)) = found else { break };
            let open = i + kw.len() + s[i + kw.len()..].find('(').unwrap();
            let close = open + s[open..].find(')').unwrap();
            s.replace_range(i..=close, " ");
        }
    }
    let mut out = Vec::new();
    for word in s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
        // A series recorded by the shipped rules (`rocewatch:...`).
        if word.starts_with("rocewatch:") {
            out.push(word.to_string());
            continue;
        }
        if word.starts_with("rdma_") || word.starts_with("rocewatch_") {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|x| word.strip_suffix(x))
                .unwrap_or(word);
            out.push(family.to_string());
        }
    }
    out
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let Some(analyze) = require(
        "systemd-analyze (systemd)",
        receiver(
            "ROCEWATCH_SYSTEMD_ANALYZE",
            ".cache/none",
            "systemd-analyze",
        ),
    ) else {
        return;
    };
    let unit = std::fs::read_to_string(root().join("packaging/systemd/rocewatch.service")).unwrap();
    for key in [
        "User=rocewatch",
        "ProtectSystem=strict",
        "StateDirectory=rocewatch",
        "CapabilityBoundingSet=CAP_NET_ADMIN",
        "NoNewPrivileges=yes",
        "ProtectKernelTunables=yes",
    ] {
        assert!(unit.lines().any(|l| l == key), "{key} missing");
    }
    assert!(
        std::fs::read_to_string(root().join("packaging/systemd/rocewatch.sysusers"))
            .unwrap()
            .contains("u rocewatch ")
    );
    // verify needs the binary to exist: point ExecStart at the one built here.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rocewatch.service");
    std::fs::write(
        &path,
        unit.replace(
            "ExecStart=/usr/bin/rocewatch",
            &format!("ExecStart={}", artifacts().rocewatch.display()),
        ),
    )
    .unwrap();
    let o = std::process::Command::new(&analyze)
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        o.status.success() && stderr(&o).trim().is_empty(),
        "systemd-analyze verify: {}{}",
        stdout(&o),
        stderr(&o)
    );
    // And the exposure score systemd gives it (0 best .. 10 worst; "OK" is below 2.5).
    let o = std::process::Command::new(&analyze)
        .args(["security", "--offline=yes"])
        .arg(&path)
        .output()
        .unwrap();
    let text = stdout(&o);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("rocewatch.service: ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}{}", stderr(&o)));
    assert!(score <= 2.5, "exposure {score}:\n{text}");
}

#[test]
fn the_kubernetes_daemonset_and_the_collector_snippet_fit_together() {
    let docs = yaml_docs("deploy/kubernetes/rocewatch-daemonset.yaml");
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(k))
            .unwrap_or_else(|| panic!("no {k}"))
    };
    // The embedded configuration is one rocewatch accepts.
    let toml = kind("ConfigMap")["data"]["rocewatch.toml"]
        .as_str()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(&cfg, toml).unwrap();
    let o = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ds = kind("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"].as_bool(), Some(true));
    let c = &pod["containers"][0];
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    let sys = mounts.iter().find(|m| m["name"] == "sys").unwrap();
    assert_eq!(sys["readOnly"].as_bool(), Some(true));
    assert!(toml.contains(&format!(
        "sysfs_root = \"{}\"",
        sys["mountPath"].as_str().unwrap()
    )));
    let vol = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "sys")
        .unwrap();
    assert_eq!(vol["hostPath"]["path"].as_str(), Some("/sys"));
    assert_eq!(
        c["securityContext"]["capabilities"]["add"][0].as_str(),
        Some("NET_ADMIN")
    );
    assert_eq!(
        c["env"][0]["name"].as_str(),
        Some("ROCEWATCH_AGENT__HOST_NAME")
    );
    // The pod's stop grace exceeds the longest action timeout (the default one when the
    // configuration names none): a running action is waited for, then `killed at
    // shutdown` is audited, before Kubernetes' SIGKILL.
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("the DaemonSet sets terminationGracePeriodSeconds");
    let loaded = rocewatch::config::Config::load(Some(&cfg)).unwrap();
    let longest = loaded
        .remediation
        .actions
        .values()
        .map(|a| a.timeout)
        .chain([rocewatch_remediation::SUPERVISOR_STOP_GRACE])
        .max()
        .unwrap();
    assert!(
        std::time::Duration::from_secs(grace) > longest,
        "terminationGracePeriodSeconds {grace} must exceed the longest action timeout, {longest:?}"
    );
    // OTLP goes to the collector's HTTP receiver port.
    let col = &yaml_docs("deploy/otel-collector/collector.yaml")[0];
    let http = col["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
        .as_str()
        .unwrap();
    let port = http.rsplit(':').next().unwrap();
    assert!(
        toml.contains(&format!("otel-collector.observability.svc:{port}\"")),
        "{toml} vs {http}"
    );
    // Every component a pipeline names is defined.
    for (name, p) in col["service"]["pipelines"].as_mapping().unwrap() {
        for (section, list) in [
            ("receivers", "receivers"),
            ("processors", "processors"),
            ("exporters", "exporters"),
        ] {
            for comp in p[list].as_sequence().unwrap() {
                let comp = comp.as_str().unwrap();
                assert!(
                    col[section].get(comp).is_some(),
                    "pipeline {name:?} names {section}.{comp}, which is not defined"
                );
            }
        }
    }
}

#[test]
fn rules_and_dashboard_query_only_exported_metrics() {
    let mut names = exported_names();
    let mut used = BTreeSet::new();
    // Prometheus rules.
    let files = [
        "configs/prometheus/rocewatch.rules.yml",
        "configs/prometheus/rocewatch-fleet.rules.yml",
    ];
    // What the rules record may be read by the rules after them and by the dashboard.
    for doc in files.iter().flat_map(|f| yaml_docs(f)) {
        for g in doc["groups"].as_sequence().unwrap() {
            for r in g["rules"].as_sequence().unwrap() {
                if let Some(rec) = r["record"].as_str() {
                    names.insert(rec.to_string());
                }
            }
        }
    }
    for doc in files.iter().flat_map(|f| yaml_docs(f)) {
        for g in doc["groups"].as_sequence().unwrap() {
            for r in g["rules"].as_sequence().unwrap() {
                let expr = r["expr"].as_str().unwrap();
                for n in names_in(expr) {
                    assert!(
                        names.contains(&n),
                        "rule {:?} reads {n}, which rocewatch does not export",
                        r.get("alert").or_else(|| r.get("record"))
                    );
                    used.insert(n);
                }
            }
        }
    }
    // Grafana dashboard.
    let text =
        std::fs::read_to_string(root().join("deploy/grafana/rocewatch-dashboard.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 10);
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let found = names_in(expr);
            assert!(!found.is_empty(), "{expr}");
            for n in found {
                assert!(
                    names.contains(&n),
                    "panel {:?} reads {n}, which rocewatch does not export",
                    p["title"]
                );
                used.insert(n);
            }
        }
    }
    for q in [d["templating"]["list"][0]["definition"].as_str().unwrap()] {
        for n in names_in(q) {
            assert!(names.contains(&n), "{q}");
        }
    }
    // The signals the issue names are covered.
    for n in [
        "rdma_pfc_pause_ratio",
        "rdma_port_cnp_handled_total",
        "rdma_port_link_downed_total",
        "rdma_probe_received_total",
        "rdma_qos_drift",
        "rdma_qos_fingerprint",
        "rdma_probe_rtt_seconds",
        "rdma_probe_fleet_failing_ratio",
        "rdma_probe_fleet_results_total",
        "rdma_fleet_nic_info",
        "rdma_priority_congestion",
        "rdma_link_pause_frames_total",
        "rocewatch:port_cnp_sent:rate5m",
    ] {
        assert!(used.contains(n), "{n} unused");
    }
    // The name finder itself: metrics, not labels.
    assert_eq!(
        names_in("max by (rdma_device) (rdma_qos_drift{rdma_port=\"1\"}) + on (rdma_port) rdma_probe_rtt_seconds_bucket + count by (rdma_qos_fingerprint) (rdma_qos_fingerprint)"),
        ["rdma_qos_drift", "rdma_probe_rtt_seconds", "rdma_qos_fingerprint"]
    );
    assert_eq!(
        names_in("last_over_time(rocewatch:fleet_flow_down[30s]) unless on (host) rdma_x"),
        ["rocewatch:fleet_flow_down", "rdma_x"]
    );
}
