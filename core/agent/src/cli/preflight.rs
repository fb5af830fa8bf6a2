//! `rocewatch preflight`: the sweep across a job's hosts before it starts, with no
//! coordinator (the schedule, rail matching, verdict and report are `rocewatch_preflight`).
//!
//! Three modes: the sweep (this host's part of the schedule, measured by
//! `preflight_run`: the JSON lines of the tests it drove, a table on stderr), `--plan`
//! (this host's part of the schedule, on the NICs discovery finds, in `rocewatch env`'s
//! order) and `--judge FILE...` (the verdict over the JSON lines every host wrote).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use super::output::print_json;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_plugin_api::PluginKind;
use rocewatch_preflight as pf;
use rocewatch_runtime::util::duration::{Bounds, BANDWIDTH};

/// `--patience`: from a second to an hour.
const PATIENCE: Bounds = Bounds {
    min: Duration::from_secs(1),
    max: Duration::from_secs(3600),
    zero_means: None,
};

/// `rocewatch preflight`'s arguments.
#[derive(Debug, Args)]
pub struct PreflightArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// The job's hosts: a file with one host name per line (`#` comments, blank lines
    /// skipped), as `scontrol show hostnames "$SLURM_JOB_NODELIST"` prints them. Without
    /// --hosts or --host-list: Slurm's SLURM_JOB_NODELIST (`node[01-04,07]`), expanded as
    /// scontrol does; with --judge, the hosts the results name.
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// The job's hosts as a comma-separated list (already expanded: `node01,node02`).
    #[arg(long, value_name = "HOST,...", conflicts_with = "hosts")]
    pub host_list: Option<String>,
    /// This host's name as the list spells it (default: the configured host name, else
    /// the kernel's, up to its first dot).
    #[arg(long = "host", alias = "this-host", value_name = "NAME")]
    pub this_host: Option<String>,
    /// Test every pair of hosts (N−1 rounds) instead of the default 3 partners each (a
    /// constant 3 rounds, 4 for an odd number of hosts).
    #[arg(long)]
    pub all_pairs: bool,
    /// The share of the line rate a test must reach to pass (above 0, at most 1).
    #[arg(
        long = "min-share",
        alias = "min-bandwidth-share",
        default_value_t = pf::verdict::DEFAULT_MIN_SHARE,
        value_name = "FRACTION"
    )]
    pub min_bandwidth_share: f64,
    /// The latency a test may not exceed, in microseconds.
    #[arg(long, default_value_t = pf::verdict::DEFAULT_MAX_LATENCY_US, value_name = "MICROSECONDS")]
    pub max_latency_us: f64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Print a row for every test, not only those that did not pass.
    #[arg(long)]
    pub verbose: bool,
    /// Print this host's part of the schedule (each round's partner, role and rails) and
    /// exit.
    #[arg(long, conflicts_with = "judge")]
    pub plan: bool,
    /// Where this host's results go, as JSON lines: a file (created; an existing one is
    /// refused) or a directory (HOST.jsonl in it). Default: stdout.
    #[arg(long, value_name = "FILE|DIR", conflicts_with_all = ["plan", "judge"])]
    pub out: Option<PathBuf>,
    /// The TCP port partners meet on (every host of the sweep uses the same).
    #[arg(long, default_value_t = 18620, value_name = "PORT")]
    pub control_port: u16,
    /// The verbs responders' TCP ports: rank k listens on PORT + k (away from an agent's
    /// responder on 18516).
    #[arg(long, default_value_t = 18540, value_name = "PORT")]
    pub tcp_port: u16,
    /// How long each bandwidth test posts RDMA WRITEs (ib_write_bw -D), one direction.
    #[arg(long, value_parser = BANDWIDTH.flag(), default_value = "5s", value_name = "DUR")]
    pub duration: Duration,
    /// Bytes per message (ib_write_bw -s).
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u32).range(1..=64 << 20))]
    pub size: u32,
    /// RC queue pairs per bandwidth test (ib_write_bw -q).
    #[arg(long, default_value_t = 4)]
    pub qps: u16,
    /// Probes per rail after the bandwidth test; the latency is their median RTT.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub probes: u32,
    /// How long a host waits for its partner at each step (the partner's start, or an
    /// earlier round it is still busy with) before giving that step up: the whole wait.
    /// Default: 60 s, or two steps' tests when longer (2 × (--duration + a second per
    /// probe + 10 s): a host that idled a round waits for its partner's two steps).
    #[arg(long, value_parser = PATIENCE.flag(), value_name = "DUR")]
    pub patience: Option<Duration>,
    /// A file holding the job's token (one line, mode 0600: readable by its owner only),
    /// the same on every host: hellos on the control port carry it, and a hello without
    /// it is refused, so a host outside the job cannot end this host's steps. Default:
    /// the environment's ROCEWATCH_PREFLIGHT_TOKEN (srun passes a token exported in the
    /// batch script to every task); with neither, any hello is answered, with a warning.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["plan", "judge"])]
    pub token_file: Option<PathBuf>,
    /// Judge bandwidth against this line rate (Gb/s) instead of the ports' rates: for
    /// ports that report a rate the path cannot carry (soft-RoCE reports its netdev's).
    #[arg(long, value_name = "GBPS")]
    pub line_rate: Option<f64>,
    /// Judge the results every host wrote (files of JSON lines: each host's rails, then
    /// its tests; a directory: its *.jsonl files, as --out DIR/ writes them) and exit 0
    /// (every test passed), 1 (a NIC, host or direction named) or 2 (cannot tell, saying
    /// why). The hosts are those the results name, unless --hosts or --host-list gives
    /// them (then hosts that differ are named).
    #[arg(long, value_name = "FILE|DIR", num_args = 1..)]
    pub judge: Vec<PathBuf>,
}

/// The host names of a hosts file: one a line, `#` comments and blank lines skipped.
/// Errors name the line.
pub fn parse_hosts_file(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        check_name(line).map_err(|why| format!("line {}: {why}", i + 1))?;
        out.push(line.to_string());
    }
    Ok(out)
}

/// The host names of a comma-separated list. Errors name the entry.
pub fn parse_host_list(list: &str) -> Result<Vec<String>, String> {
    list.split(',')
        .enumerate()
        .map(|(i, h)| {
            let h = h.trim();
            check_name(h)
                .map(|()| h.to_string())
                .map_err(|why| format!("entry {}: {why}", i + 1))
        })
        .collect()
}

/// Why `name` is no host name, if it is not.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an empty host name".into());
    }
    if name.contains(['[', ']']) {
        return Err(format!(
            "{name:?} looks like a compressed Slurm hostlist: expand it first (scontrol show hostnames)"
        ));
    }
    if name.contains('/') {
        return Err(format!("{name:?} holds '/': not a host name"));
    }
    if let Some(c) = name.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{name:?} holds {c:?}: one host name per line, no spaces"
        ));
    }
    Ok(())
}

/// The host list given on the command line (`--hosts`, `--host-list`), with where it came
/// from.
fn listed_hosts(a: &PreflightArgs) -> Result<Option<(String, Vec<String>)>> {
    match (&a.hosts, &a.host_list) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--hosts {}", path.display()))?;
            let hosts =
                parse_hosts_file(&text).map_err(|e| anyhow!("--hosts {}: {e}", path.display()))?;
            Ok(Some((format!("--hosts {}", path.display()), hosts)))
        }
        (None, Some(list)) => Ok(Some((
            "--host-list".into(),
            parse_host_list(list).map_err(|e| anyhow!("--host-list: {e}"))?,
        ))),
        (None, None) => Ok(None),
    }
}

/// The sweep's hosts: the list given, else Slurm's.
fn read_hosts(a: &PreflightArgs) -> Result<(String, Vec<String>)> {
    if let Some(listed) = listed_hosts(a)? {
        return Ok(listed);
    }
    match std::env::var("SLURM_JOB_NODELIST") {
        Ok(list) if !list.trim().is_empty() => Ok((
            "SLURM_JOB_NODELIST".into(),
            rocewatch_slurm::expand(list.trim())
                .map_err(|e| anyhow!("SLURM_JOB_NODELIST={list:?}: {e}"))?,
        )),
        _ => bail!(
            "give the job's hosts: --hosts FILE or --host-list HOST,... (or run inside a Slurm job, where SLURM_JOB_NODELIST names them)"
        ),
    }
}

/// `--patience` when not given: 60 s, or two steps' tests when longer (a host that idled
/// a round, with an odd number of hosts, waits for its partner's two steps).
fn default_patience(duration: Duration, probes: u32) -> Duration {
    let step = duration + Duration::from_secs(u64::from(probes) + 10);
    (step * 2).max(Duration::from_secs(60))
}

fn mode(a: &PreflightArgs) -> pf::Mode {
    if a.all_pairs {
        pf::Mode::AllPairs
    } else {
        pf::Mode::Default
    }
}

pub async fn run(a: PreflightArgs) -> Result<i32> {
    let th = pf::Thresholds::new(a.min_bandwidth_share, a.max_latency_us)?;
    if !a.judge.is_empty() {
        return judge(&a, &th);
    }
    let (from, hosts) = read_hosts(&a)?;
    let schedule = pf::Schedule::new(hosts, mode(&a)).map_err(|e| anyhow!("{from}: {e}"))?;
    let cfg = a.source.load()?;
    let this = a
        .this_host
        .clone()
        .unwrap_or_else(|| crate::app::fleet_host_name(&cfg));
    schedule.index(&this)?;
    let cfg_for_sweep = cfg.clone();
    let app = App::start(cfg, Some(&[PluginKind::Discovery])).await;
    let inv = app.discover().await.context("discovering RDMA devices");
    let rail_map = match &inv {
        Ok(inv) => Some(super::rails::map(&app.cfg, &this, inv)),
        Err(_) => None,
    };
    app.stop().await;
    let inv = inv?;
    let rails = pf::rails::rails_of(&this, &inv, &rail_map.expect("read with the inventory")?);
    if a.plan {
        print_plan(&schedule, &rails, a.json)?;
        return Ok(0);
    }
    let sweep = super::preflight_run::Sweep {
        settings: super::preflight_run::Settings {
            control_port: a.control_port,
            patience: a
                .patience
                .unwrap_or_else(|| default_patience(a.duration, a.probes)),
            duration: a.duration,
            size: a.size,
            qps: a.qps,
            probes: a.probes,
            line_rate_gbps: a.line_rate,
            token: super::preflight_run::token(
                a.token_file.as_deref(),
                std::env::var_os(super::preflight_run::TOKEN_ENV),
            )?,
        },
        tcp_port: a.tcp_port,
        out: a.out.clone(),
    };
    super::preflight_run::sweep(&sweep, cfg_for_sweep, schedule, rails, &th).await
}

fn print_plan(schedule: &pf::Schedule, rails: &pf::HostRails, json: bool) -> Result<()> {
    let steps = pf::steps(schedule, rails)?;
    if json {
        return print_json(&serde_json::json!({
            "host": rails.host,
            "hosts": schedule.hosts(),
            "mode": schedule.mode(),
            "rounds": schedule.rounds(),
            "rails": rails,
            "steps": steps,
        }));
    }
    println!(
        "{}: {} hosts, {} rounds; rails (rank: NIC): {}",
        pf::report::clean(&rails.host),
        schedule.hosts().len(),
        schedule.rounds(),
        rails
            .nics
            .iter()
            .enumerate()
            .map(|(k, n)| format!(
                "{k}: {}{}",
                pf::report::clean(&n.name),
                if n.up { "" } else { " (not ACTIVE)" }
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for round in 0..schedule.rounds() {
        let mine: Vec<&pf::Step> = steps.iter().filter(|s| s.round == round).collect();
        if mine.is_empty() {
            println!("round {round}: no partner (odd number of hosts): idle");
        }
        for s in mine {
            let (phase, role) = match (s.phase, s.role) {
                (pf::Phase::Forward, pf::Role::Drive) => ("first", "writes into"),
                (pf::Phase::Forward, pf::Role::Serve) => ("first", "is written by"),
                (pf::Phase::Reverse, pf::Role::Drive) => ("then", "writes into"),
                (pf::Phase::Reverse, pf::Role::Serve) => ("then", "is written by"),
            };
            let ranks: Vec<String> = s.rails.iter().map(|(k, _)| k.to_string()).collect();
            println!(
                "round {round} {phase}: {role} {} on rails {}",
                pf::report::clean(&s.peer),
                ranks.join(",")
            );
        }
    }
    Ok(())
}

/// `--judge`: the verdict over the lines every host wrote, judged against the host list
/// given, else the hosts the lines name.
fn judge(a: &PreflightArgs, th: &pf::Thresholds) -> Result<i32> {
    let files = read_results(&a.judge)?;
    let mut named = BTreeSet::new();
    for (name, text) in &files {
        pf::results::hosts_named(name, text, &mut named)?;
    }
    let (from, hosts, strangers) = match listed_hosts(a)? {
        Some((from, hosts)) => {
            let strangers = compare_hosts(&from, &hosts, &named);
            (from, hosts, strangers)
        }
        None => {
            let from = "the hosts the results name".to_string();
            (from, named.into_iter().collect(), None)
        }
    };
    let schedule = pf::Schedule::new(hosts, mode(a)).map_err(|e| anyhow!("{from}: {e}"))?;
    let mut got = pf::results::Gathered::default();
    for (name, text) in &files {
        // Lines of pairs outside this sweep's schedule are refused, naming them.
        let read = pf::results::read_lines(&schedule, name, text, &mut got);
        if let Some(strangers) = &strangers {
            read.context(strangers.clone())?;
        } else {
            read?;
        }
    }
    let plan = pf::plan(&schedule, &got.rails);
    let v = pf::judge(&plan, &got.rails, &got.results, th);
    if a.json {
        print_json(&pf::json(&schedule, &v))?;
    } else {
        print!("{}", pf::text(&schedule, &v, a.verbose));
    }
    Ok(pf::exit_code(&v))
}

/// The host list given against the hosts the results name: hosts only the list names are
/// said (judged as having sent nothing); hosts only the results name, returned as a
/// sentence naming them all, are refused with the first line naming one (results of
/// another job: judged with this one's, they would blame its hosts).
fn compare_hosts(from: &str, listed: &[String], named: &BTreeSet<String>) -> Option<String> {
    let listed: BTreeSet<&String> = listed.iter().collect();
    let only = |of: &mut dyn Iterator<Item = &String>, not_in: &dyn Fn(&String) -> bool| {
        of.filter(|h| not_in(h))
            .map(|h| pf::report::clean(h))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let silent = only(&mut listed.iter().copied(), &|h| !named.contains(h));
    if !silent.is_empty() {
        eprintln!(
            "rocewatch preflight: {from} names hosts that no result names: {silent} (judged as having sent nothing; is it the sweep's list?)"
        );
    }
    let strangers = only(&mut named.iter(), &|h| !listed.contains(h));
    (!strangers.is_empty())
        .then(|| format!("the results name hosts that {from} lacks: {strangers}"))
}

/// The files `--judge` names, each with its name: a directory gives its `*.jsonl` files
/// (as `--out DIR/` writes them), in name order.
fn read_results(paths: &[PathBuf]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for p in paths {
        if !p.is_dir() {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("--judge {}", p.display()))?;
            out.push((p.display().to_string(), text));
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("--judge {}", p.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.extension().is_some_and(|x| x == "jsonl") && f.is_file())
            .collect();
        if found.is_empty() {
            bail!(
                "--judge {}: a directory without a .jsonl file (each host's --out DIR/ writes HOST.jsonl)",
                p.display()
            );
        }
        found.sort();
        for f in found {
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("--judge {}", f.display()))?;
            out.push((f.display().to_string(), text));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_default_patience_covers_two_steps() {
        let s = Duration::from_secs;
        assert_eq!(default_patience(s(5), 10), s(60));
        assert_eq!(default_patience(s(30), 10), s(100));
    }

    #[test]
    fn host_files_and_lists_are_read_and_faults_named() {
        assert_eq!(
            parse_hosts_file("# job 42\nnode01\n\n  node02  # the second\nnode03\n").unwrap(),
            vec!["node01", "node02", "node03"]
        );
        let e = parse_hosts_file("node01\nnode[02-04]\n").unwrap_err();
        assert!(
            e.starts_with("line 2: \"node[02-04]\" looks like a compressed Slurm hostlist"),
            "{e}"
        );
        let e = parse_hosts_file("node01 node02\n").unwrap_err();
        assert!(e.starts_with("line 1: \"node01 node02\" holds ' '"), "{e}");
        assert_eq!(parse_host_list("a, b,c").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(
            parse_host_list("a,,c").unwrap_err(),
            "entry 2: an empty host name"
        );
    }

    proptest! {
        /// Any text: names or an error naming the line, never a panic; every name read
        /// is one a host list can hold.
        #[test]
        fn any_hosts_file_is_read_or_refused(text in "\\PC*(\n\\PC*){0,5}") {
            if let Ok(names) = parse_hosts_file(&text) {
                for n in names {
                    prop_assert!(check_name(&n).is_ok());
                    prop_assert!(!n.contains('#'));
                }
            }
        }

        /// Names written one a line come back as written.
        #[test]
        fn names_round_trip(names in proptest::collection::vec("[a-z][a-z0-9.-]{0,20}", 0..30)) {
            prop_assert_eq!(parse_hosts_file(&names.join("\n")).unwrap(), names.clone());
            if !names.is_empty() {
                prop_assert_eq!(parse_host_list(&names.join(",")).unwrap(), names);
            }
        }
    }
}
