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

/// Characters that mean nothing to `sh` anywhere in an argument word (as
/// `rocewatch_doctor::shell`, which this plugin cannot depend on).
fn plain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "=,:^_./-+@%".contains(c)
}

/// `s` as one POSIX `sh` word on one line, as the doctor's `word_on_one_line`: control
/// characters escaped (`\n`, `\x1b`), then bare when nothing in it means anything to the
/// shell, else in single quotes (a quote written `'\''`).
fn sh_word(s: &str) -> String {
    let mut line = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => line.push_str(r"\n"),
            '\r' => line.push_str(r"\r"),
            '\t' => line.push_str(r"\t"),
            c if c.is_control() => line.push_str(&format!(r"\x{:02x}", u32::from(c))),
            c => line.push(c),
        }
    }
    if !line.is_empty() && line.chars().all(plain_char) {
        return line;
    }
    format!("'{}'", line.replace('\'', r"'\''"))
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
            sh_word(&cm.join(dev).display().to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Item 2 of issue 27: the copy-paste `mkdir` in the reason was unquoted, so a device
    /// named `mlx5_1 $(touch Q)` gave a command that runs `touch Q`.
    #[test]
    fn the_mkdir_in_the_reason_is_one_quoted_word() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernel/config/rdma_cm")).unwrap();
        let root = SysRoot::new(dir.path());
        let dev = "mlx5_1 $(touch Q) `touch R` it's";
        let [(_, mode), _] = roce_settings(&root, dev, 1);
        let Setting::Unknown(why) = mode else {
            panic!("{mode:?}")
        };
        let path = dir.path().join("kernel/config/rdma_cm").join(dev);
        let quoted = format!("'{}'", path.display().to_string().replace('\'', r"'\''"));
        assert!(why.ends_with(&format!("mkdir {quoted})")), "{why}");

        // A plain name stays bare (what people copy, and what tests look for).
        let [(_, mode), _] = roce_settings(&root, "mlx5_1", 1);
        let Setting::Unknown(why) = mode else {
            panic!("{mode:?}")
        };
        let plain = dir.path().join("kernel/config/rdma_cm/mlx5_1");
        if plain.display().to_string().chars().all(plain_char) {
            assert!(
                why.ends_with(&format!("mkdir {})", plain.display())),
                "{why}"
            );
        }

        // A line break cannot end the command: escaped, then quoted.
        let [(_, mode), _] = roce_settings(&root, "mlx5_1\nrm -rf x", 1);
        let Setting::Unknown(why) = mode else {
            panic!("{mode:?}")
        };
        let command = why.split_once("mkdir ").unwrap().1;
        assert!(!command.contains('\n'), "{why}");
        assert!(why.ends_with(r"/mlx5_1\nrm -rf x')"), "{why}");
    }
}
