//! The agent's wiring of the quarantine (`rocewatch_runtime::quarantine`: the state
//! file, the watcher and its recovery policy): which rules quarantine, `[health]
//! release_after`, and the self-test the recovery waits for, `rocewatch health` without
//! the quarantine and agent checks.
//!
//! The self-test runs the checks `[health] checks` names (all by default), so a check an
//! operator left out of the gate does not hold a release either; and while it fails it
//! runs again at most every [`RETRY`] (the watcher asks at every tick once the rule has
//! been clear for `release_after`: the `optics` check reads every module, which clears
//! their latched flags, and `link` keeps its readings in the state directory).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rocewatch_probes::fleet::FleetConfig;
use rocewatch_runtime::quarantine::{QuarantineFile, SelfTest, SelfTestReport, Settings, Watcher};

use crate::config::Config;

/// How soon a self-test that failed runs again.
const RETRY: Duration = Duration::from_secs(30);

/// The agent's self-test: `rocewatch health` without the quarantine and agent checks,
/// counting the NICs this host should have as it does (its rows of `[fleet] topology`,
/// read again at every run as every `rocewatch health` reads them).
struct HealthSelfTest {
    options: rocewatch_health::Options,
    cfg: rocewatch_health::HealthConfig,
    /// `[fleet]`, whose topology's rows of `host` are the rails this host should have.
    fleet: Option<FleetConfig>,
    /// This host's name in the fleet's map.
    host: String,
    /// The last failed run: when, and its line (given again until [`RETRY`] passed).
    failed: Mutex<Option<(Instant, String)>>,
}

impl HealthSelfTest {
    fn new(cfg: &Config, state: std::path::PathBuf) -> HealthSelfTest {
        let mut health_cfg = cfg.health.clone();
        let own = |c: &rocewatch_health::CheckName| {
            !matches!(
                c,
                rocewatch_health::CheckName::Quarantine | rocewatch_health::CheckName::Agent
            )
        };
        let all = rocewatch_health::CheckName::ALL.iter().copied();
        let mut checks: Vec<_> = all
            .clone()
            .filter(|c| cfg.health.runs(*c))
            .filter(own)
            .collect();
        // `[health] checks` naming only quarantine and agent leaves nothing to test: the
        // host's own checks then, never a release on nothing tested.
        if checks.is_empty() {
            checks = all.filter(own).collect();
        }
        health_cfg.checks = Some(checks);
        HealthSelfTest {
            options: cfg.health_options(state),
            cfg: health_cfg,
            fleet: cfg.fleet.clone(),
            host: crate::config::host::fleet_host(cfg),
            failed: Mutex::new(None),
        }
    }

    /// The last failure's report while it is younger than [`RETRY`].
    fn recent_failure(&self) -> Option<SelfTestReport> {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed
            .as_ref()
            .filter(|(at, _)| at.elapsed() < RETRY)
            .map(|(_, line)| SelfTestReport {
                passed: false,
                line: line.clone(),
            })
    }
}

impl SelfTest for HealthSelfTest {
    fn in_flight(&self) -> bool {
        rocewatch_health::threads_in_flight() > 0
    }

    fn run(&self) -> Pin<Box<dyn Future<Output = SelfTestReport> + Send + '_>> {
        Box::pin(async {
            if let Some(report) = self.recent_failure() {
                return report;
            }
            let mut options = self.options.clone();
            let (fleet, host) = (self.fleet.clone(), self.host.clone());
            options.rail_rows = tokio::task::spawn_blocking(move || {
                rocewatch_probes::fleet::map::topology_rows(fleet.as_ref(), &host)
            })
            .await
            .unwrap_or_else(|e| Err(format!("reading [fleet] topology: {e}")));
            let report = rocewatch_health::run(&options, &self.cfg).await;
            let report = SelfTestReport {
                passed: report.verdict == rocewatch_health::Verdict::Healthy,
                line: report.line,
            };
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            *failed = (!report.passed).then(|| (Instant::now(), report.line.clone()));
            report
        })
    }
}

/// The watcher of `cfg`: its quarantining rules, `[health] release_after`, and the
/// health self-test.
pub fn watcher(cfg: &Config) -> Watcher {
    let state = rocewatch_runtime::audit::state_dir();
    let settings = Settings {
        file: QuarantineFile::in_dir(&state),
        audit: cfg.remediation.audit(),
        rules: cfg
            .rules
            .iter()
            .filter(|r| r.quarantine)
            .map(|r| r.name.clone())
            .collect(),
        release_after: cfg.health.release_after,
        interval: cfg.agent.interval,
    };
    let self_test = HealthSelfTest::new(cfg, state);
    Watcher::new(settings, Box::new(self_test))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(case: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures")
            .join(case)
    }

    /// The self-test of the agent on `case` with `[fleet] topology` (this host gpu001).
    fn self_test(case: &str, dir: &std::path::Path) -> HealthSelfTest {
        let file = dir.join(format!("{case}.toml"));
        std::fs::write(
            &file,
            format!(
                "[agent]\nsysfs_root = {:?}\n\n[fleet]\ntopology = {:?}\nhost = \"gpu001\"\n",
                fixture(case).join("sys"),
                fixture(case).join("topology.csv"),
            ),
        )
        .unwrap();
        let cfg = Config::load(Some(&file)).unwrap();
        HealthSelfTest::new(&cfg, dir.join("state"))
    }

    /// One NIC of eight gone from the bus, the topology the only configuration: the
    /// recovery's self-test fails naming the rail, as `rocewatch health` does; with all
    /// eight it passes.
    #[tokio::test]
    async fn the_self_test_counts_a_missing_nic_as_health_does() {
        let dir = tempfile::tempdir().unwrap();
        let gone = self_test("eight-rails-one-gone", dir.path()).run().await;
        assert!(!gone.passed, "{}", gone.line);
        assert!(
            gone.line.contains("rail 3") && gone.line.contains("0000:41:01.0"),
            "{}",
            gone.line
        );
        let all = self_test("eight-rails", dir.path()).run().await;
        assert!(all.passed, "{}", all.line);
    }

    /// A check left out of `[health] checks` does not hold a release either: with the
    /// rail count's check (`devices`) left out, the missing NIC does not fail it.
    #[tokio::test]
    async fn the_self_test_runs_the_checks_health_is_configured_with() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = self_test("eight-rails-one-gone", dir.path());
        assert!(t.cfg.runs(rocewatch_health::CheckName::Devices));
        let mut cfg = Config::load(Some(&dir.path().join("eight-rails-one-gone.toml"))).unwrap();
        cfg.health.checks = Some(vec![rocewatch_health::CheckName::Ports]);
        t = HealthSelfTest::new(&cfg, dir.path().join("state"));
        assert_eq!(t.cfg.checks, Some(vec![rocewatch_health::CheckName::Ports]));
        assert!(!t.cfg.runs(rocewatch_health::CheckName::Link));
        // Only the two it leaves out: the host's own checks, never nothing tested.
        cfg.health.checks = Some(vec![
            rocewatch_health::CheckName::Agent,
            rocewatch_health::CheckName::Quarantine,
        ]);
        let t = HealthSelfTest::new(&cfg, dir.path().join("state"));
        assert!(t.cfg.runs(rocewatch_health::CheckName::Devices));
        assert!(!t.cfg.runs(rocewatch_health::CheckName::Agent));
        let r = t.run().await;
        assert!(!r.passed, "{}", r.line);
    }

    /// A failed self-test is not run again for RETRY: the same report is given back
    /// (the watcher asks at every tick; optics reads every module at each run).
    #[tokio::test]
    async fn a_failed_self_test_is_given_back_rather_than_run_again_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let t = self_test("eight-rails-one-gone", dir.path());
        let first = t.run().await;
        assert!(!first.passed, "{}", first.line);
        let at = t.failed.lock().unwrap().as_ref().map(|(at, _)| *at);
        let again = t.run().await;
        assert_eq!((again.passed, &again.line), (false, &first.line));
        // Not run again: the failure's time is the first run's.
        assert_eq!(t.failed.lock().unwrap().as_ref().map(|(at, _)| *at), at);
        // Once RETRY has passed, it runs again.
        *t.failed.lock().unwrap() = Some((Instant::now() - RETRY, first.line.clone()));
        let third = t.run().await;
        assert!(!third.passed);
        let later = t
            .failed
            .lock()
            .unwrap()
            .as_ref()
            .map(|(at, _)| *at)
            .unwrap();
        assert!(later.elapsed() < RETRY, "not run again after RETRY");
    }
}
