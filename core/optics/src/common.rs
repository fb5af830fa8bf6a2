//! Helpers the three decoders share: big-endian words, ASCII fields, the units of
//! SFF-8472/SFF-8636/CMIS (ethtool's `sff-common.h`), checksums, SFF-8024 names.

use crate::model::{Alarm, Family, Level, Limits, Measure, Module, Problem};

/// Big-endian unsigned 16-bit word at `offset`.
pub(crate) fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    u16::from_be_bytes([bytes[offset], bytes[offset + 1]])
}

/// Big-endian signed 16-bit word at `offset`.
pub(crate) fn i16_at(bytes: &[u8], offset: usize) -> i16 {
    i16::from_be_bytes([bytes[offset], bytes[offset + 1]])
}

/// Temperature: signed, 1/256 °C.
pub(crate) fn temperature_c(raw: i16) -> f64 {
    f64::from(raw) / 256.0
}

/// Supply voltage: 100 µV.
pub(crate) fn voltage_v(raw: u16) -> f64 {
    f64::from(raw) / 10_000.0
}

/// Laser bias current: 2 µA.
pub(crate) fn bias_ma(raw: u16) -> f64 {
    f64::from(raw) * 2.0 / 1000.0
}

/// Optical power: 0.1 µW.
pub(crate) fn power_mw(raw: u16) -> f64 {
    f64::from(raw) / 10_000.0
}

/// An ASCII field with trailing spaces (and NULs) trimmed; `None` when empty. Bytes outside
/// printable ASCII are kept as `?`, not dropped, so that a corrupt field shows.
pub(crate) fn ascii(bytes: &[u8]) -> Option<String> {
    let text: String = bytes
        .iter()
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    let trimmed = text.trim_end_matches([' ', '?']).trim_start();
    // A field of NULs (never programmed) is absent, not "????".
    if bytes.iter().all(|&b| b == 0 || b == b' ') || trimmed.is_empty() {
        return None;
    }
    Some(trimmed.to_string())
}

/// The vendor OUI as `aa:bb:cc`.
pub(crate) fn oui(bytes: &[u8]) -> String {
    format!("{:02x}:{:02x}:{:02x}", bytes[0], bytes[1], bytes[2])
}

/// The SFF checksum: the low 8 bits of the sum of the bytes it covers.
pub(crate) fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |sum, &b| sum.wrapping_add(b))
}

/// SFF-8024 table 4-1, the names ethtool's `sff-common.c` prints.
pub(crate) fn identifier_name(id: u8) -> &'static str {
    match id {
        0x00 => "no module present, unknown, or unspecified",
        0x01 => "GBIC",
        0x02 => "module soldered to motherboard",
        0x03 => "SFP",
        0x04 => "300 pin XBI",
        0x05 => "XENPAK",
        0x06 => "XFP",
        0x07 => "XFF",
        0x08 => "XFP-E",
        0x09 => "XPAK",
        0x0a => "X2",
        0x0b => "DWDM-SFP",
        0x0c => "QSFP",
        0x0d => "QSFP+",
        0x0e => "CXP",
        0x0f => "Shielded Mini Multilane HD 4X",
        0x10 => "Shielded Mini Multilane HD 8X",
        0x11 => "QSFP28",
        0x12 => "CXP2/CXP28",
        0x13 => "CDFP Style 1/Style 2",
        0x14 => "Shielded Mini Multilane HD 4X Fanout Cable",
        0x15 => "Shielded Mini Multilane HD 8X Fanout Cable",
        0x16 => "CDFP Style 3",
        0x17 => "microQSFP",
        0x18 => "QSFP-DD Double Density 8X Pluggable Transceiver",
        0x19 => "OSFP 8X Pluggable Transceiver",
        0x1a => "SFP-DD Double Density 2X Pluggable Transceiver",
        0x1b => "DSFP Dual Small Form Factor Pluggable Transceiver",
        0x1c => "x4 MiniLink/OcuLink",
        0x1d => "x8 MiniLink",
        0x1e => "QSFP+ or later with CMIS",
        _ if id >= 0x80 => "vendor specific",
        _ => "reserved or unknown",
    }
}

/// SFF-8024 table 4-3 connector names (ethtool's `sff_show_connector`).
pub(crate) fn connector_name(code: u8) -> &'static str {
    match code {
        0x00 => "unknown or unspecified",
        0x01 => "SC",
        0x02 => "Fibre Channel Style 1 copper",
        0x03 => "Fibre Channel Style 2 copper",
        0x04 => "BNC/TNC",
        0x05 => "Fibre Channel coaxial headers",
        0x06 => "FibreJack",
        0x07 => "LC",
        0x08 => "MT-RJ",
        0x09 => "MU",
        0x0a => "SG",
        0x0b => "Optical pigtail",
        0x0c => "MPO Parallel Optic",
        0x0d => "MPO Parallel Optic - 2x16",
        0x20 => "HSSDC II",
        0x21 => "Copper pigtail",
        0x22 => "RJ45",
        0x23 => "No separable connector",
        0x24 => "MXC 2x16",
        0x25 => "CS optical connector",
        0x26 => "Mini CS optical connector",
        0x27 => "MPO 2x12",
        0x28 => "MPO 1x16",
        _ if code >= 0x80 => "vendor specific",
        _ => "reserved or unknown",
    }
}

/// A module with its identifier and nothing read yet.
pub(crate) fn empty_module(family: Family, id: u8) -> Module {
    Module {
        family,
        identifier_code: id,
        identifier: identifier_name(id).to_string(),
        vendor: None,
        vendor_oui: None,
        part_number: None,
        revision: None,
        serial_number: None,
        date_code: None,
        connector: None,
        wavelength_nm: None,
        revision_compliance: None,
        flat_memory: None,
        module_state: None,
        host_lane_count: None,
        media_lane_count: None,
        diagnostics_implemented: false,
        rx_power_kind: None,
        temperature_c: None,
        voltage_v: None,
        lanes: Vec::new(),
        thresholds: None,
        alarms: Vec::new(),
        problems: Vec::new(),
    }
}

/// Four thresholds (high alarm, low alarm, high warning, low warning: the order of
/// SFF-8472, SFF-8636 page 03h and CMIS page 02h) as consecutive 16-bit words from
/// `offset`, converted by `value`; `None` when all four words are zero (not programmed)
/// or a converted value is not a number.
pub(crate) fn limits(
    bytes: &[u8],
    offset: usize,
    value: impl Fn(&[u8], usize) -> f64,
) -> Option<Limits> {
    if bytes[offset..offset + 8].iter().all(|&b| b == 0) {
        return None;
    }
    let limits = Limits {
        high_alarm: value(bytes, offset),
        low_alarm: value(bytes, offset + 2),
        high_warning: value(bytes, offset + 4),
        low_warning: value(bytes, offset + 6),
    };
    let all = [
        limits.high_alarm,
        limits.low_alarm,
        limits.high_warning,
        limits.low_warning,
    ];
    all.iter().all(|v| v.is_finite()).then_some(limits)
}

/// A computed reading, `None` when it is not a number (external calibration constants
/// that are NaN or infinite).
pub(crate) fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

/// The four levels in the order the standards lay out thresholds and flags.
pub(crate) const LEVELS: [Level; 4] = [
    Level::HighAlarm,
    Level::LowAlarm,
    Level::HighWarning,
    Level::LowWarning,
];

/// Pushes an alarm when `byte & mask` is set.
pub(crate) fn flag(
    alarms: &mut Vec<Alarm>,
    byte: u8,
    mask: u8,
    measure: Measure,
    level: Level,
    lane: Option<u8>,
) {
    if byte & mask != 0 {
        alarms.push(Alarm {
            measure,
            level,
            lane,
            // Set by `decode` from the family.
            latched: false,
        });
    }
}

/// Compares a stored checksum with the sum of the bytes it covers; a failure is a
/// [`Problem::Checksum`] pushed to `problems` (and `false` returned).
pub(crate) fn check(
    problems: &mut Vec<Problem>,
    name: &'static str,
    covered: &[u8],
    stored: u8,
) -> bool {
    let computed = checksum(covered);
    if computed == stored {
        return true;
    }
    problems.push(Problem::Checksum {
        name,
        stored,
        computed,
    });
    false
}
