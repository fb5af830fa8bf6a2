//! `rocewatch health`: the verdict a scheduler asks for, in the node-problem-detector
//! custom-plugin contract (exit 0 healthy, 1 unhealthy, 2 cannot tell; one line naming
//! the worst finding in at most 80 bytes), without a running agent and better with one.
//!
//! The checks, in order: RDMA devices present; every port whose netdev is
//! administratively up (and every InfiniBand port, and every RoCE port whose netdev is
//! gone, unless `ignore_ports` names it) ACTIVE/LinkUp at its expected rate;
//! PCIe at its maximum width and speed; a RoCE v2 GID for each address; the MTU; the
//! expected driver and firmware builds; failing driver messages in the kernel log (the
//! doctor's kernel-log check over `[health] kernel_log_window`); queue pairs in the error
//! state (RDMA netlink, the live host only); a running agent's firing rules (its
//! `/rules`, never required). `[health]` says what "expected" means ([`HealthConfig`]).
//!
//! Files: `config` (the section), `checks` (the host's checks over what was read once),
//! `live` (the kernel log, QPs and the agent: what a fixture tree does not have),
//! `finding` (findings, the verdict and the line).

mod checks;
pub mod config;
mod finding;
mod live;
mod options;
pub mod slurm;

pub use checks::admin_up;
pub use config::{CheckName, HealthConfig, HealthConfigError};
pub use finding::{bounded, Finding, Report, Status, Verdict, LINE_MAX};
pub use options::Options;

/// Run every check `cfg` turns on and judge.
pub async fn run(opts: &Options, cfg: &HealthConfig) -> Report {
    let root = rocewatch_sysfs::SysRoot::new(&opts.sysfs_root);
    let filter = match rocewatch_sysfs::inventory::DeviceFilter::new(&opts.devices) {
        Ok(f) => f,
        Err(e) => {
            return Report::new(vec![Finding::host(
                "devices",
                Status::Unknown,
                e.to_string(),
            )])
        }
    };
    let inv = match rocewatch_sysfs::inventory::read_inventory(&root, &filter) {
        Ok((inv, _)) => inv,
        Err(e) => {
            return Report::new(vec![Finding::host(
                "devices",
                Status::Unknown,
                format!("{}: {e}", opts.sysfs_root.display()),
            )])
        }
    };
    let host = checks::Host {
        root: opts.sysfs_root.clone(),
        inv: &inv,
        cfg,
        addresses: opts
            .live
            .then(rocewatch_doctor::interface_addresses)
            .and_then(Result::ok),
    };
    let (checked, mut findings) = checks::scope(&host);
    let mut add = |name: CheckName, f: &dyn Fn() -> Vec<Finding>| {
        if cfg.runs(name) {
            findings.extend(f());
        } else {
            findings.push(Finding::host(
                name.as_str(),
                Status::Skipped,
                "not in [health] checks",
            ));
        }
    };
    add(CheckName::Devices, &|| checks::devices(&host));
    add(CheckName::Ports, &|| checks::ports(&host, &checked));
    add(CheckName::Pcie, &|| checks::pcie(&host, &checked));
    add(CheckName::Gid, &|| checks::gid(&host, &checked));
    add(CheckName::Mtu, &|| checks::mtu(&host, &checked));
    add(CheckName::Builds, &|| checks::builds(&host, &checked));
    add(CheckName::KernelLog, &|| live::kernel_log(opts, cfg));
    add(CheckName::Qps, &|| live::qps(opts, &inv));
    add(CheckName::Quarantine, &|| live::quarantine(opts));
    add(CheckName::Userspace, &|| live::userspace(opts, cfg, &inv));
    if cfg.runs(CheckName::Agent) {
        findings.extend(live::agent(cfg).await);
    } else {
        findings.push(Finding::host(
            "agent",
            Status::Skipped,
            "not in [health] checks",
        ));
    }
    Report::new(findings)
}
