//! Multi-rail networking: two or more RoCE netdevs with addresses in one subnet. Each
//! address must be answered for, and answer, from its own NIC: ARP only for the
//! interface's own addresses (`arp_ignore` 1) announcing the interface's own address
//! (`arp_announce` 2), no strict reverse-path filter (`rp_filter` 0 or 2: strict drops what
//! arrives on the other rail), and a policy route per rail (`ip rule add from ADDRESS table
//! T` with a table that routes the subnet out of that rail), else the main table sends
//! every reply out of one rail.
//!
//! Read live, not by running `ip`: interfaces, addresses, rules and routes over rtnetlink
//! of this process's network namespace, the sysctls from `<procfs root>/sys/net/ipv4/conf/`
//! (`/proc/sys/net` shows the namespace of the reader). The kernel applies the larger of
//! `all` and the interface's value of each (`IN_DEV_MAXCONF` in
//! `include/linux/inetdevice.h`: `IN_DEV_ARP_IGNORE`, `IN_DEV_ARP_ANNOUNCE`,
//! `IN_DEV_RPFILTER`). The netdev names come from the inventory (sysfs); a name that is no
//! interface here is skipped, saying so.
//!
//! [`decide`] is the verdict over what was read (pure); [`multirail_checks`] reads it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;

use rocewatch_netlink::route::{
    Address, Link, Prefix, Route, RouteNetlink, Rule, AF_INET, AF_INET6, FR_ACT_TO_TBL,
    RTN_UNICAST, RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN, RT_TABLE_UNSPEC,
};
use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::railmap::RailMap;

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// One ARP or reverse-path sysctl: the values that do for multi-rail, the one to set, and
/// what a wrong value does.
pub(crate) struct Knob {
    pub name: &'static str,
    allowed: &'static [u32],
    target: u32,
    wanted: &'static str,
    wrong: &'static str,
}

/// `Documentation/networking/ip-sysctl.rst` for the meanings.
pub(crate) const KNOBS: [Knob; 3] = [
    Knob {
        name: "arp_ignore",
        allowed: &[1, 2],
        target: 1,
        wanted: "1 (or 2)",
        wrong: "it answers ARP for the other rails' addresses too",
    },
    Knob {
        name: "arp_announce",
        allowed: &[2],
        target: 2,
        wanted: "2",
        wrong: "its ARP requests may announce another rail's address",
    },
    Knob {
        name: "rp_filter",
        allowed: &[0, 2],
        target: 2,
        wanted: "0 or 2 (loose)",
        wrong: "strict: it drops packets that arrive on the other rail",
    },
];

/// The values of [`KNOBS`] in one `conf/` directory (`all` or an interface), in that
/// order; an error says what could not be read.
pub(crate) type Conf = [Result<u32, String>; 3];

/// What the verdict is made from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    /// The inventory's RoCE netdevs (ports with link layer Ethernet), each once.
    pub netdevs: Vec<String>,
    pub links: Vec<Link>,
    pub addresses: Vec<Address>,
    pub rules: Vec<Rule>,
    pub routes: Vec<Route>,
    /// `all` and each netdev present.
    pub conf: BTreeMap<String, Conf>,
    /// Where the sysctls were read (`/proc/sys/net/ipv4/conf`), for the evidence.
    pub conf_dir: String,
    /// Where the names came from (`the inventory of /sys`), for the evidence.
    pub source: String,
    /// Each netdev's rail in the host's rail map (`rocewatch_sysfs::railmap`): its table
    /// number is 100 + that rail, which a NIC that is gone does not change.
    pub rails: BTreeMap<String, usize>,
}

/// One rail address in a shared subnet.
struct RailAddr<'a> {
    netdev: &'a str,
    ifindex: u32,
    /// The rail, from the rail map (else its position among the netdevs present), for
    /// a table number.
    rail: usize,
    local: Prefix,
}

fn family(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        AF_INET
    } else {
        AF_INET6
    }
}

/// `ip` or `ip -6`.
fn ip_cmd(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "ip"
    } else {
        "ip -6"
    }
}

/// Addresses that can be a rail's: not IPv6 link-local (every interface has fe80::/64,
/// which says nothing about rails), not loopback.
fn rail_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !v4.is_loopback(),
        IpAddr::V6(v6) => !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
    }
}

/// The sysctl name of a knob of an interface: a dot in the name (a VLAN, `eth0.100`)
/// becomes a slash, as sysctl(8) and sysctl.d(5) want it.
pub(crate) fn sysctl_key(conf: &str, knob: &str) -> String {
    format!("net.ipv4.conf.{}.{knob}", conf.replace('.', "/"))
}

/// The first interface names of a namespace (a host may have hundreds).
fn some_names(links: &[Link]) -> String {
    const SHOWN: usize = 8;
    let mut s = links
        .iter()
        .take(SHOWN)
        .map(|l| l.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if links.len() > SHOWN {
        s.push_str(&format!(" and {} more", links.len() - SHOWN));
    }
    s
}

/// A prefix as `ip rule` writes it: a single address without its length.
fn show_prefix(p: &Prefix) -> String {
    if u32::from(p.len) == if p.addr.is_ipv4() { 32 } else { 128 } {
        p.addr.to_string()
    } else {
        p.to_string()
    }
}

fn is_special_table(t: u32) -> bool {
    matches!(
        t,
        RT_TABLE_UNSPEC | RT_TABLE_DEFAULT | RT_TABLE_MAIN | RT_TABLE_LOCAL
    )
}

/// Whether `rule` sends traffic from `ip` (whatever its destination, interface or mark) to
/// a table of its own: `from PREFIX lookup T`, PREFIX covering `ip`, T not
/// main/local/default.
fn selects_own_table(rule: &Rule, ip: IpAddr) -> bool {
    rule.family == family(ip)
        && rule.action == FR_ACT_TO_TBL
        && !rule.inverted()
        && rule.src.is_some_and(|s| s.len > 0 && s.contains(ip))
        && rule.dst.is_none()
        && rule.iifname.is_none()
        && rule.oifname.is_none()
        && rule.fwmark.unwrap_or(0) == 0
        && !is_special_table(rule.table)
}

/// The unicast routes of `table` whose destination covers `subnet`.
fn routes_for<'a>(
    routes: &'a [Route],
    fam: u8,
    table: u32,
    subnet: &Prefix,
) -> impl Iterator<Item = &'a Route> {
    let subnet = *subnet;
    routes.iter().filter(move |r| {
        r.family == fam && r.table == table && r.kind == RTN_UNICAST && r.dst.covers(&subnet)
    })
}

/// Hands out table numbers nobody uses: 100 + the rail's index, else the next free one.
struct Tables {
    taken: BTreeSet<u32>,
    given: BTreeMap<usize, u32>,
}

impl Tables {
    fn new(o: &Observed) -> Tables {
        let mut taken: BTreeSet<u32> = o.rules.iter().map(|r| r.table).collect();
        taken.extend(o.routes.iter().map(|r| r.table));
        Tables {
            taken,
            given: BTreeMap::new(),
        }
    }

    fn for_rail(&mut self, rail: usize) -> u32 {
        if let Some(t) = self.given.get(&rail) {
            return *t;
        }
        let mut t = 100 + rail as u32;
        while self.taken.contains(&t) || is_special_table(t) {
            t += 1;
        }
        self.taken.insert(t);
        self.given.insert(rail, t);
        t
    }
}

/// The verdict: one line per subnet shared by rails (or one saying the checks do not
/// apply), the sysctls of each rail in a shared IPv4 subnet, a policy route per address.
pub(crate) fn decide(o: &Observed) -> Vec<Check> {
    let mut out = Vec::new();
    let by_name: BTreeMap<&str, &Link> = o.links.iter().map(|l| (l.name.as_str(), l)).collect();
    let mut present: Vec<(&str, &Link)> = Vec::new();
    for nd in &o.netdevs {
        match by_name.get(nd.as_str()) {
            Some(l) => present.push((nd, l)),
            None => out.push(check(
                "multirail",
                nd,
                Status::Skip,
                format!(
                    "{nd} ({}) is not an interface of this network namespace (rtnetlink lists {}): the sysfs tree is not this host's, or the netdev lives in another namespace; its multi-rail setup cannot be read here",
                    o.source,
                    some_names(&o.links)
                ),
                None,
            )),
        }
    }
    if present.is_empty() {
        return out;
    }
    // Rails by subnet.
    let mut subnets: BTreeMap<Prefix, Vec<RailAddr<'_>>> = BTreeMap::new();
    let mut listing: Vec<String> = Vec::new();
    for (rail, (nd, link)) in present.iter().enumerate() {
        let mine: Vec<&Address> = o
            .addresses
            .iter()
            .filter(|a| a.index == link.index && rail_address(a.local.addr))
            .collect();
        listing.push(if mine.is_empty() {
            format!("{nd}: no address")
        } else {
            format!(
                "{nd}: {}",
                mine.iter()
                    .map(|a| a.local.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
        for a in mine {
            subnets
                .entry(a.local.network())
                .or_default()
                .push(RailAddr {
                    netdev: nd,
                    ifindex: link.index,
                    rail: o.rails.get(*nd).copied().unwrap_or(rail),
                    local: a.local,
                });
        }
    }
    subnets.retain(|_, rails| {
        rails
            .iter()
            .map(|r| r.netdev)
            .collect::<BTreeSet<_>>()
            .len()
            >= 2
    });
    let read_from = format!(
        "read over rtnetlink of this network namespace and from {}, names from {}",
        o.conf_dir, o.source
    );
    if subnets.is_empty() {
        out.push(check(
            "multirail",
            "",
            Status::Info,
            format!(
                "multi-rail checks do not apply: no two RoCE netdevs have addresses in one subnet ({}; {read_from})",
                listing.join("; ")
            ),
            None,
        ));
        return out;
    }
    for (subnet, rails) in &subnets {
        out.push(check(
            "multirail",
            &subnet.to_string(),
            Status::Info,
            format!(
                "{} share {subnet}: each address must be answered for and answer from its own NIC (ARP and reverse-path sysctls, a policy route per rail; {read_from})",
                rails
                    .iter()
                    .map(|r| format!("{} {}", r.netdev, r.local.addr))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None,
        ));
    }
    // The sysctls, for rails of a shared IPv4 subnet (ARP and rp_filter are IPv4's).
    let mut v4_rails: Vec<&str> = Vec::new();
    for (subnet, rails) in &subnets {
        if subnet.addr.is_ipv4() {
            for r in rails {
                if !v4_rails.contains(&r.netdev) {
                    v4_rails.push(r.netdev);
                }
            }
        }
    }
    let order: Vec<&str> = present.iter().map(|(n, _)| *n).collect();
    v4_rails.sort_by_key(|n| order.iter().position(|o| o == n));
    for nd in v4_rails {
        out.push(sysctl_check(o, nd));
    }
    // A policy route per address.
    let names: BTreeMap<u32, &str> = o.links.iter().map(|l| (l.index, l.name.as_str())).collect();
    let mut tables = Tables::new(o);
    for (subnet, rails) in &subnets {
        for r in rails {
            out.push(route_check(o, &names, &mut tables, subnet, r));
        }
    }
    out
}

/// The first error and how many more.
fn first_of(errors: &[String]) -> String {
    match errors.len() {
        0 => String::new(),
        1 => errors[0].clone(),
        n => format!("{} (and {} more)", errors[0], n - 1),
    }
}

fn unreadable(e: &Result<u32, String>) -> Option<&str> {
    e.as_ref().err().map(String::as_str)
}

/// `arp_ignore`, `arp_announce` and `rp_filter` of one rail: the larger of `all` and the
/// interface's is what the kernel applies.
fn sysctl_check(o: &Observed, nd: &str) -> Check {
    let missing = || Err("not read".to_string());
    let all = o.conf.get("all");
    let mine = o.conf.get(nd);
    let (mut read, mut wrong, mut errors, mut fixes) = (vec![], vec![], vec![], vec![]);
    for (i, k) in KNOBS.iter().enumerate() {
        let a = all.map_or_else(missing, |c| c[i].clone());
        let m = mine.map_or_else(missing, |c| c[i].clone());
        let (a, m) = match (a, m) {
            (Ok(a), Ok(m)) => (a, m),
            (a, m) => {
                for e in [unreadable(&a), unreadable(&m)].into_iter().flatten() {
                    errors.push(e.to_string());
                }
                continue;
            }
        };
        let effective = a.max(m);
        let shown = format!("{} {effective} (all {a}, {nd} {m})", k.name);
        if k.allowed.contains(&effective) {
            read.push(shown);
            continue;
        }
        wrong.push(format!("{shown}, want {}: {}", k.wanted, k.wrong));
        // Setting the interface to the target is enough unless `all` alone is too high.
        let mut set = vec![(nd, k.target)];
        if !k.allowed.contains(&a.max(k.target)) {
            set.insert(0, ("all", k.target));
        }
        fixes.extend(
            set.into_iter()
                .map(|(conf, v)| (sysctl_key(conf, k.name), v)),
        );
    }
    if !wrong.is_empty() {
        let mut fix: Vec<String> = fixes
            .iter()
            .map(|(key, v)| format!("sysctl -w {}", word(&format!("{key}={v}"))))
            .collect();
        fix.extend(fixes.iter().map(|(key, v)| {
            format!(
                "echo {} >> /etc/sysctl.d/90-rocewatch-multirail.conf",
                word(&format!("{key} = {v}"))
            )
        }));
        let mut evidence = wrong.join("; ");
        if !read.is_empty() {
            evidence.push_str(&format!("; {} as wanted", read.join(", ")));
        }
        if !errors.is_empty() {
            evidence.push_str(&format!("; unread: {}", first_of(&errors)));
        }
        return check(
            "multirail-sysctl",
            nd,
            Status::Warn,
            format!("{evidence} (the kernel applies the larger of all and the interface's value)"),
            Some(fix.join("\n")),
        );
    }
    if !errors.is_empty() {
        return check(
            "multirail-sysctl",
            nd,
            Status::Skip,
            format!(
                "cannot read the sysctls under {}: {}{}",
                o.conf_dir,
                first_of(&errors),
                if read.is_empty() {
                    String::new()
                } else {
                    format!(" ({} as wanted)", read.join(", "))
                }
            ),
            None,
        );
    }
    check(
        "multirail-sysctl",
        nd,
        Status::Pass,
        format!(
            "{} (the kernel applies the larger of all and the interface's value)",
            read.join(", ")
        ),
        None,
    )
}

fn describe_route(r: &Route, names: &BTreeMap<u32, &str>) -> String {
    let dev = |i: u32| {
        names
            .get(&i)
            .map_or_else(|| format!("ifindex {i}"), |n| n.to_string())
    };
    let dst = if r.dst.len == 0 {
        "default".to_string()
    } else {
        r.dst.to_string()
    };
    let mut s = dst;
    if let Some(g) = r.gateway {
        s.push_str(&format!(" via {g}"));
    }
    if let Some(i) = r.oif {
        s.push_str(&format!(" dev {}", dev(i)));
    }
    for n in &r.nexthops {
        s.push_str(&format!(" nexthop dev {}", dev(n.ifindex)));
    }
    if let Some(p) = r.prefsrc {
        s.push_str(&format!(" src {p}"));
    }
    s
}

/// The devices a set of routes leaves by.
fn out_devices(routes: &[&Route], names: &BTreeMap<u32, &str>) -> String {
    let mut devs: Vec<String> = Vec::new();
    for r in routes {
        for i in r
            .oif
            .into_iter()
            .chain(r.nexthops.iter().map(|n| n.ifindex))
        {
            let d = names
                .get(&i)
                .map_or_else(|| format!("ifindex {i}"), |n| n.to_string());
            if !devs.contains(&d) {
                devs.push(d);
            }
        }
    }
    if devs.is_empty() {
        "no interface".into()
    } else {
        devs.join(", ")
    }
}

const PERSIST: &str = "to keep it across reboots, put it in the network configuration: netplan routing-policy and routes with table, NetworkManager ipv4.routing-rules and ipv4.routes with table=, or ifupdown post-up lines";

/// The policy route of one rail address.
fn route_check(
    o: &Observed,
    names: &BTreeMap<u32, &str>,
    tables: &mut Tables,
    subnet: &Prefix,
    r: &RailAddr<'_>,
) -> Check {
    let a = r.local.addr;
    let (fam, ip, nd) = (family(a), ip_cmd(a), r.netdev);
    let subject = format!("{nd} {a}");
    let add_route = |t: u32| format!("{ip} route add {subnet} dev {} src {a} table {t}", word(nd));
    let rule = o
        .rules
        .iter()
        .filter(|rule| selects_own_table(rule, a))
        .min_by_key(|rule| rule.priority);
    let Some(rule) = rule else {
        let main: Vec<&Route> = routes_for(&o.routes, fam, RT_TABLE_MAIN, subnet).collect();
        let t = tables.for_rail(r.rail);
        return check(
            "multirail-route",
            &subject,
            Status::Warn,
            format!(
                "no rule sends traffic from {a} to a table of its own: its replies follow the main table, which routes {subnet} out of {}",
                out_devices(&main, names)
            ),
            Some(format!(
                "{ip} rule add from {a} table {t}\n{}\ntable {t} is a free table number (100 + the rail's index; any unused one does); {PERSIST}",
                add_route(t)
            )),
        );
    };
    let src = rule
        .src
        .as_ref()
        .map_or_else(|| "all".to_string(), show_prefix);
    let found = format!("rule {} from {src} lookup {}", rule.priority, rule.table);
    let candidates: Vec<&Route> = routes_for(&o.routes, fam, rule.table, subnet).collect();
    if let Some(good) = candidates.iter().find(|rt| rt.goes_out_of(r.ifindex)) {
        return check(
            "multirail-route",
            &subject,
            Status::Pass,
            format!(
                "{found}; table {}: {}",
                rule.table,
                describe_route(good, names)
            ),
            None,
        );
    }
    if candidates.is_empty() {
        return check(
            "multirail-route",
            &subject,
            Status::Warn,
            format!(
                "{found}, but table {} has no route for {subnet}: traffic from {a} to the subnet falls through to the next rules",
                rule.table
            ),
            Some(format!("{}\n{PERSIST}", add_route(rule.table))),
        );
    }
    // The table routes the subnet out of another rail (a rule or table shared by rails):
    // a table of its own, looked up first.
    let t = tables.for_rail(r.rail);
    let pref = rule.priority.saturating_sub(1);
    check(
        "multirail-route",
        &subject,
        Status::Warn,
        format!(
            "{found}, but table {} routes {subnet} out of {}, not {nd}: replies from {a} leave by another rail",
            rule.table,
            out_devices(&candidates, names)
        ),
        Some(format!(
            "{ip} rule add from {a} table {t} pref {pref}\n{}\ntable {t} is a free table number (100 + the rail's index), pref {pref} puts the rule before rule {}; {PERSIST}",
            add_route(t),
            rule.priority
        )),
    )
}

/// The inventory's RoCE netdevs: ports with link layer Ethernet and a netdev, each once.
pub(crate) fn roce_netdevs(inv: &Inventory) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in inv.devices.iter().flat_map(|d| &d.ports) {
        if p.link_layer.as_deref() != Some("Ethernet") {
            continue;
        }
        if let Some(nd) = &p.netdev {
            if !out.contains(nd) {
                out.push(nd.clone());
            }
        }
    }
    out
}

/// The [`KNOBS`] of one `conf/` directory under `conf_dir`.
pub(crate) fn read_conf(conf_dir: &Path, conf: &str) -> Conf {
    KNOBS.each_ref().map(|k| {
        let path = conf_dir.join(conf).join(k.name);
        match std::fs::read_to_string(&path) {
            Ok(t) => t
                .trim()
                .parse()
                .map_err(|_| format!("{}: {:?} is not a number", path.display(), t.trim())),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    })
}

/// The multi-rail checks of the inventory's RoCE netdevs, on this network namespace.
pub(crate) fn multirail_checks(
    inv: &Inventory,
    rail_map: &RailMap,
    sysfs_root: &Path,
    procfs_root: &Path,
) -> Vec<Check> {
    let netdevs = roce_netdevs(inv);
    if netdevs.is_empty() {
        return vec![check(
            "multirail",
            "",
            Status::Info,
            "multi-rail checks do not apply: no RoCE port (link layer Ethernet) with a netdev",
            None,
        )];
    }
    let dumped = RouteNetlink::open()
        .and_then(|mut nl| Ok((nl.links()?, nl.addresses()?, nl.rules()?, nl.routes()?)));
    let (links, addresses, rules, routes) = match dumped {
        Ok(d) => d,
        Err(e) => {
            return vec![check(
                "multirail",
                "",
                Status::Skip,
                format!("cannot read interfaces, addresses, rules and routes over rtnetlink: {e}"),
                None,
            )]
        }
    };
    let conf_dir = procfs_root.join("sys/net/ipv4/conf");
    let mut conf = BTreeMap::new();
    conf.insert("all".to_string(), read_conf(&conf_dir, "all"));
    for nd in &netdevs {
        if links.iter().any(|l| &l.name == nd) {
            conf.insert(nd.clone(), read_conf(&conf_dir, nd));
        }
    }
    decide(&Observed {
        netdevs,
        links,
        addresses,
        rules,
        routes,
        conf,
        conf_dir: conf_dir.display().to_string(),
        source: format!("the inventory of {}", sysfs_root.display()),
        rails: rail_map
            .ports
            .iter()
            .filter_map(|p| Some((p.netdev.clone()?, p.rail?)))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_netlink::msg::{messages, T_DONE};
    use rocewatch_netlink::route::{
        decode_address, decode_link, decode_route, decode_rule, FIB_RULE_INVERT,
    };

    /// The dumps `core/netlink/testdata/route-6.18/record.sh` recorded from a kernel in a
    /// namespace with two veth rails in 198.51.100.0/24 and 2001:db8:1::/64.
    const RECORDED: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../netlink/testdata/route-6.18/"
    );

    fn dump<T>(state: &str, what: &str, decode: fn(&[u8]) -> Result<Option<T>, String>) -> Vec<T> {
        let mut out = Vec::new();
        for k in 1.. {
            let path = format!("{RECORDED}{state}/{what}-dump-{k}.bin");
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            for m in messages(&bytes) {
                let m = m.unwrap();
                if m.ty == T_DONE {
                    return out;
                }
                out.extend(decode(m.payload).unwrap());
            }
        }
        unreachable!()
    }

    /// `sysctl.txt`: `conf.knob=value` lines, as read from /proc/sys/net/ipv4/conf.
    fn recorded_conf(state: &str) -> BTreeMap<String, Conf> {
        let text = std::fs::read_to_string(format!("{RECORDED}{state}/sysctl.txt")).unwrap();
        let mut out: BTreeMap<String, Conf> = BTreeMap::new();
        for line in text.lines() {
            let (key, value) = line.split_once('=').unwrap();
            let (conf, knob) = key.split_once('.').unwrap();
            let i = KNOBS.iter().position(|k| k.name == knob).unwrap();
            let entry = out
                .entry(conf.to_string())
                .or_insert_with(|| KNOBS.each_ref().map(|_| Err("absent".to_string())));
            entry[i] = Ok(value.parse().unwrap());
        }
        out
    }

    fn recorded(state: &str) -> Observed {
        let mut routes = dump(state, "route4", decode_route);
        routes.extend(dump(state, "route6", decode_route));
        Observed {
            netdevs: vec!["rail0".into(), "rail1".into()],
            links: dump(state, "link", |p| decode_link(p).map(Some)),
            addresses: dump(state, "address", decode_address),
            rules: dump(state, "rule", decode_rule),
            routes,
            conf: recorded_conf(state),
            conf_dir: "/proc/sys/net/ipv4/conf".into(),
            source: "the inventory of a test".into(),
            rails: BTreeMap::new(),
        }
    }

    /// rail1 is rail 5 of the map (the NICs between are gone, or on other subnets): its
    /// table is 105, not 101 from its place among the netdevs present.
    #[test]
    fn a_table_number_is_the_rail_of_the_map_not_the_position() {
        let mut o = recorded("bare");
        o.rails = [("rail0".to_string(), 0), ("rail1".to_string(), 5)].into();
        let checks = decide(&o);
        let c = find(&checks, "multirail-route", "rail1 198.51.100.12");
        assert_eq!(
            fix_lines(c)[..2],
            [
                "ip rule add from 198.51.100.12 table 105",
                "ip route add 198.51.100.0/24 dev rail1 src 198.51.100.12 table 105",
            ]
        );
        let c = find(&checks, "multirail-route", "rail0 198.51.100.11");
        assert!(fix_lines(c)[0].ends_with("table 100"), "{:?}", c.fix);
    }

    fn find<'a>(checks: &'a [Check], name: &str, subject: &str) -> &'a Check {
        checks
            .iter()
            .find(|c| c.check == name && c.subject == subject)
            .unwrap_or_else(|| panic!("no {name} {subject} in {checks:#?}"))
    }

    fn fix_lines(c: &Check) -> Vec<&str> {
        c.fix.as_deref().unwrap_or_default().lines().collect()
    }

    #[test]
    fn recorded_bare_rails_warn_with_the_exact_lines() {
        let checks = decide(&recorded("bare"));
        for subnet in ["198.51.100.0/24", "2001:db8:1::/64"] {
            let c = find(&checks, "multirail", subnet);
            assert_eq!(c.status, Status::Info);
            assert!(c.evidence.starts_with("rail0 "), "{}", c.evidence);
        }
        // Both rails have arp_ignore and arp_announce 0; rail1 also strict rp_filter (1).
        let rail0 = find(&checks, "multirail-sysctl", "rail0");
        assert_eq!(rail0.status, Status::Warn);
        assert_eq!(
            fix_lines(rail0)[..2],
            [
                "sysctl -w net.ipv4.conf.rail0.arp_ignore=1",
                "sysctl -w net.ipv4.conf.rail0.arp_announce=2"
            ]
        );
        assert!(fix_lines(rail0).contains(
            &"echo 'net.ipv4.conf.rail0.arp_ignore = 1' >> /etc/sysctl.d/90-rocewatch-multirail.conf"
        ));
        assert!(!rail0.fix.as_ref().unwrap().contains("rp_filter"));
        assert!(rail0
            .evidence
            .contains("rp_filter 0 (all 0, rail0 0) as wanted"));
        let rail1 = find(&checks, "multirail-sysctl", "rail1");
        assert!(fix_lines(rail1).contains(&"sysctl -w net.ipv4.conf.rail1.rp_filter=2"));
        assert!(
            rail1.evidence.contains("rp_filter 1 (all 0, rail1 1)"),
            "{}",
            rail1.evidence
        );
        // No rule of their own: a table per rail, 100 + its index, for IPv4 and IPv6.
        for (subject, lines) in [
            (
                "rail0 198.51.100.11",
                [
                    "ip rule add from 198.51.100.11 table 100",
                    "ip route add 198.51.100.0/24 dev rail0 src 198.51.100.11 table 100",
                ],
            ),
            (
                "rail1 198.51.100.12",
                [
                    "ip rule add from 198.51.100.12 table 101",
                    "ip route add 198.51.100.0/24 dev rail1 src 198.51.100.12 table 101",
                ],
            ),
            (
                "rail1 2001:db8:1::12",
                [
                    "ip -6 rule add from 2001:db8:1::12 table 101",
                    "ip -6 route add 2001:db8:1::/64 dev rail1 src 2001:db8:1::12 table 101",
                ],
            ),
        ] {
            let c = find(&checks, "multirail-route", subject);
            assert_eq!(c.status, Status::Warn, "{subject}");
            assert_eq!(fix_lines(c)[..2], lines, "{subject}");
        }
        let c = find(&checks, "multirail-route", "rail1 198.51.100.12");
        assert!(
            c.evidence
                .contains("routes 198.51.100.0/24 out of rail0, rail1"),
            "{}",
            c.evidence
        );
    }

    #[test]
    fn recorded_configured_rails_pass() {
        let checks = decide(&recorded("configured"));
        let ours: Vec<&Check> = checks
            .iter()
            .filter(|c| c.check.starts_with("multirail-"))
            .collect();
        // Two sysctl checks, four addresses.
        assert_eq!(ours.len(), 6, "{checks:#?}");
        for c in ours {
            assert_eq!(c.status, Status::Pass, "{c:?}");
            assert_eq!(c.fix, None);
        }
        let c = find(&checks, "multirail-route", "rail1 198.51.100.12");
        assert_eq!(
            c.evidence,
            "rule 32764 from 198.51.100.12 lookup 1001; table 1001: 198.51.100.0/24 dev rail1 src 198.51.100.12"
        );
        let c = find(&checks, "multirail-route", "rail0 198.51.100.11");
        assert!(c.evidence.contains("lookup 100;"), "{}", c.evidence);
    }

    #[test]
    fn rails_in_different_subnets_or_absent_do_not_apply() {
        let mut o = recorded("bare");
        for a in o.addresses.iter_mut() {
            if a.local.addr == "198.51.100.12".parse::<IpAddr>().unwrap() {
                a.local = Prefix::new("198.51.101.12".parse().unwrap(), 24).unwrap();
            }
        }
        o.addresses.retain(|a| a.local.addr.is_ipv4());
        let checks = decide(&o);
        assert_eq!(checks.len(), 1, "{checks:#?}");
        assert_eq!(checks[0].status, Status::Info);
        assert!(checks[0].evidence.contains("do not apply"));
        assert!(checks[0]
            .evidence
            .contains("rail0: 198.51.100.11/24; rail1: 198.51.101.12/24"));
        // A name the namespace lacks: skipped, the other alone does not make multi-rail.
        let mut o = recorded("bare");
        o.netdevs = vec!["rail0".into(), "ens9f0np0".into()];
        let checks = decide(&o);
        let skip = find(&checks, "multirail", "ens9f0np0");
        assert_eq!(skip.status, Status::Skip);
        assert!(skip
            .evidence
            .contains("not an interface of this network namespace (rtnetlink lists lo, peer0, rail0, peer1, rail1)"));
        assert_eq!(find(&checks, "multirail", "").status, Status::Info);
    }

    #[test]
    fn a_table_shared_with_another_rail_gets_one_of_its_own_first() {
        let mut o = recorded("configured");
        let rail1 = "198.51.100.12".parse::<IpAddr>().unwrap();
        for r in o.rules.iter_mut() {
            if r.src.is_some_and(|s| s.addr == rail1) {
                r.table = 100;
            }
        }
        let checks = decide(&o);
        let c = find(&checks, "multirail-route", "rail1 198.51.100.12");
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.evidence
                .contains("table 100 routes 198.51.100.0/24 out of rail0, not rail1"),
            "{}",
            c.evidence
        );
        // 101 is free (the namespace uses 100, 1001 and 2000); pref one before 32764.
        assert_eq!(
            fix_lines(c)[..2],
            [
                "ip rule add from 198.51.100.12 table 101 pref 32763",
                "ip route add 198.51.100.0/24 dev rail1 src 198.51.100.12 table 101"
            ]
        );
    }

    #[test]
    fn a_rule_whose_table_lacks_the_subnet_gets_the_route() {
        let mut o = recorded("configured");
        o.routes.retain(|r| r.table != 1001);
        let checks = decide(&o);
        let c = find(&checks, "multirail-route", "rail1 198.51.100.12");
        assert_eq!(c.status, Status::Warn);
        assert!(c
            .evidence
            .contains("table 1001 has no route for 198.51.100.0/24"));
        assert_eq!(
            fix_lines(c)[0],
            "ip route add 198.51.100.0/24 dev rail1 src 198.51.100.12 table 1001"
        );
        // The IPv6 rule to 1001 lacks its route too; rail0 is untouched.
        assert_eq!(
            find(&checks, "multirail-route", "rail1 2001:db8:1::12").status,
            Status::Warn
        );
        assert_eq!(
            find(&checks, "multirail-route", "rail0 198.51.100.11").status,
            Status::Pass
        );
    }

    #[test]
    fn rules_that_select_more_than_the_source_do_not_count() {
        let o = recorded("configured");
        let own = |r: &Rule| selects_own_table(r, "198.51.100.12".parse().unwrap());
        let rule = o.rules.iter().find(|r| own(r)).unwrap().clone();
        assert_eq!(rule.table, 1001);
        for changed in [
            Rule {
                flags: FIB_RULE_INVERT,
                ..rule.clone()
            },
            Rule {
                iifname: Some("rail0".into()),
                ..rule.clone()
            },
            Rule {
                fwmark: Some(0x10),
                ..rule.clone()
            },
            Rule {
                dst: Prefix::new("203.0.113.0".parse().unwrap(), 24),
                ..rule.clone()
            },
            Rule {
                table: RT_TABLE_MAIN,
                ..rule.clone()
            },
            Rule {
                src: Prefix::new("198.51.100.11".parse().unwrap(), 32),
                ..rule.clone()
            },
        ] {
            assert!(!own(&changed), "{changed:?}");
        }
        // A covering prefix counts (then its table must route out of this rail).
        assert!(own(&Rule {
            src: Prefix::new("198.51.100.0".parse().unwrap(), 24),
            ..rule
        }));
    }

    #[test]
    fn all_above_the_wanted_value_is_fixed_too_and_a_vlan_key_has_a_slash() {
        let mut o = recorded("configured");
        let all = o.conf.get_mut("all").unwrap();
        all[0] = Ok(4); // arp_ignore 4: the interface's 1 cannot lower it
        all[2] = Ok(1); // rp_filter 1: the interface's 2 raises it to loose
        let checks = decide(&o);
        let c = find(&checks, "multirail-sysctl", "rail0");
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.evidence.contains("arp_ignore 4 (all 4, rail0 1)"),
            "{}",
            c.evidence
        );
        assert_eq!(
            fix_lines(c)[..2],
            [
                "sysctl -w net.ipv4.conf.all.arp_ignore=1",
                "sysctl -w net.ipv4.conf.rail0.arp_ignore=1"
            ]
        );
        assert!(c.evidence.contains("rp_filter 2 (all 1, rail0 2)"));
        assert_eq!(
            sysctl_key("eth0.100", "rp_filter"),
            "net.ipv4.conf.eth0/100.rp_filter"
        );
    }

    #[test]
    fn unreadable_sysctls_are_skipped_saying_which() {
        let mut o = recorded("configured");
        o.conf.clear();
        let checks = decide(&o);
        let c = find(&checks, "multirail-sysctl", "rail0");
        assert_eq!(c.status, Status::Skip);
        assert!(
            c.evidence.contains(
                "cannot read the sysctls under /proc/sys/net/ipv4/conf: not read (and 5 more)"
            ),
            "{}",
            c.evidence
        );
        // Read from a directory: the file's error names its path.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("all")).unwrap();
        std::fs::write(dir.path().join("all/arp_ignore"), "1\n").unwrap();
        std::fs::write(dir.path().join("all/arp_announce"), "x\n").unwrap();
        let conf = read_conf(dir.path(), "all");
        assert_eq!(conf[0], Ok(1));
        assert!(conf[1]
            .as_ref()
            .unwrap_err()
            .contains("all/arp_announce: \"x\" is not a number"));
        assert!(conf[2].as_ref().unwrap_err().contains("all/rp_filter"));
    }

    #[test]
    fn free_tables_skip_the_ones_in_use() {
        let mut o = recorded("bare");
        let mut used = o.routes[0].clone();
        used.table = 100;
        o.routes.push(used);
        let checks = decide(&o);
        let table = |s: &str| fix_lines(find(&checks, "multirail-route", s))[0].to_string();
        assert_eq!(
            table("rail0 198.51.100.11"),
            "ip rule add from 198.51.100.11 table 101"
        );
        assert_eq!(
            table("rail1 198.51.100.12"),
            "ip rule add from 198.51.100.12 table 102"
        );
        assert_eq!(
            table("rail0 2001:db8:1::11"),
            "ip -6 rule add from 2001:db8:1::11 table 101"
        );
    }
}
