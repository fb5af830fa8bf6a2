//! What a catalog entry is, and how the tables write one: shared by the catalog's
//! tables (`catalog.rs`) and the derived signals' (`derived.rs`).

use rocewatch_plugin_api::{MetricDescriptor, MetricKind};

/// One metric as read from one kernel source.
#[derive(Debug, Clone, Copy)]
pub struct CatalogEntry {
    /// Metric name (`rdma.port.io`).
    pub name: &'static str,
    /// UCUM unit.
    pub unit: &'static str,
    pub kind: MetricKind,
    /// Kernel source relative to the port directory (`counters/port_xmit_data`); `*`
    /// stands for any file of that directory without an entry of its own.
    pub source: &'static str,
    /// Attributes fixed by the source (direction, operation...).
    pub attributes: &'static [(&'static str, &'static str)],
    /// Multiply the raw value by this to get `unit` (4 for 4-octet data words).
    pub scale: u64,
    /// Which devices expose it.
    pub seen_on: &'static str,
    pub description: &'static str,
}

/// No fixed attribute.
pub(crate) const NONE: &[(&str, &str)] = &[];
/// Seen on every port.
pub(crate) const PORT: &str = "every port";

macro_rules! entry {
    ($name:expr, $unit:expr, $kind:ident, $source:expr, $attrs:expr, $scale:expr, $seen:expr, $desc:expr) => {
        CatalogEntry {
            name: $name,
            unit: $unit,
            kind: rocewatch_plugin_api::MetricKind::$kind,
            source: $source,
            attributes: $attrs,
            scale: $scale,
            seen_on: $seen,
            description: $desc,
        }
    };
}
pub(crate) use entry;

/// One descriptor per distinct metric name of `table`.
pub fn descriptors_of(table: &[CatalogEntry]) -> Vec<MetricDescriptor> {
    let mut out: Vec<MetricDescriptor> = Vec::new();
    for e in table {
        if out.iter().any(|d| d.name == e.name) {
            continue;
        }
        out.push(MetricDescriptor {
            name: e.name.to_string(),
            unit: e.unit.to_string(),
            kind: e.kind,
            description: e.description.to_string(),
        });
    }
    out
}
