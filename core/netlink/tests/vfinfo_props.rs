//! Property tests of the SR-IOV VF decoder (`vfinfo`): any bytes never panic and an error
//! says what was wrong, naming the attribute; any VF built as `rtnl_fill_vfinfo` lays it
//! out decodes to what was built.

use proptest::prelude::*;
use rocewatch_netlink::msg::MessageBuilder;
use rocewatch_netlink::vfinfo::{self, LinkState, PfVfs, VfInfo, VfStats, VfVlan};

fn a_vf() -> impl Strategy<Value = VfInfo> {
    (
        (
            any::<u32>(),
            any::<[u8; 6]>(),
            0u32..4096,
            0u32..8,
            any::<bool>(),
        ),
        (
            any::<u32>(),
            any::<u32>(),
            any::<Option<bool>>(),
            any::<Option<bool>>(),
        ),
        (0u32..4, any::<Option<[u64; 8]>>()),
    )
        .prop_map(
            |((vf, mac, vlan, qos, ad), (min, max, spoof, trust), (link, stats))| VfInfo {
                vf,
                mac: Some(mac),
                vlan: Some(VfVlan {
                    vlan,
                    qos,
                    proto: Some(if ad {
                        vfinfo::ETH_P_8021AD
                    } else {
                        vfinfo::ETH_P_8021Q
                    }),
                }),
                min_tx_rate: Some(min),
                max_tx_rate: Some(max),
                spoofchk: spoof,
                trust,
                link_state: Some(match link {
                    0 => LinkState::Auto,
                    1 => LinkState::Enable,
                    2 => LinkState::Disable,
                    _ => LinkState::Other(7),
                }),
                stats: stats.map(|s| VfStats {
                    rx_packets: Some(s[0]),
                    tx_packets: Some(s[1]),
                    rx_bytes: Some(s[2]),
                    tx_bytes: Some(s[3]),
                    broadcast: Some(s[4]),
                    multicast: Some(s[5]),
                    rx_dropped: Some(s[6]),
                    tx_dropped: Some(s[7]),
                }),
            },
        )
}

const NAMES: &[&str] = &[
    "ifinfomsg",
    "IFLA_",
    "attribute",
    "VF",
    "negative interface index",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn any_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..600)) {
        for r in [vfinfo::decode_vf_link(&buf).map(|_| ()), vfinfo::decode_vf(&buf).map(|_| ())] {
            if let Err(e) = r {
                prop_assert!(NAMES.iter().any(|n| e.contains(n)), "{e}");
            }
        }
    }

    /// A real reply's bytes with one cut or one flipped byte: decoded, or an error that
    /// names what was wrong.
    #[test]
    fn damaged_replies_never_panic(vfs in prop::collection::vec(a_vf(), 0..4), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<bool>()) {
        let pf = PfVfs { ifindex: 4, name: "pf0".into(), num_vf: Some(vfs.len() as u32), vfs };
        let m = vfinfo::encode_vf_reply(1, &pf);
        let mut payload = m[16..].to_vec();
        let i = at.index(payload.len());
        if cut { payload.truncate(i) } else { payload[i] = byte }
        if let Err(e) = vfinfo::decode_vf_link(&payload) {
            prop_assert!(NAMES.iter().any(|n| e.contains(n)), "{e}");
        }
    }

    #[test]
    fn what_is_built_decodes_back(vfs in prop::collection::vec(a_vf(), 0..6), ifindex in 1u32..i32::MAX as u32) {
        // The kernel numbers VFs 0..n; the index is whatever the driver said.
        let pf = PfVfs { ifindex, name: "enp59s0f0np0".into(), num_vf: Some(vfs.len() as u32), vfs };
        let m = vfinfo::encode_vf_reply(9, &pf);
        prop_assert_eq!(vfinfo::decode_vf_link(&m[16..]), Ok(pf));
    }

    /// A struct shorter than the uapi's is an error naming the attribute and the sizes.
    #[test]
    fn a_short_struct_names_its_attribute(ty in prop::sample::select(vec![
        (vfinfo::IFLA_VF_VLAN, "IFLA_VF_VLAN", 12usize),
        (vfinfo::IFLA_VF_RATE, "IFLA_VF_RATE", 12),
        (vfinfo::IFLA_VF_SPOOFCHK, "IFLA_VF_SPOOFCHK", 8),
        (vfinfo::IFLA_VF_TRUST, "IFLA_VF_TRUST", 8),
        (vfinfo::IFLA_VF_LINK_STATE, "IFLA_VF_LINK_STATE", 8),
    ]), len in 0usize..8) {
        let (ty, name, want) = ty;
        let len = len.min(want - 1);
        let mut b = MessageBuilder::new(0, 0, 0);
        b.attr_bytes(ty, &vec![0; len]);
        let m = b.finish();
        prop_assert_eq!(vfinfo::decode_vf(&m[16..]).unwrap_err(), format!("{name}: {len} bytes, want {want}"));
    }
}
