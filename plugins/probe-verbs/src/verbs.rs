//! The verbs part: one RC queue pair per peer, a buffer for one message each way, send
//! and receive with completions polled under a deadline.
//!
//! Everything unsafe is here; each call's result is checked and turned into an error that
//! names the verb and the device.

use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

/// Why a verbs step failed.
#[derive(Debug)]
pub struct VerbsError(pub String);

impl std::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn os_err(what: &str) -> VerbsError {
    VerbsError(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// An open device and its protection domain.
pub struct Device {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    pub name: String,
    pub port: u8,
    active_mtu: ibv_mtu::Type,
}

// SAFETY: verbs contexts and PDs are thread-safe objects in libibverbs.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Device {
    /// Open `name` (or the first device) and check `port` is usable.
    pub fn open(name: Option<&str>, port: u8) -> Result<Arc<Device>, VerbsError> {
        let mut n = 0;
        // SAFETY: plain libibverbs call; the list is freed below.
        let list = unsafe { __ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(os_err("ibv_get_device_list"));
        }
        let mut found = None;
        let mut names = Vec::new();
        for i in 0..n as usize {
            // SAFETY: i < n entries of the list.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a device of the list has a NUL-terminated name.
            let dname = unsafe { std::ffi::CStr::from_ptr(ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if found.is_none() && name.is_none_or(|w| w == dname) {
                found = Some((dev, dname.clone()));
            }
            names.push(dname);
        }
        let Some((dev, dname)) = found else {
            // SAFETY: the list came from ibv_get_device_list.
            unsafe { ibv_free_device_list(list) };
            return Err(VerbsError(match name {
                Some(w) => format!("no RDMA device {w:?} (have: {})", names.join(", ")),
                None => "no RDMA device on this host".into(),
            }));
        };
        // SAFETY: dev comes from the live list.
        let ctx = unsafe { ibv_open_device(dev) };
        // SAFETY: the list came from ibv_get_device_list; the context stays valid.
        unsafe { ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(os_err(&format!("ibv_open_device {dname}")));
        }
        // SAFETY: an all-zero port attribute is a valid out-buffer.
        let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; pa is valid.
        if unsafe { ___ibv_query_port(ctx, port, &mut pa) } != 0 {
            // SAFETY: ctx is open.
            unsafe { ibv_close_device(ctx) };
            return Err(os_err(&format!("ibv_query_port {dname} port {port}")));
        }
        // SAFETY: ctx is open.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            // SAFETY: ctx is open.
            unsafe { ibv_close_device(ctx) };
            return Err(os_err(&format!("ibv_alloc_pd {dname}")));
        }
        Ok(Arc::new(Device {
            ctx,
            pd,
            name: dname,
            port,
            active_mtu: pa.active_mtu,
        }))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: created in open; every endpoint holds an Arc, so none is left.
        unsafe {
            ibv_dealloc_pd(self.pd);
            ibv_close_device(self.ctx);
        }
    }
}

/// What the two sides exchange over the side channel: 24 bytes, network order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    pub qpn: u32,
    pub psn: u32,
    pub gid: [u8; 16],
}

impl Info {
    pub fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..4].copy_from_slice(&self.qpn.to_be_bytes());
        b[4..8].copy_from_slice(&self.psn.to_be_bytes());
        b[8..24].copy_from_slice(&self.gid);
        b
    }

    pub fn decode(b: &[u8; 24]) -> Info {
        Info {
            qpn: u32::from_be_bytes(b[0..4].try_into().expect("4 bytes")),
            psn: u32::from_be_bytes(b[4..8].try_into().expect("4 bytes")),
            gid: b[8..24].try_into().expect("16 bytes"),
        }
    }
}

/// One RC queue pair with its completion queue and a registered buffer
/// (`[0, size)` to send, `[size, 2 size)` to receive).
pub struct Endpoint {
    dev: Arc<Device>,
    /// Completion events, so an idle responder sleeps in poll(2) instead of spinning.
    channel: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    mr: *mut ibv_mr,
    buf: Box<[u8]>,
    size: usize,
    gid_index: u8,
    pub local: Info,
}

// SAFETY: the endpoint is used by one thread at a time (it moves between threads).
unsafe impl Send for Endpoint {}

impl Endpoint {
    pub fn new(
        dev: Arc<Device>,
        size: usize,
        gid_index: u8,
        gid: [u8; 16],
    ) -> Result<Endpoint, VerbsError> {
        let size = size.max(1);
        let mut buf = vec![0u8; 2 * size].into_boxed_slice();
        let d = &dev.name;
        // SAFETY: ctx is open.
        let channel = unsafe { ibv_create_comp_channel(dev.ctx) };
        if channel.is_null() {
            return Err(os_err(&format!("ibv_create_comp_channel {d}")));
        }
        // SAFETY: ctx and channel are valid.
        let cq = unsafe { ibv_create_cq(dev.ctx, 16, ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            // SAFETY: created above.
            unsafe { ibv_destroy_comp_channel(channel) };
            return Err(os_err(&format!("ibv_create_cq {d}")));
        }
        // SAFETY: an all-zero init attribute is valid; the fields are set below.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq;
        init.recv_cq = cq;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = 4;
        init.cap.max_recv_wr = 4;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: pd and init are valid.
        let qp = unsafe { ibv_create_qp(dev.pd, &mut init) };
        if qp.is_null() {
            // SAFETY: cq and channel were created above.
            unsafe {
                ibv_destroy_cq(cq);
                ibv_destroy_comp_channel(channel);
            }
            return Err(os_err(&format!("ibv_create_qp {d}")));
        }
        // SAFETY: buf outlives the MR (dropped after dereg in Drop).
        let mr = unsafe {
            __ibv_reg_mr(
                dev.pd,
                buf.as_mut_ptr() as *mut _,
                buf.len(),
                ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0,
                0,
            )
        };
        if mr.is_null() {
            // SAFETY: created above.
            unsafe {
                ibv_destroy_qp(qp);
                ibv_destroy_cq(cq);
                ibv_destroy_comp_channel(channel);
            }
            return Err(os_err(&format!("ibv_reg_mr {d}")));
        }
        let psn = (std::process::id() ^ (Instant::now().elapsed().subsec_nanos())) & 0x00ff_ffff;
        // SAFETY: qp is valid.
        let qpn = unsafe { (*qp).qp_num };
        Ok(Endpoint {
            dev,
            channel,
            cq,
            qp,
            mr,
            buf,
            size,
            gid_index,
            local: Info { qpn, psn, gid },
        })
    }

    fn modify(
        &self,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        what: &str,
    ) -> Result<(), VerbsError> {
        // SAFETY: qp and attr are valid.
        let r = unsafe { ibv_modify_qp(self.qp, attr, mask.0 as i32) };
        if r != 0 {
            return Err(VerbsError(format!(
                "ibv_modify_qp to {what} on {}: {}",
                self.dev.name,
                std::io::Error::from_raw_os_error(r)
            )));
        }
        Ok(())
    }

    /// INIT, RTR (towards `remote`), RTS.
    pub fn connect(&mut self, remote: &Info) -> Result<(), VerbsError> {
        use ibv_qp_attr_mask as M;
        // SAFETY: an all-zero attribute is valid; fields set below.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.dev.port;
        a.qp_access_flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        self.modify(
            &mut a,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "INIT",
        )?;
        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = self.dev.active_mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = self.dev.port;
        a.ah_attr.grh.dgid = ibv_gid { raw: remote.gid };
        a.ah_attr.grh.sgid_index = self.gid_index;
        a.ah_attr.grh.hop_limit = 64;
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "RTR",
        )?;
        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = self.local.psn;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    fn sge(&mut self, offset: usize) -> ibv_sge {
        ibv_sge {
            addr: self.buf[offset..].as_mut_ptr() as u64,
            length: self.size as u32,
            // SAFETY: mr is valid.
            lkey: unsafe { (*self.mr).lkey },
        }
    }

    /// Post the receive buffer.
    pub fn post_recv(&mut self) -> Result<(), VerbsError> {
        let mut sge = self.sge(self.size);
        // SAFETY: an all-zero work request is valid; fields set below.
        let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = 2;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = ptr::null_mut();
        // SAFETY: qp, wr and sge are valid for the call.
        let r = unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) };
        if r != 0 {
            return Err(VerbsError(format!(
                "ibv_post_recv: {}",
                std::io::Error::from_raw_os_error(r)
            )));
        }
        Ok(())
    }

    /// Post the send buffer (signaled).
    pub fn post_send(&mut self) -> Result<(), VerbsError> {
        let mut sge = self.sge(0);
        // SAFETY: an all-zero work request is valid; fields set below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = 1;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        let mut bad = ptr::null_mut();
        // SAFETY: qp, wr and sge are valid for the call.
        let r = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if r != 0 {
            return Err(VerbsError(format!(
                "ibv_post_send: {}",
                std::io::Error::from_raw_os_error(r)
            )));
        }
        Ok(())
    }

    /// Like [`Endpoint::wait`], but sleeping in poll(2) on the completion channel between
    /// completions: for a responder that waits long for the next probe.
    pub fn wait_event(
        &mut self,
        wr_id: u64,
        deadline: Instant,
        pending: &mut Vec<u64>,
    ) -> Result<Option<()>, VerbsError> {
        loop {
            // Arm first, then look: a completion that lands in between is seen by the poll.
            // SAFETY: cq is valid.
            if unsafe { ibv_req_notify_cq(self.cq, 0) } != 0 {
                return Err(VerbsError("ibv_req_notify_cq failed".into()));
            }
            if let Some(done) = self.wait(wr_id, Instant::now(), pending)? {
                return Ok(Some(done));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            // SAFETY: the channel's fd is open while the endpoint lives.
            let mut pfd = libc::pollfd {
                fd: unsafe { (*self.channel).fd },
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: pfd is valid for the call.
            let r =
                unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if r > 0 {
                let mut cq = ptr::null_mut();
                let mut ctx = ptr::null_mut();
                // SAFETY: an event is ready on the channel; it is acknowledged at once.
                unsafe {
                    if ibv_get_cq_event(self.channel, &mut cq, &mut ctx) == 0 {
                        ibv_ack_cq_events(cq, 1);
                    }
                }
            }
        }
    }

    /// Wait for the completion of `wr_id` (1 send, 2 receive) until `deadline`:
    /// `Ok(Some(()))` done, `Ok(None)` timed out, `Err` a failed completion.
    pub fn wait(
        &mut self,
        wr_id: u64,
        deadline: Instant,
        pending: &mut Vec<u64>,
    ) -> Result<Option<()>, VerbsError> {
        if let Some(i) = pending.iter().position(|w| *w == wr_id) {
            pending.remove(i);
            return Ok(Some(()));
        }
        // Busy-poll for the first 5 ms (a reply normally comes well within that, and
        // sleeping would add the timer's granularity to the measured RTT), then poll every
        // 50 µs so an idle responder does not burn a core.
        let spin_until = Instant::now() + Duration::from_millis(5);
        loop {
            // SAFETY: an all-zero work completion is a valid out-buffer.
            let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
            // SAFETY: cq and wc are valid.
            let n = unsafe { ibv_poll_cq(self.cq, 1, &mut wc) };
            if n < 0 {
                return Err(VerbsError("ibv_poll_cq failed".into()));
            }
            if n == 1 {
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    // SAFETY: returns a static string.
                    let s = unsafe { std::ffi::CStr::from_ptr(ibv_wc_status_str(wc.status)) };
                    return Err(VerbsError(format!(
                        "work completion status {} ({})",
                        s.to_string_lossy(),
                        wc.status
                    )));
                }
                if wc.wr_id == wr_id {
                    return Ok(Some(()));
                }
                pending.push(wc.wr_id);
                continue;
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            if Instant::now() > spin_until {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once, in dependency order.
        unsafe {
            ibv_destroy_qp(self.qp);
            ibv_dereg_mr(self.mr);
            ibv_destroy_cq(self.cq);
            ibv_destroy_comp_channel(self.channel);
        }
    }
}
