//! `rocewatch fleet`: the fleet's topology and the pinglists each host derives from it
//! (`rocewatch_fleet`), printed for operators and tests.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::builder::TypedValueParser as _;
use clap::{Args, Subcommand, ValueEnum};

use super::output::print_json;
use rocewatch_fleet::{pinglist, Class, Options, Pinglist, Plan, Topology};
use rocewatch_runtime::util::duration::Bounds;

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
    ///   rocewatch fleet plan --topology fleet.csv --all --json
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
    /// Simulate the whole fleet of a topology probing its pinglists, with faults, and
    /// write the series every host would export (the agent's own round and statistics
    /// code, fed with outcomes from a model of the fabric) for loading into
    /// VictoriaMetrics or Prometheus, to try the localization rules.
    ///
    /// Faults (each from --fault-after on):
    ///   nic_down:HOST[/RAIL]   the NIC answers and sends nothing
    ///   host_overloaded:HOST   its own probes time out at random (30 %)
    ///   tor_down:TOR           every NIC on the ToR is cut off
    ///   uplink_loss:TOR        1 % loss on the ToR's uplinks
    ///   ecmp_blackhole:N       equal-cost path N of --ecmp-paths drops everything
    ///   link_loss:HOST[/RAIL]  0.1 % loss on the host's link
    ///
    /// Writes DIR/series.prom (timestamped Prometheus text: curl --data-binary
    /// @series.prom http://vm:8428/api/v1/import/prometheus) and DIR/faults.json
    /// (each fault, when it started, and the suspect the rules should name).
    ///
    /// Example:
    ///   rocewatch fleet simulate --topology fleet.csv --fault tor_down:leaf-r07 --out sim/
    #[command(verbatim_doc_comment)]
    Simulate(SimulateArgs),
}

const SIM_SPAN: Bounds = Bounds {
    min: std::time::Duration::from_secs(1),
    max: std::time::Duration::from_secs(7 * 86_400),
    zero_means: None,
};
const SIM_STEP: Bounds = Bounds {
    min: std::time::Duration::from_secs(1),
    max: std::time::Duration::from_secs(3600),
    zero_means: None,
};
const SIM_FAULT_AFTER: Bounds = Bounds {
    min: std::time::Duration::ZERO,
    max: std::time::Duration::from_secs(7 * 86_400),
    zero_means: Some("from the first round"),
};

/// `rocewatch fleet simulate`'s arguments.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The topology file (CSV: host,rail,addr,tor).
    #[arg(long, value_name = "FILE")]
    pub topology: PathBuf,
    /// A fault to inject, KIND:TARGET (repeat for several).
    #[arg(long, value_name = "KIND:TARGET")]
    pub fault: Vec<rocewatch_probes::fleet::simulate::Fault>,
    /// The directory to write series.prom and faults.json to (created).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Simulated time.
    #[arg(long, value_parser = SIM_SPAN.flag(), default_value = "30m", value_name = "DUR")]
    pub duration: std::time::Duration,
    /// Simulated time between two rounds of every host.
    #[arg(long, value_parser = SIM_STEP.flag(), default_value = "5s", value_name = "DUR")]
    pub round: std::time::Duration,
    /// Simulated time between two scrapes (what is written).
    #[arg(long, value_parser = SIM_STEP.flag(), default_value = "30s", value_name = "DUR")]
    pub scrape: std::time::Duration,
    /// When the faults start, after the first round.
    #[arg(long, value_parser = SIM_FAULT_AFTER.flag(), default_value = "10m", value_name = "DUR")]
    pub fault_after: std::time::Duration,
    /// Unix time of the first round (default: now, less --duration, so that the series
    /// end now and a backend's default retention keeps them).
    #[arg(long, value_name = "SECONDS")]
    pub start: Option<u64>,
    /// Equal-cost paths between two ToRs.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub ecmp_paths: u32,
    /// Probe loss without any fault.
    #[arg(long, default_value_t = 1e-6)]
    pub background_loss: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// [fleet] as the hosts run it (its pinglist and flow settings; the topology file
    /// given here is the map): the agent's configuration file (TOML), of which only
    /// [fleet] is read.
    #[arg(
        long = "config",
        short = 'c',
        alias = "fleet-config",
        value_name = "FILE"
    )]
    pub fleet_config: Option<PathBuf>,
}

/// `rocewatch fleet topology`'s arguments.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    #[command(flatten)]
    pub source: super::source::SourceArgs,
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
    #[arg(long = "host", alias = "this-host", value_name = "NAME")]
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
        default_value = "timestamp(rdma_fleet_nic_info)",
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
    /// Print JSON: {"options","hosts","coverage"} with --all, the host's pinglist with
    /// --host.
    #[arg(long)]
    pub json: bool,
    /// text or json (the first spelling of --json, kept).
    #[arg(
        long,
        value_enum,
        default_value = "text",
        hide = true,
        conflicts_with = "json"
    )]
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
        FleetCommand::Simulate(a) => simulate(a),
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
        None => {
            rocewatch_probes::fleet::map::lldp_neighbours(&a.lldpcli).map_err(anyhow::Error::msg)
        }
    }
}

async fn topology(a: TopologyArgs) -> Result<i32> {
    use rocewatch_fleet::topology::csv_field;
    let neighbours = lldp_neighbours(&a)?;
    let cfg = a.source.load()?;
    let host = a
        .this_host
        .clone()
        .unwrap_or_else(|| super::rails::fleet_host(&cfg));
    let app =
        crate::app::App::start(cfg, Some(&[rocewatch_plugin_api::PluginKind::Discovery])).await;
    let inv = app.discover().await.context("discovering RDMA devices");
    // Each port at its rail (the rail map: by [fleet] topology when configured, else by
    // PCI address order), never at its rank among the ports present.
    let rail_map = inv.and_then(|inv| super::rails::map(&app.cfg, &host, &inv));
    app.stop().await;
    let rail_map = rail_map?;
    // The ports as the agent's map joins them with LLDP.
    let ports = rocewatch_probes::fleet::rails::lldp_ports(&rail_map);
    let (rows, left) =
        rocewatch_fleet::lldp::rows_at(&host, ports.iter().map(|(r, p)| (*r, p)), &neighbours);
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
    for p in rail_map.ports.iter().filter(|p| p.rail.is_none()) {
        left_out += 1;
        eprintln!(
            "rocewatch: {}: left out: none of its addresses is a row of host {host} in [fleet] topology",
            p.name()
        );
    }
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

fn simulate(a: SimulateArgs) -> Result<i32> {
    use rocewatch_probes::fleet::simulate;
    let name = a.topology.display().to_string();
    let text = std::fs::read_to_string(&a.topology).with_context(|| format!("reading {name}"))?;
    let topo = Topology::parse(&name, &text)?;
    let fleet: rocewatch_probes::fleet::FleetConfig = match &a.fleet_config {
        Some(f) => {
            let t =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            config::Config::builder()
                .add_source(config::File::from_str(&t, config::FileFormat::Toml))
                .build()
                .and_then(|c| c.get("fleet"))
                .with_context(|| format!("{}: its [fleet] table", f.display()))?
        }
        None => serde_json::from_value(serde_json::json!({"topology": "-"})).expect("defaults"),
    };
    let mut fleet = fleet;
    fleet.topology = Some(a.topology.clone());
    fleet
        .validate()
        .map_err(|(k, m)| anyhow::anyhow!("--fleet-config: {k}: {m}"))?;
    let hosts: std::collections::BTreeSet<&str> = topo.hosts().into_iter().collect();
    let tors: std::collections::BTreeSet<&str> =
        topo.nics().iter().map(|n| n.tor.as_str()).collect();
    for f in &a.fault {
        let (kind, target) = f.suspect();
        let known = match kind {
            "nic" | "link" | "prober" => hosts.contains(target.as_str()),
            "tor" | "uplink" => tors.contains(target.as_str()),
            _ => true,
        };
        if !known {
            anyhow::bail!("--fault {}: {target} is not in {name}", f.kind());
        }
        if let simulate::Fault::EcmpBlackhole { path } = f {
            if *path >= a.ecmp_paths {
                anyhow::bail!(
                    "--fault ecmp_blackhole:{path}: paths are 0 to {} (--ecmp-paths {})",
                    a.ecmp_paths - 1,
                    a.ecmp_paths
                );
            }
        }
    }
    if !(0.0..1.0).contains(&a.background_loss) {
        anyhow::bail!(
            "--background-loss {}: give a share from 0 to below 1",
            a.background_loss
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let opts = simulate::Options {
        start_s: a
            .start
            .unwrap_or_else(|| now.saturating_sub(a.duration.as_secs())),
        duration_s: a.duration.as_secs(),
        round_s: a.round.as_secs(),
        scrape_s: a.scrape.as_secs(),
        fault_after_s: a.fault_after.as_secs(),
        ecmp_paths: a.ecmp_paths,
        background_loss: a.background_loss,
        seed: a.seed,
    };
    if !opts.scrape_s.is_multiple_of(opts.round_s) {
        anyhow::bail!(
            "--scrape {:?} is not a multiple of --round {:?}",
            a.scrape,
            a.round
        );
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let series = a.out.join("series.prom");
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(&series).with_context(|| format!("creating {}", series.display()))?,
    );
    let t0 = std::time::Instant::now();
    let most = simulate::run(&topo, &a.fault, &fleet, &opts, |text| {
        std::io::Write::write_all(&mut w, text.as_bytes())
    })
    .and_then(|most| std::io::Write::flush(&mut w).map(|()| most))
    .with_context(|| format!("writing {}", series.display()))?;
    let meta = simulate_meta(&a.fault, &topo, hosts.len(), &opts, most);
    let fj = a.out.join("faults.json");
    std::fs::write(&fj, serde_json::to_string_pretty(&meta)? + "\n")
        .with_context(|| format!("writing {}", fj.display()))?;
    eprintln!(
        "rocewatch: simulated {} hosts for {:?} in {:.1} s: {}; at most {} series a host \
         ({} results, {} RTT histograms, {} failing flows)",
        hosts.len(),
        a.duration,
        t0.elapsed().as_secs_f64(),
        series.display(),
        most.total(),
        most.results,
        most.rtt_histograms,
        most.failing
    );
    Ok(0)
}

/// `faults.json`: the run, each fault with when it started and the suspect the rules
/// should name (with its rails), and the most series a host exported.
fn simulate_meta(
    faults: &[rocewatch_probes::fleet::simulate::Fault],
    topo: &Topology,
    hosts: usize,
    opts: &rocewatch_probes::fleet::simulate::Options,
    most: rocewatch_probes::fleet::simulate::SeriesPerHost,
) -> serde_json::Value {
    let faults: Vec<serde_json::Value> = faults
        .iter()
        .map(|f| {
            let (kind, target) = f.suspect();
            serde_json::json!({
                "fault": f.kind(),
                "start_ms": (opts.start_s + opts.fault_after_s) * 1000,
                "suspect": {"kind": kind, "target": target, "rails": f.suspect_rails(topo)},
            })
        })
        .collect();
    serde_json::json!({
        "hosts": hosts,
        "nics": topo.nics().len(),
        "start_ms": opts.start_s * 1000,
        "end_ms": (opts.start_s + opts.duration_s) * 1000,
        "faults": faults,
        "series_per_host": {
            "results": most.results,
            "rtt_histograms": most.rtt_histograms,
            "failing": most.failing,
            "total": most.total(),
        },
    })
}

fn plan(a: PlanArgs) -> Result<i32> {
    let topo = read_map(&a)?;
    let opts = Options {
        probers: a.probers,
        max_peers: a.max_peers,
    };
    let plan = Plan::new(&topo, opts);
    let format = if a.json { Format::Json } else { a.format };
    match (a.host, format) {
        (Some(host), Format::Json) => print_json(&serde_json::to_value(plan.of(&host)?)?)?,
        (Some(host), Format::Text) => print!("{}", host_text(&plan.of(&host)?)),
        (None, format) => plan_all(&plan, opts, format)?,
    }
    Ok(0)
}

/// Every host's list, written as it is drawn (the plan is never held whole): one line a
/// host and the coverage; as JSON `{"options","hosts","coverage"}` with one host a line.
fn plan_all(plan: &Plan, opts: Options, format: Format) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut failed = None;
    let mut first = true;
    if format == Format::Json {
        write!(
            out,
            "{{\"options\":{},\"hosts\":[",
            serde_json::to_string(&opts)?
        )?;
    } else {
        out.write_all(all_header().as_bytes())?;
    }
    let cov = plan.each(|l| {
        if failed.is_some() {
            return;
        }
        let r = if format == Format::Json {
            let sep = if first { "\n" } else { ",\n" };
            first = false;
            out.write_all(sep.as_bytes())
                .map_err(anyhow::Error::from)
                .and_then(|()| Ok(serde_json::to_writer(&mut out, &l)?))
        } else {
            out.write_all(all_line(&l).as_bytes()).map_err(Into::into)
        };
        if let Err(e) = r {
            failed = Some(e);
        }
    });
    if let Some(e) = failed {
        return Err(e.context("writing the plan"));
    }
    if format == Format::Json {
        writeln!(out, "\n],\"coverage\":{}}}", serde_json::to_string(&cov)?)?;
    } else {
        out.write_all(all_footer(&cov).as_bytes())?;
    }
    out.flush()?;
    Ok(())
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

/// `fleet plan --all`'s header line.
fn all_header() -> String {
    format!(
        "{:<24} {:>6} {:>9} {:>10} {:>4}\n",
        "host", "peers", "same_tor", "cross_tor", "cut"
    )
}

/// One host's line of `fleet plan --all`.
fn all_line(l: &Pinglist) -> String {
    let (same, cross) = counts(l);
    format!(
        "{:<24} {:>6} {:>9} {:>10} {:>4}\n",
        l.host,
        l.peers.len(),
        same,
        cross,
        l.truncated
    )
}

/// The coverage, after every host's line.
fn all_footer(cov: &pinglist::Coverage) -> String {
    let mut out = format!(
        "cross-ToR coverage: {} of {} ordered ToR pairs × rails have their probers\n",
        cov.full, cov.pairs
    );
    for s in &cov.short {
        let _ = writeln!(out, "  short: {s}");
    }
    out
}
