//! The example rocewatch plugin: the template to copy when writing your own.
//!
//! It is built as a `.so` (`cargo build -p example-plugin` →
//! `target/debug/libexample_plugin.so`) and loaded by the agent through the C ABI:
//!
//! ```toml
//! [[plugins.external]]
//! path = "target/debug/libexample_plugin.so"
//! options = { output = "/var/lib/rocewatch/example-remediation.jsonl", step = 1 }
//! ```
//!
//! It implements two kinds:
//! - collector: emits `example.heartbeat` (unit `{tick}`, counter), which grows by `step`
//!   (default 1) on every collection, with the attribute `example.host` set to the host
//!   name the agent reports;
//! - remediation: appends every request it receives as one JSON line to the file named by
//!   the `output` option (required for remediation), with `"dry_run"` as given; it reports
//!   `executed: false` in dry-run.
//!
//! The rules of the ABI (see `rocewatch-plugin-sdk`): no async runtime inside the plugin,
//! calls may block (the host runs them on its blocking threads with a timeout), panics are
//! caught and reported, and the library is never unloaded.

use std::io::Write;
use std::path::PathBuf;

use rocewatch_plugin_api::*;
use rocewatch_plugin_sdk::{export_plugin, ExportPlugin};

/// The metric this plugin emits.
pub const HEARTBEAT: &str = "example.heartbeat";

#[derive(Debug, Default)]
pub struct Example {
    host: String,
    step: u64,
    ticks: u64,
    output: Option<PathBuf>,
}

impl Plugin for Example {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        self.host = ctx.host_name.clone();
        self.step = match ctx.options.get("step") {
            None => 1,
            Some(v) => v.as_u64().ok_or_else(|| {
                PluginError::InvalidOptions(format!("step: expected a positive integer, got {v}"))
            })?,
        };
        self.output = ctx
            .options
            .get("output")
            .and_then(|v| v.as_str())
            .map(PathBuf::from);
        Ok(())
    }
}

impl CollectorPlugin for Example {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        vec![MetricDescriptor {
            name: HEARTBEAT.into(),
            unit: "{tick}".into(),
            kind: MetricKind::Counter,
            description: "Grows by `step` on every collection of the example plugin.".into(),
        }]
    }

    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        self.ticks += self.step;
        Ok(ScrapeResult {
            samples: vec![Sample {
                name: HEARTBEAT.into(),
                unit: "{tick}".into(),
                value: Value::U64(self.ticks),
                attributes: Attributes::new([("example.host", &self.host)].into()),
                source: "example-plugin".into(),
                kind: MetricKind::Counter,
            }],
            errors: Vec::new(),
        })
    }
}

impl RemediationPlugin for Example {
    fn remediate(
        &mut self,
        request: &RemediationRequest,
    ) -> Result<RemediationOutcome, PluginError> {
        let path = self.output.as_ref().ok_or_else(|| {
            PluginError::InvalidOptions("output: required for remediation".into())
        })?;
        let line =
            serde_json::to_string(request).map_err(|e| PluginError::failed(e.to_string()))?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| PluginError::failed(format!("{}: {e}", path.display())))?;
        writeln!(f, "{line}")
            .map_err(|e| PluginError::failed(format!("{}: {e}", path.display())))?;
        Ok(RemediationOutcome {
            executed: !request.dry_run,
            message: format!(
                "{} {} for rule {} to {}",
                if request.dry_run {
                    "would record"
                } else {
                    "recorded"
                },
                request.action,
                request.rule,
                path.display()
            ),
        })
    }
}

impl ExportPlugin for Example {
    const NAME: &'static str = "example";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const KINDS: &'static [PluginKind] = &[PluginKind::Collector, PluginKind::Remediation];

    fn create() -> Self {
        Example::default()
    }

    fn as_collector(&mut self) -> Option<&mut dyn CollectorPlugin> {
        Some(self)
    }

    fn as_remediation(&mut self) -> Option<&mut dyn RemediationPlugin> {
        Some(self)
    }
}

export_plugin!(Example);
