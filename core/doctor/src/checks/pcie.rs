//! The PCIe link of each RDMA device's function against what it and its slot can do, and
//! the bandwidth a narrower or slower link caps its ports at; and the switch links
//! between it and its root port (`pcie-upstream`: a switch's upstream port against the
//! port above it, where the GPU shares the switch). The verdict is
//! `rocewatch_sysfs::verdict`'s, the one `health` gives: doctor adds the fix.

use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::pci::PcieLink;
use rocewatch_sysfs::verdict::{port_gbps, PcieLinkKind, PcieLinkVerdict, Weight};
use rocewatch_sysfs::SysRoot;

use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// The verdict in doctor's words: its status, evidence and fix.
fn render(subject: &str, v: &PcieLinkVerdict) -> Check {
    let status = match v.weight() {
        Weight::Fine => Status::Pass,
        Weight::Note => Status::Warn,
        Weight::Fault => Status::Fail,
        Weight::CannotTell | Weight::NotApplicable => Status::Skip,
    };
    let address = word(&v.address);
    let lspci = format!("lspci -vv -s {address} | grep -E 'LnkCap|LnkSta'");
    let fix = match v.kind {
        PcieLinkKind::Degraded => Some(format!(
            "the link trained {}: reseat the card, check the riser and that the slot is wired x{} and not bifurcated or shared in the BIOS; compare LnkCap with LnkSta: {lspci}; a link that retrained down after boot (a bad lane) shows in rdma.pcie.link.width",
            if v.narrower() { "narrower" } else { "slower" },
            v.allowed().1.map_or("?".into(), |w| w.to_string()),
        )),
        PcieLinkKind::Down => Some(format!(
            "the function's link is not up: look for AER or hotplug messages in the kernel log (dmesg | grep -i -e aer -e pciehp), reseat the card and check its power and riser; {lspci}"
        )),
        PcieLinkKind::AtSlotLimit if status == Status::Warn => Some(format!(
            "move the card to a slot that supports {}, or expect at most ~{:.0} Gb/s",
            shape(&v.link),
            v.cap_gbps().unwrap_or_default()
        )),
        _ => None,
    };
    check("pcie-link", subject, status, v.evidence(), fix)
}

/// `x16 at 32 GT/s`: the card's maximum.
fn shape(l: &PcieLink) -> String {
    let w = l.max_width.map_or("x?".into(), |w| format!("x{w}"));
    match l.max_speed {
        Some(s) => format!("{w} at {s} GT/s"),
        None => format!("{w} at an unknown speed"),
    }
}

/// The check on given values (the tests'). `slot` is the link of the bridge above it
/// (its maximum bounds what the function can train at), `port` the device's port rate.
#[cfg(test)]
pub(crate) fn link_check(
    subject: &str,
    address: &str,
    link: &PcieLink,
    slot: Option<&PcieLink>,
    port: Option<f64>,
) -> Check {
    let v = rocewatch_sysfs::verdict::judge_pcie_link(address, link, slot, port);
    render(subject, &v)
}

/// The link of every RDMA device's PCI function.
pub(crate) fn link_checks(root: &SysRoot, inv: &Inventory) -> Vec<Check> {
    let mut out = Vec::new();
    for d in &inv.devices {
        let Some(f) = root.rdma_pci_function(&d.name) else {
            out.push(check(
                "pcie-link",
                &d.name,
                Status::Skip,
                format!(
                    "{} has no PCI function (soft-RoCE, or a device sysfs does not place on a bus)",
                    d.name
                ),
                None,
            ));
            continue;
        };
        out.push(render(&d.name, &root.pcie_link_verdict(&f, port_gbps(d))));
        // The switch links between it and its root port, judged alike.
        for v in root.upstream_link_verdicts(&f, port_gbps(d)) {
            let mut c = render(&format!("{} {}", d.name, v.address), &v);
            c.check = "pcie-upstream".into();
            out.push(c);
        }
    }
    out
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

    #[test]
    fn a_narrower_link_fails_with_the_bandwidth_it_caps_at() {
        let c = link_check(
            "mlx5_2",
            "0000:9d:00.0",
            &link(16.0, 8, 16.0, 16),
            Some(&link(16.0, 16, 16.0, 16)),
            Some(200.0),
        );
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.evidence,
            "0000:9d:00.0 trained at x8 at 16 GT/s of x16 at 16 GT/s: caps ~126 Gb/s, below the 200 Gb/s port"
        );
        assert!(c.fix.unwrap().contains("lspci -vv -s 0000:9d:00.0"));
    }

    #[test]
    fn degraded_above_the_port_still_fails_and_full_passes() {
        // A link below what both ends allow is a fault (health drains the node for it),
        // whether or not the port still fits through it.
        let c = link_check("d", "a", &link(8.0, 16, 16.0, 16), None, Some(100.0));
        assert_eq!(c.status, Status::Fail);
        assert!(c
            .fix
            .as_deref()
            .unwrap()
            .starts_with("the link trained slower"));
        assert!(
            c.evidence
                .contains("caps ~126 Gb/s, above the 100 Gb/s port"),
            "{}",
            c.evidence
        );
        let c = link_check("d", "a", &link(16.0, 16, 16.0, 16), None, Some(200.0));
        assert_eq!(c.status, Status::Pass);
        assert_eq!(
            c.evidence,
            "a x16 at 16 GT/s, its maximum: caps ~252 Gb/s, above the 200 Gb/s port"
        );
    }

    #[test]
    fn a_slot_that_limits_the_card_is_not_a_degraded_link() {
        // A Gen5 card in a Gen4 slot, at Gen4 x16: as good as the slot gets, enough for 200G.
        let c = link_check(
            "d",
            "a",
            &link(16.0, 16, 32.0, 16),
            Some(&link(16.0, 16, 16.0, 16)),
            Some(200.0),
        );
        assert_eq!(c.status, Status::Pass, "{}", c.evidence);
        // ...but not for 400G.
        let c = link_check(
            "d",
            "a",
            &link(16.0, 16, 32.0, 16),
            Some(&link(16.0, 16, 16.0, 16)),
            Some(400.0),
        );
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.evidence.contains("the most its slot allows"),
            "{}",
            c.evidence
        );
    }

    #[test]
    fn old_kernel_speeds_and_down_links() {
        let c = link_check("d", "a", &link(2.5, 1, 8.0, 4), None, None);
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence
                .contains("x1 at 2.5 GT/s of x4 at 8 GT/s: caps ~2 Gb/s"),
            "{}",
            c.evidence
        );
        let down = PcieLink {
            speed: None,
            width: Some(0),
            max_speed: Some(16.0),
            max_width: Some(16),
        };
        // Down is a fault too, as health says.
        let c = link_check("d", "a", &down, None, None);
        assert_eq!(c.status, Status::Fail, "{}", c.evidence);
        assert!(c.fix.unwrap().contains("pciehp"));
        let c = link_check("d", "a", &link(64.0, 16, 64.0, 16), None, Some(800.0));
        assert!(
            c.evidence.contains("approximate at 64 GT/s"),
            "{}",
            c.evidence
        );
    }
}
