//! Property tests over any bytes: neither the dump reader, the decoders nor the verdict
//! panic, and a byte changed where a checksum covers it is flagged.

mod build;

use proptest::prelude::*;
use rocewatch_optics::{decode, dump, Eeprom, ModuleLevel, Problem};

fn rank(l: ModuleLevel) -> u8 {
    match l {
        ModuleLevel::Ok => 0,
        ModuleLevel::Unjudged => 1,
        ModuleLevel::Warn => 2,
        ModuleLevel::Fail => 3,
    }
}

fn page() -> impl Strategy<Value = [u8; 128]> {
    proptest::collection::vec(any::<u8>(), 128).prop_map(|v| v.try_into().unwrap())
}

proptest! {
    #[test]
    fn dump_reader_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let _ = dump::parse(&bytes);
    }

    #[test]
    fn dump_reader_never_panics_on_dump_like_text(
        lines in proptest::collection::vec(
            ("(0x)?[0-9a-f]{1,8}:?", proptest::collection::vec("[0-9a-fA-F]{1,3}|\\*|\\|", 0..20)),
            0..60,
        )
    ) {
        let text: String = lines
            .iter()
            .map(|(offset, values)| format!("{offset}\t{}\n", values.join(" ")))
            .collect();
        let _ = dump::parse(text.as_bytes());
    }

    #[test]
    fn decoders_never_panic(
        id in prop_oneof![Just(0x03u8), Just(0x0d), Just(0x11), Just(0x18), Just(0x19), any::<u8>()],
        lower in page(),
        pages in proptest::collection::vec((0u8..4, any::<u8>(), page()), 0..8),
        a2 in proptest::option::of(proptest::collection::vec(any::<u8>(), 256)),
    ) {
        let mut lower = lower;
        lower[0] = id;
        let mut eeprom = Eeprom::new(lower);
        for (bank, number, bytes) in pages {
            eeprom.insert_page(bank, number, bytes);
        }
        if let Some(a2) = a2 {
            eeprom.set_a2(a2.try_into().unwrap());
        }
        // The verdict of any memory: never a panic; OK only with no warning or failure
        // found, its level the worst of its warnings and failures (what was not judged,
        // unjudged findings, never outranks what was).
        let v = rocewatch_optics::judge_module(&eeprom, &[]);
        let judged = |l: ModuleLevel| matches!(l, ModuleLevel::Warn | ModuleLevel::Fail);
        if v.level == ModuleLevel::Ok {
            prop_assert!(v.findings.iter().all(|f| !judged(f.level)), "{v:?}");
        }
        for f in v.findings.iter().filter(|f| judged(f.level)) {
            prop_assert!(rank(f.level) <= rank(v.level), "{v:?}");
        }
        if v.findings.iter().any(|f| judged(f.level)) {
            prop_assert!(judged(v.level), "{v:?}");
        }
        if let Ok(module) = decode(&eeprom) {
            // Whatever was read, a reading is a number, never NaN or infinite.
            for v in module.lanes.iter().flat_map(|l| [l.bias_ma, l.tx_power_mw, l.rx_power_mw]) {
                prop_assert!(v.is_none_or(f64::is_finite), "{v:?}");
            }
        }
    }

    #[test]
    fn linear_layout_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2500)) {
        if let Ok(eeprom) = Eeprom::from_linear(&bytes) {
            let _ = decode(&eeprom);
        }
    }

    /// One byte changed in what CC_BASE, CC_EXT or CC_DMI covers is a checksum problem.
    #[test]
    fn a_corrupted_sfp_read_is_flagged(at in prop_oneof![1usize..63, 64usize..95, 256usize..351], flip in 1u8..=255) {
        let mut bytes = build::Sfp::new().linear();
        bytes[at] ^= flip;
        let module = decode(&Eeprom::from_linear(&bytes).unwrap()).unwrap();
        prop_assert!(
            module.problems.iter().any(|p| matches!(p, Problem::Checksum { .. })),
            "{:?}", module.problems
        );
    }
}
