//! SR-IOV on the hypervisor: what the PF's settings of each virtual function do to the
//! RoCE traffic of the VM that has it. A VF has no DCB of its own: PFC, ECN and DCQCN of
//! its PF apply to it, and the PF's eswitch writes the VLAN tag (and its PCP, the
//! priority) that `ip link set PF vf N vlan V qos Q` sets into every frame the VF sends,
//! whatever the guest configures. So per PF with VFs:
//! - a VF whose inserted VLAN carries a PCP that is not a lossless priority (PFC on the
//!   PF) sends its RoCE traffic lossy;
//! - a VF whose link state is `disable` carries nothing;
//! - a rate limit on a VF caps its RDMA bandwidth;
//! - more VFs enabled than the PF offers, or VFs the host drives (`mlx5_core`) without an
//!   RDMA device.
//!
//! The VFs come from sysfs (`rocewatch_sysfs::sriov`: the PF's `virtfnN` links), their
//! settings from rtnetlink (`rocewatch_netlink::vfinfo`) through [`VfSettings`], which a
//! test replaces with replies built as the kernel lays them out.

use rocewatch_netlink::devlink::{self, Eswitch};
use rocewatch_netlink::vfinfo::{LinkState, PfVfs, VfInfo, VfNetlink};
use rocewatch_plugin_api::{Inventory, QosState, Setting};
use rocewatch_sysfs::sriov::{PhysFn, Sriov};
use rocewatch_sysfs::SysRoot;

use crate::check::{check, Check, Status};
use crate::checks::qos::setting;
use crate::shell::{one_line, word_on_one_line as word};

/// Where the VF settings of a PF netdev come from: the live rtnetlink, or a test's
/// replies.
pub(crate) trait VfSettings {
    /// The VFs of the PF whose netdev is `netdev`, as rtnetlink reports them.
    fn vfs(&mut self, netdev: &str) -> Result<PfVfs, String>;

    /// The eswitch mode of the PF at PCI address `pci` (devlink's words: `legacy`,
    /// `switchdev`), or why it was not read.
    fn eswitch(&mut self, _pci: &str) -> Result<String, String> {
        Err("not read".into())
    }
}

/// This network namespace's rtnetlink, opened at the first request.
#[derive(Default)]
pub(crate) struct LiveNetlink {
    nl: Option<VfNetlink>,
}

impl VfSettings for LiveNetlink {
    fn vfs(&mut self, netdev: &str) -> Result<PfVfs, String> {
        if self.nl.is_none() {
            self.nl = Some(VfNetlink::open().map_err(|e| e.to_string())?);
        }
        let nl = self.nl.as_mut().expect("opened above");
        nl.vfs_by_name(netdev).map_err(|e| e.to_string())
    }

    fn eswitch(&mut self, pci: &str) -> Result<String, String> {
        match devlink::eswitch_mode(pci, std::time::Duration::from_secs(2)) {
            Ok(Eswitch::Mode(m)) => Ok(m.to_string()),
            Ok(Eswitch::NotReported(why)) => Err(why),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A tree that is not this host's: rtnetlink says nothing about it.
pub(crate) struct NotThisHost(pub String);

impl VfSettings for NotThisHost {
    fn vfs(&mut self, _netdev: &str) -> Result<PfVfs, String> {
        Err(format!(
            "{} is not the live /sys: this host's rtnetlink says nothing about its VFs",
            self.0
        ))
    }
}

/// A PF with VFs, as a RoCE port of the inventory.
struct Pf<'a> {
    dev: &'a str,
    port: u32,
    netdev: &'a str,
    /// Its PCI address (devlink's handle), when sysfs links the netdev to one.
    pci: Option<String>,
    sriov: PhysFn,
}

/// The priorities RoCE is lossless on: PFC of the PF's port as the QoS plugins read it,
/// or the expected priority when it was not read; and how that was learnt.
fn lossless(qos: &[QosState], pf: &Pf, prio: u8) -> (Vec<u32>, String) {
    match setting(qos, pf.dev, pf.port, "pfc_enabled") {
        Some(Setting::Value(list)) => {
            let on: Vec<u32> = list
                .split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect();
            let said = format!("PFC on {} is on priorities {list}", one_line(pf.netdev));
            (on, said)
        }
        _ => (
            vec![u32::from(prio)],
            format!(
                "PFC on {} was not read: the expected lossless priority is {prio}",
                one_line(pf.netdev)
            ),
        ),
    }
}

/// Every PF of the inventory's RoCE ports with VFs enabled; a PF offering VFs with none
/// enabled goes into `idle`, an unreadable one into `out` as a warning.
fn pfs<'i>(
    sys: &SysRoot,
    inv: &'i Inventory,
    idle: &mut Vec<String>,
    out: &mut Vec<Check>,
) -> Vec<Pf<'i>> {
    let mut found = Vec::new();
    for d in &inv.devices {
        for p in &d.ports {
            let Some(nd) = p.netdev.as_deref() else {
                continue;
            };
            match sys.sriov_of_netdev(nd) {
                Ok(Some(Sriov::Pf(sriov))) if sriov.numvfs > 0 => found.push(Pf {
                    dev: &d.name,
                    port: p.port,
                    netdev: nd,
                    pci: sys
                        .pci_function_at(&sys.netdev_dir(nd).join("device"))
                        .map(|f| f.address),
                    sriov,
                }),
                Ok(Some(Sriov::Pf(sriov))) => idle.push(format!(
                    "{} offers {} VFs, none enabled",
                    one_line(nd),
                    sriov.totalvfs
                )),
                Ok(_) => {}
                Err(e) => out.push(check(
                    "sriov",
                    nd,
                    Status::Warn,
                    format!("the SR-IOV files of {} do not read: {e}", one_line(nd)),
                    None,
                )),
            }
        }
    }
    found
}

/// The SR-IOV checks of every PF among the inventory's ports (`prio`: the expected
/// lossless priority, used where the PF's PFC was not read).
pub(crate) fn sriov_checks(
    sys: &SysRoot,
    inv: &Inventory,
    qos: &[QosState],
    prio: u8,
    settings: &mut dyn VfSettings,
) -> Vec<Check> {
    let (mut idle, mut out) = (Vec::new(), Vec::new());
    let pfs = pfs(sys, inv, &mut idle, &mut out);
    if pfs.is_empty() && out.is_empty() {
        let why = if idle.is_empty() {
            "no port's PCI function is an SR-IOV PF".to_string()
        } else {
            idle.join("; ")
        };
        out.push(check(
            "sriov",
            "",
            Status::Skip,
            format!("no SR-IOV VFs: {why}"),
            None,
        ));
    }
    for pf in &pfs {
        out.extend(pf_checks(pf, qos, prio, settings));
    }
    out
}

/// A VF's PCI address from its PF's `virtfnN` links.
fn address(pf: &Pf, vf: u32) -> String {
    pf.sriov
        .vfs
        .iter()
        .find(|f| f.index == vf)
        .map_or_else(|| "PCI address unknown".into(), |f| one_line(&f.address))
}

/// The sysfs side of one PF: the VF count, and VFs the host drives without RDMA.
fn function_checks(pf: &Pf, out: &mut Vec<Check>) {
    let nd = one_line(pf.netdev);
    let s = &pf.sriov;
    // No fix: the kernel refuses more VFs than sriov_totalvfs through sriov_numvfs
    // (sriov_numvfs_store: -ERANGE, drivers/pci/iov.c) and a driver cannot lower the
    // limit while VFs are enabled (pci_sriov_set_totalvfs: -EBUSY), so this reading is
    // a driver's own doing or two moments of a changing tree; re-creating the VFs
    // (`echo 0` first) would take every VF from the VM that holds it.
    if s.numvfs > s.totalvfs {
        out.push(check(
            "sriov",
            pf.netdev,
            Status::Warn,
            format!(
                "{nd} has {} VFs enabled, more than the {} its sriov_totalvfs offers: the kernel refuses that many through sriov_numvfs (-ERANGE), so the PF's driver enabled them itself or the two files were read at different moments; read both again before changing anything (re-creating the VFs takes them from their VMs)",
                s.numvfs, s.totalvfs
            ),
            None,
        ));
    }
    for f in &s.vfs {
        let Some(driver) = f.driver.as_deref() else {
            continue;
        };
        if f.assigned_to_vm() || !f.rdma_devices.is_empty() {
            continue;
        }
        out.push(check(
            "sriov",
            &format!("{} vf {}", pf.netdev, f.index),
            Status::Warn,
            format!(
                "VF {} ({}) is bound to {} on the host but has no RDMA device: RDMA on it is off (mlx5_ib not loaded, or RoCE disabled on the function)",
                f.index,
                one_line(&f.address),
                one_line(driver)
            ),
            Some(format!(
                "modprobe mlx5_ib; if it stays without one: devlink dev param set pci/{a} name enable_roce value true cmode driverinit && devlink dev reload pci/{a}",
                a = word(&f.address)
            )),
        ));
    }
}

/// The checks of one PF with VFs.
fn pf_checks(pf: &Pf, qos: &[QosState], prio: u8, settings: &mut dyn VfSettings) -> Vec<Check> {
    let mut out = Vec::new();
    function_checks(pf, &mut out);
    let nd = one_line(pf.netdev);
    let shared =
        format!("PFC, ECN and DCQCN on {nd} apply to every VF of it: a VF has no DCB of its own");
    let vfs = match settings.vfs(pf.netdev) {
        Ok(v) => v,
        Err(e) => {
            out.push(check(
                "sriov",
                pf.netdev,
                Status::Skip,
                format!(
                    "{} VFs on {nd}; their settings (VLAN and its priority, link state, rate) were not read: {}. {shared}",
                    pf.sriov.numvfs,
                    one_line(&e)
                ),
                None,
            ));
            return out;
        }
    };
    let (lossless, said) = lossless(qos, pf, prio);
    let trust = match setting(qos, pf.dev, pf.port, "trust") {
        Some(Setting::Value(t)) => Some(t.as_str()),
        _ => None,
    };
    for v in &vfs.vfs {
        vf_checks(pf, v, &lossless, &said, trust, prio, &mut out);
    }
    let listed: Vec<String> = vfs.vfs.iter().map(|v| summary(pf, v)).collect();
    out.push(check(
        "sriov",
        pf.netdev,
        Status::Info,
        format!(
            "{} of {} VFs enabled on {nd}: {}. {said}. {}. {shared}",
            pf.sriov.numvfs,
            pf.sriov.totalvfs,
            if listed.is_empty() {
                "rtnetlink lists none".to_string()
            } else {
                listed.join("; ")
            },
            eswitch_said(pf, settings)
        ),
        None,
    ));
    out
}

/// The PF's eswitch mode in words: in switchdev mode the VFs' traffic is switched by the
/// host's representor netdevs (OVS offload, TC rules), and the VLAN the PF's `vf N vlan`
/// setting would insert is not how it is tagged.
fn eswitch_said(pf: &Pf, settings: &mut dyn VfSettings) -> String {
    let Some(pci) = pf.pci.as_deref() else {
        return "eswitch mode not read: no PCI function links to the netdev".into();
    };
    match settings.eswitch(pci) {
        Ok(m) if m == "switchdev" => format!(
            "eswitch switchdev (devlink pci/{}): the VFs' traffic is switched by this host's representors (OVS, TC), which decide its VLAN and priority, not the VF settings above",
            one_line(pci)
        ),
        Ok(m) => format!("eswitch {} (devlink pci/{})", one_line(&m), one_line(pci)),
        Err(e) => format!("eswitch mode not read: {}", one_line(&e)),
    }
}

/// One VF on one line, as `ip link show` prints its `vf N` line.
fn summary(pf: &Pf, v: &VfInfo) -> String {
    let on_off = |s: Option<bool>| match s {
        Some(true) => "on",
        Some(false) => "off",
        None => "not reported",
    };
    let vlan = match v.vlan {
        Some(l) if l.vlan != 0 => format!("vlan {} qos {}", l.vlan, l.qos),
        _ => "no vlan".into(),
    };
    let driver = pf
        .sriov
        .vfs
        .iter()
        .find(|f| f.index == v.vf)
        .map(|f| match (f.driver.as_deref(), f.assigned_to_vm()) {
            (Some(d), true) => format!(", {} (assigned to a VM)", one_line(d)),
            (Some(d), false) => format!(", {} on the host", one_line(d)),
            (None, _) => ", no driver".into(),
        })
        .unwrap_or_default();
    format!(
        "VF {} ({}{driver}) mac {}, {vlan}, spoof checking {}, trust {}, link state {}",
        v.vf,
        address(pf, v.vf),
        v.mac_text().unwrap_or_else(|| "not reported".into()),
        on_off(v.spoofchk),
        on_off(v.trust),
        v.link_state.map_or("not reported".into(), |s| s.as_str()),
    )
}

/// The VLAN priority, link state and rate of one VF.
fn vf_checks(
    pf: &Pf,
    v: &VfInfo,
    lossless: &[u32],
    said: &str,
    trust: Option<&str>,
    prio: u8,
    out: &mut Vec<Check>,
) {
    let subject = format!("{} vf {}", pf.netdev, v.vf);
    let who = format!("VF {} ({})", v.vf, address(pf, v.vf));
    let w = word(pf.netdev);
    let target = if lossless.contains(&u32::from(prio)) || lossless.is_empty() {
        u32::from(prio)
    } else {
        lossless[0]
    };
    if let Some(c) = vlan_check(&subject, &who, v, lossless, said, trust, target, &w) {
        out.push(c);
    }
    if v.link_state == Some(LinkState::Disable) {
        let bound = pf
            .sriov
            .vfs
            .iter()
            .any(|f| f.index == v.vf && f.driver.is_some());
        out.push(check(
            "sriov",
            &subject,
            if bound { Status::Fail } else { Status::Warn },
            format!(
                "{who} has link state disable: it is down whatever its own link, so whoever has it{} gets no RDMA",
                if bound { "" } else { " (bound to no driver now)" }
            ),
            Some(format!("ip link set dev {w} vf {} state auto", v.vf)),
        ));
    }
    let (min, max) = (v.min_tx_rate.unwrap_or(0), v.max_tx_rate.unwrap_or(0));
    if min != 0 || max != 0 {
        out.push(check(
            "sriov",
            &subject,
            Status::Warn,
            format!(
                "{who} is rate limited by its PF: max_tx_rate {max} Mbit/s, min_tx_rate {min} Mbit/s: its RDMA bandwidth is capped there, not by the network"
            ),
            Some(format!(
                "if the limit is not meant: ip link set dev {w} vf {} max_tx_rate 0 min_tx_rate 0",
                v.vf
            )),
        ));
    }
}

/// The priority the PF writes into the VF's frames against the lossless ones.
#[allow(clippy::too_many_arguments)]
fn vlan_check(
    subject: &str,
    who: &str,
    v: &VfInfo,
    lossless: &[u32],
    said: &str,
    trust: Option<&str>,
    target: u32,
    w: &str,
) -> Option<Check> {
    let vlan = v.vlan.filter(|l| l.vlan != 0);
    let Some(l) = vlan else {
        // No tag inserted: the guest's own marking decides.
        let what = match trust {
            Some("pcp") => format!("the PF trusts PCP: the guest must tag its RoCE traffic with PCP {target} itself (a VLAN on the VF inside the guest, egress-qos-map) or it is lossy"),
            Some("dscp") => format!("the PF trusts DSCP: the DSCP of the guest's RoCE traffic (its traffic class) must map to priority {target}"),
            _ => "the PF's trust mode was not read: the guest's own PCP or DSCP decides".to_string(),
        };
        return Some(check(
            "sriov",
            subject,
            Status::Info,
            format!("{who} has no VLAN inserted by its PF; {what}. {said}"),
            None,
        ));
    };
    if lossless.contains(&l.qos) {
        return Some(check(
            "sriov",
            subject,
            Status::Pass,
            format!(
                "{who} is tagged VLAN {} with PCP {} by its PF: lossless. {said}",
                l.vlan, l.qos
            ),
            None,
        ));
    }
    let (status, hop) = if trust == Some("dscp") {
        (Status::Warn, "; the PF trusts DSCP, so hops that trust DSCP classify by the guest's DSCP, but any hop that trusts PCP puts it on a lossy priority")
    } else {
        (Status::Fail, "")
    };
    let lossless_text = if lossless.is_empty() {
        "no priority (PFC is off on the PF)".to_string()
    } else {
        format!(
            "priority {}",
            lossless
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    Some(check(
        "sriov",
        subject,
        status,
        format!(
            "{who} inserts PCP {}; RoCE is lossless on {lossless_text}: its RoCE traffic is lossy whatever the guest configures{hop}. {said}",
            l.qos
        ),
        Some(format!(
            "ip link set dev {w} vf {} vlan {} qos {target}",
            v.vf, l.vlan
        )),
    ))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use rocewatch_netlink::msg::messages;
    use rocewatch_netlink::vfinfo::{decode_vf_link, encode_vf_reply, VfStats, VfVlan};
    use rocewatch_sysfs::inventory::{read_inventory, DeviceFilter};

    use super::*;
    use crate::checks::qos::port_with;
    use crate::shell::only_single_quoted;

    /// integration-tests/fixtures/sriov-host (its SOURCE.md): an mlx5 PF ens1f0np0
    /// (mlx5_0) with 4 of 8 VFs, 0 and 1 on mlx5_core (mlx5_2, mlx5_3), 2 and 3 on vfio-pci.
    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/sriov-host/sys")
    }

    fn inventory(sys: &SysRoot) -> Inventory {
        read_inventory(sys, &DeviceFilter::default()).unwrap().0
    }

    /// The kernel's replies for each PF netdev, built as `rtnl_fill_vfinfo` lays them
    /// out, then decoded as the live reply is.
    struct Replies(Vec<PfVfs>, Option<u16>);

    impl VfSettings for Replies {
        fn vfs(&mut self, netdev: &str) -> Result<PfVfs, String> {
            let pf = self.0.iter().find(|p| p.name == netdev).ok_or("ENODEV")?;
            let bytes = encode_vf_reply(1, pf);
            let m = messages(&bytes).next().unwrap().unwrap();
            decode_vf_link(m.payload)
        }

        /// devlink's reply, built as `devlink_nl_eswitch_fill()` lays it out.
        fn eswitch(&mut self, pci: &str) -> Result<String, String> {
            let mode = self.1.ok_or("EOPNOTSUPP")?;
            let mut b = rocewatch_netlink::msg::MessageBuilder::new(0x15, 0, 1);
            b.family_header(&rocewatch_netlink::genl::genl_header(29, 1))
                .attr_str(devlink::DEVLINK_ATTR_BUS_NAME, "pci")
                .attr_str(devlink::DEVLINK_ATTR_DEV_NAME, pci)
                .attr_bytes(devlink::DEVLINK_ATTR_ESWITCH_MODE, &mode.to_ne_bytes());
            let bytes = b.finish();
            let m = messages(&bytes).next().unwrap().unwrap();
            Ok(devlink::decode_eswitch_mode(m.payload)?
                .ok_or("no mode")?
                .to_string())
        }
    }

    fn vf(i: u32, vlan: u32, qos: u32) -> VfInfo {
        VfInfo {
            vf: i,
            mac: Some([0x02, 0x3b, 0, 0, 0, i as u8]),
            vlan: Some(VfVlan {
                vlan,
                qos,
                proto: Some(rocewatch_netlink::vfinfo::ETH_P_8021Q),
            }),
            min_tx_rate: Some(0),
            max_tx_rate: Some(0),
            spoofchk: Some(true),
            trust: Some(false),
            link_state: Some(LinkState::Auto),
            stats: Some(VfStats::default()),
        }
    }

    fn host_replies(vfs: Vec<VfInfo>) -> Replies {
        Replies(
            vec![PfVfs {
                ifindex: 4,
                name: "ens1f0np0".into(),
                num_vf: Some(vfs.len() as u32),
                vfs,
            }],
            Some(0),
        )
    }

    /// mlx5_0's port with PFC on 3 and trust pcp, as the QoS plugins read it.
    fn pfc_on_3(trust: &str) -> Vec<QosState> {
        let mut q = port_with(&[("pfc_enabled", "3"), ("trust", trust)]);
        q[0].netdev = Some("ens1f0np0".into());
        q
    }

    fn run(replies: &mut dyn VfSettings, qos: &[QosState]) -> Vec<Check> {
        let sys = SysRoot::new(fixture());
        sriov_checks(&sys, &inventory(&sys), qos, 3, replies)
    }

    fn about<'a>(checks: &'a [Check], subject: &str) -> Vec<&'a Check> {
        checks.iter().filter(|c| c.subject == subject).collect()
    }

    #[test]
    fn a_vf_inserting_a_lossy_pcp_fails_with_the_ip_link_fix() {
        let mut r = host_replies(vec![
            vf(0, 100, 3),
            vf(1, 100, 3),
            vf(2, 0, 0),
            vf(3, 100, 0),
        ]);
        let checks = run(&mut r, &pfc_on_3("pcp"));
        let c = about(&checks, "ens1f0np0 vf 3");
        assert_eq!(c.len(), 1, "{checks:#?}");
        assert_eq!(c[0].status, Status::Fail);
        assert!(
            c[0].evidence
                .starts_with("VF 3 (0000:3b:00.5) inserts PCP 0; RoCE is lossless on priority 3"),
            "{}",
            c[0].evidence
        );
        assert_eq!(
            c[0].fix.as_deref(),
            Some("ip link set dev ens1f0np0 vf 3 vlan 100 qos 3")
        );
        // VF 0 inserts PCP 3: lossless; VF 2 inserts no VLAN: what applies under trust pcp.
        assert_eq!(about(&checks, "ens1f0np0 vf 0")[0].status, Status::Pass);
        let c = about(&checks, "ens1f0np0 vf 2");
        assert_eq!(c[0].status, Status::Info);
        assert!(
            c[0].evidence.contains("trusts PCP: the guest must tag"),
            "{}",
            c[0].evidence
        );
        // The PF's summary: every VF, its driver, and the PF's DCB applying to all.
        let pf = about(&checks, "ens1f0np0");
        assert_eq!(pf.len(), 1, "{checks:#?}");
        assert!(
            pf[0].evidence.contains("4 of 8 VFs enabled"),
            "{}",
            pf[0].evidence
        );
        assert!(pf[0]
            .evidence
            .contains("VF 2 (0000:3b:00.4, vfio-pci (assigned to a VM))"));
        assert!(pf[0]
            .evidence
            .contains("PFC, ECN and DCQCN on ens1f0np0 apply to every VF"));
        assert!(
            pf[0]
                .evidence
                .contains("eswitch legacy (devlink pci/0000:3b:00.0)"),
            "{}",
            pf[0].evidence
        );
        assert!(
            checks.iter().all(|c| c.status != Status::Warn),
            "{checks:#?}"
        );
    }

    /// In switchdev mode the representors decide the VFs' tagging: said on the PF, and a
    /// driver without the op is said as not read.
    #[test]
    fn the_eswitch_mode_is_said_on_the_pf() {
        let mut r = host_replies(vec![vf(0, 100, 3)]);
        r.1 = Some(1);
        let checks = run(&mut r, &pfc_on_3("pcp"));
        let pf = about(&checks, "ens1f0np0");
        assert!(
            pf[0].evidence.contains("eswitch switchdev (devlink pci/0000:3b:00.0): the VFs' traffic is switched by this host's representors"),
            "{}",
            pf[0].evidence
        );
        r.1 = None;
        let checks = run(&mut r, &pfc_on_3("pcp"));
        let pf = about(&checks, "ens1f0np0");
        assert!(
            pf[0].evidence.contains("eswitch mode not read: EOPNOTSUPP"),
            "{}",
            pf[0].evidence
        );
    }

    /// Under trust dscp a hop trusting DSCP classifies by the guest's DSCP: a warning.
    #[test]
    fn under_trust_dscp_a_lossy_pcp_is_a_warning() {
        let mut r = host_replies(vec![vf(0, 100, 0)]);
        let checks = run(&mut r, &pfc_on_3("dscp"));
        let c = about(&checks, "ens1f0np0 vf 0");
        assert_eq!(c[0].status, Status::Warn, "{checks:#?}");
        assert!(c[0].fix.is_some());
    }

    #[test]
    fn a_disabled_link_fails_and_a_rate_limit_warns() {
        let mut down = vf(2, 100, 3);
        down.link_state = Some(LinkState::Disable);
        let mut capped = vf(1, 100, 3);
        capped.max_tx_rate = Some(25_000);
        let mut r = host_replies(vec![vf(0, 100, 3), capped, down]);
        let checks = run(&mut r, &pfc_on_3("pcp"));
        let c = about(&checks, "ens1f0np0 vf 2");
        let link = c
            .iter()
            .find(|c| c.status == Status::Fail)
            .expect("a failure");
        assert!(
            link.evidence.contains("link state disable"),
            "{}",
            link.evidence
        );
        assert_eq!(
            link.fix.as_deref(),
            Some("ip link set dev ens1f0np0 vf 2 state auto")
        );
        let c = about(&checks, "ens1f0np0 vf 1");
        let rate = c
            .iter()
            .find(|c| c.status == Status::Warn)
            .expect("a warning");
        assert!(
            rate.evidence.contains("max_tx_rate 25000 Mbit/s"),
            "{}",
            rate.evidence
        );
    }

    /// Without the PF's PFC read, the expected priority stands in, and says so.
    #[test]
    fn without_the_pfs_pfc_the_expected_priority_is_named() {
        let mut r = host_replies(vec![vf(0, 7, 5)]);
        let checks = run(&mut r, &[]);
        let c = about(&checks, "ens1f0np0 vf 0");
        assert_eq!(c[0].status, Status::Fail);
        assert!(c[0]
            .evidence
            .contains("was not read: the expected lossless priority is 3"));
        assert_eq!(
            c[0].fix.as_deref(),
            Some("ip link set dev ens1f0np0 vf 0 vlan 7 qos 3")
        );
    }

    /// A tree that is not this host's: the sysfs side still judged, the settings said
    /// unread, nothing passes.
    #[test]
    fn unread_settings_skip_and_nothing_passes() {
        let checks = run(&mut NotThisHost("/fixture".into()), &pfc_on_3("pcp"));
        let pf = about(&checks, "ens1f0np0");
        assert_eq!(pf[0].status, Status::Skip);
        assert!(pf[0].evidence.contains("/fixture is not the live /sys"));
        assert!(pf[0].evidence.contains("apply to every VF"));
        assert!(checks.iter().all(|c| c.status != Status::Pass));
    }

    fn copy_tree(from: &Path, to: &Path) {
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let (src, dst) = (e.path(), to.join(e.file_name()));
            let ty = e.file_type().unwrap();
            if ty.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
            } else if ty.is_dir() {
                std::fs::create_dir(&dst).unwrap();
                copy_tree(&src, &dst);
            } else {
                std::fs::copy(&src, &dst).unwrap();
            }
        }
    }

    /// numvfs above totalvfs, and a VF on mlx5_core without its RDMA device.
    #[test]
    fn too_many_vfs_and_a_host_vf_without_rdma_warn() {
        let tmp = tempfile::tempdir().unwrap();
        copy_tree(&fixture(), tmp.path());
        let pf_dir = tmp
            .path()
            .join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
        std::fs::write(pf_dir.join("sriov_totalvfs"), "2\n").unwrap();
        let vf1 = tmp
            .path()
            .join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.3/infiniband");
        std::fs::remove_dir_all(&vf1).unwrap();
        std::fs::create_dir(&vf1).unwrap();
        let sys = SysRoot::new(tmp.path());
        let mut r = host_replies(vec![vf(0, 100, 3)]);
        let checks = sriov_checks(&sys, &inventory(&sys), &pfc_on_3("pcp"), 3, &mut r);
        let c: Vec<&Check> = about(&checks, "ens1f0np0")
            .into_iter()
            .filter(|c| c.evidence.contains("4 VFs enabled, more than the 2"))
            .collect();
        assert_eq!(c.len(), 1, "{checks:#?}");
        assert_eq!(c[0].status, Status::Warn);
        // The kernel refuses such a write (-ERANGE): no fix that would re-create the VFs
        // (echo 0 first), taking them from the VMs that hold them.
        assert_eq!(c[0].fix, None, "{:?}", c[0]);
        assert!(c[0].evidence.contains("-ERANGE"), "{}", c[0].evidence);
        let c = about(&checks, "ens1f0np0 vf 1");
        assert_eq!(c.len(), 1, "{checks:#?}");
        assert_eq!(c[0].status, Status::Warn);
        assert!(c[0].evidence.contains(
            "VF 1 (0000:3b:00.3) is bound to mlx5_core on the host but has no RDMA device"
        ));
    }

    /// A VF handed to a VM through mlx5's vfio variant driver (`mlx5_vfio_pci`) is not
    /// "bound on the host without RDMA".
    #[test]
    fn a_vf_on_a_vendor_vfio_driver_is_a_vms() {
        let tmp = tempfile::tempdir().unwrap();
        copy_tree(&fixture(), tmp.path());
        let vf2 = tmp
            .path()
            .join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.4/driver");
        std::fs::remove_file(&vf2).unwrap();
        let drv = tmp.path().join("bus/pci/drivers/mlx5_vfio_pci");
        std::fs::create_dir_all(&drv).unwrap();
        std::os::unix::fs::symlink(&drv, &vf2).unwrap();
        let sys = SysRoot::new(tmp.path());
        let mut r = host_replies(vec![vf(0, 100, 3)]);
        let checks = sriov_checks(&sys, &inventory(&sys), &pfc_on_3("pcp"), 3, &mut r);
        assert!(about(&checks, "ens1f0np0 vf 2").is_empty(), "{checks:#?}");
        assert!(
            !checks.iter().any(|c| c.evidence.contains("mlx5_vfio_pci")),
            "{checks:#?}"
        );
    }

    #[test]
    fn a_host_without_vfs_skips() {
        let tmp = tempfile::tempdir().unwrap();
        let sys = SysRoot::new(tmp.path());
        let checks = sriov_checks(
            &sys,
            &Inventory::default(),
            &[],
            3,
            &mut NotThisHost(String::new()),
        );
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].status, Status::Skip);
        assert!(checks[0].evidence.starts_with("no SR-IOV VFs"));
    }

    /// A PF netdev that runs `touch P` where a fix leaves it unquoted.
    #[test]
    fn fixes_quote_the_pf_netdev() {
        let nd = "$(touch${IFS}P)";
        let sriov = SysRoot::new(fixture())
            .sriov_of_netdev("ens1f0np0")
            .unwrap()
            .unwrap()
            .as_pf()
            .unwrap()
            .clone();
        let pf = Pf {
            dev: "mlx5_0",
            port: 1,
            netdev: nd,
            pci: Some("0000:3b:00.0".into()),
            sriov,
        };
        let mut v = vf(3, 100, 0);
        v.link_state = Some(LinkState::Disable);
        v.max_tx_rate = Some(1);
        let mut r = Replies(
            vec![PfVfs {
                ifindex: 4,
                name: nd.into(),
                num_vf: Some(1),
                vfs: vec![v],
            }],
            Some(1),
        );
        let checks = pf_checks(&pf, &[], 3, &mut r);
        let fixes: Vec<&String> = checks.iter().filter_map(|c| c.fix.as_ref()).collect();
        // Every fix the PF's checks give (link state, rate, VLAN priority) quotes it.
        assert!(fixes.len() >= 3, "{checks:#?}");
        for f in fixes {
            assert!(only_single_quoted(f, "touch"), "{f}");
        }
    }
}
