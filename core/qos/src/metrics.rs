//! The configuration as metrics: `rdma.qos.setting`, `rdma.qos.drift`, `rdma.qos.fingerprint`,
//! read every `[qos] interval` by the agent (and re-applied on drift when a rule says so).

use rocewatch_metrics::names;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use rocewatch_plugin_api::{
    AttrSet, Inventory, MetricKind, QosState, Sample, SetCache, Setting, Value,
};
use tokio::sync::watch;

use super::observe::{observe, ConfigPlugins};
use crate::diff::in_fingerprint;
use crate::QosConfig;
use rocewatch_runtime::host::discovery::Discovery;
use rocewatch_runtime::pipeline::Pipeline;

/// The setting's name, on `rdma.qos.*`.
pub const ATTR_SETTING: &str = names::QOS_SETTING;

/// The setting's value, on `rdma.qos.setting`.
pub const ATTR_VALUE: &str = "rdma.qos.value";

/// The fingerprint, on `rdma.qos.fingerprint`.
pub const ATTR_FINGERPRINT: &str = names::QOS_FINGERPRINT;

/// The pseudo-plugin the configuration metrics are stored under.
pub const PLUGIN: &str = "qos";

/// A stable digest (FNV-1a, 64 bits, hex) of the effective configuration of every port
/// and of every device's driver (its module's version, source digest and origin) and
/// firmware: equal on hosts configured alike, whatever their netdev names. Settings that
/// could not be read count as "unknown" (not why), as `qos diff` compares them
/// ([`crate::compare_hosts`]).
pub fn fingerprint(states: &[QosState], inventory: &Inventory) -> String {
    let mut lines = Vec::new();
    for s in states {
        for (k, v) in &s.settings {
            if !in_fingerprint(k) {
                continue;
            }
            let v = crate::diff::compared(k, v);
            lines.push(format!("{}/{} {k}={v}", s.device, s.port));
        }
    }
    for d in &inventory.devices {
        let module = d.driver_module.as_ref().map_or("?".to_string(), |m| {
            format!(
                "{} {} {} {}",
                m.name,
                m.version.as_deref().unwrap_or("-"),
                m.srcversion.as_deref().unwrap_or("-"),
                m.origin
            )
        });
        lines.push(format!(
            "{} driver={} module={module} fw={}",
            d.name,
            d.driver.as_deref().unwrap_or("?"),
            d.fw_ver.as_deref().unwrap_or("?")
        ));
    }
    lines.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for l in &lines {
        for b in l.bytes().chain(std::iter::once(b'\n')) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

pub(super) fn qos_sample(
    name: &'static str,
    value: f64,
    attrs: BTreeMap<String, String>,
    sets: &mut SetCache,
) -> Sample {
    let e = rocewatch_metrics::QOS_CATALOG
        .iter()
        .find(|e| e.name == name)
        .expect("qos metric is catalogued");
    Sample {
        name: name.into(),
        unit: e.unit.into(),
        value: Value::F64(value),
        attributes: sets.share(AttrSet::from(&attrs)),
        source: PLUGIN.into(),
        kind: MetricKind::Gauge,
    }
}

/// The configuration as samples: every setting (value 1, the value as an attribute),
/// drift per desired setting (1 differs, 0 as desired; none where it cannot be
/// compared), and the fingerprint. Each series' attributes come from `sets`: the read
/// before's `Arc` where they are the same.
pub fn samples(
    states: &[QosState],
    desired: &QosConfig,
    fingerprint: &str,
    sets: &mut SetCache,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let port_attrs = |s: &QosState| {
        let mut a = BTreeMap::new();
        a.insert(rocewatch_metrics::ATTR_DEVICE.to_string(), s.device.clone());
        a.insert(rocewatch_metrics::ATTR_PORT.to_string(), s.port.to_string());
        if let Some(n) = &s.netdev {
            a.insert(rocewatch_metrics::ATTR_NETDEV.to_string(), n.clone());
        }
        a
    };
    for s in states {
        for (k, v) in &s.settings {
            let mut a = port_attrs(s);
            a.insert(ATTR_SETTING.into(), k.clone());
            a.insert(
                ATTR_VALUE.into(),
                match v {
                    Setting::Value(v) => v.clone(),
                    Setting::Unsupported => "unsupported".into(),
                    Setting::Unknown(_) => "unknown".into(),
                },
            );
            out.push(qos_sample(names::QOS_SETTING, 1.0, a, sets));
        }
    }
    if !desired.desired.is_empty() {
        let plan = crate::plan(desired, states);
        let mut drift: BTreeMap<(String, u32, String), (Option<String>, bool)> = BTreeMap::new();
        for s in states {
            for k in crate::desired_for(desired, s).keys() {
                drift.insert(
                    (s.device.clone(), s.port, k.clone()),
                    (s.netdev.clone(), false),
                );
            }
        }
        for c in &plan.changes {
            if let Some(d) = drift.get_mut(&(c.at.device.clone(), c.at.port, c.at.setting.clone()))
            {
                d.1 = true;
            }
        }
        for b in &plan.blocked {
            drift.remove(&(b.at.device.clone(), b.at.port, b.at.setting.clone()));
        }
        for ((device, port, setting), (netdev, differs)) in drift {
            let mut a = port_attrs(&QosState {
                device,
                port,
                netdev,
                ..QosState::default()
            });
            a.insert(ATTR_SETTING.into(), setting);
            out.push(qos_sample(
                names::QOS_DRIFT,
                if differs { 1.0 } else { 0.0 },
                a,
                sets,
            ));
        }
    }
    out.push(qos_sample(
        names::QOS_FINGERPRINT,
        1.0,
        [(ATTR_FINGERPRINT.to_string(), fingerprint.to_string())].into(),
        sets,
    ));
    sets.sweep();
    out
}

/// Read the configuration every `[qos] interval` and store it as metrics, until
/// `shutdown` turns true.
pub async fn watch(
    plugins: ConfigPlugins,
    desired: QosConfig,
    discovery: Arc<Discovery>,
    pipeline: Arc<Pipeline>,
    mut shutdown: watch::Receiver<bool>,
) {
    let interval = desired.interval;
    if interval.is_zero() || plugins.iter().all(|(e, _)| e.instance.is_none()) {
        return;
    }
    let mut last_error = String::new();
    // At 2000 ports the view is 26 000 series: a re-read shares the sets it had.
    let mut sets = SetCache::default();
    loop {
        match observe(&plugins, pipeline.metrics()).await {
            Ok(states) => {
                let mut inv = discovery.latest();
                if inv.devices.is_empty() {
                    match discovery.discover().await {
                        Ok(i) => inv = i,
                        // A discovery plugin still stuck in a call that timed out: a
                        // fingerprint without drivers and firmware would differ from the
                        // fleet's for no reason. Read again next interval. (The schedule's
                        // own discovery at start is waited for, not busy.)
                        Err(e @ rocewatch_runtime::host::call::CallError::Busy { .. }) => {
                            tracing::debug!("qos: no inventory yet ({e}); next interval");
                            tokio::select! {
                                _ = tokio::time::sleep(interval) => {}
                                _ = shutdown.changed() => return,
                            }
                            continue;
                        }
                        Err(_) => {}
                    }
                }
                let fp = fingerprint(&states, &inv);
                let view = samples(&states, &desired, &fp, &mut sets);
                pipeline.ingest_at(PLUGIN, &view, SystemTime::now(), Instant::now());
                // A large host's view (26 000 series at 2000 ports) and the reads behind
                // it were built and dropped: their pages go back now, as a collection's do.
                if view.len() >= rocewatch_runtime::pipeline::scheduler::BIG_COLLECTION {
                    drop((view, states));
                    tokio::task::spawn_blocking(rocewatch_runtime::util::memory::release_freed);
                }
                last_error.clear();
            }
            Err(e) if !e.is_unsupported() && e.to_string() != last_error => {
                tracing::warn!("qos: {e}");
                last_error = e.to_string();
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::state as port;

    fn inv(fw: &str) -> Inventory {
        serde_json::from_value(serde_json::json!({"devices": [
            {"name": "mlx5_0", "node_guid": null, "fw_ver": fw, "driver": "mlx5_core", "ports": []}
        ]}))
        .unwrap()
    }

    #[test]
    fn fingerprint_equal_on_hosts_alike_whatever_their_netdev_names_and_reasons() {
        let v = |s: &str| Setting::Value(s.into());
        let a = [port(
            "mlx5_0",
            "ens1f0np0",
            &[
                ("pfc_enabled", v("3,4")),
                ("trust", Setting::Unknown("/host-a/path: EACCES".into())),
            ],
        )];
        let b = [port(
            "mlx5_0",
            "eth2",
            &[
                ("pfc_enabled", v("4,3")),
                ("trust", Setting::Unknown("another reason".into())),
            ],
        )];
        let fa = fingerprint(&a, &inv("28.39.1002"));
        assert_eq!(fa.len(), 16);
        assert_eq!(fa, fingerprint(&b, &inv("28.39.1002")));
        // What the switch announces, and the buffer total, are not the host's
        // configuration.
        let mut peer = a.clone();
        peer[0].settings.insert("peer_pfc_enabled".into(), v("3"));
        peer[0]
            .settings
            .insert("peer_app".into(), v("dscp-prio 26:3"));
        peer[0].settings.insert("buffer_total".into(), v("262016"));
        assert_eq!(fa, fingerprint(&peer, &inv("28.39.1002")));
        // A different firmware, or a different value, is a different fingerprint.
        assert_ne!(fa, fingerprint(&a, &inv("28.40.1000")));
        let c = [port("mlx5_0", "eth2", &[("pfc_enabled", v("3"))])];
        assert_ne!(fa, fingerprint(&c, &inv("28.39.1002")));
        // So is another build of the driver: a vendor package's, or another version.
        let with_module = |version: &str, origin: &str| {
            let mut i = inv("28.39.1002");
            i.devices[0].driver_module = Some(rocewatch_plugin_api::DriverModule {
                name: "mlx5_core".into(),
                version: Some(version.into()),
                srcversion: None,
                origin: origin.into(),
            });
            fingerprint(&a, &i)
        };
        let ofed = with_module("24.10-1.1.4", "out-of-tree");
        assert_ne!(fa, ofed);
        assert_eq!(ofed, with_module("24.10-1.1.4", "out-of-tree"));
        assert_ne!(ofed, with_module("23.10-2.1.3", "out-of-tree"));
        assert_ne!(ofed, with_module("24.10-1.1.4", "in-tree"));
    }

    #[test]
    fn drift_is_one_differs_zero_matches_absent_when_it_cannot_be_compared() {
        let v = |s: &str| Setting::Value(s.into());
        let states = [port(
            "mlx5_0",
            "eth2",
            &[
                ("mtu", v("1500")),
                ("cnp_dscp", v("48")),
                ("trust", Setting::Unsupported),
            ],
        )];
        let desired: QosConfig = toml::from_str(
            "[[desired]]\nsettings = { mtu = \"9000\", cnp_dscp = \"48\", trust = \"dscp\" }\n",
        )
        .unwrap();
        let s = samples(&states, &desired, "00", &mut SetCache::default());
        let drift: BTreeMap<String, f64> = s
            .iter()
            .filter(|s| s.name == "rdma.qos.drift")
            .map(|s| (s.attributes[ATTR_SETTING].to_string(), s.value.as_f64()))
            .collect();
        assert_eq!(
            drift,
            [("cnp_dscp".to_string(), 0.0), ("mtu".to_string(), 1.0)].into()
        );
        let settings: Vec<(&str, &str)> = s
            .iter()
            .filter(|s| s.name == "rdma.qos.setting")
            .map(|s| (&s.attributes[ATTR_SETTING], &s.attributes[ATTR_VALUE]))
            .collect();
        assert_eq!(
            settings,
            [
                ("cnp_dscp", "48"),
                ("mtu", "1500"),
                ("trust", "unsupported")
            ]
        );
        assert_eq!(
            &s.last().unwrap().attributes[ATTR_FINGERPRINT],
            "00",
            "one fingerprint sample"
        );
        // Without a desired state: no drift series at all.
        assert!(!samples(
            &states,
            &QosConfig::default(),
            "00",
            &mut SetCache::default()
        )
        .iter()
        .any(|s| s.name == "rdma.qos.drift"));
    }

    #[test]
    fn a_re_read_hands_out_the_sets_of_the_read_before_where_they_are_the_same() {
        let v = |s: &str| Setting::Value(s.into());
        let desired: QosConfig =
            toml::from_str("[[desired]]\nsettings = { mtu = \"9000\" }\n").unwrap();
        let mut sets = SetCache::default();
        let read = |mtu: &str, sets: &mut SetCache| {
            let states = [port(
                "mlx5_0",
                "eth2",
                &[("mtu", v(mtu)), ("trust", v("dscp"))],
            )];
            samples(&states, &desired, "00", sets)
        };
        let first = read("1500", &mut sets);
        let again = read("1500", &mut sets);
        assert_eq!(first.len(), again.len());
        for (a, b) in first.iter().zip(&again) {
            assert!(
                Arc::ptr_eq(&a.attributes, &b.attributes),
                "{:?}",
                b.attributes
            );
        }
        // A changed value is a new set; the others are still the first read's.
        let changed = read("9000", &mut sets);
        let mtu = |s: &[Sample]| {
            s.iter()
                .find(|x| x.name == "rdma.qos.setting" && &x.attributes[ATTR_SETTING] == "mtu")
                .map(|x| Arc::clone(&x.attributes))
                .unwrap()
        };
        assert_eq!(&mtu(&changed)[ATTR_VALUE], "9000");
        assert!(!Arc::ptr_eq(&mtu(&first), &mtu(&changed)));
        let shared = first
            .iter()
            .filter(|a| {
                changed
                    .iter()
                    .any(|b| Arc::ptr_eq(&a.attributes, &b.attributes))
            })
            .count();
        assert_eq!(shared, first.len() - 1, "all but the mtu setting's set");
        // What the last read did not share is not held: the cache keeps that read's four
        // sets (two settings, the drift, the fingerprint), not the old mtu value's.
        let old = Arc::downgrade(&mtu(&first));
        drop((first, again));
        assert!(old.upgrade().is_none(), "the mtu=1500 set is dropped");
        assert_eq!(sets.len(), changed.len());
    }
}
