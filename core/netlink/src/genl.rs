//! Generic netlink (`NETLINK_GENERIC`): the message header every family shares (`struct
//! genlmsghdr`: command, version, reserved) and the controller's `CTRL_CMD_GETFAMILY`,
//! which turns a family's name ("ethtool") into the message type its requests carry.
//!
//! Numbers from `include/uapi/linux/genetlink.h`: `GENL_ID_CTRL` is `NLMSG_MIN_TYPE`
//! (0x10), `CTRL_CMD_GETFAMILY` 3, `CTRL_ATTR_FAMILY_ID` 1 (u16), `CTRL_ATTR_FAMILY_NAME`
//! 2 (string). A family the kernel does not have is answered with `ENOENT`
//! (`ctrl_getfamily()` in `net/netlink/genetlink.c`).

use std::time::Duration;

use crate::msg::{self, attrs, MessageBuilder};
use crate::socket::NetlinkSocket;
use crate::NetlinkError;

/// `NETLINK_GENERIC`.
pub const NETLINK_GENERIC: libc::c_int = 16;
/// `GENL_ID_CTRL`: the controller family's message type.
pub const GENL_ID_CTRL: u16 = 0x10;
/// `CTRL_CMD_GETFAMILY`.
pub const CTRL_CMD_GETFAMILY: u8 = 3;
/// `CTRL_ATTR_FAMILY_ID` (u16).
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `CTRL_ATTR_FAMILY_NAME` (string).
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// `sizeof(struct genlmsghdr)` (`GENL_HDRLEN`).
pub const GENL_HDRLEN: usize = 4;

/// The `struct genlmsghdr` bytes of a request: `cmd`, `version`, two reserved bytes.
pub fn genl_header(cmd: u8, version: u8) -> [u8; GENL_HDRLEN] {
    [cmd, version, 0, 0]
}

/// A request to generic netlink family `family` (its id), command `cmd`.
pub fn request(family: u16, cmd: u8, version: u8, seq: u32) -> MessageBuilder {
    let mut b = MessageBuilder::new(family, msg::F_REQUEST, seq);
    b.family_header(&genl_header(cmd, version));
    b
}

/// The `CTRL_CMD_GETFAMILY` request for family `name`.
pub fn encode_get_family(name: &str, seq: u32) -> Vec<u8> {
    request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, seq)
        .attr_str(CTRL_ATTR_FAMILY_NAME, name)
        .finish()
}

/// The attributes of a generic netlink reply payload: what follows its `genlmsghdr`.
pub fn reply_attrs(payload: &[u8]) -> Result<&[u8], String> {
    payload.get(GENL_HDRLEN..).ok_or_else(|| {
        format!(
            "{} bytes: shorter than the generic netlink header",
            payload.len()
        )
    })
}

/// The family id in a `CTRL_CMD_NEWFAMILY` reply (the answer to `GETFAMILY`).
pub fn decode_family_id(payload: &[u8]) -> Result<u16, String> {
    for a in attrs(reply_attrs(payload)?) {
        let a = a?;
        if a.ty == CTRL_ATTR_FAMILY_ID {
            let b = a
                .data
                .get(..2)
                .ok_or_else(|| format!("CTRL_ATTR_FAMILY_ID: {} bytes, want 2", a.data.len()))?;
            return Ok(u16::from_ne_bytes([b[0], b[1]]));
        }
    }
    Err("no CTRL_ATTR_FAMILY_ID in the controller's reply".into())
}

/// A generic netlink socket.
#[derive(Debug)]
pub struct GenlSocket {
    pub(crate) sock: NetlinkSocket,
}

impl GenlSocket {
    /// Opens a `NETLINK_GENERIC` socket whose replies time out after `timeout`.
    pub fn open(timeout: Duration) -> Result<Self, NetlinkError> {
        Ok(GenlSocket {
            sock: NetlinkSocket::open(NETLINK_GENERIC, "generic netlink", timeout)?,
        })
    }

    /// The id of family `name`; `None` when the kernel has no such family (`ENOENT`).
    pub fn family_id(&mut self, name: &str) -> Result<Option<u16>, NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_get_family(name, seq);
        let mut id = None;
        let what = format!("CTRL_CMD_GETFAMILY {name}");
        match self.sock.request(&what, &req, seq, false, |m| {
            id = Some(decode_family_id(m.payload)?);
            Ok(())
        }) {
            Ok(()) => Ok(id),
            Err(NetlinkError::Kernel { errno, .. }) if errno == libc::ENOENT => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The underlying socket.
    pub fn socket(&mut self) -> &mut NetlinkSocket {
        &mut self.sock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `CTRL_CMD_NEWFAMILY` reply as `ctrl_fill_info()` starts it: the family id (u16)
    /// and name, then its version, header size and ops (left out here).
    fn family_reply(id: u16, name: &str) -> Vec<u8> {
        let mut b = MessageBuilder::new(GENL_ID_CTRL, 0, 1);
        b.family_header(&genl_header(1, 2))
            .attr_bytes(CTRL_ATTR_FAMILY_ID, &id.to_ne_bytes())
            .attr_str(CTRL_ATTR_FAMILY_NAME, name);
        b.finish()
    }

    #[test]
    fn get_family_request_bytes() {
        let m = encode_get_family("ethtool", 9);
        let msg = msg::messages(&m).next().unwrap().unwrap();
        assert_eq!((msg.ty, msg.flags, msg.seq), (0x10, msg::F_REQUEST, 9));
        assert_eq!(&msg.payload[..4], &[3, 1, 0, 0]);
        let a: Vec<_> = attrs(&msg.payload[4..]).collect::<Result<_, _>>().unwrap();
        assert_eq!((a[0].ty, a[0].str()), (2, Some("ethtool")));
    }

    #[test]
    fn family_id_from_reply() {
        let r = family_reply(0x1a, "ethtool");
        let msg = msg::messages(&r).next().unwrap().unwrap();
        assert_eq!(decode_family_id(msg.payload), Ok(0x1a));
        let e = decode_family_id(&[1, 2]).unwrap_err();
        assert!(e.contains("generic netlink header"), "{e}");
        let mut no_id = MessageBuilder::new(GENL_ID_CTRL, 0, 1);
        no_id
            .family_header(&genl_header(1, 2))
            .attr_str(CTRL_ATTR_FAMILY_NAME, "x");
        let no_id = no_id.finish();
        let msg = msg::messages(&no_id).next().unwrap().unwrap();
        assert!(decode_family_id(msg.payload)
            .unwrap_err()
            .contains("CTRL_ATTR_FAMILY_ID"));
    }

    /// The running kernel: "nlctrl" (the controller itself) always exists; a made-up
    /// family is `None`, not an error (what a kernel without ethtool netlink answers for
    /// "ethtool").
    #[test]
    fn live_kernel_resolves_the_controller_and_not_a_made_up_family() {
        let mut s = match GenlSocket::open(Duration::from_secs(2)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("SKIPPED: no generic netlink socket here: {e}");
                if std::env::var_os("ROCEWATCH_REQUIRE_ALL").is_some() {
                    panic!("ROCEWATCH_REQUIRE_ALL: {e}");
                }
                return;
            }
        };
        assert_eq!(s.family_id("nlctrl").unwrap(), Some(GENL_ID_CTRL));
        // Names are at most GENL_NAMSIZ - 1 (15) bytes: a longer one is EINVAL, not ENOENT.
        assert_eq!(s.family_id("rw-no-such").unwrap(), None);
    }
}
