//! Which RDMA ports an application's list selects: NCCL_IB_HCA (`^` excludes, `=` exact,
//! else prefixes) and UCX_NET_DEVICES (exact `dev:port` names, `all`).

use rocewatch_sysfs::rails::PortEnv;

/// The ports a list selects.
pub(super) struct Selection<'a> {
    pub chosen: Vec<&'a PortEnv>,
    /// Entries that name no RDMA port.
    pub unknown: Vec<String>,
    /// Ports named exactly (`dev:port`), not by a prefix or an exclusion.
    pub named: Vec<&'a PortEnv>,
    pub excluding: bool,
}

/// NCCL_IB_HCA's `dev[:port]` entries: `^` excludes, `=` asks for exact names (else a
/// prefix matches, as NCCL does).
pub(super) fn nccl_selected<'a>(list: &str, ports: &'a [PortEnv]) -> Selection<'a> {
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
pub(super) fn ucx_selected<'a>(list: &str, ports: &'a [PortEnv]) -> Selection<'a> {
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
