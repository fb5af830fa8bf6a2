//! The host's modules for `rocewatch optics` without `--eeprom-file`: every netdev backed
//! by a device under the sysfs root, read over ethtool netlink by page and bank
//! (`rocewatch_netlink::module_eeprom`), through the ioctls' linear dump
//! (`rocewatch_ethtool::module`) where netlink cannot. A port whose driver reads no
//! module (a virtual NIC, an empty or absent cage) is said on stderr and left out; a read
//! that fails is said with the port, and the other ports still shown.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use rocewatch_netlink::ethtool::{EthtoolError, EthtoolNetlink};
use rocewatch_netlink::module_eeprom::{host_modules, ModuleRead};

/// The modules of the ports under `sysfs_root` (`/sys` on a host), by netdev name: what
/// `optics.rs`'s `KERNEL_READER` shows.
pub fn read_host(sysfs_root: &str) -> Result<Vec<(String, ModuleRead)>> {
    let mut nl = match EthtoolNetlink::open(Duration::from_secs(5)) {
        Ok(n) => Some(n),
        Err(EthtoolError::NoFamily) => None,
        Err(e) => return Err(e).context("ethtool netlink"),
    };
    let root = Path::new(sysfs_root);
    let ports = host_modules(root, nl.as_mut(), rocewatch_ethtool::module::module_dump)
        .with_context(|| {
            format!(
                "listing the netdevs under {}",
                root.join("class/net").display()
            )
        })?;
    let mut out = Vec::new();
    for (ifname, read) in ports {
        match read {
            Ok(Some(m)) => {
                for p in &m.problems {
                    eprintln!("rocewatch optics: {ifname}: {p}");
                }
                out.push((ifname, m));
            }
            Ok(None) => eprintln!("rocewatch optics: {ifname}: the driver reads no module"),
            Err(e) => eprintln!("rocewatch optics: {e}"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This host's NICs (a VM's virtio-net here: no module cage) answer EOPNOTSUPP over
    /// netlink and the ioctl alike: each said on stderr, none shown, no error.
    #[test]
    fn this_host_reads_without_failing() {
        if !Path::new("/sys/class/net").is_dir() {
            eprintln!("SKIPPED: no /sys/class/net here");
            return;
        }
        let got = read_host("/sys").unwrap();
        for (ifname, m) in &got {
            eprintln!("{ifname}: identifier 0x{:02x}", m.eeprom.identifier());
        }
        assert!(got.iter().all(|(ifname, _)| Path::new("/sys/class/net")
            .join(ifname)
            .join("device")
            .exists()));
    }
}
