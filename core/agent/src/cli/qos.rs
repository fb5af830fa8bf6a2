//! `rocewatch qos show|plan|apply|rollback|diff`: the RoCE/PFC/ECN configuration.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use super::output::print_json;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_plugin_api::PluginKind;
use rocewatch_qos::vf;
use rocewatch_sysfs::SysRoot;

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
    /// A port on an SR-IOV virtual function (in a guest, or a VF's netdev on the host)
    /// says so; the settings its physical function owns (PFC, trust, DSCP map, buffers,
    /// and ECN/CNP where the VF has none) read "owned by the physical function (set on
    /// the hypervisor)".
    ///
    /// Example: rocewatch qos show --sysfs-root integration-tests/fixtures/mlx5-roce-dual-port/sys --json
    #[command(verbatim_doc_comment)]
    Show {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON: {"ports":[{"device","port","netdev","settings":{NAME:{"status","value"}},"sriov"}],"fingerprint"};
        /// "sriov" only on a virtual function: {"role":"vf","pf":PCI|null,"index","mac","pf_owned":[NAME]}.
        #[arg(long)]
        json: bool,
    },
    /// The exact differences between what the ports are set to and `[[qos.desired]]`.
    ///
    /// Each desired setting of each matching port is either already as desired, a change
    /// ("change  mlx5_0/1 (ens1f0np0)  mtu: 1500 -> 9000"), or cannot be compared (the
    /// device lacks the setting, or it could not be read: the reason is given). On a
    /// virtual function, a setting its physical function owns (PFC, trust, ECN...) is
    /// refused, with what to set on the hypervisor instead (mlnx_qos, the VF's VLAN
    /// priority with ip link, or rocewatch there); on the hypervisor, one the plan sets
    /// to the same value on the VF's PF is "covered" by the PF instead. Changes nothing.
    /// Exit status, as diff(1): 0 when everything is as desired, 1 when something
    /// differs, cannot be compared or is refused, 2 on an error.
    ///
    /// [[qos.desired]]
    /// devices = "mlx5_*"
    /// settings = { roce_mode = "RoCE v2", pfc_enabled = "3", trust = "dscp", mtu = "9000" }
    #[command(verbatim_doc_comment)]
    Plan {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON: {"changes":[...],"blocked":[...],"pf_owned":[...],"pf_covered":[...],"in_sync":N,"on_hypervisor":[...]}.
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
    /// On a virtual function, desired settings its physical function owns (PFC, trust,
    /// ECN...) are refused: nothing at all is written, the plan and what to set on the
    /// hypervisor are said, exit status 1. On the hypervisor, where the same plan sets
    /// such a setting to the same value on the VF's PF, it is covered by the PF (not
    /// written on the VF) and the rest applies as usual.
    ///
    /// Exit status: 0 everything applied (or nothing to do), 1 a change failed (and what
    /// was made before it was undone), the dry run found one a plugin cannot make, or a
    /// setting was refused as a physical function's, 2 on an error (configuration,
    /// snapshot not writable).
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
    let root = SysRoot::new(cfg.agent.sysfs_root.clone());
    let agent = App::start(
        cfg,
        Some(&[PluginKind::Configuration, PluginKind::Discovery]),
    )
    .await;
    let mut states = agent.observe_qos().await?;
    let inventory = agent.discover().await.unwrap_or_default();
    // The settings as read, as the agent's rdma.qos.fingerprint takes them: before they
    // are marked the physical function's.
    let fingerprint = rocewatch_qos::metrics::fingerprint(&states, &inventory);
    let vfs = vf::mark_pf_owned(&mut states, &root);
    if json {
        let ports = vf::shown_ports(&states, &vfs);
        print_json(&serde_json::json!({ "ports": ports, "fingerprint": fingerprint }))?;
    } else {
        print!("{}", rocewatch_qos::show_text(&states, &vfs));
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
    let root = SysRoot::new(cfg.agent.sysfs_root.clone());
    let agent = App::start(cfg, Some(&[PluginKind::Configuration])).await;
    let mut states = agent.observe_qos().await?;
    let (plan, steps) = plan_refusing_pf_owned(&desired, &mut states, &root);
    if json {
        let mut v = serde_json::to_value(&plan)?;
        if !steps.is_empty() {
            v["on_hypervisor"] = serde_json::to_value(&steps)?;
        }
        print_json(&v)?;
    } else {
        print!("{}", rocewatch_qos::plan_text(&plan));
        print!("{}", vf::refusal_text(&steps));
    }
    Ok(if plan.is_clean() { 0 } else { 1 })
}

/// The plan of `states` towards `desired`, with the settings a virtual function's
/// physical function owns refused, and what to set on the hypervisor for them.
fn plan_refusing_pf_owned(
    desired: &rocewatch_qos::QosConfig,
    states: &mut [rocewatch_plugin_api::QosState],
    root: &SysRoot,
) -> (rocewatch_qos::Plan, Vec<vf::HypervisorSteps>) {
    let vfs = vf::mark_pf_owned(states, root);
    let mut plan = rocewatch_qos::plan(desired, states);
    vf::refuse_pf_owned(&mut plan, &vfs, desired, states);
    let steps = vf::on_hypervisor(&plan, &vfs, &rocewatch_doctor::shell::word_on_one_line);
    (plan, steps)
}

/// `qos apply` when the plan has settings a physical function owns: nothing is changed
/// (not even what the virtual function could set: half a RoCE configuration is a trap),
/// the plan and what to set on the hypervisor are said, exit 1.
fn refuse_apply(
    plan: &rocewatch_qos::Plan,
    steps: &[vf::HypervisorSteps],
    json: bool,
) -> Result<i32> {
    if json {
        print_json(&serde_json::json!({
            "plan": plan,
            "steps": [],
            "failed": true,
            "refused": true,
            "on_hypervisor": steps,
        }))?;
        return Ok(1);
    }
    print!("{}", rocewatch_qos::plan_text(plan));
    print!("{}", vf::refusal_text(steps));
    let mut ports: Vec<String> = plan.pf_owned.iter().map(|b| b.at.port_label()).collect();
    ports.dedup();
    println!(
        "refused, nothing written: {} {} settings owned by the physical function; set them where it is (above) or leave them out of [[qos.desired]] for {}",
        ports.join(", "),
        if ports.len() == 1 { "has" } else { "have" },
        if ports.len() == 1 { "it" } else { "them" },
    );
    Ok(1)
}

pub async fn apply(source: SourceArgs, yes: bool, json: bool) -> Result<i32> {
    let cfg = source.load()?;
    if cfg.qos.desired.is_empty() {
        bail!(
            "no desired state: add [[qos.desired]] entries to the configuration (see `rocewatch qos plan --help`)"
        );
    }
    let root = SysRoot::new(cfg.agent.sysfs_root.clone());
    let agent = App::start(cfg, Some(&[PluginKind::Configuration])).await;
    // A dry run writes nothing: no audit record, no state directory.
    let applier = agent.qos_applier().without_dry_run_audit();
    let mut states = applier.observe().await?;
    let (plan, steps) = plan_refusing_pf_owned(&applier.desired, &mut states, &root);
    if !plan.pf_owned.is_empty() {
        return refuse_apply(&plan, &steps, json);
    }
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
        for b in &plan.pf_covered {
            println!("{}", rocewatch_qos::covered_line(b, 12));
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
