//! The ethtool tunable `pfc-prevention-tout` (PFC storm prevention): its syntax
//! ("auto", "off", milliseconds), reading and setting it, and its errors.

use rocewatch_ethtool::{self as ioctl, EthtoolSocket};
use rocewatch_plugin_api::*;

use crate::attr::{outcome, value};

/// "auto", "off" or milliseconds.
fn parse_prevention_timeout(v: &str) -> Result<u16, String> {
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

fn prevention_text(v: u16) -> String {
    match v {
        ioctl::PFC_PREVENTION_AUTO => "auto".into(),
        0 => "off".into(),
        ms => ms.to_string(),
    }
}

fn tunable_error(ifname: &str, e: std::io::Error) -> PluginError {
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        PluginError::Unsupported(format!(
            "{ifname}'s driver has no PFC storm-prevention timeout"
        ))
    } else {
        PluginError::failed(format!("{ifname} pfc-prevention-tout: {e}"))
    }
}

/// `pfc_prevention_timeout` of `ifname`, read with the ethtool socket (the live kernel
/// only: else `ethtool` says why not).
pub(crate) fn prevention_timeout_setting(
    ethtool: Option<&Result<EthtoolSocket, String>>,
    ifname: &str,
) -> Setting {
    match ethtool {
        Some(Ok(eth)) => match eth.get_tunable_u16(ifname, ioctl::TUNABLE_PFC_PREVENTION_TOUT) {
            Ok(v) => value(prevention_text(v)),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Setting::Unsupported,
            Err(e) => Setting::Unknown(format!("{ifname} pfc-prevention-tout: {e}")),
        },
        Some(Err(why)) => Setting::Unknown(why.clone()),
        None => Setting::Unknown("not started".into()),
    }
}

/// Set `pfc_prevention_timeout` of `ifname`.
pub(crate) fn apply_prevention_timeout(
    ethtool: Option<&Result<EthtoolSocket, String>>,
    ifname: &str,
    to: &str,
    dry_run: bool,
) -> Result<ApplyOutcome, PluginError> {
    let Some(Ok(eth)) = ethtool else {
        return Err(PluginError::Unsupported(
            "the PFC storm-prevention timeout is an ethtool tunable of the live kernel".into(),
        ));
    };
    let want = parse_prevention_timeout(to).map_err(PluginError::failed)?;
    let id = ioctl::TUNABLE_PFC_PREVENTION_TOUT;
    let previous = eth
        .get_tunable_u16(ifname, id)
        .map_err(|e| tunable_error(ifname, e))?;
    if dry_run {
        return Ok(outcome(
            false,
            format!(
                "would set {ifname}'s pfc-prevention-tout to {to} (now {})",
                prevention_text(previous)
            ),
            Some(prevention_text(previous)),
        ));
    }
    eth.set_tunable_u16(ifname, id, want)
        .map_err(|e| tunable_error(ifname, e))?;
    Ok(outcome(
        true,
        format!(
            "{ifname} pfc-prevention-tout {} -> {to}",
            prevention_text(previous)
        ),
        Some(prevention_text(previous)),
    ))
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
