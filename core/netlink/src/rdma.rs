//! The RDMA netlink "nldev" client (`rdma dev show`, `rdma statistic show`): the list of
//! devices with their kernel index, and the hw counters of a port in one message
//! (`RDMA_NLDEV_CMD_STAT_GET`) instead of one sysfs file per counter.
//!
//! Numbers from `include/uapi/rdma/rdma_netlink.h`.

use std::time::Duration;

use crate::msg::{self, attrs, Attr, MessageBuilder};
use crate::socket::NetlinkSocket;
use crate::NetlinkError;

/// `NETLINK_RDMA`.
pub const NETLINK_RDMA: libc::c_int = 20;
/// `RDMA_NL_NLDEV`.
const RDMA_NL_NLDEV: u16 = 5;
/// `RDMA_NLDEV_CMD_GET`.
pub const CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_STAT_GET`.
pub const CMD_STAT_GET: u16 = 17;

/// `RDMA_NLDEV_ATTR_DEV_INDEX` (u32).
pub const ATTR_DEV_INDEX: u16 = 1;
/// `RDMA_NLDEV_ATTR_DEV_NAME` (string).
pub const ATTR_DEV_NAME: u16 = 2;
/// `RDMA_NLDEV_ATTR_PORT_INDEX` (u32; in a device reply, the last port).
pub const ATTR_PORT_INDEX: u16 = 3;
/// `RDMA_NLDEV_ATTR_STAT_HWCOUNTERS` (nested).
pub const ATTR_STAT_HWCOUNTERS: u16 = 80;
/// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY` (nested).
pub const ATTR_STAT_HWCOUNTER_ENTRY: u16 = 81;
/// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME` (string).
pub const ATTR_STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
/// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE` (u64).
pub const ATTR_STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;

/// `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)`.
pub const fn nldev_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + op
}

/// An RDMA device as netlink names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    /// The kernel's device index (what requests are addressed by).
    pub index: u32,
    pub name: String,
    /// The last port number (ports are 1..=ports).
    pub ports: u32,
}

/// The dump request for every device (`rdma dev show`).
pub fn encode_device_dump(seq: u32) -> Vec<u8> {
    MessageBuilder::new(nldev_type(CMD_GET), msg::F_REQUEST | msg::F_DUMP, seq).finish()
}

/// The hw counters request for one port (`rdma statistic show link DEV/PORT`).
pub fn encode_stat_get(seq: u32, dev_index: u32, port: u32) -> Vec<u8> {
    MessageBuilder::new(nldev_type(CMD_STAT_GET), msg::F_REQUEST, seq)
        .attr_u32(ATTR_DEV_INDEX, dev_index)
        .attr_u32(ATTR_PORT_INDEX, port)
        .finish()
}

fn collect_attrs(payload: &[u8]) -> Result<Vec<Attr<'_>>, String> {
    attrs(payload).collect()
}

/// One device from a `RDMA_NLDEV_CMD_GET` reply message's payload.
pub fn decode_device(payload: &[u8]) -> Result<RdmaDevice, String> {
    let (mut index, mut name, mut ports) = (None, None, 0);
    for a in collect_attrs(payload)? {
        match a.ty {
            ATTR_DEV_INDEX => index = a.u32(),
            ATTR_DEV_NAME => name = a.str().map(str::to_string),
            ATTR_PORT_INDEX => ports = a.u32().unwrap_or(0),
            _ => {}
        }
    }
    match (index, name) {
        (Some(index), Some(name)) => Ok(RdmaDevice { index, name, ports }),
        _ => Err("device without index or name".to_string()),
    }
}

/// Calls `f(name, value)` for every hw counter of a `RDMA_NLDEV_CMD_STAT_GET` reply
/// payload, in the kernel's order; returns how many there were.
pub fn decode_hw_counters(payload: &[u8], mut f: impl FnMut(&str, u64)) -> Result<usize, String> {
    let mut n = 0;
    let mut seen_table = false;
    for a in attrs(payload) {
        let a = a?;
        if a.ty != ATTR_STAT_HWCOUNTERS {
            continue;
        }
        seen_table = true;
        for entry in a.nested() {
            let entry = entry?;
            if entry.ty != ATTR_STAT_HWCOUNTER_ENTRY {
                continue;
            }
            let (mut name, mut value) = (None, None);
            for field in entry.nested() {
                let field = field?;
                match field.ty {
                    ATTR_STAT_HWCOUNTER_ENTRY_NAME => name = field.str(),
                    ATTR_STAT_HWCOUNTER_ENTRY_VALUE => value = field.u64(),
                    _ => {}
                }
            }
            match (name, value) {
                (Some(name), Some(value)) => {
                    f(name, value);
                    n += 1;
                }
                _ => return Err("hw counter entry without name or value".to_string()),
            }
        }
    }
    if !seen_table {
        return Err("no hw counter table in the reply".to_string());
    }
    Ok(n)
}

/// A client for the RDMA nldev family.
#[derive(Debug)]
pub struct RdmaNetlink {
    /// Also used by the resource and statistic-counter requests (`rdma_res`, `rdma_stat`).
    pub(crate) sock: NetlinkSocket,
}

impl RdmaNetlink {
    /// Opens the socket. Fails on kernels without RDMA support (`EPROTONOSUPPORT`).
    pub fn open() -> Result<Self, NetlinkError> {
        Ok(RdmaNetlink {
            sock: NetlinkSocket::open(NETLINK_RDMA, "RDMA", Duration::from_secs(2))?,
        })
    }

    /// Record every request and reply under `dir` (see [`NetlinkSocket::capture_to`]).
    pub fn capture_to(&mut self, dir: std::path::PathBuf) {
        self.sock.capture_to(dir);
    }

    /// Every RDMA device of this network namespace.
    pub fn devices(&mut self) -> Result<Vec<RdmaDevice>, NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_device_dump(seq);
        let mut out = Vec::new();
        self.sock.request("device dump", &req, seq, true, |m| {
            out.push(decode_device(m.payload)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f(name, value)` for every hw counter of a port; returns how many.
    pub fn hw_counters(
        &mut self,
        dev_index: u32,
        port: u32,
        f: impl FnMut(&str, u64),
    ) -> Result<usize, NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_stat_get(seq, dev_index, port);
        let mut f = f;
        let mut n = 0;
        self.sock.request("hw counters", &req, seq, false, |m| {
            n = decode_hw_counters(m.payload, &mut f)?;
            Ok(())
        })?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bytes() {
        // What `rdma statistic show link rxe0/1` sends for device index 1, port 1
        // (without its NLM_F_ACK): type 0x1411, flags REQUEST, two u32 attributes.
        let r = encode_stat_get(9, 1, 1);
        let mut want = Vec::new();
        want.extend_from_slice(&32u32.to_ne_bytes());
        want.extend_from_slice(&0x1411u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(&9u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        for (ty, v) in [(1u16, 1u32), (3, 1)] {
            want.extend_from_slice(&8u16.to_ne_bytes());
            want.extend_from_slice(&ty.to_ne_bytes());
            want.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(r, want);
        let d = encode_device_dump(1);
        assert_eq!(d.len(), 16);
        assert_eq!(u16::from_ne_bytes([d[4], d[5]]), 0x1401);
        assert_eq!(u16::from_ne_bytes([d[6], d[7]]), 0x301);
    }
}

/// Against messages recorded from a real kernel (testdata/README.md).
#[cfg(test)]
mod recorded {
    use super::*;
    use crate::msg::messages;

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/rxe-6.1/");

    fn file(name: &str) -> Vec<u8> {
        std::fs::read(format!("{DIR}{name}")).unwrap()
    }

    #[test]
    fn requests_are_byte_for_byte_what_was_sent() {
        assert_eq!(encode_device_dump(1), file("dev-dump-request.bin"));
        assert_eq!(encode_stat_get(3, 0, 1), file("stat-get-request.bin"));
    }

    #[test]
    fn device_dump_reply() {
        let reply = file("dev-dump-reply-1.bin");
        let m: Vec<_> = messages(&reply).collect::<Result<_, _>>().unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].ty, m[0].seq), (nldev_type(CMD_GET), 1));
        let d = decode_device(m[0].payload).unwrap();
        assert_eq!(
            d,
            RdmaDevice {
                index: 0,
                name: "rxe0".into(),
                ports: 1
            }
        );
        let done = file("dev-dump-reply-2.bin");
        let m: Vec<_> = messages(&done).collect::<Result<_, _>>().unwrap();
        assert_eq!(m[0].ty, msg::T_DONE);
        assert_eq!(m[0].done_code(), Some(0), "a dump that succeeded");
    }

    #[test]
    fn stat_get_reply_matches_rdma_statistic_and_sysfs() {
        let reply = file("stat-get-reply.bin");
        let m: Vec<_> = messages(&reply).collect::<Result<_, _>>().unwrap();
        assert_eq!((m[0].ty, m[0].seq), (nldev_type(CMD_STAT_GET), 3));
        let mut ours = Vec::new();
        let n = decode_hw_counters(m[0].payload, |k, v| ours.push((k.to_string(), v))).unwrap();
        assert_eq!(n, 15);
        // `rdma -j statistic show`: [{"ifname":"rxe0","port":1,"sent_pkts":128000,...}]
        let json = String::from_utf8(file("rdma-statistic-show.json")).unwrap();
        let body = json.trim().trim_start_matches("[{").trim_end_matches("}]");
        let rdma: Vec<(String, u64)> = body
            .split(',')
            .filter_map(|kv| {
                let (k, v) = kv.split_once(':')?;
                Some((k.trim_matches('"').to_string(), v.parse().ok()?))
            })
            .filter(|(k, _)| k != "port")
            .collect();
        assert_eq!(
            ours, rdma,
            "same names, order and values as rdma statistic show"
        );
        let sysfs = String::from_utf8(file("sysfs-hw_counters.txt")).unwrap();
        for (k, v) in &ours {
            assert!(
                sysfs.lines().any(|l| l == format!("{k}:{v}")),
                "{k}={v} not in sysfs"
            );
        }
        assert!(ours.contains(&("sent_pkts".to_string(), 128_000)));
    }

    #[test]
    fn a_truncated_reply_loses_counters_or_errors_never_panics() {
        let reply = file("stat-get-reply.bin");
        let m: Vec<_> = messages(&reply).collect::<Result<_, _>>().unwrap();
        let payload = m[0].payload;
        // Cutting into the last entry's value (8 bytes before the end) must lose it.
        for cut in 0..payload.len() - 8 {
            match decode_hw_counters(&payload[..cut], |_, _| {}) {
                Ok(n) => assert!(n < 15, "cut at {cut} still decoded {n}"),
                Err(e) => assert!(!e.is_empty()),
            }
        }
    }
}
