//! Recorded `ethtool -S` outputs of mlx5, ice and bnxt through the collector: the same
//! PFC traffic on priority 3 reads the same on every vendor.

use std::path::Path;

use rocewatch_counters_ethtool::normalize::parse_ethtool_s;
use rocewatch_counters_ethtool::{EthtoolCounters, StatsSource};
use rocewatch_plugin_api::*;

/// Interfaces named after the recorded files.
struct Recorded;

impl StatsSource for Recorded {
    fn stats(&mut self, ifname: &str) -> std::io::Result<Option<Vec<(String, u64)>>> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata")
            .join(format!("{ifname}.txt"));
        match std::fs::read_to_string(p) {
            Ok(t) => Ok(Some(parse_ethtool_s(&t))),
            Err(_) => Ok(None),
        }
    }
}

fn collect(options: serde_json::Value) -> ScrapeResult {
    let mut c = EthtoolCounters::with_source(Box::new(Recorded));
    let mut ctx = PluginContext::new("/nonexistent");
    ctx.options = options;
    c.start(&ctx).unwrap();
    c.collect().unwrap()
}

fn find<'a>(
    r: &'a ScrapeResult,
    ifname: &str,
    metric: &str,
    attrs: &[(&str, &str)],
) -> Option<&'a Sample> {
    r.samples.iter().find(|s| {
        s.name == metric
            && s.attributes.get("network.interface.name") == Some(ifname)
            && attrs.iter().all(|(k, v)| s.attributes.get(k) == Some(*v))
    })
}

#[test]
fn pfc_priority_3_reads_the_same_on_every_vendor() {
    let r = collect(serde_json::json!({"interfaces": ["mlx5", "ice", "bnxt", "absent"]}));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    for nic in ["mlx5", "ice", "bnxt"] {
        let rx = find(
            &r,
            nic,
            "rdma.pfc.pause_frames",
            &[("rdma.priority", "3"), ("network.io.direction", "receive")],
        )
        .unwrap_or_else(|| panic!("{nic}: no rx pause frames"));
        assert_eq!(rx.value, Value::U64(148213), "{nic}");
        assert_eq!(rx.unit, "{frame}");
        let tx = find(
            &r,
            nic,
            "rdma.pfc.pause_frames",
            &[("rdma.priority", "3"), ("network.io.direction", "transmit")],
        )
        .unwrap();
        assert_eq!(tx.value, Value::U64(96204), "{nic}");
        // 802.3x pause: none, but read (mlx5 rx_pause_ctrl_phy, ice link_xoff_rx.nic,
        // bnxt rx_pause_frames).
        let link = find(
            &r,
            nic,
            "rdma.link.pause_frames",
            &[("network.io.direction", "receive")],
        )
        .unwrap_or_else(|| panic!("{nic}: no 802.3x pause frames"));
        assert_eq!(link.value, Value::U64(0), "{nic}");
    }
    // Transitions and durations: mlx5 (rx_prio3_pause_transition, rx_prio3_pause_duration)
    // and bnxt (pfc_pri3_rx_transitions, pfc_pri3_rx_duration_us); ice has neither.
    for (nic, transitions, duration) in [
        (
            "mlx5",
            "ethtool:rx_prio3_pause_transition",
            "ethtool:rx_prio3_pause_duration",
        ),
        (
            "bnxt",
            "ethtool:pfc_pri3_rx_transitions",
            "ethtool:pfc_pri3_rx_duration_us",
        ),
    ] {
        let rx3 = [("rdma.priority", "3"), ("network.io.direction", "receive")];
        let tr = find(&r, nic, "rdma.pfc.pause_transitions", &rx3).unwrap();
        assert_eq!((tr.value, &*tr.source), (Value::U64(70411), transitions));
        let d = find(&r, nic, "rdma.pfc.pause_duration", &rx3).unwrap();
        assert_eq!(
            (d.value, d.unit.as_ref(), &*d.source),
            (Value::U64(3320119), "us", duration)
        );
    }
    assert!(find(&r, "ice", "rdma.pfc.pause_transitions", &[]).is_none());
    let bnxt_tx = find(
        &r,
        "bnxt",
        "rdma.pfc.pause_duration",
        &[("rdma.priority", "3"), ("network.io.direction", "transmit")],
    )
    .unwrap();
    assert_eq!(bnxt_tx.value, Value::U64(1904772));
    // bnxt's bytes per priority (bnxt_tx_bytes_pri_arr); its continuous-pause events
    // stay raw (what they count is undocumented).
    let bnxt_bytes = find(
        &r,
        "bnxt",
        "rdma.priority.io",
        &[("rdma.priority", "3"), ("network.io.direction", "transmit")],
    )
    .unwrap();
    assert_eq!(
        (bnxt_bytes.value, &*bnxt_bytes.source),
        (Value::U64(2912341234123), "ethtool:tx_bytes_pri3")
    );
    assert!(find(&r, "bnxt", "rdma.pfc.storm_events", &[]).is_none());
    // mlx5's two discard counters of one priority: two series.
    let buf = find(
        &r,
        "mlx5",
        "rdma.priority.discards",
        &[("rdma.priority", "3"), ("rdma.discard.cause", "buffer")],
    )
    .unwrap();
    assert_eq!(buf.value, Value::U64(5));
    // Unrelated statistics stay out without the raw passthrough.
    assert!(r
        .samples
        .iter()
        .all(|s| s.name != "rdma.netdev.driver_stat"));
    assert!(r
        .samples
        .iter()
        .all(|s| !s.source.contains("ch0_arm") && !s.source.contains("rx_unicast")));
}

/// Every capture: one sample per series (metric and attributes) of an interface. Two
/// driver statistics on one series would take turns on it and read as a counter reset
/// every collection.
#[test]
fn no_two_statistics_share_a_series() {
    let r = collect(serde_json::json!({
        "interfaces": ["mlx5", "ice", "bnxt", "mlx5-global-pause"]
    }));
    let mut seen = std::collections::BTreeMap::new();
    for s in &r.samples {
        let key = format!("{} {:?}", s.name, s.attributes);
        if let Some(other) = seen.insert(key.clone(), s.source.clone()) {
            panic!("{key}: both {other} and {}", s.source);
        }
    }
    assert!(seen.len() > 30, "{seen:#?}");
}

#[test]
fn raw_passthrough_is_opt_in_and_filtered() {
    let r = collect(serde_json::json!({"interfaces": ["mlx5"], "raw_include": "^ch[0-9]+_arm$"}));
    let raw: Vec<&Sample> = r
        .samples
        .iter()
        .filter(|s| s.name == "rdma.netdev.driver_stat")
        .collect();
    assert_eq!(raw.len(), 1, "{raw:?}");
    assert_eq!(&raw[0].attributes["rdma.driver_stat"], "ch0_arm");
    assert_eq!(raw[0].value, Value::U64(51234));
}

#[test]
fn bad_options_are_named() {
    let mut c = EthtoolCounters::with_source(Box::new(Recorded));
    let mut ctx = PluginContext::new("/nonexistent");
    ctx.options = serde_json::json!({"raw_include": "("});
    let e = c.start(&ctx).unwrap_err().to_string();
    assert!(e.contains("raw_include"), "{e}");
    ctx.options = serde_json::json!({"interface": ["x"]});
    let e = c.start(&ctx).unwrap_err().to_string();
    assert!(e.contains("interface"), "{e}");
}

#[test]
fn no_netdevs_is_unsupported() {
    let mut c = EthtoolCounters::with_source(Box::new(Recorded));
    let dir = tempfile::tempdir().unwrap();
    c.start(&PluginContext::new(dir.path())).unwrap();
    assert!(matches!(c.collect(), Err(PluginError::Unsupported(_))));
}

#[cfg(target_os = "linux")]
#[test]
fn rdma_netdevs_that_do_not_exist_here_make_the_plugin_unsupported() {
    // The fixture's mlx5 ports map to ens1f0np0/ens1f1np1, which this host does not have.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../integration-tests/fixtures/mlx5-roce-dual-port/sys");
    let mut c = EthtoolCounters::new();
    c.start(&PluginContext::new(root)).unwrap();
    match c.collect() {
        Err(PluginError::Unsupported(m)) => {
            assert!(m.contains("ens1f0np0") && m.contains("ens1f1np1"), "{m}")
        }
        other => panic!("expected unsupported, got {other:?}"),
    }
}

/// A ConnectX-6 Dx pausing its peer with 802.3x pause (PFC off): the frames (the same
/// count as `tx_global_pause`, read once from `tx_pause_ctrl_phy`), the time paused, in
/// µs, and nothing per priority.
#[test]
fn mlx5_global_pause_reads_as_link_pause_with_its_duration() {
    let r = collect(serde_json::json!({"interfaces": ["mlx5-global-pause"]}));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let nic = "mlx5-global-pause";
    let tx = [("network.io.direction", "transmit")];
    let frames = find(&r, nic, "rdma.link.pause_frames", &tx).unwrap();
    assert_eq!(
        (frames.value, &*frames.source),
        (Value::U64(44061528), "ethtool:tx_pause_ctrl_phy")
    );
    let d = find(&r, nic, "rdma.link.pause_duration", &tx).unwrap();
    assert_eq!(
        (d.value, d.unit.as_ref(), &*d.source),
        (
            Value::U64(5961284324),
            "us",
            "ethtool:tx_global_pause_duration"
        )
    );
    let tr = find(&r, nic, "rdma.link.pause_transitions", &[]).unwrap();
    assert_eq!(tr.attributes.get("network.io.direction"), Some("receive"));
    // One sample per (metric, attributes): tx_global_pause is not counted a second time.
    let mut keys: Vec<String> = r
        .samples
        .iter()
        .map(|s| format!("{} {:?}", s.name, s.attributes))
        .collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "{keys:#?}");
    assert!(r.samples.iter().all(|s| !s.name.starts_with("rdma.pfc.")));
}
