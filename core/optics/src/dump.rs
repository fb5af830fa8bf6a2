//! The dump formats operators paste (being written).
