//! Property tests of the agent's parsers of outside input: Alertmanager webhook bodies,
//! the peers file, nftables' JSON and iptables-save rule sets, /proc/interrupts, GIDs.
//! Never a panic; a refused payload says what was wrong.

use proptest::prelude::*;
use rocewatch_doctor::{iptables_blocking, nft_blocking};
use rocewatch_probes::parse_peers_file;
use rocewatch_remediation::alertmanager::parse;
use rocewatch_sysfs::gid::gid_ip;
use rocewatch_sysfs::interrupts::nic_irqs;

/// JSON values of any shape, a few levels deep (what a payload's fields could hold).
fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "version",
                    "status",
                    "alerts",
                    "labels",
                    "annotations",
                    "startsAt",
                    "x"
                ])
                .prop_map(str::to_string),
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn any_body_is_parsed_or_refused_with_a_reason(body in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(e) = parse(&body) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn any_json_shape_is_parsed_or_refused_with_a_reason(v in json()) {
        let body = serde_json::to_vec(&v).unwrap();
        if let Err(e) = parse(&body) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn the_peers_file_never_keeps_comments_or_blanks(text in ".*(\n.*){0,5}") {
        for p in parse_peers_file(&text) {
            prop_assert!(!p.is_empty() && !p.contains('#') && p.trim() == p);
        }
    }

    #[test]
    fn rule_sets_interrupts_and_gids_never_panic(text in ".{0,300}", port in any::<u16>()) {
        let _ = nft_blocking(&text, port);
        let _ = iptables_blocking(&text, port, "iptables");
        let _ = nic_irqs(&text, "ens1f0np0", Some("0000:3b:00.0"));
        let _ = gid_ip(&text);
    }

    #[test]
    fn nft_json_of_any_shape_never_panics(v in json(), port in any::<u16>()) {
        let doc = serde_json::json!({ "nftables": [ { "rule": { "expr": [v] } } ] });
        if let Err(e) = nft_blocking(&doc.to_string(), port) {
            prop_assert!(!e.is_empty());
        }
    }
}
