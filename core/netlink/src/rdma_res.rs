//! RDMA resource tracking over netlink: the queue pairs, completion queues, memory
//! regions and protection domains of each device, with the process that made them
//! (what `rdma resource show qp|cq|mr|pd` prints), read with the
//! `RDMA_NLDEV_CMD_RES_*_GET` dumps.
//!
//! Numbers from `include/uapi/rdma/rdma_netlink.h` (`/usr/include/rdma/rdma_netlink.h`);
//! the reply layout from the kernel's `drivers/infiniband/core/nldev.c`
//! (`res_get_common_dumpit()` and the `fill_res_*_entry()` functions):
//!
//! - a dump names one device (`RDMA_NLDEV_ATTR_DEV_INDEX` is required: the kernel answers
//!   `EINVAL` without it) and optionally a port (QPs only; without it, every QP of the
//!   device, also those not bound to a port yet);
//! - each reply message carries the device's index and name and one table
//!   (`RDMA_NLDEV_ATTR_RES_QP`...) of entries (`RDMA_NLDEV_ATTR_RES_QP_ENTRY`...); when
//!   a table does not fit a message the kernel continues in the next one, across
//!   datagrams, up to `NLMSG_DONE`; a device without any entry answers `NLMSG_DONE` alone;
//! - an entry names its owner by `RDMA_NLDEV_ATTR_RES_PID` (user space) or
//!   `RDMA_NLDEV_ATTR_RES_KERN_NAME` (kernel); the process name `rdma` prints as "comm"
//!   for a pid is not in the reply (it reads `/proc/PID/comm`); keys (`lkey`, `rkey`,
//!   `local_dma_lkey`) come only to a caller with `CAP_NET_ADMIN`.
//!
//! A collector lists the devices once ([`RdmaNetlink::devices`]) and then makes one dump
//! per device and resource type ([`RdmaNetlink::resources`]).

use crate::msg::{self, attrs, Attr, MessageBuilder};
use crate::rdma::{nldev_type, RdmaDevice, RdmaNetlink};
use crate::rdma::{ATTR_DEV_INDEX, ATTR_DEV_NAME, ATTR_PORT_INDEX};
use crate::NetlinkError;

/// `RDMA_NLDEV_CMD_RES_QP_GET`.
pub const CMD_RES_QP_GET: u16 = 10;
/// `RDMA_NLDEV_CMD_RES_CQ_GET`.
pub const CMD_RES_CQ_GET: u16 = 12;
/// `RDMA_NLDEV_CMD_RES_MR_GET`.
pub const CMD_RES_MR_GET: u16 = 13;
/// `RDMA_NLDEV_CMD_RES_PD_GET`.
pub const CMD_RES_PD_GET: u16 = 14;

/// `RDMA_NLDEV_ATTR_RES_QP` (nested table; also the QP list of a statistic counter).
pub const ATTR_RES_QP: u16 = 19;
/// `RDMA_NLDEV_ATTR_RES_QP_ENTRY` (nested).
pub const ATTR_RES_QP_ENTRY: u16 = 20;
/// `RDMA_NLDEV_ATTR_RES_LQPN` (u32).
pub const ATTR_RES_LQPN: u16 = 21;
/// `RDMA_NLDEV_ATTR_RES_RQPN` (u32; RC and UC only).
pub const ATTR_RES_RQPN: u16 = 22;
/// `RDMA_NLDEV_ATTR_RES_RQ_PSN` (u32; RC and UC only).
pub const ATTR_RES_RQ_PSN: u16 = 23;
/// `RDMA_NLDEV_ATTR_RES_SQ_PSN` (u32).
pub const ATTR_RES_SQ_PSN: u16 = 24;
/// `RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE` (u8).
pub const ATTR_RES_PATH_MIG_STATE: u16 = 25;
/// `RDMA_NLDEV_ATTR_RES_TYPE` (u8: `enum ib_qp_type`).
pub const ATTR_RES_TYPE: u16 = 26;
/// `RDMA_NLDEV_ATTR_RES_STATE` (u8: `enum ib_qp_state`).
pub const ATTR_RES_STATE: u16 = 27;
/// `RDMA_NLDEV_ATTR_RES_PID` (u32; user-space objects only).
pub const ATTR_RES_PID: u16 = 28;
/// `RDMA_NLDEV_ATTR_RES_KERN_NAME` (string; kernel objects only).
pub const ATTR_RES_KERN_NAME: u16 = 29;
/// `RDMA_NLDEV_ATTR_RES_CQ` (nested table).
pub const ATTR_RES_CQ: u16 = 35;
/// `RDMA_NLDEV_ATTR_RES_CQ_ENTRY` (nested).
pub const ATTR_RES_CQ_ENTRY: u16 = 36;
/// `RDMA_NLDEV_ATTR_RES_CQE` (u32).
pub const ATTR_RES_CQE: u16 = 37;
/// `RDMA_NLDEV_ATTR_RES_USECNT` (u64).
pub const ATTR_RES_USECNT: u16 = 38;
/// `RDMA_NLDEV_ATTR_RES_POLL_CTX` (u8; kernel CQs only).
pub const ATTR_RES_POLL_CTX: u16 = 39;
/// `RDMA_NLDEV_ATTR_RES_MR` (nested table).
pub const ATTR_RES_MR: u16 = 40;
/// `RDMA_NLDEV_ATTR_RES_MR_ENTRY` (nested).
pub const ATTR_RES_MR_ENTRY: u16 = 41;
/// `RDMA_NLDEV_ATTR_RES_RKEY` (u32).
pub const ATTR_RES_RKEY: u16 = 42;
/// `RDMA_NLDEV_ATTR_RES_LKEY` (u32).
pub const ATTR_RES_LKEY: u16 = 43;
/// `RDMA_NLDEV_ATTR_RES_IOVA` (u64).
pub const ATTR_RES_IOVA: u16 = 44;
/// `RDMA_NLDEV_ATTR_RES_MRLEN` (u64, bytes).
pub const ATTR_RES_MRLEN: u16 = 45;
/// `RDMA_NLDEV_ATTR_RES_PD` (nested table).
pub const ATTR_RES_PD: u16 = 46;
/// `RDMA_NLDEV_ATTR_RES_PD_ENTRY` (nested).
pub const ATTR_RES_PD_ENTRY: u16 = 47;
/// `RDMA_NLDEV_ATTR_RES_LOCAL_DMA_LKEY` (u32).
pub const ATTR_RES_LOCAL_DMA_LKEY: u16 = 48;
/// `RDMA_NLDEV_ATTR_RES_UNSAFE_GLOBAL_RKEY` (u32).
pub const ATTR_RES_UNSAFE_GLOBAL_RKEY: u16 = 49;
/// `RDMA_NLDEV_ATTR_DEV_DIM` (u8: a CQ's adaptive interrupt moderation, 0 or 1).
pub const ATTR_DEV_DIM: u16 = 84;
/// `RDMA_NLDEV_ATTR_RES_PDN` (u32).
pub const ATTR_RES_PDN: u16 = 60;
/// `RDMA_NLDEV_ATTR_RES_CQN` (u32).
pub const ATTR_RES_CQN: u16 = 61;
/// `RDMA_NLDEV_ATTR_RES_MRN` (u32).
pub const ATTR_RES_MRN: u16 = 62;
/// `RDMA_NLDEV_ATTR_RES_CTXN` (u32).
pub const ATTR_RES_CTXN: u16 = 64;

/// A resource type with its own dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResKind {
    Qp,
    Cq,
    Mr,
    Pd,
}

impl ResKind {
    /// As `rdma resource show` names it: `qp`, `cq`, `mr`, `pd`.
    pub fn name(self) -> &'static str {
        match self {
            ResKind::Qp => "qp",
            ResKind::Cq => "cq",
            ResKind::Mr => "mr",
            ResKind::Pd => "pd",
        }
    }

    /// The dump command and its name for error messages.
    fn command(self) -> (u16, &'static str) {
        match self {
            ResKind::Qp => (CMD_RES_QP_GET, "RDMA_NLDEV_CMD_RES_QP_GET"),
            ResKind::Cq => (CMD_RES_CQ_GET, "RDMA_NLDEV_CMD_RES_CQ_GET"),
            ResKind::Mr => (CMD_RES_MR_GET, "RDMA_NLDEV_CMD_RES_MR_GET"),
            ResKind::Pd => (CMD_RES_PD_GET, "RDMA_NLDEV_CMD_RES_PD_GET"),
        }
    }
}

/// A QP type (`enum ib_qp_type` of the kernel's include/rdma/ib_verbs.h; user-space
/// `IBV_QPT_*` in infiniband/verbs.h use the same numbers for RC, UC, UD, RAW_PACKET).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpType(pub u8);

impl QpType {
    pub const RC: QpType = QpType(2);
    pub const UC: QpType = QpType(3);
    pub const UD: QpType = QpType(4);

    /// The name `rdma` prints (`qp_types_to_str()` in iproute2's rdma/res.c).
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 11] = [
            "SMI",
            "GSI",
            "RC",
            "UC",
            "UD",
            "RAW_IPV6",
            "RAW_ETHERTYPE",
            "UNKNOWN",
            "RAW_PACKET",
            "XRC_INI",
            "XRC_TGT",
        ];
        NAMES.get(usize::from(self.0)).copied().unwrap_or("UNKNOWN")
    }
}

impl std::fmt::Display for QpType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A QP state (`enum ib_qp_state`: RESET, INIT, RTR, RTS, SQD, SQE, ERR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpState(pub u8);

impl QpState {
    /// The name `rdma` prints (`qp_states_to_str()` in iproute2's rdma/res-qp.c).
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 7] = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"];
        NAMES.get(usize::from(self.0)).copied().unwrap_or("UNKNOWN")
    }
}

impl std::fmt::Display for QpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One queue pair (`fill_res_qp_entry()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResQp {
    pub dev_index: u32,
    pub dev_name: String,
    /// Absent while the QP is not bound to a port yet (created, still in RESET).
    pub port: Option<u32>,
    pub lqpn: u32,
    /// The remote QP number (RC and UC only).
    pub rqpn: Option<u32>,
    pub qp_type: QpType,
    pub state: QpState,
    /// The protection domain's number (user QPs, kernels since 5.1).
    pub pdn: Option<u32>,
    pub sq_psn: Option<u32>,
    /// RC and UC only.
    pub rq_psn: Option<u32>,
    /// The creating process (user QPs; absent for kernel QPs and a dead creator).
    pub pid: Option<u32>,
    /// The kernel module that made it (kernel QPs only), e.g. `ib_core` for QP1.
    pub kern_name: Option<String>,
}

/// One completion queue (`fill_res_cq_entry()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResCq {
    pub dev_index: u32,
    pub dev_name: String,
    pub cqn: Option<u32>,
    /// Its size in entries.
    pub cqe: u32,
    /// How many QPs (and SRQs) use it (`rdma` prints it as "users").
    pub users: u64,
    /// `enum ib_poll_context` (kernel CQs only).
    pub poll_ctx: Option<u8>,
    /// Adaptive interrupt moderation (DIM) on ("adaptive-moderation"; kernels since 5.5).
    pub adaptive_moderation: Option<bool>,
    /// The user context's number (user CQs).
    pub ctxn: Option<u32>,
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
}

/// One memory region (`fill_res_mr_entry()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResMr {
    pub dev_index: u32,
    pub dev_name: String,
    pub mrn: Option<u32>,
    /// Its length in bytes.
    pub mrlen: u64,
    /// Only for a caller with `CAP_NET_ADMIN`.
    pub rkey: Option<u32>,
    /// Only for a caller with `CAP_NET_ADMIN`.
    pub lkey: Option<u32>,
    /// Only for a caller with `CAP_NET_ADMIN` (kernels up to 5.x).
    pub iova: Option<u64>,
    pub pdn: Option<u32>,
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
}

/// One protection domain (`fill_res_pd_entry()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResPd {
    pub dev_index: u32,
    pub dev_name: String,
    pub pdn: Option<u32>,
    /// How many objects (QPs, MRs, ...) use it.
    pub users: u64,
    /// Only for a caller with `CAP_NET_ADMIN`.
    pub local_dma_lkey: Option<u32>,
    /// Only with `CAP_NET_ADMIN`, and only for a PD made with an unsafe global rkey.
    pub unsafe_global_rkey: Option<u32>,
    pub ctxn: Option<u32>,
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
}

/// The dump request of one resource type of one device (and, for QPs, optionally one
/// port): `RDMA_NLDEV_ATTR_DEV_INDEX` then `RDMA_NLDEV_ATTR_PORT_INDEX`, as iproute2's
/// `_res_send_msg()` writes them (it adds `NLM_F_ACK`, which a dump does not need).
pub fn encode_res_dump(kind: ResKind, seq: u32, dev_index: u32, port: Option<u32>) -> Vec<u8> {
    let (cmd, _) = kind.command();
    let mut b = MessageBuilder::new(nldev_type(cmd), msg::F_REQUEST | msg::F_DUMP, seq);
    b.attr_u32(ATTR_DEV_INDEX, dev_index);
    if let Some(port) = port {
        b.attr_u32(ATTR_PORT_INDEX, port);
    }
    b.finish()
}

/// The device of a reply message, and its tables of `table` (usually one).
pub(crate) struct ResMessage<'a> {
    pub dev_index: u32,
    pub dev_name: String,
    pub tables: Vec<Attr<'a>>,
}

/// Splits a reply message's payload into the device handle and the `table` attributes.
pub(crate) fn res_message<'a>(
    payload: &'a [u8],
    table: u16,
    table_name: &str,
) -> Result<ResMessage<'a>, String> {
    let (mut dev_index, mut dev_name, mut tables) = (None, None, Vec::new());
    for a in attrs(payload) {
        let a = a?;
        match a.ty {
            ATTR_DEV_INDEX => dev_index = Some(u32_of(&a, "RDMA_NLDEV_ATTR_DEV_INDEX")?),
            ATTR_DEV_NAME => dev_name = Some(str_of(&a, "RDMA_NLDEV_ATTR_DEV_NAME")?),
            t if t == table => tables.push(a),
            _ => {}
        }
    }
    let dev_index = dev_index.ok_or("a reply without RDMA_NLDEV_ATTR_DEV_INDEX")?;
    let dev_name = dev_name.ok_or("a reply without RDMA_NLDEV_ATTR_DEV_NAME")?;
    if tables.is_empty() {
        return Err(format!(
            "a reply of {dev_name} without a {table_name} table"
        ));
    }
    Ok(ResMessage {
        dev_index,
        dev_name,
        tables,
    })
}

/// Calls `f(n, entry)` for each `entry` of the tables, `n` counting from 0.
pub(crate) fn for_each_entry<'a>(
    tables: &[Attr<'a>],
    entry: u16,
    mut f: impl FnMut(usize, Attr<'a>) -> Result<(), String>,
) -> Result<usize, String> {
    let mut n = 0;
    for table in tables {
        for e in table.nested() {
            let e = e?;
            if e.ty != entry {
                continue;
            }
            f(n, e)?;
            n += 1;
        }
    }
    Ok(n)
}

pub(crate) fn u8_of(a: &Attr<'_>, name: &str) -> Result<u8, String> {
    a.data
        .first()
        .copied()
        .ok_or_else(|| format!("{name} without its u8"))
}

pub(crate) fn u32_of(a: &Attr<'_>, name: &str) -> Result<u32, String> {
    a.u32()
        .ok_or_else(|| format!("{name} of {} bytes, not a u32", a.data.len()))
}

pub(crate) fn u64_of(a: &Attr<'_>, name: &str) -> Result<u64, String> {
    a.u64()
        .ok_or_else(|| format!("{name} of {} bytes, not a u64", a.data.len()))
}

pub(crate) fn str_of(a: &Attr<'_>, name: &str) -> Result<String, String> {
    a.str()
        .map(str::to_string)
        .ok_or_else(|| format!("{name} is not UTF-8"))
}

/// The owner of an entry: `(pid, kern_name)` (`fill_res_name_pid()`).
#[derive(Default)]
pub(crate) struct Owner {
    pub pid: Option<u32>,
    pub kern_name: Option<String>,
}

impl Owner {
    /// Takes `a` if it names the owner; false otherwise.
    pub fn take(&mut self, a: &Attr<'_>) -> Result<bool, String> {
        match a.ty {
            ATTR_RES_PID => self.pid = Some(u32_of(a, "RDMA_NLDEV_ATTR_RES_PID")?),
            ATTR_RES_KERN_NAME => {
                self.kern_name = Some(str_of(a, "RDMA_NLDEV_ATTR_RES_KERN_NAME")?)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn missing(kind: &str, dev: &str, n: usize, attr: &str) -> String {
    format!("{kind} entry {n} of {dev}: no {attr}")
}

/// Appends the QPs of one `RDMA_NLDEV_CMD_RES_QP_GET` reply message's payload to `out`;
/// returns how many it had.
pub fn decode_res_qps(payload: &[u8], out: &mut Vec<ResQp>) -> Result<usize, String> {
    let m = res_message(payload, ATTR_RES_QP, "RDMA_NLDEV_ATTR_RES_QP")?;
    for_each_entry(&m.tables, ATTR_RES_QP_ENTRY, |n, entry| {
        let mut owner = Owner::default();
        let (mut port, mut lqpn, mut rqpn, mut ty, mut state) = (None, None, None, None, None);
        let (mut pdn, mut sq_psn, mut rq_psn) = (None, None, None);
        for a in entry.nested() {
            let a = a.map_err(|e| format!("QP entry {n} of {}: {e}", m.dev_name))?;
            match a.ty {
                ATTR_PORT_INDEX => port = Some(u32_of(&a, "RDMA_NLDEV_ATTR_PORT_INDEX")?),
                ATTR_RES_LQPN => lqpn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_LQPN")?),
                ATTR_RES_RQPN => rqpn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_RQPN")?),
                ATTR_RES_SQ_PSN => sq_psn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_SQ_PSN")?),
                ATTR_RES_RQ_PSN => rq_psn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_RQ_PSN")?),
                ATTR_RES_TYPE => ty = Some(QpType(u8_of(&a, "RDMA_NLDEV_ATTR_RES_TYPE")?)),
                ATTR_RES_STATE => state = Some(QpState(u8_of(&a, "RDMA_NLDEV_ATTR_RES_STATE")?)),
                ATTR_RES_PDN => pdn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_PDN")?),
                _ => {
                    owner.take(&a)?;
                }
            }
        }
        let need = |attr| missing("QP", &m.dev_name, n, attr);
        out.push(ResQp {
            dev_index: m.dev_index,
            dev_name: m.dev_name.clone(),
            port,
            lqpn: lqpn.ok_or_else(|| need("RDMA_NLDEV_ATTR_RES_LQPN"))?,
            rqpn,
            qp_type: ty.ok_or_else(|| need("RDMA_NLDEV_ATTR_RES_TYPE"))?,
            state: state.ok_or_else(|| need("RDMA_NLDEV_ATTR_RES_STATE"))?,
            pdn,
            sq_psn,
            rq_psn,
            pid: owner.pid,
            kern_name: owner.kern_name,
        });
        Ok(())
    })
}

/// Appends the CQs of one `RDMA_NLDEV_CMD_RES_CQ_GET` reply message's payload to `out`.
pub fn decode_res_cqs(payload: &[u8], out: &mut Vec<ResCq>) -> Result<usize, String> {
    let m = res_message(payload, ATTR_RES_CQ, "RDMA_NLDEV_ATTR_RES_CQ")?;
    for_each_entry(&m.tables, ATTR_RES_CQ_ENTRY, |n, entry| {
        let mut owner = Owner::default();
        let (mut cqn, mut cqe, mut users, mut poll_ctx, mut ctxn) = (None, None, None, None, None);
        let mut dim = None;
        for a in entry.nested() {
            let a = a.map_err(|e| format!("CQ entry {n} of {}: {e}", m.dev_name))?;
            match a.ty {
                ATTR_RES_CQN => cqn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_CQN")?),
                ATTR_RES_CQE => cqe = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_CQE")?),
                ATTR_RES_USECNT => users = Some(u64_of(&a, "RDMA_NLDEV_ATTR_RES_USECNT")?),
                ATTR_RES_POLL_CTX => poll_ctx = Some(u8_of(&a, "RDMA_NLDEV_ATTR_RES_POLL_CTX")?),
                ATTR_RES_CTXN => ctxn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_CTXN")?),
                ATTR_DEV_DIM => dim = Some(u8_of(&a, "RDMA_NLDEV_ATTR_DEV_DIM")? != 0),
                _ => {
                    owner.take(&a)?;
                }
            }
        }
        let need = |attr| missing("CQ", &m.dev_name, n, attr);
        out.push(ResCq {
            dev_index: m.dev_index,
            dev_name: m.dev_name.clone(),
            cqn,
            cqe: cqe.ok_or_else(|| need("RDMA_NLDEV_ATTR_RES_CQE"))?,
            users: users.ok_or_else(|| need("RDMA_NLDEV_ATTR_RES_USECNT"))?,
            poll_ctx,
            adaptive_moderation: dim,
            ctxn,
            pid: owner.pid,
            kern_name: owner.kern_name,
        });
        Ok(())
    })
}

/// Appends the MRs of one `RDMA_NLDEV_CMD_RES_MR_GET` reply message's payload to `out`.
pub fn decode_res_mrs(payload: &[u8], out: &mut Vec<ResMr>) -> Result<usize, String> {
    let m = res_message(payload, ATTR_RES_MR, "RDMA_NLDEV_ATTR_RES_MR")?;
    for_each_entry(&m.tables, ATTR_RES_MR_ENTRY, |n, entry| {
        let mut owner = Owner::default();
        let (mut mrn, mut mrlen, mut rkey, mut lkey) = (None, None, None, None);
        let (mut iova, mut pdn) = (None, None);
        for a in entry.nested() {
            let a = a.map_err(|e| format!("MR entry {n} of {}: {e}", m.dev_name))?;
            match a.ty {
                ATTR_RES_MRN => mrn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_MRN")?),
                ATTR_RES_MRLEN => mrlen = Some(u64_of(&a, "RDMA_NLDEV_ATTR_RES_MRLEN")?),
                ATTR_RES_RKEY => rkey = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_RKEY")?),
                ATTR_RES_LKEY => lkey = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_LKEY")?),
                ATTR_RES_IOVA => iova = Some(u64_of(&a, "RDMA_NLDEV_ATTR_RES_IOVA")?),
                ATTR_RES_PDN => pdn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_PDN")?),
                _ => {
                    owner.take(&a)?;
                }
            }
        }
        out.push(ResMr {
            dev_index: m.dev_index,
            dev_name: m.dev_name.clone(),
            mrn,
            mrlen: mrlen
                .ok_or_else(|| missing("MR", &m.dev_name, n, "RDMA_NLDEV_ATTR_RES_MRLEN"))?,
            rkey,
            lkey,
            iova,
            pdn,
            pid: owner.pid,
            kern_name: owner.kern_name,
        });
        Ok(())
    })
}

/// Appends the PDs of one `RDMA_NLDEV_CMD_RES_PD_GET` reply message's payload to `out`.
pub fn decode_res_pds(payload: &[u8], out: &mut Vec<ResPd>) -> Result<usize, String> {
    let m = res_message(payload, ATTR_RES_PD, "RDMA_NLDEV_ATTR_RES_PD")?;
    for_each_entry(&m.tables, ATTR_RES_PD_ENTRY, |n, entry| {
        let mut owner = Owner::default();
        let (mut pdn, mut users, mut lkey, mut rkey, mut ctxn) = (None, None, None, None, None);
        for a in entry.nested() {
            let a = a.map_err(|e| format!("PD entry {n} of {}: {e}", m.dev_name))?;
            match a.ty {
                ATTR_RES_PDN => pdn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_PDN")?),
                ATTR_RES_USECNT => users = Some(u64_of(&a, "RDMA_NLDEV_ATTR_RES_USECNT")?),
                ATTR_RES_LOCAL_DMA_LKEY => {
                    lkey = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_LOCAL_DMA_LKEY")?)
                }
                ATTR_RES_UNSAFE_GLOBAL_RKEY => {
                    rkey = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_UNSAFE_GLOBAL_RKEY")?)
                }
                ATTR_RES_CTXN => ctxn = Some(u32_of(&a, "RDMA_NLDEV_ATTR_RES_CTXN")?),
                _ => {
                    owner.take(&a)?;
                }
            }
        }
        out.push(ResPd {
            dev_index: m.dev_index,
            dev_name: m.dev_name.clone(),
            pdn,
            users: users
                .ok_or_else(|| missing("PD", &m.dev_name, n, "RDMA_NLDEV_ATTR_RES_USECNT"))?,
            local_dma_lkey: lkey,
            unsafe_global_rkey: rkey,
            ctxn,
            pid: owner.pid,
            kern_name: owner.kern_name,
        });
        Ok(())
    })
}

/// One dump that failed in [`RdmaNetlink::resources`].
#[derive(Debug)]
pub struct ResError {
    pub device: String,
    pub kind: ResKind,
    pub error: NetlinkError,
}

/// Every QP, CQ, MR and PD of some devices, and the dumps that failed (partial failure
/// is a value: one device or resource type the kernel refuses does not hide the rest).
#[derive(Debug, Default)]
pub struct ResourceSnapshot {
    pub qps: Vec<ResQp>,
    pub cqs: Vec<ResCq>,
    pub mrs: Vec<ResMr>,
    pub pds: Vec<ResPd>,
    pub errors: Vec<ResError>,
}

type Decoder<T> = fn(&[u8], &mut Vec<T>) -> Result<usize, String>;

impl RdmaNetlink {
    fn res_dump<T>(
        &mut self,
        kind: ResKind,
        dev_index: u32,
        decode: Decoder<T>,
    ) -> Result<Vec<T>, NetlinkError> {
        let (_, what) = kind.command();
        let seq = self.sock.next_seq();
        let req = encode_res_dump(kind, seq, dev_index, None);
        let mut out = Vec::new();
        // A kernel without this dump (no resource tracking) answers EINVAL or EOPNOTSUPP:
        // NetlinkError::Kernel naming the command.
        let what = format!("{what} dump of device {dev_index}");
        self.sock.request(&what, &req, seq, true, |m| {
            decode(m.payload, &mut out).map(drop)
        })?;
        Ok(out)
    }

    /// Every QP of the device with kernel index `dev_index` (all ports, and those not
    /// bound to a port yet).
    pub fn res_qps(&mut self, dev_index: u32) -> Result<Vec<ResQp>, NetlinkError> {
        self.res_dump(ResKind::Qp, dev_index, decode_res_qps)
    }

    /// Every CQ of the device.
    pub fn res_cqs(&mut self, dev_index: u32) -> Result<Vec<ResCq>, NetlinkError> {
        self.res_dump(ResKind::Cq, dev_index, decode_res_cqs)
    }

    /// Every MR of the device.
    pub fn res_mrs(&mut self, dev_index: u32) -> Result<Vec<ResMr>, NetlinkError> {
        self.res_dump(ResKind::Mr, dev_index, decode_res_mrs)
    }

    /// Every PD of the device.
    pub fn res_pds(&mut self, dev_index: u32) -> Result<Vec<ResPd>, NetlinkError> {
        self.res_dump(ResKind::Pd, dev_index, decode_res_pds)
    }

    /// The QPs, CQs, MRs and PDs of `devices`: four dumps per device, the failed ones in
    /// [`ResourceSnapshot::errors`].
    pub fn resources(&mut self, devices: &[RdmaDevice]) -> ResourceSnapshot {
        let mut s = ResourceSnapshot::default();
        for d in devices {
            let qps = self.res_qps(d.index);
            keep(qps, &mut s.qps, &mut s.errors, d, ResKind::Qp);
            let cqs = self.res_cqs(d.index);
            keep(cqs, &mut s.cqs, &mut s.errors, d, ResKind::Cq);
            let mrs = self.res_mrs(d.index);
            keep(mrs, &mut s.mrs, &mut s.errors, d, ResKind::Mr);
            let pds = self.res_pds(d.index);
            keep(pds, &mut s.pds, &mut s.errors, d, ResKind::Pd);
        }
        s
    }
}

fn keep<T>(
    dump: Result<Vec<T>, NetlinkError>,
    into: &mut Vec<T>,
    errors: &mut Vec<ResError>,
    device: &RdmaDevice,
    kind: ResKind,
) {
    match dump {
        Ok(v) => into.extend(v),
        Err(error) => errors.push(ResError {
            device: device.name.clone(),
            kind,
            error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::messages;

    const NESTED: u16 = 1 << 15;

    fn u64_attr(b: &mut MessageBuilder, ty: u16, v: u64) {
        b.attr_bytes(ty, &v.to_ne_bytes());
    }

    /// A QP dump message the way nldev.c writes it: the device handle, then the table
    /// (without NLA_F_NESTED: nla_nest_start_noflag) of entries.
    fn qp_message(seq: u32, entries: &[&dyn Fn(&mut MessageBuilder)]) -> Vec<u8> {
        let mut b = MessageBuilder::new(nldev_type(CMD_RES_QP_GET), 2, seq);
        b.attr_u32(ATTR_DEV_INDEX, 3)
            .attr_str(ATTR_DEV_NAME, "mlx5_1");
        b.nest(ATTR_RES_QP, |b| {
            for e in entries {
                b.nest(ATTR_RES_QP_ENTRY, |b| e(b));
            }
        });
        b.finish()
    }

    fn gsi(b: &mut MessageBuilder) {
        b.attr_u32(ATTR_PORT_INDEX, 1)
            .attr_u32(ATTR_RES_LQPN, 1)
            .attr_u32(ATTR_RES_SQ_PSN, 0)
            .attr_bytes(ATTR_RES_TYPE, &[1])
            .attr_bytes(ATTR_RES_STATE, &[3])
            .attr_str(ATTR_RES_KERN_NAME, "ib_core");
    }

    fn rc(b: &mut MessageBuilder) {
        b.attr_u32(ATTR_PORT_INDEX, 2)
            .attr_u32(ATTR_RES_LQPN, 0x1c5)
            .attr_u32(ATTR_RES_RQPN, 0x2a7)
            .attr_u32(ATTR_RES_RQ_PSN, 77)
            .attr_u32(ATTR_RES_SQ_PSN, 99)
            .attr_bytes(ATTR_RES_PATH_MIG_STATE, &[0])
            .attr_bytes(ATTR_RES_TYPE, &[2])
            .attr_bytes(ATTR_RES_STATE, &[3])
            .attr_u32(ATTR_RES_PDN, 4)
            .attr_u32(ATTR_RES_PID, 4242);
    }

    /// Created, not yet moved to INIT: no port (fill_res_qp_entry: "In create_qp() port
    /// is not set yet"), UD: no remote QP.
    fn unbound(b: &mut MessageBuilder) {
        b.attr_u32(ATTR_RES_LQPN, 0x1c6)
            .attr_u32(ATTR_RES_SQ_PSN, 0)
            .attr_bytes(ATTR_RES_TYPE, &[4])
            .attr_bytes(ATTR_RES_STATE, &[0])
            .attr_u32(ATTR_RES_PDN, 4)
            .attr_u32(ATTR_RES_PID, 4242);
    }

    fn decode_all(datagrams: &[Vec<u8>]) -> Result<Vec<ResQp>, String> {
        let mut out = Vec::new();
        for d in datagrams {
            for m in messages(d) {
                let m = m?;
                if m.ty == nldev_type(CMD_RES_QP_GET) {
                    decode_res_qps(m.payload, &mut out)?;
                }
            }
        }
        Ok(out)
    }

    #[test]
    fn request_bytes() {
        // What iproute2's _res_send_msg() writes for `rdma resource show qp link mlx5_1/2`
        // (less its NLM_F_ACK): RES_QP_GET (0x140a), REQUEST|DUMP, DEV_INDEX, PORT_INDEX.
        let mut want = Vec::new();
        want.extend_from_slice(&32u32.to_ne_bytes());
        want.extend_from_slice(&0x140au16.to_ne_bytes());
        want.extend_from_slice(&0x301u16.to_ne_bytes());
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        for (ty, v) in [(1u16, 3u32), (3, 2)] {
            want.extend_from_slice(&8u16.to_ne_bytes());
            want.extend_from_slice(&ty.to_ne_bytes());
            want.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(encode_res_dump(ResKind::Qp, 7, 3, Some(2)), want);
        // The device-wide form is the same without the port.
        let all = encode_res_dump(ResKind::Qp, 7, 3, None);
        assert_eq!(&all[4..16], &want[4..16]);
        assert_eq!((all.len(), &all[16..]), (24, &want[16..24]));
        for (kind, ty) in [
            (ResKind::Cq, 0x140c),
            (ResKind::Mr, 0x140d),
            (ResKind::Pd, 0x140e),
        ] {
            let r = encode_res_dump(kind, 1, 0, None);
            assert_eq!(u16::from_ne_bytes([r[4], r[5]]), ty, "{}", kind.name());
        }
    }

    #[test]
    fn entries_of_several_messages_and_datagrams() {
        // One datagram with two messages (the table continued), then one more message,
        // then NLMSG_DONE: the dump of one device.
        let mut first = qp_message(5, &[&gsi, &rc]);
        first.extend(qp_message(5, &[&unbound]));
        let second = qp_message(5, &[&gsi]);
        let qps = decode_all(&[first, second]).unwrap();
        assert_eq!(qps.len(), 4);
        assert_eq!(
            qps[0],
            ResQp {
                dev_index: 3,
                dev_name: "mlx5_1".into(),
                port: Some(1),
                lqpn: 1,
                rqpn: None,
                qp_type: QpType(1),
                state: QpState(3),
                pdn: None,
                sq_psn: Some(0),
                rq_psn: None,
                pid: None,
                kern_name: Some("ib_core".into()),
            }
        );
        assert_eq!((qps[0].qp_type.name(), qps[0].state.name()), ("GSI", "RTS"));
        let r = &qps[1];
        assert_eq!(
            (r.port, r.lqpn, r.rqpn, r.pdn),
            (Some(2), 0x1c5, Some(0x2a7), Some(4))
        );
        assert_eq!(
            (r.qp_type, r.qp_type.to_string()),
            (QpType::RC, "RC".to_string())
        );
        assert_eq!(
            (r.sq_psn, r.rq_psn, r.pid, &r.kern_name),
            (Some(99), Some(77), Some(4242), &None)
        );
        let u = &qps[2];
        assert_eq!(
            (u.port, u.rqpn, u.qp_type.name(), u.state.name()),
            (None, None, "UD", "RESET")
        );
        assert_eq!(qps[3].lqpn, 1);
    }

    #[test]
    fn nested_flags_pad_attributes_and_unknown_attributes_are_skipped() {
        // NLA_F_NESTED on the table and entry, a PAD (type 0) before a u64, an attribute
        // a newer kernel adds (RDMA_NLDEV_ATTR_DRIVER, 52): same QP.
        let mut b = MessageBuilder::new(nldev_type(CMD_RES_QP_GET), 2, 1);
        b.attr_u32(ATTR_DEV_INDEX, 0)
            .attr_str(ATTR_DEV_NAME, "rxe0");
        b.nest(ATTR_RES_QP | NESTED, |b| {
            b.nest(ATTR_RES_QP_ENTRY | NESTED, |b| {
                rc(b);
                b.attr_bytes(0, &[]);
                b.nest(52 | NESTED, |b| {
                    b.attr_str(53, "sq_wqe_cnt");
                });
            });
        });
        let m = b.finish();
        let qps = decode_all(&[m]).unwrap();
        assert_eq!((qps.len(), qps[0].lqpn, qps[0].pid), (1, 0x1c5, Some(4242)));
    }

    #[test]
    fn type_and_state_names_are_rdma_s() {
        let names: Vec<_> = (0..=11).map(|t| QpType(t).name()).collect();
        assert_eq!(
            names,
            [
                "SMI",
                "GSI",
                "RC",
                "UC",
                "UD",
                "RAW_IPV6",
                "RAW_ETHERTYPE",
                "UNKNOWN",
                "RAW_PACKET",
                "XRC_INI",
                "XRC_TGT",
                "UNKNOWN"
            ]
        );
        assert_eq!(QpType(0xff).name(), "UNKNOWN");
        let states: Vec<_> = (0..=7).map(|s| QpState(s).to_string()).collect();
        assert_eq!(
            states,
            ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"]
        );
    }

    #[test]
    fn errors_name_what_is_missing() {
        let no_lqpn = qp_message(
            1,
            &[&|b: &mut MessageBuilder| {
                b.attr_bytes(ATTR_RES_TYPE, &[2])
                    .attr_bytes(ATTR_RES_STATE, &[3]);
            }],
        );
        let e = decode_all(&[no_lqpn]).unwrap_err();
        assert_eq!(e, "QP entry 0 of mlx5_1: no RDMA_NLDEV_ATTR_RES_LQPN");
        let short_lqpn = qp_message(
            1,
            &[&|b: &mut MessageBuilder| {
                b.attr_bytes(ATTR_RES_LQPN, &[1, 0]);
            }],
        );
        let e = decode_all(&[short_lqpn]).unwrap_err();
        assert_eq!(e, "RDMA_NLDEV_ATTR_RES_LQPN of 2 bytes, not a u32");
        let mut out = Vec::new();
        let no_table = MessageBuilder::new(1, 0, 1)
            .attr_u32(ATTR_DEV_INDEX, 0)
            .attr_str(ATTR_DEV_NAME, "rxe0")
            .finish();
        let e = decode_res_cqs(&no_table[16..], &mut out).unwrap_err();
        assert_eq!(e, "a reply of rxe0 without a RDMA_NLDEV_ATTR_RES_CQ table");
        let e = decode_res_mrs(&[], &mut Vec::new()).unwrap_err();
        assert_eq!(e, "a reply without RDMA_NLDEV_ATTR_DEV_INDEX");
        // A CQ without its size, an MR without its length, a PD without its users.
        let entry = |table: u16, entry: u16| {
            let mut b = MessageBuilder::new(1, 0, 1);
            b.attr_u32(ATTR_DEV_INDEX, 0)
                .attr_str(ATTR_DEV_NAME, "rxe0");
            b.nest(table, |b| {
                b.nest(entry, |b| {
                    b.attr_u32(ATTR_RES_PID, 1);
                });
            });
            b.finish()[16..].to_vec()
        };
        let e = decode_res_cqs(&entry(ATTR_RES_CQ, ATTR_RES_CQ_ENTRY), &mut Vec::new());
        assert_eq!(
            e.unwrap_err(),
            "CQ entry 0 of rxe0: no RDMA_NLDEV_ATTR_RES_CQE"
        );
        let e = decode_res_mrs(&entry(ATTR_RES_MR, ATTR_RES_MR_ENTRY), &mut Vec::new());
        assert_eq!(
            e.unwrap_err(),
            "MR entry 0 of rxe0: no RDMA_NLDEV_ATTR_RES_MRLEN"
        );
        let e = decode_res_pds(&entry(ATTR_RES_PD, ATTR_RES_PD_ENTRY), &mut Vec::new());
        assert_eq!(
            e.unwrap_err(),
            "PD entry 0 of rxe0: no RDMA_NLDEV_ATTR_RES_USECNT"
        );
    }

    #[test]
    fn crafted_cq_mr_pd_entries() {
        let mut b = MessageBuilder::new(nldev_type(CMD_RES_CQ_GET), 2, 1);
        b.attr_u32(ATTR_DEV_INDEX, 0)
            .attr_str(ATTR_DEV_NAME, "rxe0");
        b.nest(ATTR_RES_CQ, |b| {
            b.nest(ATTR_RES_CQ_ENTRY, |b| {
                b.attr_u32(ATTR_RES_CQE, 255);
                u64_attr(b, ATTR_RES_USECNT, 2);
                b.attr_bytes(ATTR_RES_POLL_CTX, &[1])
                    .attr_bytes(ATTR_DEV_DIM, &[1])
                    .attr_u32(ATTR_RES_CQN, 1)
                    .attr_str(ATTR_RES_KERN_NAME, "ib_core");
            });
        });
        let m = b.finish();
        let mut cqs = Vec::new();
        assert_eq!(decode_res_cqs(&m[16..], &mut cqs), Ok(1));
        let c = &cqs[0];
        assert_eq!(
            (c.cqe, c.users, c.poll_ctx, c.cqn, c.ctxn),
            (255, 2, Some(1), Some(1), None)
        );
        assert_eq!((c.pid, c.kern_name.as_deref()), (None, Some("ib_core")));
        assert_eq!(c.adaptive_moderation, Some(true));

        let mut b = MessageBuilder::new(nldev_type(CMD_RES_MR_GET), 2, 1);
        b.attr_u32(ATTR_DEV_INDEX, 0)
            .attr_str(ATTR_DEV_NAME, "rxe0");
        b.nest(ATTR_RES_MR, |b| {
            b.nest(ATTR_RES_MR_ENTRY, |b| {
                b.attr_u32(ATTR_RES_RKEY, 0x1234)
                    .attr_u32(ATTR_RES_LKEY, 0x1235);
                u64_attr(b, ATTR_RES_IOVA, 0x7f00_0000_0000);
                u64_attr(b, ATTR_RES_MRLEN, 1 << 30);
                b.attr_u32(ATTR_RES_MRN, 9)
                    .attr_u32(ATTR_RES_PDN, 4)
                    .attr_u32(ATTR_RES_PID, 77);
            });
        });
        let m = b.finish();
        let mut mrs = Vec::new();
        assert_eq!(decode_res_mrs(&m[16..], &mut mrs), Ok(1));
        let r = &mrs[0];
        assert_eq!(
            (r.mrlen, r.rkey, r.lkey, r.iova),
            (1 << 30, Some(0x1234), Some(0x1235), Some(0x7f00_0000_0000))
        );
        assert_eq!((r.mrn, r.pdn, r.pid), (Some(9), Some(4), Some(77)));

        let mut b = MessageBuilder::new(nldev_type(CMD_RES_PD_GET), 2, 1);
        b.attr_u32(ATTR_DEV_INDEX, 0)
            .attr_str(ATTR_DEV_NAME, "rxe0");
        b.nest(ATTR_RES_PD, |b| {
            b.nest(ATTR_RES_PD_ENTRY, |b| {
                b.attr_u32(ATTR_RES_LOCAL_DMA_LKEY, 0)
                    .attr_u32(ATTR_RES_UNSAFE_GLOBAL_RKEY, 5);
                u64_attr(b, ATTR_RES_USECNT, 3);
                b.attr_u32(ATTR_RES_PDN, 4)
                    .attr_u32(ATTR_RES_CTXN, 2)
                    .attr_u32(ATTR_RES_PID, 77);
            });
        });
        let m = b.finish();
        let mut pds = Vec::new();
        assert_eq!(decode_res_pds(&m[16..], &mut pds), Ok(1));
        let p = &pds[0];
        assert_eq!(
            (p.users, p.local_dma_lkey, p.unsafe_global_rkey),
            (3, Some(0), Some(5))
        );
        assert_eq!((p.pdn, p.ctxn, p.pid), (Some(4), Some(2), Some(77)));
    }

    #[test]
    fn a_dump_across_datagrams_and_a_refused_one_through_the_socket() {
        let (mut nl, kernel) = crate::replay::rdma_pair();
        // Sequence 1: two datagrams of QPs, then NLMSG_DONE (status 0).
        kernel.reply(&qp_message(1, &[&gsi, &rc]));
        kernel.reply(&qp_message(1, &[&unbound]));
        let mut done = MessageBuilder::new(msg::T_DONE, 2, 1).finish();
        done.extend_from_slice(&0i32.to_ne_bytes());
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        kernel.reply(&done);
        let qps = nl.res_qps(3).unwrap();
        assert_eq!(
            qps.iter().map(|q| q.lqpn).collect::<Vec<_>>(),
            [1, 0x1c5, 0x1c6]
        );
        assert_eq!(kernel.request(), encode_res_dump(ResKind::Qp, 1, 3, None));
        // Sequence 2: a kernel without the CQ dump refuses it in NLMSG_DONE (EOPNOTSUPP).
        let mut refused = MessageBuilder::new(msg::T_DONE, 2, 2).finish();
        refused.extend_from_slice(&(-libc::EOPNOTSUPP).to_ne_bytes());
        refused[0..4].copy_from_slice(&20u32.to_ne_bytes());
        kernel.reply(&refused);
        let e = nl.res_cqs(3).unwrap_err();
        assert!(
            matches!(&e, NetlinkError::Kernel { errno, .. } if *errno == libc::EOPNOTSUPP),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "netlink RDMA_NLDEV_CMD_RES_CQ_GET dump of device 3: the kernel answered \
             Operation not supported (os error 95)"
        );
        // Sequence 3: an NLMSG_ERROR (no such device: EINVAL from nldev.c).
        let mut err = MessageBuilder::new(msg::T_ERROR, 0, 3).finish();
        err.extend_from_slice(&(-libc::EINVAL).to_ne_bytes());
        err.extend_from_slice(&encode_res_dump(ResKind::Mr, 3, 9, None)[..16]);
        let len = err.len() as u32;
        err[0..4].copy_from_slice(&len.to_ne_bytes());
        kernel.reply(&err);
        let e = nl.res_mrs(9).unwrap_err();
        assert!(matches!(e, NetlinkError::Kernel { errno, .. } if errno == libc::EINVAL));
    }

    #[test]
    fn a_snapshot_keeps_what_answered_and_names_what_failed() {
        let (mut nl, kernel) = crate::replay::rdma_pair();
        let done = |seq: u32, code: i32| {
            let mut m = MessageBuilder::new(msg::T_DONE, 2, seq).finish();
            m.extend_from_slice(&code.to_ne_bytes());
            m[0..4].copy_from_slice(&20u32.to_ne_bytes());
            m
        };
        // The QP dump answers, CQ and PD have none, the MR dump is refused.
        kernel.reply(&qp_message(1, &[&gsi, &rc]));
        kernel.reply(&done(1, 0));
        kernel.reply(&done(2, 0));
        kernel.reply(&done(3, -libc::EOPNOTSUPP));
        kernel.reply(&done(4, 0));
        let dev = RdmaDevice {
            index: 3,
            name: "mlx5_1".into(),
            ports: 2,
        };
        let s = nl.resources(std::slice::from_ref(&dev));
        assert_eq!(
            (s.qps.len(), s.cqs.len(), s.mrs.len(), s.pds.len()),
            (2, 0, 0, 0)
        );
        assert_eq!(s.errors.len(), 1);
        let e = &s.errors[0];
        assert_eq!(
            (e.device.as_str(), e.kind, e.kind.name()),
            ("mlx5_1", ResKind::Mr, "mr")
        );
        assert!(matches!(e.error, NetlinkError::Kernel { errno, .. } if errno == libc::EOPNOTSUPP));
        for (seq, kind) in [
            (1, ResKind::Qp),
            (2, ResKind::Cq),
            (3, ResKind::Mr),
            (4, ResKind::Pd),
        ] {
            assert_eq!(kernel.request(), encode_res_dump(kind, seq, 3, None));
        }
    }
}
