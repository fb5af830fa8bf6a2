//! What a verdict counts for: the scale every verdict of this module shares, apart so
//! that each verdict's file imports it without importing the others.

/// What a verdict counts for, before each command names it: `health` says ok / warning /
/// unhealthy / unknown / skipped, `doctor` PASS / WARN / FAIL / SKIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Weight {
    /// As it should be.
    Fine,
    /// Worth knowing, not a fault: it does not take a host out of service.
    Note,
    /// A fault: the host must not take jobs until it is fixed.
    Fault,
    /// What the verdict needs could not be read.
    CannotTell,
    /// Nothing of its kind here (a software device, not a PCI Express function).
    NotApplicable,
}
