//! The five plugin traits.
//!
//! Every call is synchronous and may block: the host runs it on a blocking thread with a
//! timeout. A plugin is `start`ed once with its [`PluginContext`], called many times, and
//! `stop`ped once; `start` after `stop` must work again (the contract test does it twice).

use crate::bandwidth::{BandwidthRequest, BandwidthResult};
use crate::model::*;
use crate::PluginError;

/// What every plugin has, whatever its kind.
pub trait Plugin: Send {
    /// A short, stable name (`counters-sysfs`, `example`).
    fn name(&self) -> &str;

    /// Prepare to be called. The default accepts any context.
    fn start(&mut self, _ctx: &PluginContext) -> Result<(), PluginError> {
        Ok(())
    }

    /// Release what `start` acquired.
    fn stop(&mut self) {}
}

/// Finds RDMA devices and ports.
pub trait DiscoveryPlugin: Plugin {
    fn discover(&mut self) -> Result<Inventory, PluginError>;
}

/// Produces metric samples.
pub trait CollectorPlugin: Plugin {
    /// Every metric this collector may emit; emitting anything else is a contract breach.
    fn descriptors(&self) -> Vec<MetricDescriptor>;

    /// One scrape. Partial failure is a value: return what could be read plus
    /// [`ScrapeResult::errors`]; return `Err` only when nothing could be read at all.
    fn collect(&mut self) -> Result<ScrapeResult, PluginError>;
}

/// Reads and applies RoCE/PFC/ECN configuration.
pub trait ConfigurationPlugin: Plugin {
    fn observe(&mut self) -> Result<Vec<QosState>, PluginError>;

    /// Apply one change; with `dry_run` only say what would happen.
    fn apply(&mut self, change: &QosChange, dry_run: bool) -> Result<ApplyOutcome, PluginError>;
}

/// Probes a peer.
pub trait ProbePlugin: Plugin {
    fn probe(&mut self, target: &ProbeTarget) -> Result<ProbeResult, PluginError>;

    /// Probe every target of a round, one result per target in the same order. The
    /// default probes them one after another; a plugin that can have many probes in
    /// flight at once (the verbs plugin does) overrides it, so that a dead peer costs the
    /// round one timeout instead of one timeout per dead peer.
    fn probe_many(&mut self, targets: &[ProbeTarget]) -> Result<Vec<ProbeResult>, PluginError> {
        targets.iter().map(|t| self.probe(t)).collect()
    }

    /// Run a bandwidth test against a peer's responder. Optional: the default says the
    /// plugin does not measure bandwidth.
    fn bandwidth(&mut self, _request: &BandwidthRequest) -> Result<BandwidthResult, PluginError> {
        Err(PluginError::Unsupported(format!(
            "the probe plugin {} does not run bandwidth tests",
            self.name()
        )))
    }
}

/// Acts when a rule fires or clears.
pub trait RemediationPlugin: Plugin {
    fn remediate(
        &mut self,
        request: &RemediationRequest,
    ) -> Result<RemediationOutcome, PluginError>;
}
