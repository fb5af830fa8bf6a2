//! The userspace verbs stack an application needs before any packet: per RDMA device its
//! `uverbs` character device (and whether the workload's user can open it), the RDMA CM
//! device, the locked-memory limit registrations are charged to, and the libibverbs
//! provider that serves the device's driver, with rdma-core's version.
//!
//! Every path is read under a root: sysfs (`class/infiniband_verbs/uverbsN/{ibdev,dev}`,
//! `class/misc/rdma_cm/dev`, `drivers/infiniband/core/uverbs_main.c` and `ucma.c`), the
//! host's file system (`dev/infiniband/`, `etc/libibverbs.d/`, the provider libraries),
//! and proc (`PID/limits`, `PID/status`). Facts from the sources:
//! - the kernel creates `/dev/infiniband/uverbsN` (major 231) and `rdma_cm` (misc) with
//!   mode 0666; rdma-core's udev rules set no mode; a container sees them only when
//!   passed in;
//! - `ib_umem_get` (`drivers/infiniband/core/umem.c`) charges every pinned page of a
//!   memory registration, and of each QP's and CQ's rings, to the soft `RLIMIT_MEMLOCK`
//!   (EPERM at 0, ENOMEM over it) unless the process has `CAP_IPC_LOCK`; GPU memory
//!   registered through dma-buf is not charged, through nvidia-peermem it is;
//! - libibverbs reads `driver NAME` lines from `/etc/libibverbs.d/*` and loads
//!   `libNAME-rdmavPABI.so` from its provider directory; a device no provider matches is
//!   silently left out of `ibv_get_device_list()`; its own file name carries rdma-core's
//!   version (`libibverbs.so.1.ABI.VERSION`).

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rocewatch_plugin_api::Inventory;

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// `CAP_IPC_LOCK` (`include/uapi/linux/capability.h`).
const CAP_IPC_LOCK: u32 = 14;
/// The old default limits (64 KiB: the kernel's before 5.16, Docker on such hosts):
/// registering anything real fails under them.
const TINY_MEMLOCK: u64 = 64 * 1024;

/// Who the workload runs as, for the device files' permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gids: Vec<u32>,
}

impl User {
    /// The user `name` (passwd and its groups, through the C library).
    pub fn lookup(name: &str) -> Result<User, String> {
        let c = std::ffi::CString::new(name).map_err(|_| format!("{name:?}: not a user name"))?;
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        // SAFETY: getpwnam_r fills `pw` with pointers into `buf`, both alive here.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let r =
            unsafe { libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
        if r != 0 || out.is_null() {
            return Err(format!("no user {name:?} on this host"));
        }
        let mut gids = vec![0 as libc::gid_t; 256];
        let mut n = gids.len() as libc::c_int;
        // SAFETY: getgrouplist writes at most `n` groups into `gids`.
        let r = unsafe { libc::getgrouplist(c.as_ptr(), pw.pw_gid, gids.as_mut_ptr(), &mut n) };
        gids.truncate(if r < 0 { 0 } else { n.max(0) as usize });
        if !gids.contains(&pw.pw_gid) {
            gids.push(pw.pw_gid);
        }
        Ok(User {
            name: name.to_string(),
            uid: pw.pw_uid,
            gids,
        })
    }

    /// The process running doctor.
    pub fn current() -> User {
        // SAFETY: plain getters; getgroups writes at most `n` groups.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let mut gids = vec![0 as libc::gid_t; 256];
        let n = unsafe { libc::getgroups(gids.len() as libc::c_int, gids.as_mut_ptr()) };
        gids.truncate(n.max(0) as usize);
        gids.push(gid);
        User {
            name: format!("uid {uid}"),
            uid,
            gids,
        }
    }
}

/// What the checks are told about the workload.
#[derive(Debug, Clone)]
pub struct Workload {
    pub user: User,
    /// The process whose limits count (`self` when none).
    pub pid: Option<u32>,
    /// What the operator says the workload registers, bytes.
    pub memlock_need: Option<u64>,
    /// systemd's `DefaultLimitMEMLOCK` (`systemctl show`), when asked.
    pub systemd_default: Option<Result<String, String>>,
}

/// The roots everything is read under.
pub struct Roots<'a> {
    pub sys: &'a Path,
    /// The host's file system (`/`): `dev/`, `etc/`, `usr/lib*`.
    pub rootfs: &'a Path,
    pub proc: &'a Path,
}

/// `(uverbsN, "major:minor")` of each RDMA device, from sysfs.
fn uverbs_of(sys: &Path) -> Vec<(String, String, String)> {
    let dir = sys.join("class/infiniband_verbs");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("uverbs") {
            continue;
        }
        let read = |f: &str| {
            std::fs::read_to_string(e.path().join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        out.push((read("ibdev"), name, read("dev")));
    }
    out.sort();
    out
}

/// `rwx` bits `user` has on a file of `mode`, owner `uid`, group `gid`.
fn can_read_write(user: &User, mode: u32, uid: u32, gid: u32) -> bool {
    if user.uid == 0 {
        return true;
    }
    let bits = if user.uid == uid {
        mode >> 6
    } else if user.gids.contains(&gid) {
        mode >> 3
    } else {
        mode
    };
    bits & 0o6 == 0o6
}

/// A character device node at `node` for `dev` ("231:192"): there (itself, or through
/// links that lead to it), a character device of that number, openable by the user;
/// else what is wrong and the fix.
fn node_verdict(
    rootfs: &Path,
    node: &Path,
    dev: &str,
    user: &User,
) -> Result<String, (String, String)> {
    let shown = node.display().to_string();
    let m = match follow(rootfs, node) {
        Ok((_, m, _)) => m,
        Err(why) if std::fs::symlink_metadata(node).is_ok() => {
            return Err((
                why,
                format!(
                    "remove the link and let udev create the node: rm {}; udevadm trigger",
                    word(&shown)
                ),
            ))
        }
        Err(_) => {
            return Err((
                format!("{shown} is not there"),
                format!(
                    "a container sees it only when passed in: docker/podman run --device {} (Kubernetes: an RDMA device plugin's resource); on the host, udev creates it when the module loads",
                    word(&format!("/dev/infiniband/{}", node.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()))
                ),
            ))
        }
    };
    if !m.file_type().is_char_device() {
        return Err((
            format!("{shown} is not a character device"),
            format!(
                "remove it and let udev recreate it: rm {}; udevadm trigger",
                word(&shown)
            ),
        ));
    }
    let (maj, min) = (libc::major(m.rdev()), libc::minor(m.rdev()));
    if !dev.is_empty() && format!("{maj}:{min}") != dev {
        return Err((
            format!("{shown} is device {maj}:{min}, the kernel's is {dev}"),
            format!(
                "rm {}; udevadm trigger (a stale node from another boot or image)",
                word(&shown)
            ),
        ));
    }
    let mode = m.permissions().mode() & 0o777;
    if !can_read_write(user, mode, m.uid(), m.gid()) {
        return Err((
            format!(
                "{shown} is mode {mode:o}, owner {}:{}: {} cannot open it read-write",
                m.uid(),
                m.gid(),
                user.name
            ),
            format!(
                "the kernel makes it 0666: find the udev rule that changed it (grep -r infiniband /etc/udev/rules.d), or chmod 0666 {}",
                word(&shown)
            ),
        ));
    }
    Ok(format!("{shown} ({maj}:{min}, mode {mode:o})"))
}

/// `uverbs` and `rdma-cm` checks.
pub fn device_file_checks(r: &Roots, inv: &Inventory, user: &User) -> Vec<Check> {
    let uverbs = uverbs_of(r.sys);
    let mut out = Vec::new();
    for d in &inv.devices {
        let subject = d.name.as_str();
        let Some((_, name, dev)) = uverbs.iter().find(|(ib, _, _)| ib == &d.name) else {
            out.push(check(
                "uverbs",
                subject,
                Status::Fail,
                format!(
                    "no uverbs device for {} in {}: no application can open it (ib_uverbs not loaded)",
                    d.name,
                    r.sys.join("class/infiniband_verbs").display()
                ),
                Some("modprobe ib_uverbs".into()),
            ));
            continue;
        };
        let node = r.rootfs.join("dev/infiniband").join(name);
        out.push(match node_verdict(r.rootfs, &node, dev, user) {
            Ok(e) => check(
                "uverbs",
                subject,
                Status::Pass,
                format!("{name}: {e}"),
                None,
            ),
            Err((e, fix)) => check(
                "uverbs",
                subject,
                Status::Fail,
                format!("{name}: {e}"),
                Some(fix),
            ),
        });
    }
    let cm_sys = r.sys.join("class/misc/rdma_cm/dev");
    out.push(match std::fs::read_to_string(&cm_sys) {
        Err(_) => check(
            "rdma-cm",
            "",
            Status::Warn,
            format!(
                "{} is not there (rdma_ucm not loaded): RDMA CM applications (rping, NVMe over Fabrics, iSER, UCX, Open MPI) cannot connect",
                cm_sys.display()
            ),
            Some("modprobe rdma_ucm".into()),
        ),
        Ok(dev) => {
            let node = r.rootfs.join("dev/infiniband/rdma_cm");
            match node_verdict(r.rootfs, &node, dev.trim(), user) {
                Ok(e) => check("rdma-cm", "", Status::Pass, e, None),
                Err((e, fix)) => check("rdma-cm", "", Status::Warn, format!("{e}: RDMA CM applications cannot connect"), Some(fix)),
            }
        }
    });
    out
}

/// A `limits` line's soft value: bytes, or `None` for unlimited.
fn parse_limit(v: &str) -> Result<Option<u64>, String> {
    match v {
        "unlimited" | "infinity" => Ok(None),
        v => v
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("{v:?} is not a limit")),
    }
}

/// The soft and hard "Max locked memory" of `proc/PID/limits`.
pub fn memlock_of(limits: &str) -> Result<(Option<u64>, Option<u64>), String> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .ok_or("no \"Max locked memory\" line")?;
    let rest: Vec<&str> = line["Max locked memory".len()..]
        .split_whitespace()
        .collect();
    if rest.len() < 2 {
        return Err(format!("{line:?}: no soft and hard limit"));
    }
    Ok((parse_limit(rest[0])?, parse_limit(rest[1])?))
}

/// Whether `proc/PID/status`'s `CapEff` holds `CAP_IPC_LOCK`.
pub fn has_ipc_lock(status: &str) -> Option<bool> {
    has_effective_cap(status, CAP_IPC_LOCK)
}

/// Whether a `proc/PID/status` text's `CapEff` holds capability number `cap`
/// (include/uapi/linux/capability.h); `None` when there is no readable `CapEff`.
pub fn has_effective_cap(status: &str, cap: u32) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16)
        .ok()
        .map(|c| cap < 64 && c & (1 << cap) != 0)
}

fn size(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// The `memlock` check of the workload's process (or doctor's own), and of systemd's
/// default for services when known.
pub fn memlock_checks(r: &Roots, w: &Workload) -> Vec<Check> {
    let pid = w.pid.map_or("self".to_string(), |p| p.to_string());
    let whose = w
        .pid
        .map_or("this process".to_string(), |p| format!("process {p}"));
    let limits_path = r.proc.join(&pid).join("limits");
    let fix = "LimitMEMLOCK=infinity in the workload's systemd unit (or DefaultLimitMEMLOCK=infinity in /etc/systemd/system.conf.d/), ulimit -l unlimited in its shell, docker/podman run --ulimit memlock=-1, or /etc/security/limits.d/: * - memlock unlimited";
    let mut out = Vec::new();
    let limits = match std::fs::read_to_string(&limits_path) {
        Ok(t) => memlock_of(&t).map_err(|e| format!("{}: {e}", limits_path.display())),
        Err(e) => Err(format!("{}: {e}", limits_path.display())),
    };
    let ipc_lock = std::fs::read_to_string(r.proc.join(&pid).join("status"))
        .ok()
        .and_then(|s| has_ipc_lock(&s));
    out.push(match limits {
        Err(e) => check("memlock", "", Status::Skip, format!("locked-memory limit of {whose} not read: {e}"), None),
        Ok(_) if ipc_lock == Some(true) => check(
            "memlock",
            "",
            Status::Pass,
            format!("{whose} has CAP_IPC_LOCK: registrations are not held to RLIMIT_MEMLOCK"),
            None,
        ),
        Ok((None, _)) => check("memlock", "", Status::Pass, format!("{whose}: locked memory unlimited"), None),
        Ok((Some(soft), hard)) => {
            let hard = hard.map_or("unlimited".into(), size);
            let need = w.memlock_need;
            let (status, why) = if soft == 0 {
                (Status::Fail, "0: every registration fails with EPERM".to_string())
            } else if need.is_some_and(|n| soft < n) {
                (
                    Status::Fail,
                    format!("below the {} the workload registers (--memlock-need): ibv_reg_mr fails with ENOMEM", size(need.unwrap_or(0))),
                )
            } else if soft <= TINY_MEMLOCK {
                (Status::Fail, "the old default: ibv_reg_mr and QP creation fail with \"Cannot allocate memory\" for any real buffer".to_string())
            } else {
                (
                    Status::Warn,
                    "finite: every registered host buffer, every nvidia-peermem GPU buffer and each QP's and CQ's rings count against it (dma-buf GPU buffers do not), so a larger job fails in ibv_reg_mr with ENOMEM".to_string(),
                )
            };
            check(
                "memlock",
                "",
                status,
                format!("{whose}: locked memory {} (hard {hard}): {why}", size(soft)),
                Some(fix.into()),
            )
        }
    });
    match &w.systemd_default {
        None => {}
        Some(Err(e)) => out.push(check("memlock", "systemd", Status::Skip, format!("DefaultLimitMEMLOCK not read: {e}"), None)),
        Some(Ok(v)) => out.push(match parse_limit(v.trim()) {
            Ok(None) => check("memlock", "systemd", Status::Pass, "DefaultLimitMEMLOCK infinity: services get unlimited locked memory", None),
            Ok(Some(b)) => check(
                "memlock",
                "systemd",
                Status::Warn,
                format!("DefaultLimitMEMLOCK {}: every service without its own LimitMEMLOCK= (an RDMA workload's unit, a container runtime and its containers) gets it", size(b)),
                Some("LimitMEMLOCK=infinity in the workload's unit, or DefaultLimitMEMLOCK=infinity in /etc/systemd/system.conf.d/rdma.conf and systemctl daemon-reexec".into()),
            ),
            Err(e) => check("memlock", "systemd", Status::Skip, format!("DefaultLimitMEMLOCK: {e}"), None),
        }),
    }
    out
}

/// The libibverbs provider of a device's driver (the parent function's driver, or the
/// RDMA module's): rdma-core's `providers/*` and the kernel's `RDMA_DRIVER_*`.
pub fn provider_for(driver: &str) -> Option<&'static str> {
    Some(match driver {
        "mlx5_core" | "mlx5_ib" => "mlx5",
        "mlx4_core" | "mlx4_ib" | "mlx4_en" => "mlx4",
        "bnxt_en" | "bnxt_re" => "bnxt_re",
        "ice" | "i40e" | "irdma" => "irdma",
        "qede" | "qed" | "qedr" => "qedr",
        "efa" => "efa",
        "be2net" | "ocrdma" => "ocrdma",
        "cxgb4" | "iw_cxgb4" => "cxgb4",
        "vmw_pvrdma" => "vmw_pvrdma",
        "erdma" => "erdma",
        "mana" | "mana_ib" => "mana",
        "hns3" | "hns_roce_hw_v2" => "hns",
        "rdma_rxe" | "rxe" => "rxe",
        "siw" => "siw",
        _ => return None,
    })
}

/// The driver a device's provider is chosen by: its parent's driver; for a software
/// device (a `parent` netdev attribute, no parent device), rxe or siw by its node type
/// (iWARP's RNIC is siw).
fn device_driver(sys: &Path, dev: &str) -> Option<String> {
    let d = sys.join("class/infiniband").join(dev);
    if let Some(n) = std::fs::read_link(d.join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    {
        return Some(n);
    }
    if d.join("parent").exists() {
        let node = std::fs::read_to_string(d.join("node_type")).unwrap_or_default();
        return Some(
            if node.contains("RNIC") {
                "siw"
            } else {
                "rdma_rxe"
            }
            .into(),
        );
    }
    None
}

/// The directories libibverbs loads providers from, and where its own library lies.
fn lib_dirs(rootfs: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(rootfs.join("usr/lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.join("libibverbs").is_dir()
                || p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains("-linux-"))
        })
        .collect();
    dirs.sort();
    dirs.extend(
        ["usr/lib64", "usr/lib", "lib64"]
            .iter()
            .map(|d| rootfs.join(d)),
    );
    dirs
}

/// The longest chain of links followed, as the kernel's `MAXSYMLINKS`.
const MAX_LINKS: usize = 40;

/// Where `path` (under `rootfs`) leads, following its links as the host would: an
/// absolute target is read under `rootfs` (a pod's `/host`), a relative one beside its
/// link. The error names the link and its target: a link to nothing, a loop of links.
fn follow(rootfs: &Path, path: &Path) -> Result<(PathBuf, std::fs::Metadata, String), String> {
    let mut at = path.to_path_buf();
    let mut chain = String::new();
    for _ in 0..MAX_LINKS {
        let m = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if chain.is_empty() => return Err(format!("{}: {e}", at.display())),
            Err(_) => return Err(format!("{}{chain}: a link to nothing", path.display())),
        };
        if !m.file_type().is_symlink() {
            return Ok((at, m, chain));
        }
        let target = std::fs::read_link(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        chain.push_str(&format!(" -> {}", target.display()));
        at = match target.strip_prefix("/") {
            Ok(rel) => rootfs.join(rel),
            Err(_) => at.parent().unwrap_or(Path::new("")).join(&target),
        };
    }
    Err(format!(
        "{}{chain}: a loop of links (more than {MAX_LINKS})",
        path.display()
    ))
}

/// The regular file `path` (under `rootfs`) leads to: a link to nothing, a loop of links
/// or anything but a regular file is not a library ([`follow`]).
pub fn resolve_file(rootfs: &Path, path: &Path) -> Result<PathBuf, String> {
    let (at, m, chain) = follow(rootfs, path)?;
    if !m.is_file() {
        return Err(format!("{}{chain}: not a regular file", path.display()));
    }
    Ok(at)
}

/// rdma-core's version from `libibverbs.so.1.ABI.VERSION` (e.g. `44.0`), and where; or
/// why the library is not usable: that file, or `libibverbs.so.1` beside it (the name
/// every verbs application is linked against), a link that leads nowhere.
pub fn rdma_core_version(rootfs: &Path) -> Option<Result<(String, PathBuf), String>> {
    let mut broken = None;
    for dir in lib_dirs(rootfs) {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            // ABI level, then the package version.
            let Some(v) = n
                .strip_prefix("libibverbs.so.1.")
                .and_then(|rest| rest.split_once('.'))
                .map(|(_, v)| v)
                .filter(|v| !v.is_empty())
            else {
                continue;
            };
            let soname = dir.join("libibverbs.so.1");
            let usable = resolve_file(rootfs, &e.path()).and_then(|_| {
                match std::fs::symlink_metadata(&soname) {
                    // Absent: ldconfig makes it from the versioned file's SONAME.
                    Err(_) => Ok(()),
                    Ok(_) => resolve_file(rootfs, &soname).map(drop),
                }
            });
            match usable {
                Ok(()) => return Some(Ok((v.to_string(), e.path()))),
                Err(why) => {
                    broken.get_or_insert(why);
                }
            }
        }
    }
    broken.map(Err)
}

/// The `driver NAME` lines of `etc/libibverbs.d/*`.
fn configured_providers(rootfs: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(rootfs.join("etc/libibverbs.d"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for l in std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
        {
            if let Some(n) = l.trim().strip_prefix("driver") {
                out.push(n.trim().to_string());
            }
        }
    }
    out
}

/// `libNAME-rdmav*.so` in a provider directory: the first that is (or leads to) a
/// regular file; else why the first found is not one.
fn provider_library(rootfs: &Path, name: &str) -> Option<Result<PathBuf, String>> {
    let prefix = format!("lib{name}-rdmav");
    let mut broken = None;
    for d in lib_dirs(rootfs).into_iter().map(|d| d.join("libibverbs")) {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if !(n.starts_with(&prefix) && n.ends_with(".so")) {
                continue;
            }
            match resolve_file(rootfs, &e.path()) {
                Ok(_) => return Some(Ok(e.path())),
                Err(why) => {
                    broken.get_or_insert(why);
                }
            }
        }
    }
    broken.map(Err)
}

/// The `provider` check per device, and rdma-core's version.
pub fn provider_checks(r: &Roots, inv: &Inventory) -> Vec<Check> {
    let version = rdma_core_version(r.rootfs);
    let mut out = vec![match &version {
        Some(Ok((v, at))) => check("rdma-core", "", Status::Pass, format!("libibverbs of rdma-core {v} ({})", at.display()), None),
        Some(Err(why)) => check(
            "rdma-core",
            "",
            Status::Fail,
            format!("{why}: no verbs application can load libibverbs"),
            Some("reinstall rdma-core's libibverbs (apt install --reinstall libibverbs1; dnf reinstall libibverbs), or run ldconfig if only the link is stale".into()),
        ),
        None => check(
            "rdma-core",
            "",
            Status::Fail,
            format!("no libibverbs.so.1.* under {}: no verbs application can run", r.rootfs.display()),
            Some("apt install rdma-core ibverbs-providers (Debian, Ubuntu), dnf install rdma-core libibverbs (RHEL, Rocky, Alma); in a container image the same".into()),
        ),
    }];
    let configured = configured_providers(r.rootfs);
    for d in &inv.devices {
        let Some(driver) = device_driver(r.sys, &d.name) else {
            out.push(check(
                "provider",
                &d.name,
                Status::Skip,
                "the device's driver is not in sysfs: its provider cannot be told",
                None,
            ));
            continue;
        };
        let Some(p) = provider_for(&driver) else {
            out.push(check(
                "provider",
                &d.name,
                Status::Info,
                format!("driver {driver}: no rdma-core provider known to rocewatch"),
                None,
            ));
            continue;
        };
        let lib = provider_library(r.rootfs, p);
        let listed = configured.iter().any(|c| c == p);
        let missing = match (listed, &lib) {
            (true, Some(Ok(lib))) => {
                out.push(check(
                    "provider",
                    &d.name,
                    Status::Pass,
                    format!("driver {driver}: provider {p} ({})", lib.display()),
                    None,
                ));
                continue;
            }
            (false, None) => {
                format!("no etc/libibverbs.d file says \"driver {p}\" and no lib{p}-rdmav*.so")
            }
            (false, Some(_)) => format!(
                "lib{p}-rdmav*.so is there but no etc/libibverbs.d file says \"driver {p}\""
            ),
            (true, None) => {
                format!("etc/libibverbs.d names it but no lib{p}-rdmav*.so is installed")
            }
            (true, Some(Err(why))) => format!("etc/libibverbs.d names it but {why}"),
        };
        out.push(check(
            "provider",
            &d.name,
            Status::Fail,
            format!(
                "driver {driver} needs libibverbs provider {p}: {missing}; libibverbs leaves {} out of its device list (ibv_devices shows it not)",
                d.name
            ),
            Some("apt install ibverbs-providers (Debian, Ubuntu: every provider), dnf install libibverbs (RHEL, Rocky, Alma); a container image needs it too".into()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     \n\
Max cpu time              unlimited            unlimited            seconds   \n\
Max locked memory         8388608              unlimited            bytes     \n";

    #[test]
    fn limits_and_capabilities_as_proc_writes_them() {
        assert_eq!(memlock_of(LIMITS).unwrap(), (Some(8 << 20), None));
        assert!(memlock_of("Max cpu time unlimited unlimited seconds\n")
            .unwrap_err()
            .contains("Max locked memory"));
        // CapEff of root (all 41 capabilities) and of a plain user.
        assert_eq!(
            has_ipc_lock("CapInh:\t0\nCapEff:\t000001ffffffffff\n"),
            Some(true)
        );
        assert_eq!(has_ipc_lock("CapEff:\t0000000000000000\n"), Some(false));
        assert_eq!(has_ipc_lock("Name:\tx\n"), None);
    }

    #[test]
    fn permissions_for_owner_group_and_others() {
        let u = User {
            name: "alice".into(),
            uid: 1000,
            gids: vec![1000, 27],
        };
        assert!(can_read_write(&u, 0o666, 0, 0));
        assert!(!can_read_write(&u, 0o660, 0, 0));
        assert!(can_read_write(&u, 0o660, 0, 27));
        assert!(can_read_write(&u, 0o600, 1000, 0));
        assert!(!can_read_write(&u, 0o644, 0, 0));
    }

    #[test]
    fn providers_of_the_drivers() {
        assert_eq!(provider_for("mlx5_core"), Some("mlx5"));
        assert_eq!(provider_for("ice"), Some("irdma"));
        assert_eq!(provider_for("bnxt_en"), Some("bnxt_re"));
        assert_eq!(provider_for("rdma_rxe"), Some("rxe"));
        assert_eq!(provider_for("e1000e"), None);
    }

    /// A device file that is a link is followed: to a character device it is that device,
    /// to nothing it is named with its target, never "there" because the link is.
    #[test]
    fn device_files_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let everyone = User {
            name: "every user".into(),
            uid: u32::MAX - 1,
            gids: Vec::new(),
        };
        let null = dir.path().join("null-link");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        let ok = node_verdict(Path::new("/"), &null, "1:3", &everyone).unwrap();
        assert!(ok.contains("1:3"), "{ok}");
        let gone = dir.path().join("uverbs0");
        std::os::unix::fs::symlink("/dev/infiniband/uverbs9", &gone).unwrap();
        let (why, fix) = node_verdict(dir.path(), &gone, "231:192", &everyone).unwrap_err();
        assert!(
            why.contains("-> /dev/infiniband/uverbs9: a link to nothing"),
            "{why}"
        );
        assert!(fix.starts_with("remove the link"), "{fix}");
    }

    proptest! {
        /// Any text as `PID/limits` and `PID/status`: a limit, or an error naming the
        /// line or value at fault; never a panic.
        #[test]
        fn proc_files_never_panic(text in ".{0,300}", soft in ".{0,12}", hard in ".{0,12}") {
            if let Err(e) = memlock_of(&text) {
                prop_assert!(e.contains("Max locked memory") || e.contains("limit"), "{}", e);
            }
            let line = format!("Max locked memory {soft} {hard} bytes\n");
            if let Err(e) = memlock_of(&line) {
                prop_assert!(e.contains("limit"), "{}", e);
            }
            let _ = has_ipc_lock(&text);
        }
    }
}
