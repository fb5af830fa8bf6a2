//! The command line. `main.rs` only parses and calls [`run`].

pub mod show;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{Config, LogFormat, OtlpConfig, OtlpProtocol};
use crate::demo;
use crate::export::otlp::OtlpExporter;
use crate::pipeline::{self, Agent};

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?} ({e}); write it like 10s, 500ms, 2m"))
}

/// rocewatch: keep RDMA/RoCEv2 networks healthy.
///
/// Discovers RDMA devices and ports, reads their counters (sysfs, RDMA netlink, ethtool),
/// exports them (OTLP, Prometheus, collectd), evaluates threshold rules and runs
/// remediation safely, and probes peers over verbs. Start with `rocewatch demo` (no RDMA
/// hardware needed), then `rocewatch discover` and `rocewatch collect --once` on a real
/// host.
#[derive(Debug, Parser)]
#[command(name = "rocewatch", version, propagate_version = true)]
pub struct Cli {
    /// Log format (logs go to standard error).
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. `info`, `debug`, `rocewatch=debug` (default `error` for one-shot
    /// commands, `info` for `run` and `demo`; RUST_LOG also works).
    #[arg(long, global = true)]
    pub log_level: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by the commands that read sysfs.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Configuration file (TOML). Without it: defaults plus ROCEWATCH_* overrides.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Root of the sysfs tree to read instead of /sys (overrides agent.sysfs_root).
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,
}

impl SourceArgs {
    fn load(&self) -> Result<Config> {
        let mut cfg = Config::load(self.config.as_deref())?;
        if let Some(root) = &self.sysfs_root {
            cfg.agent.sysfs_root = root.clone();
        }
        Ok(cfg)
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CollectFormat {
    /// `{"samples":[{"name","unit","value","attributes","source"}]}`
    Json,
    /// One line per sample.
    Text,
    /// The Prometheus text exposition, as `/metrics` serves it.
    Prometheus,
    /// collectd Exec-plugin `PUTVAL` lines.
    Collectd,
}

/// What happens on the simulated fabric.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Scenario {
    /// Steady traffic, then an error burst on one port.
    Default,
    /// A PFC pause storm on priority 3 of one port: the default `pfc-pause-storm` rule
    /// fires after 30 s, a dry-run remediation is decided and audited, the storm ends and
    /// the rule clears.
    PfcStorm,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum DemoFormat {
    /// The per-port rate table.
    Table,
    /// JSON lines, one per collection (as the stdout exporter prints them).
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List RDMA devices and ports: state, link, rate, netdev (like ibdev2netdev), GIDs.
    ///
    /// Example: rocewatch discover --sysfs-root integration-tests/fixtures/mlx5-roce-dual-port --json
    Discover {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON: {"devices":[{"name","node_guid","fw_ver","ports":[...]}]}.
        #[arg(long)]
        json: bool,
    },
    /// Read every counter once and print it.
    ///
    /// Values are normalized (port_xmit_data/port_rcv_data in bytes, not 4-octet words);
    /// `source` is the file relative to the port directory.
    Collect {
        /// Collect once and exit (required; use `rocewatch run` to keep collecting).
        #[arg(long)]
        once: bool,
        #[command(flatten)]
        source: SourceArgs,
        #[arg(long, value_enum, default_value = "json")]
        format: CollectFormat,
    },
    /// Run the agent: collect on schedule, export, until SIGINT/SIGTERM.
    Run {
        #[command(flatten)]
        source: SourceArgs,
        /// Default collection interval (overrides agent.interval).
        #[arg(long, value_parser = parse_duration, value_name = "DUR")]
        interval: Option<Duration>,
        /// Export over OTLP to this URL (overrides exporters.otlp.endpoint).
        #[arg(long, value_name = "URL")]
        otlp_endpoint: Option<String>,
        /// OTLP transport (with --otlp-endpoint).
        #[arg(long, value_enum)]
        otlp_protocol: Option<OtlpProtocol>,
        /// OTLP export interval (overrides exporters.otlp.interval).
        #[arg(long, value_parser = parse_duration, value_name = "DUR")]
        export_interval: Option<Duration>,
        /// Serve Prometheus /metrics and /healthz on this address, e.g. 127.0.0.1:9464
        /// (overrides exporters.prometheus.listen).
        #[arg(long, value_name = "ADDR")]
        prometheus_listen: Option<std::net::SocketAddr>,
        /// Also print every collection as JSON lines on standard output.
        #[arg(long)]
        stdout: bool,
        /// Stop after this long (default: run until a signal).
        #[arg(long, value_parser = parse_duration, value_name = "DUR")]
        duration: Option<Duration>,
    },
    /// List plugins: kind, origin (built-in or file), ABI version, state, last error.
    ///
    /// Loads and starts every configured plugin and calls each once.
    Plugins {
        #[command(flatten)]
        source: SourceArgs,
        #[arg(long)]
        json: bool,
    },
    /// Threshold rules and their state: pending, firing, cleared, with values
    ///
    /// Asks a running agent (its Prometheus listener serves /rules), or with --once
    /// evaluates the configured rules on one collection here (rates and `for` durations
    /// need a running agent; --once shows what holds right now).
    ///
    /// Examples:
    ///   rocewatch rules --url http://127.0.0.1:9464
    ///   rocewatch rules --once --config configs/rules.toml --sysfs-root integration-tests/fixtures/mlx5-roce-dual-port/sys
    #[command(verbatim_doc_comment)]
    Rules {
        /// The agent's Prometheus listener.
        #[arg(long, default_value = "http://127.0.0.1:9464", value_name = "URL")]
        url: String,
        /// Evaluate the configured rules once, here, instead of asking an agent.
        #[arg(long)]
        once: bool,
        #[command(flatten)]
        source: SourceArgs,
        #[arg(long)]
        json: bool,
    },
    /// RDMA reachability and latency to a peer (RC ping-pong over verbs, like ib_send_lat).
    ///
    /// Sends `--count` RC Send/Recv ping-pongs (as `ib_send_lat` or `rping -c` do) and
    /// prints a summary; the exit status is 1 when nothing came back.
    ///
    /// The peer runs a responder: `rocewatch probe --serve`. Connection setup goes over a
    /// TCP side channel (port 18516), the RoCE v2 GID is the one of the local IP towards
    /// the peer. The verbs plugin (librocewatch_probe_verbs.so, which needs rdma-core's
    /// libibverbs) is found next to this binary or in ROCEWATCH_PLUGIN_DIR.
    ///
    /// Examples:
    ///   rocewatch probe --serve
    ///   rocewatch probe 192.168.100.1 --count 100 --size 64
    #[command(verbatim_doc_comment)]
    Probe {
        #[command(flatten)]
        args: ProbeArgs,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// RoCE, PFC and ECN configuration of the RDMA ports.
    #[command(subcommand)]
    Qos(QosCommand),
    /// Run the RoCE troubleshooting guide as checks: pass/warn/fail, evidence, the fix.
    ///
    /// Checks, in order: RDMA devices present; every port ACTIVE and LinkUp; the netdev of
    /// each RoCE port, up, with an IP address; a RoCE v2 GID for that IP; RoCE mode (v2);
    /// PFC on --priority and trust dscp; ECN on that priority (notification and reaction
    /// point); one MTU on every RoCE netdev (and, with --peer, packets of that size reach
    /// the peer unfragmented); nftables and iptables rule sets that drop UDP 4791 (read
    /// with nft -j list ruleset and iptables-save, not guessed); irqbalance running or the
    /// NIC's interrupts spread over CPUs; the same firmware on devices of one driver;
    /// pause frames, drops, out_of_buffer, out-of-sequence and retransmission counters
    /// not moving over --window; with --peer, a verbs probe (the peer runs
    /// `rocewatch probe --serve` or the agent with [probes]); and which interface to
    /// capture on with the tcpdump and ethtool offload commands to use and to restore.
    /// A check that cannot be decided here says skip and why (a fixture tree is not the
    /// live host's firewall; rxe has no PFC).
    ///
    /// Exit status: 0 nothing failed (warnings allowed), 1 a check failed, 2 on an error.
    ///
    /// Example: rocewatch doctor --peer 10.0.0.2
    ///          rocewatch doctor --sysfs-root integration-tests/fixtures/mlx5-roce-dual-port/sys --window 1s
    #[command(verbatim_doc_comment)]
    Doctor {
        #[command(flatten)]
        source: SourceArgs,
        /// A peer to probe over RDMA and to check the path MTU to.
        #[arg(long, value_name = "IP")]
        peer: Option<String>,
        /// The priority RoCE traffic uses (PFC and ECN are expected on it).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..8))]
        priority: u8,
        /// How long the counters are watched.
        #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "DUR")]
        window: Duration,
        /// Print JSON: {"checks":[{"check","subject","status","evidence","fix"}]}.
        #[arg(long)]
        json: bool,
    },
    /// The agent against a simulated fabric, with a live view of per-port rates.
    ///
    /// Generates a sysfs tree (two mlx5 RoCE ports, with their driver statistics) in a
    /// temporary directory, advances its counters every tick (traffic; an error burst on
    /// one port at 8 s; a PFC pause storm on priority 3 of the other at 20 s), and runs the
    /// real pipeline on it with the default rules (configs/rules.toml): the storm fires
    /// `pfc-pause-storm` 30 s later and a dry-run remediation is audited. Add
    /// --otlp-endpoint to export as well.
    Demo {
        /// Tick and collection interval.
        #[arg(long, value_parser = parse_duration, default_value = "1s", value_name = "DUR")]
        interval: Duration,
        /// Stop after this long (default: until Ctrl-C).
        #[arg(long, value_parser = parse_duration, value_name = "DUR")]
        duration: Option<Duration>,
        /// Print plain frames one after another instead of redrawing the screen.
        #[arg(long)]
        no_tui: bool,
        #[arg(long, value_enum, default_value = "table")]
        format: DemoFormat,
        /// Export over OTLP to this URL as well.
        #[arg(long, value_name = "URL")]
        otlp_endpoint: Option<String>,
        #[arg(long, value_enum, default_value = "http/protobuf")]
        otlp_protocol: OtlpProtocol,
        /// Write the simulated tree here (kept afterwards) instead of a temporary directory.
        #[arg(long, value_name = "DIR")]
        sysfs_out: Option<PathBuf>,
        /// What happens on the simulated fabric.
        #[arg(long, value_enum, default_value = "default")]
        scenario: Scenario,
        /// The remediation audit log (pfc-storm scenario; default: in the simulated tree).
        #[arg(long, value_name = "FILE")]
        audit_log: Option<PathBuf>,
    },
    /// Run as a collectd Exec plugin: print PUTVAL lines every interval.
    ///
    /// collectd config:  LoadPlugin exec
    ///                   <Plugin exec> Exec "rocewatch" "/usr/bin/rocewatch" "collectd-exec" </Plugin>
    /// The interval and host name come from COLLECTD_INTERVAL and COLLECTD_HOSTNAME (set by
    /// collectd), else from the config. Load configs/collectd/types.db in collectd.
    CollectdExec {
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Print docs/METRICS.md, generated from the metric catalog.
    MetricsDoc,
    /// Print the collectd types.db for rocewatch's metrics.
    CollectdTypes,
}

impl Command {
    /// Commands that print a result and exit.
    pub fn is_one_shot(&self) -> bool {
        matches!(
            self,
            Command::Discover { .. }
                | Command::Collect { .. }
                | Command::Plugins { .. }
                | Command::Rules { .. }
                | Command::Qos(_)
                | Command::Doctor { .. }
                | Command::Probe {
                    args: ProbeArgs { serve: false, .. },
                    ..
                }
                | Command::Config(_)
                | Command::MetricsDoc
                | Command::CollectdTypes
        )
    }
}

#[derive(Debug, Subcommand)]
pub enum QosCommand {
    /// What every RDMA port is configured to do.
    ///
    /// Per port: RoCE mode and ToS (configfs rdma_cm, read under the sysfs root at
    /// kernel/config/rdma_cm), PFC-enabled priorities, trust mode and DSCP map (DCB
    /// netlink: the live kernel only), ECN enables per priority for the notification and
    /// reaction points and the CNP DSCP/priority (mlx5 sysfs), traffic class, netdev MTU
    /// and the RoCE MTU it implies, the PFC storm-prevention timeout (ethtool tunable,
    /// live kernel only). A setting the device does not have says "unsupported"; one
    /// that could not be read says "unknown" and why. Ends with the configuration
    /// fingerprint (settings, drivers, firmware: equal on hosts configured alike).
    ///
    /// Example: rocewatch qos show --sysfs-root integration-tests/fixtures/mlx5-roce-dual-port/sys --json
    #[command(verbatim_doc_comment)]
    Show {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON: {"ports":[{"device","port","netdev","settings":{NAME:{"status","value"}}}],"fingerprint"}.
        #[arg(long)]
        json: bool,
    },
    /// The exact differences between what the ports are set to and `[[qos.desired]]`.
    ///
    /// Each desired setting of each matching port is either already as desired, a change
    /// ("change  mlx5_0/1 (ens1f0np0)  mtu: 1500 -> 9000"), or cannot be compared (the
    /// device lacks the setting, or it could not be read: the reason is given). Changes
    /// nothing. Exit status, as diff(1): 0 when everything is as desired, 1 when
    /// something differs or cannot be compared, 2 on an error.
    ///
    /// [[qos.desired]]
    /// devices = "mlx5_*"
    /// settings = { roce_mode = "RoCE v2", pfc_enabled = "3", trust = "dscp", mtu = "9000" }
    #[command(verbatim_doc_comment)]
    Plan {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON: {"changes":[...],"blocked":[...],"in_sync":N}.
        #[arg(long)]
        json: bool,
    },
    /// Change what differs from `[[qos.desired]]`: a dry run unless --yes.
    ///
    /// The dry run asks the configuration plugins what they would write where and
    /// changes nothing. With --yes: the values about to be replaced are first written to
    /// a snapshot under [qos] snapshot_dir (no snapshot, no change), every change is
    /// audited in [remediation] audit_log before it is made and with its result, and a
    /// change that fails undoes the ones made before it. `rocewatch qos rollback`
    /// restores the snapshot. Settings that cannot be compared (the device lacks them,
    /// or they cannot be read) are listed and left alone.
    ///
    /// RoCE mode and ToS live in configfs (rdma_cm): a device's directory there is
    /// created when a RoCE setting is desired and it does not exist yet (audited).
    ///
    /// Exit status: 0 everything applied (or nothing to do), 1 a change failed (and what
    /// was made before it was undone) or the dry run found one a plugin cannot make,
    /// 2 on an error (configuration, snapshot not writable).
    ///
    /// Example: rocewatch qos apply            # what would change
    ///          rocewatch qos apply --yes      # change it
    #[command(verbatim_doc_comment)]
    Apply {
        #[command(flatten)]
        source: SourceArgs,
        /// Make the changes (without it: a dry run).
        #[arg(long)]
        yes: bool,
        /// Print JSON: {"plan":{...},"steps":[...],"snapshot":PATH,"failed":BOOL}.
        #[arg(long)]
        json: bool,
    },
    /// Restore what a `qos apply --yes` replaced: a dry run unless --yes.
    ///
    /// Without SNAPSHOT, the newest one under [qos] snapshot_dir that was applied and
    /// not restored yet. Newest change first; a setting changed by someone else since
    /// the apply is left alone (--force restores it anyway); one whose value before the
    /// apply could not be read is left as is. Audited like apply. Exit status: 0
    /// restored, 1 a restore failed, 2 on an error (no snapshot, already restored).
    #[command(verbatim_doc_comment)]
    Rollback {
        /// The snapshot file (qos-*.json).
        snapshot: Option<PathBuf>,
        #[command(flatten)]
        source: SourceArgs,
        /// Make the changes (without it: a dry run).
        #[arg(long)]
        yes: bool,
        /// Restore settings changed since the apply, and snapshots already restored.
        #[arg(long)]
        force: bool,
        /// Print JSON: {"steps":[...],"snapshot":PATH,"failed":BOOL}.
        #[arg(long)]
        json: bool,
    },
    /// Compare two hosts' `rocewatch qos show --json`, port by port, setting by setting.
    ///
    /// Lists every setting that differs (priority lists compare as sets) and every port
    /// present on one side only. Exit status, as diff(1): 0 same, 1 different, 2 on an
    /// error (a file that cannot be read or is not `qos show --json`).
    ///
    /// Example: rocewatch qos diff node1.json node2.json
    Diff {
        a: PathBuf,
        b: PathBuf,
        /// Print JSON: [{"port","setting","a","b"}].
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration file; errors name the key path. Exit status 1 when invalid.
    Check { file: PathBuf },
}

/// Set up logging to standard error.
pub fn init_logging(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => b.json().try_init(),
        LogFormat::Text => b.try_init(),
    };
}

fn print_json(v: &serde_json::Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

/// Run a parsed command line; the returned code is the process exit status.
pub async fn run(cli: Cli) -> Result<i32> {
    let default_level = match cli.command {
        Command::Run { .. } | Command::Demo { .. } => "info",
        _ => "error",
    };
    init_logging(
        cli.log_format.unwrap_or_default(),
        cli.log_level.as_deref().unwrap_or(default_level),
    );
    match cli.command {
        Command::Doctor {
            source,
            peer,
            priority,
            window,
            json,
        } => {
            let mut cfg = source.load()?;
            // The probe needs the verbs plugin: the one configured, else the one next to
            // the binary (its absence is the probe check's to report).
            let probe_configured = cfg
                .plugins
                .external
                .iter()
                .any(|e| e.path.ends_with("librocewatch_probe_verbs.so"));
            if peer.is_some() && !probe_configured {
                if let Ok(path) = probe_plugin_path() {
                    cfg.plugins.external.push(probe_plugin_config(
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
            let agent = Agent::start(cfg).await;
            let opts = crate::doctor::Options {
                peer,
                priority,
                window,
            };
            let checks = crate::doctor::run(&agent, &opts).await;
            if json {
                print_json(&serde_json::json!({ "checks": checks }))?;
            } else {
                print!("{}", crate::doctor::text(&checks));
            }
            let failed = checks
                .iter()
                .any(|c| c.status == crate::doctor::Status::Fail);
            Ok(if failed { 1 } else { 0 })
        }
        Command::Qos(QosCommand::Show { source, json }) => {
            let cfg = source.load()?;
            let agent = Agent::start(cfg).await;
            let states = agent.observe_qos().await?;
            let inventory = agent.discover().await.unwrap_or_default();
            let fingerprint = crate::qos::apply::fingerprint(&states, &inventory);
            if json {
                print_json(&serde_json::json!({ "ports": states, "fingerprint": fingerprint }))?;
            } else {
                print!("{}", show::qos_text(&states));
                println!("fingerprint {fingerprint} (settings, drivers and firmware; equal on hosts configured alike)");
            }
            Ok(0)
        }
        Command::Qos(QosCommand::Plan { source, json }) => {
            let cfg = source.load()?;
            if cfg.qos.desired.is_empty() {
                bail!(
                    "no desired state: add [[qos.desired]] entries to the configuration (see `rocewatch qos plan --help`)"
                );
            }
            let desired = cfg.qos.clone();
            let agent = Agent::start(cfg).await;
            let states = agent.observe_qos().await?;
            let plan = crate::qos::plan(&desired, &states);
            if json {
                print_json(&serde_json::to_value(&plan)?)?;
            } else {
                print!("{}", crate::qos::plan_text(&plan));
            }
            Ok(if plan.is_clean() { 0 } else { 1 })
        }
        Command::Qos(QosCommand::Apply { source, yes, json }) => {
            let cfg = source.load()?;
            if cfg.qos.desired.is_empty() {
                bail!(
                    "no desired state: add [[qos.desired]] entries to the configuration (see `rocewatch qos plan --help`)"
                );
            }
            let agent = Agent::start(cfg).await;
            let applier = crate::qos::apply::Applier::new(&agent);
            let states = applier.observe().await?;
            let plan = crate::qos::plan(&applier.desired, &states);
            let report = applier
                .apply(&plan.changes, !yes, "qos apply")
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            if json {
                let mut v = serde_json::to_value(&report)?;
                v["plan"] = serde_json::to_value(&plan)?;
                print_json(&v)?;
            } else {
                print!("{}", crate::qos::apply::report_text(&report));
                for b in &plan.blocked {
                    println!("{}", crate::qos::blocked_line(b, 12));
                }
                let done = report.steps.iter().filter(|s| s.outcome == "done").count();
                if plan.changes.is_empty() {
                    println!(
                        "nothing to change ({} already as desired, {} cannot be compared)",
                        plan.in_sync,
                        plan.blocked.len()
                    );
                } else if !yes {
                    println!(
                        "dry run: {} to change; run again with --yes to change them (audit log: {})",
                        plan.changes.len(),
                        applier.audit_path().display()
                    );
                } else if report.failed {
                    println!(
                        "a change failed: what was changed before it was undone (audit log: {})",
                        applier.audit_path().display()
                    );
                } else {
                    println!(
                        "{done} changed; `rocewatch qos rollback --yes` restores them (audit log: {})",
                        applier.audit_path().display()
                    );
                }
            }
            Ok(if report.failed { 1 } else { 0 })
        }
        Command::Qos(QosCommand::Rollback {
            snapshot,
            source,
            yes,
            force,
            json,
        }) => {
            let cfg = source.load()?;
            let dir = cfg.qos.snapshot_dir.clone();
            let path = match snapshot {
                Some(p) => p,
                None => crate::qos::apply::latest_snapshot(&dir)
                    .map_err(|e| anyhow::anyhow!(e))?
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "no snapshot to roll back in {} (`qos apply --yes` writes one; [qos] snapshot_dir)",
                            dir.display()
                        )
                    })?,
            };
            let agent = Agent::start(cfg).await;
            let applier = crate::qos::apply::Applier::new(&agent);
            let report = applier
                .rollback(&path, !yes, force)
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            if json {
                print_json(&serde_json::to_value(&report)?)?;
            } else {
                print!("{}", crate::qos::apply::report_text(&report));
                if !yes {
                    println!("dry run: run again with --yes to restore");
                }
            }
            Ok(if report.failed { 1 } else { 0 })
        }
        Command::Qos(QosCommand::Diff { a, b, json }) => {
            let load = |p: &PathBuf| -> Result<Vec<rocewatch_plugin_api::QosState>> {
                #[derive(serde::Deserialize)]
                struct Shown {
                    ports: Vec<rocewatch_plugin_api::QosState>,
                }
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read {}", p.display()))?;
                let v: Shown = serde_json::from_str(&text).with_context(|| {
                    format!(
                        "{}: not the output of `rocewatch qos show --json`",
                        p.display()
                    )
                })?;
                Ok(v.ports)
            };
            let d = crate::qos::diff_hosts(&load(&a)?, &load(&b)?);
            if json {
                print_json(&serde_json::to_value(&d)?)?;
            } else {
                for x in &d {
                    println!(
                        "{}  {}: {} = {}  |  {} = {}",
                        x.port,
                        x.setting,
                        a.display(),
                        x.a,
                        b.display(),
                        x.b
                    );
                }
                println!(
                    "{} difference{}",
                    d.len(),
                    if d.len() == 1 { "" } else { "s" }
                );
            }
            Ok(if d.is_empty() { 0 } else { 1 })
        }
        Command::Discover { source, json } => {
            let cfg = source.load()?;
            let root = cfg.agent.sysfs_root.clone();
            let agent = Agent::start(cfg).await;
            let inv = match agent.discover().await {
                Ok(inv) => inv,
                Err(e) if e.is_unsupported() => {
                    eprintln!("rocewatch: no RDMA devices under {}", root.display());
                    Default::default()
                }
                Err(e) => bail!("discovery failed: {e}"),
            };
            if json {
                print_json(&show::inventory_json(&inv))?;
            } else {
                print!("{}", show::inventory_text(&inv));
            }
            Ok(0)
        }
        Command::Collect {
            once,
            source,
            format,
        } => {
            if !once {
                bail!("collect needs --once (use `rocewatch run` to collect continuously)");
            }
            let cfg = source.load()?;
            let root = cfg.agent.sysfs_root.clone();
            let cfg_interval = cfg.agent.interval;
            let agent = Agent::start(cfg).await;
            let (result, failures) = agent.collect_all().await;
            for f in &failures {
                eprintln!("rocewatch: {f}");
            }
            for e in &result.errors {
                eprintln!("rocewatch: partial: {}: {}", e.target, e.message);
            }
            if result.samples.is_empty() && failures.is_empty() {
                eprintln!(
                    "rocewatch: no samples (no RDMA devices under {}?)",
                    root.display()
                );
            }
            match format {
                CollectFormat::Json => print_json(
                    &serde_json::json!({"samples": result.samples, "errors": result.errors}),
                )?,
                CollectFormat::Text => print!("{}", show::samples_text(&result.samples)),
                CollectFormat::Collectd => {
                    let interval = cfg_interval;
                    for s in &result.samples {
                        let v = crate::export::collectd::value_list(
                            s,
                            &agent.host_name,
                            std::time::SystemTime::now(),
                            interval,
                        );
                        println!("{}", crate::export::collectd::putval(&v));
                    }
                }
                CollectFormat::Prometheus => print!(
                    "{}",
                    crate::export::prometheus::render_samples(
                        &result.samples,
                        &agent.store.descriptors(),
                        crate::export::prometheus::Format::Text
                    )
                ),
            }
            Ok(if failures.is_empty() { 0 } else { 1 })
        }
        Command::Run {
            source,
            interval,
            otlp_endpoint,
            otlp_protocol,
            export_interval,
            prometheus_listen,
            stdout,
            duration,
        } => {
            let mut cfg = source.load()?;
            if let Some(i) = interval {
                cfg.agent.interval = i;
            }
            if let Some(ep) = otlp_endpoint {
                let o = cfg
                    .exporters
                    .otlp
                    .get_or_insert_with(|| OtlpConfig::new(ep.clone(), OtlpProtocol::default()));
                o.endpoint = ep;
            }
            if let (Some(p), Some(o)) = (otlp_protocol, cfg.exporters.otlp.as_mut()) {
                o.protocol = p;
            }
            if let (Some(i), Some(o)) = (export_interval, cfg.exporters.otlp.as_mut()) {
                o.interval = i;
            }
            if let Some(addr) = prometheus_listen {
                cfg.exporters
                    .prometheus
                    .get_or_insert_with(Default::default)
                    .listen = addr;
            }
            if stdout {
                cfg.exporters.stdout.enabled = true;
            }
            run_agent(cfg, duration).await
        }
        Command::Probe { args, source } => run_probe(args, source.load()?).await,
        Command::Rules {
            url,
            once,
            source,
            json,
        } => {
            let rows: Vec<serde_json::Value> = if once {
                let cfg = source.load()?;
                if cfg.rules.is_empty() {
                    anyhow::bail!("no [[rules]] in the configuration (configs/rules.toml has the default set)");
                }
                let agent = Agent::start(cfg).await;
                let _ = agent.discover().await;
                let _ = agent.collect_all().await;
                let status = agent
                    .rules
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .status(tokio::time::Instant::now());
                status
                    .into_iter()
                    .map(|s| serde_json::to_value(s).expect("plain data"))
                    .collect()
            } else {
                let u = format!("{}/rules", url.trim_end_matches('/'));
                let body = reqwest::get(&u)
                    .await
                    .and_then(|r| r.error_for_status())
                    .with_context(|| format!("asking the agent at {u} (is `rocewatch run --prometheus-listen` running there?)"))?
                    .text()
                    .await
                    .with_context(|| format!("reading {u}"))?;
                let body: serde_json::Value = serde_json::from_str(&body)
                    .with_context(|| format!("{u}: not a rules document"))?;
                body["rules"].as_array().cloned().unwrap_or_default()
            };
            if json {
                println!("{}", serde_json::json!({ "rules": rows }));
            } else {
                print!("{}", show::rules_text(&rows));
            }
            Ok(0)
        }
        Command::Plugins { source, json } => {
            let cfg = source.load()?;
            let agent = Agent::start(cfg).await;
            let _ = agent.discover().await;
            let _ = agent.collect_all().await;
            let statuses = agent.registry.statuses();
            if json {
                print_json(&serde_json::to_value(&statuses)?)?;
            } else {
                print!("{}", show::plugins_text(&statuses));
            }
            Ok(0)
        }
        Command::Config(ConfigCommand::Check { file }) => match Config::load(Some(&file)) {
            Ok(_) => {
                println!("{}: ok", file.display());
                Ok(0)
            }
            Err(e) => {
                eprintln!("rocewatch: {e}");
                Ok(1)
            }
        },
        Command::Demo {
            interval,
            duration,
            no_tui,
            format,
            otlp_endpoint,
            otlp_protocol,
            sysfs_out,
            scenario,
            audit_log,
        } => {
            run_demo(DemoArgs {
                interval,
                duration,
                no_tui,
                format,
                otlp: otlp_endpoint.map(|e| OtlpConfig::new(e, otlp_protocol)),
                sysfs_out,
                scenario,
                audit_log,
            })
            .await
        }
        Command::CollectdExec { source } => collectd_exec(source.load()?).await,
        Command::CollectdTypes => {
            print!("{}", rocewatch_metrics::naming::collectd_types_db());
            Ok(0)
        }
        Command::MetricsDoc => {
            print!("{}", rocewatch_metrics::doc::render_markdown());
            Ok(0)
        }
    }
}

/// A shutdown signal that also fires after `duration`.
fn shutdown_after(duration: Option<Duration>) -> tokio::sync::watch::Receiver<bool> {
    let signals = pipeline::shutdown_on_signals();
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut signals = signals;
        tokio::select! {
            _ = signals.changed() => {}
            _ = async { match duration { Some(d) => tokio::time::sleep(d).await, None => std::future::pending().await } } => {
                tracing::info!("duration elapsed: shutting down");
            }
        }
        let _ = tx.send(true);
    });
    rx
}

fn start_otlp(agent: &Arc<Agent>) -> Option<OtlpExporter> {
    let o = agent.cfg.exporters.otlp.as_ref()?;
    match OtlpExporter::start(
        o,
        &agent.host_name,
        Arc::clone(&agent.store),
        Arc::clone(&agent.metrics),
    ) {
        Ok(x) => {
            tracing::info!(endpoint = %o.endpoint, protocol = ?o.protocol, "exporting over OTLP");
            Some(x)
        }
        Err(e) => {
            tracing::error!("{e}; continuing without OTLP export");
            None
        }
    }
}

async fn finish_otlp(otlp: Option<OtlpExporter>) {
    if let Some(x) = otlp {
        // The final export: the latest values of every series.
        match tokio::task::spawn_blocking(move || x.shutdown()).await {
            Ok(Ok(())) => tracing::info!("final OTLP export done"),
            Ok(Err(e)) => tracing::warn!("final OTLP export: {e}"),
            Err(e) => tracing::warn!("final OTLP export: {e}"),
        }
    }
}

async fn run_agent(mut cfg: Config, duration: Option<Duration>) -> Result<i32> {
    let shutdown = shutdown_after(duration);
    if let Some(p) = &cfg.probes {
        let path = match &p.plugin {
            Some(path) => path.clone(),
            None => probe_plugin_path()?,
        };
        cfg.plugins.external.push(probe_plugin_config(
            path,
            p.timeout,
            &p.device,
            p.tcp_port,
            p.serve,
            false,
            p.reconnect_backoff,
        ));
    }
    // Bind before anything else: a taken port is a configuration error, reported at once.
    let prom_listener = match &cfg.exporters.prometheus {
        Some(p) => Some(crate::export::prometheus::bind(p.listen).await?),
        None => None,
    };
    let agent = Agent::start(cfg).await;
    let prom_task = prom_listener.map(|l| {
        tracing::info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving Prometheus /metrics and /healthz");
        let state = crate::export::prometheus::Exposition {
            store: Arc::clone(&agent.store),
            metrics: Arc::clone(&agent.metrics),
            rules: Some(Arc::clone(&agent.rules)),
        };
        tokio::spawn(crate::export::prometheus::serve(l, state, shutdown.clone()))
    });
    for s in agent.registry.statuses() {
        tracing::info!(plugin = %s.name, kind = ?s.kind, origin = %s.origin, state = ?s.state, "plugin");
    }
    let remediation = start_remediation(&agent);
    let _qos = tokio::spawn(crate::qos::apply::watch(
        Arc::clone(&agent),
        shutdown.clone(),
    ));
    let _prober = agent.cfg.probes.clone().map(|p| {
        tracing::info!(interval = ?p.interval, "probing peers over RDMA verbs");
        tokio::spawn(crate::probes::run(Arc::clone(&agent), p, shutdown.clone()))
    });
    let _alertmanager = match (&agent.cfg.alertmanager, &remediation) {
        (Some(am), Some(d)) => {
            let listener = crate::export::prometheus::bind(am.listen).await?;
            let rx = crate::alertmanager::Receiver::new(am, Arc::clone(d), Arc::clone(&agent.metrics))
                .map_err(|(path, msg)| anyhow::anyhow!("{path}: {msg}"))?;
            tracing::info!(addr = %am.listen, authenticated = !am.allow_unauthenticated || am.bearer_token.is_some() || am.bearer_token_file.is_some(), "Alertmanager webhook receiver on POST /alertmanager");
            Some(tokio::spawn(crate::alertmanager::serve(listener, rx, shutdown.clone())))
        }
        (Some(_), None) => anyhow::bail!("[alertmanager] needs at least one action under [remediation.actions] to route alerts to"),
        _ => None,
    };
    let otlp = start_otlp(&agent);
    let collectd_task = agent.cfg.exporters.collectd.clone().map(|c| {
        tracing::info!(server = %c.server, security = ?c.security_level, "sending to collectd");
        tokio::spawn(crate::export::collectd::run(
            c,
            agent.host_name.clone(),
            agent.cfg.agent.interval,
            Arc::clone(&agent.metrics),
            agent.events.subscribe(),
        ))
    });
    let stdout_task = agent
        .cfg
        .exporters
        .stdout
        .enabled
        .then(|| tokio::spawn(crate::export::stdout::run(agent.events.subscribe())));
    agent.run(shutdown).await;
    finish_otlp(otlp).await;
    if let Some(t) = stdout_task {
        t.abort();
    }
    for t in [prom_task, collectd_task].into_iter().flatten() {
        t.abort();
    }
    Ok(0)
}

/// `rocewatch collectd-exec`: collect every interval and print PUTVAL lines on stdout.
async fn collectd_exec(mut cfg: Config) -> Result<i32> {
    if let Some(i) = std::env::var("COLLECTD_INTERVAL")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|i| *i > 0.0)
    {
        cfg.agent.interval = Duration::from_secs_f64(i);
    }
    if let Ok(h) = std::env::var("COLLECTD_HOSTNAME") {
        if !h.is_empty() {
            cfg.agent.host_name = Some(h);
        }
    }
    let interval = cfg.agent.interval;
    let mut shutdown = pipeline::shutdown_on_signals();
    let agent = Agent::start(cfg).await;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return Ok(0),
        }
        let (result, _) = agent.collect_all().await;
        let now = std::time::SystemTime::now();
        let lists = crate::export::collectd::value_lists(
            &result.samples,
            &agent.metrics,
            &agent.host_name,
            now,
            interval,
        );
        let mut out = std::io::stdout().lock();
        for v in &lists {
            if writeln!(out, "{}", crate::export::collectd::putval(v)).is_err() {
                return Ok(0); // collectd closed the pipe: it is stopping us
            }
        }
        if out.flush().is_err() {
            return Ok(0);
        }
    }
}

/// The demo's command line.
struct DemoArgs {
    interval: Duration,
    duration: Option<Duration>,
    no_tui: bool,
    format: DemoFormat,
    otlp: Option<OtlpConfig>,
    sysfs_out: Option<PathBuf>,
    scenario: Scenario,
    audit_log: Option<PathBuf>,
}

async fn run_demo(args: DemoArgs) -> Result<i32> {
    let DemoArgs {
        interval,
        duration,
        no_tui,
        format,
        otlp,
        sysfs_out,
        scenario,
        audit_log,
    } = args;
    let tmp;
    let root = match sysfs_out {
        Some(d) => {
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("rocewatch-demo-")
                .tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let mut fabric = demo::Fabric::create(&root)
        .with_context(|| format!("writing the simulated sysfs tree under {}", root.display()))?;
    let mut cfg = Config::default();
    cfg.agent.sysfs_root = root.clone();
    cfg.agent.interval = interval;
    cfg.agent.jitter = Duration::ZERO;
    // The simulated netdevs have no NIC behind them: the ethtool plugin reads the driver
    // statistics the simulator writes.
    cfg.plugins.builtin.insert(
        rocewatch_counters_ethtool::EthtoolCounters::NAME.to_string(),
        crate::config::PluginSettings {
            options: serde_json::json!({ "stats_dir": root.join("ethtool") }),
            ..Default::default()
        },
    );
    let audit_path = audit_log.unwrap_or_else(|| root.join("audit.jsonl"));
    match scenario {
        // The error burst at 8 s, then the PFC storm at 20 s.
        Scenario::Default => fabric.storm = Some((20, 40)),
        // The storm alone, at 5 s.
        Scenario::PfcStorm => {
            fabric.storm = Some((5, 40));
            fabric.burst_at = u64::MAX;
        }
    }
    // The default rules, with a dry-run response to the PFC storm.
    {
        cfg.rules = demo::default_rules()?;
        for r in &mut cfg.rules {
            if r.name == "pfc-pause-storm" {
                r.actions = vec!["pfc-storm-response".into()];
            }
        }
        cfg.remediation.audit_log = audit_path.clone();
        cfg.remediation.kill_switch = root.join("remediation.disabled");
        cfg.remediation.actions.insert(
            "pfc-storm-response".into(),
            toml_action(
                r#"type = "exec"
command = ["/usr/local/sbin/roce-pfc-storm-response"]
cooldown = "10m""#,
            )?,
        );
    }
    cfg.exporters.otlp = otlp.map(|mut o| {
        o.interval = interval.max(Duration::from_secs(1));
        o
    });
    let shutdown = shutdown_after(duration);
    let agent = Agent::start(cfg).await;
    let _remediation = start_remediation(&agent);
    let otlp = start_otlp(&agent);
    let otlp_note = match (&agent.cfg.exporters.otlp, &otlp) {
        (Some(o), Some(_)) => format!("OTLP {:?} to {}", o.protocol, o.endpoint),
        (Some(o), None) => format!("OTLP to {} FAILED to start (see log)", o.endpoint),
        _ => "stdout only (add --otlp-endpoint URL to export)".to_string(),
    };

    // The simulator advances the fabric half an interval before each collection.
    let mut sim_shutdown = shutdown.clone();
    let (tick_tx, tick_rx) = tokio::sync::watch::channel((0u64, false, false));
    let sim = tokio::spawn(async move {
        // Traffic follows real elapsed time, so rates stay true even when a busy machine
        // delays a tick; the first advance covers one whole interval.
        let mut last = std::time::Instant::now() - interval / 2;
        tokio::time::sleep(interval / 2).await;
        let mut ticker = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = sim_shutdown.changed() => break,
            }
            if let Err(e) = fabric.advance(
                std::mem::replace(&mut last, std::time::Instant::now())
                    .elapsed()
                    .as_secs_f64(),
            ) {
                tracing::error!("simulator: {e}");
            }
            let _ = tick_tx.send((fabric.tick_count(), fabric.in_burst(), fabric.in_storm()));
        }
    });

    let tui = !no_tui && format == DemoFormat::Table && std::io::stdout().is_terminal();
    let mut events = agent.events.subscribe();
    let view_agent = Arc::clone(&agent);
    let root_shown = root.display().to_string();
    let view = tokio::spawn(async move {
        let mut frame = 0u64;
        loop {
            let c = match events.recv().await {
                Ok(c) => c,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => break,
            };
            if format == DemoFormat::Json {
                println!("{}", crate::export::stdout::collection_json(&c));
                continue;
            }
            // One frame per tick: after the port counters' collection.
            if c.plugin != rocewatch_counters_sysfs::SysfsCounters::NAME {
                continue;
            }
            frame += 1;
            let (tick, burst, in_storm) = *tick_rx.borrow();
            let header = format!(
                "rocewatch demo: simulated fabric at {root_shown}, frame {frame}, tick {tick}, every {}{}",
                humantime::format_duration(interval),
                if tui { "  (Ctrl-C to stop)" } else { "" }
            );
            let mut footer = format!(
                "event: {}\nexport: {otlp_note}",
                if burst {
                    "ERROR BURST on mlx5_1 port 1 (symbol errors, out_of_buffer drops, CNP surge)"
                } else if in_storm {
                    "PFC PAUSE STORM on mlx5_0 port 1 priority 3 (paused 60% of the time)"
                } else {
                    "steady traffic"
                }
            );
            {
                footer.push_str(&demo::rules_footer(
                    &view_agent
                        .rules
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .status(tokio::time::Instant::now()),
                    &audit_path,
                ));
            }
            let text = demo::render(&demo::port_rates(&view_agent.store), &header, &footer);
            let mut out = std::io::stdout().lock();
            if tui {
                let _ = write!(out, "\x1b[H\x1b[2J{text}");
            } else {
                let _ = writeln!(out, "{text}");
            }
            let _ = out.flush();
        }
    });
    agent.run(shutdown).await;
    let _ = sim.await;
    view.abort();
    finish_otlp(otlp).await;
    Ok(0)
}

/// The remediation dispatcher, when any action is configured: it takes every rule
/// transition from the agent and decides (and audits) its actions.
fn start_remediation(agent: &Arc<Agent>) -> Option<Arc<crate::remediation::Dispatcher>> {
    if agent.cfg.remediation.actions.is_empty() {
        return None;
    }
    let plugins = agent
        .registry
        .of_kind(rocewatch_plugin_api::PluginKind::Remediation)
        .cloned()
        .collect();
    let d = crate::remediation::Dispatcher::new(
        agent.cfg.remediation.clone(),
        Arc::clone(&agent.metrics),
        plugins,
    );
    d.set_qos(Arc::new(crate::qos::apply::Applier::new(agent)));
    tracing::info!(
        audit_log = %d.audit_path().display(),
        kill_switch = %agent.cfg.remediation.kill_switch.display(),
        actions = agent.cfg.remediation.actions.len(),
        "remediation enabled (actions are dry runs unless dry_run = false)"
    );
    let mut rx = agent.transitions.subscribe();
    let dispatcher = Arc::clone(&d);
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(t) => {
                    d.handle(&t);
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::error!(
                        missed = n,
                        "remediation fell behind: {n} rule transitions were not acted on"
                    );
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    Some(dispatcher)
}

/// One `[remediation.actions.X]` table from TOML text (the demo's built-in action).
fn toml_action(text: &str) -> Result<crate::remediation::ActionConfig> {
    config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()?
        .try_deserialize()
        .context("the demo's remediation action")
}

/// `rocewatch probe`'s command line.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// The peer (IP address or name).
    #[arg(required_unless_present = "serve")]
    peer: Option<String>,
    /// Probes to send.
    #[arg(long, default_value_t = 10)]
    count: u32,
    /// Message size in bytes.
    #[arg(long, default_value_t = 64)]
    size: u32,
    /// Per-probe timeout.
    #[arg(long, value_parser = parse_duration, default_value = "1s", value_name = "DUR")]
    timeout: Duration,
    /// Time between probes.
    #[arg(long, value_parser = parse_duration, default_value = "100ms", value_name = "DUR")]
    interval: Duration,
    /// Run a responder until interrupted instead of probing.
    #[arg(long)]
    serve: bool,
    /// RDMA device (default: the first).
    #[arg(long)]
    device: Option<String>,
    /// TCP port of the side channel.
    #[arg(long, default_value_t = 18516)]
    tcp_port: u16,
    /// Print the results and the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Busy-poll for completions (prober, or responder with --serve) instead of sleeping
    /// on completion events, as ib_send_lat does: lower, steadier RTTs, one core busy.
    #[arg(long)]
    busy_poll: bool,
}

/// The probe plugin's file: `ROCEWATCH_PLUGIN_DIR`, else next to this binary.
fn probe_plugin_path() -> Result<PathBuf> {
    const FILE: &str = "librocewatch_probe_verbs.so";
    let mut tried = Vec::new();
    if let Some(d) = std::env::var_os("ROCEWATCH_PLUGIN_DIR") {
        let p = PathBuf::from(d).join(FILE);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p);
    }
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        let p = d.join(FILE);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p);
    }
    let tried: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "the verbs probe plugin {FILE} was not found (looked at {}); build it with `cargo build -p rocewatch-probe-verbs` or set ROCEWATCH_PLUGIN_DIR",
        tried.join(", ")
    )
}

/// The probe-verbs plugin as an external plugin: its call timeout leaves five seconds
/// beyond the probe's own.
fn probe_plugin_config(
    path: PathBuf,
    timeout: Duration,
    device: &Option<String>,
    tcp_port: u16,
    serve: bool,
    busy_poll: bool,
    reconnect_backoff: Duration,
) -> crate::config::ExternalPluginConfig {
    crate::config::ExternalPluginConfig {
        path,
        enabled: true,
        interval: None,
        timeout: Some(timeout + Duration::from_secs(5)),
        options: serde_json::json!({
            "device": device, "tcp_port": tcp_port, "serve": serve, "busy_poll": busy_poll,
            "reconnect_backoff": humantime::format_duration(reconnect_backoff).to_string(),
        }),
    }
}

async fn run_probe(a: ProbeArgs, mut cfg: Config) -> Result<i32> {
    use rocewatch_plugin_api::{PluginKind, ProbeOutcome, ProbeTarget};
    let path = probe_plugin_path()?;
    // Only the probe plugin: no collection here.
    for name in crate::host::registry::builtin_names() {
        cfg.plugins.builtin.insert(
            name.to_string(),
            crate::config::PluginSettings {
                enabled: false,
                ..Default::default()
            },
        );
    }
    cfg.plugins.external = vec![probe_plugin_config(
        path.clone(),
        a.timeout,
        &a.device,
        a.tcp_port,
        a.serve,
        a.busy_poll,
        // A one-off run tries to connect for every probe.
        Duration::ZERO,
    )];
    let agent = Agent::start(cfg).await;
    let Some(entry) = agent.registry.of_kind(PluginKind::Probe).find(|e| {
        e.instance.is_some() && e.status().state == crate::host::registry::State::Started
    }) else {
        let why = agent
            .registry
            .statuses()
            .into_iter()
            .filter_map(|s| s.last_error)
            .collect::<Vec<_>>()
            .join("; ");
        bail!(
            "the verbs probe plugin ({}) did not start: {why}",
            path.display()
        );
    };
    if a.serve {
        eprintln!(
            "rocewatch probe: responding on TCP port {} (Ctrl-C to stop)",
            a.tcp_port
        );
        let mut stop = crate::pipeline::shutdown_on_signals();
        let _ = stop.changed().await;
        return Ok(0);
    }
    let peer = a
        .peer
        .clone()
        .expect("clap requires a peer without --serve");
    let mut rtts = Vec::new();
    let mut rows = Vec::new();
    let (mut timeouts, mut failures) = (0u32, Vec::new());
    let mut nic = None;
    for seq in 1..=a.count {
        let target = ProbeTarget {
            peer: peer.clone(),
            size: a.size,
            timeout_ms: a.timeout.as_millis() as u64,
        };
        let r = crate::probes::probe_once(entry, target, &agent.metrics).await;
        let line = match r {
            Ok(res) => {
                rows.push(serde_json::to_value(&res).expect("plain data"));
                if res.nic_timestamps.is_some() {
                    nic = res.nic_timestamps.clone();
                }
                match res.outcome {
                    ProbeOutcome::Ok { rtt_seconds } => {
                        rtts.push(rtt_seconds);
                        format!(
                            "{} bytes from {peer}: seq={seq} rtt={:.3} ms",
                            a.size,
                            rtt_seconds * 1e3
                        )
                    }
                    ProbeOutcome::Timeout => {
                        timeouts += 1;
                        format!(
                            "seq={seq}: timeout after {}",
                            humantime::format_duration(a.timeout)
                        )
                    }
                    ProbeOutcome::ConnectFailed { cause } => {
                        let l = format!("seq={seq}: connection failed: {cause}");
                        failures.push(cause);
                        l
                    }
                }
            }
            Err(e) => {
                failures.push(e.to_string());
                format!("seq={seq}: {e}")
            }
        };
        if !a.json {
            println!("{line}");
        }
        if seq < a.count {
            tokio::time::sleep(a.interval).await;
        }
    }
    let mut sorted = rtts.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| -> Option<f64> {
        (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize])
    };
    let loss = 100.0 * (a.count as f64 - rtts.len() as f64) / a.count.max(1) as f64;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "peer": peer, "size": a.size, "sent": a.count, "received": rtts.len(),
                "timeouts": timeouts, "connect_failures": failures.len(), "loss_percent": loss,
                "rtt_seconds": { "min": q(0.0), "p50": q(0.5), "p99": q(0.99), "max": q(1.0) },
                "nic_timestamps": nic,
                "results": rows,
            })
        );
    } else {
        println!(
            "--- {peer} rdma probe: {} sent, {} received, {loss:.1}% loss, {timeouts} timeouts, {} connection failures",
            a.count,
            rtts.len(),
            failures.len()
        );
        if let (Some(min), Some(p50), Some(p99), Some(max)) = (q(0.0), q(0.5), q(0.99), q(1.0)) {
            println!(
                "rtt min/p50/p99/max = {:.3}/{:.3}/{:.3}/{:.3} ms",
                min * 1e3,
                p50 * 1e3,
                p99 * 1e3,
                max * 1e3
            );
        }
        match nic {
            Some(rocewatch_plugin_api::NicTimestamps::Unsupported { reason }) => {
                println!("NIC-measured split of the RTT: unsupported ({reason})")
            }
            Some(rocewatch_plugin_api::NicTimestamps::Measured {
                network_seconds,
                host_seconds,
            }) => println!(
                "NIC-measured split of the last RTT: network {:.3} ms, host {:.3} ms",
                network_seconds * 1e3,
                host_seconds * 1e3
            ),
            None => println!("NIC-measured split of the RTT: the probe plugin does not say"),
        }
    }
    Ok(if rtts.is_empty() { 1 } else { 0 })
}
