//! Built-in collector plugin: the RDMA/NIC driver messages of the kernel log, counted by
//! pattern and device (`rdma.kernel.events{rdma.kernel.pattern, rdma.device}`),
//! cumulative from the plugin's start. The reading, the layouts, the patterns and the
//! options are `rocewatch_klog`'s, which `rocewatch doctor` reads a window with.

use rocewatch_klog::kmsg::{From, KmsgReader};
use rocewatch_klog::matcher::{Matcher, Tally};
pub use rocewatch_klog::Options;
use rocewatch_klog::MAX_PER_COLLECTION;
use rocewatch_metrics::{ATTR_DEVICE, ATTR_KERNEL_PATTERN, KERNEL_LOG_CATALOG};
use rocewatch_plugin_api::*;

/// The built-in kernel-log collector.
#[derive(Default)]
pub struct KernelLog {
    reader: Option<KmsgReader>,
    matcher: Option<Matcher>,
    tally: Tally,
    overwritten: u64,
    /// Why `start` found nothing to read (said again by every `collect`).
    unsupported: UnsupportedHere,
    /// The (pattern, device) series reported so far.
    reported: std::collections::BTreeSet<(String, String)>,
}

impl KernelLog {
    pub const NAME: &'static str = "kernel-log";

    pub fn new() -> Self {
        Self::default()
    }
}

impl Plugin for KernelLog {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        self.stop();
        // Nothing to read is not a failure to start: `collect` says why, once.
        let opened = self.open(ctx);
        self.unsupported.start(opened)
    }

    fn stop(&mut self) {
        self.reader = None;
        self.matcher = None;
        self.unsupported.clear();
    }
}

impl KernelLog {
    fn open(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let opts = Options::from_json(&ctx.options)?;
        let matcher = opts.matcher(&ctx.sysfs_root)?;
        let path = opts
            .source(&ctx.sysfs_root)
            .map_err(PluginError::Unsupported)?;
        let reader = KmsgReader::open(&path, From::End).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                PluginError::Unsupported(format!(
                    "{}: {e} (reading the kernel log needs CAP_SYSLOG, or kernel.dmesg_restrict=0)",
                    path.display()
                ))
            }
            _ => PluginError::Failed(format!("{}: {e}", path.display())),
        })?;
        self.reader = Some(reader);
        self.matcher = Some(matcher);
        self.tally = Tally::default();
        self.overwritten = 0;
        self.reported.clear();
        Ok(())
    }
}

impl CollectorPlugin for KernelLog {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        rocewatch_metrics::descriptors_of(KERNEL_LOG_CATALOG)
    }

    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        self.unsupported.check()?;
        let (Some(reader), Some(matcher)) = (self.reader.as_mut(), self.matcher.as_ref()) else {
            return Err(PluginError::Failed("kernel-log: not started".into()));
        };
        let batch = reader
            .read_available(MAX_PER_COLLECTION)
            .map_err(|e| PluginError::Failed(format!("{}: {e}", reader.path().display())))?;
        if !batch.records.is_empty() {
            // The counts before (not the messages), only when there are records: the steady
            // case copies nothing.
            let before: std::collections::BTreeMap<(String, String), u64> = self
                .tally
                .counts
                .iter()
                .map(|(k, h)| (k.clone(), h.count))
                .collect();
            for r in &batch.records {
                matcher.count(r, &mut self.tally);
            }
            // Log what changed, once per collection that saw new matches.
            for (key, hit) in &self.tally.counts {
                let was = before.get(key).copied().unwrap_or(0);
                if hit.count > was {
                    tracing::warn!(pattern = %key.0, device = %key.1, new = hit.count - was, last = %hit.last_message, "kernel log");
                }
            }
        }
        let mut errors: Vec<PartialError> = batch
            .errors
            .iter()
            .map(|e| PartialError {
                target: reader.path().display().to_string(),
                message: e.to_string(),
            })
            .collect();
        if batch.overwritten > 0 {
            self.overwritten += batch.overwritten;
            errors.push(PartialError {
                target: reader.path().display().to_string(),
                message: format!(
                    "the kernel overwrote records before they were read ({} times since start)",
                    self.overwritten
                ),
            });
        }
        // A series is first reported at 0 (its count before this collection's messages),
        // its count from the next collection on: a rule on the increase of a counter
        // needs a start value, and the first messages of a device are the ones that matter.
        let mut out = samples(&self.tally);
        for (s, key) in out.iter_mut().zip(self.tally.counts.keys()) {
            if self.reported.insert(key.clone()) {
                s.value = Value::U64(0);
            }
        }
        Ok(ScrapeResult {
            samples: out,
            errors,
        })
    }
}

/// One `rdma.kernel.events` sample per (pattern, device) seen.
pub fn samples(t: &Tally) -> Vec<Sample> {
    let e = &KERNEL_LOG_CATALOG[0];
    t.counts
        .iter()
        .map(|((pattern, device), hit)| {
            let a: AttrSet = [(ATTR_KERNEL_PATTERN, pattern), (ATTR_DEVICE, device)]
                .into_iter()
                .collect();
            Sample {
                name: e.name.into(),
                unit: e.unit.into(),
                value: Value::U64(hit.count),
                attributes: Attributes::new(a),
                source: "kmsg".into(),
                kind: e.kind,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::path::Path;

    fn ctx(root: &Path, options: serde_json::Value) -> PluginContext {
        let mut c = PluginContext::new(root);
        c.options = options;
        c
    }

    #[test]
    fn counts_from_start_cumulatively_by_pattern_and_device() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        // History before the start is not counted.
        std::fs::write(&log, "6,1,10,-;mlx5_core 0000:03:00.0 eth9: Link down\n").unwrap();
        let mut p = KernelLog::new();
        p.start(&ctx(
            dir.path(),
            serde_json::json!({"path": log, "patterns": {"aer": "AER"}}),
        ))
        .unwrap();
        assert!(p.collect().unwrap().samples.is_empty());
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"6,2,20,-;mlx5_core 0000:03:00.0 eth9: Link down\n6,3,30,-;mlx5_core 0000:03:00.0 eth9: Link up\n")
            .unwrap();
        let s = p.collect().unwrap().samples;
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].value, Value::U64(0), "a new series starts at 0");
        let s = p.collect().unwrap().samples;
        assert_eq!(s[0].value, Value::U64(2));
        assert_eq!(s[0].attributes.get(ATTR_KERNEL_PATTERN), Some("link_flap"));
        assert_eq!(s[0].attributes.get(ATTR_DEVICE), Some("0000:03:00.0"));
        // Nothing new: the same cumulative value.
        f.write_all(b"6,4,40,-;pcieport 0000:00:01.0: AER: Corrected error\nnot a record\n")
            .unwrap();
        let r = p.collect().unwrap();
        assert_eq!(r.samples[0].value, Value::U64(2));
        assert_eq!(r.samples.len(), 1, "pcieport is not a NIC driver");
        assert_eq!(r.errors.len(), 1);
        assert!(r.errors[0].message.contains("';'"), "{:?}", r.errors);
        p.stop();
        p.start(&ctx(dir.path(), serde_json::json!({"path": log})))
            .unwrap();
        assert!(p.collect().unwrap().samples.is_empty());
    }

    #[test]
    fn options_are_strict_and_a_fixture_root_without_a_path_is_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = KernelLog::new();
        p.start(&ctx(dir.path(), serde_json::json!({}))).unwrap();
        let e = p.collect().unwrap_err();
        assert!(
            matches!(e, PluginError::Unsupported(ref m) if m.contains("not the live /sys")),
            "{e}"
        );
        let e = p
            .start(&ctx(dir.path(), serde_json::json!({"paht": "/x"})))
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `paht`"), "{e}");
        let e = p
            .start(&ctx(
                dir.path(),
                serde_json::json!({"path": "/x", "patterns": {"bad": "("}}),
            ))
            .unwrap_err();
        assert!(e.to_string().contains("pattern bad"), "{e}");
        p.start(&ctx(
            dir.path(),
            serde_json::json!({"path": dir.path().join("none")}),
        ))
        .unwrap();
        let e = p.collect().unwrap_err();
        assert!(matches!(e, PluginError::Unsupported(_)), "{e}");
    }
}
