//! The verbs of a bandwidth test: RC queue pairs each with one registered buffer of the
//! message size that the peer may write into and read from (as perftest's), and the loop
//! that keeps messages in flight on every queue pair until the test ends.
//!
//! Messages are posted in chains with only the last one signalled (one completion per
//! chain, as perftest's `--cq-mod`); bytes count when their chain completes. At most
//! [`MAX_IN_FLIGHT`] bytes are in flight per queue pair (up to [`DEPTH`] messages): far
//! more than a hardware port's bandwidth-delay product, and little enough that the acks
//! of a slow port (soft-RoCE on a busy host) come back within the retransmission
//! timeout; a test that triggers retransmissions measures them rather than the port. Receives (SEND tests) are all signalled and posted again as they complete.
//! Completions are busy-polled: a bandwidth test owns a core on each side for its
//! duration, as `ib_write_bw` does.

use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;
use rocewatch_plugin_api::{BandwidthOp, BandwidthSide};

use crate::bwproto::QpInfo;
use crate::verbs::{
    connect_rc, create_rc_qp, os_err, post_recv_one, Device, Info, RcSetup, VerbsError,
};

/// Most messages in flight per queue pair (the send queue's size).
pub const DEPTH: u32 = 128;
/// Most bytes in flight per queue pair.
pub const MAX_IN_FLIGHT: u64 = 2 << 20;
/// The retransmission timeout: 4.096 us x 2^18, about 1 s (perftest's default is 14,
/// 67 ms, which a software device on a busy host can exceed without losing anything).
const RETRANSMIT_TIMEOUT: u8 = 18;

/// Messages in flight per queue pair for `size`-byte messages, and messages per chain.
pub fn depth_for(size: u32) -> (u32, u32) {
    let depth = (MAX_IN_FLIGHT / u64::from(size.max(1))).clamp(4, u64::from(DEPTH)) as u32;
    (depth, (depth / 4).max(1))
}
/// How long the messages still in flight at the end may take to complete.
const DRAIN: Duration = Duration::from_secs(5);
/// The interval the peak rate is measured over.
const PEAK_WINDOW: Duration = Duration::from_millis(100);
/// How often the `stop` callback is asked.
const STOP_EVERY: Duration = Duration::from_millis(10);

/// Outstanding RDMA READs per queue pair: 16, or less when the device allows less.
pub fn rd_atomic(dev: &Device) -> u8 {
    // SAFETY: an all-zero attribute is a valid out-buffer.
    let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: ctx is open; attr is valid.
    if unsafe { ibv_query_device(dev.ctx, &mut attr) } != 0 {
        return 1;
    }
    attr.max_qp_rd_atom.clamp(1, 16) as u8
}

/// One queue pair of a test, with its own completion queue and buffer.
pub struct BwQp {
    dev: Arc<Device>,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    mr: *mut ibv_mr,
    buf: Box<[u8]>,
    gid_index: u8,
    pub local: QpInfo,
}

// SAFETY: a queue pair is used by one thread at a time.
unsafe impl Send for BwQp {}

impl BwQp {
    pub fn new(
        dev: Arc<Device>,
        size: u32,
        gid_index: u8,
        gid: [u8; 16],
    ) -> Result<BwQp, VerbsError> {
        let d = dev.name.clone();
        let mut buf = vec![0u8; size.max(1) as usize].into_boxed_slice();
        // SAFETY: ctx is valid; no channel (polled).
        let cq = unsafe {
            ibv_create_cq(
                dev.ctx,
                (2 * DEPTH + 16) as i32,
                ptr::null_mut(),
                ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(os_err(&format!("ibv_create_cq {d}")));
        }
        let qp = match create_rc_qp(&dev, cq, DEPTH) {
            Ok(qp) => qp,
            Err(e) => {
                // SAFETY: created above.
                unsafe { ibv_destroy_cq(cq) };
                return Err(e);
            }
        };
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        // SAFETY: buf outlives the MR (deregistered in Drop before buf is freed).
        let mr = unsafe { __ibv_reg_mr(dev.pd, buf.as_mut_ptr() as *mut _, buf.len(), access, 0) };
        if mr.is_null() {
            // SAFETY: created above.
            unsafe {
                ibv_destroy_qp(qp);
                ibv_destroy_cq(cq);
            }
            return Err(os_err(&format!("ibv_reg_mr {d} ({} bytes)", buf.len())));
        }
        // SAFETY: qp and mr are valid.
        let (qpn, rkey) = unsafe { ((*qp).qp_num, (*mr).rkey) };
        let psn = (qpn.wrapping_mul(2_654_435_761) ^ std::process::id()) & 0x00ff_ffff;
        let addr = buf.as_ptr() as u64;
        Ok(BwQp {
            dev,
            cq,
            qp,
            mr,
            buf,
            gid_index,
            local: QpInfo {
                qpn,
                psn,
                gid,
                rkey,
                addr,
            },
        })
    }

    /// INIT (remote write and read allowed), RTR towards `remote`, RTS; `rd_atomic`
    /// READs may be outstanding each way.
    pub fn connect(&mut self, remote: &QpInfo, rd_atomic: u8) -> Result<(), VerbsError> {
        let peer = Info {
            qpn: remote.qpn,
            psn: remote.psn,
            gid: remote.gid,
        };
        connect_rc(
            self.qp,
            &self.dev,
            self.gid_index,
            self.local.psn,
            &peer,
            RcSetup {
                access: ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
                    | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
                    | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0,
                rd_atomic,
                timeout: RETRANSMIT_TIMEOUT,
                flow_label: 0,
            },
        )
    }

    fn sge(&mut self) -> ibv_sge {
        ibv_sge {
            addr: self.buf.as_mut_ptr() as u64,
            length: self.buf.len() as u32,
            // SAFETY: mr is valid.
            lkey: unsafe { (*self.mr).lkey },
        }
    }

    /// Post one receive of the whole buffer.
    pub fn post_recv(&mut self) -> Result<(), VerbsError> {
        let sge = self.sge();
        post_recv_one(self.qp, &self.dev, sge, 0)
    }

    /// Post a chain of `n` messages of `op` (towards `remote`'s buffer for write and
    /// read), the last one signalled with `wr_id` = `n`.
    fn post_chain(&mut self, op: BandwidthOp, remote: &QpInfo, n: u32) -> Result<(), VerbsError> {
        let mut sge = self.sge();
        let opcode = match op {
            BandwidthOp::Write => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            BandwidthOp::Read => ibv_wr_opcode::IBV_WR_RDMA_READ,
            BandwidthOp::Send => ibv_wr_opcode::IBV_WR_SEND,
        };
        // SAFETY: all-zero work requests are valid; fields set below.
        let mut wrs: Vec<ibv_send_wr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        let base = wrs.as_mut_ptr();
        for (i, wr) in wrs.iter_mut().enumerate() {
            wr.wr_id = u64::from(n);
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = opcode;
            wr.wr.rdma = rdma_t {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            };
            if i + 1 == n as usize {
                wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
            } else {
                // SAFETY: i + 1 < n: inside the vector, which is not moved until the call.
                wr.next = unsafe { base.add(i + 1) };
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: the chain, its sge and qp are valid for the call.
        let r = unsafe { ibv_post_send(self.qp, base, &mut bad) };
        if r != 0 {
            return Err(VerbsError(format!(
                "ibv_post_send ({op}) on {}: {}",
                self.dev.name,
                std::io::Error::from_raw_os_error(r)
            )));
        }
        Ok(())
    }

    /// To the error state: whatever is posted is flushed at once instead of retried, and
    /// the peer's messages are no longer answered.
    pub fn fail(&mut self) -> Result<(), VerbsError> {
        // SAFETY: an all-zero attribute is valid; the state is set below.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_ERR;
        // SAFETY: qp is valid; only the state is modified.
        let r = unsafe { ibv_modify_qp(self.qp, &mut a, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) };
        if r != 0 {
            return Err(VerbsError(format!(
                "ibv_modify_qp to ERR on {}: {}",
                self.dev.name,
                std::io::Error::from_raw_os_error(r)
            )));
        }
        Ok(())
    }

    /// Completions waiting: (messages of send chains completed, receives completed).
    fn poll(&mut self) -> Result<(u64, u64), VerbsError> {
        // SAFETY: all-zero work completions are valid out-buffers.
        let mut wcs: [ibv_wc; 32] = unsafe { std::mem::zeroed() };
        // SAFETY: cq and wcs are valid for 32 entries.
        let n = unsafe { ibv_poll_cq(self.cq, 32, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError(format!(
                "ibv_poll_cq on {} failed",
                self.dev.name
            )));
        }
        let (mut sent, mut received) = (0, 0);
        for wc in wcs.iter().take(n as usize) {
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                // SAFETY: returns a static string.
                let s = unsafe { std::ffi::CStr::from_ptr(ibv_wc_status_str(wc.status)) };
                return Err(VerbsError(format!(
                    "work completion status {} ({}) on {} (vendor error {:#x})",
                    s.to_string_lossy(),
                    wc.status,
                    self.dev.name,
                    wc.vendor_err
                )));
            }
            if wc.opcode & ibv_wc_opcode::IBV_WC_RECV != 0 {
                received += 1;
            } else {
                sent += wc.wr_id;
            }
        }
        Ok((sent, received))
    }
}

impl Drop for BwQp {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once, in dependency order.
        unsafe {
            ibv_destroy_qp(self.qp);
            ibv_dereg_mr(self.mr);
            ibv_destroy_cq(self.cq);
        }
    }
}

/// What one side of a test does.
pub struct Plan {
    pub op: BandwidthOp,
    /// Post messages for this long (`None`: only answer the peer's, e.g. keep receives
    /// posted for its sends).
    pub active_for: Option<Duration>,
    /// Keep receives posted (the peer sends).
    pub receive: bool,
    /// After this side's own messages, keep answering until `stop` says so or this
    /// long has passed.
    pub linger: Duration,
    /// Never run past this, whatever the peer does (the responder's bound).
    pub hard_stop: Instant,
}

/// Post receives on every queue pair before the peer may send.
pub fn prepare(qps: &mut [BwQp], plan: &Plan) -> Result<(), VerbsError> {
    if plan.receive {
        for q in qps.iter_mut() {
            for _ in 0..DEPTH {
                q.post_recv()?;
            }
        }
    }
    Ok(())
}

/// Run `plan` on the connected queue pairs (the peer's in `remotes`, same order); `stop`
/// is asked every few milliseconds, with whether this side's own messages are over
/// (always, for a side that only answers): true ends the run then, an error when they
/// were not over (the peer aborted: nothing this side measured is kept).
pub fn run(
    qps: &mut [BwQp],
    remotes: &[QpInfo],
    size: u32,
    plan: &Plan,
    stop: &mut dyn FnMut(bool) -> bool,
) -> Result<Option<BandwidthSide>, VerbsError> {
    let start = Instant::now();
    let deadline = plan.active_for.map(|d| start + d);
    let (depth, chain) = depth_for(size);
    let mut outstanding = vec![0u32; qps.len()];
    let mut completed: u64 = 0;
    let mut last_completion = start;
    let (mut window_start, mut window_msgs, mut peak_bps) = (start, 0u64, 0f64);
    // The sample, as perftest's duration mode takes it: without the ramp-up and the end.
    let margin = plan
        .active_for
        .map_or(Duration::ZERO, |d| (d / 4).min(Duration::from_secs(2)));
    let (sample_from, sample_to) = (start + margin, deadline.map_or(start, |d| d - margin));
    let mut sample_msgs: u64 = 0;
    let mut next_stop_check = start;
    let mut own_done_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let posting = deadline.is_some_and(|d| now < d);
        if posting {
            for (i, q) in qps.iter_mut().enumerate() {
                while outstanding[i] + chain <= depth {
                    q.post_chain(plan.op, &remotes[i], chain)?;
                    outstanding[i] += chain;
                }
            }
        }
        for (i, q) in qps.iter_mut().enumerate() {
            let (sent, received) = q.poll()?;
            if sent > 0 {
                outstanding[i] = outstanding[i].saturating_sub(sent as u32);
                completed += sent;
                window_msgs += sent;
                last_completion = Instant::now();
                if last_completion >= sample_from && last_completion < sample_to {
                    sample_msgs += sent;
                }
            }
            for _ in 0..received {
                q.post_recv()?;
            }
        }
        let now = Instant::now();
        if now.duration_since(window_start) >= PEAK_WINDOW {
            let secs = now.duration_since(window_start).as_secs_f64();
            if posting {
                peak_bps = peak_bps.max((window_msgs * u64::from(size) * 8) as f64 / secs);
            }
            window_start = now;
            window_msgs = 0;
        }
        if now >= plan.hard_stop {
            break;
        }
        let in_flight: u32 = outstanding.iter().sum();
        if let Some(d) = deadline {
            if now >= d && in_flight > 0 && now >= d + DRAIN {
                return Err(VerbsError(format!(
                    "{in_flight} messages still in flight {DRAIN:?} after the end of the test"
                )));
            }
        }
        let own_done = deadline.is_none() || !(posting || in_flight > 0);
        if now >= next_stop_check {
            next_stop_check = now + STOP_EVERY;
            if stop(own_done) {
                if own_done {
                    break;
                }
                return Err(VerbsError(
                    "ended by the side channel before this side's messages were over".into(),
                ));
            }
        }
        if !own_done {
            continue;
        }
        // This side's own messages are done (or it only answers): linger for the peer.
        let done_at = *own_done_at.get_or_insert(now);
        if deadline.is_some() && now >= done_at + plan.linger {
            break;
        }
        if deadline.is_none() && !plan.receive {
            // Nothing to answer (the peer writes or reads this side's memory): sleep, and
            // leave the CPU to the device (soft-RoCE does its work on the host's CPUs).
            std::thread::sleep(STOP_EVERY);
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(deadline.map(|_| {
        let seconds = last_completion.duration_since(start).as_secs_f64();
        let bytes = completed * u64::from(size);
        let average = if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds
        } else {
            0.0
        };
        let sample_secs = sample_to
            .saturating_duration_since(sample_from)
            .as_secs_f64();
        BandwidthSide {
            bytes,
            messages: completed,
            seconds,
            peak_bps: if peak_bps > 0.0 { peak_bps } else { average },
            average_bps: if sample_secs > 0.0 && sample_msgs > 0 {
                (sample_msgs * u64::from(size) * 8) as f64 / sample_secs
            } else {
                average
            },
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_bytes_are_bounded_and_chains_keep_four_in_flight() {
        assert_eq!(depth_for(65536), (32, 8));
        assert_eq!(depth_for(64), (128, 32));
        assert_eq!(depth_for(64 << 20), (4, 1));
        assert_eq!(depth_for(0), (128, 32));
    }
}
