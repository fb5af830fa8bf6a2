//! CMIS (QSFP-DD, OSFP, DSFP, QSFP+/SFP-DD/SFP+ with CMIS): module state and monitors in
//! the lower page, the identity in upper page 00h, the advertisements in page 01h, the
//! thresholds in page 02h, the lanes (eight a bank) in page 11h of each bank, as ethtool's
//! `cmis.c` reads them.
//!
//! Checked against public CMIS implementations (issue 52): ethtool `cmis.c`/`cmis.h`/
//! `module-common.c` (pmachata/ethtool, jbrandeb/ethtool, the later JSON-output version),
//! SONiC sonic-platform-common (`sonic_xcvr/mem_maps/public/cmis.py`,
//! `mem_maps/public/cmis/pages/page11.py`, `api/public/cmis.py`), Facebook FBOSS
//! (`qsfp_service/module/cmis/CmisModule.cpp`, `CmisFieldInfo.cpp`), Oxide
//! transceiver-control (its CMIS monitor decoder) and Mellanox mstflint (mlxlink's
//! `MlxlinkCablesCommander.cpp`). Read the same way by ethtool, SONiC and FBOSS: lower 1
//! (revision nibbles), 3 bits 3-1 (module state; its names 1-5 as ethtool and SONiC),
//! 14 and 16 (temperature, Vcc), page 00h 129-189 (identity), page 01h 160 (monitors,
//! bias multiplier), page 11h 135-152 (flags) and 154/170/186 (TX power, bias, RX power).
//! By ethtool and SONiC: lower 2 bit 7 (flat memory), lower 9 (module flags; mstflint's
//! mlxlink alone orders each nibble's bits the other way round), page 00h 203
//! (connector), page 01h 157/158 (flag support), page 02h 128-199 (thresholds, each high
//! alarm, low alarm, high warning, low warning). By ethtool and Oxide: page 01h 151 bit 4
//! (RX power kind). By ethtool only: page 01h 138 (wavelength, 0.05 nm) and 142 bits 1-0
//! (banks). By FBOSS only: page 00h 222, the checksum of 128-221 (ethtool checks none).
//! Two of ethtool's readings are outvoted: see the bias multiplier and the lane bits.

use crate::common::{
    ascii, bias_ma, check, connector_name, empty_module, flag, i16_at, limits, oui, power_mw,
    temperature_c, u16_at, voltage_v, LEVELS,
};
use crate::model::{Family, Lane, Level, Measure, Module, Problem, Thresholds};
use crate::{Eeprom, Page};

const FLAT_MEMORY: u8 = 1 << 7;
const LANES_PER_BANK: u8 = 8;
/// Page 01h byte 160: which lane monitors exist, and the TX bias multiplier.
const MONITORS: usize = 160;
const MON_BIAS: u8 = 1 << 0;
const MON_TX_POWER: u8 = 1 << 1;
const MON_RX_POWER: u8 = 1 << 2;

pub(crate) fn decode(eeprom: &Eeprom) -> Module {
    let lower = eeprom.lower();
    let mut module = empty_module(Family::Cmis, lower[0]);
    module.revision_compliance = Some(format!("CMIS Rev. {}.{}", lower[1] >> 4, lower[1] & 0x0f));
    let flat = lower[2] & FLAT_MEMORY != 0;
    module.flat_memory = Some(flat);
    module.module_state = Some(state(lower[3]));
    match eeprom.page(0, 0) {
        Some(page00) => {
            inventory(page00, &mut module);
            // Page 00h's checksum (byte 222) covers 128-221.
            check(
                &mut module.problems,
                "page 00h checksum",
                &page00[0..94],
                page00[94],
            );
        }
        None => module.problems.push(Problem::PageMissing {
            page: "00h".to_string(),
        }),
    }
    if flat {
        // A flat module (a passive cable) has no diagnostics pages.
        module.problems.push(Problem::DiagnosticsNotImplemented);
        return module;
    }
    module.diagnostics_implemented = true;
    if lower[86] != 0xff {
        // The first application's lane counts, as `lanes_in_use` reads them.
        module.host_lane_count = Some(lower[88] >> 4).filter(|n| *n != 0);
        module.media_lane_count = Some(lower[88] & 0x0f).filter(|n| *n != 0);
    }
    let page01 = eeprom.page(0, 1);
    if !module_monitors(lower, page01, &mut module) {
        return module;
    }
    module_alarms(lower[9], &mut module);
    let Some(page01) = page01 else {
        module.problems.push(Problem::PageMissing {
            page: "01h".to_string(),
        });
        return module;
    };
    if let Some(wavelength) = Some(u16_at(page01, 138 - 128)).filter(|w| *w != 0) {
        module.wavelength_nm = Some(f64::from(wavelength) / 20.0);
    }
    module.rx_power_kind = Some(if page01[151 - 128] & 0x10 != 0 {
        "average"
    } else {
        "OMA"
    });
    // Bits 4-3: the bias (and its thresholds) times 1, 2 or 4; 3 is reserved, read as 1.
    // FBOSS (`getTxBiasMultiplier`, `getTxBias(value) * biasMultiplier`, thresholds too),
    // SONiC (`tx_bias[key] *= scale`, thresholds `* tx_bias_scale`), Oxide
    // transceiver-control (`decode_bias_current(bytes) * tx_bias_scale`) and mstflint
    // (`tx_bias_lane * pow(2, tx_bias_scaling_factor)`) multiply; ethtool alone divides
    // (`bias_cur >>= bias_mul`), which shows a x4 module's bias 16 times too small. Real
    // modules set it: Juniper's dump of an Acacia 400ZR+ has byte 160 = 0x17 (x4).
    let multiplier = match (page01[MONITORS - 128] >> 3) & 0x03 {
        1 => 2.0,
        2 => 4.0,
        _ => 1.0,
    };
    match eeprom.page(0, 2) {
        Some(page02) => thresholds(page02, multiplier, &mut module),
        None => module.problems.push(Problem::PageMissing {
            page: "02h".to_string(),
        }),
    }
    let banks = match page01[142 - 128] & 0x03 {
        1 => 2,
        2 => 4,
        _ => 1,
    };
    let in_use = lanes_in_use(lower, page01);
    for bank in 0..banks {
        match eeprom.page(bank, 0x11) {
            Some(page11) => lanes(bank, in_use, page01, page11, multiplier, &mut module),
            None => module.problems.push(Problem::PageMissing {
                page: format!("11h (bank {bank})"),
            }),
        }
    }
    module
}

/// Temperature and supply voltage (lower 14-17), each where page 01h byte 159 says the
/// module has that monitor: bit 0 temperature, bit 1 supply voltage (CMIS 5.2 8.4.7
/// "Supported Monitors Advertisement", `TempMonSupported`/`VccMonSupported`); without page
/// 01h both are taken as there. `false` when the monitors it has all read 0 (not answered:
/// no reading of the module can be trusted).
fn module_monitors(lower: &Page, page01: Option<&Page>, module: &mut Module) -> bool {
    let supported = page01.map_or(0x03, |p| p[159 - 128]);
    let (temperature, vcc) = (i16_at(lower, 14), u16_at(lower, 16));
    let (has_temperature, has_vcc) = (supported & 0x01 != 0, supported & 0x02 != 0);
    let answered = (has_temperature && temperature != 0) || (has_vcc && vcc != 0);
    if (has_temperature || has_vcc) && !answered {
        module.problems.push(Problem::DiagnosticsAllZero);
        return false;
    }
    for (has, measure) in [
        (has_temperature, Measure::Temperature),
        (has_vcc, Measure::Voltage),
    ] {
        if !has {
            module
                .problems
                .push(Problem::MonitorNotImplemented { measure });
        }
    }
    module.temperature_c = has_temperature.then(|| temperature_c(temperature));
    module.voltage_v = (has_vcc && vcc != 0).then(|| voltage_v(vcc));
    true
}

/// Lower byte 3 bits 3-1, the module state, as ethtool prints it.
fn state(byte: u8) -> String {
    let code = (byte & 0x0e) >> 1;
    let name = match code {
        1 => "ModuleLowPwr",
        2 => "ModulePwrUp",
        3 => "ModuleReady",
        4 => "ModulePwrDn",
        5 => "ModuleFault",
        _ => "Unknown",
    };
    format!("0x{code:02x} ({name})")
}

fn inventory(page00: &Page, module: &mut Module) {
    let at = |offset: usize| offset - 128;
    module.vendor = ascii(&page00[at(129)..at(145)]);
    module.vendor_oui = Some(oui(&page00[at(145)..at(148)]));
    module.part_number = ascii(&page00[at(148)..at(164)]);
    module.revision = ascii(&page00[at(164)..at(166)]);
    module.serial_number = ascii(&page00[at(166)..at(182)]);
    module.date_code = ascii(&page00[at(182)..at(190)]);
    let connector = page00[at(203)];
    module.connector = Some(format!("0x{connector:02x} ({})", connector_name(connector)));
}

/// Lower byte 9: temperature flags in bits 0-3, supply voltage flags in bits 4-7, each
/// high alarm, low alarm, high warning, low warning from the low bit up.
fn module_alarms(byte: u8, module: &mut Module) {
    for (shift, measure) in [(0, Measure::Temperature), (4, Measure::Voltage)] {
        for (i, level) in LEVELS.iter().enumerate() {
            flag(
                &mut module.alarms,
                byte,
                1 << (shift + i),
                measure,
                *level,
                None,
            );
        }
    }
}

fn thresholds(page02: &Page, multiplier: f64, module: &mut Module) {
    let at = |offset: usize| offset - 128;
    module.thresholds = Thresholds {
        temperature_c: limits(page02, at(128), |b, o| temperature_c(i16_at(b, o))),
        voltage_v: limits(page02, at(136), |b, o| voltage_v(u16_at(b, o))),
        tx_power_mw: limits(page02, at(176), |b, o| power_mw(u16_at(b, o))),
        bias_ma: limits(page02, at(184), |b, o| bias_ma(u16_at(b, o)) * multiplier),
        rx_power_mw: limits(page02, at(192), |b, o| power_mw(u16_at(b, o))),
    }
    .checked(&mut module.problems);
}

/// The media lanes of a bank that carry the first application, one bit a lane (bit 0 is
/// lane 1). Lower byte 86 is the first application descriptor's host interface ID (0xff:
/// no application); byte 88 holds the host lane count in bits 7-4 and the media lane
/// count in bits 3-0, as SONiC's `mem_maps/public/cmis.py` reads them (`MEDIA_LANE_COUNT`
/// bits 0-3 and `HOST_LANE_COUNT` bits 4-7 of byte 88); page 01h byte 176 is the first
/// application's media lane assignment options (a bit for each lane a data path may start
/// on; CMIS 5.2 table 8-52, bytes 176-190). A module lights only those lanes: a real Arista
/// QDD-400G-XDR4 reads 0 mA and 0 mW on lanes 5-8, a real Acacia 400ZR+ advertises one
/// media lane (byte 88 = 0x81). No count (0, or no application): every lane.
fn lanes_in_use(lower: &Page, page01: &Page) -> u8 {
    let count = lower[88] & 0x0f;
    if lower[86] == 0xff || count == 0 || count > LANES_PER_BANK {
        return 0xff;
    }
    let block = ((1u16 << count) - 1) as u8;
    let starts = match page01[176 - 128] {
        0 => 0x01,
        options => options,
    };
    (0..LANES_PER_BANK)
        .filter(|start| starts & (1 << start) != 0)
        .fold(0u8, |used, start| used | block << start)
}

/// Host lane `i` (0-7) of a bank's data path state: page 11h bytes 128-131, two lanes a
/// byte, lane 1 in byte 128 bits 3-0 and lane 2 in its bits 7-4 (SONiC's page 11h map:
/// `DP<lane>State` at `128 + (lane-1)/2`, bits 0-3 for an odd lane, 4-7 for an even
/// one), the codes as ethtool's `cmis_dp_state_str` names them (CMIS 5 table 8-74:
/// 1 DPDeactivated, 2 DPInit, 3 DPDeinit, 4 DPActivated, 5 DPTxTurnOn, 6 DPTxTurnOff,
/// 7 DPInitialized).
fn data_path_state(page11: &Page, i: u8) -> String {
    let byte = page11[usize::from(i / 2)];
    let code = if i.is_multiple_of(2) {
        byte & 0x0f
    } else {
        byte >> 4
    };
    match code {
        1 => "DPDeactivated".into(),
        2 => "DPInit".into(),
        3 => "DPDeinit".into(),
        4 => crate::model::DP_ACTIVATED.into(),
        5 => "DPTxTurnOn".into(),
        6 => "DPTxTurnOff".into(),
        7 => "DPInitialized".into(),
        _ => format!("reserved (0x{code:x})"),
    }
}

/// One bank's eight lanes from its page 11h: the monitors page 01h advertises, and the
/// lane flags (one bit a lane) of those monitors, loss of signal and transmitter fault.
/// A lane outside `in_use` is listed with no readings.
fn lanes(bank: u8, in_use: u8, page01: &Page, page11: &Page, multiplier: f64, module: &mut Module) {
    let at = |offset: usize| offset - 128;
    let monitors = page01[at(MONITORS)];
    let (tx_flags, rx_flags) = (page01[at(157)], page01[at(158)]);
    for i in 0..LANES_PER_BANK {
        let lane = bank * LANES_PER_BANK + i + 1;
        let word = |base: usize| u16_at(page11, at(base) + 2 * usize::from(i));
        let used = in_use & (1 << i) != 0;
        let has = |monitor: u8| used && monitors & monitor != 0;
        module.lanes.push(Lane {
            lane,
            bias_ma: has(MON_BIAS).then(|| bias_ma(word(170)) * multiplier),
            tx_power_mw: has(MON_TX_POWER).then(|| power_mw(word(154))),
            rx_power_mw: has(MON_RX_POWER).then(|| power_mw(word(186))),
            data_path_state: Some(data_path_state(page11, i)),
            tx_disabled: None,
        });
        // Lane n of a bank is bit n-1 of each flag byte: SONiC's page 11h map
        // (`RegBitField(lane-1)`), FBOSS's `getChannelFlags` (`data[k] & (1 << channel)`)
        // and ethtool's own LOS/LOL/fault lines (`module_show_lane_status`) agree.
        // ethtool's alarm/warning lines test `byte & chan` (chan = bank * 8 + lane - 1),
        // which never shows lane 1 and puts a lane's flag on other lanes; mstflint's
        // mlxlink makes the same mistake (the lane index passed as `getStatusBit`'s mask).
        // A real capture agrees with the bit: the same Acacia 400ZR+ dump (one media lane,
        // lower byte 88 = 0x81) has rx LOS byte 147 = 0x01 (docs/OPTICS.md).
        let bit = 1 << i;
        let byte = |offset: usize| page11[at(offset)];
        let alarms = &mut module.alarms;
        if tx_flags & (1 << 0) != 0 {
            flag(
                alarms,
                byte(135),
                bit,
                Measure::TxFault,
                Level::Set,
                Some(lane),
            );
        }
        if tx_flags & (1 << 1) != 0 {
            flag(
                alarms,
                byte(136),
                bit,
                Measure::TxLos,
                Level::Set,
                Some(lane),
            );
        }
        if rx_flags & (1 << 1) != 0 {
            flag(
                alarms,
                byte(147),
                bit,
                Measure::RxLos,
                Level::Set,
                Some(lane),
            );
        }
        for (first, measure, advertised) in [
            (139, Measure::TxPower, MON_TX_POWER),
            (143, Measure::Bias, MON_BIAS),
            (149, Measure::RxPower, MON_RX_POWER),
        ] {
            if monitors & advertised == 0 {
                continue;
            }
            for (k, level) in LEVELS.iter().enumerate() {
                flag(alarms, byte(first + k), bit, measure, *level, Some(lane));
            }
        }
    }
}
