//! Property tests: every decoder of netlink replies (framing, attributes, RDMA nldev
//! devices and hardware counters, DCB IEEE replies and status) takes any bytes a kernel,
//! a capture file or an attacker-controlled socket could hand it without panicking, and
//! an error says what was wrong (never an empty message).

use proptest::prelude::*;
use rocewatch_netlink::{dcb, msg, rdma};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn framing_and_attributes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        for m in msg::messages(&buf) {
            match m {
                Ok(m) => {
                    let _ = msg::attrs(m.payload).count();
                }
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
        let _ = msg::attrs(&buf).count();
    }

    #[test]
    fn rdma_replies_never_panic(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = rdma::decode_device(&buf) {
            prop_assert!(!e.is_empty());
        }
        if let Err(e) = rdma::decode_hw_counters(&buf, |_, _| {}) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn dcb_replies_never_panic(buf in prop::collection::vec(any::<u8>(), 0..512), cmd in any::<u8>()) {
        if let Err(e) = dcb::decode_ieee_get(&buf) {
            prop_assert!(!e.is_empty());
        }
        if let Err((_, e)) = dcb::decode_ieee_status(&buf, cmd) {
            prop_assert!(!e.is_empty());
        }
    }

    /// Well-formed attribute headers with random lengths and payloads: the part of the
    /// space random bytes rarely reach.
    #[test]
    fn attribute_lists_with_any_lengths_never_panic(
        attrs in prop::collection::vec((any::<u16>(), 0u16..64, prop::collection::vec(any::<u8>(), 0..64)), 0..12)
    ) {
        let mut buf = Vec::new();
        for (kind, len, data) in &attrs {
            buf.extend_from_slice(&len.to_ne_bytes());
            buf.extend_from_slice(&kind.to_ne_bytes());
            buf.extend_from_slice(data);
        }
        let _ = msg::attrs(&buf).count();
        let _ = rdma::decode_device(&buf);
        let _ = rdma::decode_hw_counters(&buf, |_, _| {});
        let _ = dcb::decode_ieee_get(&buf);
    }
}
