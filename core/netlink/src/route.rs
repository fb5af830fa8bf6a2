//! rtnetlink (`NETLINK_ROUTE`) dumps of what `ip link`, `ip addr`, `ip rule` and
//! `ip route show table all` print: interface index → name, IPv4/IPv6 addresses with
//! their prefix length, FIB rules (priority, selectors, table, action) and routes of every
//! table. Used by `rocewatch doctor` to check multi-rail policy routing without running
//! `ip`.
//!
//! Every message is `struct nlmsghdr`, a family header, then attributes. Numbers and
//! layouts from the kernel's UAPI headers: `include/uapi/linux/rtnetlink.h` (message
//! types, `struct rtmsg`, `RTA_*`, `RTN_*`, `RT_TABLE_*`), `include/uapi/linux/fib_rules.h`
//! (`struct fib_rule_hdr`, `FRA_*`, `FR_ACT_*`), `include/uapi/linux/if_addr.h`
//! (`struct ifaddrmsg`, `IFA_*`), `include/uapi/linux/if_link.h` (`IFLA_IFNAME`) and
//! `struct ifinfomsg` (rtnetlink.h). All fields are in host byte order except addresses,
//! which are in network order as on the wire.
//!
//! A dump of `AF_UNSPEC` asks every address family; the decoders return `Ok(None)` for a
//! message of a family other than `AF_INET`/`AF_INET6` (multicast routing tables,
//! phonet), which the client leaves out.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::msg::{self, Attr, MessageBuilder};
use crate::socket::NetlinkSocket;
use crate::NetlinkError;

/// `NETLINK_ROUTE` (`include/uapi/linux/netlink.h`).
pub const NETLINK_ROUTE: libc::c_int = 0;

// Message types, `include/uapi/linux/rtnetlink.h`.
/// `RTM_NEWLINK`: what a link dump answers with.
pub const RTM_NEWLINK: u16 = 16;
/// `RTM_GETLINK`.
pub const RTM_GETLINK: u16 = 18;
/// `RTM_NEWADDR`.
pub const RTM_NEWADDR: u16 = 20;
/// `RTM_GETADDR`.
pub const RTM_GETADDR: u16 = 22;
/// `RTM_NEWROUTE`.
pub const RTM_NEWROUTE: u16 = 24;
/// `RTM_GETROUTE`.
pub const RTM_GETROUTE: u16 = 26;
/// `RTM_NEWRULE`.
pub const RTM_NEWRULE: u16 = 32;
/// `RTM_GETRULE`.
pub const RTM_GETRULE: u16 = 34;

// Address families, `include/linux/socket.h`.
/// `AF_UNSPEC`: in a dump request, every family.
pub const AF_UNSPEC: u8 = 0;
/// `AF_INET`.
pub const AF_INET: u8 = 2;
/// `AF_INET6`.
pub const AF_INET6: u8 = 10;

/// `IFF_UP` (`include/uapi/linux/if.h`).
pub const IFF_UP: u32 = 0x1;
/// `IFLA_IFNAME` (`include/uapi/linux/if_link.h`).
pub const IFLA_IFNAME: u16 = 3;

// `include/uapi/linux/if_addr.h`.
/// `IFA_ADDRESS`: the prefix address (for point-to-point links, the peer).
pub const IFA_ADDRESS: u16 = 1;
/// `IFA_LOCAL`: the local address, when it differs from `IFA_ADDRESS`.
pub const IFA_LOCAL: u16 = 2;
/// `IFA_LABEL` (string, IPv4 only: `eth0:1`).
pub const IFA_LABEL: u16 = 3;
/// `IFA_FLAGS` (u32, overrides `ifa_flags` of the header).
pub const IFA_FLAGS: u16 = 8;
/// `IFA_F_SECONDARY`.
pub const IFA_F_SECONDARY: u32 = 0x01;
/// `IFA_F_TENTATIVE`: IPv6 duplicate address detection not done yet.
pub const IFA_F_TENTATIVE: u32 = 0x40;

// `include/uapi/linux/fib_rules.h`.
/// `FRA_DST` (address).
pub const FRA_DST: u16 = 1;
/// `FRA_SRC` (address).
pub const FRA_SRC: u16 = 2;
/// `FRA_IIFNAME` (string: `ip rule ... iif NAME`).
pub const FRA_IIFNAME: u16 = 3;
/// `FRA_GOTO` (u32: the rule priority `goto` jumps to).
pub const FRA_GOTO: u16 = 4;
/// `FRA_PRIORITY` (u32: `pref`).
pub const FRA_PRIORITY: u16 = 6;
/// `FRA_FWMARK` (u32).
pub const FRA_FWMARK: u16 = 10;
/// `FRA_TABLE` (u32: the table, also above 255 where the header's u8 says 252).
pub const FRA_TABLE: u16 = 15;
/// `FRA_OIFNAME` (string: `ip rule ... oif NAME`).
pub const FRA_OIFNAME: u16 = 17;
/// `FIB_RULE_INVERT`: `ip rule add not ...`.
pub const FIB_RULE_INVERT: u32 = 0x2;
/// `FR_ACT_TO_TBL`: look the destination up in the rule's table.
pub const FR_ACT_TO_TBL: u8 = 1;
/// `FR_ACT_GOTO`.
pub const FR_ACT_GOTO: u8 = 2;
/// `FR_ACT_NOP`.
pub const FR_ACT_NOP: u8 = 3;
/// `FR_ACT_BLACKHOLE`.
pub const FR_ACT_BLACKHOLE: u8 = 6;
/// `FR_ACT_UNREACHABLE`.
pub const FR_ACT_UNREACHABLE: u8 = 7;
/// `FR_ACT_PROHIBIT`.
pub const FR_ACT_PROHIBIT: u8 = 8;

// `include/uapi/linux/rtnetlink.h`: route attributes.
/// `RTA_DST` (address).
pub const RTA_DST: u16 = 1;
/// `RTA_OIF` (u32 interface index).
pub const RTA_OIF: u16 = 4;
/// `RTA_GATEWAY` (address).
pub const RTA_GATEWAY: u16 = 5;
/// `RTA_PRIORITY` (u32: the metric).
pub const RTA_PRIORITY: u16 = 6;
/// `RTA_PREFSRC` (address: `src`).
pub const RTA_PREFSRC: u16 = 7;
/// `RTA_MULTIPATH` (`struct rtnexthop` entries, each followed by its attributes).
pub const RTA_MULTIPATH: u16 = 9;
/// `RTA_TABLE` (u32: the table, also above 255 where `rtm_table` says 252).
pub const RTA_TABLE: u16 = 15;

/// `RTN_UNICAST`: a gateway or direct route.
pub const RTN_UNICAST: u8 = 1;
/// `RTN_LOCAL`: an address of this host.
pub const RTN_LOCAL: u8 = 2;

/// `RT_TABLE_UNSPEC`.
pub const RT_TABLE_UNSPEC: u32 = 0;
/// `RT_TABLE_COMPAT`: the u8 table field of a table above 255 (the real one is in
/// `RTA_TABLE`/`FRA_TABLE`).
pub const RT_TABLE_COMPAT: u32 = 252;
/// `RT_TABLE_DEFAULT`.
pub const RT_TABLE_DEFAULT: u32 = 253;
/// `RT_TABLE_MAIN`.
pub const RT_TABLE_MAIN: u32 = 254;
/// `RT_TABLE_LOCAL`.
pub const RT_TABLE_LOCAL: u32 = 255;

/// `sizeof(struct ifinfomsg)`.
const IFINFOMSG_LEN: usize = 16;
/// `sizeof(struct ifaddrmsg)`.
const IFADDRMSG_LEN: usize = 8;
/// `sizeof(struct fib_rule_hdr)`.
const FIB_RULE_HDR_LEN: usize = 12;
/// `sizeof(struct rtmsg)`.
const RTMSG_LEN: usize = 12;
/// `sizeof(struct rtnexthop)`.
const RTNEXTHOP_LEN: usize = 8;

/// An address and a prefix length: `192.0.2.0/24`, `2001:db8::11/128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

fn max_len(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len.min(32)))
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len.min(128)))
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

impl Prefix {
    /// `None` when `len` is longer than the address.
    pub fn new(addr: IpAddr, len: u8) -> Option<Prefix> {
        (len <= max_len(&addr)).then_some(Prefix { addr, len })
    }

    /// The whole address space of a family (`0.0.0.0/0`, `::/0`): a default route.
    pub fn any(family: u8) -> Prefix {
        let addr = if family == AF_INET6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        Prefix { addr, len: 0 }
    }

    /// The network: the address with its host bits cleared (`192.0.2.11/24` →
    /// `192.0.2.0/24`).
    pub fn network(&self) -> Prefix {
        Prefix {
            addr: mask(self.addr, self.len),
            len: self.len,
        }
    }

    /// Whether `ip` (of the same family) is in this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.len) == mask(self.addr, self.len)
    }

    /// Whether every address of `other` is in this prefix.
    pub fn covers(&self, other: &Prefix) -> bool {
        self.len <= other.len && self.contains(other.addr)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An interface (`RTM_NEWLINK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFF_*` flags.
    pub flags: u32,
}

impl Link {
    /// Administratively up (`ip link set NAME up`).
    pub fn is_up(&self) -> bool {
        self.flags & IFF_UP != 0
    }
}

/// An interface address (`RTM_NEWADDR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The interface's index.
    pub index: u32,
    /// The local address and its prefix length as configured (`192.0.2.11/24`).
    pub local: Prefix,
    /// `IFA_F_*`.
    pub flags: u32,
    /// `RT_SCOPE_*` (0 universe, 253 link, 254 host).
    pub scope: u8,
    /// The IPv4 label (`eth0:1`).
    pub label: Option<String>,
}

/// A FIB rule (`RTM_NEWRULE`), as `ip rule` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `AF_INET` or `AF_INET6`.
    pub family: u8,
    /// `pref`: rules are tried in ascending order.
    pub priority: u32,
    /// `from PREFIX`; `None` is `from all`.
    pub src: Option<Prefix>,
    /// `to PREFIX`; `None` is every destination.
    pub dst: Option<Prefix>,
    pub iifname: Option<String>,
    pub oifname: Option<String>,
    pub fwmark: Option<u32>,
    /// `FR_ACT_*`.
    pub action: u8,
    /// The table looked up (for `FR_ACT_TO_TBL`).
    pub table: u32,
    /// `FR_ACT_GOTO`'s target priority.
    pub goto: Option<u32>,
    /// `FIB_RULE_*`.
    pub flags: u32,
}

impl Rule {
    /// `ip rule add not ...`: the selectors are inverted.
    pub fn inverted(&self) -> bool {
        self.flags & FIB_RULE_INVERT != 0
    }
}

/// One path of a multipath route (`struct rtnexthop` and its attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nexthop {
    pub ifindex: u32,
    pub gateway: Option<IpAddr>,
}

/// A route (`RTM_NEWROUTE`) of any table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `AF_INET` or `AF_INET6`.
    pub family: u8,
    pub table: u32,
    /// The destination; length 0 is the default route.
    pub dst: Prefix,
    /// `RTN_*`: unicast, local, broadcast, unreachable...
    pub kind: u8,
    /// `RT_SCOPE_*`.
    pub scope: u8,
    /// `RTPROT_*`: who added it (2 kernel, 3 boot, 4 static).
    pub protocol: u8,
    /// The output interface of a single-path route.
    pub oif: Option<u32>,
    pub gateway: Option<IpAddr>,
    /// `src`: the source address for traffic this host originates.
    pub prefsrc: Option<IpAddr>,
    /// The metric.
    pub metric: Option<u32>,
    /// The paths of a multipath route (`nexthop dev A nexthop dev B`).
    pub nexthops: Vec<Nexthop>,
}

impl Route {
    /// Whether the route sends traffic out of interface `ifindex` (its own output
    /// interface or one of its paths).
    pub fn goes_out_of(&self, ifindex: u32) -> bool {
        self.oif == Some(ifindex) || self.nexthops.iter().any(|n| n.ifindex == ifindex)
    }
}

fn family_name(family: u8) -> String {
    match family {
        AF_INET => "AF_INET".into(),
        AF_INET6 => "AF_INET6".into(),
        f => format!("family {f}"),
    }
}

/// An address attribute of `family`, its length checked.
fn ip_attr(what: &str, family: u8, data: &[u8]) -> Result<IpAddr, String> {
    match (family, data.len()) {
        (AF_INET, 4) => Ok(IpAddr::from(<[u8; 4]>::try_from(data).expect("4 bytes"))),
        (AF_INET6, 16) => Ok(IpAddr::from(<[u8; 16]>::try_from(data).expect("16 bytes"))),
        _ => Err(format!(
            "{what} of {} bytes for {} (4 for AF_INET, 16 for AF_INET6)",
            data.len(),
            family_name(family)
        )),
    }
}

fn u32_attr(what: &str, a: &Attr<'_>) -> Result<u32, String> {
    a.u32()
        .ok_or_else(|| format!("{what} of {} bytes, shorter than a u32", a.data.len()))
}

fn str_attr(what: &str, a: &Attr<'_>) -> Result<String, String> {
    a.str()
        .map(str::to_string)
        .ok_or_else(|| format!("{what} is not UTF-8"))
}

/// A prefix from an address attribute and its length from the header.
fn prefix(what: &str, len: u8, addr: Option<IpAddr>) -> Result<Option<Prefix>, String> {
    match addr {
        None if len == 0 => Ok(None),
        None => Err(format!("{what} length {len} without the address")),
        Some(ip) => Prefix::new(ip, len)
            .map(Some)
            .ok_or_else(|| format!("{what} length {len} longer than the address {ip}")),
    }
}

fn family_header<'a>(payload: &'a [u8], what: &str, len: usize) -> Result<&'a [u8], String> {
    if payload.len() < len {
        return Err(format!(
            "{} bytes, shorter than struct {what} ({len})",
            payload.len()
        ));
    }
    Ok(&payload[..len])
}

fn rest(payload: &[u8], header_len: usize) -> &[u8] {
    // Attributes start at NLMSG_ALIGN(sizeof(header)); every header here is a multiple
    // of 4.
    &payload[header_len.min(payload.len())..]
}

/// An interface from the payload of an `RTM_NEWLINK` message.
pub fn decode_link(payload: &[u8]) -> Result<Link, String> {
    let h = family_header(payload, "ifinfomsg", IFINFOMSG_LEN)?;
    let index = i32::from_ne_bytes(h[4..8].try_into().expect("4 bytes"));
    let flags = u32::from_ne_bytes(h[8..12].try_into().expect("4 bytes"));
    let index = u32::try_from(index).map_err(|_| format!("negative interface index {index}"))?;
    let mut name = None;
    for a in msg::attrs(rest(payload, IFINFOMSG_LEN)) {
        let a = a?;
        if a.ty == IFLA_IFNAME {
            name = Some(str_attr("IFLA_IFNAME", &a)?);
        }
    }
    let name = name.ok_or_else(|| format!("interface {index} without IFLA_IFNAME"))?;
    Ok(Link { index, name, flags })
}

/// An address from the payload of an `RTM_NEWADDR` message; `None` for a family other
/// than IPv4/IPv6.
pub fn decode_address(payload: &[u8]) -> Result<Option<Address>, String> {
    let h = family_header(payload, "ifaddrmsg", IFADDRMSG_LEN)?;
    let (family, prefixlen, scope) = (h[0], h[1], h[3]);
    if family != AF_INET && family != AF_INET6 {
        return Ok(None);
    }
    let index = u32::from_ne_bytes(h[4..8].try_into().expect("4 bytes"));
    let mut flags = u32::from(h[2]);
    let (mut address, mut local, mut label) = (None, None, None);
    for a in msg::attrs(rest(payload, IFADDRMSG_LEN)) {
        let a = a?;
        match a.ty {
            IFA_ADDRESS => address = Some(ip_attr("IFA_ADDRESS", family, a.data)?),
            IFA_LOCAL => local = Some(ip_attr("IFA_LOCAL", family, a.data)?),
            IFA_LABEL => label = Some(str_attr("IFA_LABEL", &a)?),
            IFA_FLAGS => flags = u32_attr("IFA_FLAGS", &a)?,
            _ => {}
        }
    }
    // IFA_LOCAL is the local address where it differs from IFA_ADDRESS (a
    // point-to-point peer); if_addr.h.
    let ip = local
        .or(address)
        .ok_or_else(|| format!("address on interface {index} without IFA_LOCAL or IFA_ADDRESS"))?;
    let local = Prefix::new(ip, prefixlen)
        .ok_or_else(|| format!("prefix length {prefixlen} longer than the address {ip}"))?;
    Ok(Some(Address {
        index,
        local,
        flags,
        scope,
        label,
    }))
}

/// A rule from the payload of an `RTM_NEWRULE` message; `None` for a family other than
/// IPv4/IPv6 (the multicast routing rules).
pub fn decode_rule(payload: &[u8]) -> Result<Option<Rule>, String> {
    let h = family_header(payload, "fib_rule_hdr", FIB_RULE_HDR_LEN)?;
    let (family, dst_len, src_len, table, action) = (h[0], h[1], h[2], h[4], h[7]);
    if family != AF_INET && family != AF_INET6 {
        return Ok(None);
    }
    let flags = u32::from_ne_bytes(h[8..12].try_into().expect("4 bytes"));
    let mut rule = Rule {
        family,
        // No FRA_PRIORITY: priority 0 (fib_nl_fill_rule leaves it out when 0).
        priority: 0,
        src: None,
        dst: None,
        iifname: None,
        oifname: None,
        fwmark: None,
        action,
        table: u32::from(table),
        goto: None,
        flags,
    };
    let (mut src, mut dst) = (None, None);
    for a in msg::attrs(rest(payload, FIB_RULE_HDR_LEN)) {
        let a = a?;
        match a.ty {
            FRA_SRC => src = Some(ip_attr("FRA_SRC", family, a.data)?),
            FRA_DST => dst = Some(ip_attr("FRA_DST", family, a.data)?),
            FRA_IIFNAME => rule.iifname = Some(str_attr("FRA_IIFNAME", &a)?),
            FRA_OIFNAME => rule.oifname = Some(str_attr("FRA_OIFNAME", &a)?),
            FRA_PRIORITY => rule.priority = u32_attr("FRA_PRIORITY", &a)?,
            FRA_FWMARK => rule.fwmark = Some(u32_attr("FRA_FWMARK", &a)?),
            FRA_TABLE => rule.table = u32_attr("FRA_TABLE", &a)?,
            FRA_GOTO => rule.goto = Some(u32_attr("FRA_GOTO", &a)?),
            _ => {}
        }
    }
    rule.src = prefix("rule source", src_len, src)?;
    rule.dst = prefix("rule destination", dst_len, dst)?;
    Ok(Some(rule))
}

/// The paths of `RTA_MULTIPATH`: `struct rtnexthop` (length, flags, hops, ifindex), then
/// that path's attributes (`RTA_GATEWAY`) up to its length.
fn decode_nexthops(family: u8, mut data: &[u8]) -> Result<Vec<Nexthop>, String> {
    let mut out = Vec::new();
    while data.len() >= RTNEXTHOP_LEN {
        let len = usize::from(u16::from_ne_bytes([data[0], data[1]]));
        if len < RTNEXTHOP_LEN || len > data.len() {
            return Err(format!(
                "RTA_MULTIPATH nexthop of length {len} with {} bytes left",
                data.len()
            ));
        }
        let ifindex = u32::from_ne_bytes(data[4..8].try_into().expect("4 bytes"));
        let mut gateway = None;
        for a in msg::attrs(&data[RTNEXTHOP_LEN..len]) {
            let a = a?;
            if a.ty == RTA_GATEWAY {
                gateway = Some(ip_attr("RTA_GATEWAY of a nexthop", family, a.data)?);
            }
        }
        out.push(Nexthop { ifindex, gateway });
        data = &data[((len + 3) & !3).min(data.len())..];
    }
    Ok(out)
}

/// A route from the payload of an `RTM_NEWROUTE` message; `None` for a family other than
/// IPv4/IPv6 (multicast forwarding entries, MPLS).
pub fn decode_route(payload: &[u8]) -> Result<Option<Route>, String> {
    let h = family_header(payload, "rtmsg", RTMSG_LEN)?;
    let (family, dst_len, table, protocol, scope, kind) = (h[0], h[1], h[4], h[5], h[6], h[7]);
    if family != AF_INET && family != AF_INET6 {
        return Ok(None);
    }
    let mut route = Route {
        family,
        table: u32::from(table),
        dst: Prefix::any(family),
        kind,
        scope,
        protocol,
        oif: None,
        gateway: None,
        prefsrc: None,
        metric: None,
        nexthops: Vec::new(),
    };
    let mut dst = None;
    for a in msg::attrs(rest(payload, RTMSG_LEN)) {
        let a = a?;
        match a.ty {
            RTA_DST => dst = Some(ip_attr("RTA_DST", family, a.data)?),
            RTA_OIF => route.oif = Some(u32_attr("RTA_OIF", &a)?),
            RTA_GATEWAY => route.gateway = Some(ip_attr("RTA_GATEWAY", family, a.data)?),
            RTA_PREFSRC => route.prefsrc = Some(ip_attr("RTA_PREFSRC", family, a.data)?),
            RTA_PRIORITY => route.metric = Some(u32_attr("RTA_PRIORITY", &a)?),
            RTA_TABLE => route.table = u32_attr("RTA_TABLE", &a)?,
            RTA_MULTIPATH => route.nexthops = decode_nexthops(family, a.data)?,
            _ => {}
        }
    }
    if let Some(p) = prefix("route destination", dst_len, dst)? {
        route.dst = p;
    }
    Ok(Some(route))
}

fn dump_request(ty: u16, seq: u32, header: &[u8]) -> Vec<u8> {
    MessageBuilder::new(ty, msg::F_REQUEST | msg::F_DUMP, seq)
        .family_header(header)
        .finish()
}

/// `ip link show`: every interface (a zeroed `struct ifinfomsg`, `AF_UNSPEC`).
pub fn encode_link_dump(seq: u32) -> Vec<u8> {
    dump_request(RTM_GETLINK, seq, &[0; IFINFOMSG_LEN])
}

/// `ip addr show`: the addresses of `family` (`AF_UNSPEC`: IPv4 and IPv6).
pub fn encode_address_dump(seq: u32, family: u8) -> Vec<u8> {
    let mut h = [0; IFADDRMSG_LEN];
    h[0] = family;
    dump_request(RTM_GETADDR, seq, &h)
}

/// `ip rule show`: the rules of `family` (`AF_UNSPEC`: every family).
pub fn encode_rule_dump(seq: u32, family: u8) -> Vec<u8> {
    let mut h = [0; FIB_RULE_HDR_LEN];
    h[0] = family;
    dump_request(RTM_GETRULE, seq, &h)
}

/// `ip route show table all`: the routes of every table of `family`.
pub fn encode_route_dump(seq: u32, family: u8) -> Vec<u8> {
    let mut h = [0; RTMSG_LEN];
    h[0] = family;
    dump_request(RTM_GETROUTE, seq, &h)
}

/// A client for the dumps above, on one `NETLINK_ROUTE` socket of the caller's network
/// namespace.
#[derive(Debug)]
pub struct RouteNetlink {
    sock: NetlinkSocket,
}

impl RouteNetlink {
    /// Opens the socket (any Linux has rtnetlink; an unprivileged user may dump).
    pub fn open() -> Result<Self, NetlinkError> {
        Ok(RouteNetlink {
            sock: NetlinkSocket::open(NETLINK_ROUTE, "rtnetlink", Duration::from_secs(2))?,
        })
    }

    /// Record every request and reply under `dir` (see [`NetlinkSocket::capture_to`]).
    pub fn capture_to(&mut self, dir: std::path::PathBuf) {
        self.sock.capture_to(dir);
    }

    fn dump<T>(
        &mut self,
        what: &str,
        encode: impl FnOnce(u32) -> Vec<u8>,
        reply_type: u16,
        decode: fn(&[u8]) -> Result<Option<T>, String>,
    ) -> Result<Vec<T>, NetlinkError> {
        let seq = self.sock.next_seq();
        let req = encode(seq);
        let mut out = Vec::new();
        self.sock.request(what, &req, seq, true, |m| {
            if m.ty != reply_type {
                return Err(format!(
                    "message type {} in the dump (expected {reply_type})",
                    m.ty
                ));
            }
            out.extend(decode(m.payload)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Every interface of this network namespace.
    pub fn links(&mut self) -> Result<Vec<Link>, NetlinkError> {
        self.dump("link dump", encode_link_dump, RTM_NEWLINK, |p| {
            decode_link(p).map(Some)
        })
    }

    /// Every IPv4 and IPv6 address.
    pub fn addresses(&mut self) -> Result<Vec<Address>, NetlinkError> {
        self.dump(
            "address dump",
            |seq| encode_address_dump(seq, AF_UNSPEC),
            RTM_NEWADDR,
            decode_address,
        )
    }

    /// Every IPv4 and IPv6 rule, in the kernel's order (ascending priority).
    pub fn rules(&mut self) -> Result<Vec<Rule>, NetlinkError> {
        self.dump(
            "rule dump",
            |seq| encode_rule_dump(seq, AF_UNSPEC),
            RTM_NEWRULE,
            decode_rule,
        )
    }

    /// Every IPv4 and IPv6 route of every table.
    pub fn routes(&mut self) -> Result<Vec<Route>, NetlinkError> {
        let mut out = self.dump(
            "IPv4 route dump",
            |seq| encode_route_dump(seq, AF_INET),
            RTM_NEWROUTE,
            decode_route,
        )?;
        out.extend(self.dump(
            "IPv6 route dump",
            |seq| encode_route_dump(seq, AF_INET6),
            RTM_NEWROUTE,
            decode_route,
        )?);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::messages;

    fn addr(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes() {
        let p = Prefix::new(addr("192.0.2.11"), 24).unwrap();
        assert_eq!(p.network().to_string(), "192.0.2.0/24");
        assert!(p.contains(addr("192.0.2.200")));
        assert!(!p.contains(addr("192.0.3.1")));
        assert!(!p.contains(addr("::1")), "another family is never inside");
        assert!(Prefix::any(AF_INET).covers(&p));
        assert!(!p.covers(&Prefix::any(AF_INET)));
        assert!(Prefix::new(addr("192.0.2.11"), 32)
            .unwrap()
            .contains(addr("192.0.2.11")));
        assert_eq!(Prefix::new(addr("192.0.2.11"), 33), None);
        let p6 = Prefix::new(addr("2001:db8:1::11"), 64).unwrap();
        assert_eq!(p6.network().to_string(), "2001:db8:1::/64");
        assert!(p6.contains(addr("2001:db8:1::ffff")));
        assert!(Prefix::any(AF_INET6).contains(addr("2001:db8:1::11")));
    }

    #[test]
    fn dump_requests_are_a_header_and_a_family_header() {
        let r = encode_rule_dump(7, AF_INET6);
        let m: Vec<_> = messages(&r).collect::<Result<_, _>>().unwrap();
        assert_eq!((m[0].ty, m[0].flags, m[0].seq), (RTM_GETRULE, 0x301, 7));
        assert_eq!(m[0].payload, &[AF_INET6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode_link_dump(1).len(), 16 + IFINFOMSG_LEN);
        assert_eq!(encode_address_dump(1, AF_INET).len(), 16 + IFADDRMSG_LEN);
        assert_eq!(encode_route_dump(1, AF_INET).len(), 16 + RTMSG_LEN);
    }

    /// A rule laid out by hand from fib_rules.h: `from 10.1.2.3/32 lookup 1000 pref 5`.
    fn rule_bytes(src_len: u8, src: &[u8]) -> Vec<u8> {
        let mut b = vec![AF_INET, 0, src_len, 0, 252, 0, 0, FR_ACT_TO_TBL, 0, 0, 0, 0];
        let mut attr = |ty: u16, data: &[u8]| {
            b.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
            b.extend_from_slice(&ty.to_ne_bytes());
            b.extend_from_slice(data);
            b.resize((b.len() + 3) & !3, 0);
        };
        attr(FRA_SRC, src);
        attr(FRA_PRIORITY, &5u32.to_ne_bytes());
        attr(FRA_TABLE, &1000u32.to_ne_bytes());
        b
    }

    #[test]
    fn rule_by_hand_and_what_is_wrong_with_bad_ones() {
        let r = decode_rule(&rule_bytes(32, &[10, 1, 2, 3]))
            .unwrap()
            .unwrap();
        assert_eq!(r.src, Prefix::new(addr("10.1.2.3"), 32));
        assert_eq!((r.priority, r.table, r.action), (5, 1000, FR_ACT_TO_TBL));
        assert!(!r.inverted());
        let e = decode_rule(&rule_bytes(32, &[10, 1, 2])).unwrap_err();
        assert!(e.contains("FRA_SRC of 3 bytes for AF_INET"), "{e}");
        let e = decode_rule(&rule_bytes(40, &[10, 1, 2, 3])).unwrap_err();
        assert!(e.contains("rule source length 40"), "{e}");
        let e = decode_rule(&[AF_INET, 0, 0]).unwrap_err();
        assert!(e.contains("shorter than struct fib_rule_hdr"), "{e}");
        // A multicast routing rule (RTNL_FAMILY_IPMR, 128) is not ours to decode.
        let mut ipmr = rule_bytes(0, &[]);
        ipmr[0] = 128;
        assert_eq!(decode_rule(&ipmr), Ok(None));
    }

    #[test]
    fn a_multipath_nexthop_longer_than_its_attribute_is_an_error() {
        let mut b = vec![AF_INET, 24, 0, 0, 254, 4, 0, RTN_UNICAST, 0, 0, 0, 0];
        b.extend_from_slice(&12u16.to_ne_bytes());
        b.extend_from_slice(&RTA_MULTIPATH.to_ne_bytes());
        b.extend_from_slice(&64u16.to_ne_bytes()); // rtnh_len 64 in an 8-byte nexthop
        b.extend_from_slice(&[0, 0, 3, 0, 0, 0]);
        let e = decode_route(&b).unwrap_err();
        assert!(e.contains("nexthop of length 64"), "{e}");
        // Without RTA_DST, a prefix length is an error; a length of 0 is a default route.
        let e = decode_route(&b[..12]).unwrap_err();
        assert!(
            e.contains("route destination length 24 without the address"),
            "{e}"
        );
        let mut d = b[..12].to_vec();
        d[1] = 0;
        let r = decode_route(&d).unwrap().unwrap();
        assert_eq!((r.dst, r.table), (Prefix::any(AF_INET), RT_TABLE_MAIN));
    }
}

/// Against dumps recorded from this kernel in a network namespace set up by
/// `testdata/route-6.18/record.sh`, and what `ip -j` printed right after.
#[cfg(test)]
mod recorded {
    use super::*;
    use crate::msg::messages;
    use serde_json::Value;

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/route-6.18/");

    fn file(state: &str, name: &str) -> Vec<u8> {
        std::fs::read(format!("{DIR}{state}/{name}")).unwrap()
    }

    fn json(state: &str, name: &str) -> Vec<Value> {
        serde_json::from_slice::<Value>(&file(state, name))
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// Every message of a recorded dump (its datagrams in order) up to `NLMSG_DONE`,
    /// checked to be of `ty` and to answer sequence `seq`.
    fn dump<T>(
        state: &str,
        what: &str,
        seq: u32,
        ty: u16,
        decode: fn(&[u8]) -> Result<Option<T>, String>,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for k in 1.. {
            let bytes = file(state, &format!("{what}-dump-{k}.bin"));
            for m in messages(&bytes) {
                let m = m.unwrap();
                assert_eq!(m.seq, seq, "{what} reply {k}");
                if m.ty == msg::T_DONE {
                    return out;
                }
                assert_eq!(m.ty, ty, "{what} reply {k}");
                out.extend(decode(m.payload).unwrap());
            }
        }
        unreachable!()
    }

    fn links(state: &str) -> Vec<Link> {
        dump(state, "link", 1, RTM_NEWLINK, |p| decode_link(p).map(Some))
    }

    fn ifindex(links: &[Link], name: &str) -> u32 {
        links.iter().find(|l| l.name == name).unwrap().index
    }

    fn table(v: &Value) -> u32 {
        match v.as_str() {
            None | Some("main") => RT_TABLE_MAIN,
            Some("local") => RT_TABLE_LOCAL,
            Some("default") => RT_TABLE_DEFAULT,
            Some(n) => n.parse().unwrap(),
        }
    }

    fn ip(v: &Value) -> Option<IpAddr> {
        v.as_str().map(|s| s.parse().unwrap())
    }

    #[test]
    fn requests_are_byte_for_byte_what_was_sent() {
        for state in ["bare", "configured"] {
            assert_eq!(encode_link_dump(1), file(state, "link-dump-request.bin"));
            assert_eq!(
                encode_address_dump(2, AF_UNSPEC),
                file(state, "address-dump-request.bin")
            );
            assert_eq!(
                encode_rule_dump(3, AF_UNSPEC),
                file(state, "rule-dump-request.bin")
            );
            assert_eq!(
                encode_route_dump(4, AF_INET),
                file(state, "route4-dump-request.bin")
            );
            assert_eq!(
                encode_route_dump(5, AF_INET6),
                file(state, "route6-dump-request.bin")
            );
        }
    }

    #[test]
    fn links_as_ip_link_shows_them() {
        for state in ["bare", "configured"] {
            let ours: Vec<(u32, String, bool)> = links(state)
                .into_iter()
                .map(|l| (l.index, l.name.clone(), l.is_up()))
                .collect();
            let ip: Vec<(u32, String, bool)> = json(state, "ip-link.json")
                .iter()
                .map(|l| {
                    let flags = l["flags"].as_array().unwrap();
                    (
                        l["ifindex"].as_u64().unwrap() as u32,
                        l["ifname"].as_str().unwrap().to_string(),
                        flags.iter().any(|f| f == "UP"),
                    )
                })
                .collect();
            assert_eq!(ours, ip, "{state}");
            // What record.sh made: lo, and two veth pairs, all up.
            let names: Vec<&str> = ours.iter().map(|(_, n, _)| n.as_str()).collect();
            assert_eq!(names, ["lo", "peer0", "rail0", "peer1", "rail1"]);
            assert!(ours.iter().all(|(_, _, up)| *up));
        }
    }

    #[test]
    fn addresses_as_ip_addr_shows_them() {
        for state in ["bare", "configured"] {
            let links = links(state);
            let mut ours: Vec<(u32, Prefix)> =
                dump(state, "address", 2, RTM_NEWADDR, decode_address)
                    .into_iter()
                    .map(|a| (a.index, a.local))
                    .collect();
            let mut ip: Vec<(u32, Prefix)> = json(state, "ip-addr.json")
                .iter()
                .flat_map(|l| {
                    let index = l["ifindex"].as_u64().unwrap() as u32;
                    l["addr_info"].as_array().unwrap().iter().map(move |a| {
                        let local = ip(&a["local"]).unwrap();
                        (
                            index,
                            Prefix::new(local, a["prefixlen"].as_u64().unwrap() as u8).unwrap(),
                        )
                    })
                })
                .collect();
            ours.sort();
            ip.sort();
            assert_eq!(ours, ip, "{state}");
            for (dev, addr) in [
                ("rail0", "198.51.100.11/24"),
                ("rail1", "198.51.100.12/24"),
                ("rail0", "2001:db8:1::11/64"),
                ("rail1", "2001:db8:1::12/64"),
            ] {
                let (a, len) = addr.split_once('/').unwrap();
                let want = (
                    ifindex(&links, dev),
                    Prefix::new(v(a), len.parse().unwrap()).unwrap(),
                );
                assert!(ours.contains(&want), "{state}: {dev} {addr}");
            }
        }
    }

    fn v(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn ip_rule(family: u8, r: &Value) -> Rule {
        let prefix = |addr: &Value, len: &Value| match addr.as_str() {
            None | Some("all") => None,
            Some(a) => {
                let a = v(a);
                let full = if a.is_ipv4() { 32 } else { 128 };
                Prefix::new(a, len.as_u64().map_or(full, |l| l as u8))
            }
        };
        let action = match r["action"].as_str() {
            None => FR_ACT_TO_TBL,
            Some("prohibit") => FR_ACT_PROHIBIT,
            Some("blackhole") => FR_ACT_BLACKHOLE,
            Some("unreachable") => FR_ACT_UNREACHABLE,
            Some(other) => panic!("action {other}"),
        };
        Rule {
            family,
            priority: r["priority"].as_u64().unwrap() as u32,
            src: prefix(&r["src"], &r["srclen"]),
            dst: prefix(&r["dst"], &r["dstlen"]),
            iifname: r["iif"].as_str().map(str::to_string),
            oifname: r["oif"].as_str().map(str::to_string),
            fwmark: r["fwmark"]
                .as_str()
                .map(|m| u32::from_str_radix(m.trim_start_matches("0x"), 16).unwrap()),
            action,
            table: if action == FR_ACT_TO_TBL {
                table(&r["table"])
            } else {
                RT_TABLE_UNSPEC
            },
            goto: None,
            flags: if r.get("not").is_some() {
                FIB_RULE_INVERT
            } else {
                0
            },
        }
    }

    #[test]
    fn rules_as_ip_rule_shows_them() {
        for state in ["bare", "configured"] {
            let ours = dump(state, "rule", 3, RTM_NEWRULE, decode_rule);
            let mut ip: Vec<Rule> = json(state, "ip-rule4.json")
                .iter()
                .map(|r| ip_rule(AF_INET, r))
                .collect();
            ip.extend(
                json(state, "ip-rule6.json")
                    .iter()
                    .map(|r| ip_rule(AF_INET6, r)),
            );
            assert_eq!(ours, ip, "{state}");
        }
        // What record.sh added: a rule per rail (table 1001 is above 255: FRA_TABLE), and
        // rules with other selectors.
        let ours = dump("configured", "rule", 3, RTM_NEWRULE, decode_rule);
        let find = |p: u32, f: u8| {
            ours.iter()
                .find(|r| r.priority == p && r.family == f)
                .unwrap()
        };
        assert_eq!(
            find(32765, AF_INET).src,
            Prefix::new(v("198.51.100.11"), 32)
        );
        assert_eq!(find(32765, AF_INET).table, 100);
        assert_eq!(find(32764, AF_INET).table, 1001);
        assert_eq!(
            find(32764, AF_INET6).src,
            Prefix::new(v("2001:db8:1::12"), 128)
        );
        assert_eq!(find(1000, AF_INET).iifname.as_deref(), Some("rail0"));
        let not = find(1001, AF_INET);
        assert!(not.inverted());
        assert_eq!(
            (not.oifname.as_deref(), not.fwmark),
            (Some("rail1"), Some(0x10))
        );
        assert_eq!(find(900, AF_INET).action, FR_ACT_PROHIBIT);
        assert_eq!(find(900, AF_INET).dst, Prefix::new(v("203.0.113.0"), 24));
    }

    fn ip_route(family: u8, links: &[Link], r: &Value) -> Route {
        let full = if family == AF_INET { 32 } else { 128 };
        let dst = match r["dst"].as_str().unwrap() {
            "default" => Prefix::any(family),
            d => match d.split_once('/') {
                Some((a, l)) => Prefix::new(v(a), l.parse().unwrap()).unwrap(),
                None => Prefix::new(v(d), full).unwrap(),
            },
        };
        let kind = match r["type"].as_str() {
            None => RTN_UNICAST,
            Some("local") => RTN_LOCAL,
            Some("broadcast") => 3,
            Some("multicast") => 5,
            Some(other) => panic!("type {other}"),
        };
        Route {
            family,
            table: table(&r["table"]),
            dst,
            kind,
            scope: 0,
            protocol: 0,
            oif: r["dev"].as_str().map(|d| ifindex(links, d)),
            gateway: ip(&r["gateway"]),
            prefsrc: ip(&r["prefsrc"]),
            metric: r["metric"].as_u64().map(|m| m as u32),
            nexthops: r["nexthops"]
                .as_array()
                .map(|n| {
                    n.iter()
                        .map(|h| Nexthop {
                            ifindex: ifindex(links, h["dev"].as_str().unwrap()),
                            gateway: ip(&h["gateway"]),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    #[test]
    fn routes_as_ip_route_shows_them() {
        for state in ["bare", "configured"] {
            let links = links(state);
            for (family, what, seq, name) in [
                (AF_INET, "route4", 4, "ip-route4.json"),
                (AF_INET6, "route6", 5, "ip-route6.json"),
            ] {
                let ours: Vec<Route> = dump(state, what, seq, RTM_NEWROUTE, decode_route)
                    .into_iter()
                    // ip -j prints scope and protocol by name, and leaves out some.
                    .map(|r| Route {
                        scope: 0,
                        protocol: 0,
                        ..r
                    })
                    .collect();
                assert!(ours.iter().all(|r| r.family == family));
                let ip: Vec<Route> = json(state, name)
                    .iter()
                    .map(|r| ip_route(family, &links, r))
                    .collect();
                assert_eq!(ours, ip, "{state} {what}");
            }
        }
        let links = links("configured");
        let (rail0, rail1) = (ifindex(&links, "rail0"), ifindex(&links, "rail1"));
        let routes = dump("configured", "route4", 4, RTM_NEWROUTE, decode_route);
        let t1001: Vec<&Route> = routes.iter().filter(|r| r.table == 1001).collect();
        assert_eq!(t1001.len(), 1);
        assert_eq!(t1001[0].dst, Prefix::new(v("198.51.100.0"), 24).unwrap());
        assert!(t1001[0].goes_out_of(rail1) && !t1001[0].goes_out_of(rail0));
        assert_eq!(t1001[0].prefsrc, Some(v("198.51.100.12")));
        let default = routes
            .iter()
            .find(|r| r.table == 100 && r.dst.len == 0)
            .unwrap();
        assert_eq!(
            (default.oif, default.gateway),
            (Some(rail0), Some(v("198.51.100.1")))
        );
        let multipath = routes.iter().find(|r| r.table == 2000).unwrap();
        assert!(multipath.goes_out_of(rail0) && multipath.goes_out_of(rail1));
        assert_eq!(multipath.oif, None);
    }

    #[test]
    fn truncated_replies_are_errors_never_panics() {
        let bytes = file("configured", "route4-dump-1.bin");
        let first = messages(&bytes).next().unwrap().unwrap().payload;
        for cut in 0..first.len() {
            if let Err(e) = decode_route(&first[..cut]) {
                assert!(!e.is_empty());
            }
        }
        let bytes = file("configured", "rule-dump-1.bin");
        for m in messages(&bytes) {
            let p = m.unwrap().payload;
            for cut in 0..p.len() {
                if let Err(e) = decode_rule(&p[..cut]) {
                    assert!(!e.is_empty());
                }
            }
        }
    }
}
