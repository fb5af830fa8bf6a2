//! Ethtool netlink (the "ethtool" generic netlink family, Linux 5.6 and later): the link
//! state with why it is down (what `ethtool IF` prints on its "Link detected" line:
//! `ETHTOOL_MSG_LINKSTATE_GET`), the FEC mode and statistics (`ethtool -I --show-fec IF`:
//! `ETHTOOL_MSG_FEC_GET` with `ETHTOOL_FLAG_STATS`), and one module EEPROM read
//! (`ETHTOOL_MSG_MODULE_EEPROM_GET`, Linux
//! 5.13 and later; [`crate::module_eeprom`] reads a whole module with it).
//!
//! Numbers from `include/uapi/linux/ethtool_netlink.h` (and, for the attributes newer
//! kernels added, `ethtool_netlink_generated.h`: `ETHTOOL_A_LINKSTATE_EXT_DOWN_CNT` 7,
//! `ETHTOOL_A_FEC_STAT_HIST` 5 with its `ETHTOOL_A_FEC_HIST_BIN_*`); the reply layouts as
//! `net/ethtool/linkstate.c`, `fec.c` and `eeprom.c` fill them. Every reply starts with a
//! header nest (`ETHTOOL_A_HEADER_DEV_INDEX`, `_DEV_NAME`).

use std::time::Duration;

use crate::genl::{self, GenlSocket};
use crate::msg::{attrs, Attr, MessageBuilder};
use crate::NetlinkError;

pub use crate::ethtool_words::{ext_state_name, ext_substate_name, FecMode};

/// `ETHTOOL_GENL_NAME`.
pub const FAMILY_NAME: &str = "ethtool";
/// `ETHTOOL_GENL_VERSION`.
pub const FAMILY_VERSION: u8 = 1;

/// `ETHTOOL_MSG_LINKSTATE_GET` (the reply, `_GET_REPLY`, has the same number).
pub const MSG_LINKSTATE_GET: u8 = 6;
/// `ETHTOOL_MSG_FEC_GET`.
pub const MSG_FEC_GET: u8 = 29;
/// `ETHTOOL_MSG_FEC_GET_REPLY`.
pub const MSG_FEC_GET_REPLY: u8 = 30;
/// `ETHTOOL_MSG_MODULE_EEPROM_GET`.
pub const MSG_MODULE_EEPROM_GET: u8 = 31;
/// `ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY`.
pub const MSG_MODULE_EEPROM_GET_REPLY: u8 = 32;

/// `NLA_F_NESTED`: ethtool's own tool marks its nests so; the kernel accepts both.
const NLA_F_NESTED: u16 = 1 << 15;

// The request/reply header nest (`ETHTOOL_A_HEADER_*`).
/// `ETHTOOL_A_HEADER_DEV_INDEX` (u32).
pub const A_HEADER_DEV_INDEX: u16 = 1;
/// `ETHTOOL_A_HEADER_DEV_NAME` (string).
pub const A_HEADER_DEV_NAME: u16 = 2;
/// `ETHTOOL_A_HEADER_FLAGS` (u32).
pub const A_HEADER_FLAGS: u16 = 3;
/// `ETHTOOL_FLAG_STATS`: add the statistics the driver has.
pub const FLAG_STATS: u32 = 1 << 2;

// `ETHTOOL_A_LINKSTATE_*`.
pub const A_LINKSTATE_HEADER: u16 = 1;
/// u8: 1 up, 0 down.
pub const A_LINKSTATE_LINK: u16 = 2;
/// u8: `enum ethtool_link_ext_state`.
pub const A_LINKSTATE_EXT_STATE: u16 = 5;
/// u8: the substate enum of that state (0 is never sent).
pub const A_LINKSTATE_EXT_SUBSTATE: u16 = 6;
/// u32: link down events (`struct ethtool_link_ext_stats`), with `ETHTOOL_FLAG_STATS`.
pub const A_LINKSTATE_EXT_DOWN_CNT: u16 = 7;

// `ETHTOOL_A_FEC_*`.
pub const A_FEC_HEADER: u16 = 1;
/// A bitset of the configured modes (not read here).
pub const A_FEC_MODES: u16 = 2;
/// u8: the mode is negotiated.
pub const A_FEC_AUTO: u16 = 3;
/// u32: the active mode as a link mode bit (`ETHTOOL_LINK_MODE_FEC_*_BIT`).
pub const A_FEC_ACTIVE: u16 = 4;
/// Nest of `ETHTOOL_A_FEC_STAT_*`.
pub const A_FEC_STATS: u16 = 5;
/// `ETHTOOL_A_FEC_STAT_PAD` (alignment padding, skipped).
pub const A_FEC_STAT_PAD: u16 = 1;
/// u64 array: total, then one per lane.
pub const A_FEC_STAT_CORRECTED: u16 = 2;
pub const A_FEC_STAT_UNCORR: u16 = 3;
pub const A_FEC_STAT_CORR_BITS: u16 = 4;
/// Nest (repeated): one FEC histogram bin (IEEE 802.3ck/df), newer kernels.
pub const A_FEC_STAT_HIST: u16 = 5;
/// `ETHTOOL_A_FEC_HIST_PAD` (alignment padding, skipped): the merged uapi's bin
/// attributes start at 1 with it (`ethtool_netlink_generated.h`; an early version of the
/// series numbered LOW from 1).
pub const A_FEC_HIST_PAD: u16 = 1;
/// u32: the bin's lowest error count per codeword (inclusive).
pub const A_FEC_HIST_BIN_LOW: u16 = 2;
/// u32: the bin's highest error count per codeword (inclusive).
pub const A_FEC_HIST_BIN_HIGH: u16 = 3;
/// uint (u32 or u64): the bin's codewords.
pub const A_FEC_HIST_BIN_VAL: u16 = 4;
/// u64 array: the bin's codewords per lane.
pub const A_FEC_HIST_BIN_VAL_PER_LANE: u16 = 5;

// `ETHTOOL_A_MODULE_EEPROM_*`.
pub const A_MODULE_EEPROM_HEADER: u16 = 1;
pub const A_MODULE_EEPROM_OFFSET: u16 = 2;
pub const A_MODULE_EEPROM_LENGTH: u16 = 3;
pub const A_MODULE_EEPROM_PAGE: u16 = 4;
pub const A_MODULE_EEPROM_BANK: u16 = 5;
pub const A_MODULE_EEPROM_I2C_ADDRESS: u16 = 6;
pub const A_MODULE_EEPROM_DATA: u16 = 7;

/// What can go wrong asking ethtool netlink.
#[derive(Debug, thiserror::Error)]
pub enum EthtoolError {
    /// No "ethtool" family: a kernel before 5.6 or without `CONFIG_ETHTOOL_NETLINK`.
    #[error(
        "the kernel has no ethtool netlink family (Linux 5.6 or later with CONFIG_ETHTOOL_NETLINK)"
    )]
    NoFamily,
    /// The driver (or the kernel, for a command it predates) answered `EOPNOTSUPP`.
    #[error("{ifname}: the driver does not report {what}")]
    Unsupported { ifname: String, what: &'static str },
    /// No such interface (`ENODEV`).
    #[error("{ifname}: no such interface")]
    NoDevice { ifname: String },
    /// Any other failure.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
}

impl EthtoolError {
    /// True where another way (the ioctls) may still answer.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            EthtoolError::NoFamily | EthtoolError::Unsupported { .. }
        )
    }
}

/// The link state (`ETHTOOL_MSG_LINKSTATE_GET`); an attribute the kernel left out is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkState {
    /// Link detected.
    pub link: Option<bool>,
    /// Why the link is down (`enum ethtool_link_ext_state`); only while it is down and the
    /// driver says (mlx5, mlxsw, some PHYs).
    pub ext_state: Option<u8>,
    /// The detail of `ext_state`.
    pub ext_substate: Option<u8>,
    /// Link down events the driver counted (Linux 6.3 and later; mlx5's
    /// `link_down_events_phy`).
    pub ext_down_count: Option<u32>,
}

impl LinkState {
    /// Why the link is down, in words (`ethtool IF` prints the same: "Link detected: no
    /// (Autoneg, No partner detected)"); `None` when the driver did not say.
    pub fn down_reason(&self) -> Option<String> {
        let state = self.ext_state?;
        let mut s = ext_state_name(state);
        if let Some(sub) = self.ext_substate {
            s.push_str(", ");
            s.push_str(&ext_substate_name(state, sub));
        }
        Some(s)
    }
}

/// One FEC counter: the total and, where the driver counts per lane, each lane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FecCounter {
    pub total: u64,
    pub lanes: Vec<u64>,
}

/// One bin of the FEC histogram: codewords with `low..=high` symbol errors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FecBin {
    pub low: u32,
    pub high: u32,
    pub value: Option<u64>,
    pub lanes: Vec<u64>,
}

/// FEC mode and statistics (`ETHTOOL_MSG_FEC_GET` with `ETHTOOL_FLAG_STATS`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fec {
    /// The FEC mode is negotiated.
    pub auto: Option<bool>,
    /// The mode in use; `None` when the kernel sent none (no link, or no FEC).
    pub active: Option<FecMode>,
    /// Codewords (blocks) FEC corrected.
    pub corrected: Option<FecCounter>,
    /// Codewords FEC could not correct: each is a lost frame.
    pub uncorrectable: Option<FecCounter>,
    /// Bits FEC corrected.
    pub corrected_bits: Option<FecCounter>,
    /// The histogram bins, in the kernel's order; empty where the kernel or driver has none.
    pub histogram: Vec<FecBin>,
}

/// Where one module EEPROM read goes (`ETHTOOL_A_MODULE_EEPROM_*`): at most 128 bytes,
/// within the lower half (offset < 128, page 0 only) or the upper half of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub i2c_address: u8,
    pub bank: u8,
    pub page: u8,
    pub offset: u32,
    pub length: u32,
}

/// The request header nest: the interface by name, and `flags`.
fn header(b: &mut MessageBuilder, ty: u16, ifname: &str, flags: u32) {
    b.nest(ty | NLA_F_NESTED, |b| {
        b.attr_str(A_HEADER_DEV_NAME, ifname);
        if flags != 0 {
            b.attr_u32(A_HEADER_FLAGS, flags);
        }
    });
}

/// `ETHTOOL_MSG_LINKSTATE_GET` for `ifname` (`flags`: [`FLAG_STATS`] for the down count).
pub fn encode_linkstate_get(family: u16, seq: u32, ifname: &str, flags: u32) -> Vec<u8> {
    let mut b = genl::request(family, MSG_LINKSTATE_GET, FAMILY_VERSION, seq);
    header(&mut b, A_LINKSTATE_HEADER, ifname, flags);
    b.finish()
}

/// `ETHTOOL_MSG_FEC_GET` for `ifname` (`flags`: [`FLAG_STATS`] for the statistics).
pub fn encode_fec_get(family: u16, seq: u32, ifname: &str, flags: u32) -> Vec<u8> {
    let mut b = genl::request(family, MSG_FEC_GET, FAMILY_VERSION, seq);
    header(&mut b, A_FEC_HEADER, ifname, flags);
    b.finish()
}

/// `ETHTOOL_MSG_MODULE_EEPROM_GET` for `ifname`, as `eeprom_parse_request()` wants it
/// (offset, length, page and I2C address required; the bank optional, always sent here).
pub fn encode_module_eeprom_get(family: u16, seq: u32, ifname: &str, r: &PageRequest) -> Vec<u8> {
    let mut b = genl::request(family, MSG_MODULE_EEPROM_GET, FAMILY_VERSION, seq);
    header(&mut b, A_MODULE_EEPROM_HEADER, ifname, 0);
    b.attr_u32(A_MODULE_EEPROM_OFFSET, r.offset)
        .attr_u32(A_MODULE_EEPROM_LENGTH, r.length)
        .attr_bytes(A_MODULE_EEPROM_PAGE, &[r.page])
        .attr_bytes(A_MODULE_EEPROM_BANK, &[r.bank])
        .attr_bytes(A_MODULE_EEPROM_I2C_ADDRESS, &[r.i2c_address]);
    b.finish()
}

fn u8_of(name: &str, a: &Attr<'_>) -> Result<u8, String> {
    a.data
        .first()
        .copied()
        .ok_or_else(|| format!("{name}: empty attribute"))
}

fn u32_of(name: &str, a: &Attr<'_>) -> Result<u32, String> {
    a.u32()
        .ok_or_else(|| format!("{name}: {} bytes, want 4", a.data.len()))
}

/// A u64 array attribute (`nla_put_64bit` of `u64[]`).
fn u64s_of(name: &str, a: &Attr<'_>) -> Result<Vec<u64>, String> {
    if !a.data.len().is_multiple_of(8) {
        return Err(format!(
            "{name}: {} bytes, not a whole number of u64",
            a.data.len()
        ));
    }
    Ok(a.data
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// A `NLA_UINT` (`nla_put_uint`): 4 bytes when the value fits, else 8.
fn uint_of(name: &str, a: &Attr<'_>) -> Result<u64, String> {
    match a.data.len() {
        4 => Ok(u64::from(a.u32().expect("4 bytes"))),
        8 => Ok(a.u64().expect("8 bytes")),
        n => Err(format!("{name}: {n} bytes, want 4 or 8")),
    }
}

/// The attributes of an ethtool reply (the payload after the netlink header).
fn reply_attrs(payload: &[u8]) -> Result<Vec<Attr<'_>>, String> {
    attrs(genl::reply_attrs(payload)?).collect()
}

/// The link state in an `ETHTOOL_MSG_LINKSTATE_GET_REPLY` payload.
pub fn decode_linkstate(payload: &[u8]) -> Result<LinkState, String> {
    let mut s = LinkState::default();
    for a in reply_attrs(payload)? {
        match a.ty {
            A_LINKSTATE_LINK => s.link = Some(u8_of("ETHTOOL_A_LINKSTATE_LINK", &a)? != 0),
            A_LINKSTATE_EXT_STATE => {
                s.ext_state = Some(u8_of("ETHTOOL_A_LINKSTATE_EXT_STATE", &a)?)
            }
            A_LINKSTATE_EXT_SUBSTATE => {
                s.ext_substate = Some(u8_of("ETHTOOL_A_LINKSTATE_EXT_SUBSTATE", &a)?)
            }
            A_LINKSTATE_EXT_DOWN_CNT => {
                s.ext_down_count = Some(u32_of("ETHTOOL_A_LINKSTATE_EXT_DOWN_CNT", &a)?)
            }
            _ => {}
        }
    }
    Ok(s)
}

/// A FEC counter array: `[total, lane0, lane1, ...]`; empty (the driver did not count
/// it) is `None`.
fn counter(name: &str, a: &Attr<'_>) -> Result<Option<FecCounter>, String> {
    let v = u64s_of(name, a)?;
    Ok(v.split_first().map(|(total, lanes)| FecCounter {
        total: *total,
        lanes: lanes.to_vec(),
    }))
}

fn decode_bin(a: &Attr<'_>) -> Result<FecBin, String> {
    let mut bin = FecBin::default();
    let (mut low, mut high) = (None, None);
    for b in a.nested() {
        let b = b.map_err(|e| format!("ETHTOOL_A_FEC_STAT_HIST: {e}"))?;
        match b.ty {
            A_FEC_HIST_BIN_LOW => low = Some(u32_of("ETHTOOL_A_FEC_HIST_BIN_LOW", &b)?),
            A_FEC_HIST_BIN_HIGH => high = Some(u32_of("ETHTOOL_A_FEC_HIST_BIN_HIGH", &b)?),
            A_FEC_HIST_BIN_VAL => bin.value = Some(uint_of("ETHTOOL_A_FEC_HIST_BIN_VAL", &b)?),
            A_FEC_HIST_BIN_VAL_PER_LANE => {
                bin.lanes = u64s_of("ETHTOOL_A_FEC_HIST_BIN_VAL_PER_LANE", &b)?
            }
            _ => {}
        }
    }
    match (low, high) {
        (Some(l), Some(h)) => {
            bin.low = l;
            bin.high = h;
            Ok(bin)
        }
        _ => Err("ETHTOOL_A_FEC_STAT_HIST: a bin without ETHTOOL_A_FEC_HIST_BIN_LOW/_HIGH".into()),
    }
}

fn decode_fec_stats(a: &Attr<'_>, fec: &mut Fec) -> Result<(), String> {
    for s in a.nested() {
        let s = s.map_err(|e| format!("ETHTOOL_A_FEC_STATS: {e}"))?;
        match s.ty {
            A_FEC_STAT_CORRECTED => fec.corrected = counter("ETHTOOL_A_FEC_STAT_CORRECTED", &s)?,
            A_FEC_STAT_UNCORR => fec.uncorrectable = counter("ETHTOOL_A_FEC_STAT_UNCORR", &s)?,
            A_FEC_STAT_CORR_BITS => {
                fec.corrected_bits = counter("ETHTOOL_A_FEC_STAT_CORR_BITS", &s)?
            }
            // A bin this reader cannot make sense of is left out, never the whole
            // reply: the mode and the counters stand without the histogram.
            A_FEC_STAT_HIST => fec.histogram.extend(decode_bin(&s).ok()),
            _ => {} // ETHTOOL_A_FEC_STAT_PAD, and what later kernels add
        }
    }
    Ok(())
}

/// The FEC mode and statistics in an `ETHTOOL_MSG_FEC_GET_REPLY` payload.
pub fn decode_fec(payload: &[u8]) -> Result<Fec, String> {
    let mut fec = Fec::default();
    for a in reply_attrs(payload)? {
        match a.ty {
            A_FEC_AUTO => fec.auto = Some(u8_of("ETHTOOL_A_FEC_AUTO", &a)? != 0),
            A_FEC_ACTIVE => {
                fec.active = Some(FecMode::from_link_mode_bit(u32_of(
                    "ETHTOOL_A_FEC_ACTIVE",
                    &a,
                )?))
            }
            A_FEC_STATS => decode_fec_stats(&a, &mut fec)?,
            _ => {}
        }
    }
    Ok(fec)
}

/// The bytes in an `ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY` payload.
pub fn decode_module_eeprom(payload: &[u8]) -> Result<Vec<u8>, String> {
    reply_attrs(payload)?
        .into_iter()
        .find(|a| a.ty == A_MODULE_EEPROM_DATA)
        .map(|a| a.data.to_vec())
        .ok_or_else(|| "no ETHTOOL_A_MODULE_EEPROM_DATA in the reply".into())
}

/// An ethtool netlink client: a generic netlink socket and the family's id.
#[derive(Debug)]
pub struct EthtoolNetlink {
    sock: GenlSocket,
    family: u16,
}

impl EthtoolNetlink {
    /// Opens a socket and resolves the "ethtool" family; [`EthtoolError::NoFamily`] on
    /// kernels without it.
    pub fn open(timeout: Duration) -> Result<Self, EthtoolError> {
        let mut sock = GenlSocket::open(timeout)?;
        match sock.family_id(FAMILY_NAME)? {
            Some(family) => Ok(EthtoolNetlink { sock, family }),
            None => Err(EthtoolError::NoFamily),
        }
    }

    /// A client over `sock` for family id `family` (tests: a fake kernel).
    pub fn with_socket(sock: GenlSocket, family: u16) -> Self {
        EthtoolNetlink { sock, family }
    }

    /// The family id the kernel gave "ethtool".
    pub fn family(&self) -> u16 {
        self.family
    }

    fn call<T>(
        &mut self,
        ifname: &str,
        what: &'static str,
        build: impl FnOnce(u16, u32) -> Vec<u8>,
        decode: impl Fn(&[u8]) -> Result<T, String>,
    ) -> Result<T, EthtoolError> {
        let s = self.sock.socket();
        let seq = s.next_seq();
        let req = build(self.family, seq);
        let mut out = None;
        let r = s.request(&format!("{what} of {ifname}"), &req, seq, false, |m| {
            out = Some(decode(m.payload)?);
            Ok(())
        });
        match r {
            Ok(()) => out.ok_or_else(|| {
                EthtoolError::Netlink(NetlinkError::Malformed {
                    request: format!("{what} of {ifname}"),
                    detail: "acknowledged without a reply".into(),
                })
            }),
            Err(NetlinkError::Kernel { errno, .. }) if errno == libc::EOPNOTSUPP => {
                Err(EthtoolError::Unsupported {
                    ifname: ifname.to_string(),
                    what,
                })
            }
            Err(NetlinkError::Kernel { errno, .. }) if errno == libc::ENODEV => {
                Err(EthtoolError::NoDevice {
                    ifname: ifname.to_string(),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The link state of `ifname`, with the down count where the kernel has it. A kernel
    /// whose link state policy predates `ETHTOOL_FLAG_STATS` (before 6.3) refuses the flag
    /// with `EINVAL`: asked again without it.
    pub fn link_state(&mut self, ifname: &str) -> Result<LinkState, EthtoolError> {
        let what = "the link state";
        let with = self.call(
            ifname,
            what,
            |f, seq| encode_linkstate_get(f, seq, ifname, FLAG_STATS),
            decode_linkstate,
        );
        match with {
            Err(EthtoolError::Netlink(NetlinkError::Kernel { errno, .. }))
                if errno == libc::EINVAL =>
            {
                self.call(
                    ifname,
                    what,
                    |f, seq| encode_linkstate_get(f, seq, ifname, 0),
                    decode_linkstate,
                )
            }
            r => r,
        }
    }

    /// The FEC mode and statistics of `ifname`.
    pub fn fec(&mut self, ifname: &str) -> Result<Fec, EthtoolError> {
        self.call(
            ifname,
            "FEC settings",
            |f, seq| encode_fec_get(f, seq, ifname, FLAG_STATS),
            decode_fec,
        )
    }

    /// One read of `ifname`'s module EEPROM.
    pub fn module_eeprom(
        &mut self,
        ifname: &str,
        r: &PageRequest,
    ) -> Result<Vec<u8>, EthtoolError> {
        self.call(
            ifname,
            "module EEPROM",
            |f, seq| encode_module_eeprom_get(f, seq, ifname, r),
            decode_module_eeprom,
        )
    }
}
