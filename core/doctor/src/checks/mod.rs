//! The checks, one file per topic of the guide (or per part of one): each reads what it
//! is given and returns `Check`s with evidence and the fix. The guide (`crate::guide`)
//! calls them in its order.

pub(crate) mod acs;
pub(crate) mod bandwidth;
pub(crate) mod buffers;
pub mod capture;
pub(crate) mod cm_path;
pub(crate) mod congestion;
pub(crate) mod counters;
pub(crate) mod dcbx;
pub(crate) mod driver;
pub(crate) mod fec_margin;
pub(crate) mod firewall;
pub(crate) mod gpu;
pub(crate) mod interrupts;
pub(crate) mod kernel_log;
pub(crate) mod link;
pub(crate) mod linklayer;
pub(crate) mod mtu;
pub(crate) mod multirail;
pub(crate) mod numa;
pub(crate) mod optics;
pub(crate) mod pcie;
pub(crate) mod probe;
pub(crate) mod qos;
pub(crate) mod rails;
pub(crate) mod sriov;
pub mod userspace;
pub(crate) mod virtualization;
