//! Where to capture RoCE traffic: the VLAN offload state to turn off and to restore.

use super::host::run_tool;

/// The `ethtool -k IF` state of rx-vlan-offload (`on`/`off`), when ethtool tells.
pub(super) fn vlan_offload(nd: &str) -> Option<String> {
    let text = run_tool("ethtool", &["-k", nd])?.ok()?;
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("rx-vlan-offload:")
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
    })
}
