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

use crate::bwend::{End, Ending, Heard, LINGER};
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
    let mut ending = Ending::new(duration);
    let plan = Plan {
        op: h.op,
        active_for: h.bidirectional.then_some(duration),
        receive: h.op == BandwidthOp::Send,
        // The ending decides; these only bound it.
        linger: ending.hard_stop(),
        hard_stop: Instant::now() + ending.hard_stop(),
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
    let began = Instant::now();
    let mut decided = None;
    // What the prober says (done, abort, or its leaving) or its silence ends the test.
    let ran = bwverbs::run(&mut qps, &remotes, h.size, &plan, &mut |own_done| {
        decided = heard_end(&mut tcp, &mut ending, began, own_done);
        decided.is_some()
    });
    // Ended here (an error on this side): the prober's word is still awaited.
    let end = decided.unwrap_or_else(|| await_word(&mut tcp, &mut ending, began));
    if end.releases() {
        // The prober's queue pairs are gone or going: flush this side's at once (one
        // that cannot move is destroyed with the others below all the same).
        for q in &mut qps {
            let _ = q.fail();
        }
    }
    snap.after = snapshot::counters(&policy.root, &dev.name, dev.port);
    let report = Report {
        side: match (&ran, end) {
            (Ok(side), End::Done) => side.clone(),
            _ => None,
        },
        port: Some(snap),
        // Stopped by the prober: nothing went wrong here.
        error: match &ran {
            Err(e) if decided.is_none() => Some(e.to_string()),
            _ => None,
        },
    };
    let sent = conclude(&mut tcp, end, &report);
    drop(qps);
    sent.map_err(from)?;
    match (report.error, end) {
        (Some(e), _) => Err(from(e)),
        (None, End::Done) => Ok(()),
        (None, _) => Err(from(format!("{}: its queue pairs released", end.why()))),
    }
}

/// Whether the test ends now: what the prober said since the last call, read without
/// waiting (the side channel is non-blocking), and the time since it began.
fn heard_end(
    tcp: &mut TcpStream,
    ending: &mut Ending,
    began: Instant,
    own_done: bool,
) -> Option<End> {
    listen(tcp, ending);
    ending.decide(began.elapsed(), own_done)
}

/// The prober's word after this side's run ended by itself, or its silence.
fn await_word(tcp: &mut TcpStream, ending: &mut Ending, began: Instant) -> End {
    loop {
        if let Some(end) = heard_end(tcp, ending, began, true) {
            return end;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The report to a prober still there, written within [`LINGER`].
fn conclude(tcp: &mut TcpStream, end: End, report: &Report) -> Result<(), String> {
    if end == End::Closed {
        return Ok(());
    }
    tcp.set_nonblocking(false).ok();
    tcp.set_write_timeout(Some(LINGER)).ok();
    send(tcp, &report.encode())
}

/// Reads what the prober said since the last call, without waiting (the side channel is
/// non-blocking), into `ending`.
pub(crate) fn listen(tcp: &mut TcpStream, ending: &mut Ending) {
    let mut b = [0u8; 16];
    loop {
        match tcp.read(&mut b) {
            Ok(0) => return ending.hear(Heard::Closed),
            Ok(n) => b[..n]
                .iter()
                .for_each(|&w| ending.hear(Heard::from_byte(w))),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(_) => return ending.hear(Heard::Closed),
        }
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
            says_abort: true,
            size,
            qps,
            duration_ms,
        }
    }

    /// A responder's side channel on loopback once the test began: what ended it, and
    /// how long after the prober's first word (or its leaving).
    fn responder_side() -> (
        std::net::SocketAddr,
        std::thread::JoinHandle<(End, Duration)>,
    ) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let served = std::thread::spawn(move || {
            let (mut tcp, _) = l.accept().unwrap();
            tcp.set_nonblocking(true).unwrap();
            // A test long enough that its silence never ends it here.
            let mut ending = Ending::new(Duration::from_secs(60));
            let began = Instant::now();
            let mut first = None;
            let end = loop {
                if let Some(end) = heard_end(&mut tcp, &mut ending, began, true) {
                    break end;
                }
                let mut b = [0u8; 1];
                if first.is_none()
                    && !matches!(tcp.peek(&mut b), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
                {
                    first = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let after = first.map_or(Duration::ZERO, |t| t.elapsed());
            conclude(&mut tcp, end, &Report::default()).unwrap();
            (end, after)
        });
        (addr, served)
    }

    /// A prober's abort, its leaving, and an older prober's done (it says done whatever
    /// happened) each end the test; the first two within the linger, with the report to
    /// an aborting prober.
    #[test]
    fn an_abort_or_a_close_ends_the_test_at_once_and_an_old_probers_done_still_works() {
        let (addr, served) = responder_side();
        let mut tcp = TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let asked = Instant::now();
        let report = crate::bwclient::finish(&mut tcp, false).expect("a report");
        assert!(asked.elapsed() < LINGER, "{:?}", asked.elapsed());
        assert_eq!(report, Report::default());
        let (end, after) = served.join().unwrap();
        assert_eq!(end, End::Abort);
        assert!(after < LINGER, "{after:?}");

        let (addr, served) = responder_side();
        let tcp = TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(tcp);
        let (end, after) = served.join().unwrap();
        assert_eq!(end, End::Closed);
        assert!(after < LINGER, "{after:?}");

        // Revision 1: b'D', then the report.
        let (addr, served) = responder_side();
        let mut tcp = TcpStream::connect(addr).unwrap();
        tcp.write_all(&[bwproto::DONE]).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(Report::read(&mut tcp), Ok(Report::default()));
        assert_eq!(served.join().unwrap().0, End::Done);
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
