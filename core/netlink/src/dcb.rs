//! DCB over rtnetlink (`RTM_GETDCB` / `RTM_SETDCB`, `include/uapi/linux/dcbnl.h`): the
//! IEEE 802.1Qaz view that `dcb pfc show` and `dcb app show` print and `mlnx_qos` writes:
//! PFC-enabled priorities (`struct ieee_pfc`), the APP table (DSCP → priority entries,
//! selector 5, mean the port trusts DSCP) and the DCBX mode.
//!
//! A message is `struct nlmsghdr`, `struct dcbmsg { u8 family; u8 cmd; u16 pad }`, then
//! attributes; `DCB_ATTR_IEEE` nests `DCB_ATTR_IEEE_PFC` (the 136-byte C struct) and
//! `DCB_ATTR_IEEE_APP_TABLE`, which nests one `DCB_ATTR_IEEE_APP` (`struct dcb_app`,
//! 4 bytes) per entry. The kernel nests without `NLA_F_NESTED`. The same nest carries,
//! when the driver has the operations, the receive buffers (`DCB_ATTR_DCB_BUFFER`,
//! `struct dcbnl_buffer`: what `dcb buffer show` and `mlnx_qos` print as `prio2buffer`
//! and buffer sizes) and what the link partner announced over DCBX
//! (`DCB_ATTR_IEEE_PEER_PFC`, a `struct ieee_pfc`; `DCB_ATTR_IEEE_PEER_APP`, a nest of
//! `DCB_ATTR_IEEE_APP` entries like the APP table's: `dcbnl_build_peer_app` writes no
//! `struct dcb_peer_app_info` into the IEEE nest, its info type being 0).
//!
//! No device here implements DCB (this kernel has `CONFIG_DCB` but no driver with DCB
//! operations), so the codec is tested byte for byte against messages laid out from the
//! header (offsets checked against the C compiler's), and against the live kernel only
//! for the request: it parses it and answers "not supported" for an interface without
//! DCB, "no such device" for a missing one.

use crate::msg::{self, Attr, MessageBuilder};

/// `RTM_GETDCB`.
pub const RTM_GETDCB: u16 = 78;
/// `RTM_SETDCB`.
pub const RTM_SETDCB: u16 = 79;
/// `DCB_CMD_IEEE_SET`.
pub const CMD_IEEE_SET: u8 = 20;
/// `DCB_CMD_IEEE_GET`.
pub const CMD_IEEE_GET: u8 = 21;
/// `DCB_CMD_IEEE_DEL`: remove APP entries.
pub const CMD_IEEE_DEL: u8 = 22;
/// `DCB_ATTR_IFNAME`.
pub const ATTR_IFNAME: u16 = 1;
/// `DCB_ATTR_IEEE`.
pub const ATTR_IEEE: u16 = 13;
/// `DCB_ATTR_DCBX`.
pub const ATTR_DCBX: u16 = 14;
/// `DCB_ATTR_IEEE_ETS`.
pub const IEEE_ETS: u16 = 1;
/// `DCB_ATTR_IEEE_PFC`.
pub const IEEE_PFC: u16 = 2;
/// `DCB_ATTR_IEEE_APP_TABLE`.
pub const IEEE_APP_TABLE: u16 = 3;
/// `DCB_ATTR_IEEE_APP`.
pub const IEEE_APP: u16 = 1;
/// `DCB_ATTR_IEEE_PEER_PFC`: the link partner's PFC (get only).
pub const IEEE_PEER_PFC: u16 = 5;
/// `DCB_ATTR_IEEE_PEER_APP`: the link partner's APP TLV (get only).
pub const IEEE_PEER_APP: u16 = 6;
/// `DCB_ATTR_DCB_BUFFER`: the receive buffers and which priority uses which.
pub const DCB_BUFFER: u16 = 10;
/// `IEEE_8021QAZ_APP_SEL_ETHERTYPE`.
pub const SEL_ETHERTYPE: u8 = 1;
/// `IEEE_8021QAZ_APP_SEL_STREAM`: a TCP (or SCTP) port.
pub const SEL_STREAM: u8 = 2;
/// `IEEE_8021QAZ_APP_SEL_DGRAM`: a UDP (or DCCP) port; RoCE v2 is UDP 4791.
pub const SEL_DGRAM: u8 = 3;
/// `IEEE_8021QAZ_APP_SEL_ANY`: a TCP, SCTP, UDP or DCCP port.
pub const SEL_ANY: u8 = 4;
/// `IEEE_8021QAZ_APP_SEL_DSCP`.
pub const SEL_DSCP: u8 = 5;
/// `sizeof(struct ieee_pfc)`.
pub const IEEE_PFC_LEN: usize = 136;
/// `DCBX_MAX_BUFFERS`.
pub const MAX_BUFFERS: usize = 8;
/// `sizeof(struct dcbnl_buffer)`: `prio2buffer[8]` u8, `buffer_size[8]` u32 at 8,
/// `total_size` u32 at 40 (checked against the C compiler's layout).
pub const BUFFER_LEN: usize = 44;

/// `struct dcbnl_buffer`: the port's receive buffers (bytes) and the buffer each
/// priority lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DcbBuffer {
    pub prio2buffer: [u8; 8],
    /// Bytes per buffer.
    pub buffer_size: [u32; MAX_BUFFERS],
    /// The port's whole receive buffer, bytes (read only).
    pub total_size: u32,
}

impl DcbBuffer {
    pub fn to_bytes(&self) -> [u8; BUFFER_LEN] {
        let mut b = [0u8; BUFFER_LEN];
        b[..8].copy_from_slice(&self.prio2buffer);
        for (i, v) in self.buffer_size.iter().enumerate() {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_ne_bytes());
        }
        b[40..44].copy_from_slice(&self.total_size.to_ne_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<DcbBuffer> {
        if b.len() < BUFFER_LEN {
            return None;
        }
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        Some(DcbBuffer {
            prio2buffer: b[..8].try_into().expect("8 bytes"),
            buffer_size: std::array::from_fn(|i| u32_at(8 + 4 * i)),
            total_size: u32_at(40),
        })
    }
}

/// `struct ieee_pfc`: which priorities are lossless, and the per-priority pause
/// counters the driver keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IeeePfc {
    /// How many priorities can have PFC at once.
    pub cap: u8,
    /// Bit N set: PFC on priority N.
    pub enabled: u8,
    /// MACsec bypass capability.
    pub mbc: u8,
    /// Allowance for cable and PHY delay, in bit times.
    pub delay: u16,
    /// Pause frames sent per priority.
    pub requests: [u64; 8],
    /// Pause frames received per priority.
    pub indications: [u64; 8],
}

impl IeeePfc {
    /// The priorities with PFC on, ascending.
    pub fn priorities(&self) -> Vec<u8> {
        (0..8).filter(|p| self.enabled & (1 << p) != 0).collect()
    }

    /// The C layout: `pfc_cap`@0, `pfc_en`@1, `mbc`@2, pad, `delay`@4, pad,
    /// `requests`@8, `indications`@72; host byte order.
    pub fn to_bytes(&self) -> [u8; IEEE_PFC_LEN] {
        let mut b = [0u8; IEEE_PFC_LEN];
        b[0] = self.cap;
        b[1] = self.enabled;
        b[2] = self.mbc;
        b[4..6].copy_from_slice(&self.delay.to_ne_bytes());
        for i in 0..8 {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&self.requests[i].to_ne_bytes());
            b[72 + 8 * i..80 + 8 * i].copy_from_slice(&self.indications[i].to_ne_bytes());
        }
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<IeeePfc> {
        if b.len() < IEEE_PFC_LEN {
            return None;
        }
        let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Some(IeeePfc {
            cap: b[0],
            enabled: b[1],
            mbc: b[2],
            delay: u16::from_ne_bytes([b[4], b[5]]),
            requests: std::array::from_fn(|i| u64_at(8 + 8 * i)),
            indications: std::array::from_fn(|i| u64_at(72 + 8 * i)),
        })
    }
}

/// `struct dcb_app`: one APP table entry (selector 5: `protocol` is a DSCP value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DcbApp {
    pub selector: u8,
    pub priority: u8,
    pub protocol: u16,
}

impl DcbApp {
    /// DSCP `dscp` to `priority`.
    pub fn dscp(dscp: u8, priority: u8) -> Self {
        DcbApp {
            selector: SEL_DSCP,
            priority,
            protocol: dscp as u16,
        }
    }

    pub fn to_bytes(&self) -> [u8; 4] {
        let p = self.protocol.to_ne_bytes();
        [self.selector, self.priority, p[0], p[1]]
    }

    pub fn from_bytes(b: &[u8]) -> Option<DcbApp> {
        (b.len() >= 4).then(|| DcbApp {
            selector: b[0],
            priority: b[1],
            protocol: u16::from_ne_bytes([b[2], b[3]]),
        })
    }
}

/// What `DCB_CMD_IEEE_GET` says about a netdev.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IeeeDcb {
    pub ifname: Option<String>,
    /// Absent: the driver does not report PFC.
    pub pfc: Option<IeeePfc>,
    pub apps: Vec<DcbApp>,
    /// `DCB_CAP_DCBX_*` bits: who runs DCBX (host, firmware) and which flavour.
    pub dcbx: Option<u8>,
    /// Absent: the driver does not report its buffers.
    pub buffer: Option<DcbBuffer>,
    /// The link partner's PFC as learned by DCBX; absent: the driver does not report it.
    pub peer_pfc: Option<IeeePfc>,
    /// The link partner's APP entries; absent: the driver does not report them.
    pub peer_apps: Option<Vec<DcbApp>>,
    /// The optional attributes (buffer, peer PFC, peer APP) that came malformed, each
    /// with what was wrong: the rest of the reply still counts.
    pub attr_errors: Vec<(u16, String)>,
}

impl IeeeDcb {
    /// `dscp` when the APP table maps DSCP values to priorities, else `pcp` (the 802.1p
    /// priority of the VLAN tag, the default).
    pub fn trust(&self) -> &'static str {
        if self.apps.iter().any(|a| a.selector == SEL_DSCP) {
            "dscp"
        } else {
            "pcp"
        }
    }

    /// DSCP → priority, ascending by DSCP.
    pub fn dscp_map(&self) -> Vec<(u8, u8)> {
        let mut m: Vec<(u8, u8)> = self
            .apps
            .iter()
            .filter(|a| a.selector == SEL_DSCP)
            .map(|a| (a.protocol as u8, a.priority))
            .collect();
        m.sort();
        m
    }
}

fn dcbmsg(cmd: u8) -> [u8; 4] {
    [libc_af_unspec(), cmd, 0, 0]
}

const fn libc_af_unspec() -> u8 {
    0 // AF_UNSPEC
}

/// `dcb ieee show dev IFNAME`: the request.
pub fn encode_ieee_get(seq: u32, ifname: &str) -> Vec<u8> {
    MessageBuilder::new(RTM_GETDCB, msg::F_REQUEST, seq)
        .family_header(&dcbmsg(CMD_IEEE_GET))
        .attr_str(ATTR_IFNAME, ifname)
        .finish()
}

/// Set PFC and/or add APP entries on `ifname` (`DCB_CMD_IEEE_SET`; the kernel answers
/// with an `RTM_SETDCB` message whose `DCB_ATTR_IEEE` is a status byte).
pub fn encode_ieee_set(seq: u32, ifname: &str, pfc: Option<&IeeePfc>, apps: &[DcbApp]) -> Vec<u8> {
    encode_ieee_change(CMD_IEEE_SET, seq, ifname, pfc, apps)
}

/// Set the buffers of `ifname` (`DCB_CMD_IEEE_SET` with `DCB_ATTR_DCB_BUFFER`;
/// `dcb buffer set`). A driver without the operation ignores it: read back to know.
pub fn encode_buffer_set(seq: u32, ifname: &str, buffer: &DcbBuffer) -> Vec<u8> {
    MessageBuilder::new(RTM_SETDCB, msg::F_REQUEST, seq)
        .family_header(&dcbmsg(CMD_IEEE_SET))
        .attr_str(ATTR_IFNAME, ifname)
        .nest(ATTR_IEEE, |b| {
            b.attr_bytes(DCB_BUFFER, &buffer.to_bytes());
        })
        .finish()
}

/// Remove APP entries from `ifname` (`DCB_CMD_IEEE_DEL`; `dcb app del`).
pub fn encode_ieee_del(seq: u32, ifname: &str, apps: &[DcbApp]) -> Vec<u8> {
    encode_ieee_change(CMD_IEEE_DEL, seq, ifname, None, apps)
}

fn encode_ieee_change(
    cmd: u8,
    seq: u32,
    ifname: &str,
    pfc: Option<&IeeePfc>,
    apps: &[DcbApp],
) -> Vec<u8> {
    MessageBuilder::new(RTM_SETDCB, msg::F_REQUEST, seq)
        .family_header(&dcbmsg(cmd))
        .attr_str(ATTR_IFNAME, ifname)
        .nest(ATTR_IEEE, |b| {
            if let Some(p) = pfc {
                b.attr_bytes(IEEE_PFC, &p.to_bytes());
            }
            if !apps.is_empty() {
                b.nest(IEEE_APP_TABLE, |t| {
                    for a in apps {
                        t.attr_bytes(IEEE_APP, &a.to_bytes());
                    }
                });
            }
        })
        .finish()
}

/// Decode the payload (after the netlink header) of an `RTM_GETDCB` reply to
/// `DCB_CMD_IEEE_GET`.
pub fn decode_ieee_get(payload: &[u8]) -> Result<IeeeDcb, String> {
    if payload.len() < 4 {
        return Err(format!(
            "{} bytes, shorter than struct dcbmsg",
            payload.len()
        ));
    }
    if payload[1] != CMD_IEEE_GET {
        return Err(format!(
            "command {} in a reply to IEEE_GET ({CMD_IEEE_GET})",
            payload[1]
        ));
    }
    let mut out = IeeeDcb::default();
    for a in msg::attrs(&payload[4..]) {
        let a: Attr<'_> = a?;
        match a.ty {
            ATTR_IFNAME => out.ifname = a.str().map(str::to_string),
            ATTR_DCBX => out.dcbx = a.data.first().copied(),
            ATTR_IEEE => {
                for i in a.nested() {
                    let i = i?;
                    match i.ty {
                        IEEE_PFC => {
                            out.pfc = Some(IeeePfc::from_bytes(i.data).ok_or_else(|| {
                                format!(
                                    "DCB_ATTR_IEEE_PFC of {} bytes, expected {IEEE_PFC_LEN}",
                                    i.data.len()
                                )
                            })?);
                        }
                        IEEE_APP_TABLE => out.apps = app_entries(&i, "DCB_ATTR_IEEE_APP_TABLE")?,
                        IEEE_PEER_PFC => match IeeePfc::from_bytes(i.data) {
                            Some(p) => out.peer_pfc = Some(p),
                            None => out.attr_errors.push((
                                IEEE_PEER_PFC,
                                format!(
                                    "DCB_ATTR_IEEE_PEER_PFC of {} bytes, expected {IEEE_PFC_LEN}",
                                    i.data.len()
                                ),
                            )),
                        },
                        IEEE_PEER_APP => match app_entries(&i, "DCB_ATTR_IEEE_PEER_APP") {
                            Ok(a) => out.peer_apps = Some(a),
                            Err(e) => out.attr_errors.push((IEEE_PEER_APP, e)),
                        },
                        DCB_BUFFER => match decode_buffer(i.data) {
                            Ok(b) => out.buffer = Some(b),
                            Err(e) => out.attr_errors.push((DCB_BUFFER, e)),
                        },
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `DCB_ATTR_DCB_BUFFER`'s struct, every priority in one of the 8 buffers.
fn decode_buffer(data: &[u8]) -> Result<DcbBuffer, String> {
    let b = DcbBuffer::from_bytes(data).ok_or_else(|| {
        format!(
            "DCB_ATTR_DCB_BUFFER of {} bytes, expected {BUFFER_LEN}",
            data.len()
        )
    })?;
    if let Some(p) = b
        .prio2buffer
        .iter()
        .position(|&x| x as usize >= MAX_BUFFERS)
    {
        return Err(format!(
            "DCB_ATTR_DCB_BUFFER maps priority {p} to buffer {}, past the {MAX_BUFFERS} buffers",
            b.prio2buffer[p]
        ));
    }
    Ok(b)
}

/// The `DCB_ATTR_IEEE_APP` entries of an APP nest (`what` names it in errors).
fn app_entries(nest: &Attr<'_>, what: &str) -> Result<Vec<DcbApp>, String> {
    let mut out = Vec::new();
    for e in nest.nested() {
        let e = e.map_err(|e| format!("{what}: {e}"))?;
        if e.ty == IEEE_APP {
            out.push(
                DcbApp::from_bytes(e.data).ok_or_else(|| {
                    format!("DCB_ATTR_IEEE_APP of {} bytes in {what}", e.data.len())
                })?,
            );
        }
    }
    Ok(out)
}

/// The kernel's answer to `DCB_CMD_IEEE_SET`/`DEL`: a `dcbmsg` and `DCB_ATTR_IEEE` as
/// one status byte (0, or the negative errno the driver returned, as a u8). `Err`
/// carries the errno, or 0 for a malformed reply.
pub fn decode_ieee_status(payload: &[u8], cmd: u8) -> Result<(), (i32, String)> {
    if payload.len() < 4 || payload[1] != cmd {
        return Err((0, format!("not a reply to DCB command {cmd}")));
    }
    for a in msg::attrs(&payload[4..]) {
        let a = a.map_err(|e| (0, e))?;
        if a.ty == ATTR_IEEE {
            let status =
                *a.data
                    .first()
                    .ok_or((0, "empty DCB_ATTR_IEEE status".to_string()))? as i8;
            return if status == 0 {
                Ok(())
            } else {
                Err((-(status as i32), format!("the driver answered {status}")))
            };
        }
    }
    Err((0, "no DCB_ATTR_IEEE status in the reply".into()))
}

/// A client for DCB over rtnetlink.
#[derive(Debug)]
pub struct DcbNetlink {
    sock: crate::socket::NetlinkSocket,
}

impl DcbNetlink {
    pub fn open() -> Result<Self, crate::NetlinkError> {
        Ok(DcbNetlink {
            sock: crate::socket::NetlinkSocket::open(
                crate::route::NETLINK_ROUTE,
                "rtnetlink (DCB)",
                std::time::Duration::from_secs(2),
            )?,
        })
    }

    /// The IEEE DCB state of `ifname`. A netdev whose driver has no DCB operations is
    /// the kernel error `EOPNOTSUPP` ([`crate::NetlinkError::Kernel`]); a missing one
    /// `ENODEV`.
    pub fn ieee_get(&mut self, ifname: &str) -> Result<IeeeDcb, crate::NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_ieee_get(seq, ifname);
        let mut out = None;
        self.sock
            .request(&format!("DCB IEEE get {ifname}"), &req, seq, false, |m| {
                out = Some(decode_ieee_get(m.payload)?);
                Ok(())
            })?;
        out.ok_or_else(|| crate::NetlinkError::Malformed {
            request: format!("DCB IEEE get {ifname}"),
            detail: "no reply message".into(),
        })
    }

    /// Set PFC and/or add APP entries (`dcb pfc set`, `dcb app add`).
    pub fn ieee_set(
        &mut self,
        ifname: &str,
        pfc: Option<&IeeePfc>,
        apps: &[DcbApp],
    ) -> Result<(), crate::NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_ieee_set(seq, ifname, pfc, apps);
        self.change(&format!("DCB IEEE set {ifname}"), CMD_IEEE_SET, &req, seq)
    }

    /// Set the buffers (`dcb buffer set`); see [`encode_buffer_set`].
    pub fn buffer_set(
        &mut self,
        ifname: &str,
        buffer: &DcbBuffer,
    ) -> Result<(), crate::NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_buffer_set(seq, ifname, buffer);
        self.change(&format!("DCB buffer set {ifname}"), CMD_IEEE_SET, &req, seq)
    }

    /// Remove APP entries (`dcb app del`).
    pub fn ieee_del(&mut self, ifname: &str, apps: &[DcbApp]) -> Result<(), crate::NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode_ieee_del(seq, ifname, apps);
        self.change(&format!("DCB IEEE del {ifname}"), CMD_IEEE_DEL, &req, seq)
    }

    fn change(
        &mut self,
        what: &str,
        cmd: u8,
        req: &[u8],
        seq: u32,
    ) -> Result<(), crate::NetlinkError> {
        let mut status = Ok(());
        self.sock.request(what, req, seq, false, |m| {
            status = decode_ieee_status(m.payload, cmd);
            Ok(())
        })?;
        status.map_err(|(errno, detail)| {
            if errno == 0 {
                crate::NetlinkError::Malformed {
                    request: what.to_string(),
                    detail,
                }
            } else {
                crate::NetlinkError::Kernel {
                    request: what.to_string(),
                    errno,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply laid out by hand from dcbnl.h, as `dcbnl_ieee_fill` writes it for a port
    /// with PFC on priority 3 (capability 8, 12 pauses sent and 34 received on it),
    /// DSCP 26 → 3 and 48 → 6, and DCBX host-managed IEEE (0x04 | 0x08 = 0x0c).
    fn reply_bytes() -> Vec<u8> {
        let mut b = Vec::new();
        let ne16 = |v: u16| v.to_ne_bytes();
        b.extend_from_slice(&[0, CMD_IEEE_GET, 0, 0]); // dcbmsg
                                                       // DCB_ATTR_IFNAME "eth0\0": len 9, padded to 12
        b.extend_from_slice(&ne16(9));
        b.extend_from_slice(&ne16(ATTR_IFNAME));
        b.extend_from_slice(b"eth0\0\0\0\0");
        // DCB_ATTR_IEEE: 4 + (4 + 136) + (4 + 2 * 8)
        b.extend_from_slice(&ne16(4 + 140 + 20));
        b.extend_from_slice(&ne16(ATTR_IEEE));
        b.extend_from_slice(&ne16(140));
        b.extend_from_slice(&ne16(IEEE_PFC));
        let mut pfc = [0u8; 136];
        pfc[0] = 8; // pfc_cap
        pfc[1] = 0b0000_1000; // pfc_en: priority 3
        pfc[4..6].copy_from_slice(&ne16(0xffff)); // delay
        pfc[8 + 3 * 8..16 + 3 * 8].copy_from_slice(&12u64.to_ne_bytes()); // requests[3]
        pfc[72 + 3 * 8..80 + 3 * 8].copy_from_slice(&34u64.to_ne_bytes()); // indications[3]
        b.extend_from_slice(&pfc);
        b.extend_from_slice(&ne16(20));
        b.extend_from_slice(&ne16(IEEE_APP_TABLE));
        for (dscp, prio) in [(26u16, 3u8), (48, 6)] {
            b.extend_from_slice(&ne16(8));
            b.extend_from_slice(&ne16(IEEE_APP));
            b.push(SEL_DSCP);
            b.push(prio);
            b.extend_from_slice(&ne16(dscp));
        }
        // DCB_ATTR_DCBX u8, padded
        b.extend_from_slice(&ne16(5));
        b.extend_from_slice(&ne16(ATTR_DCBX));
        b.extend_from_slice(&[0x0c, 0, 0, 0]);
        b
    }

    #[test]
    fn ieee_get_reply_decodes() {
        let d = decode_ieee_get(&reply_bytes()).unwrap();
        assert_eq!(d.ifname.as_deref(), Some("eth0"));
        let pfc = d.pfc.unwrap();
        assert_eq!(pfc.priorities(), [3]);
        assert_eq!((pfc.cap, pfc.delay), (8, 0xffff));
        assert_eq!((pfc.requests[3], pfc.indications[3]), (12, 34));
        assert_eq!(d.trust(), "dscp");
        assert_eq!(d.dscp_map(), [(26, 3), (48, 6)]);
        assert_eq!(d.dcbx, Some(0x0c));
        // No APP table: PCP trust; no PFC attribute: not reported.
        let bare = decode_ieee_get(&[0, CMD_IEEE_GET, 0, 0]).unwrap();
        assert_eq!((bare.trust(), bare.pfc), ("pcp", None));
    }

    /// A reply with what only some drivers fill: the buffers (mlx5: priority 3 alone in
    /// buffer 1), the peer's PFC (priorities 3 and 4) and the peer's APP TLV (UDP 4791
    /// and DSCP 26 to priority 3). No driver on this machine produces these: the bytes
    /// are laid out from dcbnl.h as `dcbnl_ieee_fill` writes them.
    fn reply_with_buffer_and_peer() -> Vec<u8> {
        let ne16 = |v: u16| v.to_ne_bytes();
        let mut nest = Vec::new();
        let buf = DcbBuffer {
            prio2buffer: [0, 0, 0, 1, 0, 0, 0, 0],
            buffer_size: [130_944, 130_944, 0, 0, 0, 0, 0, 0],
            total_size: 262_016,
        };
        nest.extend_from_slice(&ne16(4 + BUFFER_LEN as u16));
        nest.extend_from_slice(&ne16(DCB_BUFFER));
        nest.extend_from_slice(&buf.to_bytes());
        let peer = IeeePfc {
            cap: 8,
            enabled: 0b0001_1000,
            ..Default::default()
        };
        nest.extend_from_slice(&ne16(140));
        nest.extend_from_slice(&ne16(IEEE_PEER_PFC));
        nest.extend_from_slice(&peer.to_bytes());
        nest.extend_from_slice(&ne16(4 + 2 * 8));
        nest.extend_from_slice(&ne16(IEEE_PEER_APP));
        for (sel, prio, proto) in [(SEL_DGRAM, 3u8, 4791u16), (SEL_DSCP, 3, 26)] {
            nest.extend_from_slice(&ne16(8));
            nest.extend_from_slice(&ne16(IEEE_APP));
            nest.push(sel);
            nest.push(prio);
            nest.extend_from_slice(&ne16(proto));
        }
        let mut b = vec![0, CMD_IEEE_GET, 0, 0];
        b.extend_from_slice(&ne16(4 + nest.len() as u16));
        b.extend_from_slice(&ne16(ATTR_IEEE));
        b.extend_from_slice(&nest);
        b
    }

    #[test]
    fn buffers_and_the_peer_decode() {
        let d = decode_ieee_get(&reply_with_buffer_and_peer()).unwrap();
        let b = d.buffer.unwrap();
        assert_eq!(b.prio2buffer, [0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(b.buffer_size[..2], [130_944, 130_944]);
        assert_eq!(b.total_size, 262_016);
        assert_eq!(d.peer_pfc.unwrap().priorities(), [3, 4]);
        let apps = d.peer_apps.unwrap();
        assert_eq!(
            apps,
            [
                DcbApp {
                    selector: SEL_DGRAM,
                    priority: 3,
                    protocol: 4791
                },
                DcbApp::dscp(26, 3)
            ]
        );
        // Without the attributes: not reported (not "empty").
        let d = decode_ieee_get(&reply_bytes()).unwrap();
        assert_eq!((d.buffer, d.peer_pfc, d.peer_apps), (None, None, None));
        assert!(d.attr_errors.is_empty());
        // A buffer index past the 8 buffers is refused, naming the priority; the rest
        // of the reply still decodes.
        let mut r = reply_with_buffer_and_peer();
        r[4 + 4 + 4 + 5] = 8;
        let d = decode_ieee_get(&r).unwrap();
        assert!(d.buffer.is_none() && d.peer_pfc.is_some());
        assert_eq!(d.attr_errors.len(), 1);
        assert_eq!(d.attr_errors[0].0, DCB_BUFFER);
        assert!(
            d.attr_errors[0].1.contains("priority 5 to buffer 8"),
            "{:?}",
            d.attr_errors
        );
        // A short buffer attribute names itself.
        let e = decode_buffer(&[0u8; 40]).unwrap_err();
        assert!(e.contains("DCB_ATTR_DCB_BUFFER of 40 bytes"), "{e}");
        // A length that breaks the framing breaks the reply.
        let mut r = reply_with_buffer_and_peer();
        r[4 + 4..4 + 6].copy_from_slice(&(4 + 40u16).to_ne_bytes());
        assert!(decode_ieee_get(&r).unwrap_err().contains("length"));
    }

    #[test]
    fn buffer_set_request_round_trips() {
        let buf = DcbBuffer {
            prio2buffer: [0, 0, 0, 1, 1, 0, 0, 0],
            buffer_size: [100_000, 160_000, 0, 0, 0, 0, 0, 0],
            total_size: 0,
        };
        let r = encode_buffer_set(3, "eth0", &buf);
        let m = msg::messages(&r).next().unwrap().unwrap();
        assert_eq!((m.ty, m.seq), (RTM_SETDCB, 3));
        assert_eq!(m.payload[..4], [0, CMD_IEEE_SET, 0, 0]);
        let mut as_reply = m.payload.to_vec();
        as_reply[1] = CMD_IEEE_GET;
        assert_eq!(decode_ieee_get(&as_reply).unwrap().buffer, Some(buf));
        // IEEE nest: 4 + (4 + 44).
        assert_eq!(m.payload.len(), 4 + 12 + 4 + 48);
    }

    #[test]
    fn malformed_replies_are_errors() {
        let mut r = reply_bytes();
        // Shrink DCB_ATTR_IEEE_PFC to 100 bytes (and its parent).
        let pfc_len_at = 4 + 12 + 4;
        r[pfc_len_at..pfc_len_at + 2].copy_from_slice(&104u16.to_ne_bytes());
        r[16..18].copy_from_slice(&(4 + 104u16).to_ne_bytes());
        assert!(decode_ieee_get(&r).is_err());
        assert!(decode_ieee_get(&[0, CMD_IEEE_SET, 0, 0])
            .unwrap_err()
            .contains("command"));
        assert!(decode_ieee_get(&[0, 0]).is_err());
    }

    #[test]
    fn ieee_get_request_bytes() {
        let r = encode_ieee_get(7, "eth0");
        let mut want = Vec::new();
        want.extend_from_slice(&32u32.to_ne_bytes()); // nlmsg_len
        want.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
        want.extend_from_slice(&msg::F_REQUEST.to_ne_bytes());
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[0, CMD_IEEE_GET, 0, 0]);
        want.extend_from_slice(&9u16.to_ne_bytes());
        want.extend_from_slice(&ATTR_IFNAME.to_ne_bytes());
        want.extend_from_slice(b"eth0\0\0\0\0");
        assert_eq!(r, want);
    }

    #[test]
    fn ieee_set_request_bytes_and_round_trip() {
        let pfc = IeeePfc {
            cap: 8,
            enabled: 1 << 3,
            ..Default::default()
        };
        let apps = [DcbApp::dscp(26, 3), DcbApp::dscp(48, 6)];
        let r = encode_ieee_set(9, "eth0", Some(&pfc), &apps);
        let m = msg::messages(&r).next().unwrap().unwrap();
        assert_eq!((m.ty, m.seq), (RTM_SETDCB, 9));
        assert_eq!(m.payload[..4], [0, CMD_IEEE_SET, 0, 0]);
        // The same attributes a get reply carries decode to what was set.
        let mut as_reply = m.payload.to_vec();
        as_reply[1] = CMD_IEEE_GET;
        let d = decode_ieee_get(&as_reply).unwrap();
        assert_eq!(d.pfc, Some(pfc));
        assert_eq!(d.apps, apps);
        // Byte layout of the nest: IEEE (4) + PFC (4 + 136) + APP_TABLE (4 + 2 x 8).
        let ieee_at = 4 + 12;
        assert_eq!(
            u16::from_ne_bytes([m.payload[ieee_at], m.payload[ieee_at + 1]]),
            4 + 140 + 20
        );
        assert_eq!(m.payload.len(), ieee_at + 164);
        assert_eq!(pfc.to_bytes()[1], 8);
        assert_eq!(IeeePfc::from_bytes(&pfc.to_bytes()), Some(pfc));
    }

    #[test]
    fn ieee_del_request_and_status_replies() {
        let r = encode_ieee_del(4, "eth0", &[DcbApp::dscp(26, 3)]);
        let m = msg::messages(&r).next().unwrap().unwrap();
        assert_eq!((m.ty, m.seq), (RTM_SETDCB, 4));
        assert_eq!(m.payload[..4], [0, CMD_IEEE_DEL, 0, 0]);
        let mut as_reply = m.payload.to_vec();
        as_reply[1] = CMD_IEEE_GET;
        assert_eq!(
            decode_ieee_get(&as_reply).unwrap().apps,
            [DcbApp::dscp(26, 3)]
        );
        assert!(decode_ieee_get(&as_reply).unwrap().pfc.is_none());
        // The status reply as dcbnl_ieee_set writes it: dcbmsg, DCB_ATTR_IEEE u8.
        let status = |cmd: u8, v: u8| {
            let mut b = vec![0, cmd, 0, 0];
            b.extend_from_slice(&5u16.to_ne_bytes());
            b.extend_from_slice(&ATTR_IEEE.to_ne_bytes());
            b.extend_from_slice(&[v, 0, 0, 0]);
            b
        };
        assert_eq!(
            decode_ieee_status(&status(CMD_IEEE_SET, 0), CMD_IEEE_SET),
            Ok(())
        );
        let einval = (-libc::EINVAL) as i8 as u8;
        assert_eq!(
            decode_ieee_status(&status(CMD_IEEE_DEL, einval), CMD_IEEE_DEL)
                .unwrap_err()
                .0,
            libc::EINVAL
        );
        assert_eq!(
            decode_ieee_status(&status(CMD_IEEE_GET, 0), CMD_IEEE_SET)
                .unwrap_err()
                .0,
            0
        );
        assert!(decode_ieee_status(&[0, CMD_IEEE_SET, 0, 0], CMD_IEEE_SET).is_err());
    }

    /// The live kernel parses the request: for an interface without DCB operations it
    /// answers "not supported", for a missing interface "no such device" (it found the
    /// name attribute and looked the name up).
    #[test]
    fn the_kernel_parses_the_request() {
        let mut nl = DcbNetlink::open().expect("NETLINK_ROUTE opens on any Linux");
        let errno = |r: Result<IeeeDcb, crate::NetlinkError>| match r {
            Err(crate::NetlinkError::Kernel { errno, .. }) => errno,
            other => panic!("a kernel error expected, got {other:?}"),
        };
        assert_eq!(errno(nl.ieee_get("lo")), libc::EOPNOTSUPP);
        assert_eq!(errno(nl.ieee_get("rocewatch-none0")), libc::ENODEV);
        // So does a set: lo has no DCB operations.
        match nl.ieee_set("lo", None, &[DcbApp::dscp(26, 3)]) {
            Err(crate::NetlinkError::Kernel { errno, .. }) => {
                assert_eq!(errno, libc::EOPNOTSUPP)
            }
            other => panic!("a kernel error expected, got {other:?}"),
        }
    }
}
