//! mlx5 ECN files (`class/net/<if>/ecn/roce_{np,rp}/enable/<prio>`): the enabled
//! priorities, the CNP files, and the priority-list syntax ("3,4", "none") they and PFC
//! are set with; the port's mlx5 `traffic_class` file.

use std::path::{Path, PathBuf};

use rocewatch_plugin_api::*;

use rocewatch_sysfs::SysRoot;

use crate::attr::{file_setting, outcome, read, value};

/// The priorities whose `<dir>/<prio>` file says 1, as "3" or "3,4" ("none" if none);
/// `unsupported` without the directory.
fn enabled_priorities(dir: &Path) -> Setting {
    if !dir.is_dir() {
        return Setting::Unsupported;
    }
    let mut on = Vec::new();
    for p in 0..8 {
        match read(&dir.join(p.to_string())) {
            Ok(Some(v)) if v == "1" => on.push(p.to_string()),
            Ok(_) => {}
            Err(e) => return Setting::Unknown(e),
        }
    }
    value(if on.is_empty() {
        "none".to_string()
    } else {
        on.join(",")
    })
}

/// "3,4" / "none" → the priorities.
pub(crate) fn priority_set(v: &str) -> Result<Vec<u8>, String> {
    if v == "none" {
        return Ok(Vec::new());
    }
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|p| match p.parse::<u8>() {
            Ok(n) if n < 8 => Ok(n),
            _ => Err(format!("{p:?} is not a priority (0-7)")),
        })
        .collect()
}

/// The ECN and CNP settings of the netdev whose `class/net/<if>` directory is `nd`.
pub(crate) fn ecn_settings(nd: &Path) -> [(&'static str, Setting); 4] {
    let ecn = nd.join("ecn");
    [
        (
            "ecn_np_enabled",
            enabled_priorities(&ecn.join("roce_np/enable")),
        ),
        (
            "ecn_rp_enabled",
            enabled_priorities(&ecn.join("roce_rp/enable")),
        ),
        ("cnp_dscp", file_setting(&ecn.join("roce_np/cnp_dscp"))),
        (
            "cnp_802p_prio",
            file_setting(&ecn.join("roce_np/cnp_802p_prio")),
        ),
    ]
}

/// The file of a CNP setting (`cnp_dscp`, `cnp_802p_prio`) of the netdev at `nd`.
pub(crate) fn cnp_file(nd: &Path, setting: &str) -> PathBuf {
    nd.join("ecn/roce_np").join(setting)
}

/// The `traffic_class` file of a port.
pub(crate) fn traffic_class_file(root: &SysRoot, dev: &str, port: u32) -> PathBuf {
    root.device_dir(dev)
        .join("tc")
        .join(port.to_string())
        .join("traffic_class")
}

/// Set `ecn_np_enabled` or `ecn_rp_enabled` of the netdev at `nd`: write the
/// `enable/<prio>` files that differ.
pub(crate) fn apply_enabled(
    nd: &Path,
    setting: &str,
    to: &str,
    dry_run: bool,
) -> Result<ApplyOutcome, PluginError> {
    let which = if setting == "ecn_np_enabled" {
        "roce_np"
    } else {
        "roce_rp"
    };
    let dir = nd.join("ecn").join(which).join("enable");
    if !dir.is_dir() {
        return Err(PluginError::Unsupported(format!(
            "{} is not there (not an mlx5 netdev)",
            dir.display()
        )));
    }
    let want = priority_set(to).map_err(PluginError::failed)?;
    let previous = match enabled_priorities(&dir) {
        Setting::Value(v) => Some(v),
        _ => None,
    };
    let mut wrote = Vec::new();
    for p in 0..8u8 {
        let f = dir.join(p.to_string());
        let on = want.contains(&p);
        let now = read(&f).map_err(PluginError::failed)?;
        if now.as_deref() == Some(if on { "1" } else { "0" }) {
            continue;
        }
        if !dry_run {
            std::fs::write(&f, if on { "1" } else { "0" })
                .map_err(|e| PluginError::failed(format!("write {}: {e}", f.display())))?;
        }
        wrote.push(format!("{}={}", p, u8::from(on)));
    }
    let msg = format!(
        "{} {} in {}",
        wrote.join(" "),
        if dry_run {
            "would be written"
        } else {
            "written"
        },
        dir.display()
    );
    Ok(outcome(!dry_run, msg, previous))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_syntax() {
        assert_eq!(priority_set("4,3").unwrap(), [4, 3]);
        assert_eq!(priority_set("none").unwrap(), [] as [u8; 0]);
        assert!(priority_set("8").is_err());
    }
}
