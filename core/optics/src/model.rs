//! What a decoded module says: inventory, readings in the units `ethtool -m` prints (°C, V,
//! mA, mW; dBm derived), thresholds, the flags that are on, and the problems of the read.
//! A reading the module does not give, or gives in a way that cannot be trusted, is `None`:
//! never a zero.

use serde::Serialize;

/// The memory map family (which standard lays the bytes out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// SFF-8472 (SFP, SFP+, SFP28): A0h and A2h.
    Sff8472,
    /// SFF-8636 (QSFP+, QSFP28).
    Sff8636,
    /// CMIS (QSFP-DD, OSFP, ...).
    Cmis,
}

impl Family {
    /// Whether the module's alarm and warning flags are latched (set when the level was
    /// crossed, cleared when read), so that a set flag says "since the last read", not
    /// "now". SFF-8636 names its flags "L-Temp High Alarm" ... (lower bytes 3-14) and CMIS
    /// marks its module flags (lower byte 9) and lane flags (page 11h 135-152) "Latched
    /// ... Flag", type RO/COR (clear on read). SFF-8472's A2h bytes 112-117 are not:
    /// each says how the last measurement compares with its threshold (the DS1876 SFP
    /// controller's A2h alarm registers: "1 = last measurement was above threshold
    /// setting"), so they are judged as current.
    pub fn flags_latched(self) -> bool {
        matches!(self, Family::Sff8636 | Family::Cmis)
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Sff8472 => "SFF-8472",
            Family::Sff8636 => "SFF-8636",
            Family::Cmis => "CMIS",
        }
    }
}

/// A decoded module.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Module {
    pub family: Family,
    /// SFF-8024 identifier byte (byte 0).
    pub identifier_code: u8,
    /// Its name as ethtool prints it ("SFP/SFP+/SFP28", "QSFP28", "QSFP-DD ...").
    pub identifier: String,
    pub vendor: Option<String>,
    /// Vendor OUI as `aa:bb:cc`.
    pub vendor_oui: Option<String>,
    pub part_number: Option<String>,
    pub revision: Option<String>,
    pub serial_number: Option<String>,
    /// Date code as the module stores it (`YYMMDD` plus an optional lot code).
    pub date_code: Option<String>,
    /// SFF-8024 connector byte and its name.
    pub connector: Option<String>,
    /// Laser wavelength in nm (SFF-8472 byte 60-61, SFF-8636 186-187), optics only.
    pub wavelength_nm: Option<f64>,
    /// The standard's revision the module claims ("SFF-8472 rev 12.3", "CMIS 4.0", ...).
    pub revision_compliance: Option<String>,
    /// SFF-8636/CMIS: only page 00h exists (no thresholds, no lane pages).
    pub flat_memory: Option<bool>,
    /// CMIS module state (`ModuleReady`, `ModuleLowPwr`, ...).
    pub module_state: Option<String>,
    /// CMIS: the first application's host and media lane counts (lower byte 88 bits 7-4
    /// and 3-0; `None` without an application). Equal counts map host lane n to media
    /// lane n, which is what lets a lane's data path state speak for its light.
    pub host_lane_count: Option<u8>,
    pub media_lane_count: Option<u8>,
    /// Whether the module says it implements diagnostics at all.
    pub diagnostics_implemented: bool,
    /// The receive power kind: "average" or "OMA" (SFF-8472 byte 92 bit 3, SFF-8636 byte
    /// 220 bit 3); `None` when there are no diagnostics.
    pub rx_power_kind: Option<&'static str>,
    /// Module temperature, °C.
    pub temperature_c: Option<f64>,
    /// Supply voltage, V.
    pub voltage_v: Option<f64>,
    pub lanes: Vec<Lane>,
    pub thresholds: Option<Thresholds>,
    /// The alarm and warning flags that are set.
    pub alarms: Vec<Alarm>,
    /// What is wrong with the read or the module's answers.
    pub problems: Vec<Problem>,
}

/// One lane (channel), numbered from 1 as ethtool does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lane {
    pub lane: u8,
    pub bias_ma: Option<f64>,
    pub tx_power_mw: Option<f64>,
    pub rx_power_mw: Option<f64>,
    /// CMIS: the data path state of host lane `lane` (page 11h bytes 128-131, a nibble a
    /// lane), as ethtool names it ("DPActivated", "DPDeactivated", ...; "reserved (0xN)"
    /// otherwise). `None` for SFF-8472/SFF-8636, which have no data path state.
    pub data_path_state: Option<String>,
    /// SFF-8636: the host disabled the lane's transmitter (lower byte 86, bit `lane - 1`;
    /// ethtool `qsfp.h` `SFF8636_TX_DISABLE_1`..`_4`). `None` where not read (SFF-8472,
    /// CMIS).
    pub tx_disabled: Option<bool>,
}

impl Lane {
    /// The lane's data path is known to be other than activated: unused (a breakout port
    /// not configured), held down by the host, or coming up; its light is not a fault. A
    /// reserved code says nothing either way.
    pub fn data_path_inactive(&self) -> bool {
        self.data_path_state
            .as_deref()
            .is_some_and(|s| s != DP_ACTIVATED && !s.starts_with("reserved"))
    }
}

/// The data path state of a lane that carries traffic (CMIS DPState 4).
pub const DP_ACTIVATED: &str = "DPActivated";

/// High/low alarm and warning levels of one measure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    pub high_alarm: f64,
    pub low_alarm: f64,
    pub high_warning: f64,
    pub low_warning: f64,
}

/// The module's thresholds, in the readings' units. A measure whose four levels are all
/// zero (not programmed, or not answered), or out of order ([`Limits::in_order`]), is
/// `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thresholds {
    pub temperature_c: Option<Limits>,
    pub voltage_v: Option<Limits>,
    pub bias_ma: Option<Limits>,
    pub tx_power_mw: Option<Limits>,
    pub rx_power_mw: Option<Limits>,
}

impl Limits {
    /// low alarm <= low warning <= high warning <= high alarm, and high alarm above low
    /// alarm: levels a reading can be judged by. Out of order, every reading crosses one
    /// (a high alarm of 0 under a low warning of 0 says every reading is past it).
    pub fn in_order(&self) -> bool {
        self.low_alarm <= self.low_warning
            && self.low_warning <= self.high_warning
            && self.high_warning <= self.high_alarm
            && self.high_alarm > self.low_alarm
    }
}

impl Thresholds {
    /// Each measure's thresholds out of order dropped, a
    /// [`Problem::ThresholdsOutOfOrder`] said for it; `None` when no measure is left.
    pub(crate) fn checked(mut self, problems: &mut Vec<Problem>) -> Option<Self> {
        for (measure, limits) in [
            (Measure::Temperature, &mut self.temperature_c),
            (Measure::Voltage, &mut self.voltage_v),
            (Measure::Bias, &mut self.bias_ma),
            (Measure::TxPower, &mut self.tx_power_mw),
            (Measure::RxPower, &mut self.rx_power_mw),
        ] {
            if limits.is_some_and(|l| !l.in_order()) {
                *limits = None;
                problems.push(Problem::ThresholdsOutOfOrder { measure });
            }
        }
        self.or_none()
    }

    /// `None` when no measure has thresholds.
    fn or_none(self) -> Option<Self> {
        let any = self.temperature_c.is_some()
            || self.voltage_v.is_some()
            || self.bias_ma.is_some()
            || self.tx_power_mw.is_some()
            || self.rx_power_mw.is_some();
        any.then_some(self)
    }
}

/// What a flag is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    Temperature,
    Voltage,
    Bias,
    TxPower,
    RxPower,
    /// CMIS/SFF-8636 loss of signal on receive (a dark lane).
    RxLos,
    /// CMIS/SFF-8636 loss of signal on transmit.
    TxLos,
    /// CMIS/SFF-8636 transmitter fault.
    TxFault,
}

impl Measure {
    pub fn name(self) -> &'static str {
        match self {
            Measure::Temperature => "temperature",
            Measure::Voltage => "voltage",
            Measure::Bias => "laser bias current",
            Measure::TxPower => "laser output power",
            Measure::RxPower => "receiver power",
            Measure::RxLos => "rx loss of signal",
            Measure::TxLos => "tx loss of signal",
            Measure::TxFault => "tx fault",
        }
    }
}

/// Which level a flag is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    HighAlarm,
    LowAlarm,
    HighWarning,
    LowWarning,
    /// A state flag (LOS, fault): no level.
    Set,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::HighAlarm => "high alarm",
            Level::LowAlarm => "low alarm",
            Level::HighWarning => "high warning",
            Level::LowWarning => "low warning",
            Level::Set => "set",
        }
    }
}

/// One flag that is on. `lane` is `None` for module-level flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Alarm {
    pub measure: Measure,
    pub level: Level,
    pub lane: Option<u8>,
    /// The flag is latched ([`Family::flags_latched`]: SFF-8636, CMIS): it says the level
    /// was crossed since the module's flags were last read (by anyone: each read clears
    /// them), not that it is crossed now.
    pub latched: bool,
}

/// What is wrong with a read, said as such rather than as zero readings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// A checksum (SFF-8472/SFF-8636 `CC_BASE`, `CC_EXT`, SFF-8472 `CC_DMI`) does not match
    /// the bytes it covers: the read (or the module) is corrupt; readings are withheld
    /// where the checksum covers them.
    Checksum {
        name: &'static str,
        stored: u8,
        computed: u8,
    },
    /// The DOM type byte (SFF-8472 byte 92 bit 6) says diagnostics are not implemented.
    DiagnosticsNotImplemented,
    /// Diagnostics are claimed but every reading is zero: the driver or module does not
    /// answer them (a zero temperature, voltage and power together is not a module).
    DiagnosticsAllZero,
    /// The module says it does not measure `measure` (SFF-8636 byte 220 bit 2 for transmit
    /// power, CMIS page 01h byte 159 for temperature and supply voltage): the reading is
    /// absent, whatever its bytes hold. Not a fault: a module design.
    MonitorNotImplemented { measure: Measure },
    /// The module's thresholds of `measure` are not in order (low alarm <= low warning <=
    /// high warning <= high alarm, high alarm above low alarm): partly programmed, or
    /// converted by calibration constants that are zero. That measure's thresholds are
    /// absent: nothing can be judged by them.
    ThresholdsOutOfOrder { measure: Measure },
    /// A page the decoder needs was not read (`page` as in the standard, e.g. "A2h", "03h").
    PageMissing { page: String },
    /// The identifier byte is not one the decoder knows.
    UnknownIdentifier { code: u8 },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Checksum {
                name,
                stored,
                computed,
            } => write!(
                f,
                "checksum {name} fails: stored 0x{stored:02x}, computed 0x{computed:02x} (corrupt read)"
            ),
            Problem::DiagnosticsNotImplemented => {
                write!(f, "the module says it has no diagnostics (DOM type byte)")
            }
            Problem::DiagnosticsAllZero => write!(
                f,
                "diagnostics claimed but every reading is zero: not answered, readings withheld"
            ),
            Problem::MonitorNotImplemented { measure } => write!(
                f,
                "the module does not monitor {}: that reading is absent",
                measure.name()
            ),
            Problem::ThresholdsOutOfOrder { measure } => write!(
                f,
                "the module's {} thresholds are out of order (not low alarm <= low warning <= high warning <= high alarm): not judged by them",
                measure.name()
            ),
            Problem::PageMissing { page } => write!(f, "page {page} was not read"),
            Problem::UnknownIdentifier { code } => {
                write!(f, "unknown identifier 0x{code:02x}")
            }
        }
    }
}

/// Power in mW as dBm, as ethtool prints it (`-inf` for 0).
pub fn mw_to_dbm(mw: f64) -> f64 {
    10.0 * mw.log10()
}
