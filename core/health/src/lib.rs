//! `rocewatch health`: the verdict a scheduler asks for, in the node-problem-detector
//! custom-plugin contract (exit 0 healthy, 1 unhealthy, 2 cannot tell; one line naming
//! the worst finding in at most 80 bytes), without a running agent and better with one.
//!
//! The checks, in order: RDMA devices present; every port whose netdev is
//! administratively up (and every InfiniBand port, and every RoCE port whose netdev is
//! gone, unless `ignore_ports` names it) ACTIVE/LinkUp at its expected rate;
//! PCIe at the most its card and slot allow; a RoCE v2 GID for each address; the MTU; the
//! expected driver and firmware builds; a link that flapped `[health] max_flaps` times
//! within `flap_window`, counted between runs (`link`, `history`); a transceiver module
//! at an alarm level or with a dark lane (`optics`); failing driver messages in the kernel log (the
//! doctor's kernel-log check over `[health] kernel_log_window`); queue pairs in the error
//! state (RDMA netlink, the live host only); a running agent's firing rules (its
//! `/rules`, never required). `[health]` says what "expected" means ([`HealthConfig`]).
//!
//! The checks run within `[health] timeout` (default 4 s, under node-problem-detector's
//! 5 s rule timeout): what still reads at the deadline is a finding naming what it
//! reads, and the verdict is given on what is known (`deadline`).
//!
//! Files: `config` (the section), `checks` (the host's checks over what was read once),
//! `live` (the kernel log, QPs and the agent: what a fixture tree does not have),
//! `link` and `history` (flaps, and the readings kept between runs), `optics` (modules),
//! `finding` (findings, the verdict and the line), `deadline` (the parts on their
//! threads, and the bound).

mod checks;
pub mod config;
mod deadline;
mod finding;
mod history;
mod link;
mod live;
mod optics;
mod options;
pub mod slurm;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use checks::admin_up;
pub use config::{CheckName, HealthConfig, HealthConfigError};
pub use deadline::threads_in_flight;
use deadline::{Board, Part};
pub use finding::{bounded, Finding, Report, Status, Verdict, LINE_MAX};
pub use options::Options;

/// Run every check `cfg` turns on, within `cfg.timeout`, and judge.
pub async fn run(opts: &Options, cfg: &HealthConfig) -> Report {
    let board = Board::new();
    let deadline = tokio::time::Instant::now() + cfg.timeout;
    let opts = Arc::new(opts.clone());
    let cfg = Arc::new(cfg.clone());
    for c in deadline::ORDER {
        if !cfg.runs(c) {
            let skipped = Finding::host(c.as_str(), Status::Skipped, "not in [health] checks");
            board.done(Part::Check(c), vec![skipped]);
        }
    }
    let parts = (board.clone(), opts.clone(), cfg.clone());
    deadline::spawn(&board, Part::Scope, "sysfs", move || {
        sysfs_part(&parts.0, &parts.1, &parts.2)
    });
    if cfg.runs(CheckName::KernelLog) {
        let (b, o, c) = (board.clone(), opts.clone(), cfg.clone());
        let part = Part::Check(CheckName::KernelLog);
        deadline::spawn(&board, part, "kernel-log", move || {
            b.reading(part, "kernel-log", live::kernel_log_source(&o));
            b.done(part, live::kernel_log(&o, &c));
        });
    }
    if cfg.runs(CheckName::Quarantine) {
        let (b, o) = (board.clone(), opts.clone());
        let part = Part::Check(CheckName::Quarantine);
        deadline::spawn(&board, part, "quarantine", move || {
            let file = rocewatch_runtime::quarantine::QuarantineFile::in_dir(&o.state_dir);
            b.reading(part, "quarantine", file.path().display().to_string());
            b.done(part, live::quarantine(&o));
        });
    }
    if cfg.runs(CheckName::Agent) {
        let part = Part::Check(CheckName::Agent);
        let f = match tokio::time::timeout_at(deadline, live::agent(&cfg)).await {
            Ok(f) => f,
            // Never required: an agent that does not answer in time weighs nothing.
            Err(_) => vec![Finding::host(
                "agent",
                Status::Warning,
                "did not answer within [health] timeout (its rules are not read)",
            )],
        };
        board.done(part, f);
    }
    board.wait(deadline).await;
    Report::new(board.findings(cfg.timeout))
}

/// The checks of the sysfs root, in order, on this thread: the inventory (read once),
/// which ports count, then each check over them. The QP and userspace checks, which
/// need the inventory too, start on threads of their own once it is read.
fn sysfs_part(board: &Arc<Board>, opts: &Arc<Options>, cfg: &Arc<HealthConfig>) {
    use CheckName as C;
    let after: Vec<CheckName> = [
        C::Devices,
        C::Ports,
        C::Pcie,
        C::Gid,
        C::Mtu,
        C::Builds,
        C::Qps,
        C::Userspace,
        C::Link,
        C::Optics,
    ]
    .into_iter()
    .filter(|&c| cfg.runs(c))
    .collect();
    let classes = opts.sysfs_root.join("class/infiniband");
    for &c in &after {
        board.waiting(
            Part::Check(c),
            format!("the inventory of {}", classes.display()),
        );
    }
    board.reading(Part::Scope, "devices", classes.display().to_string());
    let inv = match inventory(opts) {
        Ok(i) => i,
        Err(f) => {
            // Nothing to check without it: that finding says why.
            for &c in &after {
                board.done(Part::Check(c), Vec::new());
            }
            board.done(Part::Scope, vec![f]);
            return;
        }
    };
    let (errors, unlisted) = inventory_errors(inv.1, &inv.0);
    let inv = Arc::new(inv.0);
    if cfg.runs(C::Qps) {
        let (b, o, i) = (board.clone(), opts.clone(), inv.clone());
        let part = Part::Check(C::Qps);
        deadline::spawn(board, part, "qps", move || {
            b.reading(part, "qps", "the QPs over RDMA netlink (RES_QP_GET)");
            b.done(part, live::qps(&o, &i));
        });
    }
    if cfg.runs(C::Userspace) {
        let (b, o, c, i) = (board.clone(), opts.clone(), cfg.clone(), inv.clone());
        let part = Part::Check(C::Userspace);
        deadline::spawn(board, part, "userspace", move || {
            let what = format!("the verbs stack under {}", c.rootfs.display());
            b.reading(part, "userspace", what);
            b.done(part, live::userspace(&o, &c, &i));
        });
    }
    let host = checks::Host {
        root: opts.sysfs_root.clone(),
        inv: &inv,
        cfg,
        addresses: opts
            .live
            .then(rocewatch_netlink::ifaddrs::interface_addresses)
            .and_then(Result::ok),
        board,
        unlisted,
        rail_rows: &opts.rail_rows,
    };
    let (checked, scope) = checks::scope(&host);
    board.done(Part::Scope, errors.into_iter().chain(scope).collect());
    spawn_link_and_optics(board, opts, cfg, &checked);
    let run = |name: CheckName, f: &dyn Fn() -> Vec<Finding>| {
        if cfg.runs(name) {
            board.reading(
                Part::Check(name),
                name.as_str(),
                "the values the inventory read",
            );
            board.done(Part::Check(name), f());
        }
    };
    run(C::Devices, &|| checks::devices(&host));
    run(C::Ports, &|| checks::ports(&host, &checked));
    run(C::Pcie, &|| checks::pcie(&host, &checked));
    run(C::Gid, &|| checks::gid(&host, &checked));
    run(C::Mtu, &|| checks::mtu(&host, &checked));
    run(C::Builds, &|| checks::builds(&host, &checked));
}

/// The `link` and `optics` checks of the checked ports, each on a thread of its own (a
/// module's read is an I2C transaction per page, the flap history a file).
fn spawn_link_and_optics(
    board: &Arc<Board>,
    opts: &Arc<Options>,
    cfg: &Arc<HealthConfig>,
    checked: &[checks::Checked],
) {
    let ports: Arc<Vec<link::LinkPort>> = Arc::new(
        checked
            .iter()
            .map(|c| link::LinkPort {
                device: c.dev.name.clone(),
                port: c.port.port,
                netdev: c.port.netdev.clone(),
                infiniband: c.port.link_layer.as_deref() == Some("InfiniBand"),
                link_up: rocewatch_sysfs::verdict::judge_port_state(c.port).weight()
                    == rocewatch_sysfs::verdict::Weight::Fine,
            })
            .collect(),
    );
    if cfg.runs(CheckName::Link) {
        let (b, o, c, p) = (board.clone(), opts.clone(), cfg.clone(), ports.clone());
        let part = Part::Check(CheckName::Link);
        deadline::spawn(board, part, "link", move || {
            let f = link::run_host(&b, &o, &c, &p);
            b.done(part, f);
        });
    }
    if cfg.runs(CheckName::Optics) {
        let (b, o, p) = (board.clone(), opts.clone(), ports);
        let part = Part::Check(CheckName::Optics);
        deadline::spawn(board, part, "optics", move || {
            let mut reader = optics::LiveModules::default();
            b.done(part, optics::optics(&p, o.live, &mut reader, &b));
        });
    }
}

/// The inventory of the sysfs root, or the finding that says why there is none.
fn inventory(
    opts: &Options,
) -> Result<
    (
        rocewatch_plugin_api::Inventory,
        Vec<rocewatch_plugin_api::PartialError>,
    ),
    Finding,
> {
    let root = rocewatch_sysfs::SysRoot::new(&opts.sysfs_root);
    let filter = rocewatch_sysfs::inventory::DeviceFilter::new(&opts.devices)
        .map_err(|e| Finding::host("devices", Status::Unknown, e.to_string()))?;
    rocewatch_sysfs::inventory::read_inventory(&root, &filter).map_err(|e| {
        Finding::host(
            "devices",
            Status::Unknown,
            format!("{}: {e}", opts.sysfs_root.display()),
        )
    })
}

/// What the inventory could not read, as findings naming the file (the health of what
/// was not read cannot be told); a device whose `ports/` could not be listed is kept
/// aside, by name, for the `ports` check to hold against the host.
fn inventory_errors(
    errors: Vec<rocewatch_plugin_api::PartialError>,
    inv: &rocewatch_plugin_api::Inventory,
) -> (Vec<Finding>, BTreeMap<String, String>) {
    let mut findings = Vec::new();
    let mut unlisted = BTreeMap::new();
    for e in errors {
        let path = std::path::Path::new(&e.target);
        let dev = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|d| d.to_string_lossy().into_owned());
        let portless = path.file_name().is_some_and(|f| f == "ports")
            && dev.as_ref().is_some_and(|d| {
                inv.devices
                    .iter()
                    .any(|x| &x.name == d && x.ports.is_empty())
            });
        match dev {
            Some(d) if portless => {
                unlisted.insert(d, format!("{}: {}", e.target, e.message));
            }
            _ => findings.push(Finding::host(
                "devices",
                Status::Unknown,
                format!("{}: {}", e.target, e.message),
            )),
        }
    }
    (findings, unlisted)
}
