//! The prober's side of a bandwidth test: ask the responder over the side channel, set up
//! the queue pairs, post for the duration, then collect the responder's report.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_plugin_api::{BandwidthOp, BandwidthRequest, BandwidthResult, PluginError};

use crate::bwproto::{self, Answer, Hello, QpInfo, Report, ABORT, DONE, MAX_QPS};
use crate::bwverbs::{self, BwQp, Plan};
use crate::conn::{open_channel, Setup};

/// Whether the request can be sent at all.
pub(crate) fn check(req: &BandwidthRequest) -> Result<(), PluginError> {
    let bad = |m: String| Err(PluginError::InvalidOptions(m));
    if req.qps == 0 || req.qps > MAX_QPS {
        return bad(format!("{} queue pairs: give 1 to {MAX_QPS}", req.qps));
    }
    if req.size == 0 {
        return bad("message size 0: give at least 1 byte".into());
    }
    if req.duration_ms == 0 || req.duration_ms > u64::from(u32::MAX) {
        return bad(format!(
            "duration {} ms: give a positive duration under 49 days",
            req.duration_ms
        ));
    }
    Ok(())
}

/// Send the hello and read the answer: the responder's queue pairs, or its refusal
/// (surfaced verbatim) or what was wrong with its answer.
pub(crate) fn negotiate(
    tcp: &mut TcpStream,
    req: &BandwidthRequest,
    timeout: Duration,
) -> Result<Vec<QpInfo>, PluginError> {
    let peer = &req.peer;
    let hello = Hello {
        op: req.op,
        bidirectional: req.bidirectional,
        says_abort: true,
        size: req.size,
        qps: req.qps,
        duration_ms: req.duration_ms as u32,
    };
    let channel =
        |e: bwproto::ProtoError| PluginError::Failed(format!("bandwidth test with {peer}: {e}"));
    tcp.write_all(&hello.encode())
        .map_err(|e| channel(e.into()))?;
    // Setting up many queue pairs takes the responder a while.
    tcp.set_read_timeout(Some(timeout.max(Duration::from_secs(10))))
        .ok();
    match Answer::read(tcp, req.qps).map_err(channel)? {
        Answer::Refused(why) => Err(PluginError::Failed(format!(
            "peer {peer} refused the bandwidth test: {why}"
        ))),
        Answer::Accepted(r) => Ok(r),
    }
}

/// Tells the responder the test is over (done, or abort when it failed here: the
/// responder then frees its queue pairs at once) and reads what it saw. A test that
/// failed here only waits a moment for that: the sweep or the next test is waiting.
pub(crate) fn finish(tcp: &mut TcpStream, ok: bool) -> Result<Report, bwproto::ProtoError> {
    let _ = tcp.write_all(&[if ok { DONE } else { ABORT }]);
    let wait = if ok { 20 } else { 3 };
    tcp.set_read_timeout(Some(Duration::from_secs(wait))).ok();
    Report::read(tcp)
}

/// Run the test of `req` against its peer's responder.
pub(crate) fn run(setup: &Setup, req: &BandwidthRequest) -> Result<BandwidthResult, PluginError> {
    check(req)?;
    let peer = &req.peer;
    let failed = |m: String| PluginError::Failed(m);
    let timeout = Duration::from_millis(req.timeout_ms.max(1));
    let (mut tcp, (idx, gid)) = open_channel(setup, peer, timeout)
        .map_err(|cause| failed(format!("cannot reach the responder at {peer}: {cause}")))?;
    let remotes = negotiate(&mut tcp, req, timeout)?;
    let channel = |e: bwproto::ProtoError| failed(format!("bandwidth test with {peer}: {e}"));
    let qp_err = |e: crate::verbs::VerbsError| failed(format!("bandwidth test with {peer}: {e}"));
    let mut qps = Vec::with_capacity(remotes.len());
    for _ in 0..req.qps {
        qps.push(BwQp::new(Arc::clone(&setup.dev), req.size, idx, gid).map_err(qp_err)?);
    }
    let duration = Duration::from_millis(req.duration_ms);
    let plan = Plan {
        op: req.op,
        active_for: Some(duration),
        receive: req.bidirectional && req.op == BandwidthOp::Send,
        // The responder's own messages (bidirectional) may still need this side.
        linger: if req.bidirectional {
            Duration::from_millis(1500)
        } else {
            Duration::ZERO
        },
        hard_stop: Instant::now() + duration + Duration::from_secs(30),
    };
    let rd = bwverbs::rd_atomic(&setup.dev);
    for (q, r) in qps.iter_mut().zip(&remotes) {
        q.connect(r, rd).map_err(qp_err)?;
    }
    bwverbs::prepare(&mut qps, &plan).map_err(qp_err)?;
    let infos: Vec<_> = qps.iter().map(|q| q.local).collect();
    tcp.write_all(&bwproto::encode_qps(&infos))
        .map_err(|e| channel(e.into()))?;
    if let Err(why) = bwproto::read_ready(&mut tcp).map_err(channel)? {
        return Err(failed(format!(
            "the responder at {peer} could not set up the test: {why}"
        )));
    }
    let ran = bwverbs::run(&mut qps, &remotes, req.size, &plan, &mut |_| false);
    let report = finish(&mut tcp, ran.is_ok());
    let local = ran
        .map_err(|e| {
            let theirs = match &report {
                Ok(Report { error: Some(r), .. }) => format!(" (the responder says: {r})"),
                _ => String::new(),
            };
            failed(format!("bandwidth test with {peer} failed: {e}{theirs}"))
        })?
        .expect("an active plan measures");
    let (remote, remote_port, remote_error) = match report {
        Ok(r) => (r.side, r.port, r.error),
        Err(e) => (
            None,
            None,
            Some(format!("no report from the responder: {e}")),
        ),
    };
    Ok(BandwidthResult {
        peer: peer.clone(),
        op: req.op,
        size: req.size,
        qps: req.qps,
        depth: bwverbs::depth_for(req.size).0,
        device: setup.dev.name.clone(),
        port: setup.dev.port,
        local,
        remote,
        remote_port,
        remote_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_before_anything_is_sent() {
        let ok = BandwidthRequest {
            peer: "10.0.0.2".into(),
            op: BandwidthOp::Write,
            size: 65536,
            qps: 4,
            duration_ms: 10_000,
            bidirectional: false,
            timeout_ms: 2000,
        };
        assert!(check(&ok).is_ok());
        let e = check(&BandwidthRequest {
            qps: 0,
            ..ok.clone()
        })
        .unwrap_err();
        assert!(e.to_string().contains("0 queue pairs"), "{e}");
        let e = check(&BandwidthRequest {
            size: 0,
            ..ok.clone()
        })
        .unwrap_err();
        assert!(e.to_string().contains("size 0"), "{e}");
        let e = check(&BandwidthRequest {
            duration_ms: 0,
            ..ok
        })
        .unwrap_err();
        assert!(e.to_string().contains("duration 0 ms"), "{e}");
    }

    /// A responder on loopback that reads the hello and answers `answer`.
    fn responder(answer: Vec<u8>) -> std::net::SocketAddr {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut hello = [0u8; bwproto::HELLO_LEN];
            s.read_exact(&mut hello).unwrap();
            Hello::decode(&hello).expect("a valid hello");
            s.write_all(&answer).unwrap();
        });
        addr
    }

    /// A revision 1 responder took any byte after the test for done and sent its
    /// report: a prober's abort reaches it as one, and the report still comes.
    #[test]
    fn an_abort_is_a_done_to_an_older_responder() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let old = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut done = [0u8; 1];
            s.read_exact(&mut done).unwrap();
            s.write_all(&Report::default().encode()).unwrap();
            done[0]
        });
        let mut tcp = TcpStream::connect(addr).unwrap();
        assert_eq!(finish(&mut tcp, false), Ok(Report::default()));
        assert_eq!(old.join().unwrap(), ABORT);
    }

    fn request() -> BandwidthRequest {
        BandwidthRequest {
            peer: "10.0.0.2".into(),
            op: BandwidthOp::Send,
            size: 4096,
            qps: 2,
            duration_ms: 1000,
            bidirectional: false,
            timeout_ms: 2000,
        }
    }

    #[test]
    fn a_refusal_is_surfaced_verbatim_and_an_old_responder_named() {
        let t = Duration::from_secs(2);
        let why = "another bandwidth test is running on the responder; try again when it ends";
        let mut tcp = TcpStream::connect(responder(Answer::Refused(why.into()).encode())).unwrap();
        let e = negotiate(&mut tcp, &request(), t).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("peer 10.0.0.2 refused the bandwidth test: {why}")
        );
        // A latency-only responder answers the 28 bytes as a latency prober's.
        let mut old = 4096u32.to_be_bytes().to_vec();
        old.extend([0u8; 24]);
        let mut tcp = TcpStream::connect(responder(old)).unwrap();
        let e = negotiate(&mut tcp, &request(), t).unwrap_err();
        assert!(
            e.to_string().contains("does not serve bandwidth tests"),
            "{e}"
        );
        let q = QpInfo {
            qpn: 1,
            psn: 2,
            gid: [0; 16],
            rkey: 3,
            addr: 4,
        };
        let accepted = Answer::Accepted(vec![q, q]).encode();
        let mut tcp = TcpStream::connect(responder(accepted)).unwrap();
        assert_eq!(negotiate(&mut tcp, &request(), t).unwrap(), vec![q, q]);
    }
}
