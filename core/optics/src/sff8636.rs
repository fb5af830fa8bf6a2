//! SFF-8636 (QSFP, QSFP+, QSFP28): the monitors and flags in the lower page, the identity
//! in upper page 00h, the thresholds in upper page 03h, as ethtool's `qsfp.c` reads them.
//!
//! SFF-8636 has no "diagnostics implemented" bit like SFF-8472's: ethtool takes a valid
//! temperature (neither 0 nor 0xffff) as the sign that the monitors are filled, and page
//! 03h (present unless lower byte 2 bit 2 says the memory is flat) as the sign that the
//! thresholds and flags are.

use crate::common::{
    ascii, bias_ma, check, connector_name, empty_module, flag, i16_at, limits, oui, power_mw,
    temperature_c, u16_at, voltage_v, LEVELS,
};
use crate::model::{Family, Lane, Level, Measure, Module, Problem, Thresholds};
use crate::{Eeprom, Page};

const STATUS: usize = 2;
const STATUS_FLAT_MEMORY: u8 = 1 << 2;
/// Upper page 00h byte 220, "Diagnostic Monitoring Type".
const DIAG_TYPE: usize = 220;
const DIAG_RX_AVERAGE: u8 = 1 << 3;
/// Byte 220 bit 2: transmit power measured (ethtool `qsfp.h` `SFF8636_TX_PWR_TYPE_MASK`
/// 0x4, read into `tx_power_type`; SFF-8636 table 6-24 "Transmitter power measurement
/// supported"). A real Kaiam XQX2502 reads 0x08 here and 0 in its TX power bytes.
const DIAG_TX_POWER: u8 = 1 << 2;
/// Upper page 00h byte 195, "Options": TX LOS (bit 1; also taken for RX LOS, as ethtool
/// does: there is no RX LOS bit), TX fault (bit 3) reported.
const OPTIONS_4: usize = 195;
const LANES: u8 = 4;
/// Lower page byte 86: the host's TX disable of lane 1 (bit 0) to lane 4 (bit 3), as
/// ethtool's `qsfp.h` lays it out (`SFF8636_TX_DISABLE_OFFSET` 0x56).
const TX_DISABLE: usize = 86;

pub(crate) fn decode(eeprom: &Eeprom) -> Module {
    let lower = eeprom.lower();
    let mut module = empty_module(Family::Sff8636, lower[0]);
    module.revision_compliance = Some(compliance(lower[1]).to_string());
    let flat = lower[STATUS] & STATUS_FLAT_MEMORY != 0;
    module.flat_memory = Some(flat);
    let Some(page00) = eeprom.page(0, 0) else {
        module.problems.push(Problem::PageMissing {
            page: "00h".to_string(),
        });
        return module;
    };
    let upper = |offset: usize| page00[offset - 128];
    inventory(page00, &mut module);
    check(&mut module.problems, "CC_BASE", &page00[0..63], upper(191));
    // CC_EXT covers 192-222, the diagnostic type byte among them.
    if !check(&mut module.problems, "CC_EXT", &page00[64..95], upper(223)) {
        return module;
    }
    signals(lower, upper(OPTIONS_4), &mut module);
    let temperature = i16_at(lower, 22);
    let monitored = upper(DIAG_TYPE) & 0x34 != 0;
    if temperature == 0 || temperature == -1 {
        module.diagnostics_implemented = monitored;
        module.problems.push(if monitored {
            Problem::DiagnosticsAllZero
        } else {
            Problem::DiagnosticsNotImplemented
        });
        return module;
    }
    module.diagnostics_implemented = true;
    module.rx_power_kind = Some(if upper(DIAG_TYPE) & DIAG_RX_AVERAGE != 0 {
        "average"
    } else {
        "OMA"
    });
    monitors(lower, upper(DIAG_TYPE) & DIAG_TX_POWER != 0, &mut module);
    let page03 = if flat { None } else { eeprom.page(0, 3) };
    match page03 {
        Some(page03) => {
            thresholds(page03, &mut module);
            alarms(lower, &mut module);
        }
        None if !flat => module.problems.push(Problem::PageMissing {
            page: "03h".to_string(),
        }),
        None => {}
    }
    module
}

fn inventory(page00: &Page, module: &mut Module) {
    let at = |offset: usize| offset - 128;
    let connector = page00[at(130)];
    module.connector = Some(format!("0x{connector:02x} ({})", connector_name(connector)));
    module.vendor = ascii(&page00[at(148)..at(164)]);
    module.vendor_oui = Some(oui(&page00[at(165)..at(168)]));
    module.part_number = ascii(&page00[at(168)..at(184)]);
    module.revision = ascii(&page00[at(184)..at(186)]);
    module.serial_number = ascii(&page00[at(196)..at(212)]);
    module.date_code = ascii(&page00[at(212)..at(220)]);
    // Byte 147 bits 7-4, the transmitter technology: from 0xa0 on it is copper, and
    // 186-187 hold the cable's attenuation instead of a wavelength (qsfp.c).
    if page00[at(147)] & 0xf0 < 0xa0 && u16_at(page00, at(186)) != 0 {
        module.wavelength_nm = Some(f64::from(u16_at(page00, at(186))) / 20.0);
    }
}

/// Lower page byte 1, "Revision Compliance" (SFF-8636 table 6-3), as ethtool prints it.
fn compliance(code: u8) -> &'static str {
    match code {
        0x00 => "Revision not specified",
        0x01 => "SFF-8436 Rev 4.8 or earlier",
        0x02 => "SFF-8436 Rev 4.8 or earlier (except 186-189)",
        0x03 => "SFF-8636 Rev 1.3 or earlier",
        0x04 => "SFF-8636 Rev 1.4",
        0x05 => "SFF-8636 Rev 1.5",
        0x06 => "SFF-8636 Rev 2.0",
        0x07 => "SFF-8636 Rev 2.5/2.6/2.7",
        0x08 => "SFF-8636 Rev 2.8/2.9/2.10",
        _ => "Unallocated",
    }
}

/// Loss of signal and transmitter fault, per lane (lower bytes 3 and 4), where the
/// options byte says the module reports them.
fn signals(lower: &Page, options: u8, module: &mut Module) {
    for lane in 0..LANES {
        let number = Some(lane + 1);
        if options & (1 << 1) != 0 {
            let bit = 1 << lane;
            flag(
                &mut module.alarms,
                lower[3],
                bit,
                Measure::RxLos,
                Level::Set,
                number,
            );
            flag(
                &mut module.alarms,
                lower[3],
                bit << 4,
                Measure::TxLos,
                Level::Set,
                number,
            );
        }
        if options & (1 << 3) != 0 {
            let bit = 1 << lane;
            flag(
                &mut module.alarms,
                lower[4],
                bit,
                Measure::TxFault,
                Level::Set,
                number,
            );
        }
    }
}

/// Temperature, voltage and each lane's bias and powers; the transmit power only where
/// `tx_power` (byte 220 bit 2) says the module measures it, else its absence said once.
fn monitors(lower: &Page, tx_power: bool, module: &mut Module) {
    if !tx_power {
        module.problems.push(Problem::MonitorNotImplemented {
            measure: Measure::TxPower,
        });
    }
    module.temperature_c = Some(temperature_c(i16_at(lower, 22)));
    // Zero volts is a missing reading (voltage monitoring not implemented), not a measurement.
    let vcc = u16_at(lower, 26);
    module.voltage_v = (vcc != 0 && vcc != 0xffff).then(|| voltage_v(vcc));
    for lane in 0..usize::from(LANES) {
        module.lanes.push(Lane {
            lane: lane as u8 + 1,
            bias_ma: Some(bias_ma(u16_at(lower, 42 + 2 * lane))),
            tx_power_mw: tx_power.then(|| power_mw(u16_at(lower, 50 + 2 * lane))),
            rx_power_mw: Some(power_mw(u16_at(lower, 34 + 2 * lane))),
            data_path_state: None,
            tx_disabled: Some(lower[TX_DISABLE] & (1 << lane) != 0),
        });
    }
}

fn thresholds(page03: &Page, module: &mut Module) {
    let at = |offset: usize| offset - 128;
    module.thresholds = Thresholds {
        temperature_c: limits(page03, at(128), |b, o| temperature_c(i16_at(b, o))),
        voltage_v: limits(page03, at(144), |b, o| voltage_v(u16_at(b, o))),
        rx_power_mw: limits(page03, at(176), |b, o| power_mw(u16_at(b, o))),
        bias_ma: limits(page03, at(184), |b, o| bias_ma(u16_at(b, o))),
        tx_power_mw: limits(page03, at(192), |b, o| power_mw(u16_at(b, o))),
    }
    .checked(&mut module.problems);
}

/// Module flags (lower bytes 6 and 7) and lane flags (9-14: two lanes a byte, the first
/// in the high nibble; each nibble high alarm, low alarm, high warning, low warning).
fn alarms(lower: &Page, module: &mut Module) {
    for (byte, measure) in [(6, Measure::Temperature), (7, Measure::Voltage)] {
        for (i, level) in LEVELS.iter().enumerate() {
            flag(
                &mut module.alarms,
                lower[byte],
                0x80 >> i,
                measure,
                *level,
                None,
            );
        }
    }
    for (first, measure) in [
        (9, Measure::RxPower),
        (11, Measure::Bias),
        (13, Measure::TxPower),
    ] {
        for lane in 0..LANES {
            let byte = lower[first + usize::from(lane / 2)];
            let shift = if lane % 2 == 0 { 4 } else { 0 };
            for (i, level) in LEVELS.iter().enumerate() {
                let mask = (0x08 >> i) << shift;
                flag(
                    &mut module.alarms,
                    byte,
                    mask,
                    measure,
                    *level,
                    Some(lane + 1),
                );
            }
        }
    }
}
