//! The kernel module behind an RDMA device: `module/<name>/` (kernel/module/sysfs.c):
//! `version` (present when the module declares `MODULE_VERSION`: vendor packages such as
//! MLNX_OFED/DOCA-OFED do, the kernel's own mlx5 has not since 5.x), `srcversion` (a
//! digest of the module's sources, written by modpost), `taint` (the module's taint
//! letters: `O` for a module built out of the kernel's tree, `E` unsigned, `P`
//! proprietary; empty for the distribution kernel's own modules) and `holders/` (the
//! modules that use it: `mlx5_ib` holds `mlx5_core`).
//!
//! Which module: the device's PCI driver (`class/infiniband/<dev>/device/driver/module`,
//! drivers/base/module.c makes the link); soft-RoCE devices have no parent function but a
//! `parent` attribute (drivers/infiniband/sw/rxe/rxe_verbs.c), and are `rdma_rxe`'s.

use serde::{Deserialize, Serialize};

use crate::read::{self, Attr};
use crate::SysRoot;

/// The module that serves soft-RoCE devices.
pub const RXE_MODULE: &str = "rdma_rxe";

/// What sysfs says of one loaded module.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// The module's name (`mlx5_core`).
    pub name: String,
    /// `module/<name>/version`, when the module declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `module/<name>/srcversion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srcversion: Option<String>,
    /// `module/<name>/taint` (empty for an in-tree module; absent on old kernels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<String>,
}

impl ModuleInfo {
    /// `out-of-tree` (taint `O`: a vendor package such as MLNX_OFED, or DKMS), `in-tree`
    /// (the kernel's own module), or `unknown` (no taint file).
    pub fn origin(&self) -> &'static str {
        match &self.taint {
            Some(t) if t.contains('O') => "out-of-tree",
            Some(_) => "in-tree",
            None => "unknown",
        }
    }

    /// What identifies the build: the version when declared, else the source digest,
    /// else `in-tree` for a module of the kernel (whose version is the kernel's).
    pub fn build(&self) -> String {
        match (&self.version, &self.srcversion) {
            (Some(v), _) => v.clone(),
            (None, Some(s)) => format!("srcversion {s}"),
            (None, None) if self.origin() == "in-tree" => "in-tree (the kernel's)".into(),
            (None, None) => "unknown".into(),
        }
    }
}

impl SysRoot {
    /// `module/<name>/`, when the module is loaded (or built in with parameters).
    pub fn module(&self, name: &str) -> Option<ModuleInfo> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return None;
        }
        let dir = self.root().join("module").join(name);
        if !dir.is_dir() {
            return None;
        }
        let attr = |f: &str| match read::read_attr(&dir.join(f)) {
            Ok(Attr::Value(v)) => Some(v),
            _ => None,
        };
        Some(ModuleInfo {
            name: name.to_string(),
            version: attr("version").filter(|v| !v.is_empty()),
            srcversion: attr("srcversion").filter(|v| !v.is_empty()),
            taint: attr("taint"),
        })
    }

    /// The modules using `name` (`module/<name>/holders/*`), sorted.
    pub fn module_holders(&self, name: &str) -> Vec<String> {
        read::list_dir(&self.root().join("module").join(name).join("holders")).unwrap_or_default()
    }

    /// The name of the module serving RDMA device `dev`: its PCI driver's module, or
    /// `rdma_rxe` for a soft-RoCE device (a `parent` attribute and no parent function).
    pub fn device_module(&self, dev: &str) -> Option<String> {
        let dir = self.device_dir(dev);
        if let Ok(p) = std::fs::read_link(dir.join("device/driver/module")) {
            return p.file_name().map(|n| n.to_string_lossy().into_owned());
        }
        let rxe = !dir.join("device").exists()
            && dir.join("parent").is_file()
            && self.root().join("module").join(RXE_MODULE).is_dir();
        rxe.then(|| RXE_MODULE.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    fn put(p: &std::path::Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    #[test]
    fn a_vendor_module_and_the_device_it_serves() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        put(&r.join("module/mlx5_core/version"), "24.10-1.1.4\n");
        put(
            &r.join("module/mlx5_core/srcversion"),
            "0A1B2C3D4E5F60718293A4B\n",
        );
        put(&r.join("module/mlx5_core/taint"), "OE\n");
        fs::create_dir_all(r.join("module/mlx5_core/holders/mlx5_ib")).unwrap();
        fs::create_dir_all(r.join("bus/pci/drivers/mlx5_core")).unwrap();
        symlink(
            "../../../../module/mlx5_core",
            r.join("bus/pci/drivers/mlx5_core/module"),
        )
        .unwrap();
        fs::create_dir_all(r.join("devices/pci0000:00/0000:00:02.0/infiniband")).unwrap();
        symlink(
            "../../../bus/pci/drivers/mlx5_core",
            r.join("devices/pci0000:00/0000:00:02.0/driver"),
        )
        .unwrap();
        fs::create_dir_all(r.join("class/infiniband/mlx5_0")).unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:00:02.0",
            r.join("class/infiniband/mlx5_0/device"),
        )
        .unwrap();
        let sys = SysRoot::new(r);
        assert_eq!(sys.device_module("mlx5_0").as_deref(), Some("mlx5_core"));
        let m = sys.module("mlx5_core").unwrap();
        assert_eq!(m.version.as_deref(), Some("24.10-1.1.4"));
        assert_eq!(m.srcversion.as_deref(), Some("0A1B2C3D4E5F60718293A4B"));
        assert_eq!(m.origin(), "out-of-tree");
        assert_eq!(m.build(), "24.10-1.1.4");
        assert_eq!(sys.module_holders("mlx5_core"), vec!["mlx5_ib".to_string()]);
    }

    #[test]
    fn an_in_tree_module_has_an_empty_taint_and_no_version() {
        let t = tempfile::tempdir().unwrap();
        put(&t.path().join("module/mlx5_core/taint"), "\n");
        let m = SysRoot::new(t.path()).module("mlx5_core").unwrap();
        assert_eq!(m.taint.as_deref(), Some(""));
        assert_eq!(
            (m.origin(), m.build().as_str()),
            ("in-tree", "in-tree (the kernel's)")
        );
    }

    #[test]
    fn soft_roce_is_rdma_rxe_and_odd_names_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        put(&r.join("class/infiniband/rxe0/parent"), "eth0\n");
        let sys = SysRoot::new(r);
        assert_eq!(sys.device_module("rxe0"), None, "rdma_rxe is not loaded");
        put(&r.join("module/rdma_rxe/taint"), "\n");
        assert_eq!(sys.device_module("rxe0").as_deref(), Some(RXE_MODULE));
        assert_eq!(sys.module("rdma_rxe").unwrap().origin(), "in-tree");
        for bad in ["", "../module", ".", "a/b"] {
            assert_eq!(sys.module(bad), None, "{bad:?}");
        }
        assert_eq!(sys.module("absent"), None);
    }
}
