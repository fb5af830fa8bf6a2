//! Each RoCE port's transceiver module: its inventory line, and its readings against the
//! thresholds the module itself carries (FAIL at an alarm level, WARN at a warning level;
//! a latched flag fails only where the reading now confirms it), a dark lane on a lit
//! module (not a lane whose data path is down), and a module whose read has problems (no
//! diagnostics, all zeros, a checksum that fails) said as such. Absent readings, and
//! readings the module carries no thresholds for, are never a pass.
//!
//! The module's memory comes through [`ModuleSource`]: ethtool netlink by page (the
//! ioctls where netlink cannot) on this host, bytes built field by field in tests; it is
//! decoded and judged by `rocewatch_optics::verdict`, as `health` judges it.

use rocewatch_optics::{judge_module, Eeprom, ModuleLevel};

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
        rocewatch_netlink::module_eeprom::read_port_module(
            self.nl.as_mut(),
            netdev,
            rocewatch_ethtool::module::module_dump,
        )
        .map(|m| m.map(|m| (m.eeprom, m.problems)))
    }
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

/// One module's verdict (`rocewatch_optics::verdict`, the one `health` judges by) in
/// doctor's words: PASS, WARN, FAIL, and INFO where nothing could be judged (no
/// diagnostics, no thresholds).
pub(crate) fn module_check(nd: &str, eeprom: &Eeprom, unread: &[String]) -> Check {
    let v = judge_module(eeprom, unread);
    let status = match v.level {
        ModuleLevel::Ok => Status::Pass,
        ModuleLevel::Warn => Status::Warn,
        ModuleLevel::Fail => Status::Fail,
        ModuleLevel::Unjudged => Status::Info,
    };
    let mut said: Vec<String> = Vec::new();
    if !v.inventory.is_empty() {
        said.push(one_line(&v.inventory));
    }
    said.extend(v.unread.iter().map(|u| one_line(u)));
    // The readings where nothing is wrong with them (their words would say "within the
    // module's thresholds" beside a reading that is not).
    if matches!(v.level, ModuleLevel::Ok | ModuleLevel::Unjudged) {
        said.push(one_line(&v.readings));
    }
    said.extend(v.findings.iter().map(|f| one_line(&f.what)));
    said.extend(v.notes.iter().map(|n| one_line(n)));
    let fixes = v.fixes();
    let fix = (!fixes.is_empty()).then(|| fixes.join("; "));
    check("optics", nd, status, said.join("; "), fix)
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

    /// A QSFP28 whose page 03h is all zero programs no thresholds: INFO with its
    /// readings, never PASS "within the module's thresholds".
    #[test]
    fn a_module_without_thresholds_is_info_with_its_readings() {
        let full = fixture("qsfp28-sr4.hexdump");
        let mut e = Eeprom::new(*full.lower());
        e.insert_page(0, 0, *full.page(0, 0).unwrap());
        e.insert_page(0, 3, [0; 128]);
        let c = run(&mut One(Ok(Some((e, vec![])))));
        assert_eq!(c.status, Status::Info, "{c:?}");
        assert!(
            c.evidence
                .contains("the module carries no thresholds to judge them by"),
            "{c:?}"
        );
        assert!(!c.evidence.contains("within"), "{c:?}");
    }

    #[test]
    fn zero_diagnostics_are_said_and_never_pass() {
        let c = run(&mut One(Ok(Some((fixture("sfp-zero-dom.bin"), vec![])))));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.evidence.contains("every reading is zero"), "{c:?}");
        assert!(c.fix.as_deref().unwrap().contains("reseat"), "{c:?}");
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
