//! `[doctor]`: what the guide holds a host to where no standard fixes one figure. Read
//! from the same `-c` file as the agent; every key is optional.

use serde::{Deserialize, Deserializer};

/// `[doctor]`
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DoctorConfig {
    /// The pre-FEC bit error rate the `link` check warns above, for every FEC mode and
    /// lane rate. Unset: a tenth of what the port's FEC carries to 1e-12 after it
    /// (5e-6 for RS(528,514) on 25 Gb/s lanes, 2.4e-5 for RS(544,514) on PAM4 lanes; see
    /// docs/OPTICS.md).
    #[serde(default, deserialize_with = "bit_error_rate")]
    pub pre_fec_ber_warn: Option<f64>,
}

/// A bit error rate: above 0, below 1 (refused as it is read, so the key is named by
/// the file's reader).
fn bit_error_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    match v {
        Some(b) if !(b > 0.0 && b < 1.0) => Err(serde::de::Error::custom(format!(
            "{b} is not a bit error rate: between 0 and 1, such as 5e-6"
        ))),
        _ => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(v: &str) -> Result<DoctorConfig, String> {
        serde_json::from_str(&format!("{{\"pre_fec_ber_warn\": {v}}}")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_rate_between_0_and_1_only() {
        assert_eq!(read("5e-6").unwrap().pre_fec_ber_warn, Some(5e-6));
        assert_eq!(read("null").unwrap().pre_fec_ber_warn, None);
        for bad in ["0.0", "-1e-6", "1.0", "2"] {
            let e = read(bad).unwrap_err();
            assert!(e.contains("is not a bit error rate"), "{bad}: {e}");
        }
    }
}
