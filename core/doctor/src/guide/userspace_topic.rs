//! The userspace topic of the guide: who the workload is (`--user`, `--pid`, `--unit`),
//! asked of the host (the C library, systemd), then the checks of [`crate::checks::userspace`].

use super::host::Host;
use crate::check::{check, Check, Status};
use crate::checks::userspace::{self as us, Roots, User, Workload};

/// `systemctl show --property=NAME --value [UNIT]`.
fn systemctl_show(property: &str, unit: Option<&str>) -> Result<String, String> {
    systemctl_show_with("systemctl", property, unit, crate::tool::TOOL_TIMEOUT)
}

/// `program show ...` within `timeout`, through the doctor's bounded runner (a process
/// group killed at the bound).
fn systemctl_show_with(
    program: &str,
    property: &str,
    unit: Option<&str>,
    timeout: std::time::Duration,
) -> Result<String, String> {
    let property = format!("--property={property}");
    let mut args = vec!["show", property.as_str(), "--value"];
    if let Some(u) = unit {
        args.extend(["--", u]);
    }
    match crate::tool::run_tool_within(program, &args, timeout) {
        None => Err(format!("{program}: not found (not a systemd host)")),
        Some(r) => r.map(|out| out.trim().to_string()),
    }
}

pub(crate) fn checks(h: &Host) -> Vec<Check> {
    let mut out = Vec::new();
    let user = match h.opts.user.as_deref() {
        None => User::current(),
        Some(name) => match User::lookup(name) {
            Ok(u) => u,
            Err(e) => {
                out.push(check("userspace", "", Status::Fail, e, None));
                User::current()
            }
        },
    };
    // A unit's main process, or the limit systemd gives it when it is not running.
    let mut pid = h.opts.pid;
    if let (Some(unit), None) = (h.opts.unit.as_deref(), pid) {
        match systemctl_show("MainPID", Some(unit)) {
            Ok(p) if p != "0" && !p.is_empty() => pid = p.parse().ok(),
            Ok(_) => out.push(match systemctl_show("LimitMEMLOCKSoft", Some(unit)) {
                Ok(v) => {
                    let finite = v != "infinity";
                    check(
                        "memlock",
                        unit,
                        if finite { Status::Warn } else { Status::Pass },
                        format!("{unit} is not running; it would start with LimitMEMLOCK {v}"),
                        finite.then(|| {
                            format!(
                                "systemctl edit {}: [Service] LimitMEMLOCK=infinity",
                                crate::shell::word_on_one_line(unit)
                            )
                        }),
                    )
                }
                Err(e) => check("memlock", unit, Status::Skip, e, None),
            }),
            Err(e) => out.push(check("memlock", unit, Status::Skip, e, None)),
        }
    }
    let w = Workload {
        user,
        pid,
        memlock_need: h.opts.memlock_need,
        systemd_default: h.live.then(|| systemctl_show("DefaultLimitMEMLOCK", None)),
    };
    let r = Roots {
        sys: &h.root,
        rootfs: &h.opts.rootfs,
        proc: &h.opts.procfs_root,
    };
    out.extend(us::provider_checks(&r, &h.inv));
    out.extend(us::device_file_checks(&r, &h.inv, &w.user));
    out.extend(us::memlock_checks(&r, &w));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `systemctl` whose bus does not answer (here a wrapper whose child hangs) is
    /// killed at the bound with its child; the check is skipped saying so.
    #[test]
    fn a_hanging_systemctl_is_killed_at_the_bound() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let tool = dir.path().join("systemctl");
        std::fs::write(
            &tool,
            format!(
                "#!/bin/sh\nsh -c 'echo $$ > {}; exec sleep 20'\necho 0\n",
                pidfile.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        let r = systemctl_show_with(
            tool.to_str().unwrap(),
            "MainPID",
            Some("trainer.service"),
            std::time::Duration::from_secs(1),
        );
        let took = started.elapsed();
        let e = r.unwrap_err();
        assert!(took < std::time::Duration::from_secs(3), "{took:?}: {e}");
        assert!(e.contains("MainPID") && e.contains("killed"), "{e}");
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        assert!(
            crate::tool::gone(pid.trim()),
            "systemctl's child {} lives on",
            pid.trim()
        );
        let e = systemctl_show_with(
            "/nonexistent/systemctl",
            "MainPID",
            None,
            crate::tool::TOOL_TIMEOUT,
        )
        .unwrap_err();
        assert!(e.contains("not a systemd host"), "{e}");
    }
}
