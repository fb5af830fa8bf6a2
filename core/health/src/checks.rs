//! The host's checks, each a function of what was read once ([`Host`]) to findings.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rocewatch_plugin_api::{Device, Inventory, Port};
use rocewatch_sysfs::verdict::{judge_gids, judge_mtus, judge_port_state, port_gbps, Weight};
use rocewatch_sysfs::SysRoot;

use super::config::{parse_port, CheckName, HealthConfig};
use super::deadline::{Board, Part};
use super::finding::{Finding, Status};

/// `IFF_UP` (`include/uapi/linux/if.h`): the netdev is administratively up.
const IFF_UP: u64 = 0x1;

/// What the checks read: the inventory of the sysfs root, and the live interfaces'
/// addresses (none on a fixture tree).
pub struct Host<'a> {
    pub root: PathBuf,
    pub inv: &'a Inventory,
    pub cfg: &'a HealthConfig,
    /// The interfaces' addresses (getifaddrs), on the live root only.
    pub addresses: Option<BTreeMap<String, Vec<IpAddr>>>,
    /// Where each part says what it reads (what names a read that does not answer).
    pub board: &'a Board,
    /// The devices whose `ports/` could not be listed, with why.
    pub unlisted: BTreeMap<String, String>,
    /// This host's rows of the fleet topology (`Options::rail_rows`).
    pub rail_rows: &'a Result<Option<Vec<rocewatch_sysfs::railmap::RailRow>>, String>,
}

/// A port `health` looks at, and why.
pub struct Checked<'a> {
    pub dev: &'a Device,
    pub port: &'a Port,
}

impl Host<'_> {
    /// [`admin_up`], said on the board first.
    fn admin_up(&self, netdev: &str) -> Result<bool, String> {
        let flags = self.root.join("class/net").join(netdev).join("flags");
        let what = flags.display().to_string();
        self.board.reading(Part::Scope, "ports", what);
        admin_up(&self.root, netdev)
    }
}

impl Checked<'_> {
    fn finding(&self, check: &'static str, status: Status, what: String) -> Finding {
        Finding::at(
            check,
            status,
            &self.dev.name,
            Some(self.port.port),
            self.port.netdev.as_deref(),
            what,
        )
    }

    fn ethernet(&self) -> bool {
        self.port.link_layer.as_deref() == Some("Ethernet")
    }
}

/// Whether `netdev` is administratively up, from `class/net/NETDEV/flags`
/// (`net/core/net-sysfs.c` prints `dev->flags` as `%#x`). Read as every sysfs attribute
/// is (`rocewatch_sysfs::read`): never waiting on the open, a regular file only (a FIFO
/// there would hold `health` until a writer came).
pub fn admin_up(root: &Path, netdev: &str) -> Result<bool, String> {
    let path = root.join("class/net").join(netdev).join("flags");
    let text = match rocewatch_sysfs::read::read_attr(&path) {
        Ok(rocewatch_sysfs::Attr::Value(v)) => v,
        Ok(rocewatch_sysfs::Attr::Absent) => return Err(format!("{}: absent", path.display())),
        Err(e) => return Err(e.to_string()),
    };
    let t = text.trim();
    let hex = t.strip_prefix("0x").unwrap_or(t);
    u64::from_str_radix(hex, 16)
        .map(|f| f & IFF_UP != 0)
        .map_err(|_| {
            format!(
                "{}: {t:?} is not the hex flags the kernel writes",
                path.display()
            )
        })
}

/// The ports to check: those `[health] ports` names, else every port but those
/// `ignore_ports` names and RoCE ports whose netdev an operator took down: every
/// InfiniBand port, every RoCE port whose netdev is administratively up, and every RoCE
/// port without a netdev (gone with its driver's Ethernet side: [`ports`] says so). A
/// port named but absent is a finding of its own.
pub fn scope<'a>(h: &Host<'a>) -> (Vec<Checked<'a>>, Vec<Finding>) {
    let mut out = Vec::new();
    let mut findings = Vec::new();
    if !h.cfg.ports.is_empty() {
        for name in &h.cfg.ports {
            let (dev, port) = parse_port(name).expect("validated");
            let found = h.inv.devices.iter().find(|d| d.name == dev).and_then(|d| {
                d.ports
                    .iter()
                    .find(|p| p.port == port)
                    .map(|p| Checked { dev: d, port: p })
            });
            match found {
                Some(c) => out.push(c),
                None => findings.push(Finding::at(
                    "ports",
                    Status::Unhealthy,
                    dev,
                    Some(port),
                    None,
                    "expected ([health] ports) but not on this host",
                )),
            }
        }
        return (out, findings);
    }
    for dev in &h.inv.devices {
        for port in &dev.ports {
            let c = Checked { dev, port };
            let name = format!("{}/{}", dev.name, port.port);
            if h.cfg.ignore_ports.contains(&name) {
                findings.push(c.finding(
                    "ports",
                    Status::Skipped,
                    "unused on purpose ([health] ignore_ports): not checked".into(),
                ));
                continue;
            }
            match (&port.netdev, c.ethernet()) {
                (Some(nd), true) => match h.admin_up(nd) {
                    Ok(true) => out.push(c),
                    Ok(false) => findings.push(c.finding(
                        "ports",
                        Status::Skipped,
                        format!("{nd} is administratively down: not checked"),
                    )),
                    // Unreadable (a netdev in another network namespace, a name the
                    // path cannot hold): the port is checked anyway, its state decides.
                    Err(_) => out.push(c),
                },
                // No netdev: checked, and [`ports`] holds it against the host.
                _ => out.push(c),
            }
        }
    }
    (out, findings)
}

/// RDMA devices present: at least `min_devices`.
pub fn devices(h: &Host) -> Vec<Finding> {
    let n = h.inv.devices.len();
    let want = h.cfg.min_devices;
    let status = if n >= want {
        Status::Ok
    } else {
        Status::Unhealthy
    };
    let what = match n {
        0 => "no RDMA device in class/infiniband (did the driver load?)".to_string(),
        _ => format!("{n} RDMA device{}", if n == 1 { "" } else { "s" }),
    };
    let what = if status == Status::Unhealthy && n > 0 {
        format!("{what}, {want} expected ([health] min_devices)")
    } else {
        what
    };
    let mut out = vec![Finding::host("devices", status, what)];
    out.extend(missing_nics(h));
    out
}

/// The NICs this host should have and does not show
/// (`rocewatch_sysfs::verdict::nics`, the verdict doctor's `rails` check gives): the
/// rails of the fleet topology no port carries, RDMA functions without an RDMA device
/// (only a warning, unless a row of the topology needs it or it is an InfiniBand
/// controller: `MissingNic::drains`).
fn missing_nics(h: &Host) -> Vec<Finding> {
    let rows = match h.rail_rows {
        Ok(rows) => rows.as_deref(),
        Err(e) => return vec![Finding::host("devices", Status::Unknown, e.clone())],
    };
    let sys = SysRoot::new(&h.root);
    let map = sys.rail_map(h.inv, rows);
    rocewatch_sysfs::verdict::nics::missing_nics(&sys, &map)
        .into_iter()
        .map(|m| {
            let what = format!("{}: {}", m.headline(), m.fix());
            // Only a NIC the host surely lacks drains it (docs/HEALTH.md).
            let status = if m.drains() {
                Status::Unhealthy
            } else {
                Status::Warning
            };
            match &m.rail {
                Some((r, _)) => {
                    Finding::at("devices", status, &format!("rail {r}"), None, None, what)
                }
                None => Finding::host("devices", status, what),
            }
        })
        .collect()
}

/// Each checked port ACTIVE and LinkUp, at `min_rate_gbps` or at the highest rate of the
/// checked ports of its HCA model.
pub fn ports(h: &Host, checked: &[Checked]) -> Vec<Finding> {
    let mut best: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for c in checked {
        if let Some(r) = c.port.rate_bps {
            let e = best.entry(model_of(c)).or_default();
            *e = (*e).max(r);
        }
    }
    let portless = portless(h);
    if checked.is_empty() && !h.inv.devices.is_empty() && portless.is_empty() {
        return vec![Finding::host(
            "ports",
            Status::Unhealthy,
            "no RDMA port to check: every port ignored or its netdev administratively down",
        )];
    }
    portless
        .into_iter()
        .chain(checked.iter().map(|c| port(c, h, &best)))
        .collect()
}

/// The devices without a port (`ports/` gone, empty, not a directory, unreadable): the
/// kernel lists the ports of every RDMA device it registers (`ib_setup_port_attrs()`
/// in drivers/infiniband/core/sysfs.c), so one without carries nothing and the host is
/// unhealthy rather than healthy on its other devices. Where `[health] ports` names
/// the ports that count, a port named and absent says it already.
fn portless(h: &Host) -> Vec<Finding> {
    if !h.cfg.ports.is_empty() {
        return Vec::new();
    }
    h.inv
        .devices
        .iter()
        .filter(|d| d.ports.is_empty())
        .map(|d| {
            let what = match h.unlisted.get(&d.name) {
                Some(e) => format!("no port readable ({e})"),
                None => "no port in ports/ (the kernel lists every registered device's)".into(),
            };
            Finding::at("ports", Status::Unhealthy, &d.name, None, None, what)
        })
        .collect()
}

/// One checked port's finding: ACTIVE and LinkUp at the expected rate, or why not.
fn port(c: &Checked, h: &Host, best: &BTreeMap<(&str, &str), u64>) -> Finding {
    let state = c.port.state.as_deref().unwrap_or("unreadable");
    let phys = c.port.phys_state.as_deref().unwrap_or("unreadable");
    let why_up = match (&c.port.netdev, c.ethernet()) {
        (Some(nd), true) => format!(", {nd} is up"),
        _ => String::new(),
    };
    if c.ethernet() && c.port.netdev.is_none() {
        // The GIDs a RoCE port is addressed by come from its netdev: without one
        // nothing reaches it, ACTIVE or not.
        return c.finding(
            "ports",
            Status::Unhealthy,
            format!(
                "port {} ({}), no netdev: RoCE needs it (its Ethernet side unbound or failed)",
                short(state),
                short(phys)
            ),
        );
    }
    // The verdict doctor's port check gives too.
    let v = judge_port_state(c.port);
    match v.weight() {
        Weight::CannotTell => return c.finding("ports", Status::Unknown, v.text()),
        Weight::Fine => {}
        _ => {
            let what = format!("{}{why_up}", v.text());
            return c.finding("ports", Status::Unhealthy, what);
        }
    }
    let rate = c.port.rate_bps.map(|r| r as f64 / 1e9);
    let model = model_of(c);
    let (want, whence) = match h.cfg.min_rate_gbps {
        Some(m) => (Some(m), "min_rate_gbps"),
        None => (best.get(&model).map(|&b| b as f64 / 1e9), "its siblings"),
    };
    match (rate, want) {
        (Some(r), Some(w)) if r + 1e-9 < w => c.finding(
            "ports",
            Status::Unhealthy,
            format!(
                "ACTIVE at {} Gb/s, {} expected ({whence})",
                gbps(r),
                gbps(w)
            ),
        ),
        (None, Some(_)) => c.finding(
            "ports",
            Status::Unknown,
            format!(
                "ACTIVE, rate unreadable ({})",
                c.port.rate.as_deref().unwrap_or("no rate file")
            ),
        ),
        (r, _) => c.finding(
            "ports",
            Status::Ok,
            format!(
                "ACTIVE, LinkUp{}",
                r.map(|r| format!(", {} Gb/s", gbps(r))).unwrap_or_default()
            ),
        ),
    }
}

/// Ports alike: the same HCA model and link layer (a VPI card's InfiniBand port is not
/// held to its Ethernet port's rate).
fn model_of<'a>(c: &Checked<'a>) -> (&'a str, &'a str) {
    (
        c.dev.hca_type.as_deref().unwrap_or(""),
        c.port.link_layer.as_deref().unwrap_or(""),
    )
}

/// `4: ACTIVE` → `ACTIVE`.
fn short(s: &str) -> &str {
    s.split_once(": ").map_or(s, |(_, n)| n)
}

fn gbps(r: f64) -> String {
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// The PCIe link of each checked port's device: unhealthy when it trained below what
/// both the card and its slot allow, or is down; a card at the most its slot allows is
/// how the host was built (a warning where that keeps its port from its rate). The
/// verdict is `rocewatch_sysfs::verdict`'s, the one `doctor` gives.
pub fn pcie(h: &Host, checked: &[Checked]) -> Vec<Finding> {
    let sys = SysRoot::new(&h.root);
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for c in checked {
        if !seen.insert(&c.dev.name) {
            continue;
        }
        let dev = &c.dev.name;
        let Some(f) = sys.rdma_pci_function(dev) else {
            out.push(Finding::at(
                "pcie",
                Status::Skipped,
                dev,
                None,
                None,
                "no PCI function (a software device)",
            ));
            continue;
        };
        let what = format!("{dev}'s PCIe link in {}", f.dir.display());
        h.board.reading(Part::Check(CheckName::Pcie), "pcie", what);
        let v = sys.pcie_link_verdict(&f, port_gbps(c.dev));
        let (status, what) = match v.weight() {
            Weight::Fine => (Status::Ok, v.link_text()),
            // The bandwidth is why it is worth a look.
            Weight::Note => (Status::Warning, v.evidence()),
            Weight::Fault => (Status::Unhealthy, v.link_text()),
            Weight::CannotTell => (Status::Unknown, v.link_text()),
            Weight::NotApplicable => (Status::Skipped, v.link_text()),
        };
        out.push(Finding::at(
            "pcie",
            status,
            dev,
            None,
            None,
            format!("PCIe {what}"),
        ));
        // The switch links between it and its root port: the same verdict.
        for v in sys.upstream_link_verdicts(&f, port_gbps(c.dev)) {
            let what = format!("PCIe above it: {}", v.link_text());
            out.push(Finding::at(
                "pcie",
                status_of(v.weight()),
                dev,
                None,
                None,
                what,
            ));
        }
    }
    out
}

/// What a verdict's weight is to `health`: a note warns, a fault is unhealthy.
fn status_of(w: Weight) -> Status {
    match w {
        Weight::Fine => Status::Ok,
        Weight::Note => Status::Warning,
        Weight::Fault => Status::Unhealthy,
        Weight::CannotTell => Status::Unknown,
        Weight::NotApplicable => Status::Skipped,
    }
}

/// Each checked RoCE port's RoCE v2 GIDs: one for each address of its netdev (the live
/// addresses), else at least one holding an address (a tree, or addresses on a VLAN or
/// master above the netdev). A port with neither is a fault unless its netdev is
/// enslaved (to a master that, or a device stacked above which, holds the addresses, or
/// one whose addresses cannot be found: never drained on a guess) or its function is an
/// SR-IOV PF with VFs (a warning). The verdict is `rocewatch_sysfs::verdict::gid`'s, the one `doctor` gives.
pub fn gid(h: &Host, checked: &[Checked]) -> Vec<Finding> {
    let sys = SysRoot::new(&h.root);
    checked
        .iter()
        .filter(|c| c.ethernet())
        .map(|c| {
            let Some(nd) = c.port.netdev.as_deref() else {
                return c.finding(
                    "gid",
                    Status::Skipped,
                    "no netdev (ports says so): its GIDs come from one".into(),
                );
            };
            let addresses = h
                .addresses
                .as_ref()
                .map(|a| a.get(nd).map_or(&[][..], Vec::as_slice));
            let what = format!("{nd}'s master and {}'s sriov_numvfs", c.dev.name);
            h.board.reading(Part::Check(CheckName::Gid), "gid", what);
            let why = sys.no_address(&c.dev.name, nd, h.addresses.as_ref());
            let v = judge_gids(nd, c.port, addresses, why);
            c.finding("gid", status_of(v.weight()), v.text())
        })
        .collect()
}

/// The checked RoCE netdevs' RoCE MTU (what the netdev MTU leaves room for): at least the
/// one `min_mtu` gives, and the other RoCE netdevs'; IP MTUs that differ with the same
/// RoCE MTU warn. The verdict is `rocewatch_sysfs::verdict::mtu`'s, the one `doctor`
/// gives.
pub fn mtu(h: &Host, checked: &[Checked]) -> Vec<Finding> {
    let roce: Vec<(&Checked, &str)> = checked
        .iter()
        .filter(|c| c.ethernet())
        .filter_map(|c| Some((c, c.port.netdev.as_deref()?)))
        .collect();
    let netdevs: Vec<(&str, Option<u32>)> = roce
        .iter()
        .map(|(c, nd)| (*nd, c.port.netdev_mtu))
        .collect();
    judge_mtus(&netdevs, h.cfg.min_mtu)
        .into_iter()
        .zip(&roce)
        .map(|(v, (c, _))| c.finding("mtu", status_of(v.weight()), v.text()))
        .collect()
}

/// The devices' driver module version and firmware, where `[health]` names them.
pub fn builds(h: &Host, checked: &[Checked]) -> Vec<Finding> {
    if h.cfg.driver_version.is_none() && h.cfg.firmware.is_none() {
        return vec![Finding::host(
            "builds",
            Status::Skipped,
            "no driver_version or firmware in [health]",
        )];
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for c in checked {
        let d = c.dev;
        if !seen.insert(&d.name) {
            continue;
        }
        let mut wrong = Vec::new();
        if let Some(want) = &h.cfg.driver_version {
            let m = d.driver_module.as_ref();
            let has = m.and_then(|m| m.version.as_deref());
            let src = m.and_then(|m| m.srcversion.as_deref());
            if has != Some(want.as_str()) && src != Some(want.as_str()) {
                let name = m.map_or("driver", |m| m.name.as_str());
                wrong.push(format!(
                    "{name} {} ({want} expected)",
                    has.or(src).unwrap_or("without a version")
                ));
            }
        }
        if let Some(want) = &h.cfg.firmware {
            let has = d.fw_ver.as_deref();
            if has != Some(want.as_str()) {
                wrong.push(format!(
                    "firmware {} ({want} expected)",
                    has.unwrap_or("unreadable")
                ));
            }
        }
        out.push(if wrong.is_empty() {
            Finding::at("builds", Status::Ok, &d.name, None, None, "as expected")
        } else {
            Finding::at(
                "builds",
                Status::Unhealthy,
                &d.name,
                None,
                None,
                wrong.join(", "),
            )
        });
    }
    out
}
