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
