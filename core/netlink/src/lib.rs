//! Netlink for rocewatch, without a netlink framework: the message and attribute framing
//! ([`msg`]), one blocking request/reply socket ([`socket`]), the RDMA "nldev"
//! requests that `rdma dev show` and `rdma statistic show` make ([`rdma`]), the resource
//! dumps of `rdma resource show qp|cq|mr|pd` ([`rdma_res`]), the per-QP statistic
//! counters of `rdma statistic qp mode|set|show` ([`rdma_stat`]), the DCB (PFC, APP
//! table) requests of `dcb pfc show` / `dcb app show` ([`dcb`]), and the rtnetlink dumps
//! of `ip link`, `ip addr`, `ip rule` and `ip route` ([`route`]); an SR-IOV PF's virtual
//! functions as `ip link show dev PF` prints them ([`vfinfo`]); the interfaces'
//! addresses as `getifaddrs` gives them ([`ifaddrs`]); generic netlink's family lookup
//! ([`genl`]) and ethtool netlink's link state, FEC statistics and module EEPROM pages
//! ([`ethtool`], a whole module by page in [`module_eeprom`]).
//!
//! Everything that turns bytes into values is a pure function over byte slices, so it is
//! tested against messages recorded from a real kernel (`testdata/`), byte for byte.

pub mod dcb;
pub mod devlink;
pub mod ethtool;
pub mod ethtool_replies;
#[cfg(test)]
mod ethtool_tests;
mod ethtool_words;
pub mod genl;
pub mod ifaddrs;
pub mod module_eeprom;
pub mod msg;
pub mod rdma;
pub mod rdma_res;
pub mod rdma_stat;
pub mod route;
pub mod socket;
pub mod vfinfo;

#[cfg(test)]
mod rdma_recorded;
#[cfg(test)]
mod replay;

use std::io;

/// What can go wrong talking netlink.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The socket could not be opened: the kernel lacks the protocol (no RDMA core) or
    /// we lack the permission.
    #[error("cannot open a netlink socket for {family}: {source}")]
    Open {
        family: &'static str,
        #[source]
        source: io::Error,
    },
    /// Sending or receiving failed (including a receive timeout).
    #[error("netlink {request}: {source}")]
    Io {
        request: String,
        #[source]
        source: io::Error,
    },
    /// The kernel answered with an error.
    #[error("netlink {request}: the kernel answered {}", io::Error::from_raw_os_error(*.errno))]
    Kernel { request: String, errno: i32 },
    /// The reply does not parse.
    #[error("netlink {request}: malformed reply: {detail}")]
    Malformed { request: String, detail: String },
}
