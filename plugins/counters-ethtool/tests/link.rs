//! The link's history and its module, collected with the driver statistics: carrier
//! counters from a sysfs tree, the link state and FEC from replies built as the kernel's
//! `linkstate_fill_reply()` and `fec_fill_reply()` lay them out, modules at their own
//! interval. No NIC here has a module or FEC statistics (virtio-net and loopback answer
//! EOPNOTSUPP; Debian builds no netdevsim): the kernel side is this seam.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rocewatch_counters_ethtool::link::{module_samples, Answer, LinkSource};
use rocewatch_counters_ethtool::{EthtoolCounters, StatsSource};
use rocewatch_netlink::ethtool::{
    decode_fec, decode_linkstate, Fec, FecBin, FecCounter, FecMode, LinkState,
};
use rocewatch_netlink::ethtool_replies::{encode_fec_reply, encode_linkstate_reply};
use rocewatch_netlink::msg::messages;
use rocewatch_optics::{Alarm, Eeprom, Lane, Level, Measure, Module};
use rocewatch_plugin_api::*;

struct OneStat;

impl StatsSource for OneStat {
    fn stats(&mut self, _: &str) -> std::io::Result<Option<Vec<(String, u64)>>> {
        Ok(Some(vec![("rx_bits_phy".into(), 1_000_000)]))
    }
}

/// A port whose link is down for bad signal integrity (serdes loss of signal), RS FEC
/// with four lanes and a histogram, and a module of an identifier no decoder knows.
struct Kernel {
    module_reads: Arc<AtomicUsize>,
}

fn payload(b: &[u8]) -> Vec<u8> {
    messages(b).next().unwrap().unwrap().payload.to_vec()
}

impl LinkSource for Kernel {
    fn link_state(&mut self, ifname: &str) -> Answer<LinkState> {
        let s = LinkState {
            link: Some(false),
            ext_state: Some(3),
            ext_substate: Some(4),
            ext_down_count: Some(9),
        };
        decode_linkstate(&payload(&encode_linkstate_reply(0x15, 1, 2, ifname, &s)))
            .map(Some)
            .map_err(Into::into)
    }

    fn fec(&mut self, ifname: &str) -> Answer<Fec> {
        let f = Fec {
            auto: Some(false),
            active: Some(FecMode::Rs),
            corrected: Some(FecCounter {
                total: 10,
                lanes: vec![1, 2, 3, 4],
            }),
            uncorrectable: Some(FecCounter {
                total: 2,
                lanes: vec![],
            }),
            corrected_bits: None,
            histogram: vec![FecBin {
                low: 1,
                high: 3,
                value: Some(12),
                lanes: vec![],
            }],
        };
        decode_fec(&payload(&encode_fec_reply(
            0x15, 1, 2, ifname, &f, true, false,
        )))
        .map(Some)
        .map_err(Into::into)
    }

    fn module(&mut self, _: &str) -> Answer<(Eeprom, Vec<String>)> {
        self.module_reads.fetch_add(1, Ordering::SeqCst);
        let mut lower = [0u8; 128];
        lower[0] = 0x7f; // not SFP, QSFP or CMIS
        Ok(Some((
            Eeprom::new(lower),
            vec!["bank 0 page 03h: refused".into()],
        )))
    }
}

fn sysfs() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let net = d.path().join("class/net/eth0");
    std::fs::create_dir_all(&net).unwrap();
    for (f, v) in [
        ("carrier_changes", "7\n"),
        ("carrier_up_count", "4\n"),
        ("carrier_down_count", "3\n"),
    ] {
        std::fs::write(net.join(f), v).unwrap();
    }
    d
}

/// A collector on eth0 of a fresh sysfs tree reading modules every `secs`, and its
/// count of module reads.
fn started(secs: u64) -> (EthtoolCounters, Arc<AtomicUsize>, tempfile::TempDir) {
    let root = sysfs();
    let reads = Arc::new(AtomicUsize::new(0));
    let mut c =
        EthtoolCounters::with_source(Box::new(OneStat)).with_link_source(Box::new(Kernel {
            module_reads: reads.clone(),
        }));
    let mut ctx = PluginContext::new(root.path());
    ctx.options = serde_json::json!({"interfaces": ["eth0"], "module_interval_secs": secs});
    c.start(&ctx).unwrap();
    (c, reads, root)
}

fn one<'a>(r: &'a ScrapeResult, name: &str) -> Vec<&'a Sample> {
    r.samples.iter().filter(|s| s.name == name).collect()
}

#[test]
fn carrier_down_reason_fec_and_a_module_read_at_its_own_interval() {
    let (mut c, reads, _root) = started(3600);
    let r = c.collect().unwrap();
    let v = |name: &str| one(&r, name)[0].value;
    assert_eq!(v("rdma.link.carrier_changes"), Value::U64(7));
    assert_eq!(v("rdma.link.carrier_up_events"), Value::U64(4));
    assert_eq!(v("rdma.link.carrier_down_events"), Value::U64(3));
    assert_eq!(v("rdma.link.received_bits"), Value::U64(1_000_000));
    let down = one(&r, "rdma.link.down_reason");
    assert_eq!(
        down[0].attributes.get("rdma.link.reason"),
        Some("bad signal integrity")
    );
    assert_eq!(
        down[0].attributes.get("rdma.link.reason_detail"),
        Some("serdes ALOS (loss of signal)")
    );
    assert_eq!(
        one(&r, "rdma.link.fec.active")[0]
            .attributes
            .get("rdma.link.fec.mode"),
        Some("RS")
    );
    assert_eq!(v("rdma.link.fec.corrected_blocks"), Value::U64(10));
    assert_eq!(v("rdma.link.fec.uncorrectable_blocks"), Value::U64(2));
    let lanes = one(&r, "rdma.link.fec.lane.corrected_blocks");
    assert_eq!(lanes.len(), 4);
    assert_eq!(lanes[3].attributes.get("rdma.lane"), Some("3"));
    assert_eq!(lanes[3].value, Value::U64(4));
    // Not counted by the driver: no series, not a zero.
    assert!(one(&r, "rdma.link.fec.corrected_bits").is_empty());
    let bin = one(&r, "rdma.link.fec.codewords");
    assert_eq!(bin[0].attributes.get("rdma.link.fec.bin"), Some("1-3"));
    // The module: an unknown identifier and a refused page are errors, not samples.
    assert!(one(&r, "rdma.optics.info").is_empty());
    let msgs: Vec<&str> = r.errors.iter().map(|e| e.message.as_str()).collect();
    assert!(
        msgs.iter().any(|m| m.contains("identifier byte 0x7f")),
        "{msgs:?}"
    );
    assert!(msgs.iter().any(|m| m.contains("page 03h")), "{msgs:?}");
    let declared: Vec<String> = c.descriptors().into_iter().map(|d| d.name).collect();
    for s in &r.samples {
        assert!(
            declared.contains(&s.name.to_string()),
            "{} undeclared",
            s.name
        );
    }
    // Within the module interval the module is not read again.
    c.collect().unwrap();
    assert_eq!(reads.load(Ordering::SeqCst), 1);
}

/// `module_interval_secs` below its range would read the module every collection (an
/// I2C transaction a page, through firmware on mlx5): refused at start naming the key
/// and the range; its bounds are accepted.
#[test]
fn module_interval_out_of_range_is_refused_at_start() {
    for secs in [0u64, 9, 86_401] {
        let root = sysfs();
        let mut c = EthtoolCounters::with_source(Box::new(OneStat));
        let mut ctx = PluginContext::new(root.path());
        ctx.options = serde_json::json!({"interfaces": ["eth0"], "module_interval_secs": secs});
        let e = c.start(&ctx).expect_err("refused").to_string();
        assert!(
            e.contains("module_interval_secs") && e.contains("10 to 86400"),
            "{secs}: {e}"
        );
    }
    for secs in [10u64, 86_400] {
        let (mut c, reads, _root) = started(secs);
        c.collect().unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 1);
    }
}

/// A decoded module's readings: each one present is a sample in the catalog's unit;
/// one the module did not give (a dark lane's missing power here) is none, never zero.
#[test]
fn module_readings_absent_are_no_samples() {
    let m = Module {
        family: rocewatch_optics::Family::Sff8636,
        identifier_code: 0x11,
        identifier: "QSFP28".into(),
        vendor: Some("ACME".into()),
        vendor_oui: None,
        part_number: Some("QSFP-100G-SR4".into()),
        revision: None,
        serial_number: Some("SN123".into()),
        date_code: None,
        connector: None,
        wavelength_nm: None,
        revision_compliance: None,
        flat_memory: Some(false),
        module_state: None,
        host_lane_count: None,
        media_lane_count: None,
        diagnostics_implemented: true,
        rx_power_kind: Some("average"),
        temperature_c: Some(41.5),
        voltage_v: None,
        lanes: vec![
            Lane {
                lane: 1,
                bias_ma: Some(6.5),
                tx_power_mw: Some(0.9),
                rx_power_mw: Some(0.8),
                data_path_state: None,
                tx_disabled: None,
            },
            Lane {
                lane: 2,
                bias_ma: Some(6.4),
                tx_power_mw: Some(0.9),
                rx_power_mw: None,
                data_path_state: None,
                tx_disabled: None,
            },
        ],
        thresholds: None,
        alarms: vec![Alarm {
            measure: Measure::RxPower,
            level: Level::LowWarning,
            lane: Some(2),
            latched: true,
        }],
        problems: vec![],
    };
    let base = std::collections::BTreeMap::from([(
        "network.interface.name".to_string(),
        "eth0".to_string(),
    )]);
    let s = module_samples(&m, &base);
    let named = |n: &str| s.iter().filter(|x| x.name == n).collect::<Vec<_>>();
    assert_eq!(named("rdma.optics.temperature")[0].value, Value::F64(41.5));
    assert!(named("rdma.optics.voltage").is_empty());
    let rx = named("rdma.optics.lane.rx_power");
    assert_eq!(rx.len(), 1);
    assert_eq!(rx[0].attributes.get("rdma.lane"), Some("1"));
    assert_eq!(named("rdma.optics.lane.bias_current").len(), 2);
    let info = named("rdma.optics.info");
    assert_eq!(
        info[0].attributes.get("rdma.optics.serial_number"),
        Some("SN123")
    );
    let flag = named("rdma.optics.flag");
    assert_eq!(
        flag[0].attributes.get("rdma.optics.measure"),
        Some("receiver power")
    );
    assert_eq!(
        flag[0].attributes.get("rdma.optics.level"),
        Some("low warning")
    );
    assert_eq!(flag[0].attributes.get("rdma.lane"), Some("2"));
}
