//! `rocewatch env`: what NCCL, UCX and Open MPI need on this host.

use anyhow::{Context, Result};

use super::args::{EnvArgs, EnvFormat};
use super::output::print_json;
use crate::app::App;
use rocewatch_doctor::appenv;
use rocewatch_doctor::shell::one_line;
use rocewatch_plugin_api::PluginKind;
use rocewatch_sysfs::rails;

pub async fn run(a: EnvArgs) -> Result<i32> {
    let EnvArgs {
        source,
        target,
        format,
        device,
    } = a;
    let cfg = source.load()?;
    let device = device
        .map(|g| {
            globset::Glob::new(&g)
                .map(|g| g.compile_matcher())
                .with_context(|| format!("--device {g:?}"))
        })
        .transpose()?;
    let agent = App::start(
        cfg,
        Some(&[PluginKind::Discovery, PluginKind::Configuration]),
    )
    .await;
    let inv = agent.discover().await.context("discovering RDMA devices")?;
    // Without the QoS state the traffic class is unknown, not fatal: said below.
    let qos = agent.observe_qos().await.unwrap_or_default();
    let ports = rails::ports(&inv, &qos, device.as_ref());
    let tos = appenv::desired_tos(&agent.cfg.qos, &qos);
    // On the live host the interfaces' addresses say which IPoIB netdev can carry
    // sockets; a sysfs tree has none to tell.
    let live = rocewatch_sysfs::read::is_sysfs(&agent.cfg.agent.sysfs_root);
    let addrs = if live {
        rocewatch_netlink::ifaddrs::interface_addresses().ok()
    } else {
        None
    };
    let mut env = appenv::compute(ports, tos, target.into(), addrs.as_ref());
    if env.ports.is_empty() {
        env.warnings.insert(
            0,
            format!(
                "no RDMA device{} under {}/class/infiniband",
                if device.is_some() {
                    " matching --device"
                } else {
                    ""
                },
                agent.cfg.agent.sysfs_root.display()
            ),
        );
    }
    let host = agent.host_name.clone();
    agent.stop().await;
    match format {
        EnvFormat::Json => print_json(&serde_json::json!({
            "variables": env.variables.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone()))).collect::<serde_json::Map<_, _>>(),
            "ports": env.ports,
            "warnings": env.warnings,
        }))?,
        EnvFormat::Shell | EnvFormat::Slurm => {
            // Names in warnings may hold line breaks or escapes: one line each.
            for w in &env.warnings {
                eprintln!("rocewatch env: warning: {}", one_line(w));
            }
            if matches!(format, EnvFormat::Shell) {
                print!("{}", appenv::shell(&env));
            } else {
                print!("{}", appenv::slurm(&env, &host));
            }
        }
    }
    Ok(if env.variables.is_empty() { 1 } else { 0 })
}
