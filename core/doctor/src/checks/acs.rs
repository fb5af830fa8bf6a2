//! PCIe Access Control Services on the bridges between GPUs and NICs that share a PCIe
//! switch: with P2P Request Redirect on, GPUDirect traffic that could cross the switch
//! goes up to the root complex and back (less bandwidth, more latency, or none at all
//! where the root complex does not route peer-to-peer). Read from each bridge's config
//! space (sysfs `config`, readable in full by root only).

use std::collections::BTreeMap;
use std::path::PathBuf;

use rocewatch_sysfs::pci::{acs_control, bridges_between, proximity, ConfigSpaceError};
use rocewatch_sysfs::SysRoot;

use super::gpu::Placed;
use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// What a bridge's config space says about ACS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BridgeAcs {
    /// Redirect on: the control register's offset and value.
    Redirects {
        at: usize,
        control: u16,
        enabled: Vec<&'static str>,
    },
    /// ACS absent, or present without P2P Request Redirect.
    Passes,
    /// Not readable here, and why.
    Unknown(String),
}

/// The verdict on one bridge from its config bytes (`None`: no `config` file).
pub(crate) fn bridge_acs(config: Option<&[u8]>) -> BridgeAcs {
    let Some(c) = config else {
        return BridgeAcs::Unknown("no config file".into());
    };
    match acs_control(c) {
        Ok(Some((cap, ctl))) if ctl.p2p_request_redirect() => BridgeAcs::Redirects {
            at: cap + 6,
            control: ctl.0,
            enabled: ctl.enabled(),
        },
        Ok(_) => BridgeAcs::Passes,
        Err(e @ ConfigSpaceError::Short { .. }) => {
            BridgeAcs::Unknown(format!("{e}: run doctor as root to read it"))
        }
        Err(e) => BridgeAcs::Unknown(e.to_string()),
    }
}

/// The ACS of every bridge between a GPU and a NIC below one root complex.
pub(crate) fn acs_checks(root: &SysRoot, gpus: &[Placed], nics: &[Placed]) -> Vec<Check> {
    // Bridge address → its directory and the pairs it sits between.
    let mut bridges: BTreeMap<String, (PathBuf, Vec<String>)> = BTreeMap::new();
    for g in gpus {
        for n in nics {
            let p = proximity(&g.function, g.node, &n.function, n.node);
            if !p.below_root_complex() {
                continue;
            }
            for b in bridges_between(&g.function, &n.function) {
                let dir = root
                    .pci_dir_in_chain(&g.function, b)
                    .or_else(|| root.pci_dir_in_chain(&n.function, b));
                let Some(dir) = dir else { continue };
                bridges
                    .entry(b.to_string())
                    .or_insert_with(|| (dir, Vec::new()))
                    .1
                    .push(format!("{}–{}", g.name, n.name));
            }
        }
    }
    if bridges.is_empty() {
        return vec![check(
            "acs",
            "",
            Status::Skip,
            "no GPU shares a PCIe switch with an RDMA device: their traffic goes through the root complex whatever ACS says",
            None,
        )];
    }
    let mut out = Vec::new();
    let mut passing = Vec::new();
    let mut unknown = Vec::new();
    for (addr, (dir, pairs)) in &bridges {
        let config = root.pci_config(dir).unwrap_or(None);
        match bridge_acs(config.as_deref()) {
            BridgeAcs::Redirects { at, control, enabled } => out.push(check(
                "acs",
                addr,
                Status::Warn,
                format!(
                    "ACS P2P Request Redirect on (control {control:#06x} at {at:#x}: {}), between {}: GPUDirect traffic goes up to the root complex instead of across the switch",
                    enabled.join(", "),
                    pairs.join(", ")
                ),
                Some(format!(
                    "turn ACS off for this switch in the BIOS (often \"ACS Control\" or \"PCIe ACS\" in the PCIe or chipset settings); to test, until the next reboot: setpci -s {} ECAP_ACS+0x6.w=0000. ACS isolates devices for the IOMMU: keep it where devices are passed through to virtual machines",
                    word(addr)
                )),
            )),
            BridgeAcs::Passes => passing.push(addr.as_str()),
            BridgeAcs::Unknown(why) => unknown.push(format!("{addr}: {why}")),
        }
    }
    if !unknown.is_empty() {
        out.push(check("acs", "", Status::Skip, unknown.join("; "), None));
    }
    if !passing.is_empty() {
        out.push(check(
            "acs",
            "",
            Status::Pass,
            format!(
                "no P2P Request Redirect on {} between GPUs and NICs",
                passing.join(", ")
            ),
            None,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Config bytes as recorded from a switch downstream port: AER at 0x100, ACS at
    /// 0x148 with control `ctl`.
    fn recorded(ctl: u16) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0x100..0x104].copy_from_slice(&(0x0001u32 | (2 << 16) | (0x148 << 20)).to_le_bytes());
        c[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
        c[0x14c..0x14e].copy_from_slice(&0x007fu16.to_le_bytes());
        c[0x14e..0x150].copy_from_slice(&ctl.to_le_bytes());
        c
    }

    #[test]
    fn redirect_on_off_and_unreadable() {
        assert_eq!(
            bridge_acs(Some(&recorded(0x001d))),
            BridgeAcs::Redirects {
                at: 0x14e,
                control: 0x001d,
                enabled: vec![
                    "Source Validation",
                    "P2P Request Redirect",
                    "P2P Completion Redirect",
                    "Upstream Forwarding"
                ]
            }
        );
        // Source Validation alone does not redirect.
        assert_eq!(bridge_acs(Some(&recorded(0x0001))), BridgeAcs::Passes);
        // What a user who is not root reads.
        match bridge_acs(Some(&recorded(0x001d)[..64])) {
            BridgeAcs::Unknown(why) => assert!(why.contains("run doctor as root"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(bridge_acs(None), BridgeAcs::Unknown(_)));
    }
}
