//! How high a link's pre-FEC bit error rate may go before doctor's `link` check warns, by
//! the FEC the port runs (`rdma.link.fec.mode`, ethtool's `ETHTOOL_A_FEC_ACTIVE`) and its
//! lane rate (the port's `rate`, `100 Gb/sec (2X HDR)`: 50 Gb/s a lane).
//!
//! What each FEC carries. The target after FEC is the Ethernet BER of 1e-12. IEEE 802.3
//! specifies the PMDs that run each Reed-Solomon code at a pre-FEC BER the code brings
//! under that target, as public sources quote them:
//! - RS(528,514) ("KR4", clause 91; 25 Gb/s NRZ lanes: 25GBASE-R, 100GBASE-CR4/SR4):
//!   100GBASE-SR4 (clause 95) is specified at a BER of 5e-5 (the Q(3.8906) of its
//!   equation 95-1). For random errors the code corrects 7 ten-bit symbols of 528: with
//!   a bit error ratio p a symbol is wrong with 1-(1-p)^10, a codeword fails past 7, and
//!   the bits it leaves wrong (about 8 of 5280) reach 1e-12 at p ≈ 5.3e-5: the same.
//! - RS(544,514) ("KP4", clauses 91 and 134; 50 and 100 Gb/s PAM4 lanes: 50GBASE-R,
//!   100GBASE-CR2/DR, 200G and 400G): 2.4e-4 (clause 136.1 and the PAM4 PMDs of
//!   802.3bs/cd). 15 symbols of 544 corrected gives 3.6e-4 for random errors; the
//!   standard's lower figure leaves room for the bursts of PAM4 equalizers.
//! - RS(272,257+1) ("LLRS", the Ethernet Technology Consortium's low-latency code on
//!   50 Gb/s lanes): no 802.3 figure; 7 symbols of 272 corrected gives 9.4e-5 by the same
//!   reckoning.
//! - BASE-R ("Firecode", clause 74: FC(2112,2080), one burst of up to 11 bits a block):
//!   two random errors in a block of 2112 bits defeat it, so 1e-12 after it is reached at
//!   p ≈ 2.2e-8 (the code is for bursts, not for a noisy line).
//!
//! Doctor warns at a tenth of that limit: for Gaussian noise a tenth of the BER is about
//! 1 dB of electrical Q (Q(3.89) = 5e-5, Q(4.42) = 5e-6), the margin to clean or replace
//! an optic before FEC runs out. Clause 91.5.3.3's error-marking thresholds (417 symbol
//! errors in 8192 codewords for RS(528,514), 6380 for RS(544,514): about 9.6e-6 and
//! 1.4e-4 at one bit a symbol) fall between the warning and the limit for both codes.
//! `[doctor] pre_fec_ber_warn` replaces the figure for every FEC mode.
//!
//! No FEC: nothing is corrected, so there are no corrected bits to judge a margin by.
//! 802.3 has no PAM4 PHY without FEC (every 50 and 100 Gb/s lane runs RS(544,514)), and at
//! 25 Gb/s a lane only short copper (25GBASE-CR-S, clause 110) runs without it. A link of
//! 25 Gb/s lanes or faster with FEC off warns; below that (10 Gb/s lanes) no FEC is
//! normal, and the BER is not judged.

/// The pre-FEC BER the check warns above when the FEC mode and lane rate say nothing
/// (the stricter Reed-Solomon code's): the default rule `pre-fec-ber-high` and the alert
/// `RdmaPreFecBerHigh`, which cannot tell the RS code, hold every RS link to it.
#[cfg(test)]
const DEFAULT_WARN: f64 = KR4.warn;

/// One FEC code: its words and the pre-FEC BER doctor warns above.
struct Code {
    name: &'static str,
    /// What it carries to 1e-12 after it (module doc).
    limit: f64,
    warn: f64,
}

const KR4: Code = Code {
    name: "RS(528,514)",
    limit: 5e-5,
    warn: 5e-6,
};
const KP4: Code = Code {
    name: "RS(544,514)",
    limit: 2.4e-4,
    warn: 2.4e-5,
};
const LLRS: Code = Code {
    name: "RS(272,257+1)",
    limit: 9.4e-5,
    warn: 9e-6,
};
const BASER: Code = Code {
    name: "BASE-R (FC(2112,2080))",
    limit: 2.2e-8,
    warn: 2e-9,
};

/// What a link's pre-FEC BER is held to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BerLimit {
    /// Warn above `warn`; `why` says where the figure comes from.
    Warn { warn: f64, why: String },
    /// FEC is off: no corrected bits to judge by. `warns` when the lanes are 25 Gb/s or
    /// faster (module doc).
    NoFec { why: String, warns: bool },
}

/// `100 Gb/sec (2X HDR)` → 50: the port's rate over its width, as the kernel prints
/// `rate` (drivers/infiniband/core/sysfs.c; mlx5 RoCE ports give the Ethernet link mode's
/// speed and lanes, `translate_eth_ext_proto_oper()` in drivers/infiniband/hw/mlx5/main.c).
pub(crate) fn lane_gbps(rate: &str) -> Option<f64> {
    let total = rocewatch_sysfs::parse::parse_rate_bps(rate)? as f64 / 1e9;
    let width = rate
        .split_once('(')?
        .1
        .split_whitespace()
        .next()?
        .strip_suffix('X')?
        .parse::<u32>()
        .ok()
        .filter(|w| *w > 0)?;
    Some(total / f64::from(width))
}

fn lanes_text(lane: Option<f64>) -> String {
    lane.map_or_else(|| "lane rate unknown".into(), |l| format!("{l} Gb/s lanes"))
}

/// The limit for FEC `mode` (as `rdma.link.fec.mode` names it; `None`: not read) on lanes
/// of `lane` Gb/s, or the operator's `configured` figure.
pub(crate) fn ber_limit(
    mode: Option<&str>,
    lane: Option<f64>,
    configured: Option<f64>,
) -> BerLimit {
    if mode == Some("Off") {
        let fast = lane.is_some_and(|l| l >= 25.0);
        let why = if lane.is_some_and(|l| l >= 50.0) {
            format!("no FEC on {}: 802.3 runs every PAM4 lane with RS(544,514); no corrected bits to judge the error rate by", lanes_text(lane))
        } else if fast {
            format!("no FEC on {}: 802.3 allows it only on short copper (25GBASE-CR-S); no corrected bits to judge the error rate by", lanes_text(lane))
        } else {
            format!(
                "no FEC ({}): no corrected bits to judge the error rate by",
                lanes_text(lane)
            )
        };
        return BerLimit::NoFec { why, warns: fast };
    }
    if let Some(warn) = configured {
        return BerLimit::Warn {
            warn,
            why: "[doctor] pre_fec_ber_warn".into(),
        };
    }
    let (code, note) = match mode {
        Some("RS") => match lane {
            Some(l) if l >= 50.0 => (&KP4, lanes_text(lane)),
            Some(_) => (&KR4, lanes_text(lane)),
            None => (
                &KR4,
                "lane rate unknown, the stricter RS code's".to_string(),
            ),
        },
        Some("LLRS") => (&LLRS, lanes_text(lane)),
        Some("BaseR") => (&BASER, lanes_text(lane)),
        Some(other) => (&KR4, format!("FEC {other} unknown, RS(528,514)'s")),
        None => (&KR4, "FEC mode not read, RS(528,514)'s".to_string()),
    };
    BerLimit::Warn {
        warn: code.warn,
        why: format!(
            "a tenth of the {:.1e} {} carries ({note})",
            code.limit, code.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warn(mode: Option<&str>, lane: Option<f64>) -> f64 {
        match ber_limit(mode, lane, None) {
            BerLimit::Warn { warn, .. } => warn,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lane_rates_as_the_kernel_prints_rate() {
        let cases = [
            ("100 Gb/sec (4X EDR)", Some(25.0)),
            ("100 Gb/sec (2X HDR)", Some(50.0)),
            ("400 Gb/sec (4X NDR)", Some(100.0)),
            ("25 Gb/sec (1X EDR)", Some(25.0)),
            ("40 Gb/sec (4X QDR)", Some(10.0)),
            ("2.5 Gb/sec (1X SDR)", Some(2.5)),
            ("100 Gb/sec", None),
            ("100 Gb/sec (0X EDR)", None),
            ("100 Gb/sec (XX EDR)", None),
            ("", None),
        ];
        for (rate, want) in cases {
            assert_eq!(lane_gbps(rate), want, "{rate}");
        }
    }

    #[test]
    fn the_limit_follows_the_code_the_lanes_run() {
        assert_eq!(warn(Some("RS"), Some(25.0)), 5e-6);
        assert_eq!(warn(Some("RS"), Some(50.0)), 2.4e-5);
        assert_eq!(warn(Some("RS"), Some(100.0)), 2.4e-5);
        assert_eq!(warn(Some("RS"), None), 5e-6);
        assert_eq!(warn(Some("LLRS"), Some(50.0)), 9e-6);
        assert_eq!(warn(Some("BaseR"), Some(25.0)), 2e-9);
        assert_eq!(warn(None, Some(50.0)), DEFAULT_WARN);
        assert_eq!(warn(Some("link mode bit 80"), None), DEFAULT_WARN);
        let BerLimit::Warn { why, .. } = ber_limit(Some("RS"), Some(50.0), None) else {
            panic!()
        };
        assert_eq!(
            why,
            "a tenth of the 2.4e-4 RS(544,514) carries (50 Gb/s lanes)"
        );
        // Every warning is under the limit it is a tenth of.
        for c in [&KR4, &KP4, &LLRS, &BASER] {
            assert!(
                c.warn < c.limit && c.warn * 10.0 >= c.limit * 0.9,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn the_operators_figure_replaces_every_codes_but_not_no_fec() {
        assert_eq!(
            ber_limit(Some("RS"), Some(50.0), Some(1e-4)),
            BerLimit::Warn {
                warn: 1e-4,
                why: "[doctor] pre_fec_ber_warn".into()
            }
        );
        assert!(matches!(
            ber_limit(Some("Off"), Some(50.0), Some(1e-4)),
            BerLimit::NoFec { warns: true, .. }
        ));
    }

    #[test]
    fn no_fec_warns_from_25_gbs_lanes() {
        let no = |lane| match ber_limit(Some("Off"), lane, None) {
            BerLimit::NoFec { why, warns } => (why, warns),
            other => panic!("{other:?}"),
        };
        let (why, warns) = no(Some(50.0));
        assert!(
            warns
                && why.starts_with(
                    "no FEC on 50 Gb/s lanes: 802.3 runs every PAM4 lane with RS(544,514)"
                ),
            "{why}"
        );
        let (why, warns) = no(Some(25.0));
        assert!(warns && why.contains("25GBASE-CR-S"), "{why}");
        assert!(!no(Some(10.0)).1);
        assert!(!no(None).1);
    }

    /// The default rule and the Prometheus alert warn where doctor does on a link whose
    /// RS code it cannot tell.
    #[test]
    fn the_default_rule_and_alert_hold_doctors_default() {
        let rules = include_str!("../../../../configs/rules.toml");
        let rule = rules
            .split("[[rules]]")
            .find(|r| r.contains("name = \"pre-fec-ber-high\""))
            .expect("the rule pre-fec-ber-high");
        let threshold: f64 = rule
            .lines()
            .find_map(|l| l.strip_prefix("threshold = "))
            .expect("its threshold")
            .trim()
            .parse()
            .unwrap();
        assert_eq!(threshold, DEFAULT_WARN);
        let alerts = include_str!("../../../../configs/prometheus/rocewatch.rules.yml");
        let alert = alerts
            .split("- alert: ")
            .find(|a| a.starts_with("RdmaPreFecBerHigh"))
            .expect("the alert RdmaPreFecBerHigh");
        assert!(alert.contains(&format!("{DEFAULT_WARN:e}")), "{alert}");
    }

    proptest::proptest! {
        /// Any text: never a panic, and a lane rate is the rate over a width of at least 1.
        #[test]
        fn any_rate_text(s in ".{0,40}", n in 0u32..2000, w in 0u32..40) {
            let _ = lane_gbps(&s);
            let l = lane_gbps(&format!("{n} Gb/sec ({w}X HDR)"));
            if w == 0 {
                proptest::prop_assert_eq!(l, None);
            } else {
                proptest::prop_assert_eq!(l, Some(f64::from(n) / f64::from(w)));
            }
        }
    }
}
