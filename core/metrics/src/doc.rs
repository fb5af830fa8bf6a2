//! Renders `docs/METRICS.md` from the catalog.

use std::fmt::Write;

use crate::catalog::{CatalogEntry, CATALOG, NOT_COUNTERS, SELF_METRICS};

fn attrs(e: &CatalogEntry) -> String {
    let mut s = String::from("`rdma.device`, `rdma.port`, `network.interface.name`");
    if e.name == "rdma.port.hw_counter" {
        s.push_str(", `rdma.counter`");
    }
    for (k, v) in e.attributes {
        let _ = write!(s, ", `{k}={v}`");
    }
    s
}

/// The whole reference, as committed in `docs/METRICS.md`.
pub fn render_markdown() -> String {
    let mut md = String::new();
    md.push_str("# rocewatch metrics\n\n");
    md.push_str("<!-- Generated from core/metrics/src/catalog.rs by `rocewatch metrics-doc`. Do not edit by hand. -->\n\n");
    md.push_str("Every sample carries `rdma.device` and `rdma.port`, and `network.interface.name` when the port has a netdev. ");
    md.push_str("Counters are cumulative and monotonic; a counter seen going backwards is a reset and starts a new series. ");
    md.push_str("A value the kernel does not expose (`N/A (no PMA)`, EINVAL, EACCES, EOPNOTSUPP, missing file) is absent, never zero.\n\n");
    md.push_str("## Port metrics\n\n");
    md.push_str("| name | unit | kind | source | attributes | seen on | description |\n");
    md.push_str("|---|---|---|---|---|---|---|\n");
    for e in CATALOG {
        let scale = if e.scale != 1 {
            format!(" (×{})", e.scale)
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {} | `{}`{} | {} | {} | {} |",
            e.name,
            e.unit,
            e.kind.as_str(),
            e.source,
            scale,
            attrs(e),
            e.seen_on,
            e.description
        );
    }
    md.push_str("\n## Files that are not counters\n\n");
    for f in NOT_COUNTERS {
        let _ = writeln!(
            md,
            "- `{f}`: a setting, not a counter; not exported as a counter."
        );
    }
    md.push_str("\n## Agent self-metrics\n\n");
    md.push_str("| name | unit | kind | description |\n|---|---|---|---|\n");
    for e in SELF_METRICS {
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {} | {} |",
            e.name,
            e.unit,
            e.kind.as_str(),
            e.description
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/METRICS.md must be what the catalog renders. Regenerate with
    /// `SNAPSHOTS=overwrite cargo test -p rocewatch-metrics`.
    #[test]
    fn committed_metrics_doc_matches_catalog() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/METRICS.md");
        let want = render_markdown();
        if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/METRICS.md differs from the catalog; run `SNAPSHOTS=overwrite cargo test -p rocewatch-metrics`"
        );
    }
}
