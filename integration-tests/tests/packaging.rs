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
        "CapabilityBoundingSet=CAP_NET_ADMIN CAP_SYSLOG",
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
    // Every variable's query (the hosts, the fleet's rails).
    for v in d["templating"]["list"].as_array().unwrap() {
        let q = v["definition"].as_str().unwrap();
        let found = names_in(q);
        assert!(!found.is_empty(), "{q}");
        for n in found {
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

/// What a feature needs of the systemd unit.
#[derive(Debug, Clone, Copy)]
enum UnitNeed {
    /// A capability in both `CapabilityBoundingSet=` and `AmbientCapabilities=`.
    Cap(&'static str),
    /// A `DeviceAllow=` line (`DevicePolicy=closed` opens nothing else).
    Device(&'static str),
    /// An address family in `RestrictAddressFamilies=`.
    Family(&'static str),
    /// A key with this value.
    Key(&'static str, &'static str),
    /// A key that must not have this value.
    Not(&'static str, &'static str),
}

/// What a feature needs of a pod (the agent's DaemonSet, node-problem-detector's).
#[derive(Debug, Clone, Copy)]
enum PodNeed {
    HostNetwork,
    HostPid,
    /// A capability (a privileged container has them all).
    Cap(&'static str),
    /// A device the device cgroup lets it open: only a privileged container.
    Device,
    /// The host's path mounted at a path, writable or not.
    Mount(&'static str, &'static str, bool),
}

/// A feature, whether the shipped configurations turn it on (a built-in plugin by its
/// name, or the agent itself), and its needs: docs/OPERATIONS.md's table "What each
/// feature needs", from the kernel's and systemd's rules cited there.
struct Feature {
    name: &'static str,
    default_on: bool,
    unit: &'static [UnitNeed],
    pod: &'static [PodNeed],
}

const SYS: PodNeed = PodNeed::Mount("/sys", "/host/sys", false);
const STATE: PodNeed = PodNeed::Mount("/var/lib/rocewatch", "/var/lib/rocewatch", true);

const FEATURES: &[Feature] = &[
    Feature {
        name: "discovery-sysfs",
        default_on: true,
        unit: &[],
        pod: &[SYS],
    },
    Feature {
        name: "counters-sysfs",
        default_on: true,
        unit: &[UnitNeed::Family("AF_NETLINK")],
        pod: &[SYS, PodNeed::HostNetwork],
    },
    Feature {
        name: "counters-ethtool",
        default_on: true,
        unit: &[UnitNeed::Cap("CAP_NET_ADMIN"), UnitNeed::Family("AF_INET")],
        pod: &[SYS, PodNeed::HostNetwork, PodNeed::Cap("NET_ADMIN")],
    },
    Feature {
        name: "kernel-log",
        default_on: true,
        unit: &[
            UnitNeed::Cap("CAP_SYSLOG"),
            UnitNeed::Device("/dev/kmsg r"),
            UnitNeed::Not("ProtectKernelLogs", "yes"),
        ],
        pod: &[
            PodNeed::Mount("/dev/kmsg", "/dev/kmsg", false),
            PodNeed::Device,
            PodNeed::Cap("SYSLOG"),
        ],
    },
    Feature {
        name: "resources",
        default_on: true,
        unit: &[
            UnitNeed::Family("AF_NETLINK"),
            UnitNeed::Not("ProtectProc", "invisible"),
            UnitNeed::Not("ProtectProc", "noaccess"),
            UnitNeed::Not("ProtectProc", "ptraceable"),
        ],
        pod: &[PodNeed::HostPid, PodNeed::HostNetwork],
    },
    Feature {
        name: "host",
        default_on: true,
        // /proc/stat: ProcSubset=pid would leave only the process directories.
        unit: &[UnitNeed::Not("ProcSubset", "pid")],
        // /proc/stat is not namespaced: the container's is the node's.
        pod: &[],
    },
    Feature {
        name: "qos-linux",
        default_on: true,
        unit: &[UnitNeed::Family("AF_NETLINK"), UnitNeed::Family("AF_INET")],
        pod: &[SYS, PodNeed::HostNetwork],
    },
    Feature {
        name: "state directory (audit log, quarantine, snapshots)",
        default_on: true,
        unit: &[UnitNeed::Key("StateDirectory", "rocewatch")],
        pod: &[STATE],
    },
    Feature {
        name: "/metrics, OTLP, collectd",
        default_on: true,
        unit: &[UnitNeed::Family("AF_INET"), UnitNeed::Family("AF_INET6")],
        // The node's machine id: OTLP's host.id and service.instance.id.
        pod: &[PodNeed::Mount(
            "/etc/machine-id",
            "/host/etc/machine-id",
            false,
        )],
    },
    // Not on by default: what the unit grants for them; a pod adds it (OPERATIONS.md).
    Feature {
        name: "verbs probes",
        default_on: false,
        unit: &[
            UnitNeed::Device("char-infiniband_verbs rw"),
            UnitNeed::Device("/dev/infiniband/rdma_cm rw"),
            UnitNeed::Key("LimitMEMLOCK", "infinity"),
        ],
        pod: &[],
    },
    Feature {
        name: "per-QP counters (resources qp_counters)",
        default_on: false,
        unit: &[UnitNeed::Cap("CAP_NET_ADMIN")],
        pod: &[],
    },
];

/// `rocewatch health` in node-problem-detector's pod: the checks' needs.
const HEALTH_IN_A_POD: &[PodNeed] = &[
    SYS,
    PodNeed::Mount("/", "/host", false),
    PodNeed::Mount("/dev/kmsg", "/dev/kmsg", false),
    PodNeed::Device,
    PodNeed::Cap("SYSLOG"),
    // The optics check's module reads (ETHTOOL_MSG_MODULE_EEPROM_GET is GENL_UNS_ADMIN_PERM).
    PodNeed::Cap("NET_ADMIN"),
    PodNeed::HostPid,
    PodNeed::HostNetwork,
    PodNeed::Mount("/var/lib/rocewatch", "/var/lib/rocewatch", false),
];

/// The unit's `Key=value` lines, every value of each key (space-separated words).
fn unit_keys(unit: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for l in unit.lines().filter(|l| !l.starts_with('#')) {
        if let Some((k, v)) = l.split_once('=') {
            out.entry(k.into()).or_default().push(v.into());
        }
    }
    out
}

/// What `unit` lacks of the default features' needs, and what it grants beyond every
/// feature's (capabilities, devices).
fn unit_gaps(unit: &str) -> Vec<String> {
    let keys = unit_keys(unit);
    let words = |k: &str| -> BTreeSet<String> {
        keys.get(k)
            .into_iter()
            .flatten()
            .flat_map(|v| v.split_whitespace().map(String::from))
            .collect()
    };
    let has = |k: &str, v: &str| keys.get(k).is_some_and(|vs| vs.iter().any(|x| x == v));
    let mut gaps = Vec::new();
    let (mut caps, mut devices) = (BTreeSet::new(), BTreeSet::new());
    for f in FEATURES {
        for n in f.unit {
            let ok = match *n {
                UnitNeed::Cap(c) => {
                    caps.insert(c.to_string());
                    words("CapabilityBoundingSet").contains(c)
                        && words("AmbientCapabilities").contains(c)
                }
                UnitNeed::Device(d) => {
                    devices.insert(d.to_string());
                    has("DeviceAllow", d)
                }
                UnitNeed::Family(a) => words("RestrictAddressFamilies").contains(a),
                UnitNeed::Key(k, v) => has(k, v),
                UnitNeed::Not(k, v) => !has(k, v),
            };
            if !ok && f.default_on {
                gaps.push(format!("{}: needs {n:?}", f.name));
            }
        }
    }
    for c in words("CapabilityBoundingSet") {
        if !caps.contains(&c) {
            gaps.push(format!("{c}: granted, needed by no feature"));
        }
    }
    for d in keys.get("DeviceAllow").into_iter().flatten() {
        if !devices.contains(d) {
            gaps.push(format!("DeviceAllow={d}: granted, needed by no feature"));
        }
    }
    gaps
}

/// What the first container of the DaemonSet in `docs` lacks of `needs`, and the host
/// paths it mounts that no need names.
fn pod_gaps(docs: &[serde_yaml::Value], needs: &[PodNeed]) -> Vec<String> {
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let privileged = c["securityContext"]["privileged"].as_bool() == Some(true);
    let caps: Vec<&str> = c["securityContext"]["capabilities"]["add"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str())
        .collect();
    let volumes = pod["volumes"].as_sequence().unwrap();
    let host_of = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .and_then(|v| v["hostPath"]["path"].as_str())
    };
    let mounts: Vec<(&str, &str, bool)> = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|m| {
            let host = host_of(m["name"].as_str()?)?;
            let rw = m["readOnly"].as_bool() != Some(true);
            Some((host, m["mountPath"].as_str()?, rw))
        })
        .collect();
    let mut gaps = Vec::new();
    for n in needs {
        let ok = match *n {
            PodNeed::HostNetwork => pod["hostNetwork"].as_bool() == Some(true),
            PodNeed::HostPid => pod["hostPID"].as_bool() == Some(true),
            PodNeed::Cap(cap) => privileged || caps.contains(&cap),
            PodNeed::Device => privileged,
            PodNeed::Mount(h, at, rw) => {
                mounts.iter().any(|m| m.0 == h && m.1 == at && (m.2 || !rw))
            }
        };
        if !ok {
            gaps.push(format!("needs {n:?}"));
        }
    }
    for (h, at, rw) in mounts {
        let named = needs.iter().any(
            |n| matches!(*n, PodNeed::Mount(nh, nat, nrw) if nh == h && nat == at && (nrw || !rw)),
        );
        if !named {
            gaps.push(format!(
                "mounts {h} at {at}{}: needed by no feature",
                if rw { " writable" } else { "" }
            ));
        }
    }
    gaps
}

/// The built-in plugins a configuration turns on, as `rocewatch plugins` lists them.
fn plugins_on(toml: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    // A pod's sysfs root is not on this machine; the plugins' states do not matter here.
    std::fs::write(&cfg, toml.replace("\"/host/sys\"", "\"/sys\"")).unwrap();
    let o = rocewatch(
        &["plugins", "--json", "--config", cfg.to_str().unwrap()],
        &[],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    v.as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] != "disabled")
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// The unit, the agent's DaemonSet and node-problem-detector's grant what each feature
/// they turn on needs (the kernel log included), and no capability, device or host path
/// that no feature needs.
#[test]
fn each_deployment_grants_what_its_features_need_and_nothing_more() {
    // Every plugin the shipped configurations turn on has its row.
    let ds_docs = yaml_docs("deploy/kubernetes/rocewatch-daemonset.yaml");
    let ds_toml = ds_docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap()["data"]
        ["rocewatch.toml"]
        .as_str()
        .unwrap()
        .to_string();
    let packaged = std::fs::read_to_string(root().join("packaging/rocewatch.toml")).unwrap();
    for toml in [&packaged, &ds_toml] {
        for p in plugins_on(toml) {
            assert!(
                FEATURES.iter().any(|f| f.name == p && f.default_on),
                "plugin {p} is on in a shipped configuration and has no row in FEATURES"
            );
        }
    }
    let unit = std::fs::read_to_string(root().join("packaging/systemd/rocewatch.service")).unwrap();
    let gaps = unit_gaps(&unit);
    assert!(
        gaps.is_empty(),
        "packaging/systemd/rocewatch.service: {gaps:#?}"
    );
    let needs: Vec<PodNeed> = FEATURES
        .iter()
        .filter(|f| f.default_on)
        .flat_map(|f| f.pod.iter().copied())
        .collect();
    let gaps = pod_gaps(&ds_docs, &needs);
    assert!(
        gaps.is_empty(),
        "deploy/kubernetes/rocewatch-daemonset.yaml: {gaps:#?}"
    );
    let npd = yaml_docs("deploy/kubernetes/node-problem-detector.yaml");
    // The binary the init container copies in is an emptyDir, not the host's.
    let gaps = pod_gaps(&npd, HEALTH_IN_A_POD);
    assert!(
        gaps.is_empty(),
        "deploy/kubernetes/node-problem-detector.yaml: {gaps:#?}"
    );
}
