//! Property tests: the sysfs parsers take any text the kernel (or a broken driver, or a
//! fixture) could put in a file and never panic.

use proptest::prelude::*;
use rocewatch_sysfs::parse::{
    is_empty_gid, parse_counter, parse_enum, parse_rate_bps, CounterText,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_text_is_a_counter_an_absence_or_garbage(text in ".*") {
        let _ = parse_counter(&text);
        let _ = parse_enum(&text);
        let _ = parse_rate_bps(&text);
        let _ = is_empty_gid(&text);
    }

    #[test]
    fn decimal_and_hex_counters_read_back(v in any::<u64>(), pad in "[ \t\n]{0,3}") {
        prop_assert_eq!(parse_counter(&format!("{pad}{v}{pad}")), CounterText::Value(v));
        prop_assert_eq!(parse_counter(&format!("0x{v:x}\n")), CounterText::Value(v));
    }

    #[test]
    fn a_counter_past_u64_is_garbage_not_a_wrapped_value(extra in 1u32..1000) {
        let big = format!("{}{}", u64::MAX, extra);
        prop_assert_eq!(parse_counter(&big), CounterText::Garbage);
    }

    #[test]
    fn rates_are_finite_and_never_negative(n in any::<f64>(), unit in prop::sample::select(vec!["Gb/sec", "Mb/sec", "Tb/sec"])) {
        let r = parse_rate_bps(&format!("{n} {unit} (4X EDR)"));
        if (0.0..1e6).contains(&n) {
            prop_assert!(r.is_some());
        }
        if !n.is_finite() || n < 0.0 {
            prop_assert_eq!(r, None);
        }
    }

    #[test]
    fn enums_keep_their_name(code in 0u8..=255, name in "[A-Z_]{1,12}") {
        prop_assert_eq!(parse_enum(&format!("{code}: {name}\n")), (Some(code), name));
    }
}
