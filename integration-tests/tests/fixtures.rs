//! `discover` and `collect --once` on every fixture tree.

use serde_json::Value;

use crate::support::*;

const CASES: &[&str] = &[
    "mlx5-roce-dual-port",
    "rxe-soft-roce",
    "ib-hca",
    "no-pma-restricted",
    "no-devices",
    "gpu-two-socket",
];

fn collect(case: &str) -> (Value, String) {
    let root = fixture(case);
    let o = rocewatch(
        &[
            "collect",
            "--once",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--format",
            "json",
        ],
        &[],
    );
    assert!(o.status.success(), "{case}: {}", stderr(&o));
    (serde_json::from_str(&stdout(&o)).unwrap(), stderr(&o))
}

fn discover(case: &str) -> Value {
    let root = fixture(case);
    let o = rocewatch(
        &["discover", "--sysfs-root", root.to_str().unwrap(), "--json"],
        &[],
    );
    assert!(o.status.success(), "{case}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// The value of the sample read from `source` on `device`.
fn value(doc: &Value, device: &str, source: &str) -> Option<u64> {
    doc["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == source && s["attributes"]["rdma.device"] == device)
        .map(|s| s["value"].as_u64().unwrap())
}

#[test]
fn golden_outputs_of_every_fixture() {
    for case in CASES {
        let d = discover(case);
        golden(
            &format!("{case}.discover.json"),
            &(serde_json::to_string_pretty(&d).unwrap() + "\n"),
        );
        let (c, _) = collect(case);
        golden(
            &format!("{case}.collect.json"),
            &normalize(&(serde_json::to_string_pretty(&c).unwrap() + "\n")),
        );
        let root = fixture(case);
        let t = rocewatch(&["discover", "--sysfs-root", root.to_str().unwrap()], &[]);
        golden(&format!("{case}.discover.txt"), &stdout(&t));
    }
}

#[test]
fn discover_json_has_the_documented_shape() {
    let d = discover("mlx5-roce-dual-port");
    let devs = d["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 2);
    let dev = &devs[0];
    assert_eq!(dev["name"], "mlx5_0");
    assert_eq!(dev["node_guid"], "b859:9f03:00c1:2a40");
    assert_eq!(dev["fw_ver"], "22.39.1002");
    let port = &dev["ports"][0];
    for key in [
        "port",
        "state",
        "phys_state",
        "link_layer",
        "rate",
        "netdev",
        "gids",
    ] {
        assert!(port.get(key).is_some(), "port lacks {key}: {port}");
    }
    assert_eq!(port["state"], "ACTIVE");
    assert_eq!(port["phys_state"], "LinkUp");
    assert_eq!(port["netdev"], "ens1f0np0");
    let gids = port["gids"].as_array().unwrap();
    assert_eq!(gids.len(), 4, "empty GID slots must be skipped: {gids:?}");
    let v2 = gids
        .iter()
        .find(|g| g["type"] == "RoCE v2" && g["gid"].as_str().unwrap().contains("ffff:0a00:0001"))
        .unwrap();
    assert_eq!(v2["index"], 3);
    assert_eq!(v2["netdev"], "ens1f0np0");
}

#[test]
fn mlx5_data_counters_are_bytes_and_lifespan_is_not_a_counter() {
    let case = "mlx5-roce-dual-port";
    let (c, _) = collect(case);
    for dev in ["mlx5_0", "mlx5_1"] {
        for f in ["counters/port_xmit_data", "counters/port_rcv_data"] {
            assert_eq!(
                value(&c, dev, f),
                Some(4 * fixture_counter(case, dev, f)),
                "{dev} {f}"
            );
        }
        assert_eq!(
            value(&c, dev, "counters/port_xmit_packets"),
            Some(fixture_counter(case, dev, "counters/port_xmit_packets"))
        );
        assert_eq!(
            value(&c, dev, "hw_counters/np_cnp_sent"),
            Some(fixture_counter(case, dev, "hw_counters/np_cnp_sent"))
        );
        assert_eq!(value(&c, dev, "hw_counters/lifespan"), None);
    }
    let names: Vec<&str> = c["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"rdma.port.hw_counter"),
        "every mlx5 hw counter has a catalog entry"
    );
    let sample = c["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "counters/port_xmit_data")
        .unwrap();
    assert_eq!(sample["name"], "rdma.port.io");
    assert_eq!(sample["unit"], "By");
    assert_eq!(sample["attributes"]["network.io.direction"], "transmit");
    assert_eq!(sample["attributes"]["network.interface.name"], "ens1f0np0");
    assert_eq!(sample["attributes"]["rdma.port"], "1");
}

#[test]
fn rxe_has_no_counters_directory_but_hw_counters() {
    let case = "rxe-soft-roce";
    let (c, _) = collect(case);
    let samples = c["samples"].as_array().unwrap();
    assert!(samples
        .iter()
        .all(|s| !s["source"].as_str().unwrap().starts_with("counters/")));
    assert_eq!(
        value(&c, "rxe0", "hw_counters/sent_pkts"),
        Some(fixture_counter(case, "rxe0", "hw_counters/sent_pkts"))
    );
    let sent = samples
        .iter()
        .find(|s| s["source"] == "hw_counters/sent_pkts")
        .unwrap();
    assert_eq!(sent["name"], "rdma.port.packets");
    assert_eq!(sent["attributes"]["network.interface.name"], "eth0");
    let d = discover(case);
    assert_eq!(
        d["devices"][0]["fw_ver"],
        Value::Null,
        "an empty fw_ver is absent"
    );
    assert_eq!(d["devices"][0]["ports"][0]["netdev"], "eth0");
    assert!(d["devices"][0]["ports"][0]["gids"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["type"] == "RoCE v2"));
}

#[test]
fn ib_hca_prefers_64_bit_counters_and_reports_down_ports() {
    let (c, _) = collect("ib-hca");
    let io: Vec<&Value> = c["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "rdma.port.io" && s["attributes"]["rdma.port"] == "1")
        .collect();
    assert_eq!(
        io.len(),
        2,
        "one series per direction, not counters/ and counters_ext/ both: {io:?}"
    );
    let tx = io
        .iter()
        .find(|s| s["attributes"]["network.io.direction"] == "transmit")
        .unwrap();
    assert_eq!(tx["source"], "counters_ext/port_xmit_data_64");
    assert_eq!(tx["value"], 4 * 123456789012u64);
    let up2 = c["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "rdma.port.up" && s["attributes"]["rdma.port"] == "2")
        .unwrap();
    assert_eq!(up2["value"], 0);
    let d = discover("ib-hca");
    assert_eq!(d["devices"][0]["ports"][0]["link_layer"], "InfiniBand");
    assert_eq!(d["devices"][0]["ports"][1]["state"], "DOWN");
    assert_eq!(
        d["devices"][0]["ports"][1]["netdev"],
        Value::Null,
        "port 2 has no netdev of its own"
    );
}

#[test]
fn no_pma_is_absent_unreadable_is_partial_vanished_is_skipped() {
    let case = "no-pma-restricted";
    let (c, err) = collect(case);
    assert_eq!(value(&c, "mlx5_4", "counters/port_xmit_packets"), Some(777));
    for f in [
        "counters/port_xmit_data",
        "counters/port_rcv_data",
        "counters/symbol_error",
    ] {
        assert_eq!(
            value(&c, "mlx5_4", f),
            None,
            "{f} reads N/A (no PMA): absent, never zero"
        );
    }
    assert_eq!(value(&c, "mlx5_4", "hw_counters/out_of_buffer"), Some(55));
    let errors = c["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0]["target"]
        .as_str()
        .unwrap()
        .ends_with("mlx5_4/ports/1/hw_counters/rx_write_requests"));
    assert!(
        err.contains("hw_counters/rx_write_requests"),
        "the partial error is reported: {err}"
    );
    assert!(c["samples"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["attributes"]["rdma.device"] != "mlx5_9"));
    let d = discover(case);
    assert_eq!(
        d["devices"].as_array().unwrap().len(),
        1,
        "the vanished mlx5_9 is not listed"
    );
}

#[test]
fn no_devices_is_empty_and_says_so() {
    let (c, err) = collect("no-devices");
    assert!(c["samples"].as_array().unwrap().is_empty());
    assert!(err.contains("no samples"), "{err}");
    let d = discover("no-devices");
    assert_eq!(d["devices"], serde_json::json!([]));
}

#[test]
fn device_filters_apply() {
    let root = fixture("mlx5-roce-dual-port");
    let o = rocewatch(
        &["collect", "--once", "--sysfs-root", root.to_str().unwrap()],
        &[("ROCEWATCH_DEVICES__EXCLUDE", "mlx5_1")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let c: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let devs: std::collections::BTreeSet<&str> = c["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["attributes"]["rdma.device"].as_str().unwrap())
        .collect();
    assert_eq!(devs.into_iter().collect::<Vec<_>>(), vec!["mlx5_0"]);
}

#[test]
fn json_logs_on_stderr_name_the_unreadable_file() {
    let root = fixture("no-pma-restricted");
    let o = rocewatch(
        &[
            "--log-format",
            "json",
            "--log-level",
            "warn",
            "collect",
            "--once",
            "--sysfs-root",
            root.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success());
    let logs: Vec<Value> = stderr(&o)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let warn = logs
        .iter()
        .find(|l| l["level"] == "WARN")
        .unwrap_or_else(|| panic!("no JSON warning in {}", stderr(&o)));
    assert!(
        warn["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("partial scrape"),
        "{warn}"
    );
    assert!(
        warn["fields"]["target"]
            .as_str()
            .unwrap()
            .ends_with("hw_counters/rx_write_requests"),
        "{warn}"
    );
    assert_eq!(warn["fields"]["plugin"], "counters-sysfs");
}
