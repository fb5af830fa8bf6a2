//! The link layer of each port against what it is meant to run: Ethernet for RoCE,
//! InfiniBand for an IB fabric. What is meant comes from `--link-layer`, else from the
//! other ports of the host (the odd one out is suspect, not certainly wrong).

use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::SysRoot;

use crate::check::{check, Check, Status};
use crate::shell::{one_line, word_on_one_line};

/// The two link layers sysfs names (`ports/<n>/link_layer`).
pub const ETHERNET: &str = "Ethernet";
pub const INFINIBAND: &str = "InfiniBand";

/// Where the expectation came from.
enum Expected<'a> {
    Told(&'a str),
    /// The layer of `n` of the host's `of` ports.
    Majority {
        layer: &'a str,
        n: usize,
        of: usize,
    },
}

/// The `mlxconfig` port index of a port: the port number on a multi-port function
/// (mlx4), else the function number + 1 (mlx5 gives each port its own function).
fn mlx_port_index(address: &str, port: u32, ports_on_function: usize) -> u32 {
    if ports_on_function > 1 {
        return port;
    }
    address
        .rsplit('.')
        .next()
        .and_then(|f| f.parse::<u32>().ok())
        .map_or(port, |f| f + 1)
}

/// The fix for a port that should run `want`; `mellanox`: a Mellanox/NVIDIA adapter
/// (PCI vendor 0x15b3, or an mlx driver), whose firmware mlxconfig sets.
pub(crate) fn fix(mellanox: bool, address: Option<&str>, index: u32, want: &str) -> String {
    let (code, word) = if want == ETHERNET {
        (2, "ETH")
    } else {
        (1, "IB")
    };
    match (mellanox, address.map(word_on_one_line)) {
        (true, Some(a)) => format!(
            "mlxconfig -d {a} set LINK_TYPE_P{index}={code} ({word}), then mlxfwreset -d {a} reset (or reboot) for the firmware to apply it; mlxconfig -d {a} query LINK_TYPE_P{index} shows it"
        ),
        (_, Some(_)) => format!(
            "the port type is a firmware setting of the adapter at {}: set it to {want} with the vendor's tool, then reset the adapter or reboot",
            address.map(one_line).unwrap_or_default()
        ),
        _ => format!("set the port to {want} with the adapter vendor's tool"),
    }
}

pub(crate) fn link_layer_checks(root: &SysRoot, inv: &Inventory, told: Option<&str>) -> Vec<Check> {
    let ports: Vec<(&str, &rocewatch_plugin_api::Port, usize)> = inv
        .devices
        .iter()
        .flat_map(|d| {
            d.ports
                .iter()
                .map(move |p| (d.name.as_str(), p, d.ports.len()))
        })
        .collect();
    let known: Vec<&str> = ports
        .iter()
        .filter_map(|(_, p, _)| p.link_layer.as_deref())
        .collect();
    if known.is_empty() {
        // No port, or none whose link layer was read: nothing to judge.
        return vec![check(
            "link-layer",
            "",
            Status::Skip,
            if ports.is_empty() {
                "no RDMA port".to_string()
            } else {
                format!("no port's link layer is readable ({})", summary(&ports))
            },
            None,
        )];
    }
    let expected = match told {
        Some(t) => Some(Expected::Told(t)),
        None => [ETHERNET, INFINIBAND].into_iter().find_map(|layer| {
            let n = known.iter().filter(|l| **l == layer).count();
            (n * 2 > known.len() && n < known.len()).then_some(Expected::Majority {
                layer,
                n,
                of: known.len(),
            })
        }),
    };
    let Some(expected) = expected else {
        // Every port alike (or no majority) and nothing told: nothing to compare.
        return vec![check(
            "link-layer",
            "",
            Status::Pass,
            format!(
                "{} (pass --link-layer ethernet|infiniband to check against what the ports are meant to run)",
                summary(&ports)
            ),
            None,
        )];
    };
    let want = match expected {
        Expected::Told(t) | Expected::Majority { layer: t, .. } => t,
    };
    let mut out = Vec::new();
    for (dev, p, n_ports) in &ports {
        let subject = format!("{dev}/{}", p.port);
        let have = p.link_layer.as_deref().unwrap_or("unknown");
        let meant = |l: &str| if l == ETHERNET { "RoCE" } else { "InfiniBand" };
        if have == want {
            out.push(check(
                "link-layer",
                &subject,
                Status::Pass,
                format!("{have} ({}), as expected", meant(have)),
                None,
            ));
            continue;
        }
        let f = root.rdma_pci_function(dev);
        let vendor = f.as_ref().and_then(|f| root.pci_attr(&f.dir, "vendor"));
        let driver = inv
            .devices
            .iter()
            .find(|d| d.name == *dev)
            .and_then(|d| d.driver.as_deref());
        let mellanox = vendor.as_deref() == Some("0x15b3")
            || driver.is_some_and(|d| d.starts_with("mlx4") || d.starts_with("mlx5"));
        let address = f.as_ref().map(|f| f.address.as_str());
        let index = address.map_or(p.port, |a| mlx_port_index(a, p.port, *n_ports));
        let (status, why) = match expected {
            Expected::Told(_) => (
                Status::Fail,
                format!("--link-layer {}", want.to_lowercase()),
            ),
            Expected::Majority { n, of, .. } => (
                Status::Warn,
                format!("{n} of the host's {of} ports run {want}"),
            ),
        };
        out.push(check(
            "link-layer",
            &subject,
            status,
            format!(
                "{have}, but the port is meant for {} ({why}){}",
                if want == ETHERNET {
                    "RoCE (Ethernet)"
                } else {
                    "InfiniBand"
                },
                address.map_or(String::new(), |a| format!("; PCI function {a}"))
            ),
            Some(fix(mellanox, address, index, want)),
        ));
    }
    out
}

fn summary(ports: &[(&str, &rocewatch_plugin_api::Port, usize)]) -> String {
    ports
        .iter()
        .map(|(d, p, _)| {
            format!(
                "{d}/{} {}",
                p.port,
                p.link_layer.as_deref().unwrap_or("unknown")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlxconfig_fix_names_the_function_and_port() {
        assert_eq!(
            fix(true, Some("0000:41:00.0"), mlx_port_index("0000:41:00.0", 1, 1), ETHERNET),
            "mlxconfig -d 0000:41:00.0 set LINK_TYPE_P1=2 (ETH), then mlxfwreset -d 0000:41:00.0 reset (or reboot) for the firmware to apply it; mlxconfig -d 0000:41:00.0 query LINK_TYPE_P1 shows it"
        );
        // mlx5's second function is the card's port 2; mlx4's two ports share a function.
        assert_eq!(mlx_port_index("0000:3b:00.1", 1, 1), 2);
        assert_eq!(mlx_port_index("0000:81:00.0", 2, 2), 2);
        assert!(fix(true, Some("0000:81:00.0"), 2, INFINIBAND).contains("LINK_TYPE_P2=1 (IB)"));
        assert!(fix(false, Some("0000:5e:00.0"), 1, ETHERNET).contains("vendor's tool"));
        assert!(fix(true, None, 1, ETHERNET).contains("vendor's tool"));
    }
}
