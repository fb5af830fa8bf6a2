//! The agent's wiring of the quarantine (`rocewatch_runtime::quarantine`: the state
//! file, the watcher and its recovery policy): which rules quarantine, `[health]
//! release_after`, and the self-test the recovery waits for, `rocewatch health` without
//! the quarantine and agent checks.

use std::future::Future;
use std::pin::Pin;

use rocewatch_runtime::quarantine::{QuarantineFile, SelfTest, SelfTestReport, Settings, Watcher};

use crate::config::Config;

/// The agent's self-test: `rocewatch health` without the quarantine and agent checks.
struct HealthSelfTest {
    options: rocewatch_health::Options,
    cfg: rocewatch_health::HealthConfig,
}

impl SelfTest for HealthSelfTest {
    fn in_flight(&self) -> bool {
        rocewatch_health::threads_in_flight() > 0
    }

    fn run(&self) -> Pin<Box<dyn Future<Output = SelfTestReport> + Send + '_>> {
        Box::pin(async {
            let report = rocewatch_health::run(&self.options, &self.cfg).await;
            SelfTestReport {
                passed: report.verdict == rocewatch_health::Verdict::Healthy,
                line: report.line,
            }
        })
    }
}

/// The watcher of `cfg`: its quarantining rules, `[health] release_after`, and the
/// health self-test.
pub fn watcher(cfg: &Config) -> Watcher {
    let state = rocewatch_runtime::audit::state_dir();
    let mut health_cfg = cfg.health.clone();
    let checks = rocewatch_health::CheckName::ALL.iter().copied();
    health_cfg.checks = Some(
        checks
            .filter(|c| {
                !matches!(
                    c,
                    rocewatch_health::CheckName::Quarantine | rocewatch_health::CheckName::Agent
                )
            })
            .collect(),
    );
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
    let self_test = HealthSelfTest {
        options: cfg.health_options(state),
        cfg: health_cfg,
    };
    Watcher::new(settings, Box::new(self_test))
}
