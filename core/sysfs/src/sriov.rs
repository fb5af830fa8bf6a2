//! SR-IOV: which PCI functions are physical functions (PFs) carrying virtual functions
//! (VFs), and which are VFs, as sysfs lays them out.
//!
//! Files (drivers/pci/iov.c; Documentation/ABI/testing/sysfs-bus-pci): on a PF only
//! (`sriov_attrs_are_visible` hides them elsewhere, and a function whose capability
//! says 0 VFs is never a PF), `sriov_totalvfs` (`%u`), `sriov_numvfs` (`%u`),
//! `sriov_offset` and `sriov_stride` (`%u`), `sriov_vf_device` (`%x`: hexadecimal
//! *without* `0x`, unlike the function's own `device` file), `sriov_drivers_autoprobe`
//! (`%u`: 0 or 1); and one link `virtfn<N>` per enabled VF (`pci_iov_sysfs_link`, N from
//! 0) to the VF's directory, a sibling of the PF (the VF's parent is the PF's parent).
//! On a VF, `physfn` links back to the PF.
//!
//! Inside a virtual machine the VF is passed through alone: no `physfn` (the PF is on
//! the host), so a VF is recognised there by its PCI vendor and device id, from the
//! drivers' own tables ([`vf_by_id`]).

use std::path::{Path, PathBuf};

use crate::read::{self, Attr, SysfsError};
use crate::SysRoot;

/// A file that held what its kernel source never prints.
#[derive(Debug, thiserror::Error)]
pub enum SriovError {
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    #[error("{path}: {what}")]
    Parse { path: PathBuf, what: String },
}

impl SriovError {
    /// The file at fault.
    pub fn path(&self) -> &Path {
        match self {
            SriovError::Sysfs(e) => e.path(),
            SriovError::Parse { path, .. } => path,
        }
    }
}

/// The SR-IOV role of one PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sriov {
    /// A physical function with the SR-IOV capability.
    Pf(PhysFn),
    /// A virtual function.
    Vf(VirtFn),
}

impl Sriov {
    pub fn is_vf(&self) -> bool {
        matches!(self, Sriov::Vf(_))
    }

    pub fn as_pf(&self) -> Option<&PhysFn> {
        match self {
            Sriov::Pf(p) => Some(p),
            Sriov::Vf(_) => None,
        }
    }

    pub fn as_vf(&self) -> Option<&VirtFn> {
        match self {
            Sriov::Vf(v) => Some(v),
            Sriov::Pf(_) => None,
        }
    }
}

/// A PF: what its SR-IOV capability allows and the VFs enabled now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysFn {
    /// `sriov_totalvfs`: the most VFs the device (and its firmware) offers.
    pub totalvfs: u32,
    /// `sriov_numvfs`: the VFs enabled now.
    pub numvfs: u32,
    /// `sriov_vf_device`: the PCI device id its VFs carry (`0x101e`).
    pub vf_device: Option<String>,
    /// `sriov_offset`, `sriov_stride`: where VF routing ids start and their step.
    pub offset: Option<u32>,
    pub stride: Option<u32>,
    /// `sriov_drivers_autoprobe`: whether new VFs are bound to a host driver at once.
    pub drivers_autoprobe: Option<bool>,
    /// Each `virtfn<N>`, by N.
    pub vfs: Vec<VfFunction>,
}

/// One VF as its PF lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfFunction {
    /// N of `virtfn<N>`: the VF index `ip link` and rtnetlink use.
    pub index: u32,
    /// `0000:3b:00.2`
    pub address: String,
    /// The host driver it is bound to (`driver` link): `mlx5_core` when the host uses it,
    /// `vfio-pci` when it is handed to a VM, `None` when unbound.
    pub driver: Option<String>,
    /// Its netdevs on the host (`net/*`).
    pub netdevs: Vec<String>,
    /// Its RDMA devices on the host (`infiniband/*`).
    pub rdma_devices: Vec<String>,
    /// A VFIO device is registered on it (`vfio-dev/vfio<N>`: drivers/vfio/vfio_main.c's
    /// class `vfio-dev`, a device `vfio%d` whose parent is the function; since 6.1).
    pub vfio_device: bool,
}

impl VfFunction {
    /// Bound to a driver that hands the function to a virtual machine: vfio-pci, a
    /// vendor's vfio variant driver (drivers/vfio/pci/*, named by KBUILD_MODNAME:
    /// `mlx5_vfio_pci` since 5.18, `hisi_acc_vfio_pci`, `pds_vfio_pci`, ...), pci-stub,
    /// xen-pciback; or any driver with a VFIO device on the function.
    pub fn assigned_to_vm(&self) -> bool {
        let by_name = self.driver.as_deref().is_some_and(|d| {
            d.ends_with("vfio_pci")
                || d.ends_with("vfio-pci")
                || matches!(d, "pci-stub" | "xen-pciback")
        });
        by_name || self.vfio_device
    }
}

/// A VF seen from itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtFn {
    /// The PF's address (`physfn`); `None` where the PF is not visible (in a guest).
    pub pf: Option<String>,
    /// Its index on the PF (the PF's `virtfn<N>` that leads here), when the PF is visible.
    pub index: Option<u32>,
    /// The VF model from the drivers' id tables, when recognised by id (`vf_by_id`).
    pub model: Option<&'static str>,
}

/// PCI vendor ids of the drivers below.
const MELLANOX: u16 = 0x15b3;
const BROADCOM: u16 = 0x14e4;

/// VF device ids, from the drivers' PCI id tables:
/// - mlx5: drivers/net/ethernet/mellanox/mlx5/core/main.c `mlx5_core_pci_table`, the
///   entries marked `MLX5_PCI_DEV_IS_VF`;
/// - bnxt_en (bnxt_re's RDMA): drivers/net/ethernet/broadcom/bnxt/bnxt.c `bnxt_pci_tbl`,
///   the `NETXTREME_*_VF*` entries under `CONFIG_BNXT_SRIOV` (the ids `bnxt_vf_pciid`
///   names VFs), up to the P7 (BCM5760X) VFs 0x1819 and, in Broadcom's own bnxt_en
///   package, 0x181b.
const VF_IDS: &[(u16, u16, &str)] = &[
    (MELLANOX, 0x1012, "Connect-IB VF"),
    (MELLANOX, 0x1014, "ConnectX-4 VF"),
    (MELLANOX, 0x1016, "ConnectX-4 Lx VF"),
    (MELLANOX, 0x1018, "ConnectX-5 VF"),
    (MELLANOX, 0x101a, "ConnectX-5 Ex VF"),
    (MELLANOX, 0x101c, "ConnectX-6 VF"),
    (MELLANOX, 0x101e, "ConnectX Family mlx5Gen VF"),
    (MELLANOX, 0xa2d3, "BlueField ConnectX-5 VF"),
    (BROADCOM, 0x1606, "NetXtreme-E VF"),
    (BROADCOM, 0x1607, "NetXtreme-E VF (Hyper-V)"),
    (BROADCOM, 0x1608, "NetXtreme-E VF (Hyper-V)"),
    (BROADCOM, 0x1609, "NetXtreme-E VF"),
    (BROADCOM, 0x16bd, "NetXtreme-E VF (Hyper-V)"),
    (BROADCOM, 0x16c1, "NetXtreme-E VF"),
    (BROADCOM, 0x16c2, "NetXtreme-C VF (Hyper-V)"),
    (BROADCOM, 0x16c3, "NetXtreme-C VF (Hyper-V)"),
    (BROADCOM, 0x16c4, "NetXtreme-E VF (Hyper-V)"),
    (BROADCOM, 0x16c5, "NetXtreme-E VF (Hyper-V)"),
    (BROADCOM, 0x16cb, "NetXtreme-C VF"),
    (BROADCOM, 0x16d3, "NetXtreme-E VF"),
    (BROADCOM, 0x16dc, "NetXtreme-E VF"),
    (BROADCOM, 0x16e1, "NetXtreme-C VF"),
    (BROADCOM, 0x16e5, "NetXtreme-C VF"),
    (BROADCOM, 0x16e6, "NetXtreme-C VF (Hyper-V)"),
    (BROADCOM, 0x1806, "BCM5750X NetXtreme-E VF"),
    (BROADCOM, 0x1807, "BCM5750X NetXtreme-E VF"),
    (BROADCOM, 0x1808, "BCM5750X NetXtreme-E VF (Hyper-V)"),
    (BROADCOM, 0x1809, "BCM5750X NetXtreme-E VF (Hyper-V)"),
    (BROADCOM, 0x1819, "BCM5760X VF"),
    (BROADCOM, 0x181b, "BCM5760X VF (Hyper-V)"),
    (BROADCOM, 0xd800, "NetXtreme-S VF"),
];

/// The VF model a PCI vendor and device id belong to, from the drivers' tables; `None`
/// for any other function (a PF, or a VF of a driver not listed).
pub fn vf_by_id(vendor: u16, device: u16) -> Option<&'static str> {
    VF_IDS
        .iter()
        .find(|(v, d, _)| *v == vendor && *d == device)
        .map(|(_, _, name)| *name)
}

/// A PCI id as the function's `vendor`/`device` files print it (`0x15b3`, pci-sysfs.c
/// `%#06x`) or as `sriov_vf_device` does (`101e`, `%x`).
pub fn parse_pci_id(text: &str) -> Option<u16> {
    let t = text.trim();
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if hex.is_empty() || hex.len() > 4 {
        return None;
    }
    u16::from_str_radix(hex, 16).ok()
}

/// The name a link points at (`../0000:3b:00.2` → `0000:3b:00.2`).
fn link_name(link: &Path) -> Option<String> {
    std::fs::read_link(link)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// A `%u` attribute; `None` when absent.
fn read_u32(path: &Path) -> Result<Option<u32>, SriovError> {
    match read::read_attr(path)? {
        Attr::Absent => Ok(None),
        Attr::Value(v) => v.parse().map(Some).map_err(|_| SriovError::Parse {
            path: path.to_path_buf(),
            what: format!("{v:?} is not a count"),
        }),
    }
}

impl SysRoot {
    /// The SR-IOV role of the PCI function in `dir` (a `PciFunction::dir`): `Ok(None)`
    /// for a function that is neither a PF nor a VF.
    pub fn sriov_at(&self, dir: &Path) -> Result<Option<Sriov>, SriovError> {
        if let Some(totalvfs) = read_u32(&dir.join("sriov_totalvfs"))? {
            return self.phys_fn(dir, totalvfs).map(|p| Some(Sriov::Pf(p)));
        }
        let physfn = dir.join("physfn");
        if std::fs::symlink_metadata(&physfn).is_ok() {
            let pf = link_name(&physfn);
            let me = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            let index = match (&me, std::fs::canonicalize(&physfn)) {
                (Some(me), Ok(pf_dir)) => self.virtfn_index(&pf_dir, me),
                _ => None,
            };
            return Ok(Some(Sriov::Vf(VirtFn {
                pf,
                index,
                model: None,
            })));
        }
        let id = |f: &str| -> Result<Option<u16>, SriovError> {
            let path = dir.join(f);
            match read::read_attr(&path)? {
                Attr::Absent => Ok(None),
                Attr::Value(v) => parse_pci_id(&v).map(Some).ok_or(SriovError::Parse {
                    path,
                    what: format!("{v:?} is not a PCI id"),
                }),
            }
        };
        let (Some(vendor), Some(device)) = (id("vendor")?, id("device")?) else {
            return Ok(None);
        };
        Ok(vf_by_id(vendor, device).map(|model| {
            Sriov::Vf(VirtFn {
                pf: None,
                index: None,
                model: Some(model),
            })
        }))
    }

    /// The SR-IOV role of an RDMA device's PCI function; `Ok(None)` without one
    /// (soft-RoCE) or when it has no role.
    pub fn sriov_of_device(&self, dev: &str) -> Result<Option<Sriov>, SriovError> {
        match self.rdma_pci_function(dev) {
            Some(f) => self.sriov_at(&f.dir),
            None => Ok(None),
        }
    }

    /// The SR-IOV role of a netdev's PCI function (`class/net/<if>/device`).
    pub fn sriov_of_netdev(&self, ifname: &str) -> Result<Option<Sriov>, SriovError> {
        match self.pci_function_at(&self.netdev_dir(ifname).join("device")) {
            Some(f) => self.sriov_at(&f.dir),
            None => Ok(None),
        }
    }

    /// Whether an RDMA device is a VF (with or without its PF in view). An unreadable
    /// file counts as "not known to be a VF".
    pub fn device_is_vf(&self, dev: &str) -> bool {
        self.sriov_of_device(dev)
            .ok()
            .flatten()
            .is_some_and(|s| s.is_vf())
    }

    /// Every PF under `bus/pci/devices`, by address, with its VFs.
    pub fn sriov_pfs(&self) -> Result<Vec<(String, PhysFn)>, SriovError> {
        let mut out = Vec::new();
        for f in self.pci_functions()? {
            if let Some(Sriov::Pf(p)) = self.sriov_at(&f.dir)? {
                out.push((f.address, p));
            }
        }
        Ok(out)
    }

    fn phys_fn(&self, dir: &Path, totalvfs: u32) -> Result<PhysFn, SriovError> {
        let vf_device_path = dir.join("sriov_vf_device");
        let vf_device = match read::read_attr(&vf_device_path)? {
            Attr::Absent => None,
            Attr::Value(v) => Some(parse_pci_id(&v).ok_or(SriovError::Parse {
                path: vf_device_path,
                what: format!("{v:?} is not a PCI device id"),
            })?),
        };
        let autoprobe_path = dir.join("sriov_drivers_autoprobe");
        let drivers_autoprobe = match read_u32(&autoprobe_path)? {
            None => None,
            Some(0) => Some(false),
            Some(1) => Some(true),
            Some(n) => {
                return Err(SriovError::Parse {
                    path: autoprobe_path,
                    what: format!("{n} is neither 0 nor 1"),
                })
            }
        };
        Ok(PhysFn {
            totalvfs,
            numvfs: read_u32(&dir.join("sriov_numvfs"))?.unwrap_or(0),
            vf_device: vf_device.map(|d| format!("{d:#06x}")),
            offset: read_u32(&dir.join("sriov_offset"))?,
            stride: read_u32(&dir.join("sriov_stride"))?,
            drivers_autoprobe,
            vfs: self.virtfns(dir),
        })
    }

    /// The `virtfn<N>` links of a PF, by N, each with what the host has on that VF.
    fn virtfns(&self, pf_dir: &Path) -> Vec<VfFunction> {
        let mut vfs: Vec<VfFunction> = read::list_dir(pf_dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|name| {
                let index: u32 = name.strip_prefix("virtfn")?.parse().ok()?;
                let link = pf_dir.join(name);
                let address = link_name(&link)?;
                let vf_dir = std::fs::canonicalize(&link).unwrap_or(link);
                Some(VfFunction {
                    index,
                    address,
                    driver: link_name(&vf_dir.join("driver")),
                    netdevs: read::list_dir(&vf_dir.join("net")).unwrap_or_default(),
                    rdma_devices: read::list_dir(&vf_dir.join("infiniband")).unwrap_or_default(),
                    vfio_device: read::list_dir(&vf_dir.join("vfio-dev"))
                        .is_ok_and(|d| !d.is_empty()),
                })
            })
            .collect();
        vfs.sort_by_key(|v| v.index);
        vfs
    }

    fn virtfn_index(&self, pf_dir: &Path, me: &str) -> Option<u32> {
        read::list_dir(pf_dir).ok()?.iter().find_map(|name| {
            let index = name.strip_prefix("virtfn")?.parse().ok()?;
            (link_name(&pf_dir.join(name)).as_deref() == Some(me)).then_some(index)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vf_ids_are_the_drivers() {
        assert_eq!(vf_by_id(0x15b3, 0x101e), Some("ConnectX Family mlx5Gen VF"));
        assert_eq!(vf_by_id(0x15b3, 0x1016), Some("ConnectX-4 Lx VF"));
        // The PFs next to them are not VFs.
        assert_eq!(vf_by_id(0x15b3, 0x101d), None);
        assert_eq!(vf_by_id(0x15b3, 0x1017), None);
        // A device id of one vendor is not another's.
        assert_eq!(vf_by_id(0x8086, 0x101e), None);
        assert_eq!(vf_by_id(0x14e4, 0x16c1), Some("NetXtreme-E VF"));
        assert_eq!(vf_by_id(0x14e4, 0x1819), Some("BCM5760X VF"));
        // A bnxt PF (BCM57508) is not one.
        assert_eq!(vf_by_id(0x14e4, 0x1750), None);
        // Every entry is there once.
        let mut ids: Vec<(u16, u16)> = VF_IDS.iter().map(|(v, d, _)| (*v, *d)).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), VF_IDS.len());
    }

    #[test]
    fn pci_ids_in_both_spellings() {
        assert_eq!(parse_pci_id("0x101e\n"), Some(0x101e));
        assert_eq!(parse_pci_id("101e"), Some(0x101e));
        assert_eq!(parse_pci_id("0x"), None);
        assert_eq!(parse_pci_id("0x10101e"), None);
        assert_eq!(parse_pci_id("zz"), None);
    }

    fn fixture(case: &str) -> SysRoot {
        SysRoot::new(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures")
                .join(case)
                .join("sys"),
        )
    }

    #[test]
    fn a_pf_lists_its_vfs_with_what_the_host_has_on_each() {
        let sys = fixture("sriov-host");
        let Some(Sriov::Pf(pf)) = sys.sriov_of_device("mlx5_0").unwrap() else {
            panic!("mlx5_0 is the PF");
        };
        assert_eq!((pf.totalvfs, pf.numvfs), (8, 4));
        assert_eq!(pf.vf_device.as_deref(), Some("0x101e"));
        assert_eq!((pf.offset, pf.stride), (Some(2), Some(1)));
        assert_eq!(pf.drivers_autoprobe, Some(true));
        let addrs: Vec<&str> = pf.vfs.iter().map(|v| v.address.as_str()).collect();
        assert_eq!(
            addrs,
            [
                "0000:3b:00.2",
                "0000:3b:00.3",
                "0000:3b:00.4",
                "0000:3b:00.5"
            ]
        );
        assert_eq!(pf.vfs[0].driver.as_deref(), Some("mlx5_core"));
        assert_eq!(pf.vfs[0].netdevs, ["ens1f0v0"]);
        assert_eq!(pf.vfs[1].rdma_devices, ["mlx5_3"]);
        assert!(!pf.vfs[1].assigned_to_vm());
        assert_eq!(pf.vfs[2].driver.as_deref(), Some("vfio-pci"));
        assert!(pf.vfs[2].assigned_to_vm());
        assert!(pf.vfs[3].netdevs.is_empty() && pf.vfs[3].rdma_devices.is_empty());
        let pfs = sys.sriov_pfs().unwrap();
        assert_eq!(pfs.len(), 1);
        assert_eq!(pfs[0].0, "0000:3b:00.0");
    }

    #[test]
    fn a_vf_on_the_host_names_its_pf_and_index() {
        let sys = fixture("sriov-host");
        let vf = sys.sriov_of_device("mlx5_3").unwrap().unwrap();
        assert_eq!(
            vf.as_vf(),
            Some(&VirtFn {
                pf: Some("0000:3b:00.0".into()),
                index: Some(1),
                model: None
            })
        );
        assert!(sys.device_is_vf("mlx5_2"));
        assert!(!sys.device_is_vf("mlx5_0"));
        assert!(sys.sriov_of_netdev("ens1f0v0").unwrap().unwrap().is_vf());
    }

    #[test]
    fn a_vf_in_a_guest_is_known_by_its_id_without_a_pf() {
        let sys = fixture("sriov-guest");
        let vf = sys.sriov_of_device("mlx5_0").unwrap().unwrap();
        assert_eq!(
            vf.as_vf(),
            Some(&VirtFn {
                pf: None,
                index: None,
                model: Some("ConnectX Family mlx5Gen VF")
            })
        );
        assert!(sys.device_is_vf("mlx5_0"));
        assert!(sys.sriov_of_netdev("enp1s0").unwrap().unwrap().is_vf());
        // The guest's root port is neither.
        let rp = sys.root().join("devices/pci0000:00/0000:00:02.0");
        assert_eq!(sys.sriov_at(&rp).unwrap(), None);
    }

    #[test]
    fn a_plain_function_and_a_soft_device_have_no_role() {
        let sys = fixture("mlx5-roce-dual-port");
        assert_eq!(sys.sriov_of_device("mlx5_0").unwrap(), None);
        let rxe = fixture("rxe-soft-roce");
        let dev = rxe.devices().unwrap().into_iter().next().unwrap();
        assert_eq!(rxe.sriov_of_device(&dev).unwrap(), None);
    }

    /// A PF directory in a temporary tree with `files` written as given.
    fn pf_dir(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("devices/pci0000:00/0000:3b:00.0");
        std::fs::create_dir_all(&d).unwrap();
        for (f, text) in files {
            std::fs::write(d.join(f), text).unwrap();
        }
        (t, d)
    }

    /// VFs handed to VMs through a vendor's vfio variant driver (drivers/vfio/pci/: the
    /// driver's name is its KBUILD_MODNAME, `mlx5_vfio_pci`, `hisi_acc_vfio_pci`,
    /// `pds_vfio_pci`), or with a VFIO device registered on them (`vfio-dev/vfioN`,
    /// drivers/vfio/vfio_main.c's class `vfio-dev` under the function) whatever the driver
    /// is called, are assigned to a VM; a VF on mlx5_core with none is not.
    #[test]
    fn vendor_vfio_drivers_and_a_vfio_device_assign_a_vf_to_a_vm() {
        let (t, pf) = pf_dir(&[("sriov_totalvfs", "8\n"), ("sriov_numvfs", "5\n")]);
        let parent = pf.parent().unwrap();
        let vfs = [
            ("0000:3b:00.2", Some("mlx5_vfio_pci"), false),
            ("0000:3b:00.3", Some("hisi_acc_vfio_pci"), false),
            ("0000:3b:00.4", Some("vendor_stub"), true),
            ("0000:3b:00.5", Some("mlx5_core"), false),
            ("0000:3b:00.6", None, false),
        ];
        for (n, (addr, driver, vfio_dev)) in vfs.iter().enumerate() {
            let d = parent.join(addr);
            std::fs::create_dir_all(&d).unwrap();
            if let Some(drv) = driver {
                let drv_dir = t.path().join("bus/pci/drivers").join(drv);
                std::fs::create_dir_all(&drv_dir).unwrap();
                std::os::unix::fs::symlink(&drv_dir, d.join("driver")).unwrap();
            }
            if *vfio_dev {
                std::fs::create_dir_all(d.join("vfio-dev/vfio3")).unwrap();
            }
            std::os::unix::fs::symlink(format!("../{addr}"), pf.join(format!("virtfn{n}")))
                .unwrap();
        }
        let Some(Sriov::Pf(p)) = SysRoot::new(t.path()).sriov_at(&pf).unwrap() else {
            panic!("a PF");
        };
        let assigned: Vec<(u32, bool)> = p
            .vfs
            .iter()
            .map(|v| (v.index, v.assigned_to_vm()))
            .collect();
        assert_eq!(
            assigned,
            [(0, true), (1, true), (2, true), (3, false), (4, false)]
        );
    }

    #[test]
    fn a_bad_file_is_an_error_naming_it() {
        for (file, text) in [
            ("sriov_numvfs", "four\n"),
            ("sriov_vf_device", "0x1g1e\n"),
            ("sriov_drivers_autoprobe", "2\n"),
            ("sriov_stride", "-1\n"),
        ] {
            let (t, d) = pf_dir(&[("sriov_totalvfs", "8\n"), (file, text)]);
            let e = SysRoot::new(t.path()).sriov_at(&d).unwrap_err();
            assert_eq!(e.path(), d.join(file), "{e}");
            assert!(e.to_string().contains(file), "{e}");
        }
        let (t, d) = pf_dir(&[("sriov_totalvfs", "eight\n")]);
        let e = SysRoot::new(t.path()).sriov_at(&d).unwrap_err();
        assert_eq!(e.path(), d.join("sriov_totalvfs"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Any contents of the SR-IOV files: a PF, or an error naming one of them; never a
        /// panic.
        #[test]
        fn any_file_contents_are_a_pf_or_an_error_naming_the_file(
            total in ".{0,12}", num in ".{0,12}", dev in ".{0,8}", auto in ".{0,4}",
        ) {
            let (t, d) = pf_dir(&[
                ("sriov_totalvfs", &total), ("sriov_numvfs", &num),
                ("sriov_vf_device", &dev), ("sriov_drivers_autoprobe", &auto),
            ]);
            match SysRoot::new(t.path()).sriov_at(&d) {
                Ok(Some(Sriov::Pf(p))) => proptest::prop_assert_eq!(Some(p.totalvfs), total.trim().parse().ok()),
                Ok(None) => proptest::prop_assert!(total.trim().is_empty()),
                Ok(Some(Sriov::Vf(_))) => proptest::prop_assert!(false, "a PF read as a VF"),
                Err(e) => proptest::prop_assert!(
                    e.path().starts_with(&d) && e.path().file_name().unwrap().to_string_lossy().starts_with("sriov_"),
                    "{}", e
                ),
            }
        }

        #[test]
        fn any_pci_id_text_parses_or_not_without_panic(text in ".{0,10}") {
            if let Some(id) = parse_pci_id(&text) {
                let hex = format!("{id:x}");
                proptest::prop_assert!(text.to_lowercase().contains(&hex));
            }
        }
    }
}
