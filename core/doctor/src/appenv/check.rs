//! `rocewatch doctor --env FILE|-`: an application's NCCL_*/UCX_*/OMPI_* settings against
//! what this host needs (appenv), one check per variable, with the fix.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rocewatch_plugin_api::{Inventory, QosState};

use rocewatch_sysfs::gid::gid_ip;
use rocewatch_sysfs::rails::{value, PortEnv};

use super::select::{nccl_selected, ucx_selected};
use super::HostEnv;
use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// `NAME=value` lines (a leading `export `, quotes, comments and blank lines allowed), as
/// an env file, `env` output or a job script's exports are written.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line).trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim();
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        out.insert(k.to_string(), v.to_string());
    }
    out
}

/// The variables these checks look at.
pub fn relevant(k: &str) -> bool {
    k.starts_with("NCCL_") || k.starts_with("UCX_") || k.starts_with("OMPI_MCA_")
}

/// Whether a UCX_TLS list lets UCX use an RDMA transport (`all`, `rc*`, `dc*`, `ud*`,
/// `ib`), `^` meaning "all but".
fn ucx_tls_has_rdma(v: &str) -> bool {
    let rdma = |t: &str| {
        let t = t.trim();
        t == "ib" || t.starts_with("rc") || t.starts_with("dc") || t.starts_with("ud")
    };
    match v.trim().strip_prefix('^') {
        Some(excluded) => !["rc", "dc", "ud"].iter().all(|family| {
            excluded
                .split(',')
                .any(|t| t.trim().starts_with(family) || t.trim() == "ib")
        }),
        None => v.split(',').any(|t| t.trim() == "all" || rdma(t)),
    }
}

/// What a variable's check reads: what this host needs, its inventory and QoS, the
/// application's environment and the interfaces' addresses.
struct Ctx<'a> {
    host: &'a HostEnv,
    inv: &'a Inventory,
    qos: &'a [QosState],
    env: &'a BTreeMap<String, String>,
    addrs: Option<&'a BTreeMap<String, Vec<IpAddr>>>,
}

impl Ctx<'_> {
    /// What this host needs `k` set to, if anything.
    fn need(&self, k: &str) -> Option<String> {
        self.host
            .variables
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    }

    /// `set k=<what this host needs>`, when it needs something.
    fn fix(&self, k: &str) -> Option<String> {
        self.need(k).map(|n| format!("set {k}={}", word(&n)))
    }

    /// The ports an application uses (its HCA list, else all active ones).
    fn used_by(&self, var: &str) -> Vec<&PortEnv> {
        let ports = &self.host.ports;
        match self.env.get(var) {
            Some(list) if var == "UCX_NET_DEVICES" => ucx_selected(list, ports).chosen,
            Some(list) => nccl_selected(list, ports).chosen,
            None => ports.iter().filter(|p| p.up).collect(),
        }
    }
}

/// A variable's check: given its name and value, a verdict (None: nothing to say).
type VarCheck = fn(&Ctx, &str, &str) -> Option<Check>;

/// The variables checked, and their checks.
const VARIABLES: &[(&str, VarCheck)] = &[
    ("NCCL_IB_HCA", |c, k, v| Some(hca_check(c, k, v))),
    ("UCX_NET_DEVICES", |c, k, v| Some(hca_check(c, k, v))),
    ("NCCL_IB_GID_INDEX", |c, k, v| {
        Some(gid_check(c, k, v, &c.used_by("NCCL_IB_HCA")))
    }),
    ("UCX_IB_GID_INDEX", |c, k, v| {
        Some(gid_check(c, k, v, &c.used_by("UCX_NET_DEVICES")))
    }),
    ("NCCL_IB_TC", |c, k, v| {
        Some(tc_check(c, k, v, &c.used_by("NCCL_IB_HCA")))
    }),
    ("UCX_IB_TRAFFIC_CLASS", |c, k, v| {
        Some(tc_check(c, k, v, &c.used_by("UCX_NET_DEVICES")))
    }),
    ("NCCL_SOCKET_IFNAME", |c, k, v| {
        Some(socket_ifname_check(c, k, v))
    }),
    ("NCCL_IB_DISABLE", |_, k, v| {
        (v.trim() == "1").then(|| {
            check(
                "env",
                k,
                Status::Fail,
                "NCCL_IB_DISABLE=1: NCCL uses TCP sockets, not RDMA",
                Some("unset NCCL_IB_DISABLE".into()),
            )
        })
    }),
    ("NCCL_NET", |_, k, v| {
        v.trim().eq_ignore_ascii_case("socket").then(|| {
            check(
                "env",
                k,
                Status::Fail,
                "NCCL_NET=Socket: NCCL uses TCP sockets, not RDMA",
                Some("unset NCCL_NET (or NCCL_NET=IB)".into()),
            )
        })
    }),
    ("UCX_TLS", |_, k, v| {
        (!ucx_tls_has_rdma(v)).then(|| {
            check(
                "env",
                k,
                Status::Fail,
                format!("UCX_TLS={v} leaves out the RDMA transports (rc, dc, ud)"),
                Some("unset UCX_TLS, or include rc (e.g. UCX_TLS=rc,sm,self)".into()),
            )
        })
    }),
    ("OMPI_MCA_pml", |_, k, v| {
        (v.trim() != "ucx").then(|| {
            check(
                "env",
                k,
                Status::Warn,
                format!("OMPI_MCA_pml={v}: Open MPI's RDMA path on RoCE is UCX"),
                Some("set OMPI_MCA_pml=ucx".into()),
            )
        })
    }),
    ("OMPI_MCA_btl", |_, k, v| {
        (!v.trim().starts_with('^') && v.contains("openib")).then(|| {
            check(
                "env",
                k,
                Status::Warn,
                format!("OMPI_MCA_btl={v}: the openib BTL is deprecated and conflicts with UCX"),
                Some("set OMPI_MCA_btl=^openib".into()),
            )
        })
    }),
];

/// The checks. `addrs`: the interfaces' addresses on a live host (None on a fixture tree).
pub fn env_checks(
    host: &HostEnv,
    inv: &Inventory,
    qos: &[QosState],
    env: &BTreeMap<String, String>,
    addrs: Option<&BTreeMap<String, Vec<IpAddr>>>,
) -> Vec<Check> {
    let c = Ctx {
        host,
        inv,
        qos,
        env,
        addrs,
    };
    let mut out = Vec::new();
    let relevant_set: Vec<(&String, &String)> = env.iter().filter(|(k, _)| relevant(k)).collect();
    if relevant_set.is_empty() {
        out.push(check(
            "env",
            "",
            Status::Warn,
            "no NCCL_*, UCX_* or OMPI_MCA_* variable set",
            Some(format!(
                "set what `rocewatch env` prints here: {}",
                host.variables
                    .iter()
                    .map(|(k, v)| format!("{k}={}", word(v)))
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        ));
    }
    for (k, v) in relevant_set {
        if let Some((_, f)) = VARIABLES.iter().find(|(n, _)| n == k) {
            out.extend(f(&c, k, v));
        }
    }
    out.extend(unset_checks(&c));
    out
}

/// Needed but unset, for the libraries the application configures at all.
fn unset_checks(c: &Ctx) -> Vec<Check> {
    let uses = |prefix: &str| c.env.keys().any(|k| k.starts_with(prefix));
    let mut out = Vec::new();
    for (k, n) in &c.host.variables {
        let family = if k.starts_with("NCCL_") {
            "NCCL_"
        } else {
            "UCX_"
        };
        if c.env.contains_key(k) || !uses(family) {
            continue;
        }
        match k.as_str() {
            "NCCL_IB_GID_INDEX" if n != "0" => out.push(check(
                "env",
                k,
                Status::Warn,
                format!(
                    "{k} unset: NCCL before 2.21 uses GID index 0, not the RoCE v2 IPv4 GID at {n}"
                ),
                Some(format!("set {k}={}", word(n))),
            )),
            "NCCL_IB_TC" | "UCX_IB_TRAFFIC_CLASS" => out.push(check(
                "env",
                k,
                Status::Warn,
                format!(
                    "{k} unset: RDMA traffic goes out with traffic class 0, not the configured {n}"
                ),
                Some(format!("set {k}={}", word(n))),
            )),
            _ => {}
        }
    }
    out
}

/// The GID index an application chose, looked up on every RoCE port it uses.
fn gid_check(c: &Ctx, name: &str, v: &str, used: &[&PortEnv]) -> Check {
    let Ok(index) = v.trim().parse::<u32>() else {
        return check(
            "env",
            name,
            Status::Fail,
            format!("{name}={v}: not a number"),
            c.fix(name),
        );
    };
    let problems: Vec<String> = used
        .iter()
        .filter(|p| p.roce())
        .filter_map(|p| gid_problem(c.inv, p, index))
        .collect();
    if problems.is_empty() {
        check(
            "env",
            name,
            Status::Pass,
            format!("{name}={index}: the RoCE v2 IPv4 GID on every RoCE port used"),
            None,
        )
    } else {
        check("env", name, Status::Fail, problems.join("; "), c.fix(name))
    }
}

/// What is wrong with GID `index` of a RoCE port, if anything.
fn gid_problem(inv: &Inventory, p: &PortEnv, index: u32) -> Option<String> {
    let g = inv
        .devices
        .iter()
        .find(|d| d.name == p.device)
        .and_then(|d| d.ports.iter().find(|q| q.port == p.port))
        .and_then(|q| q.gids.iter().find(|g| g.index == index));
    match g {
        None => Some(format!("{}: no GID at index {index}", p.name())),
        Some(g) if g.gid_type.as_deref() != Some("RoCE v2") => Some(format!(
            "{}: GID {index} is {} ({}, {}): traffic leaves untagged and skips the lossless priority",
            p.name(),
            g.gid,
            g.gid_type.as_deref().unwrap_or("type unknown"),
            if g.gid.starts_with("fe80") { "link-local" } else { "RoCE v1" }
        )),
        Some(g) => match gid_ip(&g.gid) {
            Some(IpAddr::V4(_)) => None,
            _ => Some(format!(
                "{}: GID {index} is RoCE v2 but {} is not an IPv4 address (connections set up over IPv4 use the GID of that address)",
                p.name(),
                g.gid
            )),
        },
    }
}

/// Where a traffic class lands on the RoCE ports used: problems (no PFC on its
/// priority), ports that trust PCP, and ports whose PFC or DSCP map could not be read.
#[derive(Default)]
struct TcLanding {
    problems: Vec<String>,
    pcp: Vec<String>,
    undecided: Vec<String>,
}

fn tc_landing(qos: &[QosState], tc: u8, used: &[&PortEnv]) -> TcLanding {
    let dscp = tc >> 2;
    let mut l = TcLanding::default();
    for p in used.iter().filter(|p| p.roce()) {
        let st = qos
            .iter()
            .find(|s| s.device == p.device && s.port == p.port);
        let get = |k: &str| st.and_then(|s| value(s.settings.get(k)));
        match (get("trust"), get("pfc_enabled")) {
            (Some("dscp"), Some(pfc)) => {
                let map = get("dscp_map").unwrap_or("none");
                let prio = map
                    .split(',')
                    .filter_map(|pair| pair.split_once(':'))
                    .find(|(d, _)| d.trim().parse::<u8>() == Ok(dscp))
                    .and_then(|(_, pr)| pr.trim().parse::<u8>().ok())
                    .unwrap_or(dscp >> 3);
                let on: Vec<u8> = pfc
                    .split(',')
                    .filter_map(|x| x.trim().parse().ok())
                    .collect();
                if !on.contains(&prio) {
                    l.problems.push(format!(
                        "{}: traffic class {tc} is DSCP {dscp}, which maps to priority {prio}; PFC is on {pfc}",
                        p.name()
                    ));
                }
            }
            (Some(trust), _) if trust != "dscp" => {
                l.pcp.push(format!("{} (trust {trust})", p.name()))
            }
            _ => l.undecided.push(p.name()),
        }
    }
    l
}

/// A traffic class: what priority it lands on, and whether PFC is on there.
fn tc_check(c: &Ctx, name: &str, v: &str, used: &[&PortEnv]) -> Check {
    let Ok(tc) = v.trim().parse::<u8>() else {
        return check(
            "env",
            name,
            Status::Fail,
            format!("{name}={v}: not a traffic class (0-255)"),
            c.fix(name),
        );
    };
    let dscp = tc >> 2;
    let fix = c.fix(name);
    let TcLanding {
        problems,
        pcp,
        undecided,
    } = tc_landing(c.qos, tc, used);
    if !problems.is_empty() {
        return check(
            "env",
            name,
            Status::Fail,
            format!(
                "{}: RDMA traffic would not be lossless",
                problems.join("; ")
            ),
            fix,
        );
    }
    if !pcp.is_empty() {
        return check(
            "env",
            name,
            Status::Warn,
            format!("{name}={tc}: on {} the DSCP does not choose the priority, so the traffic class alone does not put RDMA on the lossless priority", pcp.join(", ")),
            Some("trust dscp on the RoCE netdevs (rocewatch qos apply with trust = \"dscp\"), or a VLAN whose PCP is the PFC priority".into()),
        );
    }
    match c.need(name) {
        None if !undecided.is_empty() => check(
            "env",
            name,
            Status::Skip,
            format!("{name}={tc}: no RoCE ToS is configured here to compare with, and PFC and the DSCP map of {} could not be read", undecided.join(", ")),
            None,
        ),
        Some(n) if n != tc.to_string() => check(
            "env",
            name,
            Status::Warn,
            format!("{name}={tc}, but the RoCE ToS configured on this host is {n}{}", if undecided.is_empty() { String::new() } else { format!(" (PFC and the DSCP map of {} could not be read: trust dscp expected)", undecided.join(", ")) }),
            fix,
        ),
        _ if !undecided.is_empty() => check(
            "env",
            name,
            Status::Pass,
            format!("{name}={tc} is the configured RoCE ToS (which priority it lands on could not be read for {})", undecided.join(", ")),
            None,
        ),
        _ => check("env", name, Status::Pass, format!("{name}={tc}: DSCP {dscp} lands on a priority with PFC"), None),
    }
}

/// NCCL_IB_HCA / UCX_NET_DEVICES: the ports the list selects, each known and ACTIVE.
fn hca_check(c: &Ctx, k: &str, v: &str) -> Check {
    let ports = &c.host.ports;
    let sel = if k == "NCCL_IB_HCA" {
        nccl_selected(v, ports)
    } else {
        ucx_selected(v, ports)
    };
    let down: Vec<String> = sel
        .chosen
        .iter()
        .filter(|p| !p.up)
        .map(|p| format!("{} is {}", p.name(), p.state))
        .collect();
    let named_down = sel.named.iter().any(|p| !p.up);
    let any_up = sel.chosen.iter().any(|p| p.up);
    let fix = c.fix(k);
    if !sel.unknown.is_empty() {
        check(
            "env",
            k,
            Status::Fail,
            format!("{k}={v}: no RDMA port named {}", sel.unknown.join(", ")),
            fix,
        )
    } else if !any_up {
        check(
            "env",
            k,
            Status::Fail,
            format!(
                "{k}={v} selects no ACTIVE RDMA port{}: traffic falls back to TCP",
                if down.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", down.join(", "))
                }
            ),
            fix,
        )
    } else if named_down {
        check(
            "env",
            k,
            Status::Fail,
            format!("{k}={v}: {}: it cannot carry traffic", down.join(", ")),
            fix,
        )
    } else if !down.is_empty() {
        // Picked up by a prefix or left by an exclusion: NCCL skips ports that are not
        // ACTIVE.
        check(
            "env",
            k,
            Status::Warn,
            format!(
                "{k}={v} also selects {} (skipped by the library)",
                down.join(", ")
            ),
            fix,
        )
    } else {
        let names = sel
            .chosen
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(",");
        let how = if sel.excluding {
            " (all but the excluded)"
        } else {
            ""
        };
        check(
            "env",
            k,
            Status::Pass,
            format!("{k}={v}: {names}{how} (ACTIVE)"),
            None,
        )
    }
}

/// Interface names known here, with an address if one is known: the live host's
/// addresses, else the addresses RoCE GIDs carry (IPoIB: none).
fn known_interfaces(c: &Ctx) -> BTreeMap<String, Option<IpAddr>> {
    let mut known: BTreeMap<String, Option<IpAddr>> = BTreeMap::new();
    if let Some(a) = c.addrs {
        for (nd, ips) in a {
            known.insert(nd.clone(), ips.first().copied());
        }
    }
    for p in &c.host.ports {
        for nd in [&p.netdev, &p.ip_netdev].into_iter().flatten() {
            let ip = if Some(nd) == p.ip_netdev.as_ref() {
                p.ipv4.map(IpAddr::V4)
            } else {
                None
            };
            let e = known.entry(nd.clone()).or_insert(None);
            if e.is_none() && c.addrs.is_none() {
                *e = ip;
            }
        }
    }
    known
}

/// NCCL_SOCKET_IFNAME: every entry an interface with an address. Entries are prefixes
/// (eth matches eth0, eth1) unless the list starts with `=`.
fn socket_ifname_check(c: &Ctx, k: &str, v: &str) -> Check {
    let exact = v.trim_start_matches('^').starts_with('=');
    let list = v.trim_start_matches('^').trim_start_matches('=');
    let mut problems = Vec::new();
    let mut evidence = Vec::new();
    let mut unknown = 0;
    let known = known_interfaces(c);
    for entry in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let matching: Vec<(&String, &Option<IpAddr>)> = known
            .iter()
            .filter(|(nd, _)| {
                if exact {
                    *nd == entry
                } else {
                    nd.starts_with(entry)
                }
            })
            .collect();
        match matching.iter().find_map(|(nd, ip)| ip.map(|ip| (nd, ip))) {
            Some((nd, ip)) => evidence.push(format!("{nd} has {ip}")),
            None if c.addrs.is_some() => problems.push(if matching.is_empty() {
                format!(
                    "no interface {}{entry}",
                    if exact { "named " } else { "starting with " }
                )
            } else {
                format!(
                    "{entry}: {} without an address",
                    matching
                        .iter()
                        .map(|(nd, _)| nd.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
            None if matching.iter().any(|(nd, _)| {
                c.host
                    .ports
                    .iter()
                    .any(|p| p.roce() && p.ip_netdev.as_ref() == Some(nd))
            }) =>
            {
                problems.push(format!("{entry}: its GID table holds no IPv4 address"))
            }
            None => {
                unknown += 1;
                evidence.push(format!(
                    "{entry}: its address cannot be read from a sysfs tree (not a RoCE netdev)"
                ));
            }
        }
    }
    if v.starts_with('^') {
        check(
            "env",
            k,
            Status::Info,
            format!("{k}={v}: excludes interfaces; NCCL picks among the others"),
            None,
        )
    } else if problems.is_empty() && unknown == evidence.len() {
        check("env", k, Status::Skip, evidence.join("; "), None)
    } else if problems.is_empty() {
        check("env", k, Status::Pass, evidence.join("; "), None)
    } else {
        check(
            "env",
            k,
            Status::Fail,
            format!("{}: NCCL's bootstrap cannot use it", problems.join("; ")),
            c.fix(k),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_as_people_write_them() {
        let e = parse_env("# job\nexport NCCL_IB_HCA=\"=mlx5_0:1\"\nNCCL_IB_GID_INDEX=3\n\nUCX_TLS='rc,sm'\nnot a line\nBAD-KEY=1\n");
        assert_eq!(e.len(), 3, "{e:?}");
        assert_eq!(e["NCCL_IB_HCA"], "=mlx5_0:1");
        assert_eq!(e["UCX_TLS"], "rc,sm");
    }

    #[test]
    fn ucx_tls_lists() {
        assert!(ucx_tls_has_rdma("rc,sm,self"));
        assert!(ucx_tls_has_rdma("all"));
        assert!(ucx_tls_has_rdma("^tcp"));
        assert!(!ucx_tls_has_rdma("tcp,sm,self"));
        assert!(!ucx_tls_has_rdma("^rc,dc,ud"));
        assert!(!ucx_tls_has_rdma("^ib"));
    }

    proptest::proptest! {
        #[test]
        fn env_parsing_never_panics(s in ".{0,300}") {
            let _ = parse_env(&s);
        }
    }
}
