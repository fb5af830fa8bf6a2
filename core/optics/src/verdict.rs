//! One verdict per transceiver module, for every command that judges one (`doctor`'s
//! optics topic, `health`): the readings against the thresholds the module itself
//! carries, the flags it has set, a dark lane on a lit module, and the problems of the
//! read, each a [`ModuleFinding`] with its level and fix. Each command renders the
//! verdict in its own scale, so a module is never healthy to one and faulty to the other.
//!
//! The words are the evidence both print; they carry what the module and the read said,
//! so a renderer that prints on one line escapes control characters itself.

use crate::model::{Alarm, Level, Limits, Measure, Module, Problem};
use crate::Eeprom;

/// How a module (or one finding of it) is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModuleLevel {
    /// Its readings are within the module's thresholds, nothing is wrong.
    Ok,
    /// Short of a fault: a reading at a warning level, a read that cannot be trusted.
    Warn,
    /// A reading at an alarm level, a dark lane among lit ones.
    Fail,
    /// Nothing could be judged: the module has no diagnostics, or reads none.
    Unjudged,
}

impl ModuleLevel {
    /// Severity, for "the worst finding": an unjudged part ranks above nothing found.
    fn rank(self) -> u8 {
        match self {
            ModuleLevel::Ok => 0,
            ModuleLevel::Unjudged => 1,
            ModuleLevel::Warn => 2,
            ModuleLevel::Fail => 3,
        }
    }
}

/// One thing found: its level, what it is in words, and what to do (empty: nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFinding {
    pub level: ModuleLevel,
    pub what: String,
    pub fix: String,
}

/// A module's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleVerdict {
    /// The worst finding's level; [`ModuleLevel::Ok`] with readings and no finding,
    /// [`ModuleLevel::Unjudged`] with neither.
    pub level: ModuleLevel,
    /// "QSFP28 ACME OPTICS QSFP-100G-SR4 SN 123 (SFF-8636)"; empty when the memory does
    /// not decode.
    pub inventory: String,
    /// What was read that could not be, as the reader said it ("bank 0 page 03h: ...").
    pub unread: Vec<String>,
    /// The readings in words ("41.2 °C, rx power by lane 1: 0.512 mW, ... within the
    /// module's thresholds"), or "no readings".
    pub readings: String,
    pub findings: Vec<ModuleFinding>,
}

impl ModuleVerdict {
    /// The fixes of the findings, each once, in the order found.
    pub fn fixes(&self) -> Vec<&str> {
        let mut fixes: Vec<&str> = Vec::new();
        for f in &self.findings {
            if !f.fix.is_empty() && !fixes.contains(&f.fix.as_str()) {
                fixes.push(&f.fix);
            }
        }
        fixes
    }
}

/// The verdict on the module whose memory is `eeprom`; `unread` what the reader could
/// not read (said, not judged).
pub fn judge_module(eeprom: &Eeprom, unread: &[String]) -> ModuleVerdict {
    let m = match crate::decode(eeprom) {
        Ok(m) => m,
        Err(e) => {
            return ModuleVerdict {
                level: ModuleLevel::Warn,
                inventory: String::new(),
                unread: Vec::new(),
                readings: "no readings".into(),
                findings: vec![ModuleFinding {
                    level: ModuleLevel::Warn,
                    what: format!("the module's memory does not decode: {e}"),
                    fix: "reseat the module; if it persists, replace it".into(),
                }],
            }
        }
    };
    let mut findings = judge(&m);
    for p in &m.problems {
        let level = match p {
            Problem::DiagnosticsNotImplemented | Problem::MonitorNotImplemented { .. } => {
                ModuleLevel::Unjudged
            }
            _ => ModuleLevel::Warn,
        };
        findings.push(ModuleFinding {
            level,
            what: p.to_string(),
            fix: fix_for_problem(p),
        });
    }
    let level = findings
        .iter()
        .map(|f| f.level)
        .max_by_key(|l| l.rank())
        .unwrap_or(if has_readings(&m) {
            ModuleLevel::Ok
        } else {
            ModuleLevel::Unjudged
        });
    ModuleVerdict {
        level,
        inventory: inventory(&m),
        unread: unread.to_vec(),
        readings: readings(&m),
        findings,
    }
}

fn inventory(m: &Module) -> String {
    let t = |o: &Option<String>| o.clone().unwrap_or_else(|| "?".into());
    format!(
        "{} {} {} SN {} ({})",
        m.identifier,
        t(&m.vendor),
        t(&m.part_number),
        t(&m.serial_number),
        m.family.name()
    )
}

fn has_readings(m: &Module) -> bool {
    m.temperature_c.is_some() || m.lanes.iter().any(|l| l.rx_power_mw.is_some())
}

fn readings(m: &Module) -> String {
    let mut s = Vec::new();
    if let Some(t) = m.temperature_c {
        s.push(format!("{t:.1} °C"));
    }
    let rx: Vec<String> = m
        .lanes
        .iter()
        .filter_map(|l| l.rx_power_mw.map(|p| format!("{}: {p:.3} mW", l.lane)))
        .collect();
    if !rx.is_empty() {
        s.push(format!("rx power by lane {}", rx.join(", ")));
    }
    if s.is_empty() {
        "no readings".into()
    } else {
        format!("{} within the module's thresholds", s.join(", "))
    }
}

fn fix_for_problem(p: &Problem) -> String {
    match p {
        Problem::DiagnosticsNotImplemented | Problem::MonitorNotImplemented { .. } => String::new(),
        _ => "reseat the module; if its memory still reads wrong, replace it".into(),
    }
}

/// What to do about `measure` out of its range.
fn fix_for(measure: Measure) -> &'static str {
    match measure {
        Measure::RxPower | Measure::RxLos => "clean the connectors at both ends and check the fiber, reseat the optic; if the far end transmits low, replace the far end's optic",
        Measure::Temperature => "check the airflow and fans, reseat the module; replace it if it stays hot",
        Measure::Voltage => "reseat the module; if it persists, replace it (or check the NIC's cage power)",
        Measure::Bias | Measure::TxPower | Measure::TxFault | Measure::TxLos => "replace the optic (its transmitter is failing)",
    }
}

fn level_of(level: Level) -> ModuleLevel {
    match level {
        Level::HighAlarm | Level::LowAlarm | Level::Set => ModuleLevel::Fail,
        Level::HighWarning | Level::LowWarning => ModuleLevel::Warn,
    }
}

fn finding(level: ModuleLevel, what: String, measure: Measure) -> ModuleFinding {
    ModuleFinding {
        level,
        what,
        fix: fix_for(measure).to_string(),
    }
}

/// Readings against the thresholds, the flags that are on, and a dark lane among lit
/// ones.
fn judge(m: &Module) -> Vec<ModuleFinding> {
    let mut out = Vec::new();
    let th = m.thresholds.as_ref();
    let mut against = |what: String, v: Option<f64>, lim: Option<&Limits>, measure: Measure| {
        if let (Some(v), Some(l)) = (v, lim) {
            if let Some((level, at)) = crossed(v, l) {
                out.push(finding(
                    level_of(level),
                    format!("{what} {v:.3} at or past its {} {at:.3}", level.name()),
                    measure,
                ));
            }
        }
    };
    against(
        "temperature °C".into(),
        m.temperature_c,
        th.and_then(|t| t.temperature_c.as_ref()),
        Measure::Temperature,
    );
    against(
        "voltage V".into(),
        m.voltage_v,
        th.and_then(|t| t.voltage_v.as_ref()),
        Measure::Voltage,
    );
    for l in &m.lanes {
        let n = l.lane;
        against(
            format!("lane {n} bias mA"),
            l.bias_ma,
            th.and_then(|t| t.bias_ma.as_ref()),
            Measure::Bias,
        );
        against(
            format!("lane {n} tx power mW"),
            l.tx_power_mw,
            th.and_then(|t| t.tx_power_mw.as_ref()),
            Measure::TxPower,
        );
        against(
            format!("lane {n} rx power mW"),
            l.rx_power_mw,
            th.and_then(|t| t.rx_power_mw.as_ref()),
            Measure::RxPower,
        );
    }
    for a in &m.alarms {
        out.push(finding(level_of(a.level), flag_words(a), a.measure));
    }
    if let Some(d) = dark_lane(m) {
        out.push(finding(ModuleLevel::Fail, d, Measure::RxLos));
    }
    out
}

/// Light below this is no light (-30 dBm): far under any receiver's sensitivity.
const DARK_MW: f64 = 0.001;
/// Light above this is a lit lane (-20 dBm).
const LIT_MW: f64 = 0.01;

/// A lane with no light while another lane of the module has light.
fn dark_lane(m: &Module) -> Option<String> {
    let lit = m
        .lanes
        .iter()
        .any(|l| l.rx_power_mw.is_some_and(|p| p >= LIT_MW));
    let dark: Vec<String> = m
        .lanes
        .iter()
        .filter(|l| l.rx_power_mw.is_some_and(|p| p < DARK_MW))
        .map(|l| l.lane.to_string())
        .collect();
    (lit && !dark.is_empty()).then(|| {
        format!(
            "dark lane {} (rx power under {DARK_MW} mW) while the other lanes have light",
            dark.join(", ")
        )
    })
}

/// The worst level `v` reaches: an alarm before a warning.
fn crossed(v: f64, l: &Limits) -> Option<(Level, f64)> {
    if v >= l.high_alarm {
        Some((Level::HighAlarm, l.high_alarm))
    } else if v <= l.low_alarm {
        Some((Level::LowAlarm, l.low_alarm))
    } else if v >= l.high_warning {
        Some((Level::HighWarning, l.high_warning))
    } else if v <= l.low_warning {
        Some((Level::LowWarning, l.low_warning))
    } else {
        None
    }
}

fn flag_words(a: &Alarm) -> String {
    let lane = a.lane.map(|l| format!("lane {l} ")).unwrap_or_default();
    format!("flag on: {lane}{} {}", a.measure.name(), a.level.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate's fixtures, made field by field by its builders (their SOURCE.md).
    fn fixture(name: &str) -> Eeprom {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        crate::dump::parse(&std::fs::read(dir.join(name)).unwrap()).unwrap()
    }

    #[test]
    fn a_dark_lane_among_lit_ones_fails_naming_it() {
        let mut m = crate::decode(&fixture("qsfp28-sr4.hexdump")).unwrap();
        m.thresholds = None;
        assert!(judge(&m).is_empty(), "{:?}", judge(&m));
        m.lanes[2].rx_power_mw = Some(0.0);
        let found = judge(&m);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].level, ModuleLevel::Fail);
        assert!(found[0].what.starts_with("dark lane 3 "), "{found:?}");
        // Every lane dark (no fiber): not a dark lane of a lit module.
        for l in &mut m.lanes {
            l.rx_power_mw = Some(0.0);
        }
        assert!(dark_lane(&m).is_none());
    }

    #[test]
    fn a_module_within_its_thresholds_is_ok_with_its_readings() {
        let v = judge_module(&fixture("qsfp28-sr4.hexdump"), &[]);
        assert_eq!(v.level, ModuleLevel::Ok, "{v:?}");
        assert!(v.findings.is_empty(), "{v:?}");
        assert!(v.readings.contains("rx power by lane 1:"), "{v:?}");
        assert!(v.fixes().is_empty());
    }

    #[test]
    fn memory_that_does_not_decode_is_a_warning_with_a_fix() {
        let v = judge_module(&Eeprom::new([0x7f; 128]), &[]);
        assert_eq!(v.level, ModuleLevel::Warn, "{v:?}");
        assert!(v.findings[0].what.contains("does not decode"), "{v:?}");
        assert_eq!(v.fixes().len(), 1);
    }
}
