//! `rocewatch demo`: the real agent pipeline against a simulated fabric.
//!
//! [`Fabric`] writes a sysfs tree (two mlx5 RoCE ports with counters and hw_counters) into
//! a directory and advances its counters on every tick: steady traffic, and from
//! `burst_at` for `burst_len` ticks an error burst on the second port (symbol errors,
//! receive errors, out_of_buffer drops, ACK timeouts, a CNP surge). The agent reads it
//! with the built-in plugins exactly as it reads `/sys`.
//!
//! It also writes each netdev's driver statistics in `ethtool -S` format under
//! `ethtool/<netdev>` (per-priority PFC pauses, pause duration, bytes) and a PFC pause
//! storm on priority 3 of `mlx5_0` (`storm`: first tick and length): that port spends
//! 60 % of its time paused.

mod fabric;
mod run;
pub(crate) mod screen_logs;
mod view;

pub use fabric::{Fabric, Scenario};
pub use run::{run, DemoError, Format, Options};
pub use view::{port_rates, render, rules_footer, PortRates};

/// The default rule set shipped in `configs/rules.toml`.
pub fn default_rules() -> Result<Vec<rocewatch_runtime::rules::RuleConfig>, config::ConfigError> {
    #[derive(serde::Deserialize)]
    struct Rules {
        #[serde(default)]
        rules: Vec<rocewatch_runtime::rules::RuleConfig>,
    }
    let r: Rules = config::Config::builder()
        .add_source(config::File::from_str(
            include_str!("../../../../configs/rules.toml"),
            config::FileFormat::Toml,
        ))
        .build()?
        .try_deserialize()?;
    Ok(r.rules)
}
