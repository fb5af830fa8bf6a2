//! Ethtool netlink replies built as the kernel lays them out, for tests and for the fake
//! kernels of other crates (no NIC here has a module or FEC statistics: virtio-net and
//! loopback answer `EOPNOTSUPP`, and Debian's kernels do not build netdevsim, whose
//! ethtool emulation would answer). The order and nesting follow `ethnl_default_doit()`
//! (the reply header nest: `ethnl_fill_reply_header()`, index then name), then the
//! command's fill function: `linkstate_fill_reply()`, `fec_fill_reply()` with
//! `fec_put_stats()`/`fec_put_hist()`, `eeprom_fill_reply()`.

use crate::ethtool::*;
use crate::genl;
use crate::msg::MessageBuilder;

const NLA_F_NESTED: u16 = 1 << 15;
// `ETHTOOL_A_BITSET_*` (the FEC modes bitset, verbose form: no compact flag was asked).
const A_BITSET_NOMASK: u16 = 1;
const A_BITSET_SIZE: u16 = 2;
const A_BITSET_BITS: u16 = 3;
const A_BITSET_BITS_BIT: u16 = 1;
const A_BITSET_BIT_INDEX: u16 = 1;
const A_BITSET_BIT_NAME: u16 = 2;
/// `__ETHTOOL_LINK_MODE_MASK_NBITS` of a 6.x kernel (the bitset's size; any will do).
const LINK_MODE_NBITS: u32 = 102;

fn reply(family: u16, cmd: u8, seq: u32, hdr: u16, ifindex: u32, ifname: &str) -> MessageBuilder {
    let mut b = MessageBuilder::new(family, 0, seq);
    b.family_header(&genl::genl_header(cmd, FAMILY_VERSION));
    b.nest(hdr | NLA_F_NESTED, |b| {
        b.attr_u32(A_HEADER_DEV_INDEX, ifindex);
        b.attr_str(A_HEADER_DEV_NAME, ifname);
    });
    b
}

/// `ETHTOOL_MSG_LINKSTATE_GET_REPLY`; `None` fields are left out as the kernel leaves
/// them out (the substate only with a state, as `linkstate_fill_reply()` does).
pub fn encode_linkstate_reply(
    family: u16,
    seq: u32,
    ifindex: u32,
    ifname: &str,
    s: &LinkState,
) -> Vec<u8> {
    let mut b = reply(
        family,
        MSG_LINKSTATE_GET,
        seq,
        A_LINKSTATE_HEADER,
        ifindex,
        ifname,
    );
    if let Some(l) = s.link {
        b.attr_bytes(A_LINKSTATE_LINK, &[u8::from(l)]);
    }
    if let Some(st) = s.ext_state {
        b.attr_bytes(A_LINKSTATE_EXT_STATE, &[st]);
        if let Some(sub) = s.ext_substate.filter(|s| *s != 0) {
            b.attr_bytes(A_LINKSTATE_EXT_SUBSTATE, &[sub]);
        }
    }
    if let Some(n) = s.ext_down_count {
        b.attr_u32(A_LINKSTATE_EXT_DOWN_CNT, n);
    }
    b.finish()
}

fn counter_bytes(c: &Option<FecCounter>) -> Vec<u8> {
    let mut d = Vec::new();
    if let Some(c) = c {
        for v in std::iter::once(&c.total).chain(&c.lanes) {
            d.extend_from_slice(&v.to_ne_bytes());
        }
    }
    d
}

fn put_bin(b: &mut MessageBuilder, bin: &FecBin) {
    b.nest(A_FEC_STAT_HIST | NLA_F_NESTED, |b| {
        b.attr_u32(A_FEC_HIST_BIN_LOW, bin.low);
        b.attr_u32(A_FEC_HIST_BIN_HIGH, bin.high);
        if let Some(v) = bin.value {
            // nla_put_uint: 4 bytes when the value fits.
            match u32::try_from(v) {
                Ok(v32) => b.attr_u32(A_FEC_HIST_BIN_VAL, v32),
                Err(_) => b.attr_bytes(A_FEC_HIST_BIN_VAL, &v.to_ne_bytes()),
            };
        }
        if !bin.lanes.is_empty() {
            let d: Vec<u8> = bin.lanes.iter().flat_map(|v| v.to_ne_bytes()).collect();
            b.attr_bytes(A_FEC_HIST_BIN_VAL_PER_LANE, &d);
        }
    });
}

/// `ETHTOOL_MSG_FEC_GET_REPLY` with the modes bitset (RS), auto, the active mode and,
/// when `stats`, the statistics nest: the three counter arrays always (empty where the
/// driver did not count: `nla_put_64bit` of 0 bytes), preceded by a zero-length
/// `ETHTOOL_A_FEC_STAT_PAD` when `pad` (what architectures without efficient unaligned
/// access get), then the histogram bins.
pub fn encode_fec_reply(
    family: u16,
    seq: u32,
    ifindex: u32,
    ifname: &str,
    f: &Fec,
    stats: bool,
    pad: bool,
) -> Vec<u8> {
    let mut b = reply(
        family,
        MSG_FEC_GET_REPLY,
        seq,
        A_FEC_HEADER,
        ifindex,
        ifname,
    );
    b.nest(A_FEC_MODES | NLA_F_NESTED, |b| {
        b.attr_bytes(A_BITSET_NOMASK, &[]);
        b.attr_u32(A_BITSET_SIZE, LINK_MODE_NBITS);
        b.nest(A_BITSET_BITS | NLA_F_NESTED, |b| {
            b.nest(A_BITSET_BITS_BIT | NLA_F_NESTED, |b| {
                b.attr_u32(A_BITSET_BIT_INDEX, 50);
                b.attr_str(A_BITSET_BIT_NAME, "RS");
            });
        });
    });
    b.attr_bytes(A_FEC_AUTO, &[u8::from(f.auto.unwrap_or(false))]);
    if let Some(m) = f.active {
        b.attr_u32(A_FEC_ACTIVE, m.to_link_mode_bit());
    }
    if stats {
        b.nest(A_FEC_STATS | NLA_F_NESTED, |b| {
            for (ty, c) in [
                (A_FEC_STAT_CORRECTED, &f.corrected),
                (A_FEC_STAT_UNCORR, &f.uncorrectable),
                (A_FEC_STAT_CORR_BITS, &f.corrected_bits),
            ] {
                if pad {
                    b.attr_bytes(A_FEC_STAT_PAD, &[]);
                }
                b.attr_bytes(ty, &counter_bytes(c));
            }
            for bin in &f.histogram {
                put_bin(b, bin);
            }
        });
    }
    b.finish()
}

/// `ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY` carrying `data`.
pub fn encode_module_eeprom_reply(
    family: u16,
    seq: u32,
    ifindex: u32,
    ifname: &str,
    data: &[u8],
) -> Vec<u8> {
    let mut b = reply(
        family,
        MSG_MODULE_EEPROM_GET_REPLY,
        seq,
        A_MODULE_EEPROM_HEADER,
        ifindex,
        ifname,
    );
    b.attr_bytes(A_MODULE_EEPROM_DATA, data);
    b.finish()
}

/// A kernel's error answer (`NLMSG_ERROR` with `-errno`, echoing the request header).
pub fn encode_error(seq: u32, errno: i32) -> Vec<u8> {
    let mut b = MessageBuilder::new(crate::msg::T_ERROR, 0, seq);
    let mut payload = (-errno).to_ne_bytes().to_vec();
    payload.extend_from_slice(&[0u8; 16]); // the request's nlmsghdr (capped: NETLINK_CAP_ACK-like)
    b.family_header(&payload);
    b.finish()
}
