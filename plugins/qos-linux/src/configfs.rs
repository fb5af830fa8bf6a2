//! configfs `rdma_cm`: where a port's RoCE defaults (`roce_mode`, `roce_tos`) are, and
//! reading and setting them.

use std::path::PathBuf;

use rocewatch_plugin_api::*;
use rocewatch_sysfs::SysRoot;

use crate::attr::{file_setting, outcome, write_file};

/// configfs `rdma_cm` under the root.
fn configfs(root: &SysRoot) -> PathBuf {
    root.root().join("kernel/config/rdma_cm")
}

/// `roce_mode` and `roce_tos` of a port from configfs.
pub(crate) fn roce_settings(root: &SysRoot, dev: &str, port: u32) -> [(&'static str, Setting); 2] {
    let cm = configfs(root);
    let port_dir = cm.join(dev).join("ports").join(port.to_string());
    let why = if !cm.is_dir() {
        Some(format!(
            "{} is not there (configfs not mounted at <root>/kernel/config, or rdma_cm not loaded)",
            cm.display()
        ))
    } else if !cm.join(dev).is_dir() {
        Some(format!(
            "{} not created (configfs shows a device's RoCE defaults once its directory is made: mkdir {})",
            cm.join(dev).display(),
            cm.join(dev).display()
        ))
    } else {
        None
    };
    if let Some(why) = why {
        return [
            ("roce_mode", Setting::Unknown(why.clone())),
            ("roce_tos", Setting::Unknown(why)),
        ];
    }
    [
        (
            "roce_mode",
            file_setting(&port_dir.join("default_roce_mode")),
        ),
        ("roce_tos", file_setting(&port_dir.join("default_roce_tos"))),
    ]
}

/// Set `roce_mode` or `roce_tos` of a port (creating the device's directory first
/// when needed).
pub(crate) fn apply_roce(
    root: &SysRoot,
    dev: &str,
    port: u32,
    setting: &str,
    to: &str,
    dry_run: bool,
) -> Result<ApplyOutcome, PluginError> {
    let cm = configfs(root);
    if !cm.is_dir() {
        return Err(PluginError::Unsupported(format!(
            "{} is not there (configfs not mounted at <root>/kernel/config, or rdma_cm not loaded)",
            cm.display()
        )));
    }
    let dev_dir = cm.join(dev);
    let create = !dev_dir.is_dir();
    let file = dev_dir
        .join("ports")
        .join(port.to_string())
        .join(format!("default_{setting}"));
    if dry_run {
        let pre = if create {
            format!("create {} and ", dev_dir.display())
        } else {
            String::new()
        };
        return Ok(outcome(
            false,
            format!("would {pre}write {to:?} to {}", file.display()),
            None,
        ));
    }
    if create {
        std::fs::create_dir(&dev_dir)
            .map_err(|e| PluginError::failed(format!("mkdir {}: {e}", dev_dir.display())))?;
    }
    let mut o = write_file(&file, to, false)?;
    if create {
        o.message = format!("created {}; {}", dev_dir.display(), o.message);
    }
    Ok(o)
}

/// RoCE defaults not read only because the device's configfs directory is not
/// created yet: apply creates it.
pub(crate) fn settable_unread(root: &SysRoot, dev: &str) -> Vec<String> {
    if configfs(root).is_dir() && !configfs(root).join(dev).is_dir() {
        vec!["roce_mode".to_string(), "roce_tos".to_string()]
    } else {
        Vec::new()
    }
}
