//! What an RDMA CM connection attempt's events mean, by where it stopped: address
//! resolution, route resolution, unreachable, rejected (with the CM's reason),
//! connection error, established then broken. Pure: the CM path feeds it the events and
//! the errors of the synchronous calls; the text before the first `:` is the cause class
//! the agent counts (`rdma.probe.cause`).
//!
//! Facts from the sources: `enum rdma_cm_event_type` (rdma-core `librdmacm/rdma_cma.h`,
//! values checked by compiling against it); how the kernel fills an event's `status`
//! (`drivers/infiniband/core/cma.c`): ADDR_ERROR carries -ENODEV when no RDMA device owns
//! the source address and -ETIMEDOUT when the neighbour does not answer, UNREACHABLE
//! -ETIMEDOUT when the connection request got no reply, REJECTED the IB CM's reject
//! reason (`include/rdma/ib_cm.h` `enum ib_cm_rej_reason`): 8 when nothing listens on the
//! port (`cm.c` `cm_match_req`), 28 when the listener refuses; librdmacm exports no
//! `rdma_reject_msg`, so the reasons are named here.

/// `enum rdma_cm_event_type`.
pub mod event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// The event's name as `rdma_event_str` gives it.
pub fn event_name(e: u32) -> &'static str {
    [
        "RDMA_CM_EVENT_ADDR_RESOLVED",
        "RDMA_CM_EVENT_ADDR_ERROR",
        "RDMA_CM_EVENT_ROUTE_RESOLVED",
        "RDMA_CM_EVENT_ROUTE_ERROR",
        "RDMA_CM_EVENT_CONNECT_REQUEST",
        "RDMA_CM_EVENT_CONNECT_RESPONSE",
        "RDMA_CM_EVENT_CONNECT_ERROR",
        "RDMA_CM_EVENT_UNREACHABLE",
        "RDMA_CM_EVENT_REJECTED",
        "RDMA_CM_EVENT_ESTABLISHED",
        "RDMA_CM_EVENT_DISCONNECTED",
        "RDMA_CM_EVENT_DEVICE_REMOVAL",
        "RDMA_CM_EVENT_MULTICAST_JOIN",
        "RDMA_CM_EVENT_MULTICAST_ERROR",
        "RDMA_CM_EVENT_ADDR_CHANGE",
        "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ]
    .get(e as usize)
    .copied()
    .unwrap_or("UNKNOWN EVENT")
}

/// The IB CM's reject reasons (`enum ib_cm_rej_reason`), as the kernel's
/// `ibcm_rej_reason_strs` names them.
pub fn reject_reason(code: i32) -> &'static str {
    match code {
        1 => "no QP",
        2 => "no EEC",
        3 => "no resources",
        4 => "timeout",
        5 => "unsupported request",
        6 => "invalid comm ID",
        7 => "invalid comm instance",
        8 => "invalid service ID",
        9 => "invalid transport type",
        10 => "stale conn",
        11 => "RDC not exist",
        12 => "invalid GID",
        13 => "invalid LID",
        14 => "invalid SL",
        15 => "invalid traffic class",
        16 => "invalid hop limit",
        17 => "invalid packet rate",
        18 => "invalid alt GID",
        19 => "invalid alt LID",
        20 => "invalid alt SL",
        21 => "invalid alt traffic class",
        22 => "invalid alt hop limit",
        23 => "invalid alt packet rate",
        24 => "port CM redirect",
        25 => "port redirect",
        26 => "invalid MTU",
        27 => "insufficient resp resources",
        28 => "consumer defined",
        29 => "invalid RNR retry",
        30 => "duplicate local comm ID",
        31 => "invalid class version",
        32 => "invalid flow label",
        33 => "invalid alt flow label",
        35 => "vendor option not supported",
        _ => "unknown reason",
    }
}

/// Where an attempt is, waiting for its next event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `rdma_resolve_addr` issued: the source address, its RDMA device and GID, the
    /// neighbour.
    Address,
    /// `rdma_resolve_route` issued.
    Route,
    /// `rdma_connect` issued: the CM's request on the wire (UDP 4791).
    Connect,
    /// Connected: a disconnect now breaks it.
    Established,
}

impl Stage {
    /// The event that moves the attempt on.
    pub fn expected(self) -> u32 {
        match self {
            Stage::Address => event::ADDR_RESOLVED,
            Stage::Route => event::ROUTE_RESOLVED,
            Stage::Connect => event::ESTABLISHED,
            Stage::Established => u32::MAX,
        }
    }
}

fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// A synchronous failure of the call that starts `stage` (`errno` positive), as a cause.
pub fn call_failed(stage: Stage, errno: i32, peer: &str) -> String {
    match (stage, errno) {
        (Stage::Address, libc::EADDRNOTAVAIL) => format!(
            "address: the source address is on no interface of this host ({})",
            errno_text(errno)
        ),
        (Stage::Address, libc::ENETUNREACH | libc::EHOSTUNREACH) => format!(
            "address: no route to {peer} ({}): add a route for the RDMA subnet over the RDMA netdev",
            errno_text(errno)
        ),
        (Stage::Address, libc::ENODEV) => format!(
            "address: no RDMA device owns the route's source address towards {peer} ({}): the route leaves through a netdev without RoCE, or the address has no RoCE GID",
            errno_text(errno)
        ),
        (Stage::Address, _) => format!("address: rdma_resolve_addr: {}", errno_text(errno)),
        (Stage::Route, _) => format!("route: rdma_resolve_route: {}", errno_text(errno)),
        (Stage::Connect, _) => format!("connection error: rdma_connect: {}", errno_text(errno)),
        (Stage::Established, _) => format!("broken: {}", errno_text(errno)),
    }
}

/// What event `got` (with its `status`) means while waiting at `stage`: `Ok` when it is
/// the one that moves the attempt on, else the cause. `port` is the CM port asked.
pub fn event_outcome(
    stage: Stage,
    got: u32,
    status: i32,
    peer: &str,
    port: u16,
) -> Result<(), String> {
    if got == stage.expected() && status == 0 {
        return Ok(());
    }
    Err(match got {
        event::ADDR_ERROR if status == -libc::ENODEV => format!(
            "address: no RDMA device owns the source address towards {peer} (no RoCE GID for it; status {status}): the route leaves through a netdev without RoCE"
        ),
        event::ADDR_ERROR if status == -libc::ETIMEDOUT => format!(
            "address: {peer} did not answer neighbour resolution (ARP/ND) in time (status {status}): wrong address, or not on this link"
        ),
        event::ADDR_ERROR => format!("address: resolution failed (status {status}: {})", errno_text(-status)),
        event::ROUTE_ERROR => format!("route: resolution failed (status {status}: {})", errno_text(-status)),
        event::UNREACHABLE => format!(
            "unreachable: no answer to the connection request to {peer} port {port} (status {status}): UDP 4791 dropped on the path or at {peer}, or no RDMA CM there"
        ),
        event::REJECTED if status == 8 => format!(
            "rejected: nothing listens on port {port} at {peer} (CM reject reason 8, invalid service ID): start rocewatch probe --serve --cm --cm-port {port} there"
        ),
        event::REJECTED if status == 28 => format!(
            "rejected: the listener on port {port} at {peer} refused (CM reject reason 28, consumer defined)"
        ),
        event::REJECTED => format!(
            "rejected: CM reject reason {status} ({}) from {peer}",
            reject_reason(status)
        ),
        event::CONNECT_ERROR => format!(
            "connection error: the connection to {peer} could not be set up (status {status}: {})",
            errno_text(-status)
        ),
        event::DISCONNECTED | event::DEVICE_REMOVAL | event::TIMEWAIT_EXIT
            if stage == Stage::Established =>
        {
            format!("broken: {} after the connection was established", event_name(got))
        }
        event::DEVICE_REMOVAL => "connection error: the RDMA device was removed".to_string(),
        event::ADDR_CHANGE => "connection error: the address changed under the attempt".to_string(),
        other if status != 0 && other == stage.expected() => format!(
            "connection error: {} with status {status}",
            event_name(other)
        ),
        other => format!(
            "connection error: {} while waiting for {}",
            event_name(other),
            event_name(stage.expected())
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cause class the agent counts (the text before the first `:`).
    fn class(s: &str) -> &str {
        s.split(':').next().unwrap()
    }

    #[test]
    fn the_expected_event_moves_on() {
        assert!(event_outcome(Stage::Address, event::ADDR_RESOLVED, 0, "p", 7471).is_ok());
        assert!(event_outcome(Stage::Route, event::ROUTE_RESOLVED, 0, "p", 7471).is_ok());
        assert!(event_outcome(Stage::Connect, event::ESTABLISHED, 0, "p", 7471).is_ok());
    }

    #[test]
    fn every_event_at_every_stage_is_a_named_cause() {
        for stage in [
            Stage::Address,
            Stage::Route,
            Stage::Connect,
            Stage::Established,
        ] {
            for e in 0..=16u32 {
                for status in [0, -libc::ENODEV, -libc::ETIMEDOUT, 8, 28, 10, 99] {
                    match event_outcome(stage, e, status, "10.0.0.2", 7471) {
                        Ok(()) => assert!(e == stage.expected() && status == 0),
                        Err(c) => {
                            let k = class(&c);
                            assert!(
                                [
                                    "address",
                                    "route",
                                    "unreachable",
                                    "rejected",
                                    "connection error",
                                    "broken"
                                ]
                                .contains(&k),
                                "{stage:?} {e} {status}: {c}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn each_failure_is_named_by_where_it_stopped() {
        let c = event_outcome(
            Stage::Address,
            event::ADDR_ERROR,
            -libc::ENODEV,
            "10.0.0.2",
            7471,
        )
        .unwrap_err();
        assert!(
            c.starts_with("address: no RDMA device owns the source address"),
            "{c}"
        );
        let c = event_outcome(
            Stage::Address,
            event::ADDR_ERROR,
            -libc::ETIMEDOUT,
            "10.0.0.2",
            7471,
        )
        .unwrap_err();
        assert!(c.contains("did not answer neighbour resolution"), "{c}");
        let c = event_outcome(
            Stage::Route,
            event::ROUTE_ERROR,
            -libc::EINVAL,
            "10.0.0.2",
            7471,
        )
        .unwrap_err();
        assert_eq!(class(&c), "route");
        let c = event_outcome(
            Stage::Connect,
            event::UNREACHABLE,
            -libc::ETIMEDOUT,
            "10.0.0.2",
            7471,
        )
        .unwrap_err();
        assert!(
            c.starts_with("unreachable: no answer to the connection request to 10.0.0.2 port 7471"),
            "{c}"
        );
        let c = event_outcome(Stage::Connect, event::REJECTED, 8, "10.0.0.2", 7471).unwrap_err();
        assert!(
            c.starts_with("rejected: nothing listens on port 7471 at 10.0.0.2 (CM reject reason 8"),
            "{c}"
        );
        assert!(c.contains("--serve --cm --cm-port 7471"), "{c}");
        let c = event_outcome(Stage::Connect, event::REJECTED, 28, "10.0.0.2", 7471).unwrap_err();
        assert!(
            c.contains("refused (CM reject reason 28, consumer defined)"),
            "{c}"
        );
        let c = event_outcome(Stage::Connect, event::REJECTED, 10, "10.0.0.2", 7471).unwrap_err();
        assert!(c.contains("CM reject reason 10 (stale conn)"), "{c}");
        let c = event_outcome(
            Stage::Connect,
            event::CONNECT_ERROR,
            -libc::EINVAL,
            "10.0.0.2",
            7471,
        )
        .unwrap_err();
        assert_eq!(class(&c), "connection error");
        let c = event_outcome(Stage::Established, event::DISCONNECTED, 0, "10.0.0.2", 7471)
            .unwrap_err();
        assert!(
            c.starts_with("broken: RDMA_CM_EVENT_DISCONNECTED after"),
            "{c}"
        );
        let c = call_failed(Stage::Address, libc::EADDRNOTAVAIL, "10.0.0.2");
        assert!(
            c.starts_with("address: the source address is on no interface"),
            "{c}"
        );
        let c = call_failed(Stage::Address, libc::ENETUNREACH, "10.0.0.2");
        assert!(c.starts_with("address: no route to 10.0.0.2"), "{c}");
        assert_eq!(event_name(99), "UNKNOWN EVENT");
        assert_eq!(reject_reason(34), "unknown reason");
    }
}
