//! The probe to `--peer`: RC send/receives over the side channel's connection, through
//! the probe-verbs plugin, [`PROBES`] of them one after another, and their RTTs judged
//! with the CPU time the hypervisor stole over the same window: a late or varying RTT
//! under high steal is this host's, not the network's.

use std::sync::Arc;

use rocewatch_runtime::app::App;

use super::virtualization::HIGH_STEAL;
use crate::check::{check, Check, Status};

/// Probes sent to the peer, one after another: a median and a tail.
pub(crate) const PROBES: usize = 10;
/// A tail above this is late whatever the median (a RoCE RTT is tens of microseconds).
pub(crate) const LATE_RTT: f64 = 1e-3;
/// A tail this many times the median is an RTT that varies.
pub(crate) const VARIES: f64 = 4.0;

/// The RTTs of [`PROBES`] probes to `peer`, or the check that says why there are none
/// (no plugin, no answer, no connection: the first such outcome ends the series).
pub(crate) async fn probe_rtts(agent: &Arc<App>, peer: &str) -> Result<Vec<f64>, Check> {
    let Some(entry) = agent.probe_plugin() else {
        return Err(check(
            "probe",
            peer,
            Status::Skip,
            "the probe-verbs plugin is not loaded (rocewatch plugins says why)",
            None,
        ));
    };
    let mut rtts = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        let target = rocewatch_plugin_api::ProbeTarget::new(peer, 64, 2000);
        match rocewatch_probes::probe_once(&entry, target, agent.metrics()).await {
            Ok(r) => match r.outcome {
                rocewatch_plugin_api::ProbeOutcome::Ok { rtt_seconds } => rtts.push(rtt_seconds),
                rocewatch_plugin_api::ProbeOutcome::Timeout => return Err(check(
                    "probe",
                    peer,
                    Status::Fail,
                    "connected, but no answer within 2 s",
                    Some("RoCE packets are lost on the path: check the firewall on both hosts (UDP 4791), PFC/ECN, and the switch".into()),
                )),
                rocewatch_plugin_api::ProbeOutcome::ConnectFailed { cause } => return Err(check(
                    "probe",
                    peer,
                    Status::Fail,
                    format!("no connection: {cause}"),
                    Some(format!("the peer must run `rocewatch probe --serve` (or the agent with [probes]); check that {peer} is reachable over the RDMA netdev and UDP 4791 is not dropped")),
                )),
            },
            Err(e) => return Err(check("probe", peer, Status::Fail, e.to_string(), None)),
        }
    }
    Ok(rtts)
}

/// Seconds as microseconds, or milliseconds from one.
fn time(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} us", s * 1e6)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

/// The nearest-rank `q` quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The answered probes' RTTs (`rtts`, at least one) with the share of CPU time stolen
/// over the same window (`steal`; `None`: not measured): a p99 above [`LATE_RTT`] or
/// [`VARIES`] times the median under steal above [`HIGH_STEAL`] is named as the host's.
pub(crate) fn rtt_check(peer: &str, rtts: &[f64], steal: Option<f64>) -> Check {
    let mut sorted = rtts.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (p50, p99) = (quantile(&sorted, 0.5), quantile(&sorted, 0.99));
    let said = format!(
        "RC send/receive answered in {} (median of {}; p99 {})",
        time(p50),
        sorted.len(),
        time(p99)
    );
    let late = p99 > LATE_RTT || p99 > VARIES * p50;
    match steal {
        Some(s) if late && s > HIGH_STEAL => check(
            "probe",
            peer,
            Status::Warn,
            format!(
                "RTT p99 {} (median {}) with {:.0} % CPU steal over the window: the hypervisor's, not the network's",
                time(p99),
                time(p50),
                s * 100.0
            ),
            Some("on the hypervisor: give this guest dedicated (pinned) CPUs, or move it to a less loaded host; judge the network by a probe from a host without steal".into()),
        ),
        Some(s) if late => check(
            "probe",
            peer,
            Status::Pass,
            format!(
                "{said}; the tail is late with {:.1} % CPU steal over the window: not the hypervisor's",
                s * 100.0
            ),
            None,
        ),
        None if late => check(
            "probe",
            peer,
            Status::Pass,
            format!("{said}; the tail is late and this host's CPU steal was not measured (give --procfs-root with --sysfs-root)"),
            None,
        ),
        _ => check("probe", peer, Status::Pass, said, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_sysfs::procstat::{read_stat, steal_share};

    const STAT: &str =
        "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 100 0 50 800 10 0 5 35 0 0\nprocs_running 1\n";

    /// The steal share between `before` and `after` as doctor reads them: the proc tree's
    /// `stat` written, read, rewritten and read again.
    fn steal_between(before: &str, after: &str) -> Option<f64> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stat"), before).unwrap();
        let a = read_stat(dir.path()).unwrap();
        std::fs::write(dir.path().join("stat"), after).unwrap();
        let b = read_stat(dir.path()).unwrap();
        steal_share(&a, &b)
    }

    /// Nine answers at 20 us and one at 3 ms.
    fn late_tail() -> Vec<f64> {
        let mut r = vec![20e-6; 9];
        r.insert(4, 3e-3);
        r
    }

    #[test]
    fn a_late_rtt_under_high_steal_is_named_the_hosts() {
        // 200 ticks, 60 stolen: 30 %.
        let stolen = STAT.replace("cpu  100 0 50 800 10 0 5 35", "cpu  150 0 60 880 10 0 5 95");
        let steal = steal_between(STAT, &stolen);
        let c = rtt_check("10.0.0.2", &late_tail(), steal);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert_eq!(
            c.evidence,
            "RTT p99 3.00 ms (median 20.0 us) with 30 % CPU steal over the window: the hypervisor's, not the network's"
        );
        assert!(c.fix.as_deref().unwrap().contains("pinned"), "{c:?}");
    }

    #[test]
    fn without_steal_the_rtts_are_said_and_the_hypervisor_is_not_blamed() {
        // 200 ticks, 1 stolen: 0.5 %.
        let calm = STAT.replace("cpu  100 0 50 800 10 0 5 35", "cpu  150 0 60 939 10 0 5 36");
        let c = rtt_check("p", &late_tail(), steal_between(STAT, &calm));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.evidence
                .starts_with("RC send/receive answered in 20.0 us (median of 10; p99 3.00 ms)"),
            "{c:?}"
        );
        assert!(c.evidence.contains("not the hypervisor's"), "{c:?}");
        let c = rtt_check("p", &late_tail(), None);
        assert!(c.evidence.contains("not measured"), "{c:?}");
        // Steady RTTs under steal: nothing late to explain.
        let stolen = STAT.replace("cpu  100 0 50 800 10 0 5 35", "cpu  150 0 60 880 10 0 5 95");
        let c = rtt_check("p", &[20e-6, 22e-6, 21e-6], steal_between(STAT, &stolen));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert_eq!(
            c.evidence,
            "RC send/receive answered in 21.0 us (median of 3; p99 22.0 us)"
        );
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((quantile(&v, 0.5), quantile(&v, 0.99)), (50.0, 99.0));
        assert_eq!((quantile(&[7.0], 0.5), quantile(&[7.0], 0.99)), (7.0, 7.0));
    }
}
