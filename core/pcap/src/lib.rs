//! RoCE v2 in packet captures, a pure decoder over bytes: `reader.rs` reads a pcap file
//! record by record (the file header, then one record at a time into one bounded buffer;
//! only regular files are opened), `roce.rs` decodes what RDMA puts on UDP 4791 (BTH,
//! AETH) from those frames and sums a capture up (per opcode, per destination QP, CNPs,
//! ECN-CE, NAKs, PSN gaps and repeats). It reads what it is handed and judges nothing of
//! the host: `rocewatch capture --read`/`--summary` print what it returns.

pub mod reader;
pub mod roce;

pub use reader::{open, open_capture, Frame, PcapError, PcapReader, Truncated, MAX_CAPLEN};
pub use roce::{summarize, Summary, ROCE_PORT};
