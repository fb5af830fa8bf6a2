//! The SR-IOV metrics of a PF's virtual functions: from rtnetlink's `IFLA_VFINFO_LIST`
//! (`rocewatch_netlink::vfinfo`, what `ip -s link show dev PF` prints on its `vf N`
//! lines) and the PF's `sriov_*` files, read by counters-ethtool on the netdevs of RDMA
//! ports that are SR-IOV PFs. The series of one PF are bounded by its VF count.

use rocewatch_plugin_api::MetricDescriptor;

pub use crate::entry::CatalogEntry;
use crate::entry::{entry, NONE};
use crate::names;

/// The VF's index on its PF (`ip link set PF vf N`, the PF's `virtfnN` link).
pub const ATTR_VF: &str = "rdma.vf";
/// The VF's PCI address (`0000:3b:00.2`), from the PF's `virtfnN` link.
pub const ATTR_VF_PCI: &str = "rdma.vf.pci_address";
/// The VLAN the PF inserts into the VF's frames (`0`: none).
pub const ATTR_VF_VLAN: &str = "rdma.vf.vlan";
/// The 802.1p priority (PCP) of the inserted VLAN tag (`ip link ... vf N vlan V qos Q`).
pub const ATTR_VF_QOS: &str = "rdma.vf.qos";
/// `on`, `off` or `unknown` (the driver does not report it).
pub const ATTR_VF_TRUST: &str = "rdma.vf.trust";
/// `on`, `off` or `unknown`.
pub const ATTR_VF_SPOOFCHK: &str = "rdma.vf.spoofchk";
/// `auto`, `enable` or `disable`.
pub const ATTR_VF_LINK_STATE: &str = "rdma.vf.link_state";

const TX: &[(&str, &str)] = &[(crate::catalog::ATTR_DIRECTION, "transmit")];
const RX: &[(&str, &str)] = &[(crate::catalog::ATTR_DIRECTION, "receive")];
const SEEN: &str = "SR-IOV PFs whose driver reports VFs (mlx5, ice, bnxt_en)";

/// The VF metrics.
pub static VF_CATALOG: &[CatalogEntry] = &[
    entry!(names::SRIOV_VFS, "{vf}", Gauge, "PCI function's sriov_numvfs", NONE, 1, SEEN,
        "VFs enabled on the PF now, with the PF's port attributes."),
    entry!(names::SRIOV_VFS_MAX, "{vf}", Gauge, "PCI function's sriov_totalvfs", NONE, 1, SEEN,
        "The most VFs the PF offers (its firmware's VF count)."),
    entry!(names::VF_INFO, "{vf}", Gauge, "IFLA_VF_VLAN_LIST, IFLA_VF_TRUST, IFLA_VF_SPOOFCHK, IFLA_VF_LINK_STATE", NONE, 1, SEEN,
        "Always 1, per VF, with the settings its PF imposes: `rdma.vf.vlan` and `rdma.vf.qos` (the PCP written into every frame of the VF: RoCE through the VF is lossless only when it is a PFC priority of the PF), `rdma.vf.trust`, `rdma.vf.spoofchk`, `rdma.vf.link_state`."),
    entry!(names::VF_IO, "By", Counter, "IFLA_VF_STATS_TX_BYTES", TX, 1, SEEN,
        "Bytes the VF sent, as its PF counts them."),
    entry!(names::VF_IO, "By", Counter, "IFLA_VF_STATS_RX_BYTES", RX, 1, SEEN,
        "Bytes the VF received."),
    entry!(names::VF_PACKETS, "{packet}", Counter, "IFLA_VF_STATS_TX_PACKETS", TX, 1, SEEN,
        "Packets the VF sent."),
    entry!(names::VF_PACKETS, "{packet}", Counter, "IFLA_VF_STATS_RX_PACKETS", RX, 1, SEEN,
        "Packets the VF received."),
    entry!(names::VF_BROADCAST_PACKETS, "{packet}", Counter, "IFLA_VF_STATS_BROADCAST", NONE, 1, SEEN,
        "Broadcast packets the VF received."),
    entry!(names::VF_MULTICAST_PACKETS, "{packet}", Counter, "IFLA_VF_STATS_MULTICAST", NONE, 1, SEEN,
        "Multicast packets the VF received."),
    entry!(names::VF_DROPPED, "{packet}", Counter, "IFLA_VF_STATS_TX_DROPPED", TX, 1, SEEN,
        "Packets of the VF dropped before sending (absent where the kernel does not report it)."),
    entry!(names::VF_DROPPED, "{packet}", Counter, "IFLA_VF_STATS_RX_DROPPED", RX, 1, SEEN,
        "Packets for the VF dropped on receive (absent where the kernel does not report it)."),
    entry!(names::VF_MAX_TX_RATE, "bit/s", Gauge, "IFLA_VF_RATE max_tx_rate", NONE, 1_000_000, SEEN,
        "The transmit rate limit the PF imposes on the VF (the kernel's Mbit/s converted); 0: none. A limit caps the VF's RDMA bandwidth whatever the network does."),
    entry!(names::VF_MIN_TX_RATE, "bit/s", Gauge, "IFLA_VF_RATE min_tx_rate", NONE, 1_000_000, SEEN,
        "The transmit rate guaranteed to the VF; 0: none."),
];

/// The entry of a VF metric read from `source`.
pub fn vf_entry(source: &str) -> Option<&'static CatalogEntry> {
    VF_CATALOG.iter().find(|e| e.source == source)
}

/// Descriptors of the VF metrics.
pub fn vf_descriptors() -> Vec<MetricDescriptor> {
    crate::entry::descriptors_of(VF_CATALOG)
}
