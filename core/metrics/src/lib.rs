//! The rocewatch metric catalog: the single source of truth for every metric the agent
//! emits from the kernel, and for its own self-metrics.
//!
//! Layout:
//! - [`catalog`]: the tables ([`CATALOG`] for the ports, one per collector or signal) of
//!   name, unit, kind, kernel source file, fixed attributes, scale and description;
//!   lookups by source file.
//! - [`vf`]: the SR-IOV virtual functions' table (`VF_CATALOG`) and attributes.
//! - [`link_health`]: the link's history (carrier, down reason, FEC) and its module's
//!   diagnostics (`LINK_HEALTH_CATALOG`, `OPTICS_CATALOG`).
//! - [`tables`]: every table in one list ([`TABLES`]), read by [`all_entries`] and the
//!   doc; a new collector's table is one element there.
//! - [`counter`]: what "a counter increased" means (reset, saturation, wrap), for every
//!   reader of counters, and which sources saturate or roll over at which width.
//! - [`kernel_log`]: the kernel log's `rdma.kernel.events` and its default patterns.
//! - [`naming`]: the Prometheus (and collectd) names derived from the catalog.
//! - [`doc`]: renders `docs/METRICS.md` from the tables (a test in this crate fails when
//!   the committed file differs; regenerate with `rocewatch metrics-doc > docs/METRICS.md`
//!   or `SNAPSHOTS=overwrite cargo test -p rocewatch-metrics`).
//!
//! Naming: `rdma.<object>.<measure>`; direction, operation, device and port are
//! attributes; no `_total` suffix (OTLP); counters are cumulative and monotonic; agent
//! self-metrics live under `rocewatch.*`.

pub mod catalog;
pub mod counter;
pub mod derived;
pub mod doc;
pub mod entry;
pub mod kernel_log;
pub mod labels;
pub mod link_health;
pub mod names;
pub mod naming;
pub mod resources;
pub mod tables;
pub mod vf;

pub use catalog::*;
pub use derived::*;
pub use kernel_log::*;
pub use link_health::*;
pub use resources::*;
pub use tables::{all_entries, kind_of, TABLES};
pub use vf::*;
