//! The ethtool enums a link report names, in words: why a link is down (`enum
//! ethtool_link_ext_state` and its substate enums) and the FEC mode in use (the
//! `ETHTOOL_LINK_MODE_FEC_*_BIT` link mode bits `ETHTOOL_A_FEC_ACTIVE` carries). Values and
//! names from `include/uapi/linux/ethtool.h`; the words are the enum names' own.

/// `enum ethtool_link_ext_state`, in order from 0.
const EXT_STATES: &[&str] = &[
    "autoneg",               // ETHTOOL_LINK_EXT_STATE_AUTONEG
    "link training failure", // _LINK_TRAINING_FAILURE
    "link logical mismatch", // _LINK_LOGICAL_MISMATCH
    "bad signal integrity",  // _BAD_SIGNAL_INTEGRITY
    "no cable",              // _NO_CABLE
    "cable issue",           // _CABLE_ISSUE
    "EEPROM issue",          // _EEPROM_ISSUE
    "calibration failure",   // _CALIBRATION_FAILURE
    "power budget exceeded", // _POWER_BUDGET_EXCEEDED
    "overheat",              // _OVERHEAT
    "module",                // _MODULE
];

/// The substates of each state, in order from 1 (`ethtool_link_ext_substate_*`).
fn substates(state: u8) -> &'static [&'static str] {
    match state {
        // enum ethtool_link_ext_substate_autoneg
        0 => &[
            "no partner detected",
            "ack not received",
            "next page exchange failed",
            "no partner detected in force mode",
            "FEC mismatch during override",
            "no highest common denominator",
        ],
        // enum ethtool_link_ext_substate_link_training
        1 => &[
            "KR frame lock not acquired",
            "KR link inhibit timeout",
            "KR link partner did not set receiver ready",
            "remote fault",
        ],
        // enum ethtool_link_ext_substate_link_logical_mismatch
        2 => &[
            "PCS did not acquire block lock",
            "PCS did not acquire AM lock",
            "PCS did not get align status",
            "FC FEC is not locked",
            "RS FEC is not locked",
        ],
        // enum ethtool_link_ext_substate_bad_signal_integrity
        3 => &[
            "large number of physical errors",
            "unsupported rate",
            "serdes reference clock lost",
            "serdes ALOS (loss of signal)",
        ],
        // enum ethtool_link_ext_substate_cable_issue
        5 => &["unsupported cable", "cable test failure"],
        // enum ethtool_link_ext_substate_module
        10 => &["CMIS module not ready"],
        _ => &[],
    }
}

/// Why a link is down, in words; a value this code does not know is said with its number.
pub fn ext_state_name(state: u8) -> String {
    EXT_STATES
        .get(usize::from(state))
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("unknown state {state}"))
}

/// The detail of `state`, in words.
pub fn ext_substate_name(state: u8, substate: u8) -> String {
    usize::from(substate)
        .checked_sub(1)
        .and_then(|i| substates(state).get(i))
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("unknown substate {substate}"))
}

/// The FEC mode in use, from `ETHTOOL_A_FEC_ACTIVE` (a link mode bit number:
/// `ETHTOOL_LINK_MODE_FEC_NONE_BIT` 49, `_RS_BIT` 50, `_BASER_BIT` 51, `_LLRS_BIT` 74).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FecMode {
    /// FEC off.
    Off,
    /// Reed-Solomon (clause 91/108/134: RS(528,514), RS(544,514)).
    Rs,
    /// BASE-R (Firecode, clause 74).
    BaseR,
    /// Low-latency Reed-Solomon.
    Llrs,
    /// A bit this code does not know.
    Other(u32),
}

impl FecMode {
    pub fn from_link_mode_bit(bit: u32) -> Self {
        match bit {
            49 => FecMode::Off,
            50 => FecMode::Rs,
            51 => FecMode::BaseR,
            74 => FecMode::Llrs,
            b => FecMode::Other(b),
        }
    }

    pub fn to_link_mode_bit(self) -> u32 {
        match self {
            FecMode::Off => 49,
            FecMode::Rs => 50,
            FecMode::BaseR => 51,
            FecMode::Llrs => 74,
            FecMode::Other(b) => b,
        }
    }

    /// As `ethtool --show-fec` prints it ("Active FEC encoding: RS").
    pub fn name(self) -> String {
        match self {
            FecMode::Off => "Off".into(),
            FecMode::Rs => "RS".into(),
            FecMode::BaseR => "BaseR".into(),
            FecMode::Llrs => "LLRS".into(),
            FecMode::Other(b) => format!("link mode bit {b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_substates_in_words() {
        assert_eq!(ext_state_name(0), "autoneg");
        assert_eq!(ext_state_name(3), "bad signal integrity");
        assert_eq!(ext_state_name(10), "module");
        assert_eq!(ext_state_name(11), "unknown state 11");
        assert_eq!(ext_substate_name(0, 1), "no partner detected");
        assert_eq!(ext_substate_name(2, 5), "RS FEC is not locked");
        assert_eq!(ext_substate_name(10, 1), "CMIS module not ready");
        assert_eq!(ext_substate_name(4, 1), "unknown substate 1");
        assert_eq!(ext_substate_name(0, 0), "unknown substate 0");
    }

    #[test]
    fn fec_modes_round_trip() {
        for b in [49, 50, 51, 74, 99] {
            assert_eq!(FecMode::from_link_mode_bit(b).to_link_mode_bit(), b);
        }
        assert_eq!(FecMode::from_link_mode_bit(50).name(), "RS");
    }
}
