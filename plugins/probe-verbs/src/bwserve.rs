//! The responder's side of a bandwidth test: whether it is allowed (the `serve_bandwidth`
//! option, one test at a time, a bounded duration and buffer), the queue pairs, answering
//! the prober's messages (receives for SEND; its own messages too when bidirectional),
//! and the report with this port's counters before and after.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_plugin_api::BandwidthOp;
use rocewatch_sysfs::SysRoot;

use crate::bwproto::{self, Answer, Hello, Report, HELLO_LEN};
use crate::bwverbs::{self, BwQp, Plan};
use crate::conn::GidCache;
use crate::snapshot;
use crate::verbs::Device;

/// The longest test a responder runs.
pub const MAX_DURATION: Duration = Duration::from_secs(60);
/// The largest message a responder accepts, and the most buffer all queue pairs of a test
/// may take together.
pub const MAX_SIZE: u32 = 64 << 20;
pub const MAX_BUFFERS: u64 = 1 << 30;

/// What the responder allows, and whether a test is running.
pub(crate) struct Policy {
    pub(crate) allowed: bool,
    pub(crate) busy: AtomicBool,
    pub(crate) root: SysRoot,
}

/// Clears the busy flag when the test ends, however it ends.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Why a request is refused, if it is (before anything is allocated).
pub(crate) fn refusal(policy: &Policy, h: &Hello) -> Option<String> {
    if !policy.allowed {
        return Some(
            "serve_bandwidth is off on the responder (agent: [probes] serve_bandwidth = true; \
             rocewatch probe --serve allows it unless --no-bandwidth)"
                .into(),
        );
    }
    if u64::from(h.duration_ms) > MAX_DURATION.as_millis() as u64 {
        return Some(format!(
            "a test of {} s is longer than the responder's limit of {} s",
            h.duration_ms as f64 / 1e3,
            MAX_DURATION.as_secs()
        ));
    }
    if h.size > MAX_SIZE || u64::from(h.size) * u64::from(h.qps) > MAX_BUFFERS {
        return Some(format!(
            "{} queue pairs of {} bytes are over the responder's limit ({} bytes per message, {} bytes in all)",
            h.qps, h.size, MAX_SIZE, MAX_BUFFERS
        ));
    }
    None
}

fn send(tcp: &mut TcpStream, b: &[u8]) -> Result<(), String> {
    tcp.write_all(b)
        .map_err(|e| format!("side channel: cannot answer: {e}"))
}

/// Serve one bandwidth test whose hello was read; what went wrong, for the log.
pub(crate) fn serve_test(
    dev: &Arc<Device>,
    gids: &GidCache,
    policy: &Policy,
    mut tcp: TcpStream,
    hello: &[u8; HELLO_LEN],
) -> Result<(), String> {
    let peer = tcp
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "?".into());
    let refuse = |tcp: &mut TcpStream, why: String| -> Result<(), String> {
        send(tcp, &Answer::Refused(why.clone()).encode())?;
        Err(format!("bandwidth test from {peer} refused: {why}"))
    };
    // Every failure in the log names the prober.
    let from = |e: String| format!("bandwidth test from {peer}: {e}");
    let h = match Hello::decode(hello) {
        Ok(h) => h,
        Err(e) => return refuse(&mut tcp, format!("bad request: {e}")),
    };
    if let Some(why) = refusal(policy, &h) {
        return refuse(&mut tcp, why);
    }
    if policy
        .busy
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return refuse(
            &mut tcp,
            "another bandwidth test is running on the responder; try again when it ends".into(),
        );
    }
    let _running = Running(&policy.busy);
    let ip = match tcp.local_addr() {
        Ok(a) => a.ip(),
        Err(e) => return refuse(&mut tcp, format!("the side channel's local address: {e}")),
    };
    let Some((idx, gid)) = gids.get(ip) else {
        return refuse(&mut tcp, format!("no RoCE v2 GID for {ip} on {}", dev.name));
    };
    let mut qps = Vec::with_capacity(h.qps as usize);
    for _ in 0..h.qps {
        match BwQp::new(Arc::clone(dev), h.size, idx, gid) {
            Ok(q) => qps.push(q),
            Err(e) => return refuse(&mut tcp, format!("cannot set up a queue pair: {e}")),
        }
    }
    let infos: Vec<_> = qps.iter().map(|q| q.local).collect();
    send(&mut tcp, &Answer::Accepted(infos).encode()).map_err(from)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let remotes =
        bwproto::read_qps(&mut tcp, h.qps).map_err(|e| from(format!("its queue pairs: {e}")))?;
    let duration = Duration::from_millis(u64::from(h.duration_ms));
    let plan = Plan {
        op: h.op,
        active_for: h.bidirectional.then_some(duration),
        receive: h.op == BandwidthOp::Send,
        linger: duration + Duration::from_secs(15),
        hard_stop: Instant::now() + duration + Duration::from_secs(15),
    };
    let rd = bwverbs::rd_atomic(dev);
    let setup: Result<(), String> = qps
        .iter_mut()
        .zip(&remotes)
        .try_for_each(|(q, r)| q.connect(r, rd))
        .and_then(|_| bwverbs::prepare(&mut qps, &plan))
        .map_err(|e| e.to_string());
    let mut snap = snapshot::begin(&policy.root, &dev.name, dev.port);
    send(&mut tcp, &bwproto::encode_ready(&setup)).map_err(from)?;
    setup.map_err(from)?;
    tcp.set_nonblocking(true).ok();
    // The prober's done message (or its leaving) ends the test.
    let mut stop = || {
        let mut b = [0u8; 1];
        match tcp.peek(&mut b) {
            Ok(_) => true,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    };
    let ran = bwverbs::run(&mut qps, &remotes, h.size, &plan, &mut stop);
    snap.after = snapshot::counters(&policy.root, &dev.name, dev.port);
    tcp.set_nonblocking(false).ok();
    tcp.set_read_timeout(Some(Duration::from_secs(15))).ok();
    let mut done = [0u8; 1];
    let _ = tcp.read_exact(&mut done);
    let report = match ran {
        Ok(side) => Report {
            side,
            port: Some(snap),
            error: None,
        },
        Err(e) => Report {
            side: None,
            port: Some(snap),
            error: Some(e.to_string()),
        },
    };
    let err = report.error.clone();
    send(&mut tcp, &report.encode()).map_err(from)?;
    match err {
        Some(e) => Err(from(e)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allowed: bool) -> Policy {
        Policy {
            allowed,
            busy: AtomicBool::new(false),
            root: SysRoot::new("/nonexistent"),
        }
    }

    fn hello(duration_ms: u32, size: u32, qps: u16) -> Hello {
        Hello {
            op: BandwidthOp::Write,
            bidirectional: false,
            size,
            qps,
            duration_ms,
        }
    }

    #[test]
    fn refusals_say_why() {
        let ok = hello(10_000, 65536, 4);
        assert_eq!(refusal(&policy(true), &ok), None);
        let off = refusal(&policy(false), &ok).unwrap();
        assert!(off.starts_with("serve_bandwidth is off"), "{off}");
        let long = refusal(&policy(true), &hello(61_000, 65536, 4)).unwrap();
        assert!(
            long.contains("61 s is longer than the responder's limit of 60 s"),
            "{long}"
        );
        let big = refusal(&policy(true), &hello(1000, 64 << 20, 64)).unwrap();
        assert!(big.contains("over the responder's limit"), "{big}");
    }
}
