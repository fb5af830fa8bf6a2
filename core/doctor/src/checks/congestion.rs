//! The congestion state of each port and priority over the window (`rocewatch_congestion`):
//! what the pause, ECN, CNP, loss and traffic counters of the two collections mean
//! together, with the knob each troubled state points to.

use std::time::Duration;

use rocewatch_congestion::{between, State};
use rocewatch_plugin_api::ScrapeResult;

use crate::check::{check, Check, Status};

/// One check per port and priority in a troubled state (storm, PFC-dominated, lossy: a
/// warning with its evidence and knob), and one line for the others; a skip when no
/// per-priority counter (the NIC's driver statistics) moved or was read in both.
pub(crate) fn congestion_checks(
    first: &ScrapeResult,
    second: &ScrapeResult,
    window: Duration,
) -> Vec<Check> {
    let states = between(&first.samples, &second.samples, window);
    let w = humantime::format_duration(window);
    if states.is_empty() {
        return vec![check(
            "congestion",
            "",
            Status::Skip,
            format!("no per-priority counter (bytes, pauses, pause time: the NIC's driver statistics) read in both collections {w} apart: no congestion state"),
            Some("the counters-ethtool collector reads them (mlx5, ice, bnxt); rocewatch collect --once shows what it read".into()),
        )];
    }
    let mut out = Vec::new();
    let mut calm = Vec::new();
    for row in states {
        let (k, v) = (row.at, row.verdict);
        let subject = match (k.netdev.is_empty(), k.device.is_empty()) {
            (false, _) => format!("{} prio {}", k.netdev, k.priority),
            (true, false) => format!("{}/{} prio {}", k.device, k.port, k.priority),
            (true, true) => format!("prio {}", k.priority),
        };
        match v.state {
            State::Storm | State::PfcDominated | State::Lossy => out.push(check(
                "congestion",
                &subject,
                Status::Warn,
                format!("{} over {w}: {}", v.state, v.evidence),
                Some(v.knob.to_string()),
            )),
            // Idle priorities are the rule; only those with something to say are listed.
            State::Idle => {}
            State::Flowing | State::EcnControlled => {
                calm.push(format!("{subject}: {} ({})", v.state, v.evidence))
            }
        }
    }
    if out.is_empty() {
        out.push(check(
            "congestion",
            "",
            Status::Pass,
            if calm.is_empty() {
                format!("every priority idle over {w}")
            } else {
                format!("over {w}: {}", calm.join("; "))
            },
            None,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_plugin_api::{Attributes, MetricKind, Sample, Value};

    fn s(name: &'static str, prio: Option<&str>, dir: Option<&str>, v: u64) -> Sample {
        let mut a = vec![
            ("rdma.device".to_string(), "mlx5_0".to_string()),
            ("rdma.port".to_string(), "1".to_string()),
        ];
        if let Some(p) = prio {
            a.push(("network.interface.name".into(), "ens1f0np0".into()));
            a.push(("rdma.priority".into(), p.into()));
        }
        if let Some(d) = dir {
            a.push(("network.io.direction".into(), d.into()));
        }
        Sample {
            name: name.into(),
            unit: "".into(),
            value: Value::U64(v),
            attributes: Attributes::new(a.into_iter().collect()),
            source: "t".into(),
            kind: MetricKind::Counter,
        }
    }

    /// The storm and the lossy priority are warnings with their knob; nothing read is a
    /// skip; calm priorities are one pass.
    #[test]
    fn troubled_states_warn_with_their_knob() {
        let read = |tx3: u64, paused3: u64, tx5: u64, oos: u64| ScrapeResult {
            samples: vec![
                s("rdma.priority.io", Some("3"), Some("transmit"), tx3),
                s(
                    "rdma.pfc.pause_duration",
                    Some("3"),
                    Some("receive"),
                    paused3,
                ),
                s("rdma.priority.io", Some("5"), Some("transmit"), tx5),
                // PFC on priority 5 too (the NIC reports its pauses): none.
                s("rdma.pfc.pause_frames", Some("5"), Some("receive"), 0),
                s("rdma.port.out_of_sequence", None, None, oos),
            ],
            errors: vec![],
        };
        let w = Duration::from_secs(10);
        // Priority 3 paused 9.5 s of 10 and sending nothing; priority 5 (PFC on) sending,
        // with the port's out-of-sequence moving and no pauses on it.
        let out = congestion_checks(
            &read(1000, 0, 0, 0),
            &read(1000, 9_500_000, 5_000_000_000, 300),
            w,
        );
        let storm = out
            .iter()
            .find(|c| c.subject == "ens1f0np0 prio 3")
            .unwrap();
        assert_eq!(storm.status, Status::Warn);
        assert!(
            storm.evidence.starts_with("storm over 10s"),
            "{}",
            storm.evidence
        );
        assert!(storm
            .fix
            .as_deref()
            .unwrap()
            .contains("pfc-prevention-tout"));
        let lossy = out
            .iter()
            .find(|c| c.subject == "ens1f0np0 prio 5")
            .unwrap();
        assert!(lossy.evidence.starts_with("lossy"), "{}", lossy.evidence);

        // Calm: one pass naming the flowing priority.
        let out = congestion_checks(&read(0, 0, 0, 0), &read(0, 0, 5_000_000_000, 0), w);
        assert_eq!(out.len(), 1, "{out:#?}");
        assert_eq!(out[0].status, Status::Pass);
        assert!(
            out[0].evidence.contains("ens1f0np0 prio 5: flowing"),
            "{}",
            out[0].evidence
        );

        // Nothing per priority: a skip that says why.
        let out = congestion_checks(&ScrapeResult::default(), &ScrapeResult::default(), w);
        assert_eq!(out[0].status, Status::Skip);
    }
}
