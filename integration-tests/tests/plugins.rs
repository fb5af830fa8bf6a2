//! External plugins as real `.so` files: the example plugin works; a wrong ABI, a missing
//! symbol, a panic, a hang past the timeout and an error each give a clear error naming
//! the plugin and its file, are counted in `rocewatch.plugin.errors`, and leave the agent
//! and the other plugins running.

use std::time::Duration;

use rocewatch::app::App;
use rocewatch::config::Config;
use rocewatch_plugin_api::*;
use rocewatch_runtime::host::call;
use rocewatch_runtime::host::registry::{Instance, State, Status};
use rocewatch_runtime::host::settings::ExternalPluginConfig;

use crate::support::*;

fn external(
    path: &std::path::Path,
    options: serde_json::Value,
    timeout: Option<Duration>,
) -> ExternalPluginConfig {
    let mut toml_doc = serde_json::json!({ "path": path, "options": options });
    if let Some(t) = timeout {
        toml_doc["timeout"] = serde_json::json!(format!("{}ms", t.as_millis()));
    }
    serde_json::from_value(toml_doc).unwrap()
}

fn config(externals: Vec<ExternalPluginConfig>) -> Config {
    let mut cfg = Config::default();
    cfg.agent.sysfs_root = fixture("mlx5-roce-dual-port");
    cfg.agent.host_name = Some("test-host".into());
    cfg.plugins.external = externals;
    cfg
}

fn status<'a>(statuses: &'a [Status], name: &str, kind: Option<PluginKind>) -> &'a Status {
    statuses
        .iter()
        .find(|s| s.name == name && (kind.is_none() || s.kind == kind))
        .unwrap_or_else(|| panic!("no status for {name} {kind:?} in {statuses:#?}"))
}

#[test]
fn example_plugin_collects_and_remediates() {
    let a = artifacts();
    let out = tempfile::tempdir().unwrap();
    let out_file = out.path().join("remediation.jsonl");
    let rt = runtime();
    rt.block_on(async {
        let cfg = config(vec![external(
            &a.example_so,
            serde_json::json!({"output": out_file, "step": 5}),
            None,
        )]);
        let agent = App::start(cfg, None).await;
        let st = agent.registry.statuses();
        let col = status(&st, "example", Some(PluginKind::Collector));
        assert_eq!(col.abi, abi_now());
        assert!(
            matches!(col.origin, rocewatch_runtime::host::registry::Origin::File(ref p) if p == &a.example_so)
        );
        let (r1, f1) = agent.collect_all().await;
        let (r2, _) = agent.collect_all().await;
        assert!(f1.is_empty(), "{f1:?}");
        let beat = |r: &ScrapeResult| {
            r.samples
                .iter()
                .find(|s| s.name == "example.heartbeat")
                .unwrap()
                .clone()
        };
        assert_eq!(beat(&r1).value, Value::U64(5));
        assert_eq!(beat(&r2).value, Value::U64(10));
        assert_eq!(&beat(&r2).attributes["example.host"], "test-host");
        // The built-in collector ran next to it.
        assert!(r2.samples.iter().any(|s| s.name == "rdma.port.io"));

        // The remediation kind, driven through the same runner the agent uses.
        let rem = agent
            .registry
            .of_kind(PluginKind::Remediation)
            .find(|e| e.name == "example")
            .unwrap();
        let req = RemediationRequest {
            action: "record".into(),
            rule: "pfc-storm".into(),
            event: RemediationEvent::Firing,
            labels: [("rdma.device".to_string(), "mlx5_0".to_string())].into(),
            samples: r2.samples[..1].to_vec(),
            dry_run: true,
        };
        let outcome = call::call(
            rem,
            Duration::from_secs(5),
            agent.metrics(),
            move |i| match i {
                Instance::Remediation(r) => r.remediate(&req),
                _ => unreachable!(),
            },
        )
        .await
        .unwrap();
        assert!(!outcome.executed, "dry-run must not execute");
        let written = std::fs::read_to_string(&out_file).unwrap();
        let line: serde_json::Value =
            serde_json::from_str(written.lines().next().unwrap()).unwrap();
        assert_eq!(line["rule"], "pfc-storm");
        assert_eq!(line["dry_run"], true);
        assert_eq!(line["labels"]["rdma.device"], "mlx5_0");
    });
    rt.shutdown_background();
}

#[test]
fn faulty_plugins_are_contained_named_and_counted() {
    let a = artifacts();
    let rt = runtime();
    rt.block_on(async {
        let timeout = Some(Duration::from_millis(400));
        let roomy = Some(Duration::from_secs(2));
        let cfg = config(vec![
            external(&a.wrong_abi_so, serde_json::json!({}), None),
            external(&a.no_symbol_so, serde_json::json!({}), None),
            external(&a.null_fn_so, serde_json::json!({}), None),
            external(
                std::path::Path::new("/nonexistent/libnothing.so"),
                serde_json::json!({}),
                None,
            ),
            // A panic prints a backtrace (RUST_BACKTRACE), which on a loaded machine can
            // take longer than the hang's short timeout: these get room to finish.
            external(&a.fault_so, serde_json::json!({"mode": "panic"}), roomy),
            external(&a.fault_so, serde_json::json!({"mode": "error"}), roomy),
            external(
                &a.fault_so,
                serde_json::json!({"mode": "hang", "hang_ms": 3000}),
                timeout,
            ),
            external(&a.example_so, serde_json::json!({}), None),
        ]);
        let agent = App::start(cfg, None).await;
        let st = agent.registry.statuses();

        // Load-time failures: Failed, the message names the file and the cause.
        let wrong = st
            .iter()
            .find(|s| {
                s.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("libwrong_abi.so"))
            })
            .unwrap();
        assert_eq!(wrong.state, State::Failed);
        let msg = wrong.last_error.as_deref().unwrap();
        assert!(
            msg.contains("ABI version 99.0") && msg.contains(&format!("(ABI {})", abi_now())),
            "{msg}"
        );
        let nosym = st
            .iter()
            .find(|s| {
                s.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("libno_symbol.so"))
            })
            .unwrap();
        assert!(
            nosym
                .last_error
                .as_deref()
                .unwrap()
                .contains("rocewatch_plugin_entry"),
            "{nosym:?}"
        );
        let missing = st
            .iter()
            .find(|s| {
                s.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("/nonexistent/libnothing.so"))
            })
            .unwrap();
        assert_eq!(missing.state, State::Failed);
        assert!(
            missing
                .last_error
                .as_deref()
                .unwrap()
                .contains("No such file or directory"),
            "the loader's own reason: {missing:?}"
        );
        // A table with a NULL function pointer is refused at load, not called (SIGSEGV).
        let null = st
            .iter()
            .find(|s| {
                s.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("libnull_fn.so"))
            })
            .unwrap();
        assert_eq!(null.state, State::Failed);
        assert!(
            null.last_error
                .as_deref()
                .unwrap()
                .contains("`call` is a null pointer"),
            "{null:?}"
        );
        assert_eq!(
            agent.metrics().plugin_errors(
                "wrong_abi",
                rocewatch_metrics::labels::PluginErrorReason::Abi
            ),
            1
        );
        assert_eq!(
            agent.metrics().plugin_errors(
                "no_symbol",
                rocewatch_metrics::labels::PluginErrorReason::Load
            ),
            1
        );

        // Two rounds of collection with panicking, failing and hanging collectors.
        let started = std::time::Instant::now();
        let (r1, f1) = agent.collect_all().await;
        let (r2, f2) = agent.collect_all().await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a hung plugin must not hold up collection: {:?}",
            started.elapsed()
        );
        for r in [&r1, &r2] {
            assert!(
                r.samples.iter().any(|s| s.name == "rdma.port.io"),
                "built-in collector keeps working"
            );
            assert!(
                r.samples.iter().any(|s| s.name == "example.heartbeat"),
                "other external plugins keep working"
            );
        }
        let all: Vec<String> = f1.iter().chain(&f2).map(|e| e.to_string()).collect();
        let fault = a.fault_so.display().to_string();
        assert!(
            all.iter().any(|e| e.contains(&fault)
                && e.contains("panicked")
                && e.contains("deliberate panic")),
            "{all:#?}"
        );
        assert!(
            all.iter()
                .any(|e| e.contains(&fault) && e.contains("deliberate error")),
            "{all:#?}"
        );
        assert!(
            all.iter()
                .any(|e| e.contains(&fault) && e.contains("timed out after 400ms")),
            "{all:#?}"
        );
        assert!(
            all.iter()
                .any(|e| e.contains(&fault) && e.contains("still running")),
            "second call of the hung plugin is skipped: {all:#?}"
        );
        assert_eq!(
            agent
                .metrics()
                .plugin_errors("fault", rocewatch_metrics::labels::PluginErrorReason::Panic),
            2
        );
        assert_eq!(
            agent
                .metrics()
                .plugin_errors("fault", rocewatch_metrics::labels::PluginErrorReason::Error),
            2
        );
        assert_eq!(
            agent.metrics().plugin_errors(
                "fault",
                rocewatch_metrics::labels::PluginErrorReason::Timeout
            ),
            1
        );
        assert_eq!(
            agent
                .metrics()
                .plugin_errors("fault", rocewatch_metrics::labels::PluginErrorReason::Busy),
            1
        );
        // The fault plugin's discovery kind always panics: caught, and discovery of the
        // built-in plugin still returns the devices.
        let inv = agent.discover().await.unwrap();
        assert_eq!(inv.devices.len(), 2);
        assert!(
            agent
                .metrics()
                .plugin_errors("fault", rocewatch_metrics::labels::PluginErrorReason::Panic)
                >= 3
        );

        // Self-metrics are exported as samples too.
        let selfm = agent.metrics().samples();
        assert!(selfm
            .iter()
            .any(|s| s.name == "rocewatch.plugin.errors" && &s.attributes["reason"] == "timeout"));
        let st = agent.registry.statuses();
        let builtin = status(&st, "counters-sysfs", Some(PluginKind::Collector));
        assert_eq!(builtin.state, State::Started);
    });
    rt.shutdown_background();
}

#[test]
fn plugins_command_lists_kind_origin_abi_state_and_error() {
    let a = artifacts();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\n\n[[plugins.external]]\npath = {:?}\n\n[[plugins.external]]\npath = {:?}\n",
            fixture("mlx5-roce-dual-port"),
            a.example_so,
            a.wrong_abi_so
        ),
    )
    .unwrap();
    let o = rocewatch(
        &["plugins", "--config", cfg.to_str().unwrap(), "--json"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let list = v.as_array().unwrap();
    let find = |name: &str, kind: &str| {
        list.iter()
            .find(|p| p["name"] == name && p["kind"] == kind)
            .cloned()
    };
    let counters = find("counters-sysfs", "collector").unwrap();
    assert_eq!(counters["origin"]["type"], "builtin");
    assert_eq!(counters["state"], "started");
    let ex = find("example", "collector").unwrap();
    assert_eq!(ex["origin"]["path"], a.example_so.display().to_string());
    assert_eq!(ex["abi"], abi_now());
    assert!(find("example", "remediation").is_some());
    let bad = list.iter().find(|p| p["name"] == "wrong_abi").unwrap();
    assert_eq!(bad["state"], "failed");
    assert!(bad["last_error"].as_str().unwrap().contains("ABI"));
    // And the human table.
    let o = rocewatch(&["plugins", "--config", cfg.to_str().unwrap()], &[]);
    let t = stdout(&o);
    assert!(
        t.contains("NAME")
            && t.contains("built-in")
            && t.contains("libexample_plugin.so")
            && t.contains("failed"),
        "{t}"
    );
}

#[test]
fn a_plugin_others_could_replace_is_refused_unless_allowed() {
    let a = artifacts();
    // The example plugin, copied into a directory everyone may write to.
    let dir = tempfile::Builder::new()
        .prefix("rocewatch-insecure-")
        .tempdir_in(target_dir())
        .unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let so = open.join("libexample_plugin.so");
    std::fs::copy(&a.example_so, &so).unwrap();
    let load = |allow: bool| {
        let mut e = external(&so, serde_json::json!({}), None);
        e.allow_insecure_path = allow;
        let rt = runtime();
        rt.block_on(async {
            let app = App::start(config(vec![e]), None).await;
            app.registry.statuses()
        })
    };
    let st = load(false);
    let refused = st
        .iter()
        .find(|s| {
            s.last_error
                .as_deref()
                .is_some_and(|e| e.contains("writable by others"))
        })
        .unwrap_or_else(|| panic!("not refused: {st:#?}"));
    assert_eq!(refused.state, State::Failed);
    let msg = refused.last_error.as_deref().unwrap();
    assert!(
        msg.contains(&so.display().to_string()) && msg.contains("allow_insecure_path"),
        "{msg}"
    );
    // With the override it loads.
    let st = load(true);
    assert!(
        st.iter()
            .any(|s| s.name == "example" && s.state != State::Failed),
        "{st:#?}"
    );
}

/// The ABI this build speaks, as `plugins` shows it.
fn abi_now() -> String {
    use rocewatch_plugin_sdk::abi::{ABI_MAJOR, ABI_MINOR};
    format!("{ABI_MAJOR}.{ABI_MINOR}")
}
