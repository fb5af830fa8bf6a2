//! What the rail map's and the NIC verdict's tests share: the fleet topology rows of the
//! eight-rail host (`integration-tests/fixtures/eight-rails/topology.csv`, host gpu001:
//! rail k at 10.0.k.1).

use crate::railmap::RailRow;

/// Rail `k`'s row: 10.0.k.1.
pub fn row(k: usize) -> RailRow {
    RailRow {
        rail: k,
        addr: format!("10.0.{k}.1").parse().expect("an IPv4 address"),
    }
}

/// The eight rows, by rail.
pub fn eight_rows() -> Vec<RailRow> {
    (0..8).map(row).collect()
}
