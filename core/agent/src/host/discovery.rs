//! Discovery: every discovery plugin asked, their inventories merged, the latest kept for
//! whoever needs it (the QoS fingerprint, doctor).

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
}

impl Discovery {
    pub fn new(registry: &Registry, metrics: Arc<SelfMetrics>) -> Arc<Self> {
        Arc::new(Discovery {
            plugins: registry.of_kind(PluginKind::Discovery).cloned().collect(),
            metrics,
            latest: RwLock::new(Inventory::default()),
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
    /// answered.
    pub async fn discover(&self) -> Result<Inventory, CallError> {
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
        Ok(merged)
    }
}
