//! mlx5 ECN files (`class/net/<if>/ecn/roce_{np,rp}/enable/<prio>`): the enabled
//! priorities, and the priority-list syntax ("3,4", "none") they and PFC are set with.

use std::path::Path;

use rocewatch_plugin_api::*;

use crate::attr::{read, value};

/// The priorities whose `<dir>/<prio>` file says 1, as "3" or "3,4" ("none" if none);
/// `unsupported` without the directory.
pub(crate) fn enabled_priorities(dir: &Path) -> Setting {
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
