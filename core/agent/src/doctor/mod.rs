//! `rocewatch doctor`: the RoCE troubleshooting guide as checks. Each check is pass,
//! warn, fail, skip (it cannot be decided here, and why) or info, with the evidence it
//! read and, when it is not a pass, the exact command or change that fixes it.
//!
//! Order follows the guide: devices, ports, netdev and its IP, the RoCE v2 GID for that
//! IP, RoCE mode, PFC/trust/ECN on the expected priority, MTU, firewall rules for UDP
//! 4791, interrupts, driver and firmware, live counters over a short window, a verbs probe
//! to the peer, and how to capture the traffic.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rocewatch_plugin_api::{Inventory, Port, QosState, Setting};
use serde::Serialize;

use crate::pipeline::Agent;

/// The RoCE v2 UDP port.
pub const ROCE_PORT: u16 = 4791;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    Skip,
    Info,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
            Status::Info => "INFO",
        }
    }
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `ports`, `gid`, `firewall`...
    pub check: String,
    /// What it is about (`mlx5_0/1`, `eth0`), empty for the host.
    pub subject: String,
    pub status: Status,
    /// What was read.
    pub evidence: String,
    /// What to run or change (absent on a pass).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn check(
    name: &str,
    subject: &str,
    status: Status,
    evidence: impl Into<String>,
    fix: Option<String>,
) -> Check {
    Check {
        check: name.into(),
        subject: subject.into(),
        status,
        evidence: evidence.into(),
        fix,
    }
}

/// What `doctor` is told.
#[derive(Debug, Clone)]
pub struct Options {
    /// A peer to probe and to check the path MTU to.
    pub peer: Option<String>,
    /// The priority PFC and ECN are expected on.
    pub priority: u8,
    /// How long the counters are watched.
    pub window: Duration,
}

/// The checks as text: one line each, the fix indented below.
pub fn text(checks: &[Check]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for c in checks {
        let subject = if c.subject.is_empty() {
            String::new()
        } else {
            format!(" {}", c.subject)
        };
        let _ = writeln!(
            s,
            "{}  {}{}: {}",
            c.status.word(),
            c.check,
            subject,
            c.evidence
        );
        if let Some(f) = &c.fix {
            for l in f.lines() {
                let _ = writeln!(s, "      fix: {l}");
            }
        }
    }
    let n = |st: Status| checks.iter().filter(|c| c.status == st).count();
    let _ = writeln!(
        s,
        "{} passed, {} warnings, {} failed, {} skipped",
        n(Status::Pass),
        n(Status::Warn),
        n(Status::Fail),
        n(Status::Skip)
    );
    s
}

/// The IPv4 address a RoCE v2 GID carries (`::ffff:a.b.c.d`), or the IPv6 address it is.
pub fn gid_ip(gid: &str) -> Option<IpAddr> {
    let v6: std::net::Ipv6Addr = gid.parse().ok()?;
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

/// The addresses of every interface (getifaddrs), link-local IPv6 left out.
pub fn interface_addresses() -> std::io::Result<BTreeMap<String, Vec<IpAddr>>> {
    let mut out: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills head with a list freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string of the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr points at a sockaddr whose family says its real type.
        let ip = unsafe {
            match (*ifa.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    Some(IpAddr::from(a.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if let Some(ip) = ip {
            let link_local = matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80);
            if !link_local {
                out.entry(name).or_default().push(ip);
            }
        }
    }
    // SAFETY: head came from getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Firewall rule sets

/// A rule (or policy) that drops RoCE v2 traffic, as found in a rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocking {
    /// Where: `nft inet filter input handle 7`, `iptables INPUT`.
    pub place: String,
    /// The rule as read.
    pub rule: String,
    /// The command that removes or bypasses it.
    pub fix: String,
}

fn port_matches(right: &serde_json::Value, port: u16) -> bool {
    match right {
        serde_json::Value::Number(n) => n.as_u64() == Some(port as u64),
        serde_json::Value::Object(o) => {
            if let Some(set) = o.get("set").and_then(|s| s.as_array()) {
                set.iter().any(|e| port_matches(e, port))
            } else if let Some(r) = o.get("range").and_then(|r| r.as_array()) {
                let lo = r.first().and_then(|v| v.as_u64()).unwrap_or(u64::MAX);
                let hi = r.get(1).and_then(|v| v.as_u64()).unwrap_or(0);
                (lo..=hi).contains(&(port as u64))
            } else {
                false
            }
        }
        serde_json::Value::Array(a) => a.iter().any(|e| port_matches(e, port)),
        _ => false,
    }
}

/// Rules of `nft -j list ruleset` that drop or reject UDP to `port` on input, and input
/// chains whose policy drops with no rule accepting it first.
pub fn nft_blocking(json: &str, port: u16) -> Result<Vec<Blocking>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("nft -j list ruleset: {e}"))?;
    let items = v["nftables"]
        .as_array()
        .ok_or("nft -j list ruleset: no \"nftables\" array")?;
    // (family, table, chain) of input hooks, with their policy.
    let mut inputs: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for it in items {
        if let Some(c) = it.get("chain") {
            if c["hook"] == "input" {
                let key = (
                    c["family"].as_str().unwrap_or("").to_string(),
                    c["table"].as_str().unwrap_or("").to_string(),
                    c["name"].as_str().unwrap_or("").to_string(),
                );
                inputs.insert(key, c["policy"].as_str().unwrap_or("accept").to_string());
            }
        }
    }
    let mut out = Vec::new();
    let mut accepted: std::collections::BTreeSet<(String, String, String)> = Default::default();
    for it in items {
        let Some(r) = it.get("rule") else { continue };
        let key = (
            r["family"].as_str().unwrap_or("").to_string(),
            r["table"].as_str().unwrap_or("").to_string(),
            r["chain"].as_str().unwrap_or("").to_string(),
        );
        if !inputs.contains_key(&key) {
            continue;
        }
        let exprs = r["expr"].as_array().cloned().unwrap_or_default();
        let mut udp_port = false;
        let mut other_match = false;
        let mut verdict = None;
        for e in &exprs {
            if let Some(m) = e.get("match") {
                let left = &m["left"]["payload"];
                if left["protocol"] == "udp" && left["field"] == "dport" {
                    let hit = port_matches(&m["right"], port);
                    let negated = m["op"] == "!=";
                    if hit != negated {
                        udp_port = true;
                    } else {
                        other_match = true;
                    }
                } else {
                    other_match = true;
                }
            }
            for v in ["drop", "reject", "accept"] {
                if e.get(v).is_some() {
                    verdict = Some(v);
                }
            }
        }
        let handle = r["handle"].as_u64().unwrap_or(0);
        let (fam, table, chain) = &key;
        match verdict {
            Some("drop") | Some("reject") if udp_port => out.push(Blocking {
                place: format!("nft {fam} {table} {chain} handle {handle}"),
                rule: format!(
                    "udp dport {} {}",
                    r["expr"]
                        .as_array()
                        .and_then(|a| a.iter().find_map(|e| e.get("match")))
                        .map(|m| m["right"].to_string())
                        .unwrap_or_default(),
                    verdict.unwrap_or_default()
                ),
                fix: format!("nft delete rule {fam} {table} {chain} handle {handle}"),
            }),
            Some("accept") if udp_port || !other_match => {
                accepted.insert(key.clone());
            }
            _ => {}
        }
    }
    for ((fam, table, chain), policy) in &inputs {
        let key = (fam.clone(), table.clone(), chain.clone());
        if policy == "drop" && !accepted.contains(&key) {
            out.push(Blocking {
                place: format!("nft {fam} {table} {chain}"),
                rule: "policy drop, and no rule accepts udp dport 4791".into(),
                fix: format!("nft insert rule {fam} {table} {chain} udp dport {port} accept"),
            });
        }
    }
    Ok(out)
}

/// Rules of `iptables-save` (or `ip6tables-save`) that drop or reject UDP to `port` on
/// INPUT, and an INPUT policy of DROP with no rule accepting it.
pub fn iptables_blocking(save: &str, port: u16, tool: &str) -> Vec<Blocking> {
    let mut out = Vec::new();
    let mut table = String::new();
    let mut policy_drop = false;
    let mut accepted = false;
    for line in save.lines() {
        let line = line.trim();
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
            continue;
        }
        if table != "filter" {
            continue;
        }
        if let Some(rest) = line.strip_prefix(":INPUT ") {
            policy_drop = rest.starts_with("DROP");
            continue;
        }
        let Some(rule) = line.strip_prefix("-A INPUT ") else {
            continue;
        };
        let words: Vec<&str> = rule.split_whitespace().collect();
        let arg = |flag: &str| {
            words
                .iter()
                .position(|w| *w == flag)
                .and_then(|i| words.get(i + 1))
                .copied()
        };
        let udp = arg("-p") == Some("udp");
        let ports = arg("--dport").or(arg("--dports"));
        let hits = ports.is_some_and(|p| {
            p.split(',').any(|p| match p.split_once(':') {
                Some((lo, hi)) => {
                    let (lo, hi) = (lo.parse().unwrap_or(0u16), hi.parse().unwrap_or(u16::MAX));
                    (lo..=hi).contains(&port)
                }
                None => p.parse() == Ok(port),
            })
        });
        let target = arg("-j");
        match target {
            Some("DROP") | Some("REJECT") if udp && hits => out.push(Blocking {
                place: format!("{tool} filter INPUT"),
                rule: format!("-A INPUT {rule}"),
                fix: format!("{tool} -D INPUT {rule}"),
            }),
            Some("ACCEPT") if (udp && hits) || words.len() == 2 => accepted = true,
            _ => {}
        }
    }
    if policy_drop && !accepted {
        out.push(Blocking {
            place: format!("{tool} filter INPUT"),
            rule: "policy DROP, and no rule accepts udp dport 4791".into(),
            fix: format!("{tool} -I INPUT -p udp --dport {port} -j ACCEPT"),
        });
    }
    out
}

fn run_tool(cmd: &str, args: &[&str]) -> Option<Result<String, String>> {
    match std::process::Command::new(cmd).args(args).output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(format!("{cmd}: {e}"))),
        Ok(o) if o.status.success() => Some(Ok(String::from_utf8_lossy(&o.stdout).into_owned())),
        Ok(o) => Some(Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))),
    }
}

fn firewall_checks() -> Vec<Check> {
    let mut out = Vec::new();
    let mut read = Vec::new();
    let mut blocking = Vec::new();
    if let Some(r) = run_tool("nft", &["-j", "list", "ruleset"]) {
        match r.and_then(|j| nft_blocking(&j, ROCE_PORT)) {
            Ok(b) => {
                read.push("nft ruleset");
                blocking.extend(b);
            }
            Err(e) => out.push(check("firewall", "nft", Status::Warn, e, None)),
        }
    }
    for tool in ["iptables-save", "ip6tables-save"] {
        if let Some(r) = run_tool(tool, &[]) {
            match r {
                Ok(save) => {
                    read.push(tool);
                    let name = tool.trim_end_matches("-save");
                    blocking.extend(iptables_blocking(&save, ROCE_PORT, name));
                }
                Err(e) => out.push(check("firewall", tool, Status::Warn, e, None)),
            }
        }
    }
    if read.is_empty() && out.is_empty() {
        out.push(check(
            "firewall",
            "",
            Status::Skip,
            "neither nft nor iptables-save is installed: no rule set could be read",
            None,
        ));
        return out;
    }
    if blocking.is_empty() {
        out.push(check(
            "firewall",
            "",
            Status::Pass,
            format!(
                "no rule drops UDP {ROCE_PORT} on input ({} read)",
                read.join(", ")
            ),
            None,
        ));
    }
    for b in blocking {
        out.push(check(
            "firewall",
            &b.place,
            Status::Fail,
            format!("drops RoCE v2 (UDP {ROCE_PORT}): {}", b.rule),
            Some(b.fix),
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------
// Interrupts

fn irq_checks(netdevs: &[String]) -> Vec<Check> {
    let irqbalance = std::fs::read_dir("/proc")
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
    let table = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    let mut out = Vec::new();
    for nd in netdevs {
        // The netdev's PCI function (mlx5 names its queues' interrupts after it).
        let pci = std::fs::read_link(format!("/sys/class/net/{nd}/device"))
            .ok()
            .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
        let irqs = nic_irqs(&table, nd, pci.as_deref());
        if irqs.is_empty() {
            out.push(check(
                "interrupts",
                nd,
                Status::Skip,
                format!("no interrupt named after {nd} in /proc/interrupts, and irqbalance is not running"),
                None,
            ));
            continue;
        }
        let cpus: std::collections::BTreeSet<String> = irqs
            .iter()
            .filter_map(|i| {
                std::fs::read_to_string(format!("/proc/irq/{i}/effective_affinity_list"))
                    .or_else(|_| {
                        std::fs::read_to_string(format!("/proc/irq/{i}/smp_affinity_list"))
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

/// The interrupts of `/proc/interrupts` that belong to a netdev: named after it
/// (`ens1f0np0-TxRx-3`, `eth0-rx-0`) or after its PCI function
/// (`mlx5_comp3@pci:0000:3b:00.0`).
pub fn nic_irqs(table: &str, netdev: &str, pci: Option<&str>) -> Vec<String> {
    table
        .lines()
        .filter(|l| {
            l.split_whitespace().last().is_some_and(|n| {
                n == netdev
                    || n.starts_with(&format!("{netdev}-"))
                    || pci.is_some_and(|p| n.ends_with(&format!("@pci:{p}")) || n.contains(p))
            })
        })
        .filter_map(|l| {
            let irq = l.split(':').next()?.trim();
            irq.parse::<u32>().ok().map(|_| irq.to_string())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The checks

fn setting<'a>(qos: &'a [QosState], dev: &str, port: u32, k: &str) -> Option<&'a Setting> {
    qos.iter()
        .find(|s| s.device == dev && s.port == port)
        .and_then(|s| s.settings.get(k))
}

fn has_priority(list: &str, p: u8) -> bool {
    list.split(',').any(|x| x.trim() == p.to_string())
}

/// The QoS checks of one port: RoCE mode, PFC and trust, ECN.
fn qos_checks(qos: &[QosState], dev: &str, port: u32, nd: &str, prio: u8) -> Vec<Check> {
    let subject = format!("{dev}/{port}");
    let mut out = Vec::new();
    let unreadable = |name: &str, what: &str, s: Option<&Setting>| match s {
        Some(Setting::Unsupported) => Some(check(
            name,
            &subject,
            Status::Skip,
            format!("unsupported: the device has no {what}"),
            None,
        )),
        Some(Setting::Unknown(why)) => Some(check(
            name,
            &subject,
            Status::Warn,
            format!("{what} unknown: {why}"),
            None,
        )),
        None => Some(check(
            name,
            &subject,
            Status::Skip,
            format!("no configuration plugin reports the {what}"),
            None,
        )),
        Some(Setting::Value(_)) => None,
    };
    let mode = setting(qos, dev, port, "roce_mode");
    out.push(match mode {
        Some(Setting::Value(v)) if v == "RoCE v2" => {
            check("roce-mode", &subject, Status::Pass, "RoCE v2", None)
        }
        Some(Setting::Value(v)) => check(
            "roce-mode",
            &subject,
            Status::Fail,
            format!("{v} (RDMA CM connections use RoCE v1: not routable, no ECN)"),
            Some(format!(
                "echo 'RoCE v2' > /sys/kernel/config/rdma_cm/{dev}/ports/{port}/default_roce_mode (or [[qos.desired]] roce_mode = \"RoCE v2\" and rocewatch qos apply --yes)"
            )),
        ),
        Some(Setting::Unknown(why)) => check(
            "roce-mode",
            &subject,
            Status::Warn,
            format!("unknown: {why}"),
            Some(format!(
                "mount -t configfs none /sys/kernel/config; mkdir /sys/kernel/config/rdma_cm/{dev}; then run doctor again"
            )),
        ),
        other => unreadable("roce-mode", "RoCE mode", other).expect("not a value"),
    });
    let pfc = setting(qos, dev, port, "pfc_enabled");
    let trust = setting(qos, dev, port, "trust");
    out.push(match (pfc, trust) {
        (Some(Setting::Value(p)), Some(Setting::Value(t))) => {
            let on = has_priority(p, prio);
            let dscp = t == "dscp";
            if on && dscp {
                check("pfc", &subject, Status::Pass, format!("PFC on priorities {p} (includes {prio}), trust {t}"), None)
            } else {
                let mut fix = Vec::new();
                if !on {
                    fix.push(format!("dcb pfc set dev {nd} prio-pfc {prio}:on   (or mlnx_qos -i {nd} --pfc with priority {prio} on)"));
                }
                if !dscp {
                    fix.push(format!("mlnx_qos -i {nd} --trust dscp   (or [[qos.desired]] trust = \"dscp\")"));
                }
                check(
                    "pfc",
                    &subject,
                    Status::Fail,
                    format!("PFC on priorities {p} (expected {prio}), trust {t} (expected dscp)"),
                    Some(fix.join("\n")),
                )
            }
        }
        (p, t) => unreadable("pfc", "PFC", p)
            .or_else(|| unreadable("pfc", "trust mode", t))
            .expect("one is not a value"),
    });
    let np = setting(qos, dev, port, "ecn_np_enabled");
    let rp = setting(qos, dev, port, "ecn_rp_enabled");
    out.push(match (np, rp) {
        (Some(Setting::Value(n)), Some(Setting::Value(r))) => {
            if has_priority(n, prio) && has_priority(r, prio) {
                check("ecn", &subject, Status::Pass, format!("ECN on priority {prio} (notification point: {n}; reaction point: {r})"), None)
            } else {
                check(
                    "ecn",
                    &subject,
                    Status::Fail,
                    format!("ECN notification point on {n}, reaction point on {r}: not both on priority {prio}"),
                    Some(format!(
                        "echo 1 > /sys/class/net/{nd}/ecn/roce_np/enable/{prio}; echo 1 > /sys/class/net/{nd}/ecn/roce_rp/enable/{prio}"
                    )),
                )
            }
        }
        (n, r) => unreadable("ecn", "ECN enables", n)
            .or_else(|| unreadable("ecn", "ECN enables", r))
            .expect("one is not a value"),
    });
    out
}

/// Path MTU to the peer: the largest ICMP echo that passes without fragmentation
/// (`ping -M do`), tried at the netdev's MTU.
fn peer_mtu_check(peer: &str, mtu: u32, nd: &str) -> Check {
    let size = mtu.saturating_sub(28).to_string();
    match run_tool("ping", &["-M", "do", "-c", "1", "-W", "2", "-s", &size, peer]) {
        None => check("mtu", peer, Status::Skip, "ping is not installed: the path MTU to the peer was not measured", None),
        Some(Ok(_)) => check(
            "mtu",
            peer,
            Status::Pass,
            format!("{mtu}-byte packets reach {peer} unfragmented (ping -M do -s {size})"),
            None,
        ),
        Some(Err(e)) => check(
            "mtu",
            peer,
            Status::Fail,
            format!("{mtu}-byte packets do not reach {peer} unfragmented: {e}"),
            Some(format!(
                "set the same MTU on {nd}, the switch ports and the peer (ip link set {nd} mtu {mtu} on the peer), or lower it here"
            )),
        ),
    }
}

/// Counters that must not move on a healthy lossless fabric.
const TROUBLE: &[&str] = &[
    "rdma.pfc.pause_frames",
    "rdma.pfc.storm_events",
    "rdma.link.discards",
    "rdma.priority.discards",
    "rdma.netdev.out_of_buffer",
    "rdma.port.out_of_buffer",
    "rdma.port.out_of_sequence",
    "rdma.port.local_ack_timeouts",
    "rdma.port.retransmissions.packets",
    "rdma.port.retransmissions.adaptive",
    "rdma.port.retransmissions.timeouts",
    "rdma.port.duplicate_requests",
];

/// Which trouble counters grew between two collections: (series, increase).
pub fn counter_increases(
    before: &[rocewatch_plugin_api::Sample],
    after: &[rocewatch_plugin_api::Sample],
) -> Vec<(String, f64)> {
    let key = |s: &rocewatch_plugin_api::Sample| {
        let attrs = s
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        format!("{}{{{attrs}}}", s.name)
    };
    let old: BTreeMap<String, f64> = before
        .iter()
        .filter(|s| TROUBLE.contains(&s.name.as_ref()))
        .map(|s| (key(s), s.value.as_f64()))
        .collect();
    let mut out = Vec::new();
    for s in after.iter().filter(|s| TROUBLE.contains(&s.name.as_ref())) {
        let k = key(s);
        if let Some(o) = old.get(&k) {
            let d = s.value.as_f64() - o;
            if d > 0.0 {
                out.push((k, d));
            }
        }
    }
    out
}

/// The `ethtool -k IF` state of rx-vlan-offload (`on`/`off`), when ethtool tells.
fn vlan_offload(nd: &str) -> Option<String> {
    let text = run_tool("ethtool", &["-k", nd])?.ok()?;
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("rx-vlan-offload:")
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
    })
}

/// Run every check.
pub async fn run(agent: &Arc<Agent>, opts: &Options) -> Vec<Check> {
    let root = agent.cfg.agent.sysfs_root.clone();
    let live = rocewatch_sysfs::read::is_sysfs(Path::new(&root));
    let mut out = Vec::new();
    let inv: Inventory = agent.discover().await.unwrap_or_default();
    if inv.devices.is_empty() {
        out.push(check(
            "devices",
            "",
            Status::Fail,
            format!("no RDMA devices under {}/class/infiniband", root.display()),
            Some("load the NIC's RDMA driver (modprobe mlx5_ib, irdma, bnxt_re); for soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IF".into()),
        ));
        return out;
    }
    out.push(check(
        "devices",
        "",
        Status::Pass,
        inv.devices
            .iter()
            .map(|d| {
                format!(
                    "{} ({}, firmware {})",
                    d.name,
                    d.driver.as_deref().unwrap_or("driver unknown"),
                    d.fw_ver.as_deref().unwrap_or("unknown")
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        None,
    ));
    let qos = agent.observe_qos().await.unwrap_or_default();
    let addrs = if live {
        interface_addresses().ok()
    } else {
        None
    };
    let mut netdevs: Vec<String> = Vec::new();
    let mut capture_if: Option<String> = None;
    let mut mtus: BTreeMap<String, u32> = BTreeMap::new();
    for d in &inv.devices {
        for p in &d.ports {
            let subject = format!("{}/{}", d.name, p.port);
            out.push(port_check(&subject, p));
            let ethernet = p.link_layer.as_deref() == Some("Ethernet");
            if !ethernet {
                out.push(check(
                    "netdev",
                    &subject,
                    Status::Info,
                    format!(
                        "link layer {}: not RoCE; the RoCE checks do not apply",
                        p.link_layer.as_deref().unwrap_or("unknown")
                    ),
                    None,
                ));
                continue;
            }
            let Some(nd) = p.netdev.clone() else {
                out.push(check(
                    "netdev",
                    &subject,
                    Status::Fail,
                    "no netdev for this RoCE port (ibdev2netdev shows none)",
                    Some(format!("check that the Ethernet driver of {} is loaded and its netdev exists (ip link)", d.name)),
                ));
                continue;
            };
            netdevs.push(nd.clone());
            let up = p.netdev_operstate.as_deref() == Some("up");
            out.push(check(
                "netdev",
                &subject,
                if up { Status::Pass } else { Status::Fail },
                format!(
                    "{nd} (operstate {}, MTU {})",
                    p.netdev_operstate.as_deref().unwrap_or("unknown"),
                    p.netdev_mtu.map_or("unknown".into(), |m| m.to_string())
                ),
                (!up).then(|| format!("ip link set {nd} up")),
            ));
            if let Some(m) = p.netdev_mtu {
                mtus.insert(nd.clone(), m);
            }
            // The port's IPs: from the live interface, or (fixture trees) from its GIDs.
            let v2: Vec<(IpAddr, u32)> = p
                .gids
                .iter()
                .filter(|g| g.gid_type.as_deref() == Some("RoCE v2"))
                .filter_map(|g| gid_ip(&g.gid).map(|ip| (ip, g.index)))
                .filter(|(ip, _)| !matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80))
                .collect();
            let ips: Vec<IpAddr> = match &addrs {
                Some(a) => a.get(&nd).cloned().unwrap_or_default(),
                None => v2.iter().map(|(ip, _)| *ip).collect(),
            };
            if ips.is_empty() {
                out.push(check(
                    "ip",
                    &subject,
                    Status::Fail,
                    format!("no IP address on {nd}"),
                    Some(format!("ip addr add ADDRESS/PREFIX dev {nd}")),
                ));
                continue;
            }
            out.push(check(
                "ip",
                &subject,
                if live { Status::Pass } else { Status::Info },
                format!(
                    "{nd}: {}{}",
                    ips.iter()
                        .map(IpAddr::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    if live {
                        ""
                    } else {
                        " (from the GID table: not the live system)"
                    }
                ),
                None,
            ));
            for ip in &ips {
                match v2.iter().find(|(g, _)| g == ip) {
                    Some((_, index)) => out.push(check(
                        "gid",
                        &subject,
                        Status::Pass,
                        format!("RoCE v2 GID index {index} for {ip}"),
                        None,
                    )),
                    None => out.push(check(
                        "gid",
                        &subject,
                        Status::Fail,
                        format!("no RoCE v2 GID for {ip} on {}", d.name),
                        Some(format!(
                            "the address must be on {nd} (or a VLAN of it) for the kernel to add its GID; see show_gids / rdma link; re-add it: ip addr del {ip} dev {nd}; ip addr add {ip}/PREFIX dev {nd}"
                        )),
                    )),
                }
            }
            if capture_if.is_none() && up {
                capture_if = Some(nd.clone());
            }
            out.extend(qos_checks(&qos, &d.name, p.port, &nd, opts.priority));
        }
    }
    // MTU: the RDMA MTU the netdev allows, and the same on every RoCE netdev here.
    let distinct: std::collections::BTreeSet<u32> = mtus.values().copied().collect();
    let listing = mtus
        .iter()
        .map(|(n, m)| {
            format!(
                "{n} {m} (RoCE MTU {})",
                rocewatch_qos_linux::rdma_mtu_for(*m).map_or("none".into(), |r| r.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    if distinct.len() > 1 {
        out.push(check(
            "mtu",
            "",
            Status::Warn,
            format!("RoCE netdevs differ: {listing}"),
            Some(format!(
                "use one MTU on every RoCE netdev and end to end (ip link set IF mtu {})",
                distinct.iter().max().unwrap()
            )),
        ));
    } else if !mtus.is_empty() {
        out.push(check("mtu", "", Status::Pass, listing, None));
    }
    if let (Some(peer), Some(nd)) = (&opts.peer, &capture_if) {
        if let Some(m) = mtus.get(nd) {
            out.push(peer_mtu_check(peer, *m, nd));
        }
    }
    // The host: firewall, interrupts (live only).
    if live {
        out.extend(firewall_checks());
        out.extend(irq_checks(&netdevs));
    } else {
        for c in ["firewall", "interrupts"] {
            out.push(check(
                c,
                "",
                Status::Skip,
                format!(
                    "{} is not the live /sys: this host's {c} say nothing about that tree",
                    root.display()
                ),
                None,
            ));
        }
    }
    // Driver and firmware: devices of one driver should run one firmware.
    let mut fw: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for d in &inv.devices {
        fw.entry(d.driver.clone().unwrap_or_else(|| "unknown".into()))
            .or_default()
            .insert(d.fw_ver.clone().unwrap_or_else(|| "unknown".into()));
    }
    for (driver, versions) in fw {
        let v: Vec<String> = versions.into_iter().collect();
        out.push(if v.len() == 1 && v[0] == "unknown" {
            check(
                "firmware",
                &driver,
                Status::Info,
                "the devices report no firmware version (soft-RoCE has none)",
                None,
            )
        } else if v.len() > 1 {
            check(
                "firmware",
                &driver,
                Status::Warn,
                format!("{driver} devices run different firmware: {}", v.join(", ")),
                Some("update every NIC to one firmware (mlxfwmanager / the vendor's tool)".into()),
            )
        } else {
            check(
                "firmware",
                &driver,
                Status::Pass,
                format!("firmware {} on every device", v[0]),
                None,
            )
        });
    }
    // Live counters over the window.
    let (first, _) = agent.collect_all().await;
    tokio::time::sleep(opts.window).await;
    let (second, _) = agent.collect_all().await;
    let grew = counter_increases(&first.samples, &second.samples);
    let secs = humantime::format_duration(opts.window);
    if grew.is_empty() {
        out.push(check(
            "counters",
            "",
            Status::Pass,
            format!(
                "no pauses, drops, out-of-buffer, out-of-sequence or retransmissions over {secs} ({} series watched)",
                second.samples.iter().filter(|s| TROUBLE.contains(&s.name.as_ref())).count()
            ),
            None,
        ));
    } else {
        for (series, d) in grew {
            out.push(check(
                "counters",
                "",
                Status::Warn,
                format!("{series} +{d} in {secs}"),
                Some("pauses and drops under load point at PFC/ECN thresholds or congestion: rocewatch rules shows what fires; compare with the switch's counters".into()),
            ));
        }
    }
    // The probe.
    match &opts.peer {
        None => out.push(check("probe", "", Status::Skip, "no --peer given", None)),
        Some(peer) => out.push(probe_check(agent, peer).await),
    }
    // Capturing.
    match &capture_if {
        Some(nd) => {
            let now = vlan_offload(nd);
            let restore = now.clone().unwrap_or_else(|| "on".into());
            out.push(check(
                "capture",
                nd,
                Status::Info,
                format!(
                    "capture RoCE v2 on {nd} (the RDMA port's netdev): tcpdump -i {nd} -nn udp port {ROCE_PORT}; NIC offloads can hide VLAN tags and RDMA traffic: ethtool -K {nd} rx-vlan-offload off before, and ethtool -K {nd} rx-vlan-offload {restore} after{}",
                    if now.is_some() { " (as it is now)" } else { " (its state now could not be read; check ethtool -k)" }
                ),
                None,
            ));
        }
        None => out.push(check(
            "capture",
            "",
            Status::Skip,
            "no RoCE port with a netdev that is up",
            None,
        )),
    }
    out
}

fn port_check(subject: &str, p: &Port) -> Check {
    let st = p.state.as_deref().unwrap_or("unknown");
    let ph = p.phys_state.as_deref().unwrap_or("unknown");
    if p.is_up() {
        check(
            "port",
            subject,
            Status::Pass,
            format!(
                "{st}, {ph}, {}",
                p.rate.as_deref().unwrap_or("rate unknown")
            ),
            None,
        )
    } else {
        check(
            "port",
            subject,
            Status::Fail,
            format!("state {st}, physical state {ph}"),
            Some(match &p.netdev {
                Some(nd) => format!("ip link set {nd} up; check the cable, the optics and the switch port (ethtool {nd})"),
                None => "check the cable, the optics and the switch port (ibstat)".into(),
            }),
        )
    }
}

async fn probe_check(agent: &Arc<Agent>, peer: &str) -> Check {
    let Some(entry) = agent.probe_plugin() else {
        return check(
            "probe",
            peer,
            Status::Skip,
            "the probe-verbs plugin is not loaded (rocewatch plugins says why)",
            None,
        );
    };
    let target = rocewatch_plugin_api::ProbeTarget {
        peer: peer.into(),
        size: 64,
        timeout_ms: 2000,
    };
    match crate::probes::probe_once(&entry, target, &agent.metrics).await {
        Ok(r) => match r.outcome {
            rocewatch_plugin_api::ProbeOutcome::Ok { rtt_seconds } => check(
                "probe",
                peer,
                Status::Pass,
                format!("RC send/receive answered in {:.1} us", rtt_seconds * 1e6),
                None,
            ),
            rocewatch_plugin_api::ProbeOutcome::Timeout => check(
                "probe",
                peer,
                Status::Fail,
                "connected, but no answer within 2 s",
                Some("RoCE packets are lost on the path: check the firewall on both hosts (UDP 4791), PFC/ECN, and the switch".into()),
            ),
            rocewatch_plugin_api::ProbeOutcome::ConnectFailed { cause } => check(
                "probe",
                peer,
                Status::Fail,
                format!("no connection: {cause}"),
                Some(format!("the peer must run `rocewatch probe --serve` (or the agent with [probes]); check that {peer} is reachable over the RDMA netdev and UDP 4791 is not dropped")),
            ),
        },
        Err(e) => check("probe", peer, Status::Fail, e.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_addresses() {
        assert_eq!(
            gid_ip("0000:0000:0000:0000:0000:ffff:0a00:0001"),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            gid_ip("fe80:0000:0000:0000:ba59:9fff:fec1:2a40"),
            Some("fe80::ba59:9fff:fec1:2a40".parse().unwrap())
        );
        assert_eq!(gid_ip("nonsense"), None);
    }

    /// `nft -j list ruleset` of a host with a drop rule, one with a set including 4791,
    /// a drop policy with and without an accept, and an unrelated rule.
    #[test]
    fn nft_rules_that_drop_roce_are_found() {
        let ruleset = |rules: &str, policy: &str| {
            format!(
                r#"{{"nftables": [{{"metainfo": {{"json_schema_version": 1}}}},
                {{"table": {{"family": "inet", "name": "filter", "handle": 1}}}},
                {{"chain": {{"family": "inet", "table": "filter", "name": "input", "handle": 1, "type": "filter", "hook": "input", "prio": 0, "policy": "{policy}"}}}},
                {{"chain": {{"family": "inet", "table": "filter", "name": "output", "handle": 2, "type": "filter", "hook": "output", "prio": 0, "policy": "accept"}}}}
                {rules}]}}"#
            )
        };
        let rule = |chain: &str, handle: u32, right: &str, verdict: &str| {
            format!(
                r#",{{"rule": {{"family": "inet", "table": "filter", "chain": "{chain}", "handle": {handle}, "expr": [{{"match": {{"op": "==", "left": {{"payload": {{"protocol": "udp", "field": "dport"}}}}, "right": {right}}}}}, {{"{verdict}": null}}]}}}}"#
            )
        };
        let b = nft_blocking(&ruleset(&rule("input", 7, "4791", "drop"), "accept"), 4791).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].place, "nft inet filter input handle 7");
        assert_eq!(b[0].fix, "nft delete rule inet filter input handle 7");
        let set = r#"{"set": [53, {"range": [4000, 5000]}]}"#;
        assert_eq!(
            nft_blocking(&ruleset(&rule("input", 8, set, "reject"), "accept"), 4791)
                .unwrap()
                .len(),
            1
        );
        // Another port, or the output chain: not blocking.
        assert!(
            nft_blocking(&ruleset(&rule("input", 9, "53", "drop"), "accept"), 4791)
                .unwrap()
                .is_empty()
        );
        assert!(
            nft_blocking(&ruleset(&rule("output", 9, "4791", "drop"), "accept"), 4791)
                .unwrap()
                .is_empty()
        );
        // A drop policy without an accept for 4791 blocks; with one it does not.
        let b = nft_blocking(&ruleset("", "drop"), 4791).unwrap();
        assert_eq!(
            b[0].fix,
            "nft insert rule inet filter input udp dport 4791 accept"
        );
        assert!(
            nft_blocking(&ruleset(&rule("input", 3, "4791", "accept"), "drop"), 4791)
                .unwrap()
                .is_empty()
        );
        assert!(nft_blocking("{}", 4791).is_err());
    }

    #[test]
    fn iptables_rules_that_drop_roce_are_found() {
        let save = "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p udp --dport 4791 -j DROP\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -p udp -m udp --dport 4791 -j DROP\nCOMMIT\n";
        let b = iptables_blocking(save, 4791, "iptables");
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(
            b[0].fix,
            "iptables -D INPUT -p udp -m udp --dport 4791 -j DROP"
        );
        let range = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -m multiport --dports 4000:5000 -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n";
        assert_eq!(iptables_blocking(range, 4791, "iptables").len(), 1);
        let policy = "*filter\n:INPUT DROP [0:0]\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n";
        let b = iptables_blocking(policy, 4791, "iptables");
        assert_eq!(b[0].fix, "iptables -I INPUT -p udp --dport 4791 -j ACCEPT");
        let open = "*filter\n:INPUT DROP [0:0]\n-A INPUT -p udp --dport 4791 -j ACCEPT\nCOMMIT\n";
        assert!(iptables_blocking(open, 4791, "iptables").is_empty());
    }

    #[test]
    fn interrupts_are_matched_by_netdev_name_or_pci_function() {
        let table = "            CPU0       CPU1
  24:          0        120  PCI-MSIX-0000:3b:00.0   1-edge      mlx5_comp0@pci:0000:3b:00.0
  25:        300          0  PCI-MSIX-0000:3b:00.0   2-edge      mlx5_comp1@pci:0000:3b:00.0
  26:          5          0  PCI-MSIX-0000:3b:00.1   1-edge      mlx5_comp0@pci:0000:3b:00.1
  40:          1          1  PCI-MSIX-0000:5e:00.0   3-edge      ens5f0-TxRx-0
  41:          1          1  PCI-MSIX-0000:5e:00.0   4-edge      ens5f01-TxRx-0
 NMI:          0          0   Non-maskable interrupts
";
        assert_eq!(
            nic_irqs(table, "ens1f0np0", Some("0000:3b:00.0")),
            ["24", "25"]
        );
        assert_eq!(nic_irqs(table, "ens5f0", None), ["40"]);
        assert!(nic_irqs(table, "eth9", None).is_empty());
    }

    /// A name that is not in the catalog would never match: every trouble counter is one
    /// rocewatch emits.
    #[test]
    fn trouble_counters_are_catalogued() {
        for n in TROUBLE {
            assert!(
                rocewatch_metrics::all_entries()
                    .any(|e| e.name == *n && e.kind == rocewatch_plugin_api::MetricKind::Counter),
                "{n}"
            );
        }
    }

    #[test]
    fn only_trouble_counters_that_grew_are_reported() {
        use rocewatch_plugin_api::{Attributes, MetricKind, Sample, Value};
        let s = |name: &'static str, v: u64| Sample {
            name: name.into(),
            unit: "".into(),
            value: Value::U64(v),
            attributes: Attributes::new([("rdma.device".to_string(), "mlx5_0".to_string())].into()),
            source: "t".into(),
            kind: MetricKind::Counter,
        };
        let before = [
            s("rdma.pfc.pause_frames", 10),
            s("rdma.port.io", 1),
            s("rdma.port.out_of_buffer", 5),
        ];
        let after = [
            s("rdma.pfc.pause_frames", 25),
            s("rdma.port.io", 99),
            s("rdma.port.out_of_buffer", 5),
        ];
        assert_eq!(
            counter_increases(&before, &after),
            [(
                "rdma.pfc.pause_frames{rdma.device=mlx5_0}".to_string(),
                15.0
            )]
        );
    }
}
