//! The grammar of the commands with subcommands of their own (`rocewatch qos ...`,
//! `rocewatch config ...`), of `rocewatch top`'s options, and of the options most commands
//! share (clap; beside args.rs, which has the rest).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::top_view::SortKey;
use crate::config::Config;

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
    pub fn load(&self) -> Result<Config> {
        let mut cfg = Config::load(self.config.as_deref())?;
        if let Some(root) = &self.sysfs_root {
            cfg.agent.sysfs_root = root.clone();
        }
        Ok(cfg)
    }
}

/// `rocewatch top`'s arguments.
#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print one frame and exit. With per-QP counters it collects twice, --interval
    /// apart, to show rates; without them, once.
    #[arg(long)]
    pub once: bool,
    /// With --once: print the frame as JSON: {"host","time","sort","totals","folded",
    /// "rates_over_s","per_qp_counters","workloads":[{"workload","kind","attributes",
    /// "qps","cqs","mrs","mr_bytes","pds","ports","rates"}],"not_shown","errors"}.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// The column rows are sorted by (descending; `workload` ascending).
    #[arg(long, value_enum, default_value = "qps")]
    pub sort: SortKey,
    /// Show at most N workloads (default: all; the live view: what fits the terminal).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Time between collections: the live view's refresh, and the window of the rates
    /// (100ms to 1h).
    #[arg(long, value_parser = rocewatch_runtime::util::duration::INTERVAL.flag(), default_value = "2s", value_name = "DUR")]
    pub interval: Duration,
}

/// `rocewatch congestion`'s arguments.
#[derive(Debug, Args)]
pub struct CongestionArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Time between the two collections the rates are computed over (100ms to 1h).
    #[arg(long, value_parser = rocewatch_runtime::util::duration::WATCH.flag(), default_value = "10s", value_name = "DUR")]
    pub window: Duration,
    /// For each port and priority in a troubled state: what to tune, the counters it
    /// rests on, and the port's own settings it points at (ECN enables, DCQCN timers,
    /// PFC, buffer, storm prevention).
    #[arg(long)]
    pub advise: bool,
    /// Show idle priorities too.
    #[arg(long)]
    pub all: bool,
    /// Again every window until interrupted: on a terminal one screen redrawn like top
    /// (q quits), elsewhere frames one after another.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// Print JSON: {"window_s","ports":[{"device","port","netdev","priority","state",
    /// "evidence","knob","rates":{...}}],"errors"}.
    #[arg(long)]
    pub json: bool,
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
    /// live kernel only), the DCQCN parameters (dcqcn_*: MLNX_OFED sysfs, or the kernel's
    /// mlx5 debugfs cc_params), the receive buffers and mlx5's cable length (DCB
    /// netlink), and the switch's PFC and APP entries as DCBX learned them (peer_*). A setting the device does not have says "unsupported"; one
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
    ///
    /// Web configuration files (`web_config_file`) it names are checked too: certificates
    /// and keys read, client CA, versions, bcrypt hashes.
    Check { file: PathBuf },
    /// Print the bcrypt hash of a password read from standard input, for
    /// `basic_auth_users` in a web configuration file.
    ///
    /// Example:
    ///   read -rs PW && echo "$PW" | rocewatch config hash-password
    ///   # then in web.yml:  basic_auth_users: { prometheus: <the hash> }
    #[command(verbatim_doc_comment)]
    HashPassword {
        /// bcrypt cost (4-31); each step doubles the work of every check that is not cached.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(4..=31))]
        cost: u32,
    },
}

/// `rocewatch quarantine`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// Whether the host is in quarantine, since when, by whom and why.
    ///
    /// Exit status: 0 not in quarantine, 1 in quarantine, 2 on an error.
    Show {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON: {"quarantine": null} or {"quarantine": {"reason","origin","since",
        /// "since_unix","labels"}}.
        #[arg(long)]
        json: bool,
    },
    /// Put the host in quarantine by hand (audited): health says unhealthy, --slurm
    /// drains the node, until `quarantine release`.
    ///
    /// Example: rocewatch quarantine enter --reason "flapping cable on mlx5_3, ticket 4711"
    #[command(verbatim_doc_comment)]
    Enter {
        #[command(flatten)]
        source: SourceArgs,
        /// Why, in one line (it lands in the audit log, the metric and Slurm's reason).
        #[arg(long)]
        reason: String,
    },
    /// End the quarantine (audited with the reason): the only way one ends, unless
    /// [health] release_after lets a rule's quarantine recover. Restarting the agent or
    /// rebooting ends none.
    ///
    /// Example: rocewatch quarantine release --reason "cable replaced, ticket 4711"
    #[command(verbatim_doc_comment)]
    Release {
        #[command(flatten)]
        source: SourceArgs,
        /// Why it ends, in one line (audited).
        #[arg(long)]
        reason: String,
    },
}

/// `rocewatch --version`: `0.1.0 (git 1a2b3c4d5e6f, plugin ABI 1.4)`. The revision is
/// the build's (`build.rs`: `ROCEWATCH_GIT_REV`, else `git rev-parse`, else `unknown`).
pub fn long_version() -> &'static str {
    static V: OnceLock<String> = OnceLock::new();
    V.get_or_init(|| {
        format!(
            "{} (git {}, plugin ABI {}.{})",
            env!("CARGO_PKG_VERSION"),
            env!("ROCEWATCH_GIT_REV"),
            rocewatch_plugin_sdk::abi::ABI_MAJOR,
            rocewatch_plugin_sdk::abi::ABI_MINOR
        )
    })
}

/// The shells completions are made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}
