//! Durations in configuration files: `"10s"`, `"500ms"`, `"2m"` (humantime), with an
//! error that shows how to write one.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub(crate) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {s:?} ({e}); write it like \"10s\", \"500ms\", \"2m\""
        ))
    })
}

pub(crate) fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}
