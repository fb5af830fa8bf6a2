//! Property tests: every decoder of netlink replies (framing, attributes, RDMA nldev
//! devices and hardware counters, RDMA resource dumps and QP statistic counters, DCB IEEE
//! replies and status, rtnetlink links, addresses, rules and routes) takes any bytes a kernel,
//! a capture file or an attacker-controlled socket could hand it without panicking, and
//! an error says what was wrong (never an empty message).

use proptest::prelude::*;
use rocewatch_netlink::msg::MessageBuilder;
use rocewatch_netlink::{dcb, msg, rdma, rdma_res, rdma_stat, route};

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
    fn rdma_resource_and_counter_replies_never_panic(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        for e in decode_every_new_reply(&buf) {
            prop_assert!(!e.is_empty());
        }
    }

    /// Arbitrary nesting: a tree of attributes of the types these replies use (and
    /// others), with random leaves, wrapped in a device handle; a decoder either decodes
    /// it or says what was wrong.
    #[test]
    fn rdma_resource_and_counter_trees_never_panic(tree in attr_tree(), table in 0usize..5) {
        let tables = [
            rdma_res::ATTR_RES_QP,
            rdma_res::ATTR_RES_CQ,
            rdma_res::ATTR_RES_MR,
            rdma_res::ATTR_RES_PD,
            rdma_stat::ATTR_STAT_COUNTER,
        ];
        let mut b = MessageBuilder::new(1, 0, 1);
        b.attr_u32(rdma::ATTR_DEV_INDEX, 0).attr_str(rdma::ATTR_DEV_NAME, "rxe0");
        b.nest(tables[table], |b| write_tree(b, &tree));
        let m = b.finish();
        for e in decode_every_new_reply(&m[16..]) {
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

    /// A `DCB_ATTR_IEEE` nest of attributes of the types the decoder reads (PFC, APP
    /// table, peer PFC, peer APP, buffer) with any lengths and payloads: decoded, or an
    /// error naming the attribute or length at fault; what decodes re-encodes as it was.
    #[test]
    fn dcb_ieee_nests_of_any_shape_are_named_errors(
        attrs in prop::collection::vec((0u16..12, prop::collection::vec(any::<u8>(), 0..160)), 0..6)
    ) {
        let mut nest = Vec::new();
        for (kind, data) in &attrs {
            nest.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
            nest.extend_from_slice(&kind.to_ne_bytes());
            nest.extend_from_slice(data);
            nest.resize((nest.len() + 3) & !3, 0);
        }
        let mut buf = vec![0, dcb::CMD_IEEE_GET, 0, 0];
        buf.extend_from_slice(&((4 + nest.len()) as u16).to_ne_bytes());
        buf.extend_from_slice(&dcb::ATTR_IEEE.to_ne_bytes());
        buf.extend_from_slice(&nest);
        match dcb::decode_ieee_get(&buf) {
            Ok(d) => {
                if let Some(b) = d.buffer {
                    prop_assert!(b.prio2buffer.iter().all(|&x| (x as usize) < dcb::MAX_BUFFERS));
                    prop_assert_eq!(dcb::DcbBuffer::from_bytes(&b.to_bytes()), Some(b));
                }
                if let Some(p) = d.peer_pfc {
                    prop_assert_eq!(dcb::IeeePfc::from_bytes(&p.to_bytes()), Some(p));
                }
                for (_, e) in &d.attr_errors {
                    prop_assert!(e.contains("DCB_ATTR_"), "{}", e);
                }
            }
            Err(e) => prop_assert!(
                ["DCB_ATTR_", "length", "attribute", "bytes"].iter().any(|w| e.contains(w)),
                "{}", e
            ),
        }
    }

    #[test]
    fn rtnetlink_replies_never_panic(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = route::decode_link(&buf) {
            prop_assert!(!e.is_empty());
        }
        if let Err(e) = route::decode_address(&buf) {
            prop_assert!(!e.is_empty());
        }
        if let Err(e) = route::decode_rule(&buf) {
            prop_assert!(!e.is_empty());
        }
        if let Err(e) = route::decode_route(&buf) {
            prop_assert!(!e.is_empty());
        }
    }

    /// A family header of IPv4 or IPv6 with any prefix lengths, then well-formed
    /// attribute headers of the types the rtnetlink decoders read, with any lengths and
    /// payloads: every malformed one is an error naming what was wrong (an attribute, a
    /// length, a struct), never a panic.
    #[test]
    fn rtnetlink_attributes_of_any_length_are_named_errors(
        v6 in any::<bool>(),
        header in prop::collection::vec(any::<u8>(), 12),
        attrs in prop::collection::vec((0u16..20, prop::collection::vec(any::<u8>(), 0..24)), 0..8)
    ) {
        let mut buf = header.clone();
        buf[0] = if v6 { route::AF_INET6 } else { route::AF_INET };
        for (kind, data) in &attrs {
            buf.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
            buf.extend_from_slice(&kind.to_ne_bytes());
            buf.extend_from_slice(data);
            buf.resize((buf.len() + 3) & !3, 0);
        }
        let named = |e: &str| {
            ["FRA_", "RTA_", "IFA_", "IFLA_", "length", "attribute", "struct", "interface", "address"]
                .iter()
                .any(|w| e.contains(w))
        };
        for r in [
            route::decode_rule(&buf).map(|_| ()),
            route::decode_route(&buf).map(|_| ()),
            route::decode_address(&buf[4..]).map(|_| ()),
            route::decode_link(&buf).map(|_| ()),
        ] {
            if let Err(e) = r {
                prop_assert!(named(&e), "{e}");
            }
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
        let _ = route::decode_link(&buf);
        let _ = route::decode_address(&buf);
        let _ = route::decode_rule(&buf);
        let _ = route::decode_route(&buf);
        let _ = decode_every_new_reply(&buf);
    }
}

/// The errors of the resource and counter decoders on `payload`.
fn decode_every_new_reply(payload: &[u8]) -> Vec<String> {
    let mut errors = Vec::new();
    errors.extend(rdma_res::decode_res_qps(payload, &mut Vec::new()).err());
    errors.extend(rdma_res::decode_res_cqs(payload, &mut Vec::new()).err());
    errors.extend(rdma_res::decode_res_mrs(payload, &mut Vec::new()).err());
    errors.extend(rdma_res::decode_res_pds(payload, &mut Vec::new()).err());
    errors.extend(rdma_stat::decode_qp_counters(payload, &mut Vec::new()).err());
    errors.extend(rdma_stat::decode_qp_counter_mode(payload).err());
    errors
}

/// An attribute: a leaf of raw bytes or a nest of attributes.
#[derive(Debug, Clone)]
enum Tree {
    Leaf(u16, Vec<u8>),
    Nest(u16, Vec<Tree>),
}

/// Types the decoders look at (entries, tables, fields, PAD) and a few they do not.
fn attr_type() -> impl Strategy<Value = u16> {
    prop_oneof![
        prop::sample::select(vec![
            0u16, 1, 2, 3, 19, 20, 21, 22, 24, 26, 27, 28, 29, 35, 36, 37, 38, 39, 40, 41, 42, 43,
            44, 45, 46, 47, 48, 60, 61, 62, 64, 74, 76, 77, 78, 79, 80, 81, 82, 83, 84,
        ]),
        any::<u16>(),
    ]
}

fn attr_tree() -> impl Strategy<Value = Vec<Tree>> {
    let leaf = (attr_type(), prop::collection::vec(any::<u8>(), 0..12))
        .prop_map(|(t, d)| Tree::Leaf(t, d));
    let tree = leaf.prop_recursive(4, 48, 6, |inner| {
        (attr_type(), prop::collection::vec(inner, 0..6)).prop_map(|(t, c)| Tree::Nest(t, c))
    });
    prop::collection::vec(tree, 0..6)
}

fn write_tree(b: &mut MessageBuilder, tree: &[Tree]) {
    for t in tree {
        match t {
            Tree::Leaf(ty, data) => {
                b.attr_bytes(*ty, data);
            }
            Tree::Nest(ty, children) => {
                b.nest(*ty, |b| write_tree(b, children));
            }
        }
    }
}
