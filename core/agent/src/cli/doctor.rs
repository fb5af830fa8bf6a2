//! `rocewatch doctor`: the troubleshooting guide as checks, printed.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use super::output::print_json;
use super::progress::Progress;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_plugin_api::{PluginKind, DEFAULT_PROBE_TCP_PORT};
use rocewatch_runtime::util::duration::{LOOK_BACK, WATCH};

/// `rocewatch doctor`'s arguments.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// A peer to probe over RDMA and to check the path MTU to.
    #[arg(long, value_name = "IP")]
    pub peer: Option<String>,
    /// With --peer, also a 3 s bandwidth test (RDMA WRITE, 4 queue pairs of 64 KiB
    /// messages); the peer's responder must allow it.
    #[arg(long, requires = "peer")]
    pub bandwidth: bool,
    /// The priority RoCE traffic uses (PFC and ECN are expected on it).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..8))]
    pub priority: u8,
    /// The peer's RDMA CM listener port, for --peer's probe through the connection
    /// manager (`rocewatch probe --serve --cm --cm-port` there).
    #[arg(long, value_name = "PORT", default_value_t = rocewatch_probes::DEFAULT_CM_PORT)]
    pub cm_port: u16,
    /// The cable length in metres, for the PFC headroom a lossless buffer needs (default:
    /// what the driver reports, else mlx5's 7 m).
    #[arg(long, value_name = "METRES", value_parser = clap::value_parser!(u32).range(1..1000))]
    pub cable_length: Option<u32>,
    /// How long the counters are watched (100ms to 1h).
    #[arg(long, value_parser = WATCH.flag(), default_value = "5s", value_name = "DUR")]
    pub window: Duration,
    /// How far back the kernel log's RDMA/NIC driver messages are read (command
    /// timeouts, health, syndromes, ACCESS_REG, PCIe power, temperature, link flaps), from
    /// /dev/kmsg or the kernel-log path: dmesg, kern.log, journalctl -k output.
    #[arg(long, value_parser = LOOK_BACK.flag(), default_value = "24h", value_name = "DUR")]
    pub log_window: Duration,
    /// Print JSON: {"checks":[{"check","subject","status","evidence","fix"}]}.
    #[arg(long)]
    pub json: bool,
    /// Also check an application's NCCL_*/UCX_*/OMPI_MCA_* settings against what this host
    /// needs: a file of NAME=value lines (an env file, `env` output, exports), or `-` for
    /// this process's environment. One check per variable, with the fix.
    #[arg(long, value_name = "FILE|-")]
    pub env: Option<String>,
    /// What the RDMA ports are meant to run: `ethernet` (RoCE) or `infiniband`. A port
    /// running the other fails, with the firmware setting that changes it. Without it, a
    /// port unlike most of the host's warns.
    #[arg(long, value_name = "LAYER", value_parser = ["ethernet", "infiniband"])]
    pub link_layer: Option<String>,
    /// Root of the proc tree that goes with --sysfs-root (default /proc): the NICs'
    /// interrupts (`interrupts`, `irq/<N>/smp_affinity_list`) for the NUMA check, the
    /// kernel release (`sys/kernel/osrelease`) for the driver check, the uptime (`uptime`)
    /// the kernel-log window ends at.
    /// Example: --sysfs-root integration-tests/fixtures/gpu-two-socket/sys
    ///          --procfs-root integration-tests/fixtures/gpu-two-socket/proc
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub procfs_root: std::path::PathBuf,
    /// Root of the host's file system that goes with --sysfs-root (default /): the device
    /// files (dev/infiniband/uverbsN, rdma_cm), the libibverbs providers
    /// (etc/libibverbs.d, usr/lib/*/libibverbs) and rdma-core's version. In a container
    /// with the host's / mounted at /host: --sysfs-root /host/sys --rootfs /host.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub rootfs: std::path::PathBuf,
    /// The user the workload runs as: can it open the device files (default: this
    /// process's user).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// The workload's process: its locked-memory limit and CAP_IPC_LOCK (default: this
    /// process's).
    #[arg(long, value_name = "PID", conflicts_with = "unit")]
    pub pid: Option<u32>,
    /// The workload's systemd unit: its main process's locked-memory limit, or the limit
    /// it would start with.
    #[arg(long, value_name = "UNIT")]
    pub unit: Option<String>,
    /// What the workload registers (host buffers, nvidia-peermem GPU buffers, queue
    /// rings), e.g. 4GiB: a locked-memory limit below it fails.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memlock_need: Option<u64>,
}

/// `4GiB`, `512MiB`, `64KiB`, `1048576`: bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: a whole number with an optional unit (KiB, MiB, GiB, TiB)"))?;
    let mul: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        u => return Err(format!("{s:?}: unit {u:?}; KiB, MiB, GiB or TiB")),
    };
    n.checked_mul(mul)
        .ok_or_else(|| format!("{s:?} is too large"))
}

pub async fn run(a: DoctorArgs) -> Result<i32> {
    let env = match a.env.as_deref() {
        None => None,
        Some("-") => Some(std::env::vars().collect()),
        Some(file) => Some(rocewatch_doctor::parse_env(
            &std::fs::read_to_string(file).with_context(|| format!("--env {file}"))?,
        )),
    };
    let mut cfg = a.source.load()?;
    // On a terminal, what it waits on (the window is seconds of silence otherwise).
    let progress = Progress::start("doctor");
    progress.waiting("starting the collectors", None);
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
        min_mtu: agent.cfg.health.min_mtu,
        pre_fec_ber_warn: agent.cfg.doctor.pre_fec_ber_warn,
        max_flaps: agent.cfg.health.max_flaps,
        rail_rows: super::rails::rows(&agent.cfg, &super::rails::fleet_host(&agent.cfg))?,
    };
    let waiting = |what: String, until| progress.waiting(what, until);
    let checks = rocewatch_doctor::run_telling(&agent.core, &opts, &waiting).await;
    progress.finish();
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
