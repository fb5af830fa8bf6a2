//! `rocewatch doctor --env FILE|-`: an application's NCCL_*/UCX_*/OMPI_* settings against
//! what this host needs (appenv), one check per variable, with the fix.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rocewatch_plugin_api::{Inventory, QosState};

use super::appenv::{value, HostEnv, PortEnv};
use super::check::{check, Check, Status};
use super::host::gid_ip;
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

/// The ports a list selects.
struct Selection<'a> {
    chosen: Vec<&'a PortEnv>,
    /// Entries that name no RDMA port.
    unknown: Vec<String>,
    /// Ports named exactly (`dev:port`), not by a prefix or an exclusion.
    named: Vec<&'a PortEnv>,
    excluding: bool,
}

/// NCCL_IB_HCA's `dev[:port]` entries: `^` excludes, `=` asks for exact names (else a
/// prefix matches, as NCCL does).
fn nccl_selected<'a>(list: &str, ports: &'a [PortEnv]) -> Selection<'a> {
    let (excluding, list) = match list.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let (exact, list) = match list.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let mut unknown = Vec::new();
    let mut named = Vec::new();
    let mut hit = vec![false; ports.len()];
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (dev, port) = match entry.split_once(':') {
            Some((d, p)) => (d, p.parse::<u32>().ok()),
            None => (entry, None),
        };
        let mut any = false;
        for (i, p) in ports.iter().enumerate() {
            let name_ok = if exact {
                p.device == dev
            } else {
                p.device.starts_with(dev)
            };
            if name_ok && port.is_none_or(|n| n == p.port) {
                hit[i] = true;
                any = true;
                if port.is_some() && p.device == dev && !excluding {
                    named.push(p);
                }
            }
        }
        if !any {
            unknown.push(entry.to_string());
        }
    }
    let chosen = ports
        .iter()
        .zip(hit)
        .filter(|(_, h)| *h != excluding)
        .map(|(p, _)| p)
        .collect();
    Selection {
        chosen,
        unknown: if excluding { Vec::new() } else { unknown },
        named,
        excluding,
    }
}

/// UCX_NET_DEVICES: exact `dev:port` names of RDMA ports, `all`, and names of other
/// devices (netdevs for TCP, shared memory) that are not RDMA ports and not checked here.
fn ucx_selected<'a>(list: &str, ports: &'a [PortEnv]) -> Selection<'a> {
    let mut s = Selection {
        chosen: Vec::new(),
        unknown: Vec::new(),
        named: Vec::new(),
        excluding: false,
    };
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if entry == "all" {
            s.chosen = ports.iter().filter(|p| p.up).collect();
            return s;
        }
        let Some((dev, port)) = entry.split_once(':') else {
            continue; // a netdev (TCP) or another transport's device
        };
        match ports
            .iter()
            .find(|p| p.device == dev && port.parse() == Ok(p.port))
        {
            Some(p) => {
                s.chosen.push(p);
                s.named.push(p);
            }
            None => s.unknown.push(entry.to_string()),
        }
    }
    s
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

/// The checks. `addrs`: the interfaces' addresses on a live host (None on a fixture tree).
pub fn env_checks(
    host: &HostEnv,
    inv: &Inventory,
    qos: &[QosState],
    env: &BTreeMap<String, String>,
    addrs: Option<&BTreeMap<String, Vec<IpAddr>>>,
) -> Vec<Check> {
    let need = |k: &str| {
        host.variables
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
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
    let ports = &host.ports;
    // The GID index an application chose, looked up on every RoCE port it uses.
    let gid_check = |name: &str, v: &str, used: &[&PortEnv]| -> Check {
        let Ok(index) = v.trim().parse::<u32>() else {
            return check(
                "env",
                name,
                Status::Fail,
                format!("{name}={v}: not a number"),
                need(name).map(|n| format!("set {name}={}", word(&n))),
            );
        };
        let fix = need(name).map(|n| format!("set {name}={}", word(&n)));
        let mut problems = Vec::new();
        for p in used.iter().filter(|p| p.roce()) {
            let g = inv
                .devices
                .iter()
                .find(|d| d.name == p.device)
                .and_then(|d| d.ports.iter().find(|q| q.port == p.port))
                .and_then(|q| q.gids.iter().find(|g| g.index == index));
            match g {
                None => problems.push(format!("{}: no GID at index {index}", p.name())),
                Some(g) if g.gid_type.as_deref() != Some("RoCE v2") => problems.push(format!(
                    "{}: GID {index} is {} ({}, {}): traffic leaves untagged and skips the lossless priority",
                    p.name(),
                    g.gid,
                    g.gid_type.as_deref().unwrap_or("type unknown"),
                    if g.gid.starts_with("fe80") { "link-local" } else { "RoCE v1" }
                )),
                Some(g) => match gid_ip(&g.gid) {
                    Some(IpAddr::V4(_)) => {}
                    _ => problems.push(format!(
                        "{}: GID {index} is RoCE v2 but {} is not an IPv4 address (connections set up over IPv4 use the GID of that address)",
                        p.name(),
                        g.gid
                    )),
                },
            }
        }
        if problems.is_empty() {
            check(
                "env",
                name,
                Status::Pass,
                format!("{name}={index}: the RoCE v2 IPv4 GID on every RoCE port used"),
                None,
            )
        } else {
            check("env", name, Status::Fail, problems.join("; "), fix)
        }
    };
    // A traffic class: what priority it lands on, and whether PFC is on there.
    let tc_check = |name: &str, v: &str, used: &[&PortEnv]| -> Check {
        let Ok(tc) = v.trim().parse::<u8>() else {
            return check(
                "env",
                name,
                Status::Fail,
                format!("{name}={v}: not a traffic class (0-255)"),
                need(name).map(|n| format!("set {name}={}", word(&n))),
            );
        };
        let dscp = tc >> 2;
        let fix = need(name).map(|n| format!("set {name}={}", word(&n)));
        let mut problems = Vec::new();
        let mut undecided = Vec::new();
        let mut pcp = Vec::new();
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
                        problems.push(format!(
                            "{}: traffic class {tc} is DSCP {dscp}, which maps to priority {prio}; PFC is on {pfc}",
                            p.name()
                        ));
                    }
                }
                (Some(trust), _) if trust != "dscp" => {
                    pcp.push(format!("{} (trust {trust})", p.name()))
                }
                _ => undecided.push(p.name()),
            }
        }
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
        match need(name) {
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
    };
    // The ports an application uses (its HCA list, else all active ones).
    let used_by = |var: &str| -> Vec<&PortEnv> {
        match env.get(var) {
            Some(list) if var == "UCX_NET_DEVICES" => ucx_selected(list, ports).chosen,
            Some(list) => nccl_selected(list, ports).chosen,
            None => ports.iter().filter(|p| p.up).collect(),
        }
    };
    for (k, v) in relevant_set {
        let c = match k.as_str() {
            "NCCL_IB_HCA" | "UCX_NET_DEVICES" => {
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
                let fix = need(k).map(|n| format!("set {k}={}", word(&n)));
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
                    // Picked up by a prefix or left by an exclusion: NCCL skips ports that
                    // are not ACTIVE.
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
            "NCCL_IB_GID_INDEX" => gid_check(k, v, &used_by("NCCL_IB_HCA")),
            "UCX_IB_GID_INDEX" => gid_check(k, v, &used_by("UCX_NET_DEVICES")),
            "NCCL_IB_TC" => tc_check(k, v, &used_by("NCCL_IB_HCA")),
            "UCX_IB_TRAFFIC_CLASS" => tc_check(k, v, &used_by("UCX_NET_DEVICES")),
            "NCCL_SOCKET_IFNAME" => {
                // Entries are prefixes (eth matches eth0, eth1) unless the list starts
                // with `=`.
                let exact = v.trim_start_matches('^').starts_with('=');
                let list = v.trim_start_matches('^').trim_start_matches('=');
                let mut problems = Vec::new();
                let mut evidence = Vec::new();
                let mut unknown = 0;
                // Interface names known here, with an address if one is known: the live
                // host's addresses, else the addresses RoCE GIDs carry (IPoIB: none).
                let mut known: BTreeMap<String, Option<IpAddr>> = BTreeMap::new();
                if let Some(a) = addrs {
                    for (nd, ips) in a {
                        known.insert(nd.clone(), ips.first().copied());
                    }
                }
                for p in ports {
                    for nd in [&p.netdev, &p.ip_netdev].into_iter().flatten() {
                        let ip = if Some(nd) == p.ip_netdev.as_ref() {
                            p.ipv4.map(IpAddr::V4)
                        } else {
                            None
                        };
                        let e = known.entry(nd.clone()).or_insert(None);
                        if e.is_none() && addrs.is_none() {
                            *e = ip;
                        }
                    }
                }
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
                        None if addrs.is_some() => problems.push(if matching.is_empty() {
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
                            ports
                                .iter()
                                .any(|p| p.roce() && p.ip_netdev.as_ref() == Some(nd))
                        }) =>
                        {
                            problems.push(format!("{entry}: its GID table holds no IPv4 address"))
                        }
                        None => {
                            unknown += 1;
                            evidence.push(format!("{entry}: its address cannot be read from a sysfs tree (not a RoCE netdev)"));
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
                        need(k).map(|n| format!("set {k}={}", word(&n))),
                    )
                }
            }
            "NCCL_IB_DISABLE" if v.trim() == "1" => check(
                "env",
                k,
                Status::Fail,
                "NCCL_IB_DISABLE=1: NCCL uses TCP sockets, not RDMA",
                Some("unset NCCL_IB_DISABLE".into()),
            ),
            "NCCL_NET" if v.trim().eq_ignore_ascii_case("socket") => check(
                "env",
                k,
                Status::Fail,
                "NCCL_NET=Socket: NCCL uses TCP sockets, not RDMA",
                Some("unset NCCL_NET (or NCCL_NET=IB)".into()),
            ),
            "UCX_TLS" if !ucx_tls_has_rdma(v) => check(
                "env",
                k,
                Status::Fail,
                format!("UCX_TLS={v} leaves out the RDMA transports (rc, dc, ud)"),
                Some("unset UCX_TLS, or include rc (e.g. UCX_TLS=rc,sm,self)".into()),
            ),
            "OMPI_MCA_pml" if v.trim() != "ucx" => check(
                "env",
                k,
                Status::Warn,
                format!("OMPI_MCA_pml={v}: Open MPI's RDMA path on RoCE is UCX"),
                Some("set OMPI_MCA_pml=ucx".into()),
            ),
            "OMPI_MCA_btl" if !v.trim().starts_with('^') && v.contains("openib") => check(
                "env",
                k,
                Status::Warn,
                format!("OMPI_MCA_btl={v}: the openib BTL is deprecated and conflicts with UCX"),
                Some("set OMPI_MCA_btl=^openib".into()),
            ),
            _ => continue,
        };
        out.push(c);
    }
    // Needed but unset, for the libraries the application configures at all.
    let uses = |prefix: &str| env.keys().any(|k| k.starts_with(prefix));
    for (k, n) in &host.variables {
        let family = if k.starts_with("NCCL_") {
            "NCCL_"
        } else {
            "UCX_"
        };
        if env.contains_key(k) || !uses(family) {
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
