//! The schedules: every collector on its own interval with jitter (a fleet does not read
//! and export in lockstep), discovery on its own; a slow collector skips ticks, never
//! bursts.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rocewatch_plugin_api::PluginKind;
use tokio::sync::watch;

use super::Pipeline;
use crate::host::discovery::Discovery;
use crate::host::registry::Registry;

/// Samples from which a collection's freed memory is given back at once.
pub const BIG_COLLECTION: usize = 10_000;

/// When things run.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Upper bound of each collection's random delay (capped at half the interval).
    pub jitter: Duration,
    /// How often discovery runs again.
    pub discovery_interval: Duration,
}

/// A small xorshift PRNG for jitter (no need for cryptographic randomness here).
struct Jitter(u64);

impl Jitter {
    fn new(seed: &str) -> Self {
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let h = seed.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        Jitter((t ^ h ^ std::process::id() as u64) | 1)
    }

    fn next(&mut self, max: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if max.is_zero() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.0 % max.as_nanos().max(1) as u64)
    }
}

/// Run discovery and every loaded collector of `registry` on their schedules until
/// `shutdown` turns true.
pub async fn run(
    schedule: Schedule,
    registry: Arc<Registry>,
    discovery: Arc<Discovery>,
    pipeline: Arc<Pipeline>,
    shutdown: watch::Receiver<bool>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut sd = shutdown.clone();
    tasks.spawn(async move {
        loop {
            if let Err(e) = discovery.discover().await {
                if !e.is_unsupported() {
                    tracing::warn!("discovery: {e}");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(schedule.discovery_interval) => {}
                _ = sd.wait_for(|stop| *stop) => break,
            }
        }
    });
    for idx in 0..registry.entries.len() {
        let e = &registry.entries[idx];
        if e.kind != Some(PluginKind::Collector) || e.instance.is_none() {
            continue;
        }
        let registry = Arc::clone(&registry);
        let pipeline = Arc::clone(&pipeline);
        let mut sd = shutdown.clone();
        tasks.spawn(async move {
            let e = &registry.entries[idx];
            let interval = e.interval;
            let mut jitter = Jitter::new(&e.name);
            let mut next = tokio::time::Instant::now();
            loop {
                let at = next + jitter.next(schedule.jitter.min(interval / 2));
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = sd.wait_for(|stop| *stop) => break,
                }
                let big = pipeline
                    .collect_from(e)
                    .await
                    .is_ok_and(|c| c.result.samples.len() >= BIG_COLLECTION);
                // What a large collection built and dropped goes back to the system now,
                // not at some later allocation (resident memory of large hosts); off the
                // async worker. Small hosts keep their pages for the next collection.
                if big {
                    tokio::task::spawn_blocking(crate::util::memory::release_freed);
                }
                next += interval;
                let now = tokio::time::Instant::now();
                if next < now {
                    next = now; // fell behind (slow plugin): skip, never burst
                }
            }
        });
    }
    let mut shutdown = shutdown;
    // wait_for, not changed: a stop that came before this point is not missed.
    let _ = shutdown.wait_for(|stop| *stop).await;
    tasks.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_bounds() {
        let mut j = Jitter::new("x");
        for _ in 0..1000 {
            assert!(j.next(Duration::from_millis(100)) < Duration::from_millis(100));
        }
        assert_eq!(j.next(Duration::ZERO), Duration::ZERO);
    }
}
