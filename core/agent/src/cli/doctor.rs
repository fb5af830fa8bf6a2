//! `rocewatch doctor`: the troubleshooting guide as checks, printed.

use std::time::Duration;

use anyhow::{Context, Result};

use super::args::DoctorArgs;
use super::output::print_json;
use crate::app::App;
use rocewatch_plugin_api::PluginKind;

pub async fn run(a: DoctorArgs) -> Result<i32> {
    let DoctorArgs {
        source,
        peer,
        bandwidth,
        priority,
        cm_port,
        cable_length,
        window,
        log_window,
        json,
        env,
        link_layer,
        procfs_root,
        rootfs,
        user,
        pid,
        unit,
        memlock_need,
    } = a;
    let env = match env.as_deref() {
        None => None,
        Some("-") => Some(std::env::vars().collect()),
        Some(file) => Some(rocewatch_doctor::parse_env(
            &std::fs::read_to_string(file).with_context(|| format!("--env {file}"))?,
        )),
    };
    let mut cfg = source.load()?;
    // The probe needs the verbs plugin: the one configured, else the one next to
    // the binary (its absence is the probe check's to report).
    let probe_configured = cfg
        .plugins
        .external
        .iter()
        .any(|e| e.path.ends_with("librocewatch_probe_verbs.so"));
    if peer.is_some() && !probe_configured {
        if let Ok(path) = rocewatch_probes::plugin_path() {
            cfg.plugins.external.push(rocewatch_probes::plugin_config(
                path,
                Duration::from_secs(2),
                &None,
                18516,
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
        peer,
        bandwidth,
        priority,
        cm_port,
        cable_length,
        window,
        log_window,
        env,
        link_layer: link_layer.map(|l| {
            if l == "infiniband" {
                rocewatch_doctor::INFINIBAND
            } else {
                rocewatch_doctor::ETHERNET
            }
        }),
        procfs_root,
        rootfs,
        user,
        pid,
        unit,
        memlock_need,
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
    if json {
        print_json(&serde_json::json!({ "checks": checks }))?;
    } else {
        print!("{}", rocewatch_doctor::text(&checks));
    }
    let failed = checks
        .iter()
        .any(|c| c.status == rocewatch_doctor::Status::Fail);
    Ok(if failed { 1 } else { 0 })
}
