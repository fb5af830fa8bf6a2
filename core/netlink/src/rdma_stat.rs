//! Per-QP statistic counters over RDMA netlink (`rdma statistic qp mode|set|show`): a
//! port's counter mode, switching QPs to be bound to counters automatically (by QP type
//! and process) and back, and the dump of the port's counters with their hw counters and
//! the QPs bound to each.
//!
//! Numbers from `include/uapi/rdma/rdma_netlink.h` (`/usr/include/rdma/rdma_netlink.h`);
//! requests as iproute2's rdma/stat.c writes them, replies as the kernel's
//! drivers/infiniband/core/nldev.c (`stat_get_doit_qp()`, `nldev_stat_set_doit()`,
//! `fill_res_counter_entry()`) and counters.c (`rdma_counter_set_auto_mode()`) make them:
//!
//! - the mode: `RDMA_NLDEV_CMD_STAT_GET` with `RDMA_NLDEV_ATTR_STAT_RES` =
//!   `RDMA_NLDEV_ATTR_RES_QP`, the device, the port and an `RDMA_NLDEV_ATTR_STAT_MODE`
//!   (any value: it tells the kernel to answer the mode rather than the counters); the
//!   reply has `RDMA_NLDEV_ATTR_STAT_MODE` and, in auto mode,
//!   `RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK`;
//! - auto mode: `RDMA_NLDEV_CMD_STAT_SET` with mode `RDMA_COUNTER_MODE_AUTO` and a mask
//!   (`RDMA_COUNTER_MASK_QP_TYPE | RDMA_COUNTER_MASK_PID`: a counter per QP type and
//!   process); a mask of 0 turns auto mode off (`rdma statistic qp set ... auto off`),
//!   back to `NONE`, or to `MANUAL` where manually bound counters remain. A driver
//!   without port hw stats refuses with an errno ([`crate::NetlinkError::Kernel`],
//!   `EOPNOTSUPP`); but accepted is not counted: soft-RoCE (rxe, kernel 6.1) accepts
//!   auto mode and then binds no QP, its counter dump stays empty (testdata/README.md),
//!   so a caller checks the dump rather than trusting the mode;
//! - the counters: a `RDMA_NLDEV_CMD_STAT_GET` dump with `RDMA_NLDEV_ATTR_STAT_RES` =
//!   `RDMA_NLDEV_ATTR_RES_QP`, laid out like the resource dumps (device handle, then an
//!   `RDMA_NLDEV_ATTR_STAT_COUNTER` table of `RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY`).

use crate::msg::{self, MessageBuilder};
use crate::rdma::{decode_hw_counters, nldev_type, RdmaNetlink};
use crate::rdma::{ATTR_DEV_INDEX, ATTR_DEV_NAME, ATTR_PORT_INDEX, CMD_STAT_GET};
use crate::rdma_res::{for_each_entry, res_message, str_of, u32_of, u8_of, Owner, QpType};
use crate::rdma_res::{ATTR_RES_LQPN, ATTR_RES_QP, ATTR_RES_QP_ENTRY, ATTR_RES_TYPE};
use crate::NetlinkError;

/// `RDMA_NLDEV_CMD_STAT_SET`.
pub const CMD_STAT_SET: u16 = 16;

/// `RDMA_NLDEV_ATTR_STAT_MODE` (u32: `enum rdma_nl_counter_mode`).
pub const ATTR_STAT_MODE: u16 = 74;
/// `RDMA_NLDEV_ATTR_STAT_RES` (u32: the resource counted, `RDMA_NLDEV_ATTR_RES_QP`).
pub const ATTR_STAT_RES: u16 = 75;
/// `RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK` (u32: `enum rdma_nl_counter_mask`).
pub const ATTR_STAT_AUTO_MODE_MASK: u16 = 76;
/// `RDMA_NLDEV_ATTR_STAT_COUNTER` (nested table).
pub const ATTR_STAT_COUNTER: u16 = 77;
/// `RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY` (nested).
pub const ATTR_STAT_COUNTER_ENTRY: u16 = 78;
/// `RDMA_NLDEV_ATTR_STAT_COUNTER_ID` (u32).
pub const ATTR_STAT_COUNTER_ID: u16 = 79;

/// `RDMA_COUNTER_MODE_NONE`.
pub const COUNTER_MODE_NONE: u32 = 0;
/// `RDMA_COUNTER_MODE_AUTO`.
pub const COUNTER_MODE_AUTO: u32 = 1;
/// `RDMA_COUNTER_MODE_MANUAL`.
pub const COUNTER_MODE_MANUAL: u32 = 2;
/// `RDMA_COUNTER_MASK_QP_TYPE`: one counter per QP type.
pub const COUNTER_MASK_QP_TYPE: u32 = 1;
/// `RDMA_COUNTER_MASK_PID`: one counter per process.
pub const COUNTER_MASK_PID: u32 = 1 << 1;

/// A port's (or a counter's) binding mode (`enum rdma_nl_counter_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CounterMode {
    /// No QP is bound to a counter.
    None,
    /// New QPs are bound automatically, by the criteria of the auto-mode mask.
    Auto,
    /// QPs were bound by hand (`rdma statistic qp bind`).
    Manual,
    /// A value this code does not know.
    Other(u32),
}

impl From<u32> for CounterMode {
    fn from(v: u32) -> Self {
        match v {
            COUNTER_MODE_NONE => CounterMode::None,
            COUNTER_MODE_AUTO => CounterMode::Auto,
            COUNTER_MODE_MANUAL => CounterMode::Manual,
            v => CounterMode::Other(v),
        }
    }
}

/// The QP counter mode of one port (`rdma statistic qp mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpCounterMode {
    pub dev_index: u32,
    pub dev_name: String,
    pub port: u32,
    pub mode: CounterMode,
    /// `RDMA_COUNTER_MASK_*` bits in auto mode, 0 otherwise.
    pub auto_mask: u32,
}

/// One QP counter of a port (`rdma statistic qp show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpCounter {
    pub dev_index: u32,
    pub dev_name: String,
    pub port: Option<u32>,
    /// The counter's number ("cntn").
    pub id: u32,
    pub mode: Option<CounterMode>,
    /// The QP type it counts (auto mode by QP type).
    pub qp_type: Option<QpType>,
    /// The process whose QPs it counts (a counter made for a user QP).
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
    /// The QPs bound to it now.
    pub lqpns: Vec<u32>,
    /// Its hw counters, in the kernel's order.
    pub hw_counters: Vec<(String, u64)>,
}

/// The mode request for one port (`rdma statistic qp mode link DEV/PORT`): device, port,
/// `RDMA_NLDEV_ATTR_STAT_MODE` = manual (only its presence matters), and
/// `RDMA_NLDEV_ATTR_STAT_RES` = QP, in iproute2's order (which adds `NLM_F_ACK`).
pub fn encode_qp_counter_mode_get(seq: u32, dev_index: u32, port: u32) -> Vec<u8> {
    MessageBuilder::new(nldev_type(CMD_STAT_GET), msg::F_REQUEST, seq)
        .attr_u32(ATTR_DEV_INDEX, dev_index)
        .attr_u32(ATTR_PORT_INDEX, port)
        .attr_u32(ATTR_STAT_MODE, COUNTER_MODE_MANUAL)
        .attr_u32(ATTR_STAT_RES, u32::from(ATTR_RES_QP))
        .finish()
}

/// The auto-mode request (`rdma statistic qp set link DEV/PORT auto type,pid on`, or
/// with `mask` 0 `... auto off`), in iproute2's order (which adds `NLM_F_ACK`).
pub fn encode_qp_counter_auto_set(seq: u32, dev_index: u32, port: u32, mask: u32) -> Vec<u8> {
    MessageBuilder::new(nldev_type(CMD_STAT_SET), msg::F_REQUEST, seq)
        .attr_u32(ATTR_DEV_INDEX, dev_index)
        .attr_u32(ATTR_PORT_INDEX, port)
        .attr_u32(ATTR_STAT_RES, u32::from(ATTR_RES_QP))
        .attr_u32(ATTR_STAT_MODE, COUNTER_MODE_AUTO)
        .attr_u32(ATTR_STAT_AUTO_MODE_MASK, mask)
        .finish()
}

/// The dump of a device's QP counters, of one port or (`None`) all of them
/// (`rdma statistic qp show link DEV/PORT`, which adds `NLM_F_ACK`).
pub fn encode_qp_counter_dump(seq: u32, dev_index: u32, port: Option<u32>) -> Vec<u8> {
    let mut b = MessageBuilder::new(nldev_type(CMD_STAT_GET), msg::F_REQUEST | msg::F_DUMP, seq);
    b.attr_u32(ATTR_DEV_INDEX, dev_index);
    if let Some(port) = port {
        b.attr_u32(ATTR_PORT_INDEX, port);
    }
    b.attr_u32(ATTR_STAT_RES, u32::from(ATTR_RES_QP)).finish()
}

/// The mode reply's payload.
pub fn decode_qp_counter_mode(payload: &[u8]) -> Result<QpCounterMode, String> {
    let (mut dev_index, mut dev_name, mut port, mut mode, mut mask) = (None, None, None, None, 0);
    for a in msg::attrs(payload) {
        let a = a?;
        match a.ty {
            ATTR_DEV_INDEX => dev_index = Some(u32_of(&a, "RDMA_NLDEV_ATTR_DEV_INDEX")?),
            ATTR_DEV_NAME => dev_name = Some(str_of(&a, "RDMA_NLDEV_ATTR_DEV_NAME")?),
            ATTR_PORT_INDEX => port = Some(u32_of(&a, "RDMA_NLDEV_ATTR_PORT_INDEX")?),
            ATTR_STAT_MODE => mode = Some(u32_of(&a, "RDMA_NLDEV_ATTR_STAT_MODE")?),
            ATTR_STAT_AUTO_MODE_MASK => mask = u32_of(&a, "RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK")?,
            _ => {}
        }
    }
    let need = |attr: &str| format!("a counter mode reply without {attr}");
    Ok(QpCounterMode {
        dev_index: dev_index.ok_or_else(|| need("RDMA_NLDEV_ATTR_DEV_INDEX"))?,
        dev_name: dev_name.ok_or_else(|| need("RDMA_NLDEV_ATTR_DEV_NAME"))?,
        port: port.ok_or_else(|| need("RDMA_NLDEV_ATTR_PORT_INDEX"))?,
        mode: mode
            .ok_or_else(|| need("RDMA_NLDEV_ATTR_STAT_MODE"))?
            .into(),
        auto_mask: mask,
    })
}

/// Appends the counters of one QP counter dump message's payload to `out`; returns how
/// many it had.
pub fn decode_qp_counters(payload: &[u8], out: &mut Vec<QpCounter>) -> Result<usize, String> {
    let m = res_message(payload, ATTR_STAT_COUNTER, "RDMA_NLDEV_ATTR_STAT_COUNTER")?;
    let dev = m.dev_name.as_str();
    for_each_entry(&m.tables, ATTR_STAT_COUNTER_ENTRY, |n, entry| {
        let at = |e: String| format!("counter entry {n} of {dev}: {e}");
        let mut owner = Owner::default();
        let (mut port, mut id, mut mode, mut qp_type) = (None, None, None, None);
        let mut lqpns = Vec::new();
        for a in entry.nested() {
            let a = a.map_err(at)?;
            match a.ty {
                ATTR_PORT_INDEX => port = Some(u32_of(&a, "RDMA_NLDEV_ATTR_PORT_INDEX")?),
                ATTR_STAT_COUNTER_ID => id = Some(u32_of(&a, "RDMA_NLDEV_ATTR_STAT_COUNTER_ID")?),
                ATTR_STAT_MODE => mode = Some(u32_of(&a, "RDMA_NLDEV_ATTR_STAT_MODE")?.into()),
                ATTR_RES_TYPE => qp_type = Some(QpType(u8_of(&a, "RDMA_NLDEV_ATTR_RES_TYPE")?)),
                ATTR_RES_QP => {
                    for qp in a.nested() {
                        let qp = qp.map_err(at)?;
                        if qp.ty != ATTR_RES_QP_ENTRY {
                            continue;
                        }
                        let mut lqpn = None;
                        for f in qp.nested() {
                            let f = f.map_err(at)?;
                            if f.ty == ATTR_RES_LQPN {
                                lqpn = Some(u32_of(&f, "RDMA_NLDEV_ATTR_RES_LQPN")?);
                            }
                        }
                        lqpns.push(lqpn.ok_or_else(|| {
                            at("a bound QP without RDMA_NLDEV_ATTR_RES_LQPN".into())
                        })?);
                    }
                }
                _ => {
                    owner.take(&a)?;
                }
            }
        }
        // The entry's RDMA_NLDEV_ATTR_STAT_HWCOUNTERS table, read as a port's is.
        let mut hw_counters = Vec::new();
        decode_hw_counters(entry.data, |k, v| hw_counters.push((k.to_string(), v))).map_err(at)?;
        out.push(QpCounter {
            dev_index: m.dev_index,
            dev_name: m.dev_name.clone(),
            port,
            id: id.ok_or_else(|| at("no RDMA_NLDEV_ATTR_STAT_COUNTER_ID".into()))?,
            mode,
            qp_type,
            pid: owner.pid,
            kern_name: owner.kern_name,
            lqpns,
            hw_counters,
        });
        Ok(())
    })
}

impl RdmaNetlink {
    /// The QP counter mode of a port.
    pub fn qp_counter_mode(
        &mut self,
        dev_index: u32,
        port: u32,
    ) -> Result<QpCounterMode, NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_qp_counter_mode_get(seq, dev_index, port);
        let mut out = None;
        let what = format!("QP counter mode of device {dev_index} port {port}");
        self.sock.request(&what, &req, seq, false, |m| {
            out = Some(decode_qp_counter_mode(m.payload)?);
            Ok(())
        })?;
        out.ok_or_else(|| NetlinkError::Malformed {
            request: what,
            detail: "no reply message".to_string(),
        })
    }

    /// Sets a port's QP counters to auto mode with `mask` (`COUNTER_MASK_*` bits), or
    /// with 0 turns auto mode off. A driver without port hw stats refuses with
    /// [`NetlinkError::Kernel`] (`EOPNOTSUPP`); without `CAP_NET_ADMIN`, `EPERM`.
    /// Success does not mean QPs will be counted (rxe accepts and binds none):
    /// [`Self::qp_counters`] says.
    pub fn set_qp_counter_auto(
        &mut self,
        dev_index: u32,
        port: u32,
        mask: u32,
    ) -> Result<(), NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_qp_counter_auto_set(seq, dev_index, port, mask);
        let what = format!("QP counter auto mode {mask:#x} on device {dev_index} port {port}");
        // The kernel answers a success with an RDMA_NLDEV_CMD_STAT_SET message (empty,
        // or naming the device and port on newer kernels): nothing to decode.
        self.sock.request(&what, &req, seq, false, |_| Ok(()))
    }

    /// Puts a port's QP counter mode back as `saved` (from [`Self::qp_counter_mode`])
    /// found it: auto mode with its mask, or auto mode off (which the kernel turns into
    /// `NONE`, or `MANUAL` while manually bound counters remain).
    pub fn restore_qp_counter_mode(&mut self, saved: &QpCounterMode) -> Result<(), NetlinkError> {
        let mask = if saved.mode == CounterMode::Auto {
            saved.auto_mask
        } else {
            0
        };
        self.set_qp_counter_auto(saved.dev_index, saved.port, mask)
    }

    /// The QP counters of a device's port (`None`: of every port).
    pub fn qp_counters(
        &mut self,
        dev_index: u32,
        port: Option<u32>,
    ) -> Result<Vec<QpCounter>, NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_qp_counter_dump(seq, dev_index, port);
        let mut out = Vec::new();
        let what = format!("QP counter dump of device {dev_index}");
        self.sock.request(&what, &req, seq, true, |m| {
            decode_qp_counters(m.payload, &mut out).map(drop)
        })?;
        Ok(out)
    }
}

/// Replies crafted from the uapi layout: soft-RoCE (the lab's rxe) accepts auto mode
/// but never binds a QP to a counter (a manual bind fails with ENOMEM: it cannot
/// allocate one), so its counter dump is empty and the lab cannot record a counter
/// entry (testdata/README.md); these follow nldev.c's
/// `fill_res_counter_entry()` (port, counter id, owner, mode, QP type, the bound QPs'
/// table, the hw counters' table, with `NLA_F_NESTED` as `nla_nest_start()` sets it).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::messages;
    use crate::rdma::{
        ATTR_STAT_HWCOUNTERS, ATTR_STAT_HWCOUNTER_ENTRY, ATTR_STAT_HWCOUNTER_ENTRY_NAME,
        ATTR_STAT_HWCOUNTER_ENTRY_VALUE,
    };
    use crate::rdma_res::{ATTR_RES_KERN_NAME, ATTR_RES_PID};

    const NESTED: u16 = 1 << 15;

    fn attrs_u32(seq: u32, ty: u16, flags: u16, list: &[(u16, u32)]) -> Vec<u8> {
        let mut want = Vec::new();
        let len = 16 + 8 * list.len() as u32;
        want.extend_from_slice(&len.to_ne_bytes());
        want.extend_from_slice(&ty.to_ne_bytes());
        want.extend_from_slice(&flags.to_ne_bytes());
        want.extend_from_slice(&seq.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        for (ty, v) in list {
            want.extend_from_slice(&8u16.to_ne_bytes());
            want.extend_from_slice(&ty.to_ne_bytes());
            want.extend_from_slice(&v.to_ne_bytes());
        }
        want
    }

    #[test]
    fn request_bytes_are_iproute2_s() {
        // rdma/stat.c, stat_one_qp_link_get_mode(): DEV_INDEX, PORT_INDEX,
        // STAT_MODE = MANUAL (2), STAT_RES = RES_QP (19); type STAT_GET 0x1411.
        assert_eq!(
            encode_qp_counter_mode_get(4, 0, 1),
            attrs_u32(4, 0x1411, 1, &[(1, 0), (3, 1), (74, 2), (75, 19)])
        );
        // stat_qp_set_link_auto_sendmsg(): DEV_INDEX, PORT_INDEX, STAT_RES, STAT_MODE =
        // AUTO (1), AUTO_MODE_MASK; type STAT_SET 0x1410.
        assert_eq!(
            encode_qp_counter_auto_set(5, 0, 1, COUNTER_MASK_QP_TYPE | COUNTER_MASK_PID),
            attrs_u32(5, 0x1410, 1, &[(1, 0), (3, 1), (75, 19), (74, 1), (76, 3)])
        );
        assert_eq!(
            encode_qp_counter_auto_set(6, 2, 1, 0),
            attrs_u32(6, 0x1410, 1, &[(1, 2), (3, 1), (75, 19), (74, 1), (76, 0)])
        );
        // stat_qp_show_one_link(): a dump with DEV_INDEX, PORT_INDEX, STAT_RES.
        assert_eq!(
            encode_qp_counter_dump(7, 0, Some(1)),
            attrs_u32(7, 0x1411, 0x301, &[(1, 0), (3, 1), (75, 19)])
        );
        assert_eq!(
            encode_qp_counter_dump(7, 0, None),
            attrs_u32(7, 0x1411, 0x301, &[(1, 0), (75, 19)])
        );
    }

    fn mode_reply(mode: u32, mask: Option<u32>) -> Vec<u8> {
        // stat_get_doit_qp(): the device handle, PORT_INDEX, STAT_MODE and, in auto
        // mode, STAT_AUTO_MODE_MASK.
        let mut b = MessageBuilder::new(nldev_type(CMD_STAT_GET), 0, 9);
        b.attr_u32(ATTR_DEV_INDEX, 2)
            .attr_str(ATTR_DEV_NAME, "mlx5_0")
            .attr_u32(ATTR_PORT_INDEX, 1)
            .attr_u32(ATTR_STAT_MODE, mode);
        if let Some(mask) = mask {
            b.attr_u32(ATTR_STAT_AUTO_MODE_MASK, mask);
        }
        b.finish()
    }

    #[test]
    fn mode_replies() {
        let m = mode_reply(COUNTER_MODE_AUTO, Some(3));
        let m = messages(&m).next().unwrap().unwrap();
        assert_eq!(
            decode_qp_counter_mode(m.payload),
            Ok(QpCounterMode {
                dev_index: 2,
                dev_name: "mlx5_0".into(),
                port: 1,
                mode: CounterMode::Auto,
                auto_mask: COUNTER_MASK_QP_TYPE | COUNTER_MASK_PID,
            })
        );
        let m = mode_reply(COUNTER_MODE_MANUAL, None);
        let d = decode_qp_counter_mode(&m[16..]).unwrap();
        assert_eq!((d.mode, d.auto_mask), (CounterMode::Manual, 0));
        let d = decode_qp_counter_mode(&mode_reply(7, None)[16..]).unwrap();
        assert_eq!(d.mode, CounterMode::Other(7));
        let no_mode = MessageBuilder::new(1, 0, 1)
            .attr_u32(ATTR_DEV_INDEX, 2)
            .attr_str(ATTR_DEV_NAME, "mlx5_0")
            .attr_u32(ATTR_PORT_INDEX, 1)
            .finish();
        assert_eq!(
            decode_qp_counter_mode(&no_mode[16..]),
            Err("a counter mode reply without RDMA_NLDEV_ATTR_STAT_MODE".to_string())
        );
    }

    fn hw(b: &mut MessageBuilder, counters: &[(&str, u64)]) {
        b.nest(ATTR_STAT_HWCOUNTERS | NESTED, |b| {
            for (name, value) in counters {
                b.nest(ATTR_STAT_HWCOUNTER_ENTRY | NESTED, |b| {
                    b.attr_str(ATTR_STAT_HWCOUNTER_ENTRY_NAME, name)
                        .attr_bytes(ATTR_STAT_HWCOUNTER_ENTRY_VALUE, &value.to_ne_bytes());
                });
            }
        });
    }

    fn qps(b: &mut MessageBuilder, lqpns: &[u32]) {
        b.nest(ATTR_RES_QP | NESTED, |b| {
            for q in lqpns {
                b.nest(ATTR_RES_QP_ENTRY | NESTED, |b| {
                    b.attr_u32(ATTR_RES_LQPN, *q);
                });
            }
        });
    }

    /// A dump message of two counters: auto mode by type and pid for pid 4242's RC QPs
    /// 0x1c5 and 0x1c9, and one made for a kernel QP.
    fn counters_message(seq: u32) -> Vec<u8> {
        let mut b = MessageBuilder::new(nldev_type(CMD_STAT_GET), 2, seq);
        b.attr_u32(ATTR_DEV_INDEX, 2)
            .attr_str(ATTR_DEV_NAME, "mlx5_0");
        b.nest(ATTR_STAT_COUNTER, |b| {
            b.nest(ATTR_STAT_COUNTER_ENTRY, |b| {
                b.attr_u32(ATTR_PORT_INDEX, 1)
                    .attr_u32(ATTR_STAT_COUNTER_ID, 4)
                    .attr_u32(ATTR_RES_PID, 4242)
                    .attr_u32(ATTR_STAT_MODE, COUNTER_MODE_AUTO)
                    .attr_bytes(ATTR_RES_TYPE, &[2]);
                qps(b, &[0x1c5, 0x1c9]);
                hw(
                    b,
                    &[
                        ("rx_write_requests", 123_456),
                        ("out_of_sequence", 2),
                        ("local_ack_timeout_err", 0),
                    ],
                );
            });
            b.nest(ATTR_STAT_COUNTER_ENTRY, |b| {
                b.attr_u32(ATTR_PORT_INDEX, 1)
                    .attr_u32(ATTR_STAT_COUNTER_ID, 5)
                    .attr_str(ATTR_RES_KERN_NAME, "rdma_cm")
                    .attr_u32(ATTR_STAT_MODE, COUNTER_MODE_MANUAL);
                qps(b, &[]);
                hw(b, &[("rx_write_requests", 0)]);
            });
        });
        b.finish()
    }

    #[test]
    fn counter_dump_entries() {
        let m = counters_message(3);
        let mut out = Vec::new();
        for msg in messages(&m) {
            assert_eq!(decode_qp_counters(msg.unwrap().payload, &mut out), Ok(2));
        }
        assert_eq!(
            out[0],
            QpCounter {
                dev_index: 2,
                dev_name: "mlx5_0".into(),
                port: Some(1),
                id: 4,
                mode: Some(CounterMode::Auto),
                qp_type: Some(QpType::RC),
                pid: Some(4242),
                kern_name: None,
                lqpns: vec![0x1c5, 0x1c9],
                hw_counters: vec![
                    ("rx_write_requests".into(), 123_456),
                    ("out_of_sequence".into(), 2),
                    ("local_ack_timeout_err".into(), 0),
                ],
            }
        );
        let k = &out[1];
        assert_eq!(
            (k.id, k.mode, k.qp_type, k.pid),
            (5, Some(CounterMode::Manual), None, None)
        );
        assert_eq!(
            (k.kern_name.as_deref(), k.lqpns.len()),
            (Some("rdma_cm"), 0)
        );
        assert_eq!(k.hw_counters, [("rx_write_requests".to_string(), 0)]);
    }

    #[test]
    fn counter_dump_errors_name_the_entry() {
        let mut b = MessageBuilder::new(nldev_type(CMD_STAT_GET), 2, 1);
        b.attr_u32(ATTR_DEV_INDEX, 0)
            .attr_str(ATTR_DEV_NAME, "rxe0");
        b.nest(ATTR_STAT_COUNTER, |b| {
            b.nest(ATTR_STAT_COUNTER_ENTRY, |b| {
                b.attr_u32(ATTR_STAT_COUNTER_ID, 1);
                qps(b, &[17]);
            });
        });
        let m = b.finish();
        let e = decode_qp_counters(&m[16..], &mut Vec::new()).unwrap_err();
        assert_eq!(
            e,
            "counter entry 0 of rxe0: no hw counter table in the reply"
        );
        let mut b = MessageBuilder::new(nldev_type(CMD_STAT_GET), 2, 1);
        b.attr_u32(ATTR_DEV_INDEX, 0)
            .attr_str(ATTR_DEV_NAME, "rxe0");
        b.nest(ATTR_STAT_COUNTER, |b| {
            b.nest(ATTR_STAT_COUNTER_ENTRY, |b| {
                b.nest(ATTR_RES_QP, |b| {
                    b.nest(ATTR_RES_QP_ENTRY, |b| {
                        b.attr_u32(ATTR_RES_PID, 1);
                    });
                });
            });
        });
        let m = b.finish();
        let e = decode_qp_counters(&m[16..], &mut Vec::new()).unwrap_err();
        assert_eq!(
            e,
            "counter entry 0 of rxe0: a bound QP without RDMA_NLDEV_ATTR_RES_LQPN"
        );
    }

    #[test]
    fn a_refusing_driver_is_a_kernel_error_with_its_errno() {
        // What a driver without per-QP counters answers (rdma_counter_set_auto_mode():
        // -EOPNOTSUPP without port hw stats): an NLMSG_ERROR, passed on as
        // NetlinkError::Kernel so that the caller can say "the driver refuses" once.
        let (mut nl, kernel) = crate::replay::rdma_pair();
        let mut err = MessageBuilder::new(msg::T_ERROR, 0, 1).finish();
        err.extend_from_slice(&(-libc::EOPNOTSUPP).to_ne_bytes());
        let req = encode_qp_counter_auto_set(1, 0, 1, 3);
        err.extend_from_slice(&req[..16]);
        let len = err.len() as u32;
        err[0..4].copy_from_slice(&len.to_ne_bytes());
        kernel.reply(&err);
        let e = nl.set_qp_counter_auto(0, 1, 3).unwrap_err();
        assert!(
            matches!(&e, NetlinkError::Kernel { errno, .. } if *errno == libc::EOPNOTSUPP),
            "{e:?}"
        );
        assert_eq!(kernel.request(), req);
        // A counter dump across two datagrams, then a mode read.
        kernel.reply(&counters_message(2));
        kernel.reply(&counters_message(2));
        let mut done = MessageBuilder::new(msg::T_DONE, 2, 2).finish();
        done.extend_from_slice(&0i32.to_ne_bytes());
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        kernel.reply(&done);
        let c = nl.qp_counters(2, Some(1)).unwrap();
        assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), [4, 5, 4, 5]);
        assert_eq!(kernel.request(), encode_qp_counter_dump(2, 2, Some(1)));
        let mut reply = mode_reply(COUNTER_MODE_AUTO, Some(1));
        reply[8..12].copy_from_slice(&3u32.to_ne_bytes());
        kernel.reply(&reply);
        let mode = nl.qp_counter_mode(2, 1).unwrap();
        assert_eq!((mode.mode, mode.auto_mask), (CounterMode::Auto, 1));
        assert_eq!(kernel.request(), encode_qp_counter_mode_get(3, 2, 1));
        // Restoring that mode asks for auto mode with the same mask.
        kernel.reply(&MessageBuilder::new(nldev_type(CMD_STAT_SET), 0, 4).finish());
        nl.restore_qp_counter_mode(&mode).unwrap();
        assert_eq!(kernel.request(), encode_qp_counter_auto_set(4, 2, 1, 1));
    }
}
