//! The verbs probe plugin, shipped as a `.so` so that the `rocewatch` binary itself does
//! not link libibverbs: RC Send/Recv ping-pong of a small message, as `ib_send_lat` does.
//!
//! Connection setup goes over a TCP side channel (as perftest does): the prober connects
//! to the responder's TCP port (default 18516), each side creates an RC queue pair and
//! they exchange `[size u32][qpn u32][psn u32][gid 16 bytes]` in network order. The local
//! RoCE v2 GID is the one whose address is the side channel's local IP (the address the
//! kernel routes towards the peer), read from sysfs `gids/` and `gid_attrs/types/`.
//!
//! Options: `device` (default: the first), `port` (1), `tcp_port` (18516), `serve`
//! (run a responder, default true), `serve_bandwidth` (the responder also serves
//! bandwidth tests, default false), `busy_poll` (false), `reconnect_backoff` ("30s").
//!
//! Bandwidth tests (`bandwidth`, ABI 1.2) use the same side channel: the prober's first
//! word is a magic with the high bit set where a latency prober sends its size, so old
//! probers keep working and an old responder is told apart (`bwproto` has the format).
//! Several RC queue pairs with WRITEs, READs or SENDs in flight (up to 128 messages and
//! 2 MiB each), busy-polled for the duration, counted as `ib_write_bw` counts (bytes completed over the time from the
//! first post to the last completion). The responder refuses when `serve_bandwidth` is
//! off, while another test runs, or beyond 60 s, saying why; it sends back its port's
//! counters before and after. A prober whose test failed says abort instead of done, and
//! the responder frees its queue pairs at once (within 1 s), as it does when the side
//! channel closes; a prober silent 10 s past the test's end is given up.
//!
//! Flows (ABI 1.3): a target names a path (0..) and a flow label; each (peer, path) has
//! its own queue pair, and the label sets its UDP source port (the kernel derives the
//! port from the address vector's flow label where the driver uses it: rxe does). When a flow's label changes, its
//! queue pair goes to RESET and back to RTS with the new label and the sequence numbers
//! the device reports (`ibv_query_qp`): the peer's queue pair never notices, no side
//! channel is used. The backoff of a peer that cannot be connected moves once a round,
//! whatever the number of its flows.
//!
//! A probe reuses the flow's queue pair; a timeout or a failed work completion drops it
//! and the next probe connects again; a peer that cannot be connected is tried again
//! after 1 s, 2 s, ... up to `reconnect_backoff`. A round (`probe_many`) has every peer
//! in flight at once: new peers are connected in parallel (64 at a time), then one
//! message goes to each; the thread busy-polls every queue for 2 ms, then sleeps in one
//! epoll set of the queues' completion channels until each reply is in or its deadline
//! passes. A round forgets the peers it does not name.
//!
//! The responder is two threads whatever the number of probers: one accepts and sets up
//! each prober's queue pair, one answers them all, asleep in one epoll set. It answers
//! on every RDMA port: each prober's queue pair is made on the port whose RoCE v2 GID is
//! the address the prober reached (the plugin's own device first), so one responder
//! serves every rail of the host while each rail is probed from its own instance.
//!
//! Completion timestamps: the device is asked (`ibv_query_device_ex`) whether it
//! timestamps completions, and the first result of a round says what it answered; the
//! NIC-measured split of the RTT is not computed by this version (`nic_timestamps` is
//! `unsupported` with the reason, on every device).
//!
//! Modules:
//! - [`cm_outcome`]: what an RDMA CM attempt's events mean, by where it stopped (pure,
//!   unit-tested; the RDMA CM probe that will feed it is not built yet).
//! - `memlock`: the locked-memory limit named when a registration fails for it.
//! - `options`: the plugin's options and their defaults.
//! - `conn`: connection setup on the prober's side: the TCP side channel's exchange, the
//!   local GID of an address (cached), connecting peers in parallel.
//! - `reconnect`: when a peer that could not be connected is tried again.
//! - `prober`: a round: the connected peers' queue pairs, pinging every target at once.
//! - `responder`: the responder's accept and serving threads.
//! - [`verbs`]: the libibverbs calls (device, queue pairs, completion channels, epoll).
//! - `bwproto`: the bandwidth test's side-channel messages (pure).
//! - `bwverbs`: the bandwidth test's queue pairs and posting loop.
//! - `bwclient`, `bwserve`: the prober's and the responder's side of a test.
//! - `bwend`: when the responder's side of a test ends, and why (pure): the prober's
//!   done, its abort or its leaving (queue pairs to error at once), or its silence.
//! - `snapshot`: a port's raw counters, rate and netdev speed (the responder's report).

mod bwclient;
mod bwend;
mod bwproto;
mod bwserve;
mod bwverbs;
pub mod cm;
pub mod cm_outcome;
mod conn;
mod memlock;
mod options;
mod post;
mod prober;
mod reconnect;
mod responder;
mod snapshot;
pub mod verbs;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;

use rocewatch_plugin_api::*;
use rocewatch_plugin_sdk::{export_plugin, ExportPlugin};
use rocewatch_sysfs::SysRoot;

use bwserve::Policy;
use conn::{Conn, GidCache, Setup};
pub use options::Options;
use reconnect::Reconnects;
use responder::serve;
use verbs::Device;

/// A flow to a peer: its address and path index (each its own queue pair).
pub(crate) type FlowKey = (String, u16);

/// The probe plugin.
#[derive(Default)]
pub struct VerbsProbe {
    setup: Option<Arc<Setup>>,
    conns: HashMap<FlowKey, Conn>,
    /// The connected flows' completion channels (token: the queue's id), and which flow
    /// each token is.
    epoll: Option<verbs::Epoll>,
    tokens: HashMap<u64, FlowKey>,
    backoff: Reconnects,
    serving: bool,
    serving_cm: bool,
    /// Why the last start failed: a later call says it rather than "called before start".
    start_error: Option<PluginError>,
}

impl Plugin for VerbsProbe {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let r = self.start_setup(ctx);
        self.start_error = r.as_ref().err().cloned();
        r
    }

    fn stop(&mut self) {
        let flows: Vec<FlowKey> = self.conns.keys().cloned().collect();
        for f in flows {
            self.drop_conn(&f);
        }
    }
}

impl VerbsProbe {
    /// Open the device, start the responders, and keep what calls need.
    fn start_setup(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let opts: Options = serde_json::from_value(ctx.options.clone())
            .map_err(|e| PluginError::InvalidOptions(e.to_string()))?;
        let dev = Device::open(opts.device.as_deref(), opts.port)
            .map_err(|e| PluginError::Unsupported(e.to_string()))?;
        let root = SysRoot::new(PathBuf::from(&ctx.sysfs_root));
        let gids = Arc::new(GidCache::new(root.clone(), &dev));
        if opts.serve && !self.serving {
            let listener = TcpListener::bind(("0.0.0.0", opts.tcp_port)).map_err(|e| {
                PluginError::failed(format!(
                    "probe responder: cannot listen on TCP port {}: {e}",
                    opts.tcp_port
                ))
            })?;
            let policy = Arc::new(Policy {
                allowed: opts.serve_bandwidth,
                busy: Default::default(),
                root: root.clone(),
            });
            let ports = responder::Ports::new(root.clone(), Arc::clone(&dev), Arc::clone(&gids));
            serve(listener, Arc::new(ports), opts.busy_poll, policy).map_err(|e| {
                PluginError::failed(format!("probe responder on {}: {e}", dev.name))
            })?;
            self.serving = true;
        }
        if let (Some(port), false) = (opts.serve_cm_port, self.serving_cm) {
            cm::serve_cm(port).map_err(|e| {
                PluginError::failed(format!("RDMA CM responder on port {port}: {e}"))
            })?;
            self.serving_cm = true;
        }
        let timestamps = NicTimestamps::Unsupported {
            reason: match dev.completion_timestamps() {
                Err(why) => why,
                Ok(()) => format!(
                    "{} timestamps completions, but this version of the plugin does not \
                     measure the split yet",
                    dev.name
                ),
            },
        };
        self.epoll = Some(verbs::Epoll::new().map_err(|e| PluginError::failed(e.to_string()))?);
        self.backoff = Reconnects::new(opts.reconnect_backoff);
        self.setup = Some(Arc::new(Setup {
            opts,
            dev,
            timestamps,
            gids,
        }));
        Ok(())
    }

    /// What a call made without a started plugin says: why the start failed, if it did.
    fn not_started(&self, call: &str) -> PluginError {
        match &self.start_error {
            Some(PluginError::Unsupported(why)) => {
                PluginError::Unsupported(format!("the probe plugin did not start: {why}"))
            }
            Some(e) => PluginError::failed(format!("the probe plugin did not start: {e}")),
            None => PluginError::failed(format!("{call} called before start")),
        }
    }

    /// The side-channel targets through [`VerbsProbe::probe_targets`], then the RDMA CM
    /// ones (`cm_port` set) through [`cm::cm_probe`], up to [`CM_PROBES_AT_ONCE`] in flight;
    /// results in order.
    fn probe_split(
        &mut self,
        targets: &[ProbeTarget],
        whole_round: bool,
    ) -> Result<Vec<ProbeResult>, PluginError> {
        if targets.iter().all(|t| t.cm_port == 0) {
            return self.probe_targets(targets, whole_round);
        }
        let side: Vec<ProbeTarget> = targets.iter().filter(|t| t.cm_port == 0).cloned().collect();
        let mut side = if side.is_empty() {
            Vec::new()
        } else {
            self.probe_targets(&side, whole_round)?
        }
        .into_iter();
        let cm: Vec<&ProbeTarget> = targets.iter().filter(|t| t.cm_port != 0).collect();
        let mut cm = cm_round(&cm).into_iter();
        Ok(targets
            .iter()
            .map(|t| {
                let next = if t.cm_port == 0 {
                    side.next()
                } else {
                    cm.next()
                };
                next.expect("one result per target")
            })
            .collect())
    }
}

/// How many of `targets` CM probes go at once: [`CM_PROBES_AT_ONCE`], fewer when the
/// locked-memory limit (`limit`, bytes; `None` unlimited) cannot hold that many probes'
/// buffers (2 x size each) and queues (about 64 KiB): probes that would fail their
/// registration one after another pass.
fn cm_at_once(targets: &[&ProbeTarget], limit: Option<u64>) -> usize {
    let need = targets
        .iter()
        .map(|t| 2 * u64::from(t.size.clamp(1, cm::MAX_SIZE)) + (64 << 10))
        .max()
        .unwrap_or(1);
    let fit = limit.map_or(usize::MAX, |l| (l / need).max(1) as usize);
    CM_PROBES_AT_ONCE.min(fit).min(targets.len()).max(1)
}

/// One CM probe; a panic in it is its own result, not the round's.
fn cm_one(t: &ProbeTarget) -> ProbeResult {
    let run = || {
        cm::cm_probe(
            &t.peer,
            t.cm_port,
            t.size,
            std::time::Duration::from_millis(t.timeout_ms),
            t.tos,
        )
    };
    let (outcome, cm) =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|_| {
            (
                ProbeOutcome::ConnectFailed {
                    cause: "connection error: the CM probe panicked (a bug: please report it)"
                        .into(),
                },
                None,
            )
        });
    ProbeResult {
        peer: t.peer.clone(),
        outcome,
        nic_timestamps: None,
        cm,
    }
}

/// The CM probes of a round, [`cm_at_once`] at a time; results in `targets`' order.
/// Threads the system refuses leave their share to the others (at least this one).
fn cm_round(targets: &[&ProbeTarget]) -> Vec<ProbeResult> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<ProbeResult>>> =
        targets.iter().map(|_| Default::default()).collect();
    let work = || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(t) = targets.get(i) else { break };
        *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(cm_one(t));
    };
    std::thread::scope(|s| {
        for _ in 1..cm_at_once(targets, memlock::memlock_limit()) {
            if std::thread::Builder::new()
                .name("rw-cm-probe".into())
                .spawn_scoped(s, work)
                .is_err()
            {
                break;
            }
        }
        work();
    });
    slots
        .into_iter()
        .zip(targets)
        .map(|(slot, t)| {
            slot.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| cm_one(t))
        })
        .collect()
}

impl ProbePlugin for VerbsProbe {
    fn probe(&mut self, target: &ProbeTarget) -> Result<ProbeResult, PluginError> {
        let mut r = self.probe_split(std::slice::from_ref(target), false)?;
        Ok(r.remove(0))
    }

    /// Every target at once: peers without a queue pair are connected in parallel, then
    /// one message goes to each and the replies are awaited together. A peer listed twice
    /// gets the first one's result. RDMA CM targets follow, several in flight at once.
    fn probe_many(&mut self, targets: &[ProbeTarget]) -> Result<Vec<ProbeResult>, PluginError> {
        self.probe_split(targets, true)
    }

    /// A bandwidth test on queue pairs of its own (the probes' are left alone).
    fn bandwidth(&mut self, request: &BandwidthRequest) -> Result<BandwidthResult, PluginError> {
        let setup = self
            .setup
            .as_ref()
            .ok_or_else(|| self.not_started("bandwidth"))?;
        bwclient::run(setup, request)
    }
}

impl ExportPlugin for VerbsProbe {
    const NAME: &'static str = "probe-verbs";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const KINDS: &'static [PluginKind] = &[PluginKind::Probe];

    fn create() -> Self {
        VerbsProbe::default()
    }

    fn as_probe(&mut self) -> Option<&mut dyn ProbePlugin> {
        Some(self)
    }
}

export_plugin!(VerbsProbe);

#[cfg(test)]
mod cm_round_tests {
    use super::*;

    /// 16 at once, unless the locked-memory limit holds fewer probes' buffers; never 0.
    #[test]
    fn cm_probes_at_once_fit_the_locked_memory_limit() {
        let t = |size| {
            let mut t = ProbeTarget::new("10.0.0.2", size, 1000);
            t.cm_port = 18517;
            t
        };
        let (small, big) = (t(64), t(1 << 20));
        let many: Vec<&ProbeTarget> = std::iter::repeat_n(&small, 40).collect();
        assert_eq!(cm_at_once(&many, None), 16);
        assert_eq!(cm_at_once(&many[..3], None), 3);
        // 8 MiB (systemd's default) holds 127 small probes, 3 of 2 MiB + 64 KiB.
        assert_eq!(cm_at_once(&many, Some(8 << 20)), 16);
        let mixed = [&small, &big, &big, &big, &big, &small];
        assert_eq!(cm_at_once(&mixed, Some(8 << 20)), 3);
        // 64 KiB: one at a time (and that one says why its registration failed).
        assert_eq!(cm_at_once(&mixed, Some(64 << 10)), 1);
        assert_eq!(cm_at_once(&[], None), 1);
    }
}
