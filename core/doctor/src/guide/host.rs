//! What the host itself says: the [`Host`] every topic of the guide reads (read once),
//! whether the NICs' interrupts are spread over CPUs, and running a host tool.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rocewatch_netlink::ifaddrs::interface_addresses;
use rocewatch_plugin_api::{Device, Inventory, Port, QosState, ScrapeResult};
use rocewatch_sysfs::gid::routable_v2_gids;
use rocewatch_sysfs::interrupts::nic_irqs;
use rocewatch_sysfs::verdict::{judge_gids, GidVerdict};
use rocewatch_sysfs::SysRoot;

use crate::check::{check, Check, Options, Status};
use crate::checks::gpu::Placed;

/// What the checks read, read once: the inventory, the QoS state, the roots, the
/// interfaces' addresses, the PCI side, and what the live agent saw (the two collections
/// a window apart, the probe and the bandwidth test), filled by the guide's async steps.
pub(crate) struct Host<'a> {
    pub opts: &'a Options,
    /// The sysfs root, and whether it is the live `/sys`.
    pub root: PathBuf,
    pub sys: SysRoot,
    pub live: bool,
    /// Whether the proc root is the live `/proc`.
    pub proc_live: bool,
    pub inv: Inventory,
    pub qos: Vec<QosState>,
    /// The interfaces' addresses (live trees only).
    pub addrs: Option<BTreeMap<String, Vec<IpAddr>>>,
    pub gpus: Vec<Placed>,
    pub nics: Vec<Placed>,
    /// The two collections `opts.window` apart, and what the collectors failed to read.
    pub first: ScrapeResult,
    pub second: ScrapeResult,
    pub failed: Vec<String>,
    /// The probe's and the bandwidth test's verdicts (the live agent's).
    pub probe: Vec<Check>,
}

/// A RoCE port: an Ethernet port with a netdev.
pub(crate) struct RocePort<'h> {
    pub device: &'h Device,
    pub port: &'h Port,
    pub netdev: &'h str,
}

impl<'a> Host<'a> {
    /// What is read before any check: the sysfs side of the host.
    pub fn new(root: PathBuf, opts: &'a Options, inv: Inventory, qos: Vec<QosState>) -> Self {
        let live = rocewatch_sysfs::read::is_sysfs(&root);
        let sys = SysRoot::new(&root);
        let addrs = if live {
            interface_addresses().ok()
        } else {
            None
        };
        let (gpus, nics) = (
            crate::checks::gpu::gpus(&sys),
            crate::checks::gpu::nics(&sys, &inv),
        );
        Host {
            opts,
            proc_live: opts.procfs_root == Path::new("/proc"),
            root,
            sys,
            live,
            inv,
            qos,
            addrs,
            gpus,
            nics,
            first: ScrapeResult::default(),
            second: ScrapeResult::default(),
            failed: Vec::new(),
            probe: Vec::new(),
        }
    }

    /// The proc tree, when it is the same host's as the sysfs tree (both live, or both
    /// given).
    pub fn proc_root(&self) -> Option<&Path> {
        (self.live == self.proc_live).then_some(self.opts.procfs_root.as_path())
    }

    /// The RoCE ports (Ethernet, with a netdev), in inventory order.
    pub fn roce_ports(&self) -> impl Iterator<Item = RocePort<'_>> {
        self.inv.devices.iter().flat_map(|d| {
            d.ports
                .iter()
                .filter(|p| p.link_layer.as_deref() == Some("Ethernet"))
                .filter_map(move |p| {
                    Some(RocePort {
                        device: d,
                        port: p,
                        netdev: p.netdev.as_deref()?,
                    })
                })
        })
    }

    /// A RoCE port's GIDs against its netdev's addresses: `health`'s verdict
    /// (`rocewatch_sysfs::verdict::gid`).
    pub fn gid_verdict(&self, p: &RocePort) -> GidVerdict {
        let addresses = self
            .addrs
            .as_ref()
            .map(|a| a.get(p.netdev).map_or(&[][..], Vec::as_slice));
        let why = self
            .sys
            .no_address(&p.device.name, p.netdev, self.addrs.as_ref());
        judge_gids(p.netdev, p.port, addresses, why)
    }

    /// A RoCE port's IPs: from the live interface, or (fixture trees) from its GIDs.
    pub fn ips(&self, p: &RocePort) -> Vec<IpAddr> {
        match &self.addrs {
            Some(a) => a.get(p.netdev).cloned().unwrap_or_default(),
            None => routable_v2_gids(p.port).iter().map(|g| g.ip).collect(),
        }
    }

    /// The netdev a capture should run on: the first RoCE port's that is up and has an
    /// address.
    pub fn capture_netdev(&self) -> Option<&str> {
        self.roce_ports()
            .find(|p| p.port.netdev_operstate.as_deref() == Some("up") && !self.ips(p).is_empty())
            .map(|p| p.netdev)
    }

    /// The RoCE netdevs' MTUs, an unreadable one `None`, by netdev name.
    pub fn mtus(&self) -> BTreeMap<String, Option<u32>> {
        self.roce_ports()
            .map(|p| (p.netdev.to_string(), p.port.netdev_mtu))
            .collect()
    }
}

pub(crate) fn run_tool(cmd: &str, args: &[&str]) -> Option<Result<String, String>> {
    run_tool_within(cmd, args, TOOL_TIMEOUT)
}

/// How long a tool the doctor asks (`nft`, `iptables-save`, `ping`, `systemctl`) may run.
pub(crate) const TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `cmd ARGS` within `timeout`, as a process group killed at the bound with whatever it
/// started ([`rocewatch_process`]); none when the tool is not installed.
pub(crate) fn run_tool_within(
    cmd: &str,
    args: &[&str],
    timeout: std::time::Duration,
) -> Option<Result<String, String>> {
    use rocewatch_process::{run_bounded, RunError};
    let mut c = std::process::Command::new(cmd);
    c.args(args);
    match run_bounded(c, timeout) {
        Err(RunError::Spawn(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(RunError::Spawn(e)) => Some(Err(format!("{cmd}: {e}"))),
        Err(RunError::Timeout { stderr }) => Some(Err(format!(
            "{cmd} {}: still running after {timeout:?}; killed ({stderr})",
            args.join(" ")
        ))),
        Ok(o) if o.status.success() => Some(Ok(o.stdout)),
        Ok(o) => Some(Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            o.stderr.trim()
        ))),
    }
}

/// Interrupts of the RoCE netdevs: irqbalance running, or each NIC's interrupts spread.
/// `sys` and `proc_root` are the live host's (the caller checks).
pub(crate) fn irq_checks(sys: &Path, proc_root: &Path, netdevs: &[String]) -> Vec<Check> {
    let irqbalance = std::fs::read_dir(proc_root)
        .map(|rd| {
            rd.filter_map(Result::ok).any(|e| {
                std::fs::read_to_string(e.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "irqbalance")
            })
        })
        .unwrap_or(false);
    if irqbalance {
        return vec![check(
            "interrupts",
            "",
            Status::Pass,
            "irqbalance is running",
            None,
        )];
    }
    let table = std::fs::read_to_string(proc_root.join("interrupts")).unwrap_or_default();
    let mut out = Vec::new();
    for nd in netdevs {
        // The netdev's PCI function (mlx5 names its queues' interrupts after it).
        let pci = std::fs::read_link(sys.join("class/net").join(nd).join("device"))
            .ok()
            .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
        let irqs = nic_irqs(&table, nd, pci.as_deref());
        if irqs.is_empty() {
            out.push(check(
                "interrupts",
                nd,
                Status::Skip,
                format!(
                    "no interrupt named after {nd} in {}, and irqbalance is not running",
                    proc_root.join("interrupts").display()
                ),
                None,
            ));
            continue;
        }
        let cpus: std::collections::BTreeSet<String> = irqs
            .iter()
            .filter_map(|i| {
                std::fs::read_to_string(proc_root.join(format!("irq/{i}/effective_affinity_list")))
                    .or_else(|_| {
                        std::fs::read_to_string(
                            proc_root.join(format!("irq/{i}/smp_affinity_list")),
                        )
                    })
                    .ok()
                    .map(|s| s.trim().to_string())
            })
            .collect();
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus.len() <= 1 && irqs.len() > 1 && online > 1 {
            out.push(check(
                "interrupts",
                nd,
                Status::Warn,
                format!(
                    "{} interrupts of {nd} all on CPU {} and irqbalance is not running",
                    irqs.len(),
                    cpus.iter().next().cloned().unwrap_or_default()
                ),
                Some("systemctl enable --now irqbalance (or spread them: set_irq_affinity.sh from the NIC vendor)".into()),
            ));
        } else {
            out.push(check(
                "interrupts",
                nd,
                Status::Pass,
                format!(
                    "{} interrupts of {nd} on CPUs {}",
                    irqs.len(),
                    cpus.into_iter().collect::<Vec<_>>().join(" ")
                ),
                None,
            ));
        }
    }
    out
}

/// Process `pid` is gone, or dead and left to its reaper, within 2 s (a killed process
/// may still run for a moment).
#[cfg(test)]
pub(crate) fn gone(pid: &str) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        let dead = stat.as_deref().map_or(true, |l| {
            l.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
        });
        if dead {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool that is a wrapper whose child hangs (an `nft` waiting on a lock, a
    /// `systemctl` on a bus that does not answer) is killed at the bound with its child,
    /// and the check says so.
    #[test]
    fn a_hanging_tool_is_killed_with_its_children_at_the_bound() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let tool = dir.path().join("nft");
        std::fs::write(
            &tool,
            format!(
                "#!/bin/sh\nsh -c 'echo $$ > {}; exec sleep 20'\necho never\n",
                pidfile.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        let r = run_tool_within(
            tool.to_str().unwrap(),
            &["-j", "list", "ruleset"],
            std::time::Duration::from_secs(1),
        );
        let took = started.elapsed();
        let e = r.expect("the tool is there").unwrap_err();
        assert!(took < std::time::Duration::from_secs(3), "{took:?}: {e}");
        assert!(e.contains("-j list ruleset") && e.contains("killed"), "{e}");
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        assert!(gone(pid.trim()), "the tool's child {} lives on", pid.trim());
        // One that is not installed is no finding.
        assert!(run_tool_within("/nonexistent/nft", &[], TOOL_TIMEOUT).is_none());
    }
}
