//! A probe plugin without RDMA, for the prober's tests on any host. It answers by the
//! peer's name:
//!
//! - `ok-<N>us...`: answered after N microseconds (the RTT it reports is N µs);
//! - `dead-...`: no answer: the probe waits out its timeout;
//! - `refused-...`: connection refused (`rejected: ...`);
//! - an IPv4 address (a fleet pinglist's peer), by its last byte: 1-99 answer in 20 µs,
//!   100-199 never answer, 200-249 answer except on path 2 (a black-holed path), 250-255
//!   refuse;
//! - anything else: address resolution fails.
//!
//! `probe_many` has a round's probes in flight together, as the verbs plugin does: the
//! round waits for its longest probe once, so dead peers cost it one timeout, not one
//! each.
//!
//! With `ROCEWATCH_FAKE_PROBE_RECORD=FILE` in its environment, each instance appends a
//! line per target of each round, `DEVICE:PORT PEER PATH UNIX_MILLIS`, the device and
//! port of its own options (`-` when not given): what a test of several instances checks.

use std::time::Duration;

use rocewatch_plugin_api::*;
use rocewatch_plugin_sdk::{export_plugin, ExportPlugin};

#[derive(Default)]
pub struct FakeProbe {
    /// The device and port of its options, as `DEVICE:PORT`.
    port: String,
}

impl Plugin for FakeProbe {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let o = &ctx.options;
        let device = o.get("device").and_then(|d| d.as_str()).unwrap_or("-");
        let port = o
            .get("port")
            .and_then(|p| p.as_u64())
            .map_or_else(|| "-".to_string(), |p| p.to_string());
        self.port = format!("{device}:{port}");
        Ok(())
    }
}

impl FakeProbe {
    /// Each target on a line of the record file, when one is asked for.
    fn record(&self, targets: &[ProbeTarget]) {
        use std::io::Write;
        let Some(file) = std::env::var_os("ROCEWATCH_FAKE_PROBE_RECORD") else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let text: String = targets
            .iter()
            .map(|t| format!("{} {} {} {now}\n", self.port, t.peer, t.path))
            .collect();
        // One write of the round's lines: instances append at once.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(file)
        {
            let _ = f.write_all(text.as_bytes());
        }
    }
}

/// The outcome for `t`, and how long it takes.
fn answer(t: &ProbeTarget) -> (ProbeOutcome, Duration) {
    let p = t.peer.as_str();
    if let Ok(ip) = p.parse::<std::net::Ipv4Addr>() {
        let ok = (
            ProbeOutcome::Ok { rtt_seconds: 20e-6 },
            Duration::from_micros(20),
        );
        let dead = (ProbeOutcome::Timeout, Duration::from_millis(t.timeout_ms));
        return match ip.octets()[3] {
            1..=99 => ok,
            100..=199 => dead,
            200..=249 if t.path == 2 => dead,
            200..=249 => ok,
            _ => (
                ProbeOutcome::ConnectFailed {
                    cause: format!("rejected: no responder on {p} (connection refused)"),
                },
                Duration::ZERO,
            ),
        };
    }
    if let Some(us) = p
        .strip_prefix("ok-")
        .and_then(|r| r.split("us").next())
        .and_then(|n| n.parse::<u64>().ok())
    {
        let rtt = Duration::from_micros(us);
        return (
            ProbeOutcome::Ok {
                rtt_seconds: rtt.as_secs_f64(),
            },
            rtt,
        );
    }
    if p.starts_with("dead-") {
        return (ProbeOutcome::Timeout, Duration::from_millis(t.timeout_ms));
    }
    let cause = if p.starts_with("refused-") {
        format!("rejected: no responder on {p} (connection refused)")
    } else {
        format!("address resolution: {p}: no address")
    };
    (ProbeOutcome::ConnectFailed { cause }, Duration::ZERO)
}

/// The first result of a round says why there is no NIC-measured split.
fn result(t: &ProbeTarget, outcome: ProbeOutcome, first: bool) -> ProbeResult {
    ProbeResult {
        peer: t.peer.clone(),
        outcome,
        nic_timestamps: first.then(|| NicTimestamps::Unsupported {
            reason: "fake-probe has no NIC".into(),
        }),
        cm: None,
    }
}

impl ProbePlugin for FakeProbe {
    fn probe(&mut self, t: &ProbeTarget) -> Result<ProbeResult, PluginError> {
        self.record(std::slice::from_ref(t));
        let (o, took) = answer(t);
        std::thread::sleep(took);
        Ok(result(t, o, true))
    }

    fn probe_many(&mut self, targets: &[ProbeTarget]) -> Result<Vec<ProbeResult>, PluginError> {
        self.record(targets);
        let answers: Vec<_> = targets.iter().map(answer).collect();
        let longest = answers.iter().map(|a| a.1).max().unwrap_or_default();
        std::thread::sleep(longest);
        Ok(targets
            .iter()
            .zip(answers)
            .enumerate()
            .map(|(i, (t, (o, _)))| result(t, o, i == 0))
            .collect())
    }
}

impl ExportPlugin for FakeProbe {
    const NAME: &'static str = "fake-probe";
    const VERSION: &'static str = "0.0.1";
    const KINDS: &'static [PluginKind] = &[PluginKind::Probe];

    fn create() -> Self {
        FakeProbe::default()
    }

    fn as_probe(&mut self) -> Option<&mut dyn ProbePlugin> {
        Some(self)
    }
}

export_plugin!(FakeProbe);
