//! The default optics and link rules (configs/rules.toml, #52) against series as
//! counters-ethtool writes them (rdma.optics.flag, rdma.link.down_events,
//! rdma.link.carrier_changes, rdma.link.fec.uncorrectable_blocks, rdma.link.corrected_bits over rdma.link.received_bits):
//! each fires on the port that is bad, after its `for`, and not on the good one.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use rocewatch_plugin_api::{Attributes, MetricKind, Sample, Value};
use rocewatch_runtime::rules::{validate, Engine};
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::Store;
use tokio::time::Instant;

use common::default_rule;

fn sample(
    name: &'static str,
    ifname: &str,
    extra: &[(&str, &str)],
    value: Value,
    kind: MetricKind,
) -> Sample {
    let mut attrs: BTreeMap<String, String> = [
        ("network.interface.name", ifname),
        ("rdma.device", "mlx5_0"),
        ("rdma.port", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        attrs.insert(k.to_string(), v.to_string());
    }
    Sample {
        name: name.into(),
        unit: "1".into(),
        value,
        attributes: Attributes::new(attrs.into()),
        source: "test".into(),
        kind,
    }
}

/// A module flag that is on, as counters-ethtool writes it.
fn flag(ifname: &str, measure: &str, level: &str, lane: Option<&str>) -> Sample {
    let mut extra = vec![
        ("rdma.optics.measure", measure),
        ("rdma.optics.level", level),
    ];
    if let Some(l) = lane {
        extra.push(("rdma.lane", l));
    }
    sample(
        "rdma.optics.flag",
        ifname,
        &extra,
        Value::U64(1),
        MetricKind::Gauge,
    )
}

fn counter(name: &'static str, ifname: &str, v: u64) -> Sample {
    sample(name, ifname, &[], Value::U64(v), MetricKind::Counter)
}

/// Runs `rule` over `secs` seconds of collections every 10 s, `at(secs)` giving each
/// collection's samples; returns (second, firing, netdev) of each transition.
async fn run(
    name: &str,
    secs: u64,
    at: impl Fn(u64) -> Vec<Sample>,
) -> Vec<(u64, bool, Option<String>)> {
    let rule = default_rule(name);
    validate(std::slice::from_ref(&rule), rocewatch_metrics::kind_of).unwrap();
    let (store, m) = (Store::new(), SelfMetrics::default());
    let mut engine = Engine::new(&[rule]);
    let t0 = Instant::now();
    let mut seen = Vec::new();
    for s in (0..=secs).step_by(10) {
        let when = t0 + Duration::from_secs(s);
        tokio::time::advance(when.saturating_duration_since(Instant::now())).await;
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        store.ingest_at(
            "counters-ethtool",
            &at(s),
            &m,
            wall,
            std::time::Instant::now(),
        );
        for t in engine.evaluate(&store, Instant::now()) {
            let dev = t.labels.get("network.interface.name").map(str::to_string);
            seen.push((s, t.firing, dev));
        }
    }
    seen
}

fn on(s: u64, dev: &str) -> (u64, bool, Option<String>) {
    (s, true, Some(dev.to_string()))
}

#[tokio::test(start_paused = true)]
async fn rx_power_low_fires_on_the_low_lane_after_ten_minutes() {
    let seen = run("optics-rx-power-low", 700, |_| {
        vec![
            flag("eth0", "receiver power", "low warning", Some("2")),
            // Another measure's low flag and a high receive power flag do not count.
            flag("eth1", "laser bias current", "low warning", Some("1")),
            flag("eth2", "receiver power", "high warning", Some("1")),
        ]
    })
    .await;
    assert_eq!(seen, [on(600, "eth0")]);
}

#[tokio::test(start_paused = true)]
async fn temperature_high_fires_on_the_hot_module_only() {
    let seen = run("optics-temperature-high", 700, |_| {
        vec![
            flag("eth0", "temperature", "low warning", None),
            flag("eth1", "temperature", "high alarm", None),
        ]
    })
    .await;
    assert_eq!(seen, [on(600, "eth1")]);
}

#[tokio::test(start_paused = true)]
async fn dark_lane_fires_on_a_lane_with_loss_of_signal() {
    let seen = run("optics-dark-lane", 700, |_| {
        vec![
            flag("eth0", "rx loss of signal", "set", Some("3")),
            flag("eth1", "tx fault", "set", Some("1")),
        ]
    })
    .await;
    assert_eq!(seen, [on(600, "eth0")]);
}

/// SFF-8636 and CMIS flags are latched: one read's flag (300 s of repeated samples, then
/// clear at the next read) says the reading crossed since the read before, and fires
/// none of the flag rules; the same flag at every read for 10 minutes does.
#[tokio::test(start_paused = true)]
async fn a_latched_flag_seen_at_one_read_fires_no_flag_rule() {
    for (rule, measure, level) in [
        ("optics-rx-power-low", "receiver power", "low warning"),
        ("optics-temperature-high", "temperature", "high alarm"),
        ("optics-dark-lane", "rx loss of signal", "set"),
    ] {
        let seen = run(rule, 1200, |s| {
            // eth0: one read's latched flag (reads at 0, 300, 600, ...); eth1: every read.
            let mut out = vec![flag("eth1", measure, level, Some("1"))];
            if (300..600).contains(&s) {
                out.push(flag("eth0", measure, level, Some("1")));
            }
            out
        })
        .await;
        assert_eq!(seen, [on(600, "eth1")], "{rule}");
    }
}

#[tokio::test(start_paused = true)]
async fn flapping_fires_at_the_second_phy_down_in_ten_minutes_not_the_first() {
    // eth0's PHY goes down at 100 s and 300 s; eth1's once; eth2 is toggled by an
    // administrator (four carrier changes, no PHY down): link-flapping is the PHY's.
    let seen = run("link-flapping", 400, |s| {
        let downs = |times: &[u64]| times.iter().filter(|t| s >= **t).count() as u64;
        vec![
            counter("rdma.link.down_events", "eth0", 3 + downs(&[100, 300])),
            counter("rdma.link.down_events", "eth1", 3 + downs(&[100])),
            counter("rdma.link.down_events", "eth2", 3),
            counter(
                "rdma.link.carrier_changes",
                "eth2",
                2 + 2 * downs(&[100, 300]),
            ),
        ]
    })
    .await;
    assert_eq!(seen, [on(300, "eth0")]);
}

#[tokio::test(start_paused = true)]
async fn carrier_flapping_fires_at_the_second_flap_in_ten_minutes_not_the_first() {
    // eth0 flaps at 100 s and 300 s (two changes each); eth1 flaps once.
    let seen = run("link-carrier-flapping", 400, |s| {
        let flaps = |times: &[u64]| 2 * times.iter().filter(|t| s >= **t).count() as u64;
        vec![
            counter("rdma.link.carrier_changes", "eth0", 2 + flaps(&[100, 300])),
            counter("rdma.link.carrier_changes", "eth1", 2 + flaps(&[100])),
        ]
    })
    .await;
    assert_eq!(seen, [on(300, "eth0")]);
}

#[tokio::test(start_paused = true)]
async fn uncorrectable_fec_fires_when_the_count_grows() {
    let seen = run("fec-uncorrectable", 200, |s| {
        vec![
            counter(
                "rdma.link.fec.uncorrectable_blocks",
                "eth0",
                7 + u64::from(s >= 150),
            ),
            // A count that stays where it was (since boot) is history, not a fault.
            counter("rdma.link.fec.uncorrectable_blocks", "eth1", 5_000),
        ]
    })
    .await;
    assert_eq!(seen, [on(150, "eth0")]);
}

#[tokio::test(start_paused = true)]
async fn pre_fec_ber_fires_over_the_threshold_not_under() {
    // 100 Gb/s received; eth0 corrects 1e-5 of the bits, eth1 1e-6.
    let bits = 100_000_000_000u64;
    let seen = run("pre-fec-ber-high", 700, |s| {
        vec![
            counter("rdma.link.received_bits", "eth0", s * bits),
            counter("rdma.link.corrected_bits", "eth0", s * bits / 100_000),
            counter("rdma.link.received_bits", "eth1", s * bits),
            counter("rdma.link.corrected_bits", "eth1", s * bits / 1_000_000),
        ]
    })
    .await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (at, firing, dev) = &seen[0];
    assert!(*firing && dev.as_deref() == Some("eth0"), "{seen:?}");
    // The rate needs two points in its window, then `for` holds 5 minutes.
    assert!((300..=320).contains(at), "{seen:?}");
}
