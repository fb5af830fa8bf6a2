//! `rocewatch doctor`: the troubleshooting guide as checks, printed.

use std::time::Duration;

use anyhow::{Context, Result};

use super::args::DoctorArgs;
use super::output::print_json;
use crate::app::App;
use rocewatch_plugin_api::{PluginKind, DEFAULT_PROBE_TCP_PORT};

pub async fn run(a: DoctorArgs) -> Result<i32> {
    let env = match a.env.as_deref() {
        None => None,
        Some("-") => Some(std::env::vars().collect()),
        Some(file) => Some(rocewatch_doctor::parse_env(
            &std::fs::read_to_string(file).with_context(|| format!("--env {file}"))?,
        )),
    };
    let mut cfg = a.source.load()?;
    // The probe needs the verbs plugin: the one configured, else the one next to
    // the binary (its absence is the probe check's to report).
    let probe_configured = cfg
        .plugins
        .external
        .iter()
        .any(|e| e.path.ends_with("librocewatch_probe_verbs.so"));
    if a.peer.is_some() && !probe_configured {
        if let Ok(path) = rocewatch_probes::plugin_path() {
            cfg.plugins.external.push(rocewatch_probes::plugin_config(
                path,
                Duration::from_secs(2),
                &None,
                DEFAULT_PROBE_TCP_PORT,
                false,
                false,
                Duration::ZERO,
            ));
        }
    }
    let agent = App::start(
        cfg,
        Some(&[
            PluginKind::Discovery,
            PluginKind::Collector,
            PluginKind::Configuration,
            PluginKind::Probe,
        ]),
    )
    .await;
    let opts = rocewatch_doctor::Options {
        peer: a.peer,
        bandwidth: a.bandwidth,
        priority: a.priority,
        cm_port: a.cm_port,
        cable_length: a.cable_length,
        window: a.window,
        log_window: a.log_window,
        env,
        link_layer: a.link_layer.map(|l| {
            if l == "infiniband" {
                rocewatch_doctor::INFINIBAND
            } else {
                rocewatch_doctor::ETHERNET
            }
        }),
        procfs_root: a.procfs_root,
        rootfs: a.rootfs,
        user: a.user,
        pid: a.pid,
        unit: a.unit,
        memlock_need: a.memlock_need,
        qos: agent.cfg.qos.clone(),
        kernel_log: agent
            .cfg
            .plugins
            .builtin
            .get(crate::builtins::KERNEL_LOG)
            .map(|p| p.options.clone())
            .unwrap_or_else(|| serde_json::json!({})),
    };
    let checks = rocewatch_doctor::run(&agent.core, &opts).await;
    if a.json {
        print_json(&serde_json::json!({ "checks": checks }))?;
    } else {
        print!("{}", rocewatch_doctor::text(&checks));
    }
    let failed = checks
        .iter()
        .any(|c| c.status == rocewatch_doctor::Status::Fail);
    Ok(if failed { 1 } else { 0 })
}
