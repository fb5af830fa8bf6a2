//! The driver and firmware of the RDMA devices: which build of each driver runs (the
//! kernel's own module or a vendor package's, its version), whether the modules of the
//! RDMA stack come from one build, and one firmware across devices of one driver.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rocewatch_plugin_api::{DriverModule, Inventory};
use rocewatch_sysfs::module::ModuleInfo;
use rocewatch_sysfs::SysRoot;

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// One check per driver: the firmware its devices run.
pub(crate) fn firmware_checks(inv: &Inventory) -> Vec<Check> {
    let mut out = Vec::new();
    let mut fw: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for d in &inv.devices {
        fw.entry(d.driver.clone().unwrap_or_else(|| "unknown".into()))
            .or_default()
            .insert(d.fw_ver.clone().unwrap_or_else(|| "unknown".into()));
    }
    for (driver, versions) in fw {
        let v: Vec<String> = versions.into_iter().collect();
        out.push(if v.len() == 1 && v[0] == "unknown" {
            check(
                "firmware",
                &driver,
                Status::Info,
                "the devices report no firmware version (soft-RoCE has none)",
                None,
            )
        } else if v.len() > 1 {
            check(
                "firmware",
                &driver,
                Status::Warn,
                format!("{driver} devices run different firmware: {}", v.join(", ")),
                Some("update every NIC to one firmware (mlxfwmanager / the vendor's tool)".into()),
            )
        } else {
            check(
                "firmware",
                &driver,
                Status::Pass,
                format!("firmware {} on every device", v[0]),
                None,
            )
        });
    }
    out
}

/// The modules of the RDMA stack a driver module runs with: the modules holding it (its
/// RDMA half: `mlx5_ib` holds `mlx5_core`) and the RDMA core.
fn stack(sys: &SysRoot, module: &str) -> Vec<ModuleInfo> {
    let mut names: BTreeSet<String> = sys.module_holders(module).into_iter().collect();
    names.insert("ib_core".into());
    names.remove(module);
    names.iter().filter_map(|n| sys.module(n)).collect()
}

/// How a module's build reads in evidence: `24.10-1.1.4 (out-of-tree, srcversion …)`.
fn build(m: &ModuleInfo, kernel: Option<&str>) -> String {
    let origin = match m.origin() {
        "in-tree" => match kernel {
            Some(k) => format!("in-tree: the kernel's own, {k}"),
            None => "in-tree: the kernel's own".into(),
        },
        "out-of-tree" => "out-of-tree: a vendor package or DKMS".into(),
        _ => "origin unknown: no taint file".into(),
    };
    let mut s = match &m.version {
        Some(v) => format!("{} {v} ({origin}", m.name),
        None => format!("{} ({origin}", m.name),
    };
    if let Some(sv) = &m.srcversion {
        s.push_str(&format!(", srcversion {sv}"));
    }
    s.push(')');
    s
}

fn as_info(m: &DriverModule) -> ModuleInfo {
    ModuleInfo {
        name: m.name.clone(),
        version: m.version.clone(),
        srcversion: m.srcversion.clone(),
        taint: match m.origin.as_str() {
            "out-of-tree" => Some("O".into()),
            "in-tree" => Some(String::new()),
            _ => None,
        },
    }
}

/// One check per driver module: its build, and whether the RDMA stack's modules (the
/// module's holders and ib_core) come from the same one. `proc_root` (when it is this
/// host's, as the sysfs tree is) gives the kernel release an in-tree module shares.
pub(crate) fn driver_checks(
    sys: &SysRoot,
    proc_root: Option<&Path>,
    inv: &Inventory,
) -> Vec<Check> {
    let kernel = proc_root
        .and_then(|p| std::fs::read_to_string(p.join("sys/kernel/osrelease")).ok())
        .map(|k| format!("kernel {}", k.trim()));
    let mut by_module: BTreeMap<String, Vec<(&str, &DriverModule)>> = BTreeMap::new();
    let mut unknown: Vec<&str> = Vec::new();
    for d in &inv.devices {
        match &d.driver_module {
            Some(m) => by_module
                .entry(m.name.clone())
                .or_default()
                .push((&d.name, m)),
            None => unknown.push(&d.name),
        }
    }
    let mut out = Vec::new();
    for (name, devices) in &by_module {
        let names: Vec<&str> = devices.iter().map(|(d, _)| *d).collect();
        let builds: BTreeSet<String> = devices
            .iter()
            .map(|(_, m)| build(&as_info(m), kernel.as_deref()))
            .collect();
        if builds.len() > 1 {
            out.push(check(
                "driver",
                name,
                Status::Warn,
                format!(
                    "{name} devices report different builds: {} (a module reloaded from another package while devices were bound?)",
                    builds.into_iter().collect::<Vec<_>>().join("; ")
                ),
                Some(format!("reload the driver so every device runs one build: modprobe -r {w} && modprobe {w} (on a drained host)", w = word(name))),
            ));
            continue;
        }
        let this = as_info(devices[0].1);
        let stack = stack(sys, name);
        let odd: Vec<&ModuleInfo> = stack
            .iter()
            .filter(|m| {
                m.origin() != this.origin()
                    || (this.origin() == "out-of-tree"
                        && m.version.is_some()
                        && this.version.is_some()
                        && m.version != this.version)
            })
            .collect();
        let serves = format!("serves {}", names.join(", "));
        let vendor = sys.module("mlx_compat").is_some() && this.origin() == "out-of-tree";
        let evidence = format!(
            "{}{} {serves}",
            build(&this, kernel.as_deref()),
            if vendor {
                " from MLNX_OFED/DOCA-OFED (mlx_compat is loaded)"
            } else {
                ""
            }
        );
        if odd.is_empty() {
            let with: Vec<&str> = stack.iter().map(|m| m.name.as_str()).collect();
            out.push(check(
                "driver",
                name,
                Status::Pass,
                if with.is_empty() {
                    evidence
                } else {
                    format!("{evidence}; {} of the same build", with.join(", "))
                },
                None,
            ));
        } else {
            let all: Vec<String> = std::iter::once(name.clone())
                .chain(stack.iter().map(|m| m.name.clone()))
                .collect();
            out.push(check(
                "driver",
                name,
                Status::Warn,
                format!(
                    "{evidence}, but {}: the RDMA stack mixes two driver builds (a vendor package half-installed over the kernel's, or a kernel updated under it), which fails at load or under traffic",
                    odd.iter()
                        .map(|m| build(m, kernel.as_deref()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(format!(
                    "run one stack: reinstall the vendor package for the running kernel (MLNX_OFED/DOCA-OFED: its installer with --add-kernel-support, then /etc/init.d/openibd restart), or remove it to use the kernel's own drivers; modinfo -F filename {} shows where each module was loaded from",
                    all.iter().map(|m| word(m)).collect::<Vec<_>>().join(" ")
                )),
            ));
        }
    }
    if !unknown.is_empty() {
        out.push(check(
            "driver",
            "",
            Status::Info,
            format!(
                "{}: sysfs names no module (built into the kernel, or a kernel without module/<name>/): its build cannot be told",
                unknown.join(", ")
            ),
            None,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use rocewatch_sysfs::inventory::{read_inventory, DeviceFilter};

    use super::*;

    fn fixture(case: &str) -> (SysRoot, Inventory) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures")
            .join(case)
            .join("sys");
        let sys = SysRoot::new(&root);
        let (inv, _) = read_inventory(&sys, &DeviceFilter::default()).unwrap();
        (sys, inv)
    }

    #[test]
    fn the_kernels_own_stack_passes_with_the_kernel_release() {
        let (sys, inv) = fixture("mlx5-roce-dual-port");
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(proc.path().join("sys/kernel")).unwrap();
        std::fs::write(proc.path().join("sys/kernel/osrelease"), "6.1.0-28-amd64\n").unwrap();
        let c = driver_checks(&sys, Some(proc.path()), &inv);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(
            (c[0].status, c[0].subject.as_str()),
            (Status::Pass, "mlx5_core")
        );
        assert_eq!(
            c[0].evidence,
            "mlx5_core (in-tree: the kernel's own, kernel 6.1.0-28-amd64) serves mlx5_0, mlx5_1; ib_core, mlx5_ib of the same build"
        );
    }

    #[test]
    fn a_vendor_module_over_the_kernels_rdma_core_warns_with_the_fix() {
        let (sys, inv) = fixture("no-pma-restricted");
        let c = driver_checks(&sys, None, &inv);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].status, Status::Warn);
        for part in [
            "mlx5_core 23.10-2.1.3 (out-of-tree",
            "but ib_core (in-tree: the kernel's own), mlx5_ib (in-tree",
            "mixes two driver builds",
        ] {
            assert!(c[0].evidence.contains(part), "{part}: {}", c[0].evidence);
        }
        let fix = c[0].fix.as_deref().unwrap();
        assert!(
            fix.contains("modinfo -F filename mlx5_core ib_core mlx5_ib"),
            "{fix}"
        );
    }

    #[test]
    fn a_vendor_stack_of_one_build_passes_and_names_the_package() {
        let (sys, inv) = fixture("gpu-two-socket");
        let c = driver_checks(&sys, None, &inv);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].status, Status::Pass);
        assert!(c[0]
            .evidence
            .starts_with("mlx5_core 24.10-1.1.4 (out-of-tree"));
        assert!(c[0]
            .evidence
            .contains("MLNX_OFED/DOCA-OFED (mlx_compat is loaded)"));
        // One version of ib_core differing from the driver's is a mixed stack too.
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("module");
        for (name, version) in [("mlx5_core", "24.10-1.1.4"), ("ib_core", "23.10-2.1.3")] {
            std::fs::create_dir_all(m.join(name)).unwrap();
            std::fs::write(m.join(name).join("taint"), "OE\n").unwrap();
            std::fs::write(m.join(name).join("version"), version).unwrap();
        }
        let c = driver_checks(&SysRoot::new(t.path()), None, &inv);
        assert_eq!(c[0].status, Status::Warn, "{c:?}");
        assert!(c[0]
            .evidence
            .contains("but ib_core 23.10-2.1.3 (out-of-tree"));
    }

    #[test]
    fn devices_of_one_driver_on_two_builds_and_devices_without_a_module() {
        let (sys, mut inv) = fixture("gpu-two-socket");
        inv.devices[3].driver_module.as_mut().unwrap().version = Some("24.04-0.6.6".into());
        inv.devices[2].driver_module = None;
        let c = driver_checks(&sys, None, &inv);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[0].status, Status::Warn);
        assert!(c[0].evidence.contains("24.04-0.6.6") && c[0].evidence.contains("24.10-1.1.4"));
        assert_eq!((c[1].status, c[1].subject.as_str()), (Status::Info, ""));
        assert!(c[1].evidence.starts_with("mlx5_2: sysfs names no module"));
    }
}
