//! `rocewatch health`: the verdict, printed as a scheduler reads it.

use anyhow::Result;

use clap::Args;

use super::output::print_json;
use super::source::SourceArgs;
use rocewatch_health::{Report, Status};

/// `rocewatch health`'s arguments.
#[derive(Debug, Args)]
pub struct HealthArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Root of the proc tree that goes with --sysfs-root (default /proc): the uptime the
    /// kernel-log window ends at (`uptime`), so a recorded log is read against its own
    /// host's clock. In a pod with the host's / at /host: --procfs-root /host/proc.
    #[arg(long, value_name = "DIR")]
    pub procfs_root: Option<std::path::PathBuf>,
    /// Root of the host's file system that goes with --sysfs-root (overrides [health]
    /// rootfs, default /): the userspace check's rdma-core, libibverbs providers and
    /// device files. In a pod with the host's / at /host: --rootfs /host.
    #[arg(long, value_name = "DIR")]
    pub rootfs: Option<std::path::PathBuf>,
    /// After the line, every finding: STATUS check subject: what.
    #[arg(long, conflicts_with = "json")]
    pub all: bool,
    /// Print JSON: {"verdict","line","findings":[{"check","status","device","port",
    /// "netdev","what"}]}.
    #[arg(long)]
    pub json: bool,
    /// A running agent's Prometheus endpoint, whose /rules are read (overrides [health]
    /// agent). Example: --agent http://127.0.0.1:9464
    #[arg(long, value_name = "URL")]
    pub agent: Option<String>,
    /// Act on the verdict as Slurm's HealthCheckProgram (or a prolog): unhealthy drains
    /// this node (scontrol update nodename=NODE state=drain reason="rocewatch: FINDING")
    /// and puts the host in quarantine (origin health, audited); healthy again releases
    /// that quarantine and resumes the node, only when the drain's reason is rocewatch's
    /// (an administrator's drain stays). A quarantine a rule or an operator set keeps the
    /// node drained. Cannot tell: Slurm is left as it is. What was done goes to stderr.
    #[arg(long)]
    pub slurm: bool,
    /// With --slurm: this node's Slurm name (default: $SLURMD_NODENAME, else the host
    /// name up to its first dot, as slurmd takes it).
    #[arg(long, value_name = "NAME", requires = "slurm")]
    pub slurm_node: Option<String>,
    /// With --slurm: the scontrol to run (SLURM_CONF is passed through).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "scontrol",
        requires = "slurm"
    )]
    pub scontrol: std::path::PathBuf,
}

pub async fn run(a: HealthArgs) -> Result<i32> {
    let HealthArgs {
        source,
        procfs_root,
        rootfs,
        all,
        json,
        agent,
        slurm,
        slurm_node,
        scontrol,
    } = a;
    // A configuration that does not load is "cannot tell" (2), said in one line.
    let cfg = match source.load() {
        Ok(c) => c,
        Err(e) => {
            let line =
                rocewatch_health::bounded(&format!("cannot tell: {e}"), rocewatch_health::LINE_MAX);
            println!("{line}");
            eprintln!("rocewatch health: {e:#}");
            return Ok(2);
        }
    };
    let mut health = cfg.health.clone();
    if let Some(root) = rootfs {
        health.rootfs = root;
    }
    if let Some(url) = agent {
        health.agent = Some(url);
        if let Err(e) = health.validate() {
            anyhow::bail!("--agent: {}", e.why);
        }
    }
    let mut opts = cfg.health_options(rocewatch_runtime::audit::state_dir());
    opts.rail_rows =
        super::rails::rows(&cfg, &super::rails::fleet_host(&cfg)).map_err(|e| format!("{e:#}"));
    if let Some(root) = procfs_root {
        opts.procfs_root = root;
    }
    let mut report = rocewatch_health::run(&opts, &health).await;
    if slurm {
        let env_name = std::env::var("SLURMD_NODENAME").ok();
        let name = rocewatch_slurm::this_node_name(slurm_node.as_deref().or(env_name.as_deref()))
            .map_err(|e| anyhow::anyhow!("--slurm: this node's name: {e}"))?;
        let node = rocewatch_health::slurm::SlurmNode {
            scontrol: rocewatch_slurm::Scontrol::new(scontrol),
            name,
        };
        let audit = cfg.remediation.audit();
        match rocewatch_health::slurm::act(report.clone(), &opts, &audit, &node).await {
            Ok((after, done)) => {
                for d in done {
                    eprintln!("rocewatch health --slurm: {d}");
                }
                report = after;
            }
            Err(e) => {
                // The verdict stands; what could not be done is said (Slurm's log keeps
                // the program's standard error).
                eprintln!("rocewatch health --slurm: {e}");
            }
        }
    }
    if json {
        print_json(&serde_json::to_value(&report)?)?;
    } else {
        println!("{}", report.line);
        if all {
            print!("{}", table(&report));
        }
    }
    Ok(report.verdict.exit_code())
}

/// Every finding, one per line: `UNHEALTHY ports mlx5_1/1 ens1f1np1: port DOWN`.
fn table(r: &Report) -> String {
    r.findings
        .iter()
        .map(|f| {
            let status = match f.status {
                Status::Ok => "OK",
                Status::Skipped => "SKIPPED",
                Status::Warning => "WARNING",
                Status::Unknown => "UNKNOWN",
                Status::Unhealthy => "UNHEALTHY",
            };
            let subject = f.subject();
            // The detail (how old the reading held against is) is said here and in
            // --json, never in the one line a scheduler drains by.
            let detail = f
                .detail
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            let line = if subject.is_empty() {
                format!("{status:<9} {:<10} {}{detail}", f.check, f.what)
            } else {
                format!("{status:<9} {:<10} {subject}: {}{detail}", f.check, f.what)
            };
            // A name read from the host cannot start a line of its own.
            format!("{}\n", rocewatch_health::bounded(&line, 8192))
        })
        .collect()
}
