//! `[health]`: what "expected" means for `rocewatch health`. Every key is optional: with
//! none, every InfiniBand port and every RoCE port whose netdev is up (or gone: a RoCE
//! port carries nothing without one) must be ACTIVE/LinkUp at the rate of its
//! siblings (ports of the same HCA model), PCIe at the most card and slot allow, a RoCE
//! v2 GID for each address, one MTU across the RoCE netdevs, no failing kernel-log
//! messages in the last 15 minutes and no QP in the error state.

use std::time::Duration;

use rocewatch_runtime::util::duration::{de_duration, Bounds, LOOK_BACK, TIMEOUT};
use serde::{Deserialize, Serialize};

/// The checks `health` runs, in the order it runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckName {
    /// RDMA devices present (at least `min_devices`).
    Devices,
    /// Ports ACTIVE/LinkUp at the expected rate.
    Ports,
    /// PCIe link at the most its card and its slot allow.
    Pcie,
    /// A RoCE v2 GID for each of the netdev's addresses.
    Gid,
    /// The netdev MTU.
    Mtu,
    /// Expected driver and firmware builds.
    Builds,
    /// Failing driver messages in the kernel log.
    KernelLog,
    /// Queue pairs in the error state.
    Qps,
    /// A running agent's firing rules.
    Agent,
    /// The host's quarantine.
    Quarantine,
    /// The userspace verbs stack: rdma-core, each device's provider and uverbs device
    /// file (openable by every user), the RDMA CM device.
    Userspace,
    /// Links that flap: carrier changes (and mlx5's PHY link downs) between runs.
    Link,
    /// Transceiver modules at an alarm level, or with a dark lane.
    Optics,
}

impl CheckName {
    pub const ALL: &'static [CheckName] = &[
        CheckName::Devices,
        CheckName::Ports,
        CheckName::Pcie,
        CheckName::Gid,
        CheckName::Mtu,
        CheckName::Builds,
        CheckName::KernelLog,
        CheckName::Qps,
        CheckName::Agent,
        CheckName::Quarantine,
        CheckName::Userspace,
        CheckName::Link,
        CheckName::Optics,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CheckName::Devices => "devices",
            CheckName::Ports => "ports",
            CheckName::Pcie => "pcie",
            CheckName::Gid => "gid",
            CheckName::Mtu => "mtu",
            CheckName::Builds => "builds",
            CheckName::KernelLog => "kernel-log",
            CheckName::Qps => "qps",
            CheckName::Agent => "agent",
            CheckName::Quarantine => "quarantine",
            CheckName::Userspace => "userspace",
            CheckName::Link => "link",
            CheckName::Optics => "optics",
        }
    }
}

fn default_window() -> Duration {
    Duration::from_secs(15 * 60)
}

fn default_agent_timeout() -> Duration {
    Duration::from_millis(500)
}

/// Under node-problem-detector's 5 s rule timeout (ours: deploy/kubernetes), with room
/// for the process to start and print its line.
fn default_timeout() -> Duration {
    Duration::from_secs(4)
}

fn default_rootfs() -> std::path::PathBuf {
    "/".into()
}

fn default_min_devices() -> usize {
    1
}

/// The default rule `link-flapping`'s window (configs/rules.toml).
fn default_flap_window() -> Duration {
    Duration::from_secs(10 * 60)
}

fn default_max_flaps() -> u64 {
    rocewatch_sysfs::verdict::flap::DEFAULT_MAX_FLAPS
}

/// `[health]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthConfig {
    /// The checks that count (default: all). One left out is reported as skipped.
    #[serde(default)]
    pub checks: Option<Vec<CheckName>>,
    /// The RDMA devices the host must have (default 1: a host without any is unhealthy).
    #[serde(default = "default_min_devices")]
    pub min_devices: usize,
    /// The ports that must be up (`mlx5_0/1`), whatever their netdev's state; default:
    /// every port whose netdev is administratively up, and every InfiniBand port.
    #[serde(default)]
    pub ports: Vec<String>,
    /// Ports left unused on purpose (`mlx5_1/1`): not checked, reported skipped. Without
    /// it every InfiniBand port counts, and every RoCE port whose netdev is up or gone.
    #[serde(default)]
    pub ignore_ports: Vec<String>,
    /// The lowest rate a checked port may run at, Gb/s; default: the highest rate among
    /// the ports of the same HCA model.
    #[serde(default)]
    pub min_rate_gbps: Option<f64>,
    /// The lowest MTU of a RoCE netdev (an IP MTU), held as the RoCE MTU it gives: a
    /// netdev whose RoCE MTU is below that is unhealthy, one whose RoCE MTU meets it but
    /// whose MTU is below warns. Without it (and with it), no RoCE netdev below another's
    /// RoCE MTU.
    #[serde(default)]
    pub min_mtu: Option<u32>,
    /// The driver module's expected version (`module/NAME/version`, or its srcversion).
    #[serde(default)]
    pub driver_version: Option<String>,
    /// The devices' expected firmware (`fw_ver`).
    #[serde(default)]
    pub firmware: Option<String>,
    /// How far back the kernel log is read.
    #[serde(default = "default_window", deserialize_with = "de_duration")]
    pub kernel_log_window: Duration,
    /// A running agent's Prometheus endpoint (`http://127.0.0.1:9464`): its `/rules` are
    /// read: a firing rule of severity `critical` makes the host unhealthy, one of
    /// severity `warning` or `info` warns (and `link-carrier-flapping` warns while the
    /// `link` check runs, which judges the flaps itself). Never required: an agent that
    /// does not answer is reported and weighs nothing.
    #[serde(default)]
    pub agent: Option<String>,
    /// How long the agent is waited for.
    #[serde(default = "default_agent_timeout", deserialize_with = "de_duration")]
    pub agent_timeout: Duration,
    /// How long the checks may take together: a check still reading past it (a sysfs
    /// file that does not answer, a kernel log that blocks) is an unhealthy finding
    /// naming what it was reading, and the verdict is given on what is known.
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Rules whose firing does not make the host unhealthy (a warning only).
    #[serde(default)]
    pub ignore_rules: Vec<String>,
    /// The host's file system the userspace check reads (`dev/infiniband`,
    /// `etc/libibverbs.d`, the verbs libraries): `/`, or `/host` in a pod that mounts it.
    #[serde(default = "default_rootfs")]
    pub rootfs: std::path::PathBuf,
    /// The recovery policy of a quarantine a rule set (`quarantine = true`): it ends once
    /// the rule has been clear this long and the health checks pass. Unset (the default):
    /// only `rocewatch quarantine release` ends it.
    #[serde(
        default,
        deserialize_with = "rocewatch_runtime::util::duration::de_opt_duration"
    )]
    pub release_after: Option<Duration>,
    /// The window the `link` check counts flaps over: readings of earlier runs older than
    /// this are dropped, but the last one while within three windows (a run that comes
    /// later than the window counts flaps over the longer span; later still, a warning).
    /// Make it at least twice the interval `health` runs at (Slurm's HealthCheckInterval).
    #[serde(default = "default_flap_window", deserialize_with = "de_duration")]
    pub flap_window: Duration,
    /// Flaps within `flap_window` at which a link is unhealthy (fewer, but any: a
    /// warning).
    #[serde(default = "default_max_flaps")]
    pub max_flaps: u64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            checks: None,
            min_devices: default_min_devices(),
            ports: Vec::new(),
            ignore_ports: Vec::new(),
            min_rate_gbps: None,
            min_mtu: None,
            driver_version: None,
            firmware: None,
            kernel_log_window: default_window(),
            agent: None,
            agent_timeout: default_agent_timeout(),
            timeout: default_timeout(),
            ignore_rules: Vec::new(),
            release_after: None,
            rootfs: default_rootfs(),
            flap_window: default_flap_window(),
            max_flaps: default_max_flaps(),
        }
    }
}

/// A `[health]` key that cannot be used, named.
#[derive(Debug, thiserror::Error)]
#[error("health.{key}: {why}")]
pub struct HealthConfigError {
    pub key: &'static str,
    pub why: String,
}

/// The longest the agent is waited for: `health` answers a scheduler within 2 s.
const AGENT_TIMEOUT: Bounds = Bounds {
    max: Duration::from_millis(1500),
    ..TIMEOUT
};

/// The checks' bound: long enough for a loaded host, short enough that `--slurm` still
/// drains (a drain's scontrol has 30 s of its own) well within a minute.
const CHECKS_TIMEOUT: Bounds = Bounds {
    min: Duration::from_millis(100),
    max: Duration::from_secs(20),
    zero_means: None,
};

/// The `link` check's window: at least a second (the tests), at most a day (the readings
/// of every run in it are kept).
const FLAP_WINDOW: Bounds = Bounds {
    min: Duration::from_secs(1),
    max: Duration::from_secs(86_400),
    zero_means: None,
};

/// How long a quarantining rule must stay clear: long enough to be more than a flap.
const RELEASE_AFTER: Bounds = Bounds {
    min: Duration::from_secs(1),
    max: Duration::from_secs(30 * 86_400),
    zero_means: None,
};

impl HealthConfig {
    /// Whether `check` counts.
    pub fn runs(&self, check: CheckName) -> bool {
        self.checks.as_ref().is_none_or(|c| c.contains(&check))
    }

    /// What cannot be used, by key.
    pub fn validate(&self) -> Result<(), HealthConfigError> {
        let err = |key, why: String| Err(HealthConfigError { key, why });
        if let Err(why) = LOOK_BACK.check(self.kernel_log_window) {
            return err("kernel_log_window", why);
        }
        if let Err(why) = AGENT_TIMEOUT.check(self.agent_timeout) {
            return err("agent_timeout", why);
        }
        if let Err(why) = CHECKS_TIMEOUT.check(self.timeout) {
            return err("timeout", why);
        }
        if let Some(d) = self.release_after {
            if let Err(why) = RELEASE_AFTER.check(d) {
                return err("release_after", why);
            }
        }
        if let Err(why) = FLAP_WINDOW.check(self.flap_window) {
            return err("flap_window", why);
        }
        if self.max_flaps == 0 {
            return err(
                "max_flaps",
                "0 would call every link flapping: at least 1 (the default is 2, as the rule link-flapping)".into(),
            );
        }
        if self.checks.as_ref().is_some_and(Vec::is_empty) {
            return err(
                "checks",
                "an empty list runs no check, so every host would pass: leave the key out to run every check, or name the ones that count".into(),
            );
        }
        if let Some(r) = self.min_rate_gbps {
            if !(r.is_finite() && r > 0.0) {
                return err("min_rate_gbps", format!("{r} is not a rate in Gb/s"));
            }
        }
        for p in &self.ports {
            if parse_port(p).is_none() {
                return err(
                    "ports",
                    format!("{p:?} is not DEVICE/PORT (for example mlx5_0/1)"),
                );
            }
        }
        for p in &self.ignore_ports {
            if parse_port(p).is_none() {
                return err(
                    "ignore_ports",
                    format!("{p:?} is not DEVICE/PORT (for example mlx5_1/1)"),
                );
            }
            if self.ports.contains(p) {
                return err(
                    "ignore_ports",
                    format!("{p} is also in ports, which must be up"),
                );
            }
        }
        if let Some(a) = &self.agent {
            if !(a.starts_with("http://") || a.starts_with("https://")) {
                return err(
                    "agent",
                    format!("{a:?} is not an http:// or https:// URL of the agent's Prometheus endpoint"),
                );
            }
        }
        Ok(())
    }
}

/// `mlx5_0/1` → (`mlx5_0`, 1).
pub fn parse_port(s: &str) -> Option<(&str, u32)> {
    let (dev, port) = s.rsplit_once('/')?;
    let port = port.parse().ok()?;
    (!dev.is_empty()).then_some((dev, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<HealthConfig, String> {
        let c: HealthConfig = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn no_key_is_a_config_to_run_with() {
        let c = parse("").unwrap();
        assert!(CheckName::ALL.iter().all(|&k| c.runs(k)));
        assert_eq!(c.kernel_log_window, Duration::from_secs(900));
        assert_eq!(c.min_devices, 1);
        assert_eq!(c.flap_window, Duration::from_secs(600));
        assert_eq!(c.max_flaps, 2);
    }

    #[test]
    fn mistakes_are_named_by_key() {
        let e = parse("keep_checks = []").unwrap_err();
        assert!(e.contains("unknown field `keep_checks`"), "{e}");
        let e = parse("checks = [\"ports\", \"pci\"]").unwrap_err();
        assert!(e.contains("unknown variant `pci`"), "{e}");
        let e = parse("ports = [\"mlx5_0\"]").unwrap_err();
        assert_eq!(
            e,
            "health.ports: \"mlx5_0\" is not DEVICE/PORT (for example mlx5_0/1)"
        );
        let e = parse("agent_timeout = \"5s\"").unwrap_err();
        assert!(e.starts_with("health.agent_timeout: 5s is more"), "{e}");
        let e = parse("timeout = \"1m\"").unwrap_err();
        assert!(e.starts_with("health.timeout: "), "{e}");
        let e = parse("min_rate_gbps = -1.0").unwrap_err();
        assert!(e.starts_with("health.min_rate_gbps"), "{e}");
        let e = parse("agent = \"127.0.0.1:9464\"").unwrap_err();
        assert!(e.starts_with("health.agent"), "{e}");
        let e = parse("checks = []").unwrap_err();
        assert!(e.starts_with("health.checks: "), "{e}");
        let e = parse("min_rate_gbps = inf").unwrap_err();
        assert!(e.starts_with("health.min_rate_gbps"), "{e}");
        let e = parse("min_rate_gbps = nan").unwrap_err();
        assert!(e.starts_with("health.min_rate_gbps"), "{e}");
        let e = parse("ignore_ports = [\"mlx5_1\"]").unwrap_err();
        assert!(e.starts_with("health.ignore_ports"), "{e}");
        let e = parse("ports = [\"mlx5_1/1\"]\nignore_ports = [\"mlx5_1/1\"]").unwrap_err();
        assert!(
            e.starts_with("health.ignore_ports: mlx5_1/1 is also in ports"),
            "{e}"
        );
        let e = parse("max_flaps = 0").unwrap_err();
        assert!(e.starts_with("health.max_flaps: 0 would call"), "{e}");
        let e = parse("flap_window = \"2d\"").unwrap_err();
        assert!(e.starts_with("health.flap_window: 2days is more"), "{e}");
        let c = parse("checks = [\"link\", \"optics\"]\nflap_window = \"5s\"").unwrap();
        assert!(c.runs(CheckName::Link) && c.runs(CheckName::Optics) && !c.runs(CheckName::Ports));
        let c = parse("checks = [\"ports\", \"kernel-log\"]").unwrap();
        assert!(c.runs(CheckName::KernelLog) && !c.runs(CheckName::Pcie));
    }
}
