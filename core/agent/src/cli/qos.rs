//! `rocewatch qos show|plan|apply|rollback|diff`: the RoCE/PFC/ECN configuration.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use super::output::print_json;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_plugin_api::PluginKind;

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
    /// writes nothing (no audit record, no snapshot). With --yes: the values about to be
    /// replaced are first written to a snapshot under [qos] snapshot_dir (default qos/ in
    /// the state directory: $STATE_DIRECTORY, else /var/lib/rocewatch; no snapshot, no
    /// change), every change is audited in [remediation] audit_log (default audit.jsonl
    /// in the state directory) before it is made and with its result, and a
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
    /// apply could not be read is left as is. Audited like apply (the dry run writes
    /// nothing). Exit status: 0
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

pub async fn run(c: QosCommand) -> Result<i32> {
    match c {
        QosCommand::Show { source, json } => show_cmd(source, json).await,
        QosCommand::Plan { source, json } => plan(source, json).await,
        QosCommand::Apply { source, yes, json } => apply(source, yes, json).await,
        QosCommand::Rollback {
            snapshot,
            source,
            yes,
            force,
            json,
        } => rollback(snapshot, source, yes, force, json).await,
        QosCommand::Diff { a, b, json } => diff(a, b, json),
    }
}

pub async fn show_cmd(source: SourceArgs, json: bool) -> Result<i32> {
    let cfg = source.load()?;
    let agent = App::start(
        cfg,
        Some(&[PluginKind::Configuration, PluginKind::Discovery]),
    )
    .await;
    let states = agent.observe_qos().await?;
    let inventory = agent.discover().await.unwrap_or_default();
    let fingerprint = rocewatch_qos::metrics::fingerprint(&states, &inventory);
    if json {
        print_json(&serde_json::json!({ "ports": states, "fingerprint": fingerprint }))?;
    } else {
        print!("{}", rocewatch_qos::show_text(&states));
        println!("fingerprint {fingerprint} (settings, drivers and firmware; equal on hosts configured alike)");
    }
    Ok(0)
}

pub async fn plan(source: SourceArgs, json: bool) -> Result<i32> {
    let cfg = source.load()?;
    if cfg.qos.desired.is_empty() {
        bail!(
            "no desired state: add [[qos.desired]] entries to the configuration (see `rocewatch qos plan --help`)"
        );
    }
    let desired = cfg.qos.clone();
    let agent = App::start(cfg, Some(&[PluginKind::Configuration])).await;
    let states = agent.observe_qos().await?;
    let plan = rocewatch_qos::plan(&desired, &states);
    if json {
        print_json(&serde_json::to_value(&plan)?)?;
    } else {
        print!("{}", rocewatch_qos::plan_text(&plan));
    }
    Ok(if plan.is_clean() { 0 } else { 1 })
}

pub async fn apply(source: SourceArgs, yes: bool, json: bool) -> Result<i32> {
    let cfg = source.load()?;
    if cfg.qos.desired.is_empty() {
        bail!(
            "no desired state: add [[qos.desired]] entries to the configuration (see `rocewatch qos plan --help`)"
        );
    }
    let agent = App::start(cfg, Some(&[PluginKind::Configuration])).await;
    // A dry run writes nothing: no audit record, no state directory.
    let applier = agent.qos_applier().without_dry_run_audit();
    let states = applier.observe().await?;
    let plan = rocewatch_qos::plan(&applier.desired, &states);
    let report = applier
        .apply(&plan.changes, !yes, "qos apply")
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    if json {
        let mut v = serde_json::to_value(&report)?;
        v["plan"] = serde_json::to_value(&plan)?;
        print_json(&v)?;
    } else {
        print!("{}", rocewatch_qos::apply::report_text(&report));
        for b in &plan.blocked {
            println!("{}", rocewatch_qos::blocked_line(b, 12));
        }
        let done = report
            .steps
            .iter()
            .filter(|s| s.outcome == rocewatch_qos::apply::Outcome::Done)
            .count();
        if plan.changes.is_empty() {
            println!(
                "nothing to change ({} already as desired, {} cannot be compared)",
                plan.in_sync,
                plan.blocked.len()
            );
        } else if !yes {
            println!(
                "dry run: {} to change, nothing written; run again with --yes to change them (audited in {})",
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

pub async fn rollback(
    snapshot: Option<PathBuf>,
    source: SourceArgs,
    yes: bool,
    force: bool,
    json: bool,
) -> Result<i32> {
    let cfg = source.load()?;
    let dir = cfg.qos.snapshot_dir.clone();
    let path = match snapshot {
        Some(p) => p,
        None => rocewatch_qos::snapshot::latest_snapshot(&dir)
            .map_err(|e| anyhow::anyhow!(e))?
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no snapshot to roll back in {} (`qos apply --yes` writes one; [qos] snapshot_dir)",
                    dir.display()
                )
            })?,
    };
    let agent = App::start(cfg, Some(&[PluginKind::Configuration])).await;
    let applier = agent.qos_applier().without_dry_run_audit();
    let report = applier
        .rollback(&path, !yes, force)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    if json {
        print_json(&serde_json::to_value(&report)?)?;
    } else {
        print!("{}", rocewatch_qos::apply::report_text(&report));
        if !yes {
            println!("dry run: run again with --yes to restore");
        }
    }
    Ok(if report.failed { 1 } else { 0 })
}

pub fn diff(a: PathBuf, b: PathBuf, json: bool) -> Result<i32> {
    let load = |p: &PathBuf| -> Result<rocewatch_qos::HostQos> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: not the output of `rocewatch qos show --json`",
                p.display()
            )
        })
    };
    let c = rocewatch_qos::compare_hosts(&load(&a)?, &load(&b)?);
    if json {
        print_json(&serde_json::to_value(&c.differences)?)?;
    } else {
        print!(
            "{}",
            rocewatch_qos::diff_text(&c, &a.display().to_string(), &b.display().to_string())
        );
    }
    Ok(if c.differences.is_empty() { 0 } else { 1 })
}
