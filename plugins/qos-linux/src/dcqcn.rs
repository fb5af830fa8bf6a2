//! DCQCN: the congestion-control parameters of the reaction point (the sender that cuts
//! its rate on a CNP) and the notification point (the receiver that sends CNPs for ECN
//! marks), per port, where the kernel exposes them:
//!
//! - MLNX_OFED's mlx5 sysfs, `class/net/<if>/ecn/roce_rp/<name>` and `ecn/roce_np/<name>`
//!   (mlnx-ofa_kernel `en_sysfs.c`): the names below without the `dcqcn_` prefix;
//! - the kernel's mlx5 debugfs, `kernel/debug/mlx5/<PCI address>/cc_params/<file>`
//!   (`drivers/infiniband/hw/mlx5/cong.c`, `mlx5_ib_dbg_cc_name[]`; present when the
//!   firmware allows querying and changing them; root only): the files named in
//!   [`PARAMS`]. Every read and write there is a firmware command; the driver cuts a
//!   value to its field's width without a word, so the widths are checked before a write
//!   (`rocewatch_qos::check_value`) and the file is read back after.
//!
//! Intel's irdma has no DCQCN parameters in Linux (out-of-tree module parameters only);
//! bnxt_re's debugfs `cc_config` (Linux 6.15 and later) is not read yet.

use std::path::{Path, PathBuf};

use rocewatch_plugin_api::*;
use rocewatch_sysfs::SysRoot;

use crate::attr::file_setting;

/// One parameter: the setting's name, its OFED sysfs directory and file, its debugfs file.
pub(crate) struct Param {
    pub key: &'static str,
    pub ofed: (&'static str, &'static str),
    pub debugfs: &'static str,
}

const fn p(
    key: &'static str,
    dir: &'static str,
    file: &'static str,
    debugfs: &'static str,
) -> Param {
    Param {
        key,
        ofed: (dir, file),
        debugfs,
    }
}

/// The parameters, in `cong.c`'s order (its table maps each debugfs file to the firmware
/// field OFED names its sysfs file after).
pub(crate) const PARAMS: [Param; 17] = [
    p(
        "dcqcn_clamp_tgt_rate",
        "roce_rp",
        "clamp_tgt_rate",
        "rp_clamp_tgt_rate",
    ),
    p(
        "dcqcn_clamp_tgt_rate_after_time_inc",
        "roce_rp",
        "clamp_tgt_rate_after_time_inc",
        "rp_clamp_tgt_rate_ati",
    ),
    p(
        "dcqcn_rpg_time_reset",
        "roce_rp",
        "rpg_time_reset",
        "rp_time_reset",
    ),
    p(
        "dcqcn_rpg_byte_reset",
        "roce_rp",
        "rpg_byte_reset",
        "rp_byte_reset",
    ),
    p(
        "dcqcn_rpg_threshold",
        "roce_rp",
        "rpg_threshold",
        "rp_threshold",
    ),
    p("dcqcn_rpg_ai_rate", "roce_rp", "rpg_ai_rate", "rp_ai_rate"),
    p(
        "dcqcn_rpg_max_rate",
        "roce_rp",
        "rpg_max_rate",
        "rp_max_rate",
    ),
    p(
        "dcqcn_rpg_hai_rate",
        "roce_rp",
        "rpg_hai_rate",
        "rp_hai_rate",
    ),
    p(
        "dcqcn_rpg_min_dec_fac",
        "roce_rp",
        "rpg_min_dec_fac",
        "rp_min_dec_fac",
    ),
    p(
        "dcqcn_rpg_min_rate",
        "roce_rp",
        "rpg_min_rate",
        "rp_min_rate",
    ),
    p(
        "dcqcn_rate_to_set_on_first_cnp",
        "roce_rp",
        "rate_to_set_on_first_cnp",
        "rp_rate_to_set_on_first_cnp",
    ),
    p("dcqcn_dce_tcp_g", "roce_rp", "dce_tcp_g", "rp_dce_tcp_g"),
    p(
        "dcqcn_dce_tcp_rtt",
        "roce_rp",
        "dce_tcp_rtt",
        "rp_dce_tcp_rtt",
    ),
    p(
        "dcqcn_rate_reduce_monitor_period",
        "roce_rp",
        "rate_reduce_monitor_period",
        "rp_rate_reduce_monitor_period",
    ),
    p(
        "dcqcn_initial_alpha_value",
        "roce_rp",
        "initial_alpha_value",
        "rp_initial_alpha_value",
    ),
    p("dcqcn_rpg_gd", "roce_rp", "rpg_gd", "rp_gd"),
    p(
        "dcqcn_min_time_between_cnps",
        "roce_np",
        "min_time_between_cnps",
        "np_min_time_between_cnps",
    ),
];

/// The CNP settings OFED keeps in sysfs (`ecn/roce_np/`) and the kernel in debugfs.
pub(crate) const CNP_DEBUGFS: [(&str, &str); 2] = [
    ("cnp_dscp", "np_cnp_dscp"),
    ("cnp_802p_prio", "np_cnp_prio"),
];

/// The driver whose parameters these are.
const DRIVER: &str = "mlx5_core";

/// `kernel/debug/mlx5/<PCI address>/cc_params` of `dev` (its parent function's name).
fn cc_params_dir(root: &SysRoot, dev: &str) -> Option<PathBuf> {
    let pci = root.rdma_pci_function(dev)?.address;
    Some(
        root.root()
            .join("kernel/debug/mlx5")
            .join(pci)
            .join("cc_params"),
    )
}

/// Whether the netdev at `nd` has OFED's DCQCN files (any of them): then a missing one
/// is one that driver lacks.
fn ofed(nd: Option<&Path>) -> bool {
    nd.is_some_and(|nd| {
        PARAMS
            .iter()
            .any(|p| nd.join("ecn").join(p.ofed.0).join(p.ofed.1).exists())
    })
}

/// Where `key` lives for this port: OFED's sysfs file when the netdev has OFED's files,
/// else the debugfs file when its directory is there; else why neither (`Err(None)`: not
/// an mlx5 device).
pub(crate) fn param_file(
    root: &SysRoot,
    dev: &str,
    nd: Option<&Path>,
    ofed_file: (&str, &str),
    debugfs: &str,
) -> Result<PathBuf, Option<String>> {
    if let Some(nd) = nd.filter(|nd| ofed(Some(nd))) {
        return Ok(nd.join("ecn").join(ofed_file.0).join(ofed_file.1));
    }
    if root.device_driver(dev).as_deref() != Some(DRIVER) {
        return Err(None);
    }
    match cc_params_dir(root, dev) {
        Some(d) => match std::fs::metadata(&d) {
            Ok(m) if m.is_dir() => Ok(d.join(debugfs)),
            // debugfs is root's alone (0700): the service's user sees nothing.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(Some(format!(
                "{}: permission denied (debugfs is root's: rocewatch qos show run as root reads them)",
                d.display()
            ))),
            _ => Err(Some(format!(
                "{} is not there (debugfs not mounted: mount -t debugfs none /sys/kernel/debug; or the firmware does not allow querying and changing congestion control)",
                d.display()
            ))),
        },
        None => Err(Some(format!("{dev} has no parent PCI function"))),
    }
}

/// The DCQCN settings of a port: a value, `unsupported` (not an mlx5 device, or a file
/// its driver lacks), or `unknown` with where they were looked for.
pub(crate) fn dcqcn_settings(
    root: &SysRoot,
    dev: &str,
    nd: Option<&Path>,
) -> Vec<(&'static str, Setting)> {
    PARAMS
        .iter()
        .map(|prm| {
            let s = match param_file(root, dev, nd, prm.ofed, prm.debugfs) {
                Ok(f) => file_setting(&f),
                Err(None) => Setting::Unsupported,
                Err(Some(why)) => Setting::Unknown(why),
            };
            (prm.key, s)
        })
        .collect()
}

/// The debugfs file of a CNP setting, for a port whose netdev has no OFED sysfs file.
pub(crate) fn cnp_debugfs_file(root: &SysRoot, dev: &str, setting: &str) -> Option<PathBuf> {
    let (_, file) = CNP_DEBUGFS.iter().find(|(k, _)| *k == setting)?;
    if root.device_driver(dev).as_deref() != Some(DRIVER) {
        return None;
    }
    cc_params_dir(root, dev)
        .filter(|d| d.is_dir())
        .map(|d| d.join(file))
}

/// The file to write for `key`, or why there is none.
pub(crate) fn apply_file(
    root: &SysRoot,
    dev: &str,
    nd: Option<&Path>,
    key: &str,
) -> Result<PathBuf, PluginError> {
    let prm = PARAMS
        .iter()
        .find(|p| p.key == key)
        .ok_or_else(|| PluginError::Unsupported(format!("{key} is not a DCQCN parameter")))?;
    param_file(root, dev, nd, prm.ofed, prm.debugfs).map_err(|why| {
        PluginError::Unsupported(why.unwrap_or_else(|| {
            format!("{dev} is not an mlx5 device: no DCQCN parameters in Linux for its driver")
        }))
    })
}
