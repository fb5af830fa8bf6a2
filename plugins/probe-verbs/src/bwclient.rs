//! The prober's side of a bandwidth test: ask the responder over the side channel, set up
//! the queue pairs, post for the duration, then collect the responder's report.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_plugin_api::{BandwidthOp, BandwidthRequest, BandwidthResult, PluginError};

use crate::bwproto::{self, Answer, Hello, Report, DONE, MAX_QPS};
use crate::bwverbs::{self, BwQp, Plan, DEPTH};
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

/// Run the test of `req` against its peer's responder.
pub(crate) fn run(setup: &Setup, req: &BandwidthRequest) -> Result<BandwidthResult, PluginError> {
    check(req)?;
    let peer = &req.peer;
    let failed = |m: String| PluginError::Failed(m);
    let timeout = Duration::from_millis(req.timeout_ms.max(1));
    let (mut tcp, (idx, gid)) = open_channel(setup, peer, timeout)
        .map_err(|cause| failed(format!("cannot reach the responder at {peer}: {cause}")))?;
    let hello = Hello {
        op: req.op,
        bidirectional: req.bidirectional,
        size: req.size,
        qps: req.qps,
        duration_ms: req.duration_ms as u32,
    };
    let channel = |e: bwproto::ProtoError| failed(format!("bandwidth test with {peer}: {e}"));
    tcp.write_all(&hello.encode())
        .map_err(|e| channel(e.into()))?;
    // Setting up many queue pairs takes the responder a while.
    tcp.set_read_timeout(Some(timeout.max(Duration::from_secs(10))))
        .ok();
    let remotes = match Answer::read(&mut tcp, req.qps).map_err(channel)? {
        Answer::Refused(why) => {
            return Err(failed(format!(
                "peer {peer} refused the bandwidth test: {why}"
            )))
        }
        Answer::Accepted(r) => r,
    };
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
    let ran = bwverbs::run(&mut qps, &remotes, req.size, &plan, &mut || false);
    // Whatever happened, tell the responder and hear what it saw.
    let _ = tcp.write_all(&[DONE]);
    tcp.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let report = Report::read(&mut tcp);
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
        depth: DEPTH,
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
}
