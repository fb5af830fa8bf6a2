//! The protobuf wire format as the encoder writes it: varints, tags, length-delimited
//! fields, and the lengths of each measured before it is written.

pub(super) const VARINT: u32 = 0;
pub(super) const FIXED64: u32 = 1;
pub(super) const LEN: u32 = 2;

#[inline]
pub(super) fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
pub(super) fn tag(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, u64::from(field << 3 | wire));
}

#[inline]
pub(super) fn string(buf: &mut Vec<u8>, field: u32, s: &str) {
    if s.is_empty() {
        return;
    }
    tag(buf, field, LEN);
    varint(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

#[inline]
pub(super) fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub(super) fn double(buf: &mut Vec<u8>, field: u32, v: f64) {
    fixed64(buf, field, v.to_bits());
}

#[inline]
pub(super) fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, VARINT);
    varint(buf, v);
}

/// A length-delimited field whose contents `f` appends. The length goes in front once
/// known: one byte is set aside, and only contents of 128 bytes or more (the length
/// takes more) are moved, once.
pub(super) fn nested(buf: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    tag(buf, field, LEN);
    let at = buf.len();
    buf.push(0);
    f(buf);
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        let mut v = Vec::with_capacity(10);
        varint(&mut v, len as u64);
        buf.splice(at..at + 1, v);
    }
}

/// The length of a varint.
#[inline]
fn varint_len(v: usize) -> usize {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

/// The length of field `field < 16` holding `len` bytes, tag and length included.
#[inline]
pub(super) fn field_len(len: usize) -> usize {
    1 + varint_len(len) + len
}

/// The length of a `string` field (nothing when empty, as the encoder's `string` writes
/// it).
#[inline]
pub(super) fn string_len(s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        field_len(s.len())
    }
}
