//! SFF-8472 (SFP, SFP+, SFP28): the identity in A0h bytes 0-95, the diagnostics in A2h
//! (I2C address 0x51), as ethtool's `sfpid.c` and `sfpdiag.c` read them.
//!
//! Diagnostics exist when A0h byte 92 bit 6 says so; bit 4 says they are externally
//! calibrated (raw A/D values to be converted with the constants at A2h 56-91), bit 3 that
//! receive power is an average (else OMA). Byte 93 bit 7 says the alarm and warning flags
//! (A2h 112-113 and 116-117) are implemented.

use crate::common::{
    ascii, check, connector_name, empty_module, finite, flag, i16_at, limits, oui, u16_at,
};
use crate::model::{Family, Lane, Level, Measure, Module, Problem, Thresholds};
use crate::Eeprom;

const DOM_TYPE: usize = 92;
const DOM_IMPLEMENTED: u8 = 1 << 6;
const DOM_EXTERNAL_CAL: u8 = 1 << 4;
const DOM_RX_AVERAGE: u8 = 1 << 3;
const OPTIONS: usize = 93;
const OPTIONS_ALARM_FLAGS: u8 = 1 << 7;

pub(crate) fn decode(eeprom: &Eeprom) -> Module {
    let a0 = eeprom.lower();
    let mut module = empty_module(Family::Sff8472, a0[0]);
    inventory(a0, &mut module);
    // CC_BASE covers the identity (0-62); CC_EXT covers 64-94, among them the DOM type
    // and options bytes: when CC_EXT fails, what the module says about its diagnostics
    // cannot be trusted, and nothing of A2h is read.
    check(&mut module.problems, "CC_BASE", &a0[0..63], a0[63]);
    let ext_ok = check(&mut module.problems, "CC_EXT", &a0[64..95], a0[95]);
    module.diagnostics_implemented = a0[DOM_TYPE] & DOM_IMPLEMENTED != 0;
    if !module.diagnostics_implemented {
        module.problems.push(Problem::DiagnosticsNotImplemented);
        return module;
    }
    module.rx_power_kind = Some(if a0[DOM_TYPE] & DOM_RX_AVERAGE != 0 {
        "average"
    } else {
        "OMA"
    });
    let Some(a2) = eeprom.a2() else {
        module.problems.push(Problem::PageMissing {
            page: "A2h".to_string(),
        });
        return module;
    };
    // CC_DMI covers A2h 0-94: the thresholds and the calibration constants.
    let dmi_ok = check(&mut module.problems, "CC_DMI", &a2[0..95], a2[95]);
    if ext_ok && dmi_ok {
        diagnostics(a0, a2, &mut module);
    }
    module
}

fn inventory(a0: &[u8; 128], module: &mut Module) {
    module.connector = Some(format!("0x{:02x} ({})", a0[2], connector_name(a0[2])));
    module.vendor = ascii(&a0[20..36]);
    module.vendor_oui = Some(oui(&a0[37..40]));
    module.part_number = ascii(&a0[40..56]);
    module.revision = ascii(&a0[56..60]);
    module.serial_number = ascii(&a0[68..84]);
    module.date_code = ascii(&a0[84..92]);
    // Bytes 60-61 are the wavelength on optics, the cable compliance on passive (byte 8
    // bit 2) and active (bit 3) copper (sfpid.c's `sff8079_show_wavelength_or_copper`).
    // A wavelength of 0 is not programmed, not a colour of light.
    if a0[8] & 0x0c == 0 && u16_at(a0, 60) != 0 {
        module.wavelength_nm = Some(f64::from(u16_at(a0, 60)));
    }
    module.revision_compliance = Some(compliance(a0[94]).to_string());
}

/// SFF-8472 byte 94, "SFF-8472 Compliance".
fn compliance(code: u8) -> &'static str {
    match code {
        0x00 => "SFF-8472: not specified",
        0x01 => "SFF-8472 Rev 9.3",
        0x02 => "SFF-8472 Rev 9.5",
        0x03 => "SFF-8472 Rev 10.2",
        0x04 => "SFF-8472 Rev 10.4",
        0x05 => "SFF-8472 Rev 11.0",
        0x06 => "SFF-8472 Rev 11.3",
        0x07 => "SFF-8472 Rev 11.4",
        0x08 => "SFF-8472 Rev 12.3",
        0x09 => "SFF-8472 Rev 12.4",
        _ => "SFF-8472: unallocated",
    }
}

fn diagnostics(a0: &[u8; 128], a2: &[u8; 256], module: &mut Module) {
    let cal = Calibration::new(a0, a2);
    if a2[96..106].iter().all(|&b| b == 0) {
        // Temperature, voltage, bias and both powers all zero: nothing answered (the
        // driver did not read A2h, or the module does not fill it).
        module.problems.push(Problem::DiagnosticsAllZero);
        return;
    }
    module.temperature_c = finite(cal.temperature(a2, 96));
    // A module runs on 3.3 V: zero volts is a missing reading, not a measurement.
    module.voltage_v = finite(cal.voltage(a2, 98)).filter(|v| *v > 0.0);
    module.lanes.push(Lane {
        lane: 1,
        bias_ma: finite(cal.bias(a2, 100)),
        tx_power_mw: finite(cal.tx_power(a2, 102)),
        rx_power_mw: finite(cal.rx_power(a2, 104)),
        data_path_state: None,
        tx_disabled: None,
    });
    module.thresholds = Thresholds {
        temperature_c: limits(a2, 0, |b, o| cal.temperature(b, o)),
        voltage_v: limits(a2, 8, |b, o| cal.voltage(b, o)),
        bias_ma: limits(a2, 16, |b, o| cal.bias(b, o)),
        tx_power_mw: limits(a2, 24, |b, o| cal.tx_power(b, o)),
        rx_power_mw: limits(a2, 32, |b, o| cal.rx_power(b, o)),
    }
    .checked(&mut module.problems);
    if a0[OPTIONS] & OPTIONS_ALARM_FLAGS != 0 {
        alarms(a2, module);
    }
}

/// The flags of A2h 112-113 (alarms) and 116-117 (warnings), bit for bit as
/// `sfpdiag.c`'s table.
fn alarms(a2: &[u8; 256], module: &mut Module) {
    let per_byte = [
        (0, 7, Measure::Temperature, true),
        (0, 6, Measure::Temperature, false),
        (0, 5, Measure::Voltage, true),
        (0, 4, Measure::Voltage, false),
        (0, 3, Measure::Bias, true),
        (0, 2, Measure::Bias, false),
        (0, 1, Measure::TxPower, true),
        (0, 0, Measure::TxPower, false),
        (1, 7, Measure::RxPower, true),
        (1, 6, Measure::RxPower, false),
    ];
    for (base, levels) in [
        (112, [Level::HighAlarm, Level::LowAlarm]),
        (116, [Level::HighWarning, Level::LowWarning]),
    ] {
        for (byte, bit, measure, high) in per_byte {
            let level = if high { levels[0] } else { levels[1] };
            flag(
                &mut module.alarms,
                a2[base + byte],
                1 << bit,
                measure,
                level,
                Some(1).filter(|_| lane_measure(measure)),
            );
        }
    }
}

fn lane_measure(measure: Measure) -> bool {
    !matches!(measure, Measure::Temperature | Measure::Voltage)
}

/// SFF-8472 section 9.3: internally calibrated readings are in units; externally
/// calibrated ones are A/D counts converted with the slopes and offsets at A2h 76-91
/// (slope: unsigned 8.8 fixed point; offset: signed, in the reading's unit) and receive
/// power with the polynomial Rx_PWR(4..0) at A2h 56-75 (IEEE-754 big-endian floats):
/// Rx = Rx_PWR(4)·AD⁴ + Rx_PWR(3)·AD³ + Rx_PWR(2)·AD² + Rx_PWR(1)·AD + Rx_PWR(0).
///
/// ethtool's `sff8472_calibration` differs from the standard here, and this follows the
/// standard: ethtool multiplies the A/D count by Rx_PWR(1), Rx_PWR(2) and Rx_PWR(3)
/// without raising it to their powers, ignores Rx_PWR(4), and truncates every calibrated
/// value to a 16-bit integer (a negative calibrated power wraps). The thresholds are
/// converted the same way as the readings (they are A/D counts too), as ethtool does.
struct Calibration {
    external: Option<External>,
}

struct External {
    rx_pwr: [f64; 5],
    bias: (f64, f64),
    tx_power: (f64, f64),
    temperature: (f64, f64),
    voltage: (f64, f64),
}

impl Calibration {
    fn new(a0: &[u8; 128], a2: &[u8; 256]) -> Self {
        if a0[DOM_TYPE] & DOM_EXTERNAL_CAL == 0 {
            return Calibration { external: None };
        }
        let float =
            |o: usize| f64::from(f32::from_be_bytes([a2[o], a2[o + 1], a2[o + 2], a2[o + 3]]));
        let slope_offset = |o: usize| {
            let slope = f64::from(a2[o]) + f64::from(a2[o + 1]) / 256.0;
            (slope, f64::from(i16_at(a2, o + 2)))
        };
        Calibration {
            external: Some(External {
                // Rx_PWR(4) at 56 down to Rx_PWR(0) at 72; stored here by power.
                rx_pwr: [float(72), float(68), float(64), float(60), float(56)],
                bias: slope_offset(76),
                tx_power: slope_offset(80),
                temperature: slope_offset(84),
                voltage: slope_offset(88),
            }),
        }
    }

    fn linear(&self, raw: f64, pick: impl Fn(&External) -> (f64, f64)) -> f64 {
        match &self.external {
            Some(ext) => {
                let (slope, offset) = pick(ext);
                slope * raw + offset
            }
            None => raw,
        }
    }

    fn temperature(&self, b: &[u8], o: usize) -> f64 {
        // Temperature and its offset are both in 1/256 °C.
        self.linear(f64::from(i16_at(b, o)), |e| e.temperature) / 256.0
    }

    fn voltage(&self, b: &[u8], o: usize) -> f64 {
        self.linear(f64::from(u16_at(b, o)), |e| e.voltage) / 10_000.0
    }

    fn bias(&self, b: &[u8], o: usize) -> f64 {
        self.linear(f64::from(u16_at(b, o)), |e| e.bias) * 2.0 / 1000.0
    }

    fn tx_power(&self, b: &[u8], o: usize) -> f64 {
        self.linear(f64::from(u16_at(b, o)), |e| e.tx_power) / 10_000.0
    }

    fn rx_power(&self, b: &[u8], o: usize) -> f64 {
        let raw = f64::from(u16_at(b, o));
        let units = match &self.external {
            Some(ext) => ext
                .rx_pwr
                .iter()
                .enumerate()
                .map(|(power, c)| c * raw.powi(power as i32))
                .sum(),
            None => raw,
        };
        units / 10_000.0
    }
}
