//! Devlink's eswitch mode (`devlink dev eswitch show pci/0000:3b:00.0`): whether an SR-IOV
//! PF's embedded switch runs in `legacy` mode (VFs configured through the PF's `ip link
//! set ... vf N` settings) or `switchdev` (each VF has a representor netdev and the
//! switching is the host's, e.g. OVS offload): in switchdev mode the PF's VF settings
//! that doctor's `sriov` topic judges (VLAN and its QoS) are not how VF traffic is
//! tagged.
//!
//! Numbers from `include/uapi/linux/devlink.h` (ABI, never reordered): the generic
//! netlink family "devlink" version 1, `DEVLINK_CMD_ESWITCH_GET` 29,
//! `DEVLINK_ATTR_BUS_NAME` 1 and `DEVLINK_ATTR_DEV_NAME` 2 (strings: the handle),
//! `DEVLINK_ATTR_ESWITCH_MODE` 25 (u16: `DEVLINK_ESWITCH_MODE_LEGACY` 0,
//! `DEVLINK_ESWITCH_MODE_SWITCHDEV` 1). The kernel's `devlink_nl_eswitch_fill()` puts the
//! handle, then the mode, inline mode and encap mode where the driver has the op; the
//! command needs `CAP_NET_ADMIN` (`GENL_ADMIN_PERM`), and a driver without
//! `eswitch_mode_get` answers `EOPNOTSUPP`.

use std::fmt;
use std::time::Duration;

use crate::genl::{self, GenlSocket};
use crate::msg::attrs;
use crate::NetlinkError;

/// The family's name.
pub const DEVLINK_GENL_NAME: &str = "devlink";
/// `DEVLINK_GENL_VERSION`.
pub const DEVLINK_GENL_VERSION: u8 = 1;
/// `DEVLINK_CMD_ESWITCH_GET`.
pub const DEVLINK_CMD_ESWITCH_GET: u8 = 29;
/// `DEVLINK_ATTR_BUS_NAME` (string).
pub const DEVLINK_ATTR_BUS_NAME: u16 = 1;
/// `DEVLINK_ATTR_DEV_NAME` (string).
pub const DEVLINK_ATTR_DEV_NAME: u16 = 2;
/// `DEVLINK_ATTR_ESWITCH_MODE` (u16).
pub const DEVLINK_ATTR_ESWITCH_MODE: u16 = 25;

/// An eswitch mode as the kernel numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EswitchMode {
    Legacy,
    Switchdev,
    /// A value this reader does not know (a newer kernel's).
    Other(u16),
}

impl EswitchMode {
    fn from_u16(v: u16) -> Self {
        match v {
            0 => EswitchMode::Legacy,
            1 => EswitchMode::Switchdev,
            v => EswitchMode::Other(v),
        }
    }
}

impl fmt::Display for EswitchMode {
    /// In `devlink dev eswitch show`'s words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EswitchMode::Legacy => f.write_str("legacy"),
            EswitchMode::Switchdev => f.write_str("switchdev"),
            EswitchMode::Other(v) => write!(f, "mode {v}"),
        }
    }
}

/// The `DEVLINK_CMD_ESWITCH_GET` request for PCI function `pci` (`0000:3b:00.0`).
pub fn encode_eswitch_get(family: u16, pci: &str, seq: u32) -> Vec<u8> {
    genl::request(family, DEVLINK_CMD_ESWITCH_GET, DEVLINK_GENL_VERSION, seq)
        .attr_str(DEVLINK_ATTR_BUS_NAME, "pci")
        .attr_str(DEVLINK_ATTR_DEV_NAME, pci)
        .finish()
}

/// The mode in an eswitch reply's payload; `None` when the reply has no mode attribute.
pub fn decode_eswitch_mode(payload: &[u8]) -> Result<Option<EswitchMode>, String> {
    for a in attrs(genl::reply_attrs(payload)?) {
        let a = a?;
        if a.ty == DEVLINK_ATTR_ESWITCH_MODE {
            let b = a.data.get(..2).ok_or_else(|| {
                format!("DEVLINK_ATTR_ESWITCH_MODE: {} bytes, want 2", a.data.len())
            })?;
            return Ok(Some(EswitchMode::from_u16(u16::from_ne_bytes([
                b[0], b[1],
            ]))));
        }
    }
    Ok(None)
}

/// What the kernel said of one PF's eswitch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eswitch {
    Mode(EswitchMode),
    /// No devlink family (a kernel without devlink), the device not registered with
    /// devlink, or a driver without the op: said in words.
    NotReported(String),
}

/// The eswitch mode of PCI function `pci` on the running kernel.
pub fn eswitch_mode(pci: &str, timeout: Duration) -> Result<Eswitch, NetlinkError> {
    let mut s = GenlSocket::open(timeout)?;
    let Some(family) = s.family_id(DEVLINK_GENL_NAME)? else {
        return Ok(Eswitch::NotReported(
            "the kernel has no devlink netlink family".into(),
        ));
    };
    let sock = s.socket();
    let seq = sock.next_seq();
    let req = encode_eswitch_get(family, pci, seq);
    let mut mode = None;
    let what = format!("DEVLINK_CMD_ESWITCH_GET pci/{pci}");
    match sock.request(&what, &req, seq, false, |m| {
        mode = decode_eswitch_mode(m.payload)?;
        Ok(())
    }) {
        Ok(()) => Ok(match mode {
            Some(m) => Eswitch::Mode(m),
            None => Eswitch::NotReported(format!("pci/{pci}: the reply carries no mode")),
        }),
        Err(NetlinkError::Kernel { errno, .. }) if errno == libc::EOPNOTSUPP => {
            Ok(Eswitch::NotReported(format!(
                "pci/{pci}: the driver does not report an eswitch mode"
            )))
        }
        Err(NetlinkError::Kernel { errno, .. }) if errno == libc::ENODEV => Ok(
            Eswitch::NotReported(format!("pci/{pci}: not a devlink device")),
        ),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{self, MessageBuilder};
    use proptest::prelude::*;

    /// A reply as `devlink_nl_eswitch_fill()` builds it: the handle, then the mode (u16).
    fn eswitch_reply(mode: u16) -> Vec<u8> {
        let mut b = MessageBuilder::new(0x15, 0, 1);
        b.family_header(&genl::genl_header(DEVLINK_CMD_ESWITCH_GET, 1))
            .attr_str(DEVLINK_ATTR_BUS_NAME, "pci")
            .attr_str(DEVLINK_ATTR_DEV_NAME, "0000:3b:00.0")
            .attr_bytes(DEVLINK_ATTR_ESWITCH_MODE, &mode.to_ne_bytes());
        b.finish()
    }

    fn payload_of(m: &[u8]) -> Vec<u8> {
        msg::messages(m).next().unwrap().unwrap().payload.to_vec()
    }

    #[test]
    fn request_names_the_pci_handle() {
        let m = encode_eswitch_get(0x15, "0000:3b:00.0", 7);
        let msg = msg::messages(&m).next().unwrap().unwrap();
        assert_eq!((msg.ty, msg.seq), (0x15, 7));
        assert_eq!(&msg.payload[..2], &[29, 1]);
        let a: Vec<_> = attrs(&msg.payload[4..]).collect::<Result<_, _>>().unwrap();
        assert_eq!((a[0].ty, a[0].str()), (1, Some("pci")));
        assert_eq!((a[1].ty, a[1].str()), (2, Some("0000:3b:00.0")));
    }

    #[test]
    fn modes_in_devlinks_words() {
        let mode = |v| decode_eswitch_mode(&payload_of(&eswitch_reply(v))).unwrap();
        assert_eq!(mode(0), Some(EswitchMode::Legacy));
        assert_eq!(mode(1), Some(EswitchMode::Switchdev));
        assert_eq!(mode(7), Some(EswitchMode::Other(7)));
        assert_eq!(EswitchMode::Legacy.to_string(), "legacy");
        assert_eq!(EswitchMode::Switchdev.to_string(), "switchdev");
        let mut short = MessageBuilder::new(0x15, 0, 1);
        short
            .family_header(&genl::genl_header(DEVLINK_CMD_ESWITCH_GET, 1))
            .attr_bytes(DEVLINK_ATTR_ESWITCH_MODE, &[1]);
        let e = decode_eswitch_mode(&payload_of(&short.finish())).unwrap_err();
        assert!(
            e.contains("DEVLINK_ATTR_ESWITCH_MODE: 1 bytes, want 2"),
            "{e}"
        );
    }

    proptest! {
        #[test]
        fn any_payload_decodes_or_names_what_is_wrong(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Err(e) = decode_eswitch_mode(&bytes) {
                prop_assert!(!e.is_empty());
            }
        }
    }

    /// The running kernel: a device nobody has is not reported (ENODEV), never an error
    /// that would fail doctor; without CAP_NET_ADMIN the kernel says EPERM, an error.
    #[test]
    fn live_kernel_a_device_nobody_has_is_not_reported() {
        match eswitch_mode("0000:ff:1f.7", Duration::from_secs(2)) {
            Ok(Eswitch::NotReported(why)) => assert!(!why.is_empty()),
            Ok(other) => panic!("a made-up device has an eswitch: {other:?}"),
            Err(e) => {
                eprintln!("SKIPPED: devlink not usable here: {e}");
                if std::env::var_os("ROCEWATCH_REQUIRE_ALL").is_some() {
                    panic!("ROCEWATCH_REQUIRE_ALL: {e}");
                }
            }
        }
    }
}
