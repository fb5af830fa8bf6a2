//! The SR-IOV VFs of a PF netdev, collected with its driver statistics: on the
//! sriov-host fixture (an mlx5 PF, 4 of 8 VFs) with VF settings built as the kernel's
//! `rtnl_fill_vfinfo` lays them out.

use std::path::Path;

use rocewatch_counters_ethtool::vf::VfSource;
use rocewatch_counters_ethtool::{EthtoolCounters, StatsSource};
use rocewatch_netlink::msg::messages;
use rocewatch_netlink::vfinfo::{decode_vf_link, encode_vf_reply, PfVfs, VfInfo, VfVlan};
use rocewatch_plugin_api::*;

/// Every netdev has one driver statistic.
struct OneStat;

impl StatsSource for OneStat {
    fn stats(&mut self, _: &str) -> std::io::Result<Option<Vec<(String, u64)>>> {
        Ok(Some(vec![("rx_prio3_pause".into(), 5)]))
    }
}

/// The PF's reply; another netdev asked is refused as the kernel would (no such device).
struct Kernel;

impl VfSource for Kernel {
    fn vfs(&mut self, ifname: &str) -> Result<PfVfs, String> {
        if ifname != "ens1f0np0" {
            return Err(format!("{ifname} is not a PF of this test"));
        }
        let pf = PfVfs {
            ifindex: 4,
            name: ifname.into(),
            num_vf: Some(4),
            vfs: (0..4)
                .map(|i| VfInfo {
                    vf: i,
                    vlan: Some(VfVlan {
                        vlan: 100,
                        qos: 3,
                        proto: None,
                    }),
                    ..VfInfo::default()
                })
                .collect(),
        };
        let bytes = encode_vf_reply(1, &pf);
        let m = messages(&bytes).next().unwrap().unwrap();
        decode_vf_link(m.payload)
    }
}

#[test]
fn a_pf_netdev_gets_its_vfs_and_the_vfs_own_netdevs_none() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../integration-tests/fixtures/sriov-host/sys");
    let mut c = EthtoolCounters::with_source(Box::new(OneStat)).with_vf_source(Box::new(Kernel));
    c.start(&PluginContext::new(root)).unwrap();
    let r = c.collect().unwrap();
    // The VFs on the host (ens1f0v0, ens1f0v1) are no PFs: never asked.
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let info: Vec<&Sample> = r
        .samples
        .iter()
        .filter(|s| s.name == "rdma.vf.info")
        .collect();
    assert_eq!(info.len(), 4, "{:#?}", r.samples);
    let vf2 = info
        .iter()
        .find(|s| s.attributes.get("rdma.vf") == Some("2"))
        .unwrap();
    assert_eq!(
        vf2.attributes.get("rdma.vf.pci_address"),
        Some("0000:3b:00.4")
    );
    assert_eq!(vf2.attributes.get("rdma.vf.qos"), Some("3"));
    assert_eq!(vf2.attributes.get("rdma.device"), Some("mlx5_0"));
    assert_eq!(
        vf2.attributes.get("network.interface.name"),
        Some("ens1f0np0")
    );
    let declared: Vec<String> = c.descriptors().into_iter().map(|d| d.name).collect();
    for s in &r.samples {
        assert!(
            declared.iter().any(|d| *d == s.name),
            "{} undeclared",
            s.name
        );
    }
}
