//! The guide in order: devices, what the host is (bare metal or a guest), ports, netdev and IP, GID, the QoS checks, MTU, the link
//! layer, the PCIe links, SR-IOV VFs, GPUs, NUMA, multi-rail, firewall, interrupts, driver and
//! firmware, the kernel log, counters over a window, a verbs probe, capture, and an
//! application's environment. The host is read once ([`Host`]); each topic is a named
//! `fn(&Host) -> Vec<Check>`, and [`GUIDE`] is their order.

use std::sync::Arc;
use std::time::Instant;

use rocewatch_plugin_api::Inventory;

use super::check::{check, Check, Options, Status};
use crate::checks::bandwidth::{bandwidth_check, BANDWIDTH_TEST};
use host::Host;
use rocewatch_runtime::app::App;

pub(crate) mod host;
pub(crate) mod ports;
mod topics;
mod userspace_topic;

/// A topic of the guide: the checks it makes of what the host was read to be.
pub(super) type Topic = fn(&Host) -> Vec<Check>;

/// The guide, in order.
pub(super) const GUIDE: &[Topic] = &[
    ports::devices,
    topics::virtualization,
    topics::userspace,
    ports::ports,
    ports::mtu,
    topics::link_layer,
    topics::pcie,
    topics::optics,
    topics::link,
    topics::sriov,
    topics::gpu,
    topics::numa,
    topics::multirail,
    topics::firewall,
    topics::interrupts,
    topics::driver,
    topics::firmware,
    topics::kernel_log,
    topics::counters,
    topics::probe,
    topics::capture,
    topics::env,
];

/// What the guide is waiting on, told as it starts each wait (for a progress line): a
/// phrase ("reading counters over a 5s window") and when the wait ends, if known.
pub type Waiting<'a> = &'a (dyn Fn(String, Option<Instant>) + Sync);

/// Run every check.
pub async fn run(agent: &Arc<App>, opts: &Options) -> Vec<Check> {
    run_telling(agent, opts, &|_, _| {}).await
}

/// Run every check, telling `waiting` what each step waits on.
pub async fn run_telling(agent: &Arc<App>, opts: &Options, waiting: Waiting<'_>) -> Vec<Check> {
    waiting("discovering the RDMA devices".into(), None);
    let inv: Inventory = agent.discover().await.unwrap_or_default();
    if inv.devices.is_empty() {
        return vec![ports::no_devices(&agent.sysfs_root)];
    }
    waiting("reading the QoS settings".into(), None);
    let qos = rocewatch_qos::observe::observe(
        &rocewatch_qos::observe::config_plugins(&agent.registry),
        agent.metrics(),
    )
    .await
    .unwrap_or_default();
    let mut h = Host::new(agent.sysfs_root.clone(), opts, inv, qos);
    live_steps(agent, &mut h, waiting).await;
    waiting("checking what was read".into(), None);
    GUIDE.iter().flat_map(|topic| topic(&h)).collect()
}

/// What only the live agent can tell: the collections a window apart, the probe to the
/// peer and the bandwidth test.
async fn live_steps(agent: &Arc<App>, h: &mut Host<'_>, waiting: Waiting<'_>) {
    waiting("reading counters".into(), None);
    let (first, e1) = agent.collect_all().await;
    let cpu_before = h.cpu_times();
    let window = h.opts.window;
    waiting(
        format!(
            "reading counters over a {} window",
            humantime::format_duration(window)
        ),
        Some(Instant::now() + window),
    );
    tokio::time::sleep(window).await;
    let (second, e2) = agent.collect_all().await;
    h.cpu = cpu_before.zip(h.cpu_times());
    h.failed = e1.iter().chain(&e2).map(ToString::to_string).collect();
    (h.first, h.second) = (first, second);
    match &h.opts.peer {
        None => h
            .probe
            .push(check("probe", "", Status::Skip, "no --peer given", None)),
        Some(peer) => {
            waiting(format!("probing {peer} over RDMA"), None);
            let probed = crate::checks::probe::probe_rtts(agent, peer).await;
            // Answered: late under steal (a WARN) is still an answer.
            let side_ok = probed.is_ok();
            let c = match probed {
                Ok(rtts) => crate::checks::probe::rtt_check(peer, &rtts, steal_since_start(h)),
                Err(c) => c,
            };
            h.probe.push(c);
            // The path CM applications take, beside it.
            waiting(
                format!(
                    "probing {peer} through the RDMA connection manager (port {})",
                    h.opts.cm_port
                ),
                None,
            );
            let c = crate::checks::cm_path::cm_probe_check(
                agent,
                peer,
                h.opts.cm_port,
                side_ok,
                &h.qos,
            )
            .await;
            h.probe.push(c);
            if h.opts.bandwidth {
                waiting(
                    format!("measuring the bandwidth to {peer}"),
                    Some(Instant::now() + BANDWIDTH_TEST),
                );
                let c = bandwidth_check(agent, peer).await;
                h.probe.push(c);
            }
        }
    }
}

/// The share of CPU time stolen from the start of doctor's window until now (the window
/// and the probes after it), when the proc tree is this host's and time passed.
fn steal_since_start(h: &Host) -> Option<f64> {
    match (&h.cpu, h.cpu_times()) {
        (Some((Ok(start), _)), Some(Ok(now))) => {
            rocewatch_sysfs::procstat::steal_share(start, &now)
        }
        _ => None,
    }
}
