//! The userspace topic of the guide: who the workload is (`--user`, `--pid`, `--unit`),
//! asked of the host (the C library, systemd), then the checks of [`super::userspace`].

use super::check::{check, Check, Status};
use super::host::Host;
use super::userspace::{self as us, Roots, User, Workload};

/// `systemctl show --property=NAME --value [UNIT]`.
fn systemctl_show(property: &str, unit: Option<&str>) -> Result<String, String> {
    let mut c = std::process::Command::new("systemctl");
    c.args(["show", &format!("--property={property}"), "--value"]);
    if let Some(u) = unit {
        c.arg("--").arg(u);
    }
    let o = c
        .output()
        .map_err(|e| format!("systemctl: {e} (not a systemd host)"))?;
    if !o.status.success() {
        return Err(format!(
            "systemctl show: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

pub(super) fn checks(h: &Host) -> Vec<Check> {
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
