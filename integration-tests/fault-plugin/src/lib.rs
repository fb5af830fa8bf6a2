//! A plugin that misbehaves on purpose, for the host's failure tests. Its collector reads
//! `mode` from the options: `ok`, `error`, `panic`, `hang` (sleeps `hang_ms`, default one
//! hour), `panic-on-start`. Its discovery kind always panics. Its remediation kind follows
//! `mode` the same way (`panic`, `hang`, `error`, else it reports success).

use std::time::Duration;

use rocewatch_plugin_api::*;
use rocewatch_plugin_sdk::{export_plugin, ExportPlugin};

#[derive(Default)]
pub struct Fault {
    mode: String,
    hang_ms: u64,
}

impl Plugin for Fault {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        self.mode = ctx
            .options
            .get("mode")
            .and_then(|v| v.as_str())
            .unwrap_or("ok")
            .to_string();
        self.hang_ms = ctx
            .options
            .get("hang_ms")
            .and_then(|v| v.as_u64())
            .unwrap_or(3_600_000);
        if self.mode == "panic-on-start" {
            panic!("fault plugin: panic in start");
        }
        Ok(())
    }
}

impl CollectorPlugin for Fault {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        vec![MetricDescriptor {
            name: "fault.value".into(),
            unit: "1".into(),
            kind: MetricKind::Gauge,
            description: "Always 1.".into(),
        }]
    }

    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        match self.mode.as_str() {
            "error" => Err(PluginError::failed("fault plugin: deliberate error")),
            "panic" => panic!("fault plugin: deliberate panic"),
            "hang" => {
                std::thread::sleep(Duration::from_millis(self.hang_ms));
                Ok(ScrapeResult::default())
            }
            _ => Ok(ScrapeResult {
                samples: vec![Sample {
                    name: "fault.value".into(),
                    unit: "1".into(),
                    value: Value::U64(1),
                    attributes: Default::default(),
                    source: "fault-plugin".into(),
                    kind: MetricKind::Gauge,
                }],
                errors: vec![],
            }),
        }
    }
}

impl RemediationPlugin for Fault {
    fn remediate(
        &mut self,
        request: &RemediationRequest,
    ) -> Result<RemediationOutcome, PluginError> {
        match self.mode.as_str() {
            "error" => Err(PluginError::failed("fault plugin: deliberate error")),
            "panic" => panic!("fault plugin: deliberate panic in remediate"),
            "hang" => {
                std::thread::sleep(Duration::from_millis(self.hang_ms));
                Ok(RemediationOutcome {
                    executed: false,
                    message: "woke up".into(),
                })
            }
            _ => Ok(RemediationOutcome {
                executed: !request.dry_run,
                message: format!("fault plugin: {} ok", request.action),
            }),
        }
    }
}

impl DiscoveryPlugin for Fault {
    fn discover(&mut self) -> Result<Inventory, PluginError> {
        panic!("fault plugin: discovery always panics")
    }
}

impl ExportPlugin for Fault {
    const NAME: &'static str = "fault";
    const VERSION: &'static str = "0.0.1";
    const KINDS: &'static [PluginKind] = &[
        PluginKind::Collector,
        PluginKind::Discovery,
        PluginKind::Remediation,
    ];

    fn create() -> Self {
        Fault::default()
    }

    fn as_collector(&mut self) -> Option<&mut dyn CollectorPlugin> {
        Some(self)
    }

    fn as_discovery(&mut self) -> Option<&mut dyn DiscoveryPlugin> {
        Some(self)
    }

    fn as_remediation(&mut self) -> Option<&mut dyn RemediationPlugin> {
        Some(self)
    }
}

export_plugin!(Fault);
