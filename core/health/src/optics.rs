//! The `optics` check: each checked port's transceiver module, judged as `doctor`'s
//! optics topic judges it (one verdict, `rocewatch_optics::verdict::judge_module`): a
//! reading at or beyond its alarm level or a dark lane on a lit module is unhealthy, a
//! warning level warns, a module with nothing to judge is skipped with why. A module
//! that cannot be read is never unhealthy: the read's trouble is not the link's. On a
//! port whose link is up it is a warning (the module's reading is advisory to a link
//! that works, and a read that fails every run, EIO or an empty cage's, must not hold
//! `health --slurm`'s quarantine for ever: "cannot tell" releases nothing); on a port
//! that is not up it is "cannot tell" (the `ports` check says the link is down).
//!
//! Modules are read on the live host only, through ethtool netlink by page (the ioctls
//! where netlink cannot), which needs `CAP_NET_ADMIN` (`GENL_UNS_ADMIN_PERM` on
//! `ETHTOOL_MSG_MODULE_EEPROM_GET` in net/ethtool/netlink.c; `ETHTOOL_GMODULEEEPROM` is
//! outside `dev_ethtool()`'s unprivileged list in net/ethtool/ioctl.c): a run without it
//! says so, skipped.

use rocewatch_optics::verdict::{judge_module, ModuleLevel, ModuleVerdict};
use rocewatch_optics::Eeprom;

use super::deadline::{Board, Part};
use super::finding::{Finding, Status};
use super::link::LinkPort;
use crate::config::CheckName;

/// Why a module could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// This process lacks `CAP_NET_ADMIN`, which a module's read needs.
    Denied(String),
    /// The netdev is not in this network namespace (a pod without the host's network
    /// reading the host's sysfs): nothing of it can be read from here.
    NotHere(String),
    /// Anything else.
    Failed(String),
}

/// Where a netdev's module memory comes from: `Ok(None)` where the port has no module or
/// the driver does not read it.
pub trait ModuleReader {
    /// The module's memory as read, and what could not be read.
    fn module(&mut self, netdev: &str) -> Result<Option<(Eeprom, Vec<String>)>, ReadError>;
}

/// Each checked port's module finding (read through `reader`), or one finding saying
/// why none is read (`live` false: a tree has no modules).
pub fn optics(
    ports: &[LinkPort],
    live: bool,
    reader: &mut dyn ModuleReader,
    board: &Board,
) -> Vec<Finding> {
    if !live {
        return vec![Finding::host(
            "optics",
            Status::Skipped,
            "modules are read over ethtool netlink, on the live host only",
        )];
    }
    let part = Part::Check(CheckName::Optics);
    ports
        .iter()
        .map(|p| {
            let at = |status, what: String| {
                Finding::at(
                    "optics",
                    status,
                    &p.device,
                    Some(p.port),
                    p.netdev.as_deref(),
                    what,
                )
            };
            let Some(nd) = p.netdev.as_deref() else {
                return at(
                    Status::Skipped,
                    "no netdev: a module is read through its netdev".into(),
                );
            };
            board.reading(part, "optics", format!("{nd}'s module EEPROM"));
            match reader.module(nd) {
                Ok(Some((eeprom, unread))) => {
                    let (status, what) = judged(&judge_module(&eeprom, &unread));
                    at(status, what)
                }
                Ok(None) => at(
                    Status::Skipped,
                    "no module, or the driver does not read it".into(),
                ),
                Err(ReadError::Denied(e)) => at(
                    Status::Skipped,
                    format!("not read: {e}, which reading a module needs (health runs as root under Slurm and in node-problem-detector's privileged pod)"),
                ),
                Err(ReadError::NotHere(e)) => at(
                    Status::Skipped,
                    format!("not read: {e} (modules are read through the host's netdevs: run health in the host's network namespace, hostNetwork in a pod)"),
                ),
                Err(ReadError::Failed(e)) if p.link_up => at(
                    Status::Warning,
                    format!("the module could not be read: {e} (the link is up: its reading is advisory)"),
                ),
                Err(ReadError::Failed(e)) => {
                    at(Status::Unknown, format!("the module could not be read: {e}"))
                }
            }
        })
        .collect()
}

/// A module's verdict as a status and its words: the findings at the worst level first,
/// then the module, then what to do.
fn judged(v: &ModuleVerdict) -> (Status, String) {
    let status = match v.level {
        ModuleLevel::Ok => Status::Ok,
        ModuleLevel::Warn => Status::Warning,
        ModuleLevel::Fail => Status::Unhealthy,
        ModuleLevel::Unjudged => Status::Skipped,
    };
    let module = if v.inventory.is_empty() {
        "the module".to_string()
    } else {
        v.inventory.clone()
    };
    let worst: Vec<&str> = v
        .findings
        .iter()
        .filter(|f| f.level == v.level)
        .map(|f| f.what.as_str())
        .collect();
    let mut what = match v.level {
        ModuleLevel::Ok => format!("{module}: {}", v.readings),
        ModuleLevel::Unjudged if worst.is_empty() => {
            format!("{module}: {}: not judged", v.readings)
        }
        ModuleLevel::Unjudged => format!("{module}: {}: not judged", worst.join("; ")),
        _ => format!("{} ({module})", worst.join("; ")),
    };
    if !v.notes.is_empty() {
        what.push_str(&format!("; {}", v.notes.join("; ")));
    }
    if !v.unread.is_empty() {
        what.push_str(&format!("; not read: {}", v.unread.join("; ")));
    }
    let fixes = v.fixes();
    if status > Status::Skipped && !fixes.is_empty() {
        what.push_str(&format!("; fix: {}", fixes.join("; ")));
    }
    (status, what)
}

/// `CAP_NET_ADMIN` (include/uapi/linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;

/// Whether a `proc/PID/status` text's `CapEff` holds `CAP_NET_ADMIN`; `None` unreadable.
fn has_net_admin(status: &str) -> Option<bool> {
    rocewatch_doctor::userspace::has_effective_cap(status, CAP_NET_ADMIN)
}

/// This host's modules, through the one live reader (`rocewatch_netlink::module_eeprom::
/// read_port_module`: ethtool netlink opened at the first read, the ioctls' linear dump
/// where netlink cannot). Without `CAP_NET_ADMIN` nothing is asked: each read would be
/// refused (`EPERM`), which is how this process runs, not the module.
#[derive(Default)]
pub struct LiveModules {
    nl: Option<rocewatch_netlink::ethtool::EthtoolNetlink>,
    allowed: Option<bool>,
}

impl ModuleReader for LiveModules {
    fn module(&mut self, netdev: &str) -> Result<Option<(Eeprom, Vec<String>)>, ReadError> {
        use rocewatch_netlink::ethtool::EthtoolNetlink;
        let allowed = *self.allowed.get_or_insert_with(|| {
            std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| has_net_admin(&s))
                // Unreadable: ask, and let the kernel say.
                .unwrap_or(true)
        });
        if !allowed {
            return Err(ReadError::Denied(
                "this process has no CAP_NET_ADMIN".into(),
            ));
        }
        let name = std::ffi::CString::new(netdev)
            .map_err(|_| ReadError::Failed(format!("{netdev:?}: not a netdev name")))?;
        // SAFETY: a NUL-terminated name; if_nametoindex only reads it.
        if unsafe { libc::if_nametoindex(name.as_ptr()) } == 0 {
            return Err(ReadError::NotHere(format!(
                "{netdev} is not a netdev of this network namespace"
            )));
        }
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
        .map_err(ReadError::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The optics crate's fixtures, made field by field by its builders (their SOURCE.md).
    fn fixture(name: &str) -> Eeprom {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../optics/tests/fixtures");
        rocewatch_optics::dump::parse(&std::fs::read(dir.join(name)).unwrap()).unwrap()
    }

    struct One(Result<Option<(Eeprom, Vec<String>)>, ReadError>);

    impl ModuleReader for One {
        fn module(&mut self, _: &str) -> Result<Option<(Eeprom, Vec<String>)>, ReadError> {
            self.0.clone()
        }
    }

    fn run(r: Result<Option<(Eeprom, Vec<String>)>, ReadError>) -> Finding {
        run_on(r, false)
    }

    fn run_on(r: Result<Option<(Eeprom, Vec<String>)>, ReadError>, link_up: bool) -> Finding {
        let port = LinkPort {
            device: "mlx5_0".into(),
            port: 1,
            netdev: Some("eth0".into()),
            infiniband: false,
            link_up,
        };
        let mut f = optics(&[port], true, &mut One(r), &Board::new());
        assert_eq!(f.len(), 1, "{f:?}");
        f.remove(0)
    }

    #[test]
    fn a_module_at_its_alarm_level_is_unhealthy_naming_the_reading_and_the_fix() {
        let f = run(Ok(Some((fixture("sfp-10g-sr-rx-low.hex"), Vec::new()))));
        assert_eq!(f.status, Status::Unhealthy, "{f:?}");
        assert!(f.what.contains("rx power"), "{f:?}");
        assert!(f.what.contains("; fix: "), "{f:?}");
        assert_eq!(f.subject(), "mlx5_0/1 eth0");
    }

    /// What the verdict saw and left unjudged (a lane whose data path is not activated)
    /// is said in the finding, as doctor says it.
    #[test]
    fn the_verdicts_notes_are_said() {
        let v = ModuleVerdict {
            level: ModuleLevel::Ok,
            inventory: "QSFP-DD X (CMIS)".into(),
            unread: Vec::new(),
            notes: vec![
                "data path not activated on lane 3 (DPDeactivated): its light is not judged".into(),
            ],
            readings: "41.2 °C".into(),
            findings: Vec::new(),
        };
        let (status, what) = judged(&v);
        assert_eq!(status, Status::Ok);
        assert!(what.contains("lane 3 (DPDeactivated)"), "{what}");
    }

    #[test]
    fn a_module_within_its_thresholds_is_ok() {
        let f = run(Ok(Some((fixture("qsfp28-sr4.hexdump"), Vec::new()))));
        assert_eq!(f.status, Status::Ok, "{f:?}");
        assert!(f.what.contains("QSFP28"), "{f:?}");
    }

    #[test]
    fn diagnostics_all_zero_warn_and_never_pass() {
        let f = run(Ok(Some((fixture("sfp-zero-dom.bin"), Vec::new()))));
        assert_eq!(f.status, Status::Warning, "{f:?}");
    }

    #[test]
    fn no_module_denied_and_failed_reads_never_drain() {
        let f = run(Ok(None));
        assert_eq!(f.status, Status::Skipped, "{f:?}");
        let f = run(Err(ReadError::Denied(
            "this process has no CAP_NET_ADMIN".into(),
        )));
        assert_eq!(f.status, Status::Skipped, "{f:?}");
        assert!(f.what.contains("CAP_NET_ADMIN"), "{f:?}");
        let f = run(Err(ReadError::NotHere(
            "eth0 is not a netdev of this network namespace".into(),
        )));
        assert_eq!(f.status, Status::Skipped, "{f:?}");
        assert!(f.what.contains("hostNetwork"), "{f:?}");
        let f = run(Err(ReadError::Failed("EIO".into())));
        assert_eq!(f.status, Status::Unknown, "{f:?}");
        assert_eq!(f.what, "the module could not be read: EIO");
    }

    /// A read that fails every run (EIO, an empty cage) on a link that is up: a warning,
    /// so that `health --slurm` can still release a quarantine entered for a flap.
    #[test]
    fn a_failed_read_on_a_link_that_is_up_warns() {
        let f = run_on(Err(ReadError::Failed("EIO".into())), true);
        assert_eq!(f.status, Status::Warning, "{f:?}");
        assert!(f.what.contains("the link is up"), "{f:?}");
    }

    /// The live reader on this machine: a netdev that is not here is said so, never
    /// "cannot tell" (a pod without the host's network reading the host's sysfs).
    #[test]
    fn the_live_reader_skips_a_netdev_not_in_this_namespace() {
        let mut live = LiveModules {
            nl: None,
            allowed: Some(true),
        };
        let e = live.module("rwnosuch0").unwrap_err();
        assert!(matches!(e, ReadError::NotHere(_)), "{e:?}");
    }

    #[test]
    fn cap_net_admin_is_read_from_cap_eff() {
        // root's full set, and a plain user's.
        assert_eq!(
            has_net_admin("CapInh:\t0\nCapEff:\t000001ffffffffff\n"),
            Some(true)
        );
        assert_eq!(has_net_admin("CapEff:\t0000000000000000\n"), Some(false));
        assert_eq!(has_net_admin("CapEff:\t0000000000001000\n"), Some(true));
        assert_eq!(has_net_admin("Name:\tx\n"), None);
    }

    #[test]
    fn off_the_live_host_one_finding_says_why() {
        let f = optics(&[], false, &mut One(Ok(None)), &Board::new());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Skipped);
    }
}
