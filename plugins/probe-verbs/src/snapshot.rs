//! A port's raw counters (`counters/`, `counters_ext/`, `hw_counters/`), its rate and
//! its netdev's speed, read through the sysfs root: what the responder sends back after
//! a bandwidth test so that the prober sees both ends of the path. The prober turns the
//! file names into metrics with the same catalog the collectors use.

use std::collections::BTreeMap;

use rocewatch_plugin_api::PortSnapshot;
use rocewatch_sysfs::parse::{parse_counter, CounterText};
use rocewatch_sysfs::SysRoot;

const GROUPS: [&str; 3] = ["counters", "counters_ext", "hw_counters"];

/// Every readable counter file of the port, by `group/file`; unreadable and absent ones
/// are left out (a missing counter is not a zero).
pub(crate) fn counters(root: &SysRoot, dev: &str, port: u8) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for group in GROUPS {
        let Ok(files) = root.counter_files(dev, port as u32, group) else {
            continue;
        };
        for f in files {
            let path = root.port_dir(dev, port as u32).join(group).join(&f);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            if let CounterText::Value(v) = parse_counter(&text) {
                out.insert(format!("{group}/{f}"), v);
            }
        }
    }
    out
}

/// The port's description and its counters now (as `before`; `after` is filled later).
pub(crate) fn begin(root: &SysRoot, dev: &str, port: u8) -> PortSnapshot {
    let rate = root.port_attr(dev, port as u32, "rate").ok().flatten();
    let gids = root.gids(dev, port as u32).unwrap_or_default();
    let netdev = root.port_netdev(dev, port as u32, &gids);
    let netdev_speed_mbps = netdev.as_deref().and_then(|n| {
        root.netdev_attr(n, "speed")
            .ok()
            .flatten()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|s| *s > 0)
            .map(|s| s as u64)
    });
    PortSnapshot {
        device: dev.to_string(),
        port,
        rate,
        netdev,
        netdev_speed_mbps,
        before: counters(root, dev, port),
        after: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_soft_roce_port_from_its_fixture() {
        let root = SysRoot::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures/rxe-soft-roce/sys"),
        );
        let s = begin(&root, "rxe0", 1);
        assert!(s.before.contains_key("hw_counters/sent_pkts"), "{s:?}");
        assert!(s.rate.is_some(), "{s:?}");
        assert!(counters(&root, "rxe9", 1).is_empty());
    }
}
