//! The module verdict against memories built field by field (tests/build): what must never
//! fail a module (and so drain a healthy node through `health`): lanes the host keeps down,
//! thresholds that cannot be judged by, a monitor the module does not have.

mod build;

use build::{put_u16, up, Cmis, Qsfp, Sfp};
use rocewatch_optics::{decode, judge_module, Eeprom, Measure, ModuleLevel, Problem};

fn qsfp(module: Qsfp) -> Eeprom {
    Eeprom::from_linear(&module.linear()).unwrap()
}

fn sfp(module: Sfp) -> Eeprom {
    Eeprom::from_linear(&module.linear()).unwrap()
}

/// Whether a finding names lane `n` ("lane 5 bias mA ...", "flag on: lane 5 ...").
fn names_lane(what: &str, n: u8) -> bool {
    what.contains(&format!("lane {n} "))
}

/// A CMIS module whose host lanes 5-8 are `DPDeactivated` (a breakout port left
/// unconfigured) reads 0 mA and 0 mW there and sets their RX LOS flags: none of that fails
/// it, and the note says once why; lanes 1-4 are still judged.
#[test]
fn cmis_lanes_whose_data_path_is_down_are_not_judged() {
    let mut c = Cmis::new(1);
    *up(&mut c.page11[0], 130) = 0x11;
    *up(&mut c.page11[0], 131) = 0x11;
    for lane in 4..8 {
        for base in [154, 170, 186] {
            put_u16(&mut c.page11[0], base - 128 + 2 * lane, 0);
        }
    }
    *up(&mut c.page11[0], 147) = 0xf0; // RX LOS on lanes 5-8
    let e = c.eeprom();
    let v = judge_module(&e, &[]);
    assert_eq!(v.level, ModuleLevel::Ok, "{v:?}");
    assert!(
        v.findings
            .iter()
            .all(|f| !(5..=8).any(|n| names_lane(&f.what, n))),
        "{v:?}"
    );
    let said: Vec<&String> = v.notes.iter().filter(|n| n.contains("lane 5")).collect();
    assert_eq!(said.len(), 1, "{v:?}");
    assert!(!v.readings.contains("5: 0.000 mW"), "{v:?}");
    // Lane 2 under its RX power low alarm, its data path activated: still a failure.
    let mut c = Cmis::new(1);
    *up(&mut c.page11[0], 130) = 0x11;
    *up(&mut c.page11[0], 131) = 0x11;
    put_u16(&mut c.page11[0], 186 - 128 + 2, 1000); // 0.1 mW, low alarm 0.1288
    let v = judge_module(&c.eeprom(), &[]);
    assert_eq!(v.level, ModuleLevel::Fail, "{v:?}");
    assert!(
        v.findings
            .iter()
            .any(|f| f.what.starts_with("lane 2 rx power mW")),
        "{v:?}"
    );
}

/// Host lanes that do not map 1:1 onto media lanes (8 onto 4, a DR4): a data path down
/// says nothing of which media lane is dark, so no lane's readings or flags are judged
/// while one is down; the module's temperature still is.
#[test]
fn cmis_lanes_are_not_judged_while_a_data_path_is_down_on_a_lane_mapping_not_one_to_one() {
    let mut c = Cmis::new(1);
    c.lower[86] = 0x11; // a host interface (400GAUI-8)
    c.lower[88] = 0x84; // 8 host lanes, 4 media lanes
    *up(&mut c.page11[0], 131) = 0x11; // host lanes 7-8 DPDeactivated
    put_u16(&mut c.page11[0], 186 - 128 + 2 * 3, 0); // media lane 4 dark
    put_u16(&mut c.page11[0], 170 - 128 + 2 * 3, 0);
    put_u16(&mut c.page11[0], 154 - 128 + 2 * 3, 0);
    *up(&mut c.page11[0], 147) = 0x08;
    let v = judge_module(&c.eeprom(), &[]);
    assert_ne!(v.level, ModuleLevel::Fail, "{v:?}");
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("no lane's readings, flags or light are judged")),
        "{v:?}"
    );
    // The module's own readings are still judged.
    let mut c = Cmis::new(1);
    c.lower[86] = 0x11;
    c.lower[88] = 0x84;
    *up(&mut c.page11[0], 131) = 0x11;
    put_u16(&mut c.lower, 14, 90 * 256); // 90 C, high alarm 75 C
    let v = judge_module(&c.eeprom(), &[]);
    assert_eq!(v.level, ModuleLevel::Fail, "{v:?}");
}

/// SFF-8636 lower byte 86 bits 0-3: the host disabled lane 1-4's transmitter (ethtool
/// `qsfp.h` `SFF8636_TX_DISABLE_OFFSET` 0x56, `SFF8636_TX_DISABLE_1` bit 0 to
/// `SFF8636_TX_DISABLE_4` bit 3). A disabled lane reads no bias and no light: not a fault.
#[test]
fn sff8636_lanes_the_host_disabled_are_not_judged() {
    let mut q = Qsfp::new();
    q.bytes[86] = 0x08; // lane 4
    for base in [34, 42, 50] {
        put_u16(&mut q.bytes, base + 2 * 3, 0);
    }
    q.bytes[3] = 0x08; // RX LOS lane 4
    q.bytes[10] = 0x04; // RX power lane 4 low alarm
    let e = qsfp(q);
    let m = decode(&e).unwrap();
    let disabled: Vec<Option<bool>> = m.lanes.iter().map(|l| l.tx_disabled).collect();
    assert_eq!(
        disabled,
        vec![Some(false), Some(false), Some(false), Some(true)]
    );
    let v = judge_module(&e, &[]);
    assert_eq!(v.level, ModuleLevel::Ok, "{v:?}");
    assert!(v.findings.iter().all(|f| !names_lane(&f.what, 4)), "{v:?}");
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("disabled") && n.contains("lane 4")),
        "{v:?}"
    );
    // Lane 3 dark while its transmitter is enabled: still a failure.
    let mut q = Qsfp::new();
    q.bytes[86] = 0x08;
    put_u16(&mut q.bytes, 34 + 2 * 2, 0);
    let v = judge_module(&qsfp(q), &[]);
    assert_eq!(v.level, ModuleLevel::Fail, "{v:?}");
}

/// Thresholds out of order (a module that programs some of them, or an externally
/// calibrated one whose slopes are zero, so that every threshold converts to 0): the
/// measure has no thresholds to judge by, said as a problem, never a failure.
#[test]
fn thresholds_out_of_order_are_not_judged() {
    // Temperature: high alarm 0 (not programmed) under its low warning.
    let mut s = Sfp::new();
    put_u16(&mut s.a2, 0, 0);
    let e = sfp(s);
    let m = decode(&e).unwrap();
    let t = m.thresholds.as_ref().unwrap();
    assert_eq!(t.temperature_c, None);
    assert!(t.rx_power_mw.is_some());
    assert_eq!(
        m.problems,
        vec![Problem::ThresholdsOutOfOrder {
            measure: Measure::Temperature
        }]
    );
    let v = judge_module(&e, &[]);
    assert_eq!(v.level, ModuleLevel::Ok, "{v:?}");
    assert!(
        v.findings
            .iter()
            .any(|f| f.level == ModuleLevel::Unjudged && f.what.contains("temperature")),
        "{v:?}"
    );
    // Externally calibrated with every constant zero (A2h 56-91): every threshold is 0.
    let mut s = Sfp::new();
    s.a0[92] |= 0x10;
    let e = sfp(s);
    let m = decode(&e).unwrap();
    assert_eq!(m.thresholds, None);
    assert_eq!(
        m.problems
            .iter()
            .filter(|p| matches!(p, Problem::ThresholdsOutOfOrder { .. }))
            .count(),
        5,
        "{:?}",
        m.problems
    );
    let v = judge_module(&e, &[]);
    assert_eq!(v.level, ModuleLevel::Unjudged, "{v:?}");
    assert!(v.fixes().is_empty(), "{v:?}");
    // In order, warning equal to alarm: judged.
    let mut s = Sfp::new();
    put_u16(&mut s.a2, 4, 80 * 256);
    let m = decode(&sfp(s)).unwrap();
    assert!(m.thresholds.unwrap().temperature_c.is_some());
}

/// SFF-8636 byte 220 bit 2 clear: the module does not measure TX power. Its temperature
/// and receive power were judged within their thresholds: the module is OK, the monitor it
/// lacks said beside.
#[test]
fn a_monitor_the_module_does_not_have_leaves_the_rest_judged() {
    let mut q = Qsfp::new();
    q.bytes[220] &= !0x04;
    let e = qsfp(q);
    let v = judge_module(&e, &[]);
    assert_eq!(v.level, ModuleLevel::Ok, "{v:?}");
    assert!(
        v.findings
            .iter()
            .any(|f| f.level == ModuleLevel::Unjudged && f.what.contains("laser output power")),
        "{v:?}"
    );
    // Nothing judged at all (no thresholds page): unjudged.
    let mut q = Qsfp::new();
    q.bytes[2] = 0x04; // flat memory: no page 03h
    let v = judge_module(&qsfp(q), &[]);
    assert_eq!(v.level, ModuleLevel::Unjudged, "{v:?}");
}
