//! Built-in collector plugin: the RDMA/NIC driver messages of the kernel log, counted by
//! pattern and device (`rdma.kernel.events{rdma.kernel.pattern, rdma.device}`),
//! cumulative from the plugin's start. `rocewatch doctor` reads the same records over a
//! window with [`scan`].
//!
//! Options (`[plugins.builtin.kernel-log.options]`):
//! - `path`: the kernel log device, default `/dev/kmsg`. A regular file of records (one
//!   per line, as `/dev/kmsg` returns them) works the same: recorded logs, tests. When the
//!   agent's sysfs root is not the live `/sys` (a fixture tree) and no `path` is given,
//!   the plugin is unsupported: this host's kernel log says nothing about that tree.
//! - `patterns`: a table of name = regular expression, added to the catalog's default
//!   set (`rocewatch_metrics::KERNEL_LOG_PATTERNS`; a default's name replaces it).
//! - `default_patterns`: false to count only `patterns` (default true).
//! - `drivers`: the drivers whose messages count (the first word of a message), default
//!   [`matcher::DEFAULT_DRIVERS`].
//!
//! Layout: [`kmsg`] parses and reads records, [`matcher`] filters, matches and attributes
//! them to devices; this file is the plugin and the doctor's scan.

pub mod kmsg;
pub mod matcher;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rocewatch_metrics::{ATTR_DEVICE, ATTR_KERNEL_PATTERN, KERNEL_LOG_CATALOG};
use rocewatch_plugin_api::*;

use kmsg::{From, KmsgReader};
use matcher::{DeviceMap, Matcher, Tally};

/// The kernel log device.
pub const DEFAULT_PATH: &str = "/dev/kmsg";

fn default_true() -> bool {
    true
}

/// Options of the plugin (and of doctor's kernel-log check).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// The kernel log device or a file of recorded records.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Extra patterns, name = regular expression.
    #[serde(default)]
    pub patterns: BTreeMap<String, String>,
    /// Start from the catalog's default patterns.
    #[serde(default = "default_true")]
    pub default_patterns: bool,
    /// Drivers whose messages count (default: the RDMA/RoCE NIC drivers).
    #[serde(default)]
    pub drivers: Option<Vec<String>>,
    /// Device globs (shared with the sysfs plugins through `[devices]`; unused here, the
    /// device filter applies to what the other plugins read).
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            path: None,
            patterns: BTreeMap::new(),
            default_patterns: true,
            drivers: None,
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

impl Options {
    /// Decode the plugin's options; errors name the key.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, PluginError> {
        serde_json::from_value(v.clone())
            .map_err(|e| PluginError::InvalidOptions(format!("kernel-log options: {e}")))
    }

    /// The path to read, or why there is none: on a fixture sysfs root the live kernel
    /// log is not about that tree.
    pub fn source(&self, sysfs_root: &Path) -> Result<PathBuf, String> {
        match &self.path {
            Some(p) => Ok(p.clone()),
            None if rocewatch_sysfs::read::is_sysfs(sysfs_root) => Ok(DEFAULT_PATH.into()),
            None => Err(format!(
                "{} is not the live /sys and no kernel-log path is set: this host's kernel log says nothing about that tree",
                sysfs_root.display()
            )),
        }
    }

    /// The matcher these options describe, devices read through the sysfs root.
    pub fn matcher(&self, sysfs_root: &Path) -> Result<Matcher, PluginError> {
        let patterns = matcher::compile(self.default_patterns, &self.patterns)
            .map_err(|e| PluginError::InvalidOptions(format!("patterns: {e}")))?;
        let drivers = match &self.drivers {
            Some(d) => d.clone(),
            None => matcher::DEFAULT_DRIVERS
                .iter()
                .map(|d| d.to_string())
                .collect(),
        };
        Ok(Matcher {
            patterns,
            drivers,
            devices: DeviceMap::read(&rocewatch_sysfs::SysRoot::new(sysfs_root)),
        })
    }
}

/// Most records read in one collection (a flood is counted over the next ones).
const MAX_PER_COLLECTION: usize = 100_000;

/// The built-in kernel-log collector.
#[derive(Default)]
pub struct KernelLog {
    reader: Option<KmsgReader>,
    matcher: Option<Matcher>,
    tally: Tally,
    overwritten: u64,
    /// Why `start` found nothing to read (said again by every `collect`).
    unsupported: Option<String>,
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
        match self.open(ctx) {
            Err(PluginError::Unsupported(why)) => {
                self.unsupported = Some(why);
                Ok(())
            }
            r => r,
        }
    }

    fn stop(&mut self) {
        self.reader = None;
        self.matcher = None;
        self.unsupported = None;
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
        let (Some(reader), Some(matcher)) = (self.reader.as_mut(), self.matcher.as_ref()) else {
            return Err(match &self.unsupported {
                Some(why) => PluginError::Unsupported(why.clone()),
                None => PluginError::Failed("kernel-log: not started".into()),
            });
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

/// What doctor reads: the records since `since_us` (microseconds since boot) counted.
#[derive(Debug, Default)]
pub struct Scan {
    pub tally: Tally,
    /// The patterns used, in order.
    pub patterns: Vec<String>,
    /// Records that did not parse.
    pub errors: Vec<String>,
}

/// Read every record still in the kernel log at `path` and count those since `since_us`.
pub fn scan(path: &Path, matcher: &Matcher, since_us: u64) -> std::io::Result<Scan> {
    let mut reader = KmsgReader::open(path, From::Start)?;
    let mut out = Scan {
        patterns: matcher.patterns.iter().map(|p| p.name.clone()).collect(),
        ..Scan::default()
    };
    loop {
        let b = reader.read_available(MAX_PER_COLLECTION)?;
        let done = b.records.len() + b.errors.len() < MAX_PER_COLLECTION;
        for r in b.records.iter().filter(|r| r.timestamp_us >= since_us) {
            matcher.count(r, &mut out.tally);
        }
        out.errors.extend(b.errors.iter().map(ToString::to_string));
        if done {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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

    #[test]
    fn scan_counts_the_window_only() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kmsg");
        std::fs::write(
            &log,
            "3,1,1000,-;mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): QUERY_VPORT_STATE(0x750) timeout. Will cause a leak of a command resource\n3,2,5000,-;mlx5_core 0000:03:00.0: wait_func:1165:(pid 1): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n",
        )
        .unwrap();
        let m = Options::default().matcher(dir.path()).unwrap();
        let s = scan(&log, &m, 2000).unwrap();
        let hit = &s.tally.counts[&("cmd_timeout".into(), "0000:03:00.0".into())];
        assert_eq!(hit.count, 1);
        assert!(hit.last_message.contains("ACCESS_REG"));
        assert_eq!(s.tally.records, 1);
        assert_eq!(
            s.patterns.len(),
            rocewatch_metrics::KERNEL_LOG_PATTERNS.len()
        );
    }
}
