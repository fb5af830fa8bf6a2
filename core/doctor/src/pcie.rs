//! The PCIe link of each RDMA device's function against what it and its slot can do, and
//! the bandwidth a narrower or slower link caps its ports at.

use rocewatch_plugin_api::{Device, Inventory};
use rocewatch_sysfs::pci::{link_gbps, PcieLink};
use rocewatch_sysfs::SysRoot;

use super::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// `x8 at 16 GT/s`
fn shape(speed: Option<f64>, width: Option<u32>) -> String {
    let w = width.map_or("x?".into(), |w| format!("x{w}"));
    match speed {
        Some(s) => format!("{w} at {s} GT/s"),
        None => format!("{w} at an unknown speed"),
    }
}

/// The fastest port of the device, in Gb/s.
fn port_gbps(d: &Device) -> Option<f64> {
    d.ports
        .iter()
        .filter_map(|p| {
            p.rate_bps.or_else(|| {
                p.rate
                    .as_deref()
                    .and_then(rocewatch_sysfs::parse::parse_rate_bps)
            })
        })
        .max()
        .map(|b| b as f64 / 1e9)
}

/// The verdict on one function's link. `slot` is the link of the bridge above it (its
/// maximum bounds what the function can train at), `port` the device's port rate.
pub(super) fn link_check(
    subject: &str,
    address: &str,
    link: &PcieLink,
    slot: Option<&PcieLink>,
    port: Option<f64>,
) -> Check {
    let (Some(speed), Some(width)) = (link.speed, link.width) else {
        return check(
            "pcie-link",
            subject,
            Status::Skip,
            format!(
                "{address}: the link's speed or width is not readable (link down, or not PCIe: a VM's emulated bus)"
            ),
            None,
        );
    };
    let min = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // What the link could train at: the function's maximum, bounded by its slot's.
    let want_speed = min(link.max_speed, slot.and_then(|s| s.max_speed)).unwrap_or(speed);
    let want_width = match (link.max_width, slot.and_then(|s| s.max_width)) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(width),
    };
    let cap = link_gbps(speed, width);
    let approx = if speed >= 64.0 {
        " (approximate at 64 GT/s: FLIT framing not counted)"
    } else {
        ""
    };
    let now = shape(Some(speed), Some(width));
    let max = shape(link.max_speed, link.max_width);
    let below = port.filter(|p| cap < *p);
    let versus = match port {
        Some(p) if cap < p => format!(", below the {p:.0} Gb/s port"),
        Some(p) => format!(", above the {p:.0} Gb/s port"),
        None => String::new(),
    };
    let degraded = speed < want_speed || width < want_width;
    if degraded {
        let slot_note = match slot {
            Some(s) if s.max_width < link.max_width || s.max_speed < link.max_speed => {
                format!(" (its slot allows {})", shape(s.max_speed, s.max_width))
            }
            _ => String::new(),
        };
        return check(
            "pcie-link",
            subject,
            if below.is_some() || port.is_none() {
                Status::Fail
            } else {
                Status::Warn
            },
            format!(
                "{address} trained at {now} of {max}{slot_note}: caps ~{cap:.0} Gb/s{approx}{versus}"
            ),
            Some(format!(
                "the link trained {}: reseat the card, check the riser and that the slot is wired x{want_width} and not bifurcated or shared in the BIOS; compare LnkCap with LnkSta: lspci -vv -s {} | grep -E 'LnkCap|LnkSta'; a link that retrained down after boot (a bad lane) shows in rdma.pcie.link.width",
                if width < want_width { "narrower" } else { "slower" },
                word(address)
            )),
        );
    }
    match below {
        Some(p) => check(
            "pcie-link",
            subject,
            Status::Warn,
            format!(
                "{address} at {now}, the most its slot allows (the card can {max}): caps ~{cap:.0} Gb/s{approx}, below the {p:.0} Gb/s port"
            ),
            Some(format!(
                "move the card to a slot that supports {max}, or expect at most ~{cap:.0} Gb/s"
            )),
        ),
        None => check(
            "pcie-link",
            subject,
            Status::Pass,
            format!("{address} {now}, its maximum: ~{cap:.0} Gb/s{approx}{versus}"),
            None,
        ),
    }
}

/// The link of every RDMA device's PCI function.
pub(super) fn link_checks(root: &SysRoot, inv: &Inventory) -> Vec<Check> {
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
        let link = match root.pcie_link(&f.dir) {
            Ok(l) => l,
            Err(e) => {
                out.push(check(
                    "pcie-link",
                    &d.name,
                    Status::Skip,
                    format!("{}: {}", e.path().display(), e.cause()),
                    None,
                ));
                continue;
            }
        };
        let slot = f.dir.parent().and_then(|p| root.pcie_link(p).ok());
        out.push(link_check(
            &d.name,
            &f.address,
            &link,
            slot.as_ref(),
            port_gbps(d),
        ));
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
    fn degraded_above_the_port_warns_and_full_passes() {
        let c = link_check("d", "a", &link(8.0, 16, 16.0, 16), None, Some(100.0));
        assert_eq!(c.status, Status::Warn);
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
            "a x16 at 16 GT/s, its maximum: ~252 Gb/s, above the 200 Gb/s port"
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
        assert_eq!(link_check("d", "a", &down, None, None).status, Status::Skip);
        let c = link_check("d", "a", &link(64.0, 16, 64.0, 16), None, Some(800.0));
        assert!(
            c.evidence.contains("approximate at 64 GT/s"),
            "{}",
            c.evidence
        );
    }
}
