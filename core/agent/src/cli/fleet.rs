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
    ///
    /// Examples:
    ///   rocewatch fleet plan --topology fleet.csv --host gpu001
    ///   rocewatch fleet plan --topology fleet.csv --all --format json
    #[command(verbatim_doc_comment)]
    Plan(PlanArgs),
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
pub struct PlanArgs {
    /// The topology file (CSV: host,rail,addr,tor).
    #[arg(long, value_name = "FILE")]
    pub topology: PathBuf,
    /// The host whose pinglist to print, as the topology spells it.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Every host's pinglist (text: one line a host), and the cross-ToR coverage.
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

pub fn run(c: FleetCommand) -> Result<i32> {
    match c {
        FleetCommand::Plan(a) => plan(a),
    }
}

fn plan(a: PlanArgs) -> Result<i32> {
    let name = a.topology.display().to_string();
    let text = std::fs::read_to_string(&a.topology).with_context(|| format!("reading {name}"))?;
    let topo = Topology::parse(&name, &text)?;
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
            let cov = coverage(&topo, &lists, opts);
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

/// Cross-ToR coverage: ordered (ToR, ToR, rail) pairs, how many have their full count
/// of probers (fewer only where a rack has fewer hosts, or its hosts were cut).
#[derive(Debug, serde::Serialize)]
struct Coverage {
    pairs: usize,
    full: usize,
    short: Vec<String>,
}

fn coverage(topo: &Topology, lists: &[Pinglist], opts: Options) -> Coverage {
    let got = pinglist::coverage(lists, topo);
    let groups = topo.groups();
    let mut c = Coverage {
        pairs: 0,
        full: 0,
        short: Vec::new(),
    };
    for ((a, ra), mine) in &groups {
        for (b, _) in groups.keys().filter(|(b, rb)| rb == ra && b != a) {
            c.pairs += 1;
            let n = got
                .get(&(a.to_string(), b.to_string(), *ra))
                .copied()
                .unwrap_or(0);
            if n >= opts.probers.min(mine.len()) {
                c.full += 1;
            } else if c.short.len() < 20 {
                c.short.push(format!("{a} -> {b} rail {ra}: {n} probers"));
            }
        }
    }
    c
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
fn all_text(lists: &[Pinglist], cov: &Coverage) -> String {
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
