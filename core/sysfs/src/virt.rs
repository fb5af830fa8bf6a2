//! Is this host a virtual machine, and of which hypervisor? Read as `systemd-detect-virt`
//! reads it (systemd's `src/basic/virt.c`, `detect_vm`), from files only, under the roots
//! it is given:
//! - the DMI strings (`<sys>/class/dmi/id/{product_name,sys_vendor,board_vendor,
//!   bios_vendor,product_version}`, drivers/firmware/dmi-id.c), matched by prefix against
//!   systemd's vendor table ([`DMI_VENDORS`]), `product_name` first (KVM over QEMU);
//! - the CPU's `hypervisor` flag in `<proc>/cpuinfo` (X86_FEATURE_HYPERVISOR, CPUID leaf 1
//!   ECX bit 31, the bit systemd's `detect_vm_cpuid` tests before reading the signature);
//! - `kvm-clock` among `<sys>/devices/system/clocksource/clocksource0/available_clocksource`
//!   (arch/x86/kernel/kvmclock.c): the guest runs on KVM, which systemd learns from the
//!   CPUID signature `KVMKVMKVM` that no file shows;
//! - `<sys>/hypervisor/type` (`xen` under Xen, drivers/xen/sys-hypervisor.c).
//!
//! Hypervisors systemd trusts DMI for before CPUID (VirtualBox, Xen, Amazon, Parallels,
//! Google) are named by DMI; then a set `hypervisor` flag makes a guest (of KVM with
//! `kvm-clock`, else of what DMI or `hypervisor/type` names, else of one unknown); then DMI
//! alone. Amazon's DMI is the same on its bare-metal instances: a `product_name` with
//! `.metal` is bare metal (systemd's fallback when the SMBIOS VM bit is not readable).
//! Nothing readable at all is [`Virtualization::Unknown`], never bare metal.

use std::path::Path;

use crate::read::{read_attr, read_bytes, Attr};

/// A hypervisor, by systemd-detect-virt's identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hypervisor {
    Kvm,
    Qemu,
    Vmware,
    Microsoft,
    Xen,
    Amazon,
    Google,
    Oracle,
    Bochs,
    Parallels,
    Bhyve,
    Apple,
    /// A hypervisor is there (the CPU flag, `hypervisor/type`) but not which.
    Other,
}

impl Hypervisor {
    /// `systemd-detect-virt`'s word for it.
    pub fn id(self) -> &'static str {
        match self {
            Hypervisor::Kvm => "kvm",
            Hypervisor::Qemu => "qemu",
            Hypervisor::Vmware => "vmware",
            Hypervisor::Microsoft => "microsoft",
            Hypervisor::Xen => "xen",
            Hypervisor::Amazon => "amazon",
            Hypervisor::Google => "google",
            Hypervisor::Oracle => "oracle",
            Hypervisor::Bochs => "bochs",
            Hypervisor::Parallels => "parallels",
            Hypervisor::Bhyve => "bhyve",
            Hypervisor::Apple => "apple",
            Hypervisor::Other => "vm-other",
        }
    }

    /// Whether systemd takes DMI's word for it before the CPU's (`detect_vm`: these
    /// run on KVM or cloak as Hyper-V, and DMI names them better).
    fn dmi_first(self) -> bool {
        matches!(
            self,
            Hypervisor::Oracle
                | Hypervisor::Xen
                | Hypervisor::Amazon
                | Hypervisor::Parallels
                | Hypervisor::Google
        )
    }
}

/// What the host is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Virtualization {
    BareMetal,
    Guest(Hypervisor),
    /// Nothing could be read to tell.
    Unknown,
}

/// The answer and what it rests on (one phrase per fact, naming its file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    pub virt: Virtualization,
    pub evidence: Vec<String>,
}

/// The DMI files read, in systemd's order (`product_name` before `sys_vendor`: KVM over
/// QEMU; `product_version` for Hyper-V, whose `sys_vendor` Microsoft's own hardware shares).
pub const DMI_FILES: [&str; 5] = [
    "product_name",
    "sys_vendor",
    "board_vendor",
    "bios_vendor",
    "product_version",
];

/// systemd's `dmi_vendor_table`: a DMI string starting with the text is that hypervisor.
pub const DMI_VENDORS: &[(&str, Hypervisor)] = &[
    ("KVM", Hypervisor::Kvm),
    ("OpenStack", Hypervisor::Kvm),
    ("KubeVirt", Hypervisor::Kvm),
    ("Amazon EC2", Hypervisor::Amazon),
    ("QEMU", Hypervisor::Qemu),
    ("VMware", Hypervisor::Vmware),
    ("VMW", Hypervisor::Vmware),
    ("innotek GmbH", Hypervisor::Oracle),
    ("VirtualBox", Hypervisor::Oracle),
    ("Oracle Corporation", Hypervisor::Oracle),
    ("Xen", Hypervisor::Xen),
    ("Bochs", Hypervisor::Bochs),
    ("Parallels", Hypervisor::Parallels),
    ("BHYVE", Hypervisor::Bhyve),
    ("Hyper-V", Hypervisor::Microsoft),
    ("Apple Virtualization", Hypervisor::Apple),
    ("Google Compute Engine", Hypervisor::Google),
];

/// The hypervisor a DMI string names, if any.
pub fn dmi_vendor(value: &str) -> Option<Hypervisor> {
    DMI_VENDORS
        .iter()
        .find(|(prefix, _)| value.starts_with(prefix))
        .map(|(_, h)| *h)
}

/// Whether `/proc/cpuinfo`'s first `flags` line (x86) has `hypervisor`; `None` without
/// one (another architecture, or not x86's layout).
pub fn cpuinfo_hypervisor(cpuinfo: &str) -> Option<bool> {
    let line = cpuinfo
        .lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim_end() == "flags"))?;
    let flags = line.split_once(':').map_or("", |(_, v)| v);
    Some(flags.split_ascii_whitespace().any(|f| f == "hypervisor"))
}

/// What the files said, before judging (each `None` where absent or unreadable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The DMI files read, as (file name, value), in [`DMI_FILES`] order.
    pub dmi: Vec<(&'static str, String)>,
    /// The CPU's `hypervisor` flag.
    pub hypervisor_flag: Option<bool>,
    /// `available_clocksource`.
    pub clocksources: Option<String>,
    /// `hypervisor/type`.
    pub hypervisor_type: Option<String>,
}

/// The most of `cpuinfo` read: the first CPU's block, `flags` included, is well within.
const CPUINFO_MAX: usize = 64 * 1024;

/// Read the facts under the sysfs root `sys` and the proc root `proc`.
pub fn read_facts(sys: &Path, proc: &Path) -> Facts {
    let attr = |p: &Path| match read_attr(p) {
        Ok(Attr::Value(v)) if !v.is_empty() => Some(v),
        _ => None,
    };
    let dmi_dir = sys.join("class/dmi/id");
    let dmi = DMI_FILES
        .iter()
        .filter_map(|f| attr(&dmi_dir.join(f)).map(|v| (*f, v)))
        .collect();
    let hypervisor_flag = read_bytes(&proc.join("cpuinfo"), CPUINFO_MAX)
        .ok()
        .flatten()
        .and_then(|b| cpuinfo_hypervisor(&String::from_utf8_lossy(&b)));
    Facts {
        dmi,
        hypervisor_flag,
        clocksources: attr(
            &sys.join("devices/system/clocksource/clocksource0/available_clocksource"),
        ),
        hypervisor_type: attr(&sys.join("hypervisor/type")),
    }
}

/// What the host is, from what [`read_facts`] read.
pub fn detect(sys: &Path, proc: &Path) -> Detection {
    judge(&read_facts(sys, proc))
}

/// The verdict on `facts`, in systemd's order (see the module's documentation).
pub fn judge(facts: &Facts) -> Detection {
    let mut evidence = Vec::new();
    let dmi_hit = facts
        .dmi
        .iter()
        .find_map(|(f, v)| dmi_vendor(v).map(|h| (*f, v.as_str(), h)));
    let guest = |h: Hypervisor, evidence: Vec<String>| Detection {
        virt: Virtualization::Guest(h),
        evidence,
    };
    if let Some((file, value, h)) = dmi_hit {
        evidence.push(format!("DMI {file}: {value}"));
        if h == Hypervisor::Amazon {
            if let Some((_, name)) = facts.dmi.iter().find(|(f, _)| *f == "product_name") {
                if name.contains(".metal") {
                    evidence.push(format!(
                        "DMI product_name {name}: an EC2 bare-metal instance"
                    ));
                    return Detection {
                        virt: Virtualization::BareMetal,
                        evidence,
                    };
                }
            }
        }
        if h.dmi_first() {
            return guest(h, evidence);
        }
    }
    let kvm_clock = facts
        .clocksources
        .as_deref()
        .is_some_and(|c| c.split_ascii_whitespace().any(|s| s == "kvm-clock"));
    let xen_type = facts.hypervisor_type.as_deref();
    match facts.hypervisor_flag {
        Some(true) => evidence.push("the CPU's hypervisor flag is set (cpuinfo)".into()),
        Some(false) => evidence.push("the CPU's hypervisor flag is clear (cpuinfo)".into()),
        None => {}
    }
    if kvm_clock {
        evidence.push("kvm-clock is an available clocksource".into());
    }
    if let Some(t) = xen_type {
        evidence.push(format!("hypervisor/type: {t}"));
    }
    let by_type = xen_type.map(|t| {
        if t == "xen" {
            Hypervisor::Xen
        } else {
            Hypervisor::Other
        }
    });
    let flag = facts.hypervisor_flag == Some(true);
    if flag && kvm_clock {
        return guest(Hypervisor::Kvm, evidence);
    }
    if let Some(h) = dmi_hit.map(|(_, _, h)| h).or(by_type) {
        return guest(h, evidence);
    }
    if flag {
        return guest(Hypervisor::Other, evidence);
    }
    if facts.hypervisor_flag.is_some() || !facts.dmi.is_empty() {
        let vendor = facts.dmi.iter().find(|(f, _)| *f == "sys_vendor");
        if let Some((file, value)) = vendor.or(facts.dmi.first()) {
            evidence.push(format!("DMI {file}: {value}, no hypervisor's"));
        }
        return Detection {
            virt: Virtualization::BareMetal,
            evidence,
        };
    }
    evidence.push("no DMI strings, no CPU flags, no hypervisor/type to read".into());
    Detection {
        virt: Virtualization::Unknown,
        evidence,
    }
}

impl std::fmt::Display for Virtualization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Virtualization::BareMetal => f.write_str("bare metal"),
            Virtualization::Guest(Hypervisor::Other) => {
                f.write_str("a virtual machine (hypervisor not named)")
            }
            Virtualization::Guest(h) => write!(f, "a virtual machine ({})", h.id()),
            Virtualization::Unknown => f.write_str("unknown"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts(dmi: &[(&'static str, &str)], flag: Option<bool>) -> Facts {
        Facts {
            dmi: dmi.iter().map(|(f, v)| (*f, v.to_string())).collect(),
            hypervisor_flag: flag,
            ..Facts::default()
        }
    }

    #[test]
    fn the_vendor_table_by_prefix() {
        assert_eq!(dmi_vendor("QEMU"), Some(Hypervisor::Qemu));
        assert_eq!(dmi_vendor("VMware, Inc."), Some(Hypervisor::Vmware));
        assert_eq!(dmi_vendor("innotek GmbH"), Some(Hypervisor::Oracle));
        assert_eq!(
            dmi_vendor("Hyper-V UEFI Release v4.1"),
            Some(Hypervisor::Microsoft)
        );
        assert_eq!(dmi_vendor("Amazon EC2"), Some(Hypervisor::Amazon));
        assert_eq!(
            dmi_vendor("Google Compute Engine"),
            Some(Hypervisor::Google)
        );
        // Microsoft's own hardware says this too: not a hypervisor by itself.
        assert_eq!(dmi_vendor("Microsoft Corporation"), None);
        assert_eq!(dmi_vendor("Dell Inc."), None);
        assert_eq!(dmi_vendor(" QEMU"), None);
    }

    #[test]
    fn the_cpu_flag() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme sse2 hypervisor lahf_lm\n\nprocessor\t: 1\nflags\t\t: fpu\n";
        assert_eq!(cpuinfo_hypervisor(x86), Some(true));
        assert_eq!(
            cpuinfo_hypervisor("flags\t\t: fpu vme hypervisorx\n"),
            Some(false)
        );
        // arm64 says Features, and no hypervisor flag exists there.
        assert_eq!(
            cpuinfo_hypervisor("processor\t: 0\nFeatures\t: fp asimd\n"),
            None
        );
    }

    #[test]
    fn a_qemu_guest_with_and_without_kvm() {
        let tcg = facts(
            &[
                ("product_name", "Standard PC (i440FX + PIIX, 1996)"),
                ("sys_vendor", "QEMU"),
            ],
            Some(true),
        );
        let d = judge(&tcg);
        assert_eq!(d.virt, Virtualization::Guest(Hypervisor::Qemu));
        assert!(
            d.evidence.contains(&"DMI sys_vendor: QEMU".to_string()),
            "{d:?}"
        );
        let kvm = Facts {
            clocksources: Some("kvm-clock tsc hpet acpi_pm ".into()),
            ..tcg
        };
        let d = judge(&kvm);
        assert_eq!(d.virt, Virtualization::Guest(Hypervisor::Kvm));
        assert!(d.evidence.iter().any(|e| e.contains("kvm-clock")), "{d:?}");
    }

    #[test]
    fn dmi_first_hypervisors_and_amazon_metal() {
        let vbox = facts(&[("product_name", "VirtualBox")], Some(true));
        let kvm_clock = Facts {
            clocksources: Some("kvm-clock".into()),
            ..vbox
        };
        assert_eq!(
            judge(&kvm_clock).virt,
            Virtualization::Guest(Hypervisor::Oracle)
        );
        let metal = facts(
            &[("product_name", "c5.metal"), ("sys_vendor", "Amazon EC2")],
            Some(false),
        );
        assert_eq!(judge(&metal).virt, Virtualization::BareMetal);
        let vm = facts(
            &[("product_name", "c5.large"), ("sys_vendor", "Amazon EC2")],
            Some(true),
        );
        assert_eq!(judge(&vm).virt, Virtualization::Guest(Hypervisor::Amazon));
    }

    #[test]
    fn bare_metal_other_and_unknown() {
        let dell = facts(&[("sys_vendor", "Dell Inc.")], Some(false));
        let d = judge(&dell);
        assert_eq!(d.virt, Virtualization::BareMetal);
        assert!(d.evidence.iter().any(|e| e.contains("Dell Inc.")), "{d:?}");
        assert_eq!(
            judge(&facts(&[], Some(true))).virt,
            Virtualization::Guest(Hypervisor::Other)
        );
        let xen = Facts {
            hypervisor_type: Some("xen".into()),
            ..Facts::default()
        };
        assert_eq!(judge(&xen).virt, Virtualization::Guest(Hypervisor::Xen));
        let d = judge(&Facts::default());
        assert_eq!(d.virt, Virtualization::Unknown);
        assert!(!d.evidence.is_empty());
    }

    #[test]
    fn read_from_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        let (sys, proc) = (dir.path().join("sys"), dir.path().join("proc"));
        std::fs::create_dir_all(sys.join("class/dmi/id")).unwrap();
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(sys.join("class/dmi/id/sys_vendor"), "QEMU\n").unwrap();
        std::fs::write(proc.join("cpuinfo"), "flags\t\t: fpu hypervisor\n").unwrap();
        let f = read_facts(&sys, &proc);
        assert_eq!(f.dmi, vec![("sys_vendor", "QEMU".to_string())]);
        assert_eq!(f.hypervisor_flag, Some(true));
        assert_eq!(
            detect(&sys, &proc).virt,
            Virtualization::Guest(Hypervisor::Qemu)
        );
        assert_eq!(
            detect(&dir.path().join("none"), &dir.path().join("none")).virt,
            Virtualization::Unknown
        );
    }

    fn dmi_file() -> impl Strategy<Value = &'static str> {
        prop::sample::select(DMI_FILES.to_vec())
    }

    fn dmi_value() -> impl Strategy<Value = String> {
        let known: Vec<String> = DMI_VENDORS.iter().map(|(p, _)| p.to_string()).collect();
        prop_oneof![
            prop::sample::select(known)
                .prop_flat_map(|p| "[ -~]{0,12}".prop_map(move |s| format!("{p}{s}"))),
            "[ -~]{0,24}",
            "[a-z0-9]{0,6}\\.metal[a-z0-9-]{0,4}",
        ]
    }

    proptest! {
        #[test]
        fn any_text_is_judged_without_panic(
            dmi in prop::collection::vec((dmi_file(), dmi_value()), 0..5),
            cpuinfo in "(flags\t*: [a-z_ ]{0,40}|[ -~]{0,30})(\n(flags\t*: [a-z_ ]{0,40}hypervisor[a-z_ ]{0,10}|[ -~]{0,30})){0,4}",
            clocks in prop::option::of("(kvm-clock|tsc|hpet|xen| ){0,5}"),
            hvtype in prop::option::of("(xen|kvm|[a-z]{0,6})"),
        ) {
            let facts = Facts {
                dmi,
                hypervisor_flag: cpuinfo_hypervisor(&cpuinfo),
                clocksources: clocks,
                hypervisor_type: hvtype,
            };
            let d = judge(&facts);
            prop_assert!(!d.evidence.is_empty());
            // A named vendor, the flag or a hypervisor type is a guest, save Amazon's
            // metal instances; nothing read is unknown, never bare metal.
            let named = facts.dmi.iter().any(|(_, v)| dmi_vendor(v).is_some());
            let metal = facts.dmi.iter().any(|(f, v)| *f == "product_name" && v.contains(".metal"));
            if named || facts.hypervisor_flag == Some(true) || facts.hypervisor_type.is_some() {
                prop_assert!(d.virt != Virtualization::Unknown, "{facts:?} -> {d:?}");
                prop_assert!(d.virt != Virtualization::BareMetal || metal, "{facts:?} -> {d:?}");
            }
            if facts.dmi.is_empty() && facts.hypervisor_flag.is_none() && facts.hypervisor_type.is_none() {
                prop_assert_eq!(d.virt, Virtualization::Unknown);
            }
        }

        #[test]
        fn any_cpuinfo_reads_without_panic(text in "[ -~\t\n:]{0,200}") {
            let _ = cpuinfo_hypervisor(&text);
        }
    }
}
