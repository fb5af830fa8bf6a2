//! The catalog table.

use rocewatch_plugin_api::{MetricDescriptor, MetricKind};

pub use crate::entry::{descriptors_of, CatalogEntry};
use crate::entry::{entry, NONE, PORT};
use crate::names;

/// Attribute naming the RDMA device (`mlx5_0`).
pub const ATTR_DEVICE: &str = "rdma.device";
/// Attribute naming the port number (`1`).
pub const ATTR_PORT: &str = "rdma.port";
/// Attribute naming the port's netdev (`ens1f0np0`), when it has one.
pub const ATTR_NETDEV: &str = "network.interface.name";
/// `transmit` or `receive`.
pub const ATTR_DIRECTION: &str = "network.io.direction";
/// For counters without a catalog entry: the kernel's own name.
pub const ATTR_COUNTER: &str = "rdma.counter";
/// The IEEE 802.1p priority (`0` to `7`) of a per-priority counter.
pub const ATTR_PRIORITY: &str = "rdma.priority";
/// `requester` or `responder`: which side of a queue pair counted the event.
pub const ATTR_SIDE: &str = "rdma.side";
/// The verb counted (`read`, `write`, `atomic`, `send`, `recv`).
pub const ATTR_OPERATION: &str = "rdma.operation";
/// Why a retry counter counted (soft-RoCE).
pub const ATTR_CAUSE: &str = "rdma.cause";
/// For driver statistics without a catalog entry: ethtool's own name.
pub const ATTR_DRIVER_STAT: &str = "rdma.driver_stat";

const TX: &[(&str, &str)] = &[(ATTR_DIRECTION, "transmit")];
const RX: &[(&str, &str)] = &[(ATTR_DIRECTION, "receive")];
/// IP version of the IP-level counters (irdma).
pub const ATTR_NETWORK_TYPE: &str = "network.type";
const TX_V4: &[(&str, &str)] = &[(ATTR_DIRECTION, "transmit"), (ATTR_NETWORK_TYPE, "ipv4")];
const RX_V4: &[(&str, &str)] = &[(ATTR_DIRECTION, "receive"), (ATTR_NETWORK_TYPE, "ipv4")];
const TX_V6: &[(&str, &str)] = &[(ATTR_DIRECTION, "transmit"), (ATTR_NETWORK_TYPE, "ipv6")];
const RX_V6: &[(&str, &str)] = &[(ATTR_DIRECTION, "receive"), (ATTR_NETWORK_TYPE, "ipv6")];

const IB: &str = "IB PortCounters (mlx5, IB HCAs)";
const IB_EXT: &str = "IB PortCountersExtended (older kernels)";
const MLX5: &str = "mlx5";
const MLX5_BNXT: &str = "mlx5, bnxt_re (newer kernels)";
const BNXT: &str = "bnxt_re (Broadcom)";
const EFA: &str = "efa (AWS; no counters/ directory)";
const EFA_BNXT: &str = "efa, bnxt_re";
const RXE: &str = "rxe (soft-RoCE)";
const IRDMA: &str = "irdma (Intel E810, X722)";

/// Every metric read from a port directory.
pub static CATALOG: &[CatalogEntry] = &[
    // ---- state (gauges)
    entry!(names::PORT_UP, "1", Gauge, "state", NONE, 1, PORT,
        "1 when the port is ACTIVE and its physical state LinkUp, else 0 (from `state` and `phys_state`)."),
    entry!(names::PORT_RATE, "bit/s", Gauge, "rate", NONE, 1, PORT,
        "Negotiated port rate, parsed from `rate` (`100 Gb/sec (4X EDR)`)."),
    entry!(names::NETDEV_MTU, "By", Gauge, "class/net/<netdev>/mtu", NONE, 1, "ports with a netdev",
        "MTU of the port's netdev."),
    // ---- IB PortCounters (counters/): the PMA attributes of drivers/infiniband/core/sysfs.c
    // (PORT_PMA_ATTR: symbol_error ... port_rcv_packets; PORT_PMA_ATTR_EXT, when the
    // device has extended width counters: 64-bit port_*_data/packets under the same names
    // and unicast_/multicast_{xmit,rcv}_packets, without a `port_` prefix). The kernel
    // creates no `port_rcv_discards` (the procfs parser knows it from other exporters'
    // lists; no mainline PMA table has it), so it is not catalogued.
    entry!(names::PORT_IO, "By", Counter, "counters/port_xmit_data", TX, 4, IB,
        "Data octets transmitted. The kernel counts 4-octet words; the value is converted to bytes (×4)."),
    entry!(names::PORT_IO, "By", Counter, "counters/port_rcv_data", RX, 4, IB,
        "Data octets received. The kernel counts 4-octet words; the value is converted to bytes (×4)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "counters/port_xmit_packets", TX, 1, IB,
        "Packets transmitted."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "counters/port_rcv_packets", RX, 1, IB,
        "Packets received."),
    entry!(names::PORT_UNICAST_PACKETS, "{packet}", Counter, "counters/unicast_xmit_packets", TX, 1, IB,
        "Unicast packets transmitted."),
    entry!(names::PORT_UNICAST_PACKETS, "{packet}", Counter, "counters/unicast_rcv_packets", RX, 1, IB,
        "Unicast packets received."),
    entry!(names::PORT_MULTICAST_PACKETS, "{packet}", Counter, "counters/multicast_xmit_packets", TX, 1, IB,
        "Multicast packets transmitted."),
    entry!(names::PORT_MULTICAST_PACKETS, "{packet}", Counter, "counters/multicast_rcv_packets", RX, 1, IB,
        "Multicast packets received."),
    entry!(names::PORT_SYMBOL_ERRORS, "{error}", Counter, "counters/symbol_error", NONE, 1, IB,
        "Minor link errors detected on one or more physical lanes."),
    entry!(names::PORT_RECEIVE_ERRORS, "{packet}", Counter, "counters/port_rcv_errors", NONE, 1, IB,
        "Received packets containing an error."),
    entry!(names::PORT_RECEIVE_REMOTE_PHYSICAL_ERRORS, "{packet}", Counter, "counters/port_rcv_remote_physical_errors", NONE, 1, IB,
        "Received packets marked with the EBP delimiter (remote physical error)."),
    entry!(names::PORT_RECEIVE_SWITCH_RELAY_ERRORS, "{packet}", Counter, "counters/port_rcv_switch_relay_errors", NONE, 1, IB,
        "Received packets discarded because they could not be forwarded by the switch relay."),
    entry!(names::PORT_TRANSMIT_DISCARDS, "{packet}", Counter, "counters/port_xmit_discards", NONE, 1, IB,
        "Outbound packets discarded because the port was down or congested."),
    entry!(names::PORT_CONSTRAINT_ERRORS, "{packet}", Counter, "counters/port_xmit_constraint_errors", TX, 1, IB,
        "Packets not transmitted because of outbound raw filtering."),
    entry!(names::PORT_CONSTRAINT_ERRORS, "{packet}", Counter, "counters/port_rcv_constraint_errors", RX, 1, IB,
        "Packets discarded because of inbound raw filtering."),
    entry!(names::PORT_LOCAL_LINK_INTEGRITY_ERRORS, "{error}", Counter, "counters/local_link_integrity_errors", NONE, 1, IB,
        "Times the local physical errors exceeded the threshold."),
    entry!(names::PORT_EXCESSIVE_BUFFER_OVERRUN_ERRORS, "{error}", Counter, "counters/excessive_buffer_overrun_errors", NONE, 1, IB,
        "Times consecutive flow-control update periods had buffer overruns."),
    entry!(names::PORT_LINK_DOWNED, "{event}", Counter, "counters/link_downed", NONE, 1, IB,
        "Times the link error recovery process failed and the link went down."),
    entry!(names::PORT_LINK_ERROR_RECOVERY, "{event}", Counter, "counters/link_error_recovery", NONE, 1, IB,
        "Times the link error recovery process completed successfully."),
    entry!(names::PORT_VL15_DROPPED, "{packet}", Counter, "counters/VL15_dropped", NONE, 1, IB,
        "Incoming VL15 (subnet management) packets dropped."),
    entry!(names::PORT_TRANSMIT_WAIT, "{tick}", Counter, "counters/port_xmit_wait", NONE, 1, IB,
        "Ticks during which the port had data to transmit but none was sent (back-pressure)."),
    // ---- IB PortCountersExtended (counters_ext/): same series as counters/, 64-bit.
    entry!(names::PORT_IO, "By", Counter, "counters_ext/port_xmit_data_64", TX, 4, IB_EXT,
        "Data octets transmitted (64-bit counter, 4-octet words converted to bytes)."),
    entry!(names::PORT_IO, "By", Counter, "counters_ext/port_rcv_data_64", RX, 4, IB_EXT,
        "Data octets received (64-bit counter, 4-octet words converted to bytes)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "counters_ext/port_xmit_packets_64", TX, 1, IB_EXT,
        "Packets transmitted (64-bit counter)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "counters_ext/port_rcv_packets_64", RX, 1, IB_EXT,
        "Packets received (64-bit counter)."),
    entry!(names::PORT_UNICAST_PACKETS, "{packet}", Counter, "counters_ext/port_unicast_xmit_packets", TX, 1, IB_EXT,
        "Unicast packets transmitted (64-bit counter)."),
    entry!(names::PORT_UNICAST_PACKETS, "{packet}", Counter, "counters_ext/port_unicast_rcv_packets", RX, 1, IB_EXT,
        "Unicast packets received (64-bit counter)."),
    entry!(names::PORT_MULTICAST_PACKETS, "{packet}", Counter, "counters_ext/port_multicast_xmit_packets", TX, 1, IB_EXT,
        "Multicast packets transmitted (64-bit counter)."),
    entry!(names::PORT_MULTICAST_PACKETS, "{packet}", Counter, "counters_ext/port_multicast_rcv_packets", RX, 1, IB_EXT,
        "Multicast packets received (64-bit counter)."),
    // ---- hw_counters/ (mlx5)
    entry!(names::PORT_OUT_OF_BUFFER, "{packet}", Counter, "hw_counters/out_of_buffer", NONE, 1, MLX5_BNXT,
        "Packets dropped because no receive WQE was posted (receive buffer exhausted)."),
    entry!(names::PORT_OUT_OF_SEQUENCE, "{packet}", Counter, "hw_counters/out_of_sequence", NONE, 1, MLX5,
        "Out-of-sequence packets received (a sign of drops on the path)."),
    entry!(names::PORT_DUPLICATE_REQUESTS, "{packet}", Counter, "hw_counters/duplicate_request", NONE, 1, "mlx5, rxe",
        "Duplicate requests received (the requester retransmitted)."),
    entry!(names::PORT_PACKET_SEQUENCE_ERRORS, "{event}", Counter, "hw_counters/packet_seq_err", NONE, 1, MLX5,
        "NAK sequence errors received."),
    entry!(names::PORT_IMPLIED_NAK_SEQUENCE_ERRORS, "{event}", Counter, "hw_counters/implied_nak_seq_err", NONE, 1, MLX5,
        "Implied NAK sequence errors (a read/atomic response skipped a PSN)."),
    entry!(names::PORT_LOCAL_ACK_TIMEOUTS, "{event}", Counter, "hw_counters/local_ack_timeout_err", NONE, 1, MLX5,
        "ACK timer expirations on a requester QP (retransmission by timeout)."),
    entry!(names::PORT_RNR_NAK_RETRY_ERRORS, "{event}", Counter, "hw_counters/rnr_nak_retry_err", NONE, 1, MLX5,
        "RNR NAKs received after the retry count was exceeded."),
    entry!(names::PORT_CQE_ERRORS, "{event}", Counter, "hw_counters/req_cqe_error", &[(ATTR_SIDE, "requester")], 1, MLX5_BNXT,
        "Completions with error on the requester side."),
    entry!(names::PORT_CQE_ERRORS, "{event}", Counter, "hw_counters/resp_cqe_error", &[(ATTR_SIDE, "responder")], 1, MLX5_BNXT,
        "Completions with error on the responder side."),
    entry!(names::PORT_CQE_FLUSH_ERRORS, "{event}", Counter, "hw_counters/req_cqe_flush_error", &[(ATTR_SIDE, "requester")], 1, MLX5,
        "Flushed completions with error on the requester side."),
    entry!(names::PORT_CQE_FLUSH_ERRORS, "{event}", Counter, "hw_counters/resp_cqe_flush_error", &[(ATTR_SIDE, "responder")], 1, MLX5,
        "Flushed completions with error on the responder side."),
    entry!(names::PORT_REMOTE_ACCESS_ERRORS, "{event}", Counter, "hw_counters/req_remote_access_errors", &[(ATTR_SIDE, "requester")], 1, MLX5,
        "Remote access errors NAKed to the requester."),
    entry!(names::PORT_REMOTE_ACCESS_ERRORS, "{event}", Counter, "hw_counters/resp_remote_access_errors", &[(ATTR_SIDE, "responder")], 1, MLX5,
        "Remote access errors detected by the responder."),
    entry!(names::PORT_REMOTE_INVALID_REQUESTS, "{event}", Counter, "hw_counters/req_remote_invalid_request", NONE, 1, MLX5,
        "Invalid requests NAKed by the remote responder."),
    entry!(names::PORT_LOCAL_LENGTH_ERRORS, "{event}", Counter, "hw_counters/resp_local_length_error", NONE, 1, MLX5,
        "Responder local length errors (receive buffer too small)."),
    entry!(names::PORT_RECEIVED_REQUESTS, "{request}", Counter, "hw_counters/rx_read_requests", &[(ATTR_OPERATION, "read")], 1, MLX5_BNXT,
        "RDMA read requests received."),
    entry!(names::PORT_RECEIVED_REQUESTS, "{request}", Counter, "hw_counters/rx_write_requests", &[(ATTR_OPERATION, "write")], 1, MLX5_BNXT,
        "RDMA write requests received."),
    entry!(names::PORT_RECEIVED_REQUESTS, "{request}", Counter, "hw_counters/rx_atomic_requests", &[(ATTR_OPERATION, "atomic")], 1, MLX5_BNXT,
        "Atomic requests received."),
    entry!(names::PORT_ICRC_ENCAPSULATED, "{packet}", Counter, "hw_counters/rx_icrc_encapsulated", NONE, 1, MLX5,
        "RoCE packets received with an ICRC error."),
    entry!(names::PORT_RETRANSMISSIONS_ADAPTIVE, "{event}", Counter, "hw_counters/roce_adp_retrans", NONE, 1, MLX5,
        "Adaptive retransmissions."),
    entry!(names::PORT_RETRANSMISSIONS_ADAPTIVE_TIMEOUTS, "{event}", Counter, "hw_counters/roce_adp_retrans_to", NONE, 1, MLX5,
        "Timeouts during adaptive retransmission."),
    entry!(names::PORT_SLOW_RESTART, "{event}", Counter, "hw_counters/roce_slow_restart", NONE, 1, MLX5,
        "Slow restarts (the QP's rate was reset after a timeout)."),
    entry!(names::PORT_SLOW_RESTART_CNPS, "{packet}", Counter, "hw_counters/roce_slow_restart_cnps", NONE, 1, MLX5,
        "CNPs generated during slow restart."),
    entry!(names::PORT_SLOW_RESTART_TRANSITIONS, "{event}", Counter, "hw_counters/roce_slow_restart_trans", NONE, 1, MLX5,
        "Transitions from slow restart to normal state."),
    entry!(names::PORT_CNP_HANDLED, "{packet}", Counter, "hw_counters/rp_cnp_handled", NONE, 1, MLX5_BNXT,
        "CNPs handled by the reaction point (this NIC slowed down)."),
    entry!(names::PORT_CNP_IGNORED, "{packet}", Counter, "hw_counters/rp_cnp_ignored", NONE, 1, MLX5,
        "CNPs received and ignored by the reaction point."),
    entry!(names::PORT_CNP_SENT, "{packet}", Counter, "hw_counters/np_cnp_sent", NONE, 1, MLX5,
        "CNPs sent by the notification point (in answer to ECN-marked packets)."),
    entry!(names::PORT_ECN_MARKED_PACKETS, "{packet}", Counter, "hw_counters/np_ecn_marked_roce_packets", NONE, 1, MLX5_BNXT,
        "ECN-marked RoCE packets received by the notification point."),
    // ---- hw_counters/ (bnxt_re). Newer kernels renamed most of these to the mlx5 names
    // above (out_of_buffer, rp_cnp_handled, np_ecn_marked_roce_packets, rx_*_requests);
    // older ones use the names below, and np_cnp_pkts stays bnxt's own.
    entry!(names::PORT_CNP_SENT, "{packet}", Counter, "hw_counters/np_cnp_pkts", NONE, 1, BNXT,
        "CNPs sent by the notification point (bnxt_re)."),
    entry!(names::PORT_CNP_SENT, "{packet}", Counter, "hw_counters/tx_cnp_pkts", NONE, 1, BNXT,
        "CNPs sent (bnxt_re, older kernels)."),
    entry!(names::PORT_CNP_HANDLED, "{packet}", Counter, "hw_counters/rx_cnp_pkts", NONE, 1, BNXT,
        "CNPs received and handled (bnxt_re, older kernels)."),
    entry!(names::PORT_ECN_MARKED_PACKETS, "{packet}", Counter, "hw_counters/rx_ecn_marked_pkts", NONE, 1, BNXT,
        "ECN-marked RoCE packets received (bnxt_re, older kernels)."),
    entry!(names::PORT_OUT_OF_BUFFER, "{packet}", Counter, "hw_counters/rx_out_of_buffer", NONE, 1, BNXT,
        "Packets dropped for lack of receive buffer (bnxt_re, older kernels)."),
    entry!(names::PORT_RECEIVED_REQUESTS, "{request}", Counter, "hw_counters/rx_read_req", &[(ATTR_OPERATION, "read")], 1, BNXT,
        "RDMA read requests received (bnxt_re, older kernels)."),
    entry!(names::PORT_RECEIVED_REQUESTS, "{request}", Counter, "hw_counters/rx_write_req", &[(ATTR_OPERATION, "write")], 1, BNXT,
        "RDMA write requests received (bnxt_re, older kernels)."),
    entry!(names::PORT_RECEIVED_REQUESTS, "{request}", Counter, "hw_counters/rx_atomic_req", &[(ATTR_OPERATION, "atomic")], 1, BNXT,
        "Atomic requests received (bnxt_re, older kernels)."),
    // ---- hw_counters/ (efa, and bnxt_re's own traffic counters). When a device also has
    // counters/, the counters/ series wins and these are not read twice.
    entry!(names::PORT_IO, "By", Counter, "hw_counters/tx_bytes", TX, 1, EFA_BNXT,
        "Bytes transmitted (driver counter, already in bytes)."),
    entry!(names::PORT_IO, "By", Counter, "hw_counters/rx_bytes", RX, 1, EFA_BNXT,
        "Bytes received (driver counter, already in bytes)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "hw_counters/tx_pkts", TX, 1, EFA_BNXT,
        "Packets transmitted (driver counter)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "hw_counters/rx_pkts", RX, 1, EFA_BNXT,
        "Packets received (driver counter)."),
    entry!(names::PORT_DROPS, "{packet}", Counter, "hw_counters/rx_drops", RX, 1, EFA_BNXT,
        "Received packets dropped by the device."),
    entry!(names::PORT_RETRANSMISSIONS_PACKETS, "{packet}", Counter, "hw_counters/retrans_pkts", NONE, 1, EFA,
        "Packets retransmitted."),
    entry!(names::PORT_RETRANSMISSIONS_IO, "By", Counter, "hw_counters/retrans_bytes", NONE, 1, EFA,
        "Bytes retransmitted."),
    entry!(names::PORT_RETRANSMISSIONS_TIMEOUTS, "{event}", Counter, "hw_counters/retrans_timeout_events", NONE, 1, EFA,
        "Retransmission timeouts."),
    entry!(names::PORT_UNRESPONSIVE_REMOTE, "{event}", Counter, "hw_counters/unresponsive_remote_events", NONE, 1, EFA,
        "Times a remote peer stopped responding."),
    entry!(names::PORT_IMPAIRED_REMOTE_CONNECTIONS, "{event}", Counter, "hw_counters/impaired_remote_conn_events", NONE, 1, EFA,
        "Times a connection to a remote peer was impaired."),
    // ---- hw_counters/ (irdma: Intel E810 RoCEv2 and X722 iWARP; names from the driver's
    // irdma_hw_stat_names table; no counters/ directory). The IP-level counters come per
    // IP version; the two series of a direction add up to the port's traffic.
    entry!(names::PORT_CNP_SENT, "{packet}", Counter, "hw_counters/cnpSent", NONE, 1, IRDMA,
        "CNPs sent by the notification point (irdma)."),
    entry!(names::PORT_CNP_HANDLED, "{packet}", Counter, "hw_counters/cnpHandled", NONE, 1, IRDMA,
        "CNPs handled by the reaction point (irdma)."),
    entry!(names::PORT_CNP_IGNORED, "{packet}", Counter, "hw_counters/cnpIgnored", NONE, 1, IRDMA,
        "CNPs received and ignored by the reaction point (irdma)."),
    entry!(names::PORT_ECN_MARKED_PACKETS, "{packet}", Counter, "hw_counters/RxECNMrkd", NONE, 1, IRDMA,
        "ECN-marked packets received (irdma)."),
    entry!(names::PORT_IO, "By", Counter, "hw_counters/ip4OutOctets", TX_V4, 1, IRDMA,
        "IPv4 octets transmitted by the RDMA engine (irdma)."),
    entry!(names::PORT_IO, "By", Counter, "hw_counters/ip4InOctets", RX_V4, 1, IRDMA,
        "IPv4 octets received by the RDMA engine (irdma)."),
    entry!(names::PORT_IO, "By", Counter, "hw_counters/ip6OutOctets", TX_V6, 1, IRDMA,
        "IPv6 octets transmitted by the RDMA engine (irdma)."),
    entry!(names::PORT_IO, "By", Counter, "hw_counters/ip6InOctets", RX_V6, 1, IRDMA,
        "IPv6 octets received by the RDMA engine (irdma)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "hw_counters/ip4OutPkts", TX_V4, 1, IRDMA,
        "IPv4 packets transmitted by the RDMA engine (irdma)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "hw_counters/ip4InPkts", RX_V4, 1, IRDMA,
        "IPv4 packets received by the RDMA engine (irdma)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "hw_counters/ip6OutPkts", TX_V6, 1, IRDMA,
        "IPv6 packets transmitted by the RDMA engine (irdma)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "hw_counters/ip6InPkts", RX_V6, 1, IRDMA,
        "IPv6 packets received by the RDMA engine (irdma)."),
    entry!(names::PORT_DROPS, "{packet}", Counter, "hw_counters/ip4InDiscards", RX_V4, 1, IRDMA,
        "Received IPv4 packets discarded by the RDMA engine (irdma)."),
    entry!(names::PORT_DROPS, "{packet}", Counter, "hw_counters/ip6InDiscards", RX_V6, 1, IRDMA,
        "Received IPv6 packets discarded by the RDMA engine (irdma)."),
    entry!(names::PORT_UDP_PACKETS, "{packet}", Counter, "hw_counters/TxUDP", TX, 1, IRDMA,
        "UDP packets transmitted by the RDMA engine (irdma; RoCEv2 is UDP)."),
    entry!(names::PORT_UDP_PACKETS, "{packet}", Counter, "hw_counters/RxUDP", RX, 1, IRDMA,
        "UDP packets received by the RDMA engine (irdma; RoCEv2 is UDP)."),
    entry!(names::PORT_RETRANSMISSIONS_PACKETS, "{packet}", Counter, "hw_counters/tcpRetransSegs", NONE, 1, IRDMA,
        "TCP segments retransmitted (irdma in iWARP mode)."),
    // ---- hw_counters/ (rxe: soft-RoCE has no counters/ directory)
    entry!(names::PORT_PACKETS, "{packet}", Counter, "hw_counters/sent_pkts", TX, 1, RXE,
        "Packets transmitted (soft-RoCE)."),
    entry!(names::PORT_PACKETS, "{packet}", Counter, "hw_counters/rcvd_pkts", RX, 1, RXE,
        "Packets received (soft-RoCE)."),
    entry!(names::PORT_OPERATIONS, "{operation}", Counter, "hw_counters/rdma_sends", &[(ATTR_OPERATION, "send")], 1, RXE,
        "RDMA send operations (soft-RoCE)."),
    entry!(names::PORT_OPERATIONS, "{operation}", Counter, "hw_counters/rdma_recvs", &[(ATTR_OPERATION, "recv")], 1, RXE,
        "RDMA receive operations (soft-RoCE)."),
    entry!(names::PORT_OUT_OF_SEQUENCE, "{packet}", Counter, "hw_counters/out_of_seq_request", NONE, 1, RXE,
        "Out-of-sequence requests received (soft-RoCE)."),
    entry!(names::PORT_LINK_DOWNED, "{event}", Counter, "hw_counters/link_downed", NONE, 1, RXE,
        "Times the link went down (soft-RoCE)."),
    entry!(names::PORT_ACK_DEFERRED, "{event}", Counter, "hw_counters/ack_deferred", NONE, 1, RXE,
        "ACKs deferred by the responder (soft-RoCE)."),
    entry!(names::PORT_RETRY_ERRORS, "{event}", Counter, "hw_counters/completer_retry_err", &[(ATTR_CAUSE, "completer_retry")], 1, RXE,
        "Completer retries (soft-RoCE)."),
    entry!(names::PORT_RETRY_ERRORS, "{event}", Counter, "hw_counters/retry_exceeded_err", &[(ATTR_CAUSE, "retry_exceeded")], 1, RXE,
        "Retry count exceeded (soft-RoCE)."),
    entry!(names::PORT_RETRY_ERRORS, "{event}", Counter, "hw_counters/retry_rnr_exceeded_err", &[(ATTR_CAUSE, "rnr_retry_exceeded")], 1, RXE,
        "RNR retry count exceeded (soft-RoCE)."),
    entry!(names::PORT_RNR_ERRORS, "{event}", Counter, "hw_counters/rcvd_rnr_err", RX, 1, RXE,
        "RNR NAKs received (soft-RoCE)."),
    entry!(names::PORT_RNR_ERRORS, "{event}", Counter, "hw_counters/send_rnr_err", TX, 1, RXE,
        "RNR NAKs sent (soft-RoCE)."),
    entry!(names::PORT_SEQUENCE_ERRORS, "{event}", Counter, "hw_counters/rcvd_seq_err", NONE, 1, RXE,
        "Sequence errors received (soft-RoCE)."),
    entry!(names::PORT_SEND_ERRORS, "{event}", Counter, "hw_counters/send_err", NONE, 1, RXE,
        "Send errors (soft-RoCE)."),
    // ---- any other hw_counters/ file
    entry!(names::PORT_HW_COUNTER, "1", Counter, "hw_counters/*", NONE, 1, "any driver",
        "A driver-specific hw_counters file without a catalog entry of its own; the file name is in the `rdma.counter` attribute."),
];

/// Files of a counter directory that are not counters.
/// `hw_counters/lifespan` is a setting (how long, in ms, the driver caches the values).
pub const NOT_COUNTERS: &[&str] = &["hw_counters/lifespan"];

/// The agent's own metrics.
pub static SELF_METRICS: &[CatalogEntry] = &[
    entry!(names::ROCEWATCH_PLUGIN_DURATION, "s", Histogram, "agent", NONE, 1, "agent",
        "Duration of plugin calls, by `plugin` and `kind`."),
    entry!(names::ROCEWATCH_PLUGIN_ERRORS, "{error}", Counter, "agent", NONE, 1, "agent",
        "Plugin failures by `plugin` and `reason` (load, abi, insecure, error, panic, timeout, partial, busy, undeclared: a collector emitted a metric it did not declare)."),
    entry!(names::ROCEWATCH_SAMPLES_EMITTED, "{sample}", Counter, "agent", NONE, 1, "agent",
        "Samples produced by collectors, by `plugin`."),
    entry!(names::ROCEWATCH_EXPORTER_ERRORS, "{error}", Counter, "agent", NONE, 1, "agent",
        "Failed exports by `exporter` (otlp, collectd, prometheus)."),
    entry!(names::ROCEWATCH_EXPORTER_DROPPED, "{snapshot}", Counter, "agent", NONE, 1, "agent",
        "Snapshots an exporter dropped, by `exporter` and `reason`: queue_full (the endpoint failed for longer than the queue holds), shutdown (given up at exit, the endpoint unreachable), rejected (the receiver answered a failure the OTLP specification says not to retry), too_large (one request, split as far as it goes, still too large for the receiver), encode (the snapshot could not be encoded). A snapshot sent in several requests counts once."),
    entry!(names::ROCEWATCH_EXPORTER_SENT, "{snapshot}", Counter, "agent", NONE, 1, "agent",
        "Snapshots an exporter delivered, by `exporter`."),
    entry!(names::ROCEWATCH_EXPORTER_REJECTED_POINTS, "{data_point}", Counter, "agent", NONE, 1, "agent",
        "Data points an OTLP receiver accepted the request of but rejected (its `partial_success`), by `exporter`."),
    entry!(names::ROCEWATCH_EVENTS_SENT, "{log_record}", Counter, "agent", NONE, 1, "agent",
        "Events (remediation decisions and results, rule transitions, quarantine changes) delivered as OTLP log records."),
    entry!(names::ROCEWATCH_EVENTS_DROPPED, "{log_record}", Counter, "agent", NONE, 1, "agent",
        "Events not delivered as OTLP log records, by `reason`: queue_full (the endpoint failed for longer than the queue holds, or events came faster than they left), shutdown (given up at exit, the endpoint unreachable), rejected (the receiver answered a failure the OTLP specification says not to retry), too_large (refused as too large even alone), encode (could not be encoded). The audit log keeps the decisions' records either way."),
    entry!(names::ROCEWATCH_ALERTMANAGER_REQUESTS, "{request}", Counter, "agent", NONE, 1, "agent",
        "Alertmanager webhook requests by `result` (accepted, unauthorized, rate_limited, too_large, rejected)."),
    entry!(names::ROCEWATCH_REMEDIATION_DECISIONS, "{decision}", Counter, "agent", NONE, 1, "agent",
        "Remediation decisions by `action` and `decision` (suppressed, dry_run, executing, refused, result; the audit log's fired and cleared name no action and are not counted)."),
    entry!(names::ROCEWATCH_RULE_TRANSITIONS, "{transition}", Counter, "agent", NONE, 1, "agent",
        "Rules firing or clearing, by `rule` and `transition` (firing, cleared)."),
    entry!(names::ROCEWATCH_CONFIG_RELOADS, "{reload}", Counter, "agent", NONE, 1, "agent",
        "Configuration reloads on SIGHUP by `result` (ok; error: the new file was refused and the agent runs on with the old one)."),
    entry!(names::ROCEWATCH_COUNTER_RESETS, "{reset}", Counter, "agent", NONE, 1, "agent",
        "Counters seen going backwards (a reset: a new cumulative series starts; no rate or increase for that interval), by metric `name`."),
    entry!(names::ROCEWATCH_COUNTER_SATURATED, "{series}", Gauge, "agent", NONE, 1, "agent",
        "Series of a counter that stops at its maximum (IB PortCounters) now resting there, by metric `name`: their rate is unknown, not 0, until the counter is cleared (`perfquery -R`)."),
    entry!(names::ROCEWATCH_QUARANTINE, "{quarantine}", Gauge, "agent", NONE, 1, "agent",
        "1 while the host is in quarantine (no jobs until `rocewatch quarantine release` or the recovery policy), with its `reason`, `origin` (`rule:NAME`, `health`, `operator`) and `since` (RFC 3339); 0, without them, when it is not."),
    entry!(names::ROCEWATCH_PROBE_ROUNDS_SKIPPED, "{round}", Counter, "agent", NONE, 1, "agent",
        "Probe rounds a rail was not probed in because its previous call to the probe plugin was still running (a slow or hung NIC; the other rails keep their interval), by `device` (the local port, `mlx5_3:1`) and, with `[fleet]`, `rail`."),
];

/// The entry for a file of a port directory (`counters`, `port_xmit_data`): the first
/// catalogued for that source. A map built once (a scan of the catalog per file was most
/// of the plan's cost at 2000 ports: 104 000 files).
pub fn lookup(group: &str, file: &str) -> Option<&'static CatalogEntry> {
    static BY_SOURCE: std::sync::OnceLock<
        std::collections::HashMap<(&'static str, &'static str), &'static CatalogEntry>,
    > = std::sync::OnceLock::new();
    BY_SOURCE
        .get_or_init(|| {
            let mut m = std::collections::HashMap::new();
            for e in CATALOG {
                if let Some(gf) = e.source.split_once('/') {
                    m.entry(gf).or_insert(e);
                }
            }
            m
        })
        .get(&(group, file))
        .copied()
}

/// The first entry named `name` (for gauges, which have one source each).
pub fn by_name(name: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|e| e.name == name)
}

/// The fallback entry for unknown files of `hw_counters/`.
pub fn unknown_hw_counter() -> &'static CatalogEntry {
    CATALOG
        .iter()
        .find(|e| e.source == "hw_counters/*")
        .expect("catalog has the hw_counters/* entry")
}

/// One descriptor per distinct metric name of the port catalog.
pub fn descriptors() -> Vec<MetricDescriptor> {
    descriptors_of(CATALOG)
}

/// Metrics normalized from NIC driver statistics (`ethtool -S`, read with the ethtool
/// ioctls). `source` names the driver statistics per vendor; priority and direction are
/// attributes (`rdma.priority`, `network.io.direction`).
pub static ETHTOOL_CATALOG: &[CatalogEntry] = &[
    entry!(names::PFC_PAUSE_FRAMES, "{frame}", Counter, "mlx5 rx|tx_prio<N>_pause; ice rx|tx_priority_<N>_xoff.nic; bnxt rx|tx_pfc_ena_frames_pri<N>", NONE, 1, "mlx5, ice, bnxt",
        "PFC pause (XOFF) frames per priority: received means the peer asked this port to stop sending on that priority."),
    entry!(names::PFC_PAUSE_DURATION, "us", Counter, "mlx5 rx|tx_prio<N>_pause_duration; bnxt pfc_pri<N>_rx|tx_duration_us", NONE, 1, "mlx5, bnxt",
        "Time a priority spent paused, in microseconds; its rate is the fraction of time paused (pause ratio)."),
    entry!(names::PFC_PAUSE_TRANSITIONS, "{transition}", Counter, "mlx5 rx_prio<N>_pause_transition; bnxt pfc_pri<N>_rx|tx_transitions", NONE, 1, "mlx5, bnxt",
        "Pause episodes of a priority (transitions between paused and running)."),
    entry!(names::PFC_RESUME_FRAMES, "{frame}", Counter, "ice rx|tx_priority_<N>_xon.nic", NONE, 1, "ice",
        "PFC resume (XON) frames per priority."),
    entry!(names::PFC_STORM_EVENTS, "{event}", Counter, "mlx5 tx_pause_storm_warning_events, tx_pause_storm_error_events", NONE, 1, "mlx5",
        "Pause-storm prevention events (`rdma.severity` warning: the port kept sending pauses for long; error: the NIC stopped sending pauses, and packets may have been dropped)."),
    entry!(names::PRIORITY_IO, "By", Counter, "mlx5 rx|tx_prio<N>_bytes; bnxt rx|tx_bytes_pri<N>", NONE, 1, "mlx5, bnxt",
        "Bytes per priority."),
    entry!(names::PRIORITY_PACKETS, "{packet}", Counter, "mlx5 rx|tx_prio<N>_packets; bnxt rx|tx_packets_pri<N>", NONE, 1, "mlx5, bnxt",
        "Packets per priority."),
    entry!(names::PRIORITY_DISCARDS, "{packet}", Counter, "mlx5 rx_prio<N>_discards, rx_prio<N>_buf_discard", NONE, 1, "mlx5",
        "Packets of a priority discarded (`rx_prio<N>_buf_discard`, for lack of a host receive buffer, with `rdma.discard.cause=buffer`)."),
    entry!(names::LINK_PAUSE_FRAMES, "{frame}", Counter, "mlx5 rx|tx_pause_ctrl_phy; ice link_xoff_rx|tx.nic; bnxt rx|tx_pause_frames", NONE, 1, "mlx5, ice, bnxt",
        "802.3x (global) pause frames at the physical port: they stop every priority, and a RoCE port should send none (PFC pauses one priority)."),
    entry!(names::LINK_PAUSE_DURATION, "us", Counter, "mlx5 rx|tx_global_pause_duration", NONE, 1, "mlx5",
        "Time the port spent paused by 802.3x pause, in microseconds (transmit: this port paused its peer; mlx5 reports it only while 802.3x pause is on)."),
    entry!(names::LINK_PAUSE_TRANSITIONS, "{transition}", Counter, "mlx5 rx_global_pause_transition", NONE, 1, "mlx5",
        "802.3x pause episodes of the port (XOFF to XON transitions received)."),
    entry!(names::LINK_RESUME_FRAMES, "{frame}", Counter, "ice link_xon_rx|tx.nic", NONE, 1, "ice",
        "802.3x resume (XON) frames."),
    entry!(names::LINK_DISCARDS, "{packet}", Counter, "mlx5 rx|tx_discards_phy", NONE, 1, "mlx5",
        "Packets discarded at the physical port (receive: no buffer, usually congestion)."),
    entry!(names::NETDEV_OUT_OF_BUFFER, "{packet}", Counter, "mlx5 rx_out_of_buffer", NONE, 1, "mlx5",
        "Packets dropped because no receive buffer was posted."),
    entry!(names::LINK_CRC_ERRORS, "{packet}", Counter, "mlx5 rx_crc_errors_phy", NONE, 1, "mlx5",
        "Frames received with a bad CRC (cabling, optics)."),
    entry!(names::LINK_SYMBOL_ERRORS, "{error}", Counter, "mlx5 rx_symbol_err_phy", NONE, 1, "mlx5",
        "Physical symbol errors."),
    entry!(names::LINK_CORRECTED_BITS, "{bit}", Counter, "mlx5 rx_corrected_bits_phy", NONE, 1, "mlx5",
        "Bits corrected by FEC (a rising rate announces uncorrectable errors)."),
    entry!(names::LINK_DOWN_EVENTS, "{event}", Counter, "mlx5 link_down_events_phy", NONE, 1, "mlx5",
        "Times the physical link went down."),
    entry!(names::LINK_RECEIVED_BITS, "{bit}", Counter, "mlx5 rx_bits_phy", NONE, 1, "mlx5 (newer kernels)",
        "Bits the PHY received: with `rdma.link.corrected_bits` the pre-FEC bit error rate (corrected bits / received bits)."),
    entry!(names::LINK_PCS_SYMBOL_ERRORS, "{error}", Counter, "mlx5 rx_pcs_symbol_err_phy", NONE, 1, "mlx5",
        "Symbol errors FEC did not correct (PCS level): errors that reach the frames."),
    entry!(names::NETDEV_DRIVER_STAT, "1", Counter, "any statistic matching options.raw_include", NONE, 1, "any driver",
        "Raw passthrough of driver statistics without a normalized metric (opt-in); the name is in `rdma.driver_stat`."),
];

/// The ethtool entry of `name`.
pub fn ethtool_entry(name: &str) -> Option<&'static CatalogEntry> {
    ETHTOOL_CATALOG.iter().find(|e| e.name == name)
}

/// Descriptors of the ethtool collector.
pub fn ethtool_descriptors() -> Vec<MetricDescriptor> {
    descriptors_of(ETHTOOL_CATALOG)
}

/// Attribute naming the pattern a kernel message matched (`cmd_timeout`).
pub const ATTR_KERNEL_PATTERN: &str = "rdma.kernel.pattern";

/// The kernel-log collector's metric.
pub static KERNEL_LOG_CATALOG: &[CatalogEntry] = &[CatalogEntry {
    name: names::KERNEL_EVENTS,
    unit: "{message}",
    kind: MetricKind::Counter,
    source: "/dev/kmsg (records of the RDMA/NIC drivers matching a pattern)",
    attributes: &[],
    scale: 1,
    seen_on: "mlx5, any driver whose messages name a PCI function",
    description: "Kernel log messages of the RDMA/NIC drivers matching a pattern since the agent started, by `rdma.kernel.pattern` and `rdma.device` (the RDMA device of the PCI function or netdev the message names, else the PCI address, else empty).",
}];

/// The CPU mode of `system.cpu.time` (OpenTelemetry's `cpu.mode`: `steal`).
pub const ATTR_CPU_MODE: &str = "cpu.mode";

/// The host collector's metrics: the CPU time the hypervisor took from this host, under
/// OpenTelemetry's own name for it (the semantic conventions' `system.cpu.time`, a counter
/// in seconds with `cpu.mode`), so a backend that knows host metrics knows this one.
pub static HOST_CATALOG: &[CatalogEntry] = &[CatalogEntry {
    name: names::SYSTEM_CPU_TIME,
    unit: "s",
    kind: MetricKind::Counter,
    source: "<procfs>/stat, the aggregate cpu line's 8th time (steal; fs/proc/stat.c), user hertz / 100",
    attributes: &[(ATTR_CPU_MODE, "steal")],
    scale: 1,
    seen_on: "any Linux guest whose hypervisor reports steal (KVM, Xen, Hyper-V); 0 on bare metal",
    description: "CPU time stolen from this host by the hypervisor since boot, summed over its CPUs, with `cpu.mode` = `steal` (no `cpu.logical_number`: all CPUs). Its rate over the number of CPUs is the share stolen: above 10 % late probes are the host's, not the network's.",
}];

macro_rules! resource {
    ($name:expr, $unit:expr, $kind:ident, $desc:expr) => {
        CatalogEntry {
            name: $name,
            unit: $unit,
            kind: rocewatch_plugin_api::MetricKind::$kind,
            source: "RDMA netlink (RDMA_NLDEV_CMD_RES_*_GET, STAT_GET), /proc/<pid>/cgroup",
            attributes: &[],
            scale: 1,
            seen_on: "every RDMA driver with resource tracking (mlx5, irdma, bnxt_re, rxe)",
            description: $desc,
        }
    };
}

/// The resources collector's metrics (the workload attributes: `crate::resources`).
pub static RESOURCE_CATALOG: &[CatalogEntry] = &[
    resource!(names::RESOURCE_QPS, "{qp}", Gauge,
        "Queue pairs per `rdma.device`, `rdma.port` (absent for a QP not bound to a port yet), `rdma.qp.state` (RESET, INIT, RTR, RTS, SQD, SQE, ERR, as `rdma resource show qp` prints them: a QP in ERR moves no data) and workload (`rdma.workload`, `rdma.workload.kind`, and `k8s.pod.uid`/`container.id`, `slurm.job.id`/`slurm.step.id`, `systemd.unit` or `process.command`; `rdma.workload.cgroup`, the path of a pod's, job's or unit's own cgroup)."),
    resource!(names::RESOURCE_CQS, "{cq}", Gauge,
        "Completion queues per `rdma.device` and workload."),
    resource!(names::RESOURCE_MRS, "{mr}", Gauge,
        "Memory regions per `rdma.device` and workload."),
    resource!(names::RESOURCE_MR_BYTES, "By", Gauge,
        "Bytes registered in memory regions per `rdma.device` and workload."),
    resource!(names::RESOURCE_PDS, "{pd}", Gauge,
        "Protection domains per `rdma.device` and workload."),
    resource!(names::RESOURCE_WORKLOADS, "{workload}", Gauge,
        "Workloads holding RDMA resources on the host, by `rdma.workload.state`: `reported` (a series of their own) or `folded` (beyond `max_workloads`, summed into `rdma.workload=\"other\"`)."),
    resource!(names::WORKLOAD_COUNTER, "{event}", Counter,
        "Per-QP hw counters (opt-in: `qp_counters = true` binds a counter per process, `rdma statistic qp set link DEV/PORT auto type,pid on`) summed per `rdma.device`, `rdma.port`, workload and `rdma.counter` (the driver's counter name: `out_of_sequence`, `np_cnp_sent`, `roce_adp_retrans`...)."),
];

/// Verbs probe results, per peer (`rdma.probe.peer`; a peer probed through the RDMA
/// connection manager also `rdma.probe.mode = "cm"`), emitted by the agent's prober.
pub static PROBE_CATALOG: &[CatalogEntry] = &[
    entry!(names::PROBE_SENT, "{probe}", Counter, "prober", NONE, 1, "probe-verbs plugin",
        "Probes sent to the peer; those through the RDMA connection manager (`[probes] mode = \"cm\"`, a peer listed `cm:ADDRESS`) carry `rdma.probe.mode = \"cm\"`."),
    entry!(names::PROBE_RECEIVED, "{probe}", Counter, "prober", NONE, 1, "probe-verbs plugin",
        "Probes answered by the peer within the timeout."),
    entry!(names::PROBE_TIMEOUTS, "{probe}", Counter, "prober", NONE, 1, "probe-verbs plugin",
        "Probes without an answer within the timeout."),
    entry!(names::PROBE_FAILURES, "{probe}", Counter, "prober", NONE, 1, "probe-verbs plugin",
        "Probes that could not be sent, by `rdma.probe.cause` (address_resolution, route, rejected, qp_error, plugin; through the RDMA CM: address, route, unreachable, rejected, connection_error, broken, qp)."),
    entry!(names::PROBE_RTT, "s", Histogram, "prober", NONE, 1, "probe-verbs plugin",
        "Round-trip times of the answered probes (buckets: `[probes] rtt_buckets`); OTLP histogram, Prometheus histogram."),
    entry!(names::PROBE_RTT_LAST, "s", Gauge, "prober", NONE, 1, "probe-verbs plugin",
        "Round-trip time of the last answered probe (for rules: the histogram is not a series they read)."),
    entry!(names::PROBE_PEERS, "{peer}", Gauge, "prober", NONE, 1, "prober",
        "Peers listed, by `rdma.probe.state`: `probed`, `over_limit` (beyond `[probes] max_peers`, not probed), or with `[fleet]` `other_rail` (pinglist peers of rails whose address is on no RoCE port of this host, or not on `probes.device` where one is set: not probed)."),
    entry!(names::PROBE_INTERVAL, "s", Gauge, "prober", NONE, 1, "prober",
        "Time between two probes of the same peer in effect: `[probes] interval`, stretched when the peers at that interval would exceed `max_rate`."),
];

/// Fleet probing (`[fleet]`): bounded per host, never a series per healthy pair. The
/// attributes are plain (`host`, `tor`...) so that rules on the backend join them as
/// they are.
pub static FLEET_CATALOG: &[CatalogEntry] = &[
    entry!(names::PROBE_FLEET_RESULTS, "{probe}", Counter, "prober", NONE, 1, "probe-verbs plugin",
        "Probes of the fleet pinglist by `host`, `rail`, `device` (the local RDMA port the rail is probed from, `mlx5_3:1`), `class` (`same_tor`, `cross_tor`), `path` (the flow's index) and `outcome`: `ok`, `timeout`, `failed` (no connection to the peer, or the queue pair failed in flight), `host_overloaded` (a timeout while this host was overloaded) and `local_error` (this host could not probe: the plugin, a queue pair, a local address); the last two are not network loss."),
    entry!(names::PROBE_FLEET_RTT, "s", Histogram, "prober", NONE, 1, "probe-verbs plugin",
        "Round-trip times of the fleet pinglist's answered probes, by `host`, `rail`, `device` and `class`."),
    entry!(names::PROBE_FLEET_FAILING, "1", Gauge, "prober", NONE, 1, "probe-verbs plugin",
        "Share of a flow's probes lost over `[fleet] failing_window`, only while it loses some, the worst `top_failing` flows: `host`, `tor`, `rail`, `device`, `class`, `peer` (address), `peer_host`, `peer_tor`, `path`."),
    entry!(names::FLEET_NIC_INFO, "{nic}", Gauge, "fleet", NONE, 1, "[fleet]",
        "Always 1: where each of this host's NICs hangs, `host`, `rail`, `address`, `tor`, `tor_port` (from LLDP or the topology file); the fleet's map for `[fleet] source = \"prometheus\"`."),
];

/// The RoCE/PFC/ECN configuration, read by the configuration plugins every `[qos]
/// interval` (gauges of the pseudo-plugin `qos`).
pub static QOS_CATALOG: &[CatalogEntry] = &[
    entry!(names::QOS_SETTING, "{setting}", Gauge, "configuration plugins (qos-linux)", NONE, 1, PORT,
        "Always 1: one series per port and setting (`rdma.qos.setting`), its effective value in `rdma.qos.value` (`unsupported` where the device lacks it, `unknown` where it could not be read)."),
    entry!(names::QOS_DRIFT, "{setting}", Gauge, "configuration plugins, [[qos.desired]]", NONE, 1, PORT,
        "Per desired setting of a port: 1 when the effective value differs from `[[qos.desired]]`, 0 when it matches (absent where it cannot be compared)."),
    entry!(names::QOS_FINGERPRINT, "{fingerprint}", Gauge, "configuration plugins, discovery", NONE, 1, "every host",
        "Always 1; `rdma.qos.fingerprint` is a digest of every port's effective configuration and every device's driver and firmware: hosts configured alike have the same one (the shipped alert rule finds hosts that differ from the majority)."),
];

/// The PCIe link of a port's PCI function (the RDMA device's `device/` in sysfs,
/// drivers/pci/pci-sysfs.c), read by counters-sysfs once per device and collection and
/// emitted with each port's attributes: a link that retrains narrower or slower caps the
/// port below its rate (`rocewatch doctor` says by how much).
pub static PCIE_CATALOG: &[CatalogEntry] = &[
    // GT/s is not UCUM (T is the tesla): transfers per second, the file's GT/s × 10⁹.
    entry!(names::PCIE_LINK_SPEED, "{transfer}/s", Gauge, "device/current_link_speed", NONE, 1_000_000_000, "PCI devices",
        "Transfer rate per lane the PCIe link negotiated, in transfers per second (`16.0 GT/s PCIe` → 1.6e10); absent while the link is down (`Unknown`)."),
    entry!(names::PCIE_LINK_WIDTH, "{lane}", Gauge, "device/current_link_width", NONE, 1, "PCI devices",
        "Lanes the PCIe link negotiated."),
    entry!(names::PCIE_LINK_MAX_SPEED, "{transfer}/s", Gauge, "device/max_link_speed", NONE, 1_000_000_000, "PCI devices",
        "Highest transfer rate per lane the function supports, in transfers per second."),
    entry!(names::PCIE_LINK_MAX_WIDTH, "{lane}", Gauge, "device/max_link_width", NONE, 1, "PCI devices",
        "Most lanes the function supports: a width below it is a link trained narrower (slot, riser, bifurcation, a bad lane)."),
];

/// Descriptors of the PCIe link metrics.
pub fn pcie_descriptors() -> Vec<MetricDescriptor> {
    descriptors_of(PCIE_CATALOG)
}

/// The module behind each device's driver (`module/<name>/`, kernel/module/sysfs.c):
/// an info metric, so a query or the fleet rule finds hosts on another driver build.
pub static DRIVER_CATALOG: &[CatalogEntry] = &[
    entry!(names::DRIVER_INFO, "{driver}", Gauge, "module/<name>/version, srcversion, taint", NONE, 1, "every device with a driver module",
        "Always 1, per device: `rdma.driver` (the module: mlx5_core, rdma_rxe), `rdma.driver.version` (its declared version; empty for most of the kernel's own drivers), `rdma.driver.srcversion` (the digest of its sources) and `rdma.driver.origin` (`in-tree`: the distribution kernel's; `out-of-tree`: a vendor package such as MLNX_OFED, or DKMS)."),
];

/// The driver module's name on `rdma.driver.info`.
pub const ATTR_DRIVER: &str = "rdma.driver";
/// The module's declared version on `rdma.driver.info` (empty when it declares none).
pub const ATTR_DRIVER_VERSION: &str = "rdma.driver.version";
/// The module's source digest on `rdma.driver.info` (empty when it has none).
pub const ATTR_DRIVER_SRCVERSION: &str = "rdma.driver.srcversion";
/// `in-tree`, `out-of-tree` or `unknown`, on `rdma.driver.info`.
pub const ATTR_DRIVER_ORIGIN: &str = "rdma.driver.origin";

/// Descriptors of the driver info metric.
pub fn driver_descriptors() -> Vec<MetricDescriptor> {
    descriptors_of(DRIVER_CATALOG)
}

/// The error counters summed into `rdma.port.error_rate`.
pub const ERROR_COUNTERS: &[&str] = &[
    names::PORT_SYMBOL_ERRORS,
    names::PORT_RECEIVE_ERRORS,
    names::PORT_RECEIVE_REMOTE_PHYSICAL_ERRORS,
    names::PORT_TRANSMIT_DISCARDS,
    names::PORT_LOCAL_LINK_INTEGRITY_ERRORS,
    names::PORT_EXCESSIVE_BUFFER_OVERRUN_ERRORS,
    names::PORT_LINK_DOWNED,
    names::PORT_OUT_OF_BUFFER,
    names::PORT_OUT_OF_SEQUENCE,
    names::PORT_LOCAL_ACK_TIMEOUTS,
    names::PORT_PACKET_SEQUENCE_ERRORS,
    names::PORT_RNR_NAK_RETRY_ERRORS,
    names::PORT_CQE_ERRORS,
    names::PORT_RETRY_ERRORS,
    names::PORT_SEQUENCE_ERRORS,
    names::PORT_SEND_ERRORS,
    names::PORT_DROPS,
    names::PORT_RETRANSMISSIONS_TIMEOUTS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_name_means_same_unit_and_kind() {
        for a in CATALOG {
            for b in CATALOG.iter().filter(|b| b.name == a.name) {
                assert_eq!(
                    (a.unit, a.kind),
                    (b.unit, b.kind),
                    "{} differs between {} and {}",
                    a.name,
                    a.source,
                    b.source
                );
            }
        }
    }

    #[test]
    fn sources_are_unique_and_names_follow_convention() {
        for (i, a) in CATALOG.iter().enumerate() {
            assert!(a.name.starts_with("rdma."), "{}", a.name);
            assert!(!a.name.ends_with("_total"), "{}", a.name);
            assert!(
                CATALOG[i + 1..].iter().all(|b| b.source != a.source),
                "duplicate source {}",
                a.source
            );
        }
        for s in SELF_METRICS {
            assert!(s.name.starts_with("rocewatch."));
        }
    }

    #[test]
    fn error_counters_are_catalogued() {
        for n in ERROR_COUNTERS {
            assert!(
                CATALOG
                    .iter()
                    .any(|e| e.name == *n && e.kind == MetricKind::Counter),
                "{n}"
            );
        }
    }

    #[test]
    fn lookups() {
        let e = lookup("counters", "port_xmit_data").unwrap();
        assert_eq!((e.name, e.scale), ("rdma.port.io", 4));
        assert!(lookup("hw_counters", "lifespan").is_none());
        assert!(lookup("hw_counters", "no_such").is_none());
        assert_eq!(unknown_hw_counter().name, "rdma.port.hw_counter");
    }
}
