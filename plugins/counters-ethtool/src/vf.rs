//! The SR-IOV VFs of the netdevs read here that are physical functions: the VF count
//! from the PF's `sriov_*` files (`rocewatch_sysfs::sriov`), each VF's settings and
//! statistics from rtnetlink (`rocewatch_netlink::vfinfo`), as the catalog's
//! `VF_CATALOG` says. Here because the VF statistics are the PF driver's
//! (`ndo_get_vf_stats`) about the same netdevs this collector reads `ethtool -S` of, at
//! the same cadence; no other collector reads rtnetlink (qos-linux reads DCB over it,
//! but reports settings, not metrics). The series of one PF are bounded by the VFs its
//! kernel lists (at most `sriov_numvfs`).

use std::collections::BTreeMap;

use rocewatch_metrics::names;
use rocewatch_metrics::{
    vf_entry, CatalogEntry, ATTR_VF, ATTR_VF_LINK_STATE, ATTR_VF_PCI, ATTR_VF_QOS,
    ATTR_VF_SPOOFCHK, ATTR_VF_TRUST, ATTR_VF_VLAN, VF_CATALOG,
};
use rocewatch_netlink::vfinfo::{PfVfs, VfInfo, VfNetlink};
use rocewatch_plugin_api::{Attributes, PartialError, Sample, ScrapeResult, Value};
use rocewatch_sysfs::sriov::{PhysFn, Sriov};
use rocewatch_sysfs::SysRoot;

/// Where the VF settings of a PF netdev come from: rtnetlink on a host, replies built
/// as the kernel lays them out in tests.
pub trait VfSource: Send {
    fn vfs(&mut self, ifname: &str) -> Result<PfVfs, String>;
}

/// This network namespace's rtnetlink, opened at the first request.
#[derive(Default)]
pub struct NetlinkVfSource(Option<VfNetlink>);

impl VfSource for NetlinkVfSource {
    fn vfs(&mut self, ifname: &str) -> Result<PfVfs, String> {
        if self.0.is_none() {
            self.0 = Some(VfNetlink::open().map_err(|e| e.to_string())?);
        }
        let nl = self.0.as_mut().expect("opened above");
        nl.vfs_by_name(ifname).map_err(|e| e.to_string())
    }
}

fn sample(e: &CatalogEntry, value: u64, attrs: BTreeMap<String, String>) -> Sample {
    let mut attrs = attrs;
    for (k, v) in e.attributes {
        attrs.insert((*k).into(), (*v).into());
    }
    Sample {
        name: e.name.into(),
        unit: e.unit.into(),
        value: Value::U64(value.saturating_mul(e.scale)),
        attributes: Attributes::new(attrs.into()),
        source: format!("rtnetlink:{}", e.source).into(),
        kind: e.kind,
    }
}

fn on_off(s: Option<bool>) -> String {
    match s {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    }
    .into()
}

/// One VF's samples: its info series, rate limits and statistics.
fn vf_samples(v: &VfInfo, pci: Option<&str>, base: &BTreeMap<String, String>) -> Vec<Sample> {
    let mut attrs = base.clone();
    attrs.insert(ATTR_VF.into(), v.vf.to_string());
    attrs.insert(ATTR_VF_PCI.into(), pci.unwrap_or("unknown").into());
    let entry = |source: &str| vf_entry(source).expect("catalogued VF source");
    let mut out = Vec::new();
    let mut info = attrs.clone();
    let vlan = v.vlan.filter(|l| l.vlan != 0);
    info.insert(ATTR_VF_VLAN.into(), vlan.map_or(0, |l| l.vlan).to_string());
    info.insert(ATTR_VF_QOS.into(), vlan.map_or(0, |l| l.qos).to_string());
    info.insert(ATTR_VF_TRUST.into(), on_off(v.trust));
    info.insert(ATTR_VF_SPOOFCHK.into(), on_off(v.spoofchk));
    info.insert(
        ATTR_VF_LINK_STATE.into(),
        v.link_state.map_or("unknown".into(), |s| s.as_str()),
    );
    let info_entry = VF_CATALOG
        .iter()
        .find(|e| e.name == names::VF_INFO)
        .expect("catalogued");
    out.push(sample(info_entry, 1, info));
    for (source, value) in [
        ("IFLA_VF_RATE max_tx_rate", v.max_tx_rate),
        ("IFLA_VF_RATE min_tx_rate", v.min_tx_rate),
    ] {
        if let Some(value) = value {
            out.push(sample(entry(source), u64::from(value), attrs.clone()));
        }
    }
    let Some(s) = &v.stats else {
        return out;
    };
    for (source, value) in [
        ("IFLA_VF_STATS_TX_BYTES", s.tx_bytes),
        ("IFLA_VF_STATS_RX_BYTES", s.rx_bytes),
        ("IFLA_VF_STATS_TX_PACKETS", s.tx_packets),
        ("IFLA_VF_STATS_RX_PACKETS", s.rx_packets),
        ("IFLA_VF_STATS_BROADCAST", s.broadcast),
        ("IFLA_VF_STATS_MULTICAST", s.multicast),
        ("IFLA_VF_STATS_TX_DROPPED", s.tx_dropped),
        ("IFLA_VF_STATS_RX_DROPPED", s.rx_dropped),
    ] {
        if let Some(value) = value {
            out.push(sample(entry(source), value, attrs.clone()));
        }
    }
    out
}

/// The samples of one PF: its VF count and each VF the kernel lists, the VF's PCI
/// address from the PF's `virtfnN` links (`base`: the PF port's attributes).
pub fn pf_samples(pf: &PhysFn, vfs: &PfVfs, base: &BTreeMap<String, String>) -> Vec<Sample> {
    let count = |name: &str, v: u32| {
        let e = VF_CATALOG
            .iter()
            .find(|e| e.name == name)
            .expect("catalogued");
        sample(e, u64::from(v), base.clone())
    };
    let mut out = vec![
        count(names::SRIOV_VFS, pf.numvfs),
        count(names::SRIOV_VFS_MAX, pf.totalvfs),
    ];
    for v in &vfs.vfs {
        let pci = pf
            .vfs
            .iter()
            .find(|f| f.index == v.vf)
            .map(|f| f.address.as_str());
        out.extend(vf_samples(v, pci, base));
    }
    out
}

/// The VF samples of `ifname` when it is a PF with VFs enabled, into `out`; an
/// unreadable PF is a partial error, a netdev that is no PF adds nothing.
pub fn collect(
    sys: &SysRoot,
    source: &mut dyn VfSource,
    ifname: &str,
    base: &BTreeMap<String, String>,
    out: &mut ScrapeResult,
) {
    let pf = match sys.sriov_of_netdev(ifname) {
        Ok(Some(Sriov::Pf(pf))) if pf.numvfs > 0 => pf,
        Ok(_) => return,
        Err(e) => {
            out.errors.push(PartialError {
                target: format!("SR-IOV files of {ifname}"),
                message: e.to_string(),
            });
            return;
        }
    };
    match source.vfs(ifname) {
        Ok(vfs) => out.samples.extend(pf_samples(&pf, &vfs, base)),
        Err(e) => out.errors.push(PartialError {
            target: format!("ip link show dev {ifname} (VFs)"),
            message: e,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_netlink::msg::messages;
    use rocewatch_netlink::vfinfo::{decode_vf_link, encode_vf_reply, LinkState, VfStats, VfVlan};

    /// integration-tests/fixtures/sriov-host: PF ens1f0np0 with 4 of 8 VFs.
    fn fixture_pf() -> PhysFn {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/sriov-host/sys");
        let s = SysRoot::new(root)
            .sriov_of_netdev("ens1f0np0")
            .unwrap()
            .unwrap();
        s.as_pf().unwrap().clone()
    }

    fn reply(vfs: Vec<VfInfo>) -> PfVfs {
        let pf = PfVfs {
            ifindex: 4,
            name: "ens1f0np0".into(),
            num_vf: Some(vfs.len() as u32),
            vfs,
        };
        let bytes = encode_vf_reply(1, &pf);
        let m = messages(&bytes).next().unwrap().unwrap();
        decode_vf_link(m.payload).unwrap()
    }

    fn find<'a>(s: &'a [Sample], name: &str, vf: &str, dir: Option<&str>) -> &'a Sample {
        s.iter()
            .find(|x| {
                x.name.as_ref() == name
                    && x.attributes.get(ATTR_VF) == Some(vf)
                    && dir.is_none_or(|d| {
                        x.attributes.get(rocewatch_metrics::ATTR_DIRECTION) == Some(d)
                    })
            })
            .unwrap_or_else(|| panic!("no {name} of VF {vf} in {s:#?}"))
    }

    #[test]
    fn every_vf_has_its_settings_rate_and_counters_with_its_pci_address() {
        let v = |i: u32| VfInfo {
            vf: i,
            mac: Some([2, 0, 0, 0, 0, i as u8]),
            vlan: Some(VfVlan {
                vlan: 100,
                qos: i,
                proto: None,
            }),
            min_tx_rate: Some(0),
            max_tx_rate: Some(if i == 2 { 25_000 } else { 0 }),
            spoofchk: Some(true),
            trust: None,
            link_state: Some(if i == 3 {
                LinkState::Disable
            } else {
                LinkState::Auto
            }),
            stats: Some(VfStats {
                rx_bytes: Some(1000 + u64::from(i)),
                tx_bytes: Some(7),
                ..VfStats::default()
            }),
        };
        let mut base = BTreeMap::new();
        base.insert(
            rocewatch_metrics::ATTR_NETDEV.to_string(),
            "ens1f0np0".to_string(),
        );
        let s = pf_samples(&fixture_pf(), &reply((0..4).map(v).collect()), &base);
        let vfs = s
            .iter()
            .find(|x| x.name.as_ref() == names::SRIOV_VFS)
            .unwrap();
        assert_eq!(vfs.value, Value::U64(4));
        let max = s
            .iter()
            .find(|x| x.name.as_ref() == names::SRIOV_VFS_MAX)
            .unwrap();
        assert_eq!(max.value, Value::U64(8));
        let info = find(&s, names::VF_INFO, "3", None);
        assert_eq!(info.attributes.get(ATTR_VF_PCI), Some("0000:3b:00.5"));
        assert_eq!(info.attributes.get(ATTR_VF_QOS), Some("3"));
        assert_eq!(info.attributes.get(ATTR_VF_LINK_STATE), Some("disable"));
        assert_eq!(info.attributes.get(ATTR_VF_TRUST), Some("unknown"));
        assert_eq!(
            info.attributes.get(rocewatch_metrics::ATTR_NETDEV),
            Some("ens1f0np0")
        );
        // Mbit/s as bit/s.
        let rate = find(&s, names::VF_MAX_TX_RATE, "2", None);
        assert_eq!(rate.value, Value::U64(25_000_000_000));
        let rx = find(&s, names::VF_IO, "1", Some("receive"));
        assert_eq!(rx.value, Value::U64(1001));
        assert_eq!(rx.attributes.get(ATTR_VF_PCI), Some("0000:3b:00.3"));
        // Every sample is catalogued with its unit and kind.
        let d = rocewatch_metrics::vf_descriptors();
        for x in &s {
            let e = d
                .iter()
                .find(|d| d.name == x.name.as_ref())
                .expect("declared");
            assert_eq!((e.unit.as_str(), e.kind), (x.unit.as_ref(), x.kind));
        }
    }
}
