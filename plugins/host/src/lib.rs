//! Built-in collector plugin: the CPU time the hypervisor stole from this host
//! (`system.cpu.time{cpu.mode="steal"}`, seconds, cumulative since boot), from the
//! aggregate `cpu` line of `<procfs>/stat` through `rocewatch_sysfs::procstat`, the one
//! reader the fleet prober's `host_overloaded` and doctor use too. One file read per
//! collection.
//!
//! The name is OpenTelemetry's (the semantic conventions' `system.cpu.time`: a counter in
//! seconds with `cpu.mode`; without `cpu.logical_number` it is every CPU's sum), so a
//! backend that knows host metrics reads it as it reads theirs.
//!
//! Options (`[plugins.builtin.host.options]`):
//! - `procfs_root` (default `/proc` when the agent reads the live `/sys`): the proc tree
//!   (`--procfs-root` sets it). With a fixture sysfs root and no proc tree given, the live
//!   host's CPU says nothing of that tree's: the collector is unsupported, as it is where
//!   the file is missing. Never a zero in place of a reading.
//! - `include`/`exclude`: the shared `[devices]` selection, accepted and unused (this
//!   collector reads no device).

use std::path::PathBuf;

use rocewatch_metrics::{names, ATTR_CPU_MODE, HOST_CATALOG};
use rocewatch_plugin_api::*;
use rocewatch_sysfs::procstat::{read_stat, CpuSample};

/// Linux's `USER_HZ`, the unit of `/proc/stat`'s times: 100 on every architecture
/// rocewatch builds for (`include/asm-generic/param.h` `# define USER_HZ 100`, which
/// x86 and arm64 use; fs/proc/stat.c converts with `nsec_to_clock_t`; proc(5): "USER_HZ
/// (1/100ths of a second on most architectures)"). Alpha's 1024 is not built for.
pub const USER_HZ: f64 = 100.0;

/// The host collector's options.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default)]
    pub procfs_root: Option<PathBuf>,
    /// The shared `[devices]` selection, merged into every built-in's options: unused.
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl Options {
    pub fn from_json(v: &serde_json::Value) -> Result<Options, PluginError> {
        rocewatch_plugin_api::options::decode(v)
    }
}

/// The built-in host collector.
#[derive(Default)]
pub struct HostCpu {
    procfs: Option<PathBuf>,
    /// Why `start` found nothing to read (said by every `collect`).
    unsupported: UnsupportedHere,
}

impl HostCpu {
    pub const NAME: &'static str = "host";

    pub fn new() -> Self {
        Self::default()
    }

    fn open(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let opts = Options::from_json(&ctx.options)?;
        let procfs = match opts.procfs_root {
            Some(p) => p,
            None if rocewatch_sysfs::read::is_sysfs(&ctx.sysfs_root) => PathBuf::from("/proc"),
            None => {
                return Err(PluginError::Unsupported(format!(
                    "{} is not the live /sys and no proc tree was given with it (--procfs-root): this host's CPU says nothing of that tree's",
                    ctx.sysfs_root.display()
                )))
            }
        };
        read_stat(&procfs).map_err(|e| PluginError::Unsupported(e.to_string()))?;
        self.procfs = Some(procfs);
        Ok(())
    }
}

impl Plugin for HostCpu {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        self.stop();
        let opened = self.open(ctx);
        self.unsupported.start(opened)
    }

    fn stop(&mut self) {
        self.procfs = None;
        self.unsupported.clear();
    }
}

impl CollectorPlugin for HostCpu {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        rocewatch_metrics::descriptors_of(HOST_CATALOG)
    }

    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        self.unsupported.check()?;
        let Some(procfs) = &self.procfs else {
            return Err(PluginError::Failed("host: not started".into()));
        };
        let now = read_stat(procfs).map_err(|e| PluginError::Failed(e.to_string()))?;
        Ok(ScrapeResult {
            samples: vec![steal_sample(&now)],
            errors: Vec::new(),
        })
    }
}

/// `system.cpu.time{cpu.mode="steal"}` of a reading, in seconds.
pub fn steal_sample(s: &CpuSample) -> Sample {
    let e = &HOST_CATALOG[0];
    debug_assert_eq!(e.name, names::SYSTEM_CPU_TIME);
    let a: AttrSet = [(ATTR_CPU_MODE, "steal")].into_iter().collect();
    Sample {
        name: e.name.into(),
        unit: e.unit.into(),
        value: Value::F64(s.steal as f64 / USER_HZ),
        attributes: Attributes::new(a),
        source: "stat".into(),
        kind: e.kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const STAT: &str =
        "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 100 0 50 800 10 0 5 35 0 0\nprocs_running 1\n";

    fn ctx(root: &Path, options: serde_json::Value) -> PluginContext {
        let mut c = PluginContext::new(root);
        c.options = options;
        c
    }

    #[test]
    fn steal_ticks_in_seconds_as_the_file_moves() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stat"), STAT).unwrap();
        let mut p = HostCpu::new();
        p.start(&ctx(
            dir.path(),
            serde_json::json!({"procfs_root": dir.path(), "include": ["mlx5_*"]}),
        ))
        .unwrap();
        let s = p.collect().unwrap().samples;
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "system.cpu.time");
        assert_eq!(s[0].unit, "s");
        assert_eq!(s[0].kind, MetricKind::Counter);
        assert_eq!(s[0].value, Value::F64(0.35));
        assert_eq!(s[0].attributes.get("cpu.mode"), Some("steal"));
        std::fs::write(dir.path().join("stat"), STAT.replacen(" 35 ", " 1235 ", 1)).unwrap();
        assert_eq!(p.collect().unwrap().samples[0].value, Value::F64(12.35));
        // The file gone after start: a failed collection, not a zero.
        std::fs::remove_file(dir.path().join("stat")).unwrap();
        let e = p.collect().unwrap_err();
        assert!(
            matches!(e, PluginError::Failed(ref m) if m.contains("stat")),
            "{e}"
        );
    }

    #[test]
    fn no_stat_or_a_fixture_without_its_proc_tree_is_unsupported_never_zero() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = HostCpu::new();
        p.start(&ctx(
            dir.path(),
            serde_json::json!({"procfs_root": dir.path()}),
        ))
        .unwrap();
        let e = p.collect().unwrap_err();
        assert!(
            matches!(e, PluginError::Unsupported(ref m) if m.contains("stat")),
            "{e}"
        );
        // A fixture sysfs root (a tempdir is not sysfs) and no proc tree.
        p.start(&ctx(dir.path(), serde_json::json!({}))).unwrap();
        let e = p.collect().unwrap_err();
        assert!(
            matches!(e, PluginError::Unsupported(ref m) if m.contains("--procfs-root")),
            "{e}"
        );
        let e = p
            .start(&ctx(dir.path(), serde_json::json!({"procfs": "/x"})))
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `procfs`"), "{e}");
    }

    /// integration-tests/fixtures/sriov-guest/proc/stat: 6200 ticks stolen, 62 s.
    #[test]
    fn the_sriov_guest_fixture() {
        let tree = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/sriov-guest");
        let mut p = HostCpu::new();
        p.start(&ctx(
            &tree.join("sys"),
            serde_json::json!({"procfs_root": tree.join("proc")}),
        ))
        .unwrap();
        assert_eq!(p.collect().unwrap().samples[0].value, Value::F64(62.0));
    }
}
