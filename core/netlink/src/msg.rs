//! Netlink message and attribute framing (`struct nlmsghdr`, `struct nlattr`), in host
//! byte order as the kernel writes them.

/// `NLM_F_REQUEST`.
pub const F_REQUEST: u16 = 0x1;
/// `NLM_F_ACK`.
pub const F_ACK: u16 = 0x4;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub const F_DUMP: u16 = 0x300;
/// `NLMSG_ERROR`.
pub const T_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const T_DONE: u16 = 3;
/// `NLA_F_NESTED | NLA_F_NET_BYTEORDER` and RDMA's `RDMA_NLA_F_MANDATORY` (1 << 13): flag
/// bits of an attribute type.
pub const ATTR_FLAGS: u16 = (1 << 15) | (1 << 14) | (1 << 13);

const HDR_LEN: usize = 16;
const ATTR_HDR_LEN: usize = 4;

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds one request message.
#[derive(Debug)]
pub struct MessageBuilder {
    buf: Vec<u8>,
}

impl MessageBuilder {
    /// A message of `ty` with `flags` and sequence number `seq` (port id 0: the kernel).
    pub fn new(ty: u16, flags: u16, seq: u32) -> Self {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by finish()
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        MessageBuilder { buf }
    }

    /// Raw bytes right after the netlink header: a family's fixed header (`struct
    /// dcbmsg` for DCB), padded to 4 bytes. Call before any attribute.
    pub fn family_header(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(bytes);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    /// An attribute of raw bytes (a C struct, a `u8`).
    pub fn attr_bytes(&mut self, ty: u16, data: &[u8]) -> &mut Self {
        self.attr(ty, data)
    }

    /// A nested attribute whose members `f` adds (no `NLA_F_NESTED` flag, as the DCB
    /// code of the kernel writes and expects them).
    pub fn nest(&mut self, ty: u16, f: impl FnOnce(&mut Self)) -> &mut Self {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        f(self);
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    fn attr(&mut self, ty: u16, data: &[u8]) -> &mut Self {
        let len = (ATTR_HDR_LEN + data.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    /// A `u32` attribute.
    pub fn attr_u32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.attr(ty, &v.to_ne_bytes())
    }

    /// A NUL-terminated string attribute.
    pub fn attr_str(&mut self, ty: u16, s: &str) -> &mut Self {
        let mut d = Vec::with_capacity(s.len() + 1);
        d.extend_from_slice(s.as_bytes());
        d.push(0);
        self.attr(ty, &d)
    }

    /// The finished message, its length field filled in.
    pub fn finish(&mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        std::mem::take(&mut self.buf)
    }
}

/// One message of a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
    /// Everything after the header.
    pub payload: &'a [u8],
}

impl<'a> Message<'a> {
    /// For `NLMSG_ERROR`: the (negative) errno, 0 for an acknowledgement.
    pub fn error_code(&self) -> Option<i32> {
        (self.ty == T_ERROR && self.payload.len() >= 4)
            .then(|| i32::from_ne_bytes(self.payload[0..4].try_into().expect("4 bytes")))
    }

    /// For `NLMSG_DONE`: the dump's result, a negative errno when the dump failed. The
    /// kernel's `netlink_dump_done()` (net/netlink/af_netlink.c) writes what the family's
    /// dump callback returned there, so a dump the kernel refuses at its first call (a
    /// missing device, an unsupported resource) ends with an error in `NLMSG_DONE`, not
    /// in an `NLMSG_ERROR`.
    pub fn done_code(&self) -> Option<i32> {
        (self.ty == T_DONE && self.payload.len() >= 4)
            .then(|| i32::from_ne_bytes(self.payload[0..4].try_into().expect("4 bytes")))
    }
}

/// Splits a datagram into messages; an error describes the first malformed one.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = Result<Message<'_>, String>> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() < HDR_LEN {
            let n = rest.len();
            rest = &[];
            return Some(Err(format!("{n} trailing bytes, shorter than a header")));
        }
        let u32_at = |o: usize| u32::from_ne_bytes(rest[o..o + 4].try_into().expect("4 bytes"));
        let u16_at = |o: usize| u16::from_ne_bytes(rest[o..o + 2].try_into().expect("2 bytes"));
        let len = u32_at(0) as usize;
        if len < HDR_LEN || len > rest.len() {
            let n = rest.len();
            rest = &[];
            return Some(Err(format!("message length {len} with {n} bytes left")));
        }
        let m = Message {
            ty: u16_at(4),
            flags: u16_at(6),
            seq: u32_at(8),
            pid: u32_at(12),
            payload: &rest[HDR_LEN..len],
        };
        rest = &rest[align4(len).min(rest.len())..];
        Some(Ok(m))
    })
}

/// One attribute: its type without the flag bits, and its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub ty: u16,
    pub data: &'a [u8],
}

impl<'a> Attr<'a> {
    pub fn u32(&self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.data.get(..4)?.try_into().ok()?))
    }

    pub fn u64(&self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.data.get(..8)?.try_into().ok()?))
    }

    /// A string attribute, without its NUL terminator.
    pub fn str(&self) -> Option<&'a str> {
        let end = self
            .data
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(self.data.len());
        std::str::from_utf8(&self.data[..end]).ok()
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> Attrs<'a> {
        attrs(self.data)
    }
}

/// Iterator over the attributes of a buffer; stops (with an `Err`) at a malformed one.
#[derive(Debug, Clone)]
pub struct Attrs<'a> {
    rest: &'a [u8],
}

/// The attributes in `buf`.
pub fn attrs(buf: &[u8]) -> Attrs<'_> {
    Attrs { rest: buf }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.len() < ATTR_HDR_LEN {
            // Up to 3 bytes of padding may end a buffer.
            return None;
        }
        let len = u16::from_ne_bytes([self.rest[0], self.rest[1]]) as usize;
        let ty = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & !ATTR_FLAGS;
        if len < ATTR_HDR_LEN || len > self.rest.len() {
            let n = self.rest.len();
            self.rest = &[];
            return Some(Err(format!(
                "attribute {ty} of length {len} with {n} bytes left"
            )));
        }
        let a = Attr {
            ty,
            data: &self.rest[ATTR_HDR_LEN..len],
        };
        self.rest = &self.rest[align4(len).min(self.rest.len())..];
        Some(Ok(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_parse_round_trip() {
        let m = MessageBuilder::new(0x1411, F_REQUEST | F_ACK, 7)
            .attr_u32(1, 3)
            .attr_str(2, "rxe0")
            .finish();
        // 16 header + 8 (u32) + 12 ("rxe0\0" padded to 8, plus 4 header)
        assert_eq!(m.len(), 36);
        let msgs: Vec<_> = messages(&m).collect::<Result<_, _>>().unwrap();
        assert_eq!(msgs.len(), 1);
        assert_eq!((msgs[0].ty, msgs[0].flags, msgs[0].seq), (0x1411, 5, 7));
        let a: Vec<_> = attrs(msgs[0].payload).collect::<Result<_, _>>().unwrap();
        assert_eq!(a[0].u32(), Some(3));
        assert_eq!(a[1].str(), Some("rxe0"));
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let m = MessageBuilder::new(1, 0, 1).attr_u32(1, 3).finish();
        for cut in 1..m.len() {
            let r: Result<Vec<_>, _> = messages(&m[..cut]).collect();
            assert!(r.is_err(), "cut at {cut}");
        }
        // An attribute claiming more than there is.
        let bad = [200u8, 0, 1, 0, 0, 0, 0, 0];
        assert!(attrs(&bad).next().unwrap().is_err());
        // Flag bits are not part of the type.
        let nested = [4u8, 0, 0x51, 0x80];
        assert_eq!(attrs(&nested).next().unwrap().unwrap().ty, 0x51);
    }

    #[test]
    fn error_message_code() {
        let mut m = MessageBuilder::new(T_ERROR, 0, 1).finish();
        m.extend_from_slice(&(-95i32).to_ne_bytes());
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        let msg = messages(&m).next().unwrap().unwrap();
        assert_eq!(msg.error_code(), Some(-95));
        assert_eq!(msg.done_code(), None);
    }

    #[test]
    fn done_code() {
        let with = |payload: &[u8]| {
            let mut m = MessageBuilder::new(T_DONE, 2, 1).finish();
            m.extend_from_slice(payload);
            let len = m.len() as u32;
            m[0..4].copy_from_slice(&len.to_ne_bytes());
            m
        };
        let ok = with(&0i32.to_ne_bytes());
        assert_eq!(messages(&ok).next().unwrap().unwrap().done_code(), Some(0));
        let failed = with(&(-22i32).to_ne_bytes());
        let msg = messages(&failed).next().unwrap().unwrap();
        assert_eq!((msg.done_code(), msg.error_code()), (Some(-22), None));
        // An NLMSG_DONE without a payload (older kernels, other families) is a success.
        let bare = with(&[]);
        assert_eq!(messages(&bare).next().unwrap().unwrap().done_code(), None);
    }
}
