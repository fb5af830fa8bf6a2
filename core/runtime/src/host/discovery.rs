//! Discovery: every discovery plugin asked, their inventories merged, the latest kept for
//! whoever needs it (the QoS fingerprint, doctor). One discovery runs at a time: the
//! schedule and the QoS loop both ask at start, and a second call of a plugin while its
//! first runs would be refused as `busy` (and counted as a plugin error).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rocewatch_plugin_api::{Inventory, PluginKind};

use super::call::{self, CallError};
use super::registry::{Entry, Instance, Registry};
use crate::selfmetrics::SelfMetrics;

/// The discovery plugins and the inventory of their last run.
pub struct Discovery {
    plugins: Vec<Entry>,
    metrics: Arc<SelfMetrics>,
    latest: RwLock<Inventory>,
    /// Held while a discovery runs.
    running: tokio::sync::Mutex<()>,
    /// Discoveries that succeeded so far.
    succeeded: AtomicU64,
}

impl Discovery {
    pub fn new(registry: &Registry, metrics: Arc<SelfMetrics>) -> Arc<Self> {
        Arc::new(Discovery {
            plugins: registry.of_kind(PluginKind::Discovery).cloned().collect(),
            metrics,
            latest: RwLock::new(Inventory::default()),
            running: tokio::sync::Mutex::new(()),
            succeeded: AtomicU64::new(0),
        })
    }

    /// The inventory of the last discovery.
    pub fn latest(&self) -> Inventory {
        self.latest
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Run every discovery plugin once and merge their inventories. Fails when none
    /// answered. A call made while another runs waits for it and takes its inventory
    /// when it succeeded (it is as fresh as this call asked for); otherwise it runs.
    pub async fn discover(&self) -> Result<Inventory, CallError> {
        let before = self.succeeded.load(Ordering::SeqCst);
        let _one = self.running.lock().await;
        if self.succeeded.load(Ordering::SeqCst) != before {
            return Ok(self.latest());
        }
        let mut merged = Inventory::default();
        let mut last_err = None;
        let mut any_ok = false;
        for e in &self.plugins {
            match call::call(e, e.timeout, &self.metrics, |i| match i {
                Instance::Discovery(d) => d.discover(),
                _ => Ok(Inventory::default()),
            })
            .await
            {
                Ok(inv) => {
                    any_ok = true;
                    merged.devices.extend(inv.devices);
                }
                Err(err) => last_err = Some(err),
            }
        }
        if let (false, Some(e)) = (any_ok, last_err) {
            return Err(e);
        }
        *self.latest.write().unwrap_or_else(|p| p.into_inner()) = merged.clone();
        self.succeeded.fetch_add(1, Ordering::SeqCst);
        Ok(merged)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    use rocewatch_plugin_api::{Device, DiscoveryPlugin, Plugin, PluginError};

    use super::*;
    use crate::host::registry::{Origin, State, Status};

    /// A discovery plugin that takes a while and counts its calls.
    struct Slow(Arc<AtomicUsize>);

    impl Plugin for Slow {
        fn name(&self) -> &str {
            "slow"
        }
    }

    impl DiscoveryPlugin for Slow {
        fn discover(&mut self) -> Result<Inventory, PluginError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            Ok(Inventory {
                devices: vec![Device {
                    name: "mlx5_0".into(),
                    ..Device::default()
                }],
            })
        }
    }

    fn registry(calls: &Arc<AtomicUsize>) -> Registry {
        let status = Status {
            name: "slow".into(),
            kind: Some(PluginKind::Discovery),
            origin: Origin::Builtin,
            abi: "-".into(),
            state: State::Started,
            last_error: None,
            calls: 0,
            errors: 0,
        };
        Registry {
            entries: vec![Entry {
                name: "slow".into(),
                kind: Some(PluginKind::Discovery),
                origin: Origin::Builtin,
                settings: Default::default(),
                interval: Duration::from_secs(60),
                timeout: Duration::from_secs(5),
                instance: Some(Arc::new(Mutex::new(Instance::Discovery(Box::new(Slow(
                    Arc::clone(calls),
                )))))),
                busy: Arc::new(AtomicBool::new(false)),
                status: Arc::new(Mutex::new(status)),
            }],
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn discoveries_asked_at_once_share_one_run_and_none_is_busy() {
        // At start the scheduler's discovery and the QoS loop's ask together.
        let calls = Arc::new(AtomicUsize::new(0));
        let metrics = Arc::new(SelfMetrics::default());
        let d = Discovery::new(&registry(&calls), Arc::clone(&metrics));
        let asks: Vec<_> = (0..4)
            .map(|_| {
                let d = Arc::clone(&d);
                tokio::spawn(async move { d.discover().await })
            })
            .collect();
        for a in asks {
            let inv = a.await.unwrap().expect("every caller gets the inventory");
            assert_eq!(inv.devices[0].name, "mlx5_0");
        }
        assert_eq!(
            metrics.plugin_errors("slow", rocewatch_metrics::labels::PluginErrorReason::Busy),
            0,
            "counted busy"
        );
        assert!(
            calls.load(Ordering::SeqCst) < 4,
            "callers that waited took the run that ended meanwhile"
        );
        // A later ask runs again.
        let before = calls.load(Ordering::SeqCst);
        d.discover().await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), before + 1);
    }
}
