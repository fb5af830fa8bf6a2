//! The decoders against module memories built field by field (tests/build): every value
//! in ethtool's units, the flags at their bits, and what the decoders refuse to report.

mod build;

use build::{put_u16, up, Cmis, Qsfp, Sfp};
use rocewatch_optics::{decode, Eeprom, Level, Measure, Problem};

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-6)
}

fn sfp(module: Sfp) -> rocewatch_optics::Module {
    decode(&Eeprom::from_linear(&module.linear()).unwrap()).unwrap()
}

#[test]
fn sff8472_identity_readings_thresholds() {
    let m = sfp(Sfp::new());
    assert_eq!(m.identifier, "SFP");
    assert_eq!(m.vendor.as_deref(), Some("ACME OPTICS"));
    assert_eq!(m.vendor_oui.as_deref(), Some("00:1b:21"));
    assert_eq!(m.part_number.as_deref(), Some("SFP-10G-SR"));
    assert_eq!(m.serial_number.as_deref(), Some("SN0001"));
    assert_eq!(m.date_code.as_deref(), Some("240131"));
    assert_eq!(m.wavelength_nm, Some(850.0));
    assert_eq!(m.rx_power_kind, Some("average"));
    assert!(close(m.temperature_c, 44.34765625), "{:?}", m.temperature_c);
    assert!(close(m.voltage_v, 3.3034));
    assert_eq!(m.lanes.len(), 1);
    assert!(close(m.lanes[0].bias_ma, 10.126));
    assert!(close(m.lanes[0].tx_power_mw, 0.597));
    assert!(close(m.lanes[0].rx_power_mw, 0.35));
    let t = m.thresholds.expect("thresholds");
    let temp = t.temperature_c.unwrap();
    assert_eq!((temp.high_alarm, temp.low_alarm), (80.0, -5.0));
    assert!(close(t.rx_power_mw.map(|l| l.low_warning), 0.0126));
    assert!(close(t.bias_ma.map(|l| l.high_alarm), 15.0));
    assert!(m.alarms.is_empty(), "{:?}", m.alarms);
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn sff8472_flags_are_read_only_where_implemented() {
    let mut module = Sfp::new();
    module.a2[113] = 0x40; // RX power low alarm
    module.a2[116] = 0x80; // temperature high warning
    let m = sfp(module);
    assert!(m
        .alarms
        .iter()
        .any(|a| a.measure == Measure::RxPower && a.level == Level::LowAlarm && a.lane == Some(1)));
    assert!(m.alarms.iter().any(|a| a.measure == Measure::Temperature
        && a.level == Level::HighWarning
        && a.lane.is_none()));
    assert_eq!(m.alarms.len(), 2);
    // A2h 112-117 compare the last measurement: not latched.
    assert!(m.alarms.iter().all(|a| !a.latched));

    let mut module = Sfp::new();
    module.a2[113] = 0x40;
    module.a0[93] = 0; // flags not implemented: the bits mean nothing
    assert!(sfp(module).alarms.is_empty());
}

/// SFF-8472 section 9.3 with slope 2 and offset 10 (the vectors SONiC's tests use) and a
/// receive power polynomial whose squared term ethtool's formula would not raise.
#[test]
fn sff8472_external_calibration_follows_the_standard() {
    let mut module = Sfp::new();
    module.a0[92] = 0x58; // implemented, externally calibrated, average
    for slope_at in [76, 80, 84, 88] {
        module.a2[slope_at] = 2;
        module.a2[slope_at + 1] = 0;
        put_u16(&mut module.a2, slope_at + 2, 10);
    }
    put_u16(&mut module.a2, 96, 0x0fff);
    put_u16(&mut module.a2, 98, 0x7fff);
    put_u16(&mut module.a2, 100, 0x7fff);
    put_u16(&mut module.a2, 104, 100);
    // Rx_PWR(4..0) at 56, 60, 64, 68, 72: 0, 0, 0.5, 2.0, 1.0.
    for (at, c) in [(56, 0.0f32), (60, 0.0), (64, 0.5), (68, 2.0), (72, 1.0)] {
        module.a2[at..at + 4].copy_from_slice(&c.to_be_bytes());
    }
    let m = sfp(module);
    assert!(close(m.temperature_c, 32.03125), "{:?}", m.temperature_c);
    assert!(close(m.voltage_v, 6.5544), "{:?}", m.voltage_v);
    assert!(
        close(m.lanes[0].bias_ma, 131.088),
        "{:?}",
        m.lanes[0].bias_ma
    );
    // 0.5 * 100² + 2 * 100 + 1 = 5201 units of 0.1 µW (ethtool: 1 + 100 * 2.5 = 251).
    assert!(
        close(m.lanes[0].rx_power_mw, 0.5201),
        "{:?}",
        m.lanes[0].rx_power_mw
    );
}

#[test]
fn sff8472_without_diagnostics_reports_none() {
    let mut module = Sfp::new();
    module.a0[92] = 0x00;
    let m = sfp(module);
    assert!(m.problems.contains(&Problem::DiagnosticsNotImplemented));
    assert_eq!((m.temperature_c, m.voltage_v), (None, None));
    assert!(m.lanes.is_empty() && m.thresholds.is_none());
}

#[test]
fn sff8472_all_zero_diagnostics_are_absent_not_zero() {
    let mut module = Sfp::new();
    module.a2 = [0; 256];
    let m = sfp(module);
    assert!(
        m.problems.contains(&Problem::DiagnosticsAllZero),
        "{:?}",
        m.problems
    );
    assert_eq!((m.temperature_c, m.voltage_v), (None, None));
    assert!(m.lanes.is_empty());
}

#[test]
fn sff8472_checksum_failures_withhold_what_they_cover() {
    // CC_EXT covers the DOM type byte: nothing of A2h is trusted.
    let mut bytes = Sfp::new().linear();
    bytes[95] ^= 0xff;
    let m = decode(&Eeprom::from_linear(&bytes).unwrap()).unwrap();
    assert!(
        matches!(m.problems[0], Problem::Checksum { name: "CC_EXT", .. }),
        "{:?}",
        m.problems
    );
    assert!(m.temperature_c.is_none() && m.lanes.is_empty());
    // CC_DMI covers the thresholds and calibration.
    let mut bytes = Sfp::new().linear();
    bytes[256 + 10] ^= 0x01;
    let m = decode(&Eeprom::from_linear(&bytes).unwrap()).unwrap();
    assert!(matches!(
        m.problems[0],
        Problem::Checksum { name: "CC_DMI", .. }
    ));
    assert!(m.temperature_c.is_none() && m.thresholds.is_none());
    // CC_BASE covers only the identity: the readings stand, the problem is said.
    let mut bytes = Sfp::new().linear();
    bytes[30] ^= 0x01;
    let m = decode(&Eeprom::from_linear(&bytes).unwrap()).unwrap();
    assert!(matches!(
        m.problems[0],
        Problem::Checksum {
            name: "CC_BASE",
            ..
        }
    ));
    assert!(m.temperature_c.is_some());
}

#[test]
fn sff8472_without_a2_says_the_page_is_missing() {
    let bytes = Sfp::new().linear();
    let m = decode(&Eeprom::from_linear(&bytes[..256]).unwrap()).unwrap();
    assert_eq!(
        m.problems,
        vec![Problem::PageMissing {
            page: "A2h".to_string()
        }]
    );
    assert!(m.temperature_c.is_none());
}

#[test]
fn sff8636_lanes_thresholds_and_flags() {
    let mut q = Qsfp::new();
    q.bytes[3] = 0x04; // RX LOS on lane 3
    q.bytes[9] = 0x01; // lane 2 RX power low warning (low nibble, lowest bit)
    q.bytes[12] = 0x80; // lane 3 bias high alarm (high nibble, highest bit)
    q.bytes[6] = 0x20; // temperature high warning
    let m = decode(&Eeprom::from_linear(&q.linear()).unwrap()).unwrap();
    assert_eq!(m.identifier, "QSFP28");
    assert_eq!(m.part_number.as_deref(), Some("QSFP-100G-SR4"));
    assert_eq!(m.wavelength_nm, Some(850.0));
    assert_eq!(
        m.revision_compliance.as_deref(),
        Some("SFF-8636 Rev 2.5/2.6/2.7")
    );
    assert!(close(m.temperature_c, 39.5));
    assert!(close(m.voltage_v, 3.3));
    assert_eq!(m.lanes.len(), 4);
    assert!(close(m.lanes[3].rx_power_mw, 0.83));
    assert!(close(m.lanes[3].bias_ma, 7.06));
    assert!(close(m.lanes[3].tx_power_mw, 0.73));
    let t = m.thresholds.expect("page 03h thresholds");
    assert_eq!(t.temperature_c.unwrap().low_alarm, -10.0);
    assert!(close(t.bias_ma.map(|l| l.low_alarm), 5.492));
    let on: Vec<_> = m
        .alarms
        .iter()
        .map(|a| (a.measure, a.level, a.lane))
        .collect();
    assert_eq!(
        on,
        vec![
            (Measure::RxLos, Level::Set, Some(3)),
            (Measure::Temperature, Level::HighWarning, None),
            (Measure::RxPower, Level::LowWarning, Some(2)),
            (Measure::Bias, Level::HighAlarm, Some(3)),
        ]
    );
    // "L-" flags: latched, clear on read.
    assert!(m.alarms.iter().all(|a| a.latched));
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

/// SFF-8636 page 00h byte 220 bit 2 clear (a real Kaiam XQX2502 reads 0x08): the module
/// measures no transmit power, so none is exported (its bytes read 0), and that is said once.
#[test]
fn sff8636_without_a_tx_power_monitor_has_no_tx_power() {
    let mut q = Qsfp::new();
    q.bytes[220] = 0x08;
    for lane in 0..4 {
        q.bytes[50 + 2 * lane] = 0;
        q.bytes[51 + 2 * lane] = 0;
    }
    let m = decode(&Eeprom::from_linear(&q.linear()).unwrap()).unwrap();
    assert_eq!(m.lanes.len(), 4);
    assert!(
        m.lanes.iter().all(|l| l.tx_power_mw.is_none()),
        "{:?}",
        m.lanes
    );
    assert!(close(m.lanes[3].bias_ma, 7.06));
    assert!(close(m.lanes[3].rx_power_mw, 0.83));
    assert_eq!(
        m.problems,
        vec![Problem::MonitorNotImplemented {
            measure: Measure::TxPower
        }]
    );
}

#[test]
fn sff8636_missing_page_03h_and_unanswered_monitors() {
    let bytes = Qsfp::new().linear();
    let m = decode(&Eeprom::from_linear(&bytes[..256]).unwrap()).unwrap();
    assert_eq!(
        m.problems,
        vec![Problem::PageMissing {
            page: "03h".to_string()
        }]
    );
    assert!(m.thresholds.is_none() && m.temperature_c.is_some());

    let mut q = Qsfp::new();
    q.bytes[22..58].fill(0);
    let m = decode(&Eeprom::from_linear(&q.linear()).unwrap()).unwrap();
    assert_eq!(m.problems, vec![Problem::DiagnosticsAllZero]);
    assert!(m.temperature_c.is_none() && m.lanes.is_empty());
}

#[test]
fn sff8636_flat_memory_has_no_page_03h_to_miss() {
    let mut q = Qsfp::new();
    q.bytes[2] = 0x04;
    let m = decode(&Eeprom::from_linear(&q.linear()).unwrap()).unwrap();
    assert_eq!(m.flat_memory, Some(true));
    assert!(m.problems.is_empty(), "{:?}", m.problems);
    assert!(m.thresholds.is_none());
}

#[test]
fn cmis_lanes_of_two_banks_thresholds_and_lane_bits() {
    let mut c = Cmis::new(2);
    c.lower[9] = 0x04; // temperature high warning
    *up(&mut c.page11[0], 147) = 0x04; // RX LOS: the bit of lane 3, not lane 4
    *up(&mut c.page11[1], 150) = 0x01; // bank 1 lane 1 (lane 9) RX power low alarm
    let m = decode(&c.eeprom()).unwrap();
    assert_eq!(m.identifier_code, 0x18);
    assert_eq!(m.module_state.as_deref(), Some("0x03 (ModuleReady)"));
    assert_eq!(m.revision_compliance.as_deref(), Some("CMIS Rev. 5.0"));
    assert_eq!(m.part_number.as_deref(), Some("QDD-400G-DR4"));
    assert_eq!(m.wavelength_nm, Some(1311.0));
    assert!(close(m.temperature_c, 50.0));
    assert_eq!(m.lanes.len(), 16);
    assert_eq!(m.lanes[9].lane, 10);
    assert!(close(m.lanes[9].bias_ma, 80.018));
    assert!(close(m.lanes[9].tx_power_mw, 1.5009));
    assert!(close(m.lanes[9].rx_power_mw, 2.0009));
    let t = m.thresholds.expect("page 02h thresholds");
    assert!(close(t.bias_ma.map(|l| l.high_alarm), 130.0));
    assert!(close(t.rx_power_mw.map(|l| l.low_warning), 0.2042));
    let on: Vec<_> = m
        .alarms
        .iter()
        .map(|a| (a.measure, a.level, a.lane))
        .collect();
    assert_eq!(
        on,
        vec![
            (Measure::Temperature, Level::HighWarning, None),
            (Measure::RxLos, Level::Set, Some(3)),
            (Measure::RxPower, Level::LowAlarm, Some(9)),
        ]
    );
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

/// A module that advertises 4 media lanes (lower byte 88 bits 3-0, as a QDD-400G-XDR4 does)
/// and reads 0 on lanes 5-8: those lanes have no readings, not zeros; the first application
/// allowed to start on lanes 1 and 5 (page 01h byte 176 = 0x11) uses all eight.
#[test]
fn cmis_lanes_outside_the_application_have_no_readings() {
    let build = |options: u8| {
        let mut c = Cmis::new(1);
        c.lower[86] = 0x11; // a host interface (400GAUI-8)
        c.lower[88] = 0x84; // 8 host lanes, 4 media lanes
        *up(&mut c.page01, 176) = options;
        for lane in 4..8 {
            for base in [154, 170, 186] {
                c.page11[0][base - 128 + 2 * lane] = 0;
                c.page11[0][base - 128 + 2 * lane + 1] = 0;
            }
        }
        decode(&c.eeprom()).unwrap()
    };
    let m = build(0x01);
    assert_eq!(m.lanes.len(), 8);
    assert!(close(m.lanes[3].rx_power_mw, 2.0003), "{:?}", m.lanes[3]);
    for lane in &m.lanes[4..] {
        assert_eq!(
            (lane.bias_ma, lane.tx_power_mw, lane.rx_power_mw),
            (None, None, None),
            "{lane:?}"
        );
    }
    let both = build(0x11);
    assert_eq!(both.lanes[7].rx_power_mw, Some(0.0));
}

/// Page 11h bytes 128-131: a nibble a host lane, lane 1 in byte 128 bits 3-0, lane 2 in
/// its bits 7-4 (SONiC's map); bank 1's lanes are 9-16. A reserved code is said as such
/// and is not taken as a data path down.
#[test]
fn cmis_data_path_state_by_lane() {
    let mut c = Cmis::new(2);
    c.lower[86] = 0x11;
    c.lower[88] = 0x88;
    c.page11[0][0] = 0x14; // lane 1 DPActivated, lane 2 DPDeactivated
    c.page11[0][1] = 0x27; // lane 3 DPInitialized, lane 4 DPInit
    c.page11[0][3] = 0x0f; // lane 7 reserved 0xf, lane 8 reserved 0
    c.page11[1][0] = 0x61; // lane 9 DPDeactivated, lane 10 DPTxTurnOff
    let m = decode(&c.eeprom()).unwrap();
    let state = |n: usize| m.lanes[n - 1].data_path_state.clone().unwrap();
    assert_eq!(
        [1, 2, 3, 4, 5, 7, 8, 9, 10].map(state),
        [
            "DPActivated",
            "DPDeactivated",
            "DPInitialized",
            "DPInit",
            "DPActivated",
            "reserved (0xf)",
            "reserved (0x0)",
            "DPDeactivated",
            "DPTxTurnOff"
        ]
    );
    assert!(!m.lanes[0].data_path_inactive() && m.lanes[1].data_path_inactive());
    assert!(
        !m.lanes[6].data_path_inactive(),
        "a reserved code says nothing"
    );
    assert_eq!((m.host_lane_count, m.media_lane_count), (Some(8), Some(8)));
}

/// An application whose media lane count is 1 (a real Acacia 400ZR+: byte 88 = 0x81).
#[test]
fn cmis_one_media_lane() {
    let mut c = Cmis::new(1);
    c.lower[86] = 0x4f;
    c.lower[88] = 0x81;
    let m = decode(&c.eeprom()).unwrap();
    assert!(m.lanes[0].rx_power_mw.is_some());
    assert!(m.lanes[1..].iter().all(|l| l.rx_power_mw.is_none()));
}

/// CMIS page 01h byte 159 bit 0 (temperature) and bit 1 (supply voltage) monitor
/// supported: a module without one reads 0 there, absent rather than 0 °C or 0 V; without
/// both the lanes are still read.
#[test]
fn cmis_module_monitors_the_module_does_not_have_are_absent() {
    let mut c = Cmis::new(1);
    *up(&mut c.page01, 159) = 0x02;
    c.lower[14] = 0;
    c.lower[15] = 0;
    let m = decode(&c.eeprom()).unwrap();
    assert_eq!(m.temperature_c, None);
    assert!(close(m.voltage_v, 3.3));
    assert_eq!(
        m.problems,
        vec![Problem::MonitorNotImplemented {
            measure: Measure::Temperature
        }]
    );
    let mut c = Cmis::new(1);
    *up(&mut c.page01, 159) = 0x00;
    c.lower[14..18].fill(0);
    let m = decode(&c.eeprom()).unwrap();
    assert_eq!((m.temperature_c, m.voltage_v), (None, None));
    assert_eq!(m.lanes.len(), 8);
    assert!(m.lanes[0].rx_power_mw.is_some());
    assert_eq!(m.problems.len(), 2, "{:?}", m.problems);
}

/// CMIS page 01h byte 160 bits 4-3: "multiply by 2" doubles the bias and its thresholds.
#[test]
fn cmis_bias_multiplier_multiplies() {
    let mut c = Cmis::new(1);
    *up(&mut c.page01, 160) = 0x07 | 0x08;
    let m = decode(&c.eeprom()).unwrap();
    assert!(close(m.lanes[0].bias_ma, 160.0), "{:?}", m.lanes[0].bias_ma);
    assert!(close(
        m.thresholds.unwrap().bias_ma.map(|l| l.high_alarm),
        260.0
    ));
}

/// Multiplier codes 2 (×4) and 3 (reserved: ×1, as FBOSS's `getTxBiasMultiplier` and
/// SONiC's `2**raw if raw < 3 else 1` read it). ethtool shifts right (divides) instead.
#[test]
fn cmis_bias_multiplier_four_and_reserved() {
    for (code, factor) in [(0x10, 4.0), (0x18, 1.0)] {
        let mut c = Cmis::new(1);
        *up(&mut c.page01, 160) = 0x07 | code;
        let m = decode(&c.eeprom()).unwrap();
        assert!(
            close(m.lanes[0].bias_ma, 80.0 * factor),
            "code {code:#x}: {:?}",
            m.lanes[0].bias_ma
        );
        let t = m.thresholds.unwrap().bias_ma.unwrap();
        assert!(close(Some(t.low_warning), 15.0 * factor), "{t:?}");
    }
}

/// Page 11h flag bytes: lane n (of a bank) is bit n-1, as SONiC's page11 map
/// (`RegBitField(lane-1)`) and FBOSS's `getChannelFlags` (`1 << channel`) read them.
/// Bit 0 is lane 1: ethtool's `byte & chan` (chan = 0 for lane 1) never shows it.
#[test]
fn cmis_bit_zero_of_every_lane_flag_byte_is_lane_one() {
    let mut c = Cmis::new(2);
    for offset in [
        135, 136, 139, 140, 141, 142, 143, 144, 145, 146, 147, 149, 150, 151, 152,
    ] {
        *up(&mut c.page11[1], offset) = 0x01;
    }
    let m = decode(&c.eeprom()).unwrap();
    let lanes: Vec<_> = m.alarms.iter().map(|a| a.lane).collect();
    assert_eq!(lanes, vec![Some(9); 15], "{:?}", m.alarms);
    let measures: Vec<_> = m.alarms.iter().map(|a| (a.measure, a.level)).collect();
    assert_eq!(
        measures,
        vec![
            (Measure::TxFault, Level::Set),
            (Measure::TxLos, Level::Set),
            (Measure::RxLos, Level::Set),
            (Measure::TxPower, Level::HighAlarm),
            (Measure::TxPower, Level::LowAlarm),
            (Measure::TxPower, Level::HighWarning),
            (Measure::TxPower, Level::LowWarning),
            (Measure::Bias, Level::HighAlarm),
            (Measure::Bias, Level::LowAlarm),
            (Measure::Bias, Level::HighWarning),
            (Measure::Bias, Level::LowWarning),
            (Measure::RxPower, Level::HighAlarm),
            (Measure::RxPower, Level::LowAlarm),
            (Measure::RxPower, Level::HighWarning),
            (Measure::RxPower, Level::LowWarning),
        ]
    );
}

/// Lower byte 9: temperature in bits 0-3, supply voltage in bits 4-7, each high alarm,
/// low alarm, high warning, low warning from the low bit up (ethtool's `cmis.h` masks,
/// SONiC's `get_module_level_flag`).
#[test]
fn cmis_module_flag_bits() {
    for (byte, measure, level) in [
        (0x01, Measure::Temperature, Level::HighAlarm),
        (0x08, Measure::Temperature, Level::LowWarning),
        (0x10, Measure::Voltage, Level::HighAlarm),
        (0x80, Measure::Voltage, Level::LowWarning),
    ] {
        let mut c = Cmis::new(1);
        c.lower[9] = byte;
        let m = decode(&c.eeprom()).unwrap();
        let on: Vec<_> = m
            .alarms
            .iter()
            .map(|a| (a.measure, a.level, a.lane))
            .collect();
        assert_eq!(on, vec![(measure, level, None)], "byte 9 = {byte:#04x}");
    }
}

#[test]
fn cmis_missing_pages_and_flat_modules() {
    let mut c = Cmis::new(2);
    c.page11.pop();
    let m = decode(&c.eeprom()).unwrap();
    assert_eq!(
        m.problems,
        vec![Problem::PageMissing {
            page: "11h (bank 1)".to_string()
        }]
    );
    assert_eq!(m.lanes.len(), 8);

    let mut c = Cmis::new(1);
    c.lower[2] = 0x80;
    let m = decode(&c.eeprom()).unwrap();
    assert!(m.problems.contains(&Problem::DiagnosticsNotImplemented));
    assert!(m.lanes.is_empty() && m.temperature_c.is_none());
}

#[test]
fn cmis_checksum_failure_is_said() {
    let mut c = Cmis::new(1);
    let mut e = Eeprom::new(c.lower);
    c.page00[222 - 128] = 0x5a;
    e.insert_page(0, 0, c.page00);
    let m = decode(&e).unwrap();
    assert!(
        matches!(
            m.problems[0],
            Problem::Checksum {
                name: "page 00h checksum",
                ..
            }
        ),
        "{:?}",
        m.problems
    );
}

#[test]
fn layouts_and_identifiers() {
    // SFF-8636's page 03h at 0x200 in the linear layout; a page cut short is left out.
    let bytes = Qsfp::new().linear();
    let e = Eeprom::from_linear(&bytes[..0x200 + 64]).unwrap();
    assert!(e.page(0, 2).is_some() && e.page(0, 3).is_none());
    assert!(matches!(
        Eeprom::from_linear(&bytes[..100]),
        Err(rocewatch_optics::Error::TooShort { len: 100 })
    ));
    let mut unknown = [0u8; 128];
    unknown[0] = 0x06; // XFP: no decoder
    assert_eq!(
        decode(&Eeprom::new(unknown)),
        Err(rocewatch_optics::Error::UnknownIdentifier { code: 0x06 })
    );
}

/// Calibration constants that are not numbers give no reading, not NaN.
#[test]
fn sff8472_nan_calibration_is_absent() {
    let mut module = Sfp::new();
    module.a0[92] = 0x58;
    module.a2[72..76].copy_from_slice(&f32::NAN.to_be_bytes());
    let m = sfp(module);
    assert_eq!(m.lanes[0].rx_power_mw, None);
    // The other constants are zero here, so their thresholds convert to 0: out of order.
    assert!(m.thresholds.and_then(|t| t.rx_power_mw).is_none());
}
