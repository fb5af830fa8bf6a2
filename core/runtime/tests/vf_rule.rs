//! The default rule `vf-link-disabled` (configs/rules.toml) against the series
//! counters-ethtool emits for SR-IOV VFs: it fires, after its `for`, on the VF whose link
//! state is `disable`, and only on that one.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use rocewatch_plugin_api::{Attributes, MetricKind, Sample, Value};
use rocewatch_runtime::rules::{validate, Engine};
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::Store;
use tokio::time::Instant;

use common::default_rule;

/// `rdma.vf.info` of one VF, as counters-ethtool writes it.
fn info(vf: &str, link_state: &str) -> Sample {
    let attrs: BTreeMap<String, String> = [
        ("network.interface.name", "ens1f0np0"),
        ("rdma.vf", vf),
        ("rdma.vf.pci_address", "0000:3b:00.5"),
        ("rdma.vf.vlan", "100"),
        ("rdma.vf.qos", "3"),
        ("rdma.vf.link_state", link_state),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Sample {
        name: "rdma.vf.info".into(),
        unit: "{vf}".into(),
        value: Value::U64(1),
        attributes: Attributes::new(attrs.into()),
        source: "test".into(),
        kind: MetricKind::Gauge,
    }
}

#[tokio::test(start_paused = true)]
async fn vf_link_disabled_fires_on_the_disabled_vf_only() {
    let rule = default_rule("vf-link-disabled");
    validate(std::slice::from_ref(&rule), rocewatch_metrics::kind_of).unwrap();
    let (store, m) = (Store::new(), SelfMetrics::default());
    let mut engine = Engine::new(&[rule]);
    let samples = [info("2", "auto"), info("3", "disable")];
    let t0 = Instant::now();
    let mut fired = Vec::new();
    for secs in (0..=90).step_by(10) {
        let at = t0 + Duration::from_secs(secs);
        tokio::time::advance(at.saturating_duration_since(Instant::now())).await;
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        store.ingest_at(
            "counters-ethtool",
            &samples,
            &m,
            wall,
            std::time::Instant::now(),
        );
        for t in engine.evaluate(&store, Instant::now()) {
            let vf = t.labels.get("rdma.vf").map(str::to_string);
            fired.push((secs, t.firing, vf));
        }
    }
    assert_eq!(fired, [(60, true, Some("3".to_string()))]);
}
