//! An operator's hand on the quarantine (`rocewatch quarantine enter` and `release`): this
//! host's file, entered and released with the origin [`OPERATOR`], audited as every
//! change is.

use crate::audit::AuditLog;

use super::file::{Quarantine, QuarantineError, QuarantineFile};

/// The origin of a quarantine entered, or ended, by hand.
pub const OPERATOR: &str = "operator";

/// This host's quarantine file, in the state directory (`crate::audit::state_dir`).
pub fn this_hosts_file() -> QuarantineFile {
    QuarantineFile::in_dir(&crate::audit::state_dir())
}

/// Into quarantine by hand for `reason`: the quarantine entered, or `None` when one is
/// already in force (kept as it is).
pub fn enter(
    file: &QuarantineFile,
    reason: &str,
    audit: &AuditLog,
) -> Result<Option<Quarantine>, QuarantineError> {
    let q = Quarantine::now(reason, OPERATOR, Default::default());
    Ok(file.enter(&q, audit)?.then_some(q))
}

/// Out of quarantine by hand for `reason`: the quarantine ended, or `None` when there
/// was none.
pub fn release(
    file: &QuarantineFile,
    reason: &str,
    audit: &AuditLog,
) -> Result<Option<Quarantine>, QuarantineError> {
    file.release(reason, OPERATOR, audit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: entered once with the operator as origin, a second entry keeps the first,
    /// a release ends it and a second release finds none.
    #[test]
    fn an_operator_enters_once_and_releases_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = QuarantineFile::in_dir(dir.path());
        let audit = AuditLog::new(dir.path().join("audit.jsonl"));
        let q = enter(&file, "cable\nswap", &audit).unwrap().unwrap();
        assert_eq!(
            (q.origin.as_str(), q.reason.as_str()),
            (OPERATOR, "cable swap")
        );
        assert_eq!(enter(&file, "again", &audit).unwrap(), None);
        assert_eq!(file.read().unwrap(), Some(q.clone()));
        assert_eq!(release(&file, "swapped", &audit).unwrap(), Some(q));
        assert_eq!(release(&file, "swapped", &audit).unwrap(), None);
        assert_eq!(file.read().unwrap(), None);
    }
}
