//! One verdict per transceiver module, for every command that judges one (`doctor`'s
//! optics topic, `health`): the readings against the thresholds the module itself
//! carries, the flags it has set, a dark lane on a lit module, and the problems of the
//! read, each a [`ModuleFinding`] with its level and fix. Each command renders the
//! verdict in its own scale, so a module is never healthy to one and faulty to the other.
//!
//! The words are the evidence both print; they carry what the module and the read said,
//! so a renderer that prints on one line escapes control characters itself.

use crate::model::{Alarm, Lane, Level, Limits, Measure, Module, Problem};
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
    /// The worst finding's level; without a warning or a failure, [`ModuleLevel::Ok`]
    /// where some reading was judged against the module's thresholds,
    /// [`ModuleLevel::Unjudged`] where none was (what was not judged is said in the
    /// findings at [`ModuleLevel::Unjudged`] and in the readings' words).
    pub level: ModuleLevel,
    /// "QSFP28 ACME OPTICS QSFP-100G-SR4 SN 123 (SFF-8636)"; empty when the memory does
    /// not decode.
    pub inventory: String,
    /// What was read that could not be, as the reader said it ("bank 0 page 03h: ...").
    pub unread: Vec<String>,
    /// What was seen and deliberately not judged, said beside the findings ("data path
    /// not activated on lane 3 (DPDeactivated): its readings, flags and light are not
    /// judged").
    pub notes: Vec<String>,
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
    match crate::decode(eeprom) {
        Ok(m) => judge_decoded(&m, unread),
        Err(e) => ModuleVerdict {
            level: ModuleLevel::Warn,
            inventory: String::new(),
            unread: Vec::new(),
            notes: Vec::new(),
            readings: "no readings".into(),
            findings: vec![ModuleFinding {
                level: ModuleLevel::Warn,
                what: format!("the module's memory does not decode: {e}"),
                fix: "reseat the module; if it persists, replace it".into(),
            }],
        },
    }
}

/// [`judge_module`] of a module already decoded.
pub fn judge_decoded(m: &Module, unread: &[String]) -> ModuleVerdict {
    let mut notes = Vec::new();
    let skipped = lanes_not_judged(m, &mut notes);
    let mut findings = judge(m, &skipped);
    for p in &m.problems {
        // A page not read is the reader's problem (the reader says why in `unread`: a
        // driver that refuses it, the kernel's fallback that cannot read it), not the
        // module's: unjudged, nothing to reseat.
        let level = match p {
            Problem::DiagnosticsNotImplemented
            | Problem::MonitorNotImplemented { .. }
            | Problem::ThresholdsOutOfOrder { .. }
            | Problem::PageMissing { .. } => ModuleLevel::Unjudged,
            _ => ModuleLevel::Warn,
        };
        findings.push(ModuleFinding {
            level,
            what: p.to_string(),
            fix: fix_for_problem(p),
        });
    }
    let (readings, judged) = readings(m, &skipped);
    // The worst of what was judged: a part not judged (a monitor the module lacks, a page
    // not read, thresholds out of order) does not hide what was.
    let level = findings
        .iter()
        .map(|f| f.level)
        .filter(|l| matches!(l, ModuleLevel::Warn | ModuleLevel::Fail))
        .max_by_key(|l| l.rank())
        .unwrap_or(if judged {
            ModuleLevel::Ok
        } else {
            ModuleLevel::Unjudged
        });
    ModuleVerdict {
        level,
        inventory: inventory(m),
        unread: unread.to_vec(),
        notes,
        readings,
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

/// Whether any reading had thresholds to be judged by (the module's, the lanes' not in
/// `skipped`).
fn any_judged(m: &Module, skipped: &[u8]) -> bool {
    let Some(t) = m.thresholds.as_ref() else {
        return false;
    };
    let lanes = m.lanes.iter().filter(|l| !skipped.contains(&l.lane));
    (m.temperature_c.is_some() && t.temperature_c.is_some())
        || (m.voltage_v.is_some() && t.voltage_v.is_some())
        || lanes.into_iter().any(|l| {
            (l.bias_ma.is_some() && t.bias_ma.is_some())
                || (l.tx_power_mw.is_some() && t.tx_power_mw.is_some())
                || (l.rx_power_mw.is_some() && t.rx_power_mw.is_some())
        })
}

/// The readings in words (the lanes in `skipped` left to the notes), and whether any was
/// judged: a reading without thresholds (their page absent, all zero or out of order) is
/// never said to be "within" them.
fn readings(m: &Module, skipped: &[u8]) -> (String, bool) {
    let th = m.thresholds.as_ref();
    let (mut judged, mut unjudged) = (Vec::new(), Vec::new());
    if let Some(t) = m.temperature_c {
        let has = th.is_some_and(|t| t.temperature_c.is_some());
        (if has { &mut judged } else { &mut unjudged }).push(format!("{t:.1} °C"));
    }
    let rx: Vec<String> = m
        .lanes
        .iter()
        .filter(|l| !skipped.contains(&l.lane))
        .filter_map(|l| l.rx_power_mw.map(|p| format!("{}: {p:.3} mW", l.lane)))
        .collect();
    if !rx.is_empty() {
        let has = th.is_some_and(|t| t.rx_power_mw.is_some());
        (if has { &mut judged } else { &mut unjudged })
            .push(format!("rx power by lane {}", rx.join(", ")));
    }
    let mut said = Vec::new();
    if !judged.is_empty() {
        said.push(format!(
            "{} within the module's thresholds",
            judged.join(", ")
        ));
    }
    if !unjudged.is_empty() {
        said.push(format!(
            "{}: the module carries no thresholds to judge them by",
            unjudged.join(", ")
        ));
    }
    if said.is_empty() {
        return ("no readings".into(), false);
    }
    (said.join("; "), any_judged(m, skipped))
}

fn fix_for_problem(p: &Problem) -> String {
    match p {
        Problem::DiagnosticsNotImplemented
        | Problem::MonitorNotImplemented { .. }
        | Problem::ThresholdsOutOfOrder { .. }
        | Problem::PageMissing { .. } => String::new(),
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
/// ones; the lanes in `skipped` ([`lanes_not_judged`]) are left out.
fn judge(m: &Module, skipped: &[u8]) -> Vec<ModuleFinding> {
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
    for l in m.lanes.iter().filter(|l| !skipped.contains(&l.lane)) {
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
        if !a.lane.is_some_and(|n| skipped.contains(&n)) {
            out.push(flag_finding(m, a));
        }
    }
    if let Some(d) = dark_lane(m, skipped) {
        out.push(finding(ModuleLevel::Fail, d, Measure::RxLos));
    }
    out
}

/// The reading a flag is about, now: the module's for a module flag, the lane's for a
/// lane flag; loss of signal and a transmitter fault by the power they are about.
fn reading_now(m: &Module, a: &Alarm) -> Option<f64> {
    let lane = || m.lanes.iter().find(|l| Some(l.lane) == a.lane);
    match a.measure {
        Measure::Temperature => m.temperature_c,
        Measure::Voltage => m.voltage_v,
        Measure::Bias => lane()?.bias_ma,
        Measure::TxPower | Measure::TxLos | Measure::TxFault => lane()?.tx_power_mw,
        Measure::RxPower | Measure::RxLos => lane()?.rx_power_mw,
    }
}

fn limits_of(m: &Module, measure: Measure) -> Option<Limits> {
    let t = m.thresholds.as_ref()?;
    match measure {
        Measure::Temperature => t.temperature_c,
        Measure::Voltage => t.voltage_v,
        Measure::Bias => t.bias_ma,
        Measure::TxPower | Measure::TxLos | Measure::TxFault => t.tx_power_mw,
        Measure::RxPower | Measure::RxLos => t.rx_power_mw,
    }
}

/// Whether the reading now is where the flag says it went: at or past the flag's own
/// level; for loss of signal or a transmitter fault, no light (under [`DARK_MW`]) or at
/// or under the power's low alarm. `None`: no reading to tell.
fn confirmed(m: &Module, a: &Alarm) -> Option<bool> {
    let v = reading_now(m, a)?;
    let l = limits_of(m, a.measure);
    Some(match a.level {
        Level::HighAlarm => l.is_some_and(|l| v >= l.high_alarm),
        Level::LowAlarm => l.is_some_and(|l| v <= l.low_alarm),
        Level::HighWarning => l.is_some_and(|l| v >= l.high_warning),
        Level::LowWarning => l.is_some_and(|l| v <= l.low_warning),
        Level::Set => v < DARK_MW || l.is_some_and(|l| v <= l.low_alarm),
    })
}

/// A flag that is on. SFF-8472's flags compare the last measurement, so a set flag is
/// now. SFF-8636's and CMIS's are latched ([`Alarm::latched`]): set when
/// the level was crossed at any time since the last read, so a latched alarm fails only
/// where the reading now confirms it, and is otherwise a warning that says so.
fn flag_finding(m: &Module, a: &Alarm) -> ModuleFinding {
    let level = level_of(a.level);
    if !a.latched || confirmed(m, a) == Some(true) {
        return finding(level, flag_words(a), a.measure);
    }
    let lane = a.lane.map(|l| format!("lane {l} ")).unwrap_or_default();
    let now = match reading_now(m, a) {
        Some(v) => format!("now {v:.3}"),
        None => "no reading now to confirm it".into(),
    };
    let what = match a.level {
        Level::Set => format!(
            "latched: {lane}{} since the last read, {now}",
            a.measure.name()
        ),
        l => format!(
            "latched: {lane}{} {} crossed since the last read, {now}",
            a.measure.name(),
            l.name()
        ),
    };
    finding(ModuleLevel::Warn, what, a.measure)
}

/// Light below this is no light (-30 dBm): far under any receiver's sensitivity.
const DARK_MW: f64 = 0.001;
/// Light above this is a lit lane (-20 dBm).
const LIT_MW: f64 = 0.01;

/// The lanes whose readings and flags are not judged, each reason said once in `notes`:
/// a lane whose data path is not activated (CMIS), or whose transmitter the host
/// disabled (SFF-8636 byte 86): its bias and light are off by design (a breakout port
/// unused, a lane the host holds down, a data path coming up), and its flags say so. A
/// data path state is the host lane's, so where the application does not map host lanes
/// 1:1 onto media lanes (whose readings and flags these are) no lane is judged while any
/// data path is down.
fn lanes_not_judged(m: &Module, notes: &mut Vec<String>) -> Vec<u8> {
    let mut skipped = Vec::new();
    let inactive: Vec<&Lane> = m.lanes.iter().filter(|l| l.data_path_inactive()).collect();
    if !inactive.is_empty() {
        let which: Vec<String> = inactive
            .iter()
            .map(|l| {
                let state = l.data_path_state.as_deref().unwrap_or_default();
                format!("{} ({state})", l.lane)
            })
            .collect();
        let one_to_one = match (m.host_lane_count, m.media_lane_count) {
            (Some(h), Some(media)) => h == media,
            _ => true,
        };
        if !one_to_one {
            notes.push(format!(
                "data path not activated on host lane {}: the application maps {} host lanes onto {} media lanes, so no lane's readings, flags or light are judged",
                which.join(", "),
                m.host_lane_count.unwrap_or_default(),
                m.media_lane_count.unwrap_or_default()
            ));
            return m.lanes.iter().map(|l| l.lane).collect();
        }
        notes.push(format!(
            "data path not activated on lane {}: their readings, flags and light are not judged",
            which.join(", ")
        ));
        skipped.extend(inactive.iter().map(|l| l.lane));
    }
    let disabled: Vec<u8> = m
        .lanes
        .iter()
        .filter(|l| l.tx_disabled == Some(true) && !skipped.contains(&l.lane))
        .map(|l| l.lane)
        .collect();
    if !disabled.is_empty() {
        let which: Vec<String> = disabled.iter().map(u8::to_string).collect();
        notes.push(format!(
            "transmitter disabled by the host on lane {}: their readings, flags and light are not judged",
            which.join(", ")
        ));
        skipped.extend(disabled);
    }
    skipped
}

/// A lane with no light while another lane of the module has light; the lanes in
/// `skipped` are never the dark one.
fn dark_lane(m: &Module, skipped: &[u8]) -> Option<String> {
    let lit = m
        .lanes
        .iter()
        .any(|l| l.rx_power_mw.is_some_and(|p| p >= LIT_MW));
    let dark: Vec<String> = m
        .lanes
        .iter()
        .filter(|l| !skipped.contains(&l.lane) && l.rx_power_mw.is_some_and(|p| p < DARK_MW))
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
        assert!(judge(&m, &[]).is_empty());
        m.lanes[2].rx_power_mw = Some(0.0);
        let found = judge(&m, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].level, ModuleLevel::Fail);
        assert!(found[0].what.starts_with("dark lane 3 "), "{found:?}");
        // Every lane dark (no fiber): not a dark lane of a lit module.
        for l in &mut m.lanes {
            l.rx_power_mw = Some(0.0);
        }
        assert!(dark_lane(&m, &[]).is_none());
    }

    #[test]
    fn a_module_within_its_thresholds_is_ok_with_its_readings() {
        let v = judge_module(&fixture("qsfp28-sr4.hexdump"), &[]);
        assert_eq!(v.level, ModuleLevel::Ok, "{v:?}");
        assert!(v.findings.is_empty(), "{v:?}");
        assert!(v.readings.contains("rx power by lane 1:"), "{v:?}");
        assert!(v.fixes().is_empty());
    }

    fn qsfp28() -> Module {
        crate::decode(&fixture("qsfp28-sr4.hexdump")).unwrap()
    }

    /// A latched flag (as SFF-8636's and CMIS's are).
    fn flag(measure: Measure, level: Level, lane: Option<u8>) -> Alarm {
        Alarm {
            measure,
            level,
            lane,
            latched: true,
        }
    }

    /// SFF-8636 and CMIS flags are latched (clear on read): an alarm flag whose reading is
    /// back inside the thresholds is a warning said as latched; one the reading confirms
    /// fails. SFF-8472's flags follow the last measurement: a set alarm fails.
    #[test]
    fn a_latched_alarm_fails_only_when_the_reading_confirms_it() {
        let mut m = qsfp28();
        m.alarms = vec![flag(Measure::RxPower, Level::LowAlarm, Some(2))];
        let v = judge_decoded(&m, &[]);
        assert_eq!(v.level, ModuleLevel::Warn, "{v:?}");
        let what = &v.findings[0].what;
        assert!(
            what.starts_with(
                "latched: lane 2 receiver power low alarm crossed since the last read, now "
            ),
            "{what}"
        );
        let low_alarm = m
            .thresholds
            .as_ref()
            .unwrap()
            .rx_power_mw
            .unwrap()
            .low_alarm;
        m.lanes[1].rx_power_mw = Some(low_alarm / 2.0);
        let v = judge_decoded(&m, &[]);
        assert_eq!(v.level, ModuleLevel::Fail, "{v:?}");
        assert!(
            v.findings.iter().any(|f| f.level == ModuleLevel::Fail
                && f.what
                    .starts_with("flag on: lane 2 receiver power low alarm")),
            "{v:?}"
        );
        // A latched LOS on a lane that has light now, then on one that has none.
        let mut m = qsfp28();
        m.thresholds = None;
        m.alarms = vec![flag(Measure::RxLos, Level::Set, Some(1))];
        assert_eq!(judge_decoded(&m, &[]).level, ModuleLevel::Warn);
        m.lanes[0].rx_power_mw = Some(0.0);
        let v = judge_decoded(&m, &[]);
        assert_eq!(v.level, ModuleLevel::Fail, "{v:?}");
        // SFF-8472: the flag is the current comparison.
        let mut s = crate::decode(&fixture("sfp-10g-sr-rx-low.hex")).unwrap();
        s.lanes[0].rx_power_mw = Some(0.5);
        let v = judge_decoded(&s, &[]);
        assert_eq!(v.level, ModuleLevel::Fail, "{v:?}");
        assert!(
            v.findings.iter().all(|f| !f.what.starts_with("latched")),
            "{v:?}"
        );
    }

    /// No thresholds (page absent, or all zero): the readings are said, not passed.
    #[test]
    fn a_module_without_thresholds_is_not_within_them() {
        let mut m = qsfp28();
        m.thresholds = None;
        let v = judge_decoded(&m, &[]);
        assert_eq!(v.level, ModuleLevel::Unjudged, "{v:?}");
        assert!(!v.readings.contains("within"), "{v:?}");
        assert!(
            v.readings
                .contains("the module carries no thresholds to judge them by"),
            "{v:?}"
        );
        assert!(v.readings.contains("rx power by lane 1:"), "{v:?}");
        // Still judged: a dark lane.
        m.lanes[2].rx_power_mw = Some(0.0);
        assert_eq!(judge_decoded(&m, &[]).level, ModuleLevel::Fail);
        // Thresholds for temperature only: the temperature judged (the level is what was
        // judged), rx power said as not.
        let mut m = qsfp28();
        m.thresholds.as_mut().unwrap().rx_power_mw = None;
        let v = judge_decoded(&m, &[]);
        assert_eq!(v.level, ModuleLevel::Ok, "{v:?}");
        assert!(
            v.readings.contains("°C within the module's thresholds"),
            "{v:?}"
        );
        assert!(v.readings.contains("no thresholds"), "{v:?}");
    }

    /// A dark lane whose data path is not activated (a breakout port unused, a lane the
    /// host holds down) is not a dark lane; where host lanes do not map 1:1 onto media
    /// lanes, no lane is judged dark while a data path is down.
    #[test]
    fn a_lane_whose_data_path_is_down_is_not_judged_dark() {
        let mut m = qsfp28();
        m.thresholds = None;
        for l in &mut m.lanes {
            l.data_path_state = Some(crate::model::DP_ACTIVATED.into());
        }
        m.lanes[2].rx_power_mw = Some(0.0);
        assert_eq!(judge_decoded(&m, &[]).level, ModuleLevel::Fail);
        m.lanes[2].data_path_state = Some("DPDeactivated".into());
        let v = judge_decoded(&m, &[]);
        assert!(
            v.findings.iter().all(|f| f.level != ModuleLevel::Fail),
            "{v:?}"
        );
        assert!(v.notes.iter().any(|n| n.contains("lane 3")), "{v:?}");
        // 8 host lanes on 4 media lanes: lane 3's data path says nothing of media lane 2.
        let mut m = qsfp28();
        m.thresholds = None;
        m.host_lane_count = Some(8);
        m.media_lane_count = Some(4);
        for l in &mut m.lanes {
            l.data_path_state = Some(crate::model::DP_ACTIVATED.into());
        }
        m.lanes[1].rx_power_mw = Some(0.0);
        m.lanes[2].data_path_state = Some("DPDeactivated".into());
        let v = judge_decoded(&m, &[]);
        assert!(
            v.findings.iter().all(|f| f.level != ModuleLevel::Fail),
            "{v:?}"
        );
        assert!(
            v.notes
                .iter()
                .any(|n| n.contains("so no lane's readings, flags or light are judged")),
            "{v:?}"
        );
    }

    /// A page the reader could not get (the kernel's fallback answered A0h's bytes for
    /// A2h, a driver refused a page) is a read said as such: nothing to reseat.
    #[test]
    fn a_page_not_read_is_unjudged_not_a_module_to_replace() {
        let sfp = fixture("sfp-10g-sr-rx-low.hex");
        let mut a0_only = Eeprom::new(*sfp.lower());
        a0_only.insert_page(0, 0, *sfp.page(0, 0).unwrap());
        let why = vec!["A2h (diagnostics): the kernel answered with A0h's bytes".to_string()];
        let v = judge_module(&a0_only, &why);
        assert_eq!(v.level, ModuleLevel::Unjudged, "{v:?}");
        assert!(v.fixes().is_empty(), "{v:?}");
        assert_eq!(v.unread, why);
        assert!(
            v.findings.iter().any(|f| f.what == "page A2h was not read"),
            "{v:?}"
        );
    }

    #[test]
    fn memory_that_does_not_decode_is_a_warning_with_a_fix() {
        let v = judge_module(&Eeprom::new([0x7f; 128]), &[]);
        assert_eq!(v.level, ModuleLevel::Warn, "{v:?}");
        assert!(v.findings[0].what.contains("does not decode"), "{v:?}");
        assert_eq!(v.fixes().len(), 1);
    }
}
