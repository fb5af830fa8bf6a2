//! The options several commands share (clap): the configuration file and the sysfs root
//! to read. Apart from args.rs, which names every command's arguments: a command's file
//! that read these from there would close a loop of files.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::config::Config;

/// Options shared by the commands that read sysfs.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Configuration file (TOML). Without it: defaults plus ROCEWATCH_* overrides.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Root of the sysfs tree to read instead of /sys (overrides agent.sysfs_root).
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,
}

impl SourceArgs {
    pub fn load(&self) -> Result<Config> {
        let mut cfg = Config::load(self.config.as_deref())?;
        if let Some(root) = &self.sysfs_root {
            cfg.agent.sysfs_root = root.clone();
        }
        Ok(cfg)
    }
}

/// The proc tree read besides sysfs by the commands that run the resources collector
/// (`top`, `collect`, `run`): where each workload's `<pid>/cgroup` and `<pid>/comm` are.
#[derive(Debug, Clone, Args)]
pub struct ProcArgs {
    /// Root of the proc tree that goes with --sysfs-root (default /proc): the workloads'
    /// `<pid>/cgroup` and `<pid>/comm`, which the resources collector attributes queue
    /// pairs by, and `stat`, the host collector's CPU steal (overrides procfs_root of
    /// [plugins.builtin.resources.options] and [plugins.builtin.host.options]). In a pod:
    /// --sysfs-root /host/sys --procfs-root /host/proc.
    #[arg(long, value_name = "DIR")]
    pub procfs_root: Option<PathBuf>,
}

impl ProcArgs {
    /// `cfg` with the resources and host collectors reading `--procfs-root`, where given.
    pub fn apply(&self, cfg: &mut Config) {
        let Some(root) = &self.procfs_root else {
            return;
        };
        for plugin in [crate::builtins::RESOURCES, crate::builtins::HOST] {
            let settings = cfg.plugins.builtin.entry(plugin.to_string()).or_default();
            if !settings.options.is_object() {
                settings.options = serde_json::json!({});
            }
            settings.options["procfs_root"] = serde_json::json!(root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--procfs-root` reaches the resources collector's options, over the file's and
    /// beside its other options; without it the file's stands.
    #[test]
    fn procfs_root_sets_the_resources_collectors_option() {
        let file = |cfg: &Config| {
            cfg.plugins.builtin[crate::builtins::RESOURCES].options["procfs_root"].clone()
        };
        let mut cfg: Config = toml::from_str(
            "[plugins.builtin.resources.options]\nprocfs_root = \"/from/file\"\nqp_counters = true\n",
        )
        .unwrap();
        ProcArgs { procfs_root: None }.apply(&mut cfg);
        assert_eq!(file(&cfg), "/from/file");
        ProcArgs {
            procfs_root: Some("/host/proc".into()),
        }
        .apply(&mut cfg);
        assert_eq!(file(&cfg), "/host/proc");
        assert_eq!(
            cfg.plugins.builtin[crate::builtins::RESOURCES].options["qp_counters"],
            true
        );
        let mut bare = Config::default();
        ProcArgs {
            procfs_root: Some("/host/proc".into()),
        }
        .apply(&mut bare);
        assert_eq!(file(&bare), "/host/proc");
        assert_eq!(
            bare.plugins.builtin[crate::builtins::HOST].options["procfs_root"],
            "/host/proc"
        );
    }
}
