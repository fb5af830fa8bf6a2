//! The ethtool tunable `pfc-prevention-tout` (PFC storm prevention): its syntax
//! ("auto", "off", milliseconds) and its errors.

use rocewatch_counters_ethtool::ioctl;
use rocewatch_plugin_api::*;

/// "auto", "off" or milliseconds.
pub(crate) fn parse_prevention_timeout(v: &str) -> Result<u16, String> {
    match v {
        "auto" => Ok(ioctl::PFC_PREVENTION_AUTO),
        "off" => Ok(0),
        ms => ms
            .parse::<u16>()
            .ok()
            .filter(|m| *m != ioctl::PFC_PREVENTION_AUTO)
            .ok_or_else(|| format!("{v:?}: \"auto\", \"off\" or milliseconds")),
    }
}

pub(crate) fn prevention_text(v: u16) -> String {
    match v {
        ioctl::PFC_PREVENTION_AUTO => "auto".into(),
        0 => "off".into(),
        ms => ms.to_string(),
    }
}

pub(crate) fn tunable_error(ifname: &str, e: std::io::Error) -> PluginError {
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        PluginError::Unsupported(format!(
            "{ifname}'s driver has no PFC storm-prevention timeout"
        ))
    } else {
        PluginError::failed(format!("{ifname} pfc-prevention-tout: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_syntax() {
        assert_eq!(parse_prevention_timeout("auto").unwrap(), 0xffff);
        assert_eq!(parse_prevention_timeout("off").unwrap(), 0);
        assert_eq!(parse_prevention_timeout("500").unwrap(), 500);
        assert!(parse_prevention_timeout("65535").is_err());
        assert_eq!(prevention_text(0xffff), "auto");
    }
}
