//! Property tests: driver statistics in any shape a driver (or a file in `ethtool -S`
//! format) could give: string sets of any bytes and counts that disagree with the buffers,
//! names that are not UTF-8 or not NUL-terminated. Never a panic.

use proptest::prelude::*;
use rocewatch_counters_ethtool::normalize::{normalize, parse_ethtool_s};
use rocewatch_ethtool::pair_strings;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_string_set_pairs_without_panicking(
        names in prop::collection::vec(any::<u8>(), 0..2048),
        values in prop::collection::vec(any::<u64>(), 0..80),
        count in 0usize..200,
    ) {
        let pairs = pair_strings(&names, &values, count);
        prop_assert!(pairs.len() <= count.min(values.len()).min(names.len() / 32));
        for (name, _) in &pairs {
            prop_assert!(!name.contains('\0'));
            let _ = normalize(name);
        }
    }

    #[test]
    fn any_ethtool_s_text_parses_without_panicking(text in ".*") {
        for (name, _) in parse_ethtool_s(&text) {
            let _ = normalize(&name);
        }
    }

    #[test]
    fn names_normalize_without_panicking(name in "[a-z_0-9]{0,40}") {
        let _ = normalize(&name);
    }
}

#[test]
fn string_sets_read_back() {
    let mut names = vec![0u8; 64];
    names[..12].copy_from_slice(b"rx_prio3_pause"[..12].as_ref());
    names[32..42].copy_from_slice(b"tx_bytes_x");
    assert_eq!(
        pair_strings(&names, &[7, 9, 11], 5),
        vec![
            ("rx_prio3_pau".to_string(), 7),
            ("tx_bytes_x".to_string(), 9)
        ]
    );
}
