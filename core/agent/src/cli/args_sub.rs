//! The grammar of `rocewatch qos ...`, and of the options most commands share (clap;
//! beside args.rs, which has the top level).

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Result;
use clap::{Args, Subcommand};

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
