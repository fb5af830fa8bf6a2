//! `rocewatch optics --eeprom-file`: the module dumps of `core/optics/tests/fixtures`
//! (made from that crate's builders, see their SOURCE.md) decoded through the binary, as
//! text (a golden file) and JSON; a file that is not a dump refused naming the line;
//! without a file, this host's ports (none on a VM: said, nothing made up).

use serde_json::Value;

use crate::support::*;

const FIXTURES: &str = "core/optics/tests/fixtures";

fn optics(args: &[&str]) -> std::process::Output {
    let out = rocewatch(args, &[]);
    assert!(
        out.status.code().is_some(),
        "rocewatch {args:?} was killed; stderr:\n{}",
        stderr(&out)
    );
    out
}

fn json_of(file: &str) -> Value {
    let path = format!("{FIXTURES}/{file}");
    let out = optics(&["optics", "--eeprom-file", &path, "--json"]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    v["modules"][0].clone()
}

#[test]
fn optics_text_of_an_sfp_with_its_rx_power_low() {
    let path = format!("{FIXTURES}/sfp-10g-sr-rx-low.hex");
    let out = optics(&["optics", "--eeprom-file", &path]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Temperature    44.35 °C"), "{text}");
    assert!(
        text.contains("lane 1       receiver power low alarm, receiver power low warning"),
        "{text}"
    );
    golden("optics/sfp-10g-sr-rx-low.txt", &text);
}

#[test]
fn optics_json_of_a_qsfp28_hexdump() {
    let m = json_of("qsfp28-sr4.hexdump");
    assert_eq!(m["identifier"], "QSFP28");
    assert_eq!(m["vendor"], "ACME OPTICS");
    assert_eq!(m["part_number"], "QSFP-100G-SR4");
    assert_eq!(m["serial_number"], "QSN0001");
    assert_eq!(m["temperature_c"], 39.5);
    assert_eq!(m["voltage_v"], 3.3);
    let lanes = m["lanes"].as_array().expect("lanes");
    assert_eq!(lanes.len(), 4);
    assert_eq!(lanes[0]["lane"], 1);
    assert_eq!(lanes[0]["bias_ma"], 7.0);
    assert_eq!(lanes[0]["tx_power_mw"], 0.7);
    assert_eq!(lanes[0]["rx_power_mw"], 0.8);
    assert_eq!(m["thresholds"]["temperature_c"]["low_alarm"], -10.0);
    assert_eq!(m["alarms"], Value::Array(vec![]));
    assert_eq!(m["problems"], Value::Array(vec![]));
}

#[test]
fn optics_json_of_a_cmis_module_with_lane_pages() {
    let m = json_of("qsfp-dd-dr4.hex");
    assert_eq!(m["family"], "cmis");
    assert_eq!(m["module_state"], "0x03 (ModuleReady)");
    assert_eq!(m["lanes"].as_array().map(Vec::len), Some(8));
    assert_eq!(m["lanes"][7]["lane"], 8);
    assert_eq!(m["thresholds"]["bias_ma"]["high_alarm"], 130.0);
    // Page 11h 128-131, a nibble a host lane (the fixture's builder: 0x44, activated).
    assert_eq!(m["lanes"][0]["data_path_state"], "DPActivated");
    assert_eq!(m["lanes"][7]["data_path_state"], "DPActivated");
}

/// Diagnostics claimed but all zero: said, and every reading null, never 0.
#[test]
fn optics_json_of_an_unanswered_dom_is_null_not_zero() {
    let m = json_of("sfp-zero-dom.bin");
    assert_eq!(m["temperature_c"], Value::Null);
    assert_eq!(m["voltage_v"], Value::Null);
    assert_eq!(m["lanes"], Value::Array(vec![]));
    let kinds: Vec<&str> = m["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["kind"].as_str())
        .collect();
    assert_eq!(kinds, vec!["diagnostics_all_zero"]);
}

#[test]
fn optics_refuses_a_file_that_is_not_a_dump_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pasted.txt");
    std::fs::write(
        &path,
        "Offset\t\tValues\n------\t\t------\n0x0000:\t\t03 04 0g\n",
    )
    .unwrap();
    let out = optics(&["optics", "--eeprom-file", path.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{err}");
    assert!(
        err.contains("pasted.txt") && err.contains("line 3") && err.contains("\"0g\""),
        "{err}"
    );
}

/// Without a file: this host's ports, read from the kernel. What it finds depends on the
/// host (a VM's virtio-net reads no module); whatever it is, nothing is made up: every
/// module shown is a netdev of this host, and a host without modules says so.
#[test]
fn optics_without_a_file_reads_this_hosts_ports() {
    let out = optics(&["optics", "--json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    let v: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let modules = v["modules"].as_array().expect("modules");
    for m in modules {
        let port = m["port"].as_str().expect("port");
        assert!(
            std::path::Path::new("/sys/class/net").join(port).exists(),
            "{port} is not a netdev of this host; stderr:\n{err}"
        );
    }
    if modules.is_empty() {
        let text = optics(&["optics"]);
        assert!(
            stdout(&text).starts_with("No transceiver module read"),
            "{}",
            stdout(&text)
        );
        // Not a skip: a host without modules saying so is what this host can check (the
        // kernel path with modules is tested by rocewatch-netlink's replayed replies).
        eprintln!("note: no port of this host reads a transceiver module (a VM's NIC): checked that it says so");
    }
}
