//! Why a module could not be decoded at all.

/// Why a module could not be decoded at all (a partial decode is a [`crate::Module`] with
/// [`crate::Problem`]s instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than the lower page.
    #[error("{len} bytes: a module's memory is at least 128 bytes (the lower page)")]
    TooShort { len: usize },
    /// An identifier byte no decoder knows (SFF-8024 table 4-1).
    #[error("identifier byte 0x{code:02x} is not an SFP, QSFP or CMIS module")]
    UnknownIdentifier { code: u8 },
}
