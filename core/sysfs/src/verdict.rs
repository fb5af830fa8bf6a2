//! Verdicts on facts of the host that more than one command judges: `health` (the gate a
//! scheduler drains nodes by) and `doctor` (the guide) each render the same verdict in
//! their own scale, so a fact is never healthy to one and faulty to the other.
//!
//! Each verdict carries a [`Weight`], what it counts for, and the evidence in words both
//! commands print: the PCIe link and a port's state here, a RoCE netdev's MTU in [`mtu`],
//! a RoCE port's GIDs in [`gid`], whether a link flaps in [`flap`].

pub mod flap;
pub mod gid;
pub mod mtu;
pub mod nics;
mod weight;

pub use flap::{judge_flaps, FlapKind, FlapVerdict, DEFAULT_MAX_FLAPS};
pub use gid::{judge_gids, GidKind, GidVerdict, Holder, NoAddress};
pub use mtu::{judge_mtus, MtuKind, MtuVerdict};
pub use weight::Weight;

use rocewatch_plugin_api::{Device, Port};

use crate::pci::{link_gbps, PciFunction, PcieLink};
use crate::SysRoot;

/// The verdict on one PCIe link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PcieLinkKind {
    /// Trained at the card's own maximum (its slot allows at least that).
    Full,
    /// Trained at the most its slot allows, below what the card can: how the host was
    /// built, not a fault (a Gen5 card in a Gen4 slot, an x16 card in a slot wired x8).
    AtSlotLimit,
    /// Trained narrower or slower than both the card and its slot allow: a badly seated
    /// card, a bad lane or riser, a link that retrained down.
    Degraded,
    /// The link is down: `current_link_speed` gives no speed (`Unknown`) or the width
    /// is 0, while the function says what it could run at.
    Down,
    /// No `max_link_speed` (absent, or `Unknown`) or a `max_link_width` of 0 or none:
    /// the function reports no link of its own. Not a PCI Express function (the kernel
    /// shows the link attributes of PCI Express functions only,
    /// `pcie_dev_attrs_are_visible()` in drivers/pci/pci-sysfs.c), or one whose link
    /// fields the PCIe spec reserves (an SR-IOV VF reads `Unknown` and 0).
    NotPcie,
    /// An SR-IOV VF (it has a `physfn` link, drivers/pci/iov.c): its link is its PF's,
    /// judged there.
    VirtualFunction,
    /// The link attributes could not be read.
    Unreadable,
}

/// One function's PCIe link against what it and its slot allow, with the evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct PcieLinkVerdict {
    pub kind: PcieLinkKind,
    /// `0000:9d:00.0`
    pub address: String,
    /// The function's link as read (all `None` when unreadable).
    pub link: PcieLink,
    /// The link of the bridge above it (its downstream port: the slot), when readable.
    pub slot: Option<PcieLink>,
    /// The device's fastest port, in Gb/s, which the link's bandwidth is held against.
    pub port_gbps: Option<f64>,
    /// Why it could not be read ([`PcieLinkKind::Unreadable`] only).
    pub error: Option<String>,
    /// The PF of a VF ([`PcieLinkKind::VirtualFunction`] only).
    pub physfn: Option<String>,
    /// The slot's reading was left out as impossible: its maximum below the link's
    /// current speed or width, or its width 0 (a passthrough VM's virtual root port).
    pub slot_ignored: bool,
}

/// `x8 at 16 GT/s`
fn shape(speed: Option<f64>, width: Option<u32>) -> String {
    let w = width.map_or("x?".into(), |w| format!("x{w}"));
    match speed {
        Some(s) => format!("{w} at {s} GT/s"),
        None => format!("{w} at an unknown speed"),
    }
}

fn min_of<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b < a { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Judge a link: `link` is the function's, `slot` the bridge's above it (its maximum
/// bounds what the function can train at), `port_gbps` the device's fastest port.
pub fn judge_pcie_link(
    address: &str,
    link: &PcieLink,
    slot: Option<&PcieLink>,
    port_gbps: Option<f64>,
) -> PcieLinkVerdict {
    let verdict = |kind| PcieLinkVerdict {
        kind,
        address: address.to_string(),
        link: *link,
        slot: slot.copied(),
        port_gbps,
        error: None,
        physfn: None,
        slot_ignored: false,
    };
    if link.max_speed.is_none() || matches!(link.max_width, None | Some(0)) {
        return verdict(PcieLinkKind::NotPcie);
    }
    let (Some(speed), Some(width)) = (link.speed, link.width) else {
        return verdict(PcieLinkKind::Down);
    };
    if width == 0 {
        return verdict(PcieLinkKind::Down);
    }
    let mut v = verdict(PcieLinkKind::Full);
    if slot.is_some_and(|s| impossible_slot(s, speed, width)) {
        v.slot = None;
        v.slot_ignored = true;
    }
    let (want_speed, want_width) = v.allowed();
    let with = |kind| PcieLinkVerdict { kind, ..v.clone() };
    // Equal speeds read from the same kind of file compare equal; the margin is for the
    // decimal forms (`2.5`) only.
    let below = |have: f64, want: Option<f64>| want.is_some_and(|w| have + 1e-9 < w);
    if below(speed, want_speed) || want_width.is_some_and(|w| width < w) {
        return with(PcieLinkKind::Degraded);
    }
    let card_more = below(speed, link.max_speed) || link.max_width.is_some_and(|w| width < w);
    if card_more {
        return with(PcieLinkKind::AtSlotLimit);
    }
    v
}

/// A slot reading no physical slot gives: a maximum width of 0, or a maximum below what
/// the link it carries runs at now (a passthrough VM's virtual root port claims x1 at
/// 2.5 GT/s whatever the card trained at).
fn impossible_slot(slot: &PcieLink, speed: f64, width: u32) -> bool {
    slot.max_width == Some(0)
        || slot.max_width.is_some_and(|w| w < width)
        || slot.max_speed.is_some_and(|s| s + 1e-9 < speed)
}

impl PcieLinkVerdict {
    /// A link that could not be read.
    pub fn unreadable(address: &str, why: String) -> PcieLinkVerdict {
        PcieLinkVerdict {
            kind: PcieLinkKind::Unreadable,
            address: address.to_string(),
            link: PcieLink {
                speed: None,
                width: None,
                max_speed: None,
                max_width: None,
            },
            slot: None,
            port_gbps: None,
            error: Some(why),
            physfn: None,
            slot_ignored: false,
        }
    }

    /// An SR-IOV VF, whose PF is `physfn` (when its link resolves): its link is the PF's.
    pub fn virtual_function(address: &str, link: PcieLink, physfn: Option<String>) -> Self {
        PcieLinkVerdict {
            kind: PcieLinkKind::VirtualFunction,
            physfn,
            error: None,
            link,
            ..PcieLinkVerdict::unreadable(address, String::new())
        }
    }

    /// What the link could train at: the function's maximum, bounded by its slot's.
    pub fn allowed(&self) -> (Option<f64>, Option<u32>) {
        let slot = self.slot.as_ref();
        (
            min_of(self.link.max_speed, slot.and_then(|s| s.max_speed)),
            min_of(self.link.max_width, slot.and_then(|s| s.max_width)),
        )
    }

    /// The bandwidth the link caps traffic at, in Gb/s, when it is up.
    pub fn cap_gbps(&self) -> Option<f64> {
        match (self.link.speed, self.link.width) {
            (Some(s), Some(w)) if w > 0 => Some(link_gbps(s, w)),
            _ => None,
        }
    }

    /// Whether the link caps the port below its rate.
    pub fn below_port(&self) -> bool {
        matches!((self.cap_gbps(), self.port_gbps), (Some(c), Some(p)) if c < p)
    }

    /// Whether a degraded link is narrower than allowed (else slower).
    pub fn narrower(&self) -> bool {
        matches!((self.link.width, self.allowed().1), (Some(w), Some(a)) if w < a)
    }

    pub fn weight(&self) -> Weight {
        match self.kind {
            PcieLinkKind::Full => Weight::Fine,
            // The slot it was built with: at most a note, where it keeps the port from
            // its rate.
            PcieLinkKind::AtSlotLimit if self.below_port() => Weight::Note,
            PcieLinkKind::AtSlotLimit => Weight::Fine,
            PcieLinkKind::Degraded | PcieLinkKind::Down => Weight::Fault,
            PcieLinkKind::NotPcie | PcieLinkKind::VirtualFunction => Weight::NotApplicable,
            PcieLinkKind::Unreadable => Weight::CannotTell,
        }
    }

    /// The link against what it could run at: `0000:9d:00.0 trained at x8 at 16 GT/s
    /// of x16 at 16 GT/s`.
    pub fn link_text(&self) -> String {
        let a = &self.address;
        let l = &self.link;
        let now = shape(l.speed, l.width);
        let card = shape(l.max_speed, l.max_width);
        let ignored = self.slot_ignored_text();
        match self.kind {
            PcieLinkKind::Full => format!("{a} {now}, its maximum{ignored}"),
            PcieLinkKind::AtSlotLimit => {
                format!("{a} {now}, the most its slot allows (the card can {card})")
            }
            PcieLinkKind::Degraded => {
                let slot_note = match &self.slot {
                    Some(s) if s.max_width < l.max_width || s.max_speed < l.max_speed => {
                        format!(" (its slot allows {})", shape(s.max_speed, s.max_width))
                    }
                    _ => String::new(),
                };
                format!("{a} trained at {now} of {card}{slot_note}{ignored}")
            }
            PcieLinkKind::Down => format!(
                "{a} link down (current_link_speed {}, current_link_width {}), its maximum {card}",
                l.speed.map_or("Unknown".into(), |s| format!("{s} GT/s")),
                l.width.map_or("unreadable".into(), |w| w.to_string()),
            ),
            PcieLinkKind::NotPcie if l.max_speed.is_none() && l.max_width.is_none() => {
                format!("{a}: no max_link_speed/max_link_width (not a PCI Express function)")
            }
            PcieLinkKind::NotPcie => format!(
                "{a}: max_link_speed {}, max_link_width {}: the function reports no link of its own",
                l.max_speed.map_or("Unknown".into(), |s| format!("{s} GT/s")),
                l.max_width.map_or("unreadable".into(), |w| w.to_string()),
            ),
            PcieLinkKind::VirtualFunction => format!(
                "{a}: an SR-IOV VF (physfn {}): its link is its PF's",
                self.physfn.as_deref().unwrap_or("unresolved")
            ),
            PcieLinkKind::Unreadable => {
                format!("{a}: {}", self.error.as_deref().unwrap_or("unreadable"))
            }
        }
    }

    /// What the link caps traffic at, against the port: `: caps ~126 Gb/s, below the 200
    /// Gb/s port`; empty when the link is not up.
    pub fn capacity_text(&self) -> String {
        let Some(cap) = self.cap_gbps() else {
            return String::new();
        };
        let approx = if self.link.speed.is_some_and(|s| s >= 64.0) {
            " (approximate at 64 GT/s: FLIT framing not counted)"
        } else {
            ""
        };
        let versus = match self.port_gbps {
            Some(p) if cap < p => format!(", below the {p:.0} Gb/s port"),
            Some(p) => format!(", above the {p:.0} Gb/s port"),
            None => String::new(),
        };
        format!(": caps ~{cap:.0} Gb/s{approx}{versus}")
    }

    /// The whole evidence: [`Self::link_text`] then [`Self::capacity_text`].
    pub fn evidence(&self) -> String {
        self.link_text() + &self.capacity_text()
    }

    /// Why the slot was not held against the link, where it was not: empty otherwise.
    fn slot_ignored_text(&self) -> &'static str {
        if self.slot_ignored {
            " (the slot's reading was ignored: its maximum is below what the link runs at, or its width 0, as a passthrough VM's virtual root port reports)"
        } else {
            ""
        }
    }
}

/// The fastest port of the device, in Gb/s.
pub fn port_gbps(d: &Device) -> Option<f64> {
    d.ports
        .iter()
        .filter_map(|p| {
            p.rate_bps
                .or_else(|| p.rate.as_deref().and_then(crate::parse::parse_rate_bps))
        })
        .max()
        .map(|b| b as f64 / 1e9)
}

impl SysRoot {
    /// Read the link of `f` and of the bridge above it (its slot), and judge it.
    pub fn pcie_link_verdict(&self, f: &PciFunction, port_gbps: Option<f64>) -> PcieLinkVerdict {
        let link = match self.pcie_link(&f.dir) {
            Ok(l) => l,
            Err(e) => return PcieLinkVerdict::unreadable(&f.address, e.to_string()),
        };
        // A VF's `physfn` link (made by `pci_iov_sysfs_link()`, drivers/pci/iov.c) names
        // its PF, whose link it shares.
        let physfn = f.dir.join("physfn");
        if physfn.symlink_metadata().is_ok() {
            let pf = std::fs::read_link(&physfn)
                .ok()
                .and_then(|l| Some(l.file_name()?.to_string_lossy().into_owned()));
            return PcieLinkVerdict::virtual_function(&f.address, link, pf);
        }
        // The directory above a function is its bridge, or the host bridge
        // (`pci0000:00`, no link files) for a root-complex integrated endpoint.
        let slot = f.dir.parent().and_then(|p| self.pcie_link(p).ok());
        judge_pcie_link(&f.address, &link, slot.as_ref(), port_gbps)
    }
}

/// The verdict on a port's state: `ACTIVE` and `LinkUp` (`ports/N/state`,
/// `ports/N/phys_state`, drivers/infiniband/core/sysfs.c), or why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortStateKind {
    /// `ACTIVE` and `LinkUp`.
    Up,
    /// A readable value says the port is not up (either one is enough).
    Down,
    /// Nothing readable says it is down, and one of the two could not be read.
    Unreadable,
}

/// A port's state and physical state, judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStateVerdict {
    pub kind: PortStateKind,
    /// `ACTIVE`, `DOWN` (`4: ACTIVE` as the kernel prints it, shortened).
    pub state: Option<String>,
    /// `LinkUp`, `Disabled`, `Polling`.
    pub phys_state: Option<String>,
}

/// `4: ACTIVE` → `ACTIVE`; `ACTIVE` stays.
fn state_name(s: &str) -> &str {
    s.split_once(": ").map_or(s, |(_, n)| n).trim()
}

/// Judge a port's state: a port is up when it is `ACTIVE` and `LinkUp`.
pub fn judge_port_state(p: &Port) -> PortStateVerdict {
    let state = p.state.as_deref().map(state_name);
    let phys = p.phys_state.as_deref().map(state_name);
    let kind = match (state, phys) {
        (Some("ACTIVE"), Some("LinkUp")) => PortStateKind::Up,
        (Some(s), _) if s != "ACTIVE" => PortStateKind::Down,
        (_, Some(ph)) if ph != "LinkUp" => PortStateKind::Down,
        _ => PortStateKind::Unreadable,
    };
    PortStateVerdict {
        kind,
        state: state.map(str::to_string),
        phys_state: phys.map(str::to_string),
    }
}

impl PortStateVerdict {
    pub fn weight(&self) -> Weight {
        match self.kind {
            PortStateKind::Up => Weight::Fine,
            PortStateKind::Down => Weight::Fault,
            PortStateKind::Unreadable => Weight::CannotTell,
        }
    }

    /// `port DOWN (Disabled)`, `port ACTIVE (LinkUp)`, `port state unreadable, phys_state
    /// LinkUp`.
    pub fn text(&self) -> String {
        let st = self.state.as_deref().unwrap_or("unreadable");
        let ph = self.phys_state.as_deref().unwrap_or("unreadable");
        match self.kind {
            PortStateKind::Unreadable => format!("port state {st}, phys_state {ph}"),
            _ => format!("port {st} ({ph})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(s: f64, w: u32, ms: f64, mw: u32) -> PcieLink {
        PcieLink {
            speed: Some(s),
            width: Some(w),
            max_speed: Some(ms),
            max_width: Some(mw),
        }
    }

    fn slot(ms: f64, mw: u32) -> PcieLink {
        link(ms, mw, ms, mw)
    }

    #[test]
    fn the_four_links_of_a_host() {
        let cases = [
            // A full link, with or without its slot read.
            (
                link(16.0, 16, 16.0, 16),
                Some(slot(16.0, 16)),
                PcieLinkKind::Full,
            ),
            (link(16.0, 16, 16.0, 16), None, PcieLinkKind::Full),
            // An x16 card in a slot wired x8, and a Gen5 card in a Gen4 slot.
            (
                link(16.0, 8, 16.0, 16),
                Some(slot(16.0, 8)),
                PcieLinkKind::AtSlotLimit,
            ),
            (
                link(16.0, 16, 32.0, 16),
                Some(slot(16.0, 16)),
                PcieLinkKind::AtSlotLimit,
            ),
            // Below both ends: narrower, slower, below even a narrow slot.
            (
                link(16.0, 8, 16.0, 16),
                Some(slot(16.0, 16)),
                PcieLinkKind::Degraded,
            ),
            (link(8.0, 16, 16.0, 16), None, PcieLinkKind::Degraded),
            (
                link(16.0, 4, 16.0, 16),
                Some(slot(16.0, 8)),
                PcieLinkKind::Degraded,
            ),
            (link(2.5, 1, 8.0, 4), None, PcieLinkKind::Degraded),
        ];
        for (l, s, want) in cases {
            let v = judge_pcie_link("a", &l, s.as_ref(), Some(200.0));
            assert_eq!(v.kind, want, "{l:?} in {s:?}: {}", v.evidence());
        }
    }

    #[test]
    fn a_narrow_slot_is_a_note_only_where_it_caps_the_port() {
        let l = link(16.0, 8, 16.0, 16);
        let s = slot(16.0, 8);
        let v = judge_pcie_link("0000:9d:00.0", &l, Some(&s), Some(200.0));
        assert_eq!(v.weight(), Weight::Note);
        assert_eq!(
            v.evidence(),
            "0000:9d:00.0 x8 at 16 GT/s, the most its slot allows (the card can x16 at 16 GT/s): caps ~126 Gb/s, below the 200 Gb/s port"
        );
        let v = judge_pcie_link("0000:9d:00.0", &l, Some(&s), Some(100.0));
        assert_eq!(v.weight(), Weight::Fine);
        assert_eq!(
            judge_pcie_link("a", &l, Some(&s), None).weight(),
            Weight::Fine
        );
    }

    #[test]
    fn a_degraded_link_is_a_fault_whatever_the_port() {
        let l = link(16.0, 8, 16.0, 16);
        for port in [Some(400.0), Some(100.0), None] {
            let v = judge_pcie_link("0000:9d:00.0", &l, Some(&slot(16.0, 16)), port);
            assert_eq!(v.weight(), Weight::Fault, "{port:?}");
            assert!(v.narrower());
        }
        let v = judge_pcie_link("0000:9d:00.0", &l, None, Some(200.0));
        assert_eq!(
            v.evidence(),
            "0000:9d:00.0 trained at x8 at 16 GT/s of x16 at 16 GT/s: caps ~126 Gb/s, below the 200 Gb/s port"
        );
        let v = judge_pcie_link("a", &link(16.0, 4, 16.0, 16), Some(&slot(16.0, 8)), None);
        assert_eq!(
            v.link_text(),
            "a trained at x4 at 16 GT/s of x16 at 16 GT/s (its slot allows x8 at 16 GT/s)"
        );
        assert!(!judge_pcie_link("a", &link(8.0, 16, 16.0, 16), None, None).narrower());
    }

    #[test]
    fn down_unreadable_and_not_pcie() {
        let down = PcieLink {
            speed: None,
            width: Some(0),
            max_speed: Some(16.0),
            max_width: Some(16),
        };
        let v = judge_pcie_link("a", &down, None, Some(200.0));
        assert_eq!((v.kind, v.weight()), (PcieLinkKind::Down, Weight::Fault));
        assert_eq!(
            v.evidence(),
            "a link down (current_link_speed Unknown, current_link_width 0), its maximum x16 at 16 GT/s"
        );
        let zero = PcieLink {
            width: Some(0),
            ..link(16.0, 0, 16.0, 16)
        };
        assert_eq!(
            judge_pcie_link("a", &zero, None, None).kind,
            PcieLinkKind::Down
        );
        let none = PcieLink {
            speed: None,
            width: None,
            max_speed: None,
            max_width: None,
        };
        let v = judge_pcie_link("a", &none, None, None);
        assert_eq!(v.weight(), Weight::NotApplicable);
        let v = PcieLinkVerdict::unreadable("a", "current_link_speed: EISDIR".into());
        assert_eq!(v.weight(), Weight::CannotTell);
        assert_eq!(v.evidence(), "a: current_link_speed: EISDIR");
        let v = judge_pcie_link("a", &link(64.0, 16, 64.0, 16), None, Some(800.0));
        assert!(
            v.evidence().contains("approximate at 64 GT/s"),
            "{}",
            v.evidence()
        );
    }

    /// A function directory with the four link files, as drivers/pci/pci-sysfs.c writes
    /// them (`Unknown` for a speed it cannot name).
    fn write_link(dir: &std::path::Path, speed: &str, width: &str, ms: &str, mw: &str) {
        std::fs::create_dir_all(dir).unwrap();
        for (f, v) in [
            ("current_link_speed", speed),
            ("current_link_width", width),
            ("max_link_speed", ms),
            ("max_link_width", mw),
        ] {
            std::fs::write(dir.join(f), format!("{v}\n")).unwrap();
        }
    }

    #[test]
    fn an_sriov_vf_is_not_judged_on_its_reserved_link_fields() {
        // A VF reads `Unknown` and 0 for its link fields (reserved by the PCIe spec).
        let vf = PcieLink {
            speed: None,
            width: Some(0),
            max_speed: None,
            max_width: Some(0),
        };
        let v = judge_pcie_link("0000:3b:00.2", &vf, None, Some(200.0));
        assert_eq!(v.weight(), Weight::NotApplicable, "{}", v.evidence());
        // A maximum width of 0 alone, or no maximum speed alone, is no link of its own.
        let zero_width = PcieLink {
            max_width: Some(0),
            ..link(16.0, 16, 16.0, 16)
        };
        assert_eq!(
            judge_pcie_link("a", &zero_width, None, None).weight(),
            Weight::NotApplicable
        );
        let no_speed = PcieLink {
            max_speed: None,
            ..link(16.0, 16, 16.0, 16)
        };
        assert_eq!(
            judge_pcie_link("a", &no_speed, None, None).weight(),
            Weight::NotApplicable
        );

        // On a tree: a VF under its PF's root port, with the `physfn` link iov.c makes.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let rp = root.join("devices/pci0000:3a/0000:3a:00.0");
        let pf = rp.join("0000:3b:00.0");
        let vf = rp.join("0000:3b:00.2");
        write_link(&rp, "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16");
        write_link(&pf, "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16");
        write_link(&vf, "Unknown", "0", "Unknown", "0");
        std::os::unix::fs::symlink("../0000:3b:00.0", vf.join("physfn")).unwrap();
        let f = PciFunction {
            address: "0000:3b:00.2".into(),
            dir: vf.clone(),
            chain: vec![
                "pci0000:3a".into(),
                "0000:3a:00.0".into(),
                "0000:3b:00.2".into(),
            ],
        };
        let v = SysRoot::new(root).pcie_link_verdict(&f, Some(200.0));
        assert_eq!(v.weight(), Weight::NotApplicable, "{}", v.evidence());
        assert_eq!(v.kind, PcieLinkKind::VirtualFunction);
        assert_eq!(
            v.evidence(),
            "0000:3b:00.2: an SR-IOV VF (physfn 0000:3b:00.0): its link is its PF's"
        );
        // The same VF with link values that would read as down is still the PF's link.
        write_link(&vf, "Unknown", "0", "16.0 GT/s PCIe", "16");
        let v = SysRoot::new(root).pcie_link_verdict(&f, Some(200.0));
        assert_eq!(v.kind, PcieLinkKind::VirtualFunction, "{}", v.evidence());
    }

    #[test]
    fn an_impossible_slot_is_ignored() {
        // A passthrough VM's virtual root port claims x1 at 2.5 GT/s, or width 0: the card
        // trained x8 of x16 at 16 GT/s is degraded against its own maximum.
        let l = link(16.0, 8, 16.0, 16);
        for s in [slot(2.5, 1), slot(16.0, 0), slot(2.5, 16), slot(16.0, 4)] {
            let v = judge_pcie_link("a", &l, Some(&s), Some(200.0));
            assert_eq!(v.kind, PcieLinkKind::Degraded, "{s:?}: {}", v.evidence());
            assert_eq!(v.weight(), Weight::Fault);
            assert!(
                v.link_text().contains("the slot's reading was ignored"),
                "{}",
                v.link_text()
            );
        }
        // A full link under such a slot is full, and says why the slot was not counted.
        let v = judge_pcie_link("a", &link(16.0, 16, 16.0, 16), Some(&slot(2.5, 1)), None);
        assert_eq!(v.kind, PcieLinkKind::Full);
        assert!(v.link_text().contains("ignored"), "{}", v.link_text());
        // A real slot narrower than the card, at the link's width, still bounds it.
        let v = judge_pcie_link("a", &l, Some(&slot(16.0, 8)), None);
        assert_eq!(v.kind, PcieLinkKind::AtSlotLimit);
        assert!(!v.link_text().contains("ignored"));
    }

    #[test]
    fn port_states_as_the_kernel_prints_them() {
        let port = |st: Option<&str>, ph: Option<&str>| Port {
            port: 1,
            state: st.map(str::to_string),
            phys_state: ph.map(str::to_string),
            ..Default::default()
        };
        let cases = [
            (
                Some("ACTIVE"),
                Some("LinkUp"),
                PortStateKind::Up,
                "port ACTIVE (LinkUp)",
            ),
            (
                Some("4: ACTIVE"),
                Some("5: LinkUp"),
                PortStateKind::Up,
                "port ACTIVE (LinkUp)",
            ),
            (
                Some("DOWN"),
                Some("Disabled"),
                PortStateKind::Down,
                "port DOWN (Disabled)",
            ),
            (
                Some("ACTIVE"),
                Some("Polling"),
                PortStateKind::Down,
                "port ACTIVE (Polling)",
            ),
            // A port whose one readable value says down is down, not unknown.
            (
                Some("DOWN"),
                None,
                PortStateKind::Down,
                "port DOWN (unreadable)",
            ),
            (
                None,
                Some("Disabled"),
                PortStateKind::Down,
                "port unreadable (Disabled)",
            ),
            (
                None,
                Some("LinkUp"),
                PortStateKind::Unreadable,
                "port state unreadable, phys_state LinkUp",
            ),
            (
                None,
                None,
                PortStateKind::Unreadable,
                "port state unreadable, phys_state unreadable",
            ),
        ];
        for (st, ph, kind, text) in cases {
            let v = judge_port_state(&port(st, ph));
            assert_eq!((v.kind, v.text().as_str()), (kind, text), "{st:?} {ph:?}");
        }
        assert_eq!(
            judge_port_state(&port(None, None)).weight(),
            Weight::CannotTell
        );
        assert_eq!(
            judge_port_state(&port(Some("INIT"), Some("LinkUp"))).weight(),
            Weight::Fault
        );
    }

    proptest::proptest! {
        /// Whatever the link and slot: a fault exactly when the link is below what both
        /// ends allow, and never at what they allow.
        #[test]
        fn a_fault_only_below_what_both_ends_allow(
            s in 0usize..6, w in 0usize..6, ms in 0usize..6, mw in 0usize..6,
            ss in 0usize..6, sw in 0usize..6, port in 0u32..1000,
        ) {
            const SPEEDS: [f64; 6] = [2.5, 5.0, 8.0, 16.0, 32.0, 64.0];
            const WIDTHS: [u32; 6] = [1, 2, 4, 8, 16, 32];
            let l = link(SPEEDS[s], WIDTHS[w], SPEEDS[ms], WIDTHS[mw]);
            let sl = slot(SPEEDS[ss], WIDTHS[sw]);
            let v = judge_pcie_link("a", &l, Some(&sl), Some(f64::from(port)));
            // A slot whose maximum is below what the link runs at is no physical slot:
            // the card's own maximum is what counts then.
            let (ss, sw) = if ss < s || sw < w { (ms, mw) } else { (ss, sw) };
            let below = s < ms.min(ss) || w < mw.min(sw);
            proptest::prop_assert_eq!(v.weight() == Weight::Fault, below);
            proptest::prop_assert_eq!(v.kind == PcieLinkKind::Degraded, below);
            if !below && (s < ms || w < mw) {
                proptest::prop_assert_eq!(v.kind, PcieLinkKind::AtSlotLimit);
            }
        }
    }
}
