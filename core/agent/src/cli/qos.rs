//! `rocewatch qos show|plan|apply|rollback|diff`: the RoCE/PFC/ECN configuration.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::args::{QosCommand, SourceArgs};
use super::output::print_json;
use crate::app::App;
use rocewatch_plugin_api::PluginKind;

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
    let applier = agent.qos_applier();
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
    let applier = agent.qos_applier();
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
