//! configfs `rdma_cm`: where a port's RoCE defaults (`roce_mode`, `roce_tos`) are, and
//! reading them.

use std::path::PathBuf;

use rocewatch_plugin_api::*;

use crate::attr::file_setting;
use crate::QosLinux;

impl QosLinux {
    pub(crate) fn configfs(&self) -> PathBuf {
        self.root
            .as_ref()
            .expect("started")
            .root()
            .join("kernel/config/rdma_cm")
    }

    /// `roce_mode` and `roce_tos` of a port from configfs.
    pub(crate) fn roce_settings(&self, dev: &str, port: u32) -> [(&'static str, Setting); 2] {
        let cm = self.configfs();
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
}
