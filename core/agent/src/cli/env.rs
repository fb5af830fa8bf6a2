//! `rocewatch env`: what NCCL, UCX and Open MPI need on this host.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use super::output::print_json;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_doctor::appenv;
use rocewatch_doctor::shell::one_line;
use rocewatch_plugin_api::PluginKind;
use rocewatch_sysfs::rails;

/// Whose variables `rocewatch env` prints (`rocewatch_doctor::appenv::For`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EnvFor {
    Nccl,
    Ucx,
    Openmpi,
    All,
}

impl From<EnvFor> for rocewatch_doctor::appenv::For {
    fn from(f: EnvFor) -> Self {
        match f {
            EnvFor::Nccl => Self::Nccl,
            EnvFor::Ucx => Self::Ucx,
            EnvFor::Openmpi => Self::Openmpi,
            EnvFor::All => Self::All,
        }
    }
}

/// `rocewatch env`'s arguments.
#[derive(Debug, Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Whose variables.
    #[arg(long = "for", value_enum, default_value = "all")]
    pub target: EnvFor,
    /// shell: `export NAME=value` lines; json: variables, ports and warnings; slurm: a
    /// TaskProlog script (it prints each `export` line whole, as slurmstepd reads it).
    /// Names that could not be printed exactly are left out, with a warning.
    #[arg(long, value_enum, default_value = "shell")]
    pub format: EnvFormat,
    /// Print JSON (variables, ports and warnings); the same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Only RDMA devices whose name matches this glob (e.g. 'mlx5_*').
    #[arg(long, value_name = "GLOB")]
    pub device: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EnvFormat {
    Shell,
    Json,
    Slurm,
}

pub async fn run(a: EnvArgs) -> Result<i32> {
    let EnvArgs {
        source,
        target,
        format,
        json,
        device,
    } = a;
    let format = if json { EnvFormat::Json } else { format };
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
    let rail_map = super::rails::map(&agent.cfg, &super::rails::fleet_host(&agent.cfg), &inv)?;
    let mut ports = rails::ports(&inv, &qos, device.as_ref());
    // Host-side SR-IOV VFs are not rails: their PF's port is (the rail map says which).
    let vfs: Vec<String> = ports
        .iter()
        .filter(|p| rail_map.is_host_vf(&p.device, p.port))
        .map(|p| p.name())
        .collect();
    ports.retain(|p| !rail_map.is_host_vf(&p.device, p.port));
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
    if !vfs.is_empty() {
        env.warnings.push(format!(
            "{} left out: SR-IOV VFs whose PF is an RDMA port of this host too (the PF carries the rail; a VF is for the VM or container it is handed to)",
            vfs.join(", ")
        ));
    }
    for m in &rail_map.missing {
        env.warnings.push(format!(
            "rail {} of the fleet topology ({}) is on no RDMA port of this host: the variables name the others",
            m.rail, m.addr
        ));
    }
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
            "rails": rail_map,
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
