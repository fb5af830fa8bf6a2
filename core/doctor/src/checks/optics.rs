//! Each RoCE port's transceiver module: its inventory line, and its readings against the
//! thresholds the module itself carries (FAIL at an alarm level, WARN at a warning level,
//! the same for the flags the module has set), a dark lane on a lit module, and a module
//! whose read has problems (no diagnostics, all zeros, a checksum that fails) said as
//! such. Absent readings are never a pass.
//!
//! The module's memory comes through [`ModuleSource`]: ethtool netlink by page (the
//! ioctls where netlink cannot) on this host, bytes built field by field in tests; it is
//! decoded by `rocewatch_optics`.

use rocewatch_optics::{Alarm, Eeprom, Level, Limits, Measure, Module, Problem};

use crate::check::{check, Check, Status};
use crate::shell::one_line;

/// Where a netdev's module memory comes from: `Ok(None)` when the port has no module or
/// the driver does not read it.
pub(crate) trait ModuleSource {
    /// The module's memory as read, and what could not be read.
    fn module(&mut self, netdev: &str) -> Result<Option<(Eeprom, Vec<String>)>, String>;
}

/// This host's ethtool netlink (opened at the first request), the ioctls' linear dump
/// where netlink cannot read modules.
#[derive(Default)]
pub(crate) struct LiveModules {
    nl: Option<rocewatch_netlink::ethtool::EthtoolNetlink>,
}

impl ModuleSource for LiveModules {
    fn module(&mut self, netdev: &str) -> Result<Option<(Eeprom, Vec<String>)>, String> {
        use rocewatch_netlink::ethtool::EthtoolNetlink;
        if self.nl.is_none() {
            if let Ok(n) = EthtoolNetlink::open(std::time::Duration::from_secs(2)) {
                self.nl = Some(n);
            }
        }
        if let Some(nl) = self.nl.as_mut() {
            match rocewatch_netlink::module_eeprom::read_module(|r| nl.module_eeprom(netdev, r)) {
                Ok(m) => return Ok(Some((m.eeprom, m.problems))),
                Err(e) if !e.is_unsupported() => return Err(e.to_string()),
                Err(_) => {}
            }
        }
        by_ioctl(netdev)
    }
}

#[cfg(target_os = "linux")]
fn by_ioctl(netdev: &str) -> Result<Option<(Eeprom, Vec<String>)>, String> {
    let sock =
        rocewatch_ethtool::EthtoolSocket::open().map_err(|e| format!("ethtool socket: {e}"))?;
    match sock.module_eeprom(netdev) {
        Ok((_, bytes)) => Eeprom::from_linear(&bytes)
            .map(|e| Some((e, Vec::new())))
            .map_err(|e| format!("module EEPROM: {e}")),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(format!("module EEPROM (ioctl): {e}")),
    }
}

#[cfg(not(target_os = "linux"))]
fn by_ioctl(_: &str) -> Result<Option<(Eeprom, Vec<String>)>, String> {
    Ok(None)
}

/// The optics checks of each netdev: read through `source`, or SKIP where this is not
/// the host's own tree (`live` false).
pub(crate) fn optics_checks(
    netdevs: &[String],
    live: bool,
    source: &mut dyn ModuleSource,
) -> Vec<Check> {
    if netdevs.is_empty() {
        return vec![check(
            "optics",
            "",
            Status::Skip,
            "no RoCE port with a netdev: no module to read",
            None,
        )];
    }
    let mut out = Vec::new();
    for nd in netdevs {
        if !live {
            out.push(skip(nd));
            continue;
        }
        out.push(match source.module(nd) {
            Ok(Some((eeprom, unread))) => module_check(nd, &eeprom, &unread),
            Ok(None) => skip(nd),
            Err(e) => check(
                "optics",
                nd,
                Status::Warn,
                format!("the module could not be read: {}", one_line(&e)),
                Some("reseat the module; if it still cannot be read, replace it".into()),
            ),
        });
    }
    out
}

fn skip(nd: &str) -> Check {
    check(
        "optics",
        nd,
        Status::Skip,
        "no module readings (virtio/fixture): no module, or the driver does not read it",
        None,
    )
}

/// One module's verdict.
pub(crate) fn module_check(nd: &str, eeprom: &Eeprom, unread: &[String]) -> Check {
    let m = match rocewatch_optics::decode(eeprom) {
        Ok(m) => m,
        Err(e) => {
            return check(
                "optics",
                nd,
                Status::Warn,
                format!("the module's memory does not decode: {e}"),
                Some("reseat the module; if it persists, replace it".into()),
            )
        }
    };
    let mut said = vec![inventory(&m)];
    said.extend(unread.iter().map(|u| one_line(u)));
    let mut findings = judge(&m);
    for p in &m.problems {
        let status = match p {
            Problem::DiagnosticsNotImplemented | Problem::MonitorNotImplemented { .. } => {
                Status::Info
            }
            _ => Status::Warn,
        };
        findings.push((status, p.to_string(), fix_for_problem(p)));
    }
    let status = findings
        .iter()
        .map(|f| f.0)
        .max_by_key(|s| rank(*s))
        .unwrap_or(if has_readings(&m) {
            Status::Pass
        } else {
            Status::Info
        });
    if findings.is_empty() {
        said.push(readings(&m));
    }
    let mut fixes: Vec<&str> = Vec::new();
    for (_, what, fix) in &findings {
        said.push(what.clone());
        if !fix.is_empty() && !fixes.contains(&fix.as_str()) {
            fixes.push(fix);
        }
    }
    let fix = (!fixes.is_empty()).then(|| fixes.join("; "));
    check("optics", nd, status, said.join("; "), fix)
}

fn rank(s: Status) -> u8 {
    match s {
        Status::Fail => 4,
        Status::Warn => 3,
        Status::Info => 2,
        Status::Pass => 1,
        Status::Skip => 0,
    }
}

fn inventory(m: &Module) -> String {
    let t = |o: &Option<String>| o.as_deref().map(one_line).unwrap_or_else(|| "?".into());
    format!(
        "{} {} {} SN {} ({})",
        one_line(&m.identifier),
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

fn status_of(level: Level) -> Status {
    match level {
        Level::HighAlarm | Level::LowAlarm | Level::Set => Status::Fail,
        Level::HighWarning | Level::LowWarning => Status::Warn,
    }
}

/// Readings against the thresholds, the flags that are on, and a dark lane among lit
/// ones: (status, what, fix).
fn judge(m: &Module) -> Vec<(Status, String, String)> {
    let mut out = Vec::new();
    let th = m.thresholds.as_ref();
    let mut against = |what: String, v: Option<f64>, lim: Option<&Limits>, measure: Measure| {
        if let (Some(v), Some(l)) = (v, lim) {
            if let Some((level, at)) = crossed(v, l) {
                out.push((
                    status_of(level),
                    format!("{what} {v:.3} at or past its {} {at:.3}", level.name()),
                    fix_for(measure).to_string(),
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
        out.push((
            status_of(a.level),
            flag_words(a),
            fix_for(a.measure).to_string(),
        ));
    }
    if let Some(d) = dark_lane(m) {
        out.push((Status::Fail, d, fix_for(Measure::RxLos).to_string()));
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

    /// The optics crate's fixtures, made field by field by its builders (their SOURCE.md).
    fn fixture(name: &str) -> Eeprom {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../optics/tests/fixtures");
        rocewatch_optics::dump::parse(&std::fs::read(dir.join(name)).unwrap()).unwrap()
    }

    struct One(Result<Option<(Eeprom, Vec<String>)>, String>);

    impl ModuleSource for One {
        fn module(&mut self, _: &str) -> Result<Option<(Eeprom, Vec<String>)>, String> {
            self.0.clone()
        }
    }

    fn run(source: &mut One) -> Check {
        let mut c = optics_checks(&["eth0".into()], true, source);
        assert_eq!(c.len(), 1, "{c:?}");
        c.remove(0)
    }

    #[test]
    fn rx_power_at_its_low_alarm_fails_with_the_fix_for_the_fiber() {
        let c = run(&mut One(Ok(Some((
            fixture("sfp-10g-sr-rx-low.hex"),
            vec![],
        )))));
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.evidence.contains("ACME OPTICS") && c.evidence.contains("SN0001"),
            "{c:?}"
        );
        assert!(
            c.evidence
                .contains("rx power mW 0.010 at or past its low alarm"),
            "{c:?}"
        );
        assert!(
            c.evidence
                .contains("flag on: lane 1 receiver power low alarm"),
            "{c:?}"
        );
        assert!(
            c.fix.as_deref().unwrap().contains("clean the connectors"),
            "{c:?}"
        );
    }

    #[test]
    fn a_module_within_its_thresholds_passes_with_its_readings() {
        let c = run(&mut One(Ok(Some((fixture("qsfp28-sr4.hexdump"), vec![])))));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.evidence.contains("within the module's thresholds"),
            "{c:?}"
        );
        assert!(c.evidence.contains("rx power by lane 1:"), "{c:?}");
        assert!(c.fix.is_none());
    }

    #[test]
    fn zero_diagnostics_are_said_and_never_pass() {
        let c = run(&mut One(Ok(Some((fixture("sfp-zero-dom.bin"), vec![])))));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.evidence.contains("every reading is zero"), "{c:?}");
        assert!(c.fix.as_deref().unwrap().contains("reseat"), "{c:?}");
    }

    #[test]
    fn a_dark_lane_among_lit_ones_fails_naming_it() {
        let mut m = rocewatch_optics::decode(&fixture("qsfp28-sr4.hexdump")).unwrap();
        m.thresholds = None;
        assert!(judge(&m).is_empty(), "{:?}", judge(&m));
        m.lanes[2].rx_power_mw = Some(0.0);
        let found = judge(&m);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, Status::Fail);
        assert!(found[0].1.starts_with("dark lane 3 "), "{found:?}");
        // Every lane dark (no fiber): not a dark lane of a lit module.
        for l in &mut m.lanes {
            l.rx_power_mw = Some(0.0);
        }
        assert!(dark_lane(&m).is_none());
    }

    #[test]
    fn no_module_a_fixture_tree_and_an_unreadable_module() {
        let c = run(&mut One(Ok(None)));
        assert_eq!(c.status, Status::Skip);
        assert!(
            c.evidence
                .starts_with("no module readings (virtio/fixture)"),
            "{c:?}"
        );
        let mut never = One(Err("must not be asked".into()));
        let c = optics_checks(&["eth0".into()], false, &mut never);
        assert_eq!(c[0].status, Status::Skip, "{c:?}");
        let c = run(&mut One(Err("eth0: timed out".into())));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence.contains("could not be read: eth0: timed out"),
            "{c:?}"
        );
    }
}
