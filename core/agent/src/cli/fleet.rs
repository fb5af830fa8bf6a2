//! `rocewatch fleet`: the fleet's topology and the pinglists each host derives from it
//! (`rocewatch_fleet`), printed for operators and tests.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::builder::TypedValueParser as _;
use clap::{Args, Subcommand, ValueEnum};

use super::output::print_json;
use rocewatch_fleet::{pinglist, Class, Options, Pinglist, Plan, Topology};

/// `rocewatch fleet`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Print the pinglists hosts derive from a topology file: each host's ToR mesh (every
    /// other host on its ToR and rail) and its cross-ToR peers (rendezvous-hashed, so that
    /// every ordered pair of ToRs is probed on every rail by --probers different hosts).
    ///
    /// The topology is CSV with a header naming host,rail,addr,tor (tor_port read when
    /// present, other columns ignored), one line per NIC, as a CMDB exports it:
    ///   host,rail,addr,tor
    ///   gpu001,0,10.0.0.1,leaf-r01-a
    /// Every host computes its own list alone; this prints what it will compute.
    /// With --prometheus the map is the NIC info series the hosts export
    /// (rdma_fleet_nic_info), read from the metrics backend as the agent's
    /// [fleet] source = "prometheus" reads it.
    ///
    /// Examples:
    ///   rocewatch fleet plan --topology fleet.csv --host gpu001
    ///   rocewatch fleet plan --topology fleet.csv --all --format json
    ///   rocewatch fleet plan --prometheus http://vm:8428 --host gpu001
    #[command(verbatim_doc_comment)]
    Plan(PlanArgs),
    /// Print this host's lines of the topology file: each RDMA port's rank, the address
    /// of its RoCE v2 GID, and the switch and port its netdev is cabled to, from LLDP
    /// (lldpd's `lldpcli -f json0 show neighbors details`).
    ///
    /// Run on every host and gather the lines to build the fleet's topology file:
    ///   srun --ntasks-per-node=1 rocewatch fleet topology --no-header > fleet.body
    ///   (echo host,rail,addr,tor,tor_port; cat fleet.body) > fleet.csv
    /// A port with no address or no LLDP neighbour is left out and named on stderr
    /// (exit status 1); lldpd must run on the host (Debian: apt install lldpd).
    #[command(verbatim_doc_comment)]
    Topology(TopologyArgs),
}

/// `rocewatch fleet topology`'s arguments.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    #[command(flatten)]
    pub source: super::args_sub::SourceArgs,
    /// Read lldpcli's JSON (-f json0 show neighbors details) from this file instead of
    /// running lldpcli.
    #[arg(long, value_name = "FILE")]
    pub lldp_json: Option<PathBuf>,
    /// The lldpcli to run.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "lldpcli",
        conflicts_with = "lldp_json"
    )]
    pub lldpcli: PathBuf,
    /// This host's name as the fleet spells it (default: the configured host name, else
    /// the kernel's, up to its first dot).
    #[arg(long, value_name = "NAME")]
    pub this_host: Option<String>,
    /// No header line (for lines gathered from many hosts).
    #[arg(long)]
    pub no_header: bool,
}

/// Text or JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// `rocewatch fleet plan`'s arguments.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("who").required(true).args(["host", "all"])))]
#[command(group(clap::ArgGroup::new("map").required(true).args(["topology", "prometheus"])))]
pub struct PlanArgs {
    /// The topology file (CSV: host,rail,addr,tor).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// The metrics backend's Prometheus HTTP API (Prometheus, VictoriaMetrics): the map
    /// is its NIC info series.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// The instant query giving the NIC info series (with --prometheus).
    #[arg(
        long,
        value_name = "PROMQL",
        default_value = "rdma_fleet_nic_info",
        requires = "prometheus"
    )]
    pub query: String,
    /// The host whose pinglist to print, as the topology spells it.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Every host's pinglist (text: one line a host), and the cross-ToR coverage (the
    /// first 20 pairs left short named).
    #[arg(long)]
    pub all: bool,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Cross-ToR probers per ordered pair of ToRs and rail.
    #[arg(long, default_value_t = pinglist::DEFAULT_PROBERS, value_parser = clap::value_parser!(u16).range(1..=16).map(usize::from))]
    pub probers: usize,
    /// Peers per host at most (cross-ToR peers are cut first, and counted).
    #[arg(long, default_value_t = pinglist::DEFAULT_MAX_PEERS, value_parser = clap::value_parser!(u32).range(1..=100_000).map(|v| v as usize))]
    pub max_peers: usize,
}

pub async fn run(c: FleetCommand) -> Result<i32> {
    match c {
        FleetCommand::Plan(a) => plan(a),
        FleetCommand::Topology(a) => topology(a).await,
    }
}

/// lldpcli's neighbours, from the file or from running it.
fn lldp_neighbours(a: &TopologyArgs) -> Result<Vec<rocewatch_fleet::lldp::Neighbour>> {
    match &a.lldp_json {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("--lldp-json {}", f.display()))?;
            rocewatch_fleet::lldp::parse(&text).with_context(|| f.display().to_string())
        }
        None => crate::fleet::lldp_neighbours(&a.lldpcli).map_err(anyhow::Error::msg),
    }
}

async fn topology(a: TopologyArgs) -> Result<i32> {
    use rocewatch_fleet::topology::csv_field;
    let neighbours = lldp_neighbours(&a)?;
    let cfg = a.source.load()?;
    let host = a
        .this_host
        .clone()
        .unwrap_or_else(|| crate::app::fleet_host_name(&cfg));
    let app =
        crate::app::App::start(cfg, Some(&[rocewatch_plugin_api::PluginKind::Discovery])).await;
    let inv = app.discover().await.context("discovering RDMA devices");
    app.stop().await;
    let ports = crate::fleet::local_ports(&inv?);
    let (rows, left) = rocewatch_fleet::lldp::rows(&host, &ports, &neighbours);
    let mut out = String::new();
    if !a.no_header {
        out.push_str("host,rail,addr,tor,tor_port\n");
    }
    for n in &rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{}",
            csv_field(&n.host),
            n.rail,
            n.addr,
            csv_field(&n.tor),
            csv_field(n.tor_port.as_deref().unwrap_or(""))
        );
    }
    // A port given a row with a remark (several neighbours) is not left out.
    let mut left_out = 0;
    for l in &left {
        let kept = rows.iter().any(|n| usize::from(n.rail) == l.rail);
        if !kept {
            left_out += 1;
        }
        let verb = if kept { "note" } else { "left out" };
        eprintln!("rocewatch: rail {} ({}): {verb}: {}", l.rail, l.name, l.why);
    }
    print!("{out}");
    Ok(i32::from(left_out > 0))
}

/// The map from the file or the backend (series it could not read are named on stderr).
fn read_map(a: &PlanArgs) -> Result<Topology> {
    if let Some(url) = &a.prometheus {
        // A blocking client, off the runtime's threads.
        let (u, q) = (url.clone(), a.query.clone());
        let (nics, left) = std::thread::spawn(move || {
            rocewatch_probes::fleet::fetch_prometheus(&u, &q, std::time::Duration::from_secs(10))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("{url}: the query's thread panicked"))?
        .map_err(anyhow::Error::msg)?;
        for l in &left {
            eprintln!("rocewatch: left out: {l}");
        }
        if nics.is_empty() {
            anyhow::bail!("{url}: the query {:?} gave no NIC", a.query);
        }
        return Topology::from_nics(nics).map_err(|e| anyhow::anyhow!("{url}: {e}"));
    }
    let path = a.topology.as_ref().context("--topology or --prometheus")?;
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
    Ok(Topology::parse(&name, &text)?)
}

fn plan(a: PlanArgs) -> Result<i32> {
    let topo = read_map(&a)?;
    let opts = Options {
        probers: a.probers,
        max_peers: a.max_peers,
    };
    let plan = Plan::new(&topo, opts);
    match (a.host, a.format) {
        (Some(host), Format::Json) => print_json(&serde_json::to_value(plan.of(&host)?)?)?,
        (Some(host), Format::Text) => print!("{}", host_text(&plan.of(&host)?)),
        (None, format) => {
            let lists = plan.all();
            let cov = pinglist::Coverage::of(&topo, &lists, opts);
            if format == Format::Json {
                print_json(&serde_json::json!({
                    "options": opts,
                    "hosts": lists,
                    "coverage": cov,
                }))?;
            } else {
                print!("{}", all_text(&lists, &cov));
            }
        }
    }
    Ok(0)
}

fn counts(l: &Pinglist) -> (usize, usize) {
    let same = l.peers.iter().filter(|p| p.class == Class::SameTor).count();
    (same, l.peers.len() - same)
}

/// One host's list, as a table.
fn host_text(l: &Pinglist) -> String {
    let (same, cross) = counts(l);
    let mut out = format!(
        "{}: {} peers ({same} same ToR, {cross} cross ToR){}\n",
        l.host,
        l.peers.len(),
        if l.truncated > 0 {
            format!(", {} cut by --max-peers", l.truncated)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "{:<5} {:<10} {:<24} {:<40} tor",
        "rail", "class", "peer", "addr"
    );
    for p in &l.peers {
        let _ = writeln!(
            out,
            "{:<5} {:<10} {:<24} {:<40} {}",
            p.rail,
            p.class.as_str(),
            p.host,
            p.addr,
            p.tor
        );
    }
    out
}

/// Every host: one line each, then the coverage.
fn all_text(lists: &[Pinglist], cov: &pinglist::Coverage) -> String {
    let mut out = format!(
        "{:<24} {:>6} {:>9} {:>10} {:>4}\n",
        "host", "peers", "same_tor", "cross_tor", "cut"
    );
    for l in lists {
        let (same, cross) = counts(l);
        let _ = writeln!(
            out,
            "{:<24} {:>6} {:>9} {:>10} {:>4}",
            l.host,
            l.peers.len(),
            same,
            cross,
            l.truncated
        );
    }
    let _ = writeln!(
        out,
        "cross-ToR coverage: {} of {} ordered ToR pairs × rails have their probers",
        cov.full, cov.pairs
    );
    for s in &cov.short {
        let _ = writeln!(out, "  short: {s}");
    }
    out
}
