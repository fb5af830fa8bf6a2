//! The verbs part: one RC queue pair per peer, a buffer for one message each way, send
//! and receive, completions polled or awaited through the queue's completion channel
//! (many channels watched with one epoll set).
//!
//! Everything unsafe is here; each call's result is checked and turned into an error that
//! names the verb and the device.

use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

use crate::memlock::{memlock_cause, memlock_limit};
use crate::post::{post_recv_raw, post_send_raw};

/// Why a verbs step failed.
#[derive(Debug)]
pub struct VerbsError(pub String);

impl std::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) fn os_err(what: &str) -> VerbsError {
    let e = std::io::Error::last_os_error();
    let cause = memlock_cause(e.raw_os_error().unwrap_or(0), memlock_limit());
    VerbsError(format!("{what}: {e}{cause}"))
}

/// An open device and its protection domain.
pub struct Device {
    pub(crate) ctx: *mut ibv_context,
    pub(crate) pd: *mut ibv_pd,
    pub name: String,
    pub port: u8,
    pub(crate) active_mtu: ibv_mtu::Type,
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
            let e = std::io::Error::last_os_error();
            // libibverbs says ENOSYS when /sys/class/infiniband is missing: no RDMA
            // driver is loaded at all.
            if e.raw_os_error() == Some(libc::ENOSYS) {
                return Err(VerbsError(format!(
                    "no RDMA device on this host (no RDMA driver loaded: ibv_get_device_list: {e})"
                )));
            }
            return Err(VerbsError(format!("ibv_get_device_list: {e}")));
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

impl Device {
    /// Whether the device timestamps completions: `Ok(())` if it does, else why not.
    pub fn completion_timestamps(&self) -> Result<(), String> {
        // SAFETY: an all-zero attribute is a valid out-buffer.
        let mut attr: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; a null input asks for the default query.
        let r = unsafe { ibv_query_device_ex(self.ctx, ptr::null(), &mut attr) };
        if r != 0 {
            return Err(format!(
                "{}: ibv_query_device_ex failed: {}",
                self.name,
                std::io::Error::from_raw_os_error(r)
            ));
        }
        if attr.completion_timestamp_mask == 0 || attr.hca_core_clock == 0 {
            return Err(format!(
                "{} does not timestamp completions (completion_timestamp_mask {:#x}, hca_core_clock {} kHz)",
                self.name, attr.completion_timestamp_mask, attr.hca_core_clock
            ));
        }
        Ok(())
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

/// A completion channel: a file descriptor that becomes readable when its armed
/// completion queue gets a completion. Each endpoint has its own (non-blocking), so that
/// its events can all be read and acknowledged before its queue is destroyed:
/// `ibv_destroy_cq` waits for every event the kernel reported to be acknowledged, and an
/// event left unread on a shared channel would hang it for ever.
struct CompChannel {
    ptr: *mut ibv_comp_channel,
}

impl CompChannel {
    fn new(dev: &Device) -> Result<CompChannel, VerbsError> {
        // SAFETY: ctx is open.
        let ptr = unsafe { ibv_create_comp_channel(dev.ctx) };
        if ptr.is_null() {
            return Err(os_err(&format!("ibv_create_comp_channel {}", dev.name)));
        }
        let ch = CompChannel { ptr };
        // SAFETY: the descriptor is open; O_NONBLOCK makes ibv_get_cq_event return
        // instead of waiting when no event is there.
        unsafe {
            let fl = libc::fcntl(ch.fd(), libc::F_GETFL);
            libc::fcntl(ch.fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Ok(ch)
    }

    fn fd(&self) -> i32 {
        // SAFETY: the channel is open while it lives.
        unsafe { (*self.ptr).fd }
    }

    /// Read and acknowledge every event waiting; how many there were.
    fn drain(&self) -> usize {
        let mut n = 0;
        loop {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: the channel is open and non-blocking; an event read is acknowledged
            // at once.
            unsafe {
                if ibv_get_cq_event(self.ptr, &mut cq, &mut ctx) != 0 {
                    return n;
                }
                ibv_ack_cq_events(cq, 1);
            }
            n += 1;
        }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: its queue was destroyed first (see Endpoint's Drop).
        unsafe { ibv_destroy_comp_channel(self.ptr) };
    }
}

/// An epoll set of completion channels (and other descriptors), each with a token.
pub struct Epoll {
    fd: i32,
}

impl Epoll {
    pub fn new() -> Result<Epoll, VerbsError> {
        // SAFETY: plain system call.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(os_err("epoll_create1"));
        }
        Ok(Epoll { fd })
    }

    /// Watch `fd` for input, reported as `token` (level-triggered).
    pub fn add(&self, fd: i32, token: u64) -> Result<(), VerbsError> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both descriptors are open; ev is valid for the call.
        if unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            return Err(os_err("epoll_ctl ADD"));
        }
        Ok(())
    }

    pub fn remove(&self, fd: i32) {
        // SAFETY: plain system call; an unknown descriptor is an error we ignore.
        unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_DEL, fd, ptr::null_mut()) };
    }

    /// The tokens of the descriptors ready within `timeout`.
    pub fn wait(&self, timeout: Duration, out: &mut Vec<u64>) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: evs is valid for 64 entries.
        let n = unsafe { libc::epoll_wait(self.fd, evs.as_mut_ptr(), 64, poll_ms(timeout)) };
        for e in evs.iter().take(n.max(0) as usize) {
            out.push(e.u64);
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: opened in new.
        unsafe { libc::close(self.fd) };
    }
}

/// A poll(2) or epoll timeout in milliseconds, rounded up (a 0 ms wait for 300 µs would
/// spin).
pub fn poll_ms(timeout: Duration) -> i32 {
    timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}

/// How an RC queue pair is brought up: the access it grants its peer, the RDMA READs
/// outstanding each way, and the retransmission timeout (4.096 µs × 2^`timeout`).
#[derive(Debug, Clone, Copy)]
pub struct RcSetup {
    pub access: u32,
    pub rd_atomic: u8,
    pub timeout: u8,
    /// The address vector's flow label, from which the device takes the UDP source port
    /// (0: the driver's choice from the queue pair numbers).
    pub flow_label: u32,
}

/// An RC queue pair of `dev` on `cq` (sends and receives), `depth` work requests each
/// way, one scatter/gather entry each.
pub(crate) fn create_rc_qp(
    dev: &Device,
    cq: *mut ibv_cq,
    depth: u32,
) -> Result<*mut ibv_qp, VerbsError> {
    // SAFETY: an all-zero init attribute is valid; the fields are set below.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = ibv_qp_type::IBV_QPT_RC;
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    // SAFETY: pd and init are valid.
    let qp = unsafe { ibv_create_qp(dev.pd, &mut init) };
    if qp.is_null() {
        return Err(os_err(&format!("ibv_create_qp {}", dev.name)));
    }
    Ok(qp)
}

/// Post one receive of `sge` on `qp` (of `dev`), completing with `wr_id`.
pub(crate) fn post_recv_one(
    qp: *mut ibv_qp,
    dev: &Device,
    sge: ibv_sge,
    wr_id: u64,
) -> Result<(), VerbsError> {
    // SAFETY: qp is a live queue pair of dev; sge names its registered memory.
    unsafe { post_recv_raw(qp, sge, wr_id) }
        .map_err(|e| VerbsError(format!("ibv_post_recv on {}: {e}", dev.name)))
}

fn modify_qp(
    qp: *mut ibv_qp,
    dev: &Device,
    attr: &mut ibv_qp_attr,
    mask: ibv_qp_attr_mask,
    what: &str,
) -> Result<(), VerbsError> {
    // SAFETY: qp is a live queue pair of dev and attr is valid for the call.
    let r = unsafe { ibv_modify_qp(qp, attr, mask.0 as i32) };
    if r != 0 {
        return Err(VerbsError(format!(
            "ibv_modify_qp to {what} on {}: {}",
            dev.name,
            std::io::Error::from_raw_os_error(r)
        )));
    }
    Ok(())
}

/// INIT, RTR towards `remote` (its queue pair number, first PSN and GID), RTS from
/// `local_psn`: an RC queue pair `qp` of `dev` whose source GID is `gid_index`.
pub(crate) fn connect_rc(
    qp: *mut ibv_qp,
    dev: &Device,
    gid_index: u8,
    local_psn: u32,
    remote: &Info,
    s: RcSetup,
) -> Result<(), VerbsError> {
    use ibv_qp_attr_mask as M;
    // SAFETY: an all-zero attribute is valid; fields set below (three times).
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = dev.port;
    a.qp_access_flags = s.access;
    modify_qp(
        qp,
        dev,
        &mut a,
        M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
        "INIT",
    )?;
    // SAFETY: as above.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_RTR;
    a.path_mtu = dev.active_mtu;
    a.dest_qp_num = remote.qpn;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = s.rd_atomic;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = dev.port;
    a.ah_attr.grh.dgid = ibv_gid { raw: remote.gid };
    a.ah_attr.grh.sgid_index = gid_index;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.flow_label = s.flow_label & 0xf_ffff;
    modify_qp(
        qp,
        dev,
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
    a.timeout = s.timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = local_psn;
    a.max_rd_atomic = s.rd_atomic;
    modify_qp(
        qp,
        dev,
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

/// One RC queue pair with its completion queue and a registered buffer
/// (`[0, size)` to send, `[size, 2 size)` to receive).
pub struct Endpoint {
    /// Its own completion channel, destroyed after the queue (fields drop after
    /// `Drop::drop`, in this order: the channel before the device it belongs to).
    channel: CompChannel,
    dev: Arc<Device>,
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
    /// A queue pair whose completions raise events (once armed) on its own channel.
    pub fn new(
        dev: Arc<Device>,
        size: usize,
        gid_index: u8,
        gid: [u8; 16],
    ) -> Result<Endpoint, VerbsError> {
        let size = size.max(1);
        let mut buf = vec![0u8; 2 * size].into_boxed_slice();
        let channel = CompChannel::new(&dev)?;
        let d = &dev.name;
        // SAFETY: ctx and channel are valid.
        let cq = unsafe { ibv_create_cq(dev.ctx, 16, ptr::null_mut(), channel.ptr, 0) };
        if cq.is_null() {
            return Err(os_err(&format!("ibv_create_cq {d}")));
        }
        let qp = match create_rc_qp(&dev, cq, 4) {
            Ok(qp) => qp,
            Err(e) => {
                // SAFETY: created above.
                unsafe { ibv_destroy_cq(cq) };
                return Err(e);
            }
        };
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
            }
            return Err(os_err(&format!("ibv_reg_mr {d}")));
        }
        let psn = (std::process::id() ^ (Instant::now().elapsed().subsec_nanos())) & 0x00ff_ffff;
        // SAFETY: qp is valid.
        let qpn = unsafe { (*qp).qp_num };
        Ok(Endpoint {
            channel,
            dev,
            cq,
            qp,
            mr,
            buf,
            size,
            gid_index,
            local: Info { qpn, psn, gid },
        })
    }

    /// INIT, RTR (towards `remote`), RTS: one message each way at a time; the flow
    /// label picks the UDP source port (0: the driver's choice).
    pub fn connect(&mut self, remote: &Info, flow_label: u32) -> Result<(), VerbsError> {
        self.connect_from(self.local.psn, remote, flow_label)
    }

    fn connect_from(
        &mut self,
        local_psn: u32,
        remote: &Info,
        flow_label: u32,
    ) -> Result<(), VerbsError> {
        connect_rc(
            self.qp,
            &self.dev,
            self.gid_index,
            local_psn,
            remote,
            RcSetup {
                access: ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0,
                rd_atomic: 1,
                timeout: 14,
                flow_label,
            },
        )
    }

    /// Move a connected queue pair, with no message in flight, to another flow label
    /// (so another UDP source port) without the peer knowing: RESET, then INIT, RTR and
    /// RTS again with the same queue pair numbers and the sequence numbers where they
    /// stand (`local_psn`: the next this side sends; `remote.psn`: the next it expects).
    pub fn repath(
        &mut self,
        local_psn: u32,
        remote: &Info,
        flow_label: u32,
    ) -> Result<(), VerbsError> {
        // SAFETY: an all-zero attribute is valid; the state is set.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RESET;
        modify_qp(
            self.qp,
            &self.dev,
            &mut a,
            ibv_qp_attr_mask::IBV_QP_STATE,
            "RESET",
        )?;
        self.connect_from(local_psn, remote, flow_label)
    }

    /// Where the queue pair's sequence numbers stand, as the device says: (the next it
    /// sends, the next it expects).
    pub fn psns(&self) -> Result<(u32, u32), VerbsError> {
        // SAFETY: all-zero attributes are valid out-buffers.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = ibv_qp_attr_mask::IBV_QP_SQ_PSN | ibv_qp_attr_mask::IBV_QP_RQ_PSN;
        // SAFETY: qp is a live queue pair; attr and init are valid for the call.
        let r = unsafe { ibv_query_qp(self.qp, &mut attr, mask.0 as i32, &mut init) };
        if r != 0 {
            return Err(VerbsError(format!(
                "ibv_query_qp on {}: {}",
                self.dev.name,
                std::io::Error::from_raw_os_error(r)
            )));
        }
        Ok((attr.sq_psn, attr.rq_psn))
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
        let sge = self.sge(self.size);
        post_recv_one(self.qp, &self.dev, sge, 2)
    }

    /// Post the send buffer (signaled).
    pub fn post_send(&mut self) -> Result<(), VerbsError> {
        let sge = self.sge(0);
        // SAFETY: the endpoint's live QP; sge names its registered buffer.
        unsafe { post_send_raw(self.qp, sge, 1) }
            .map_err(|e| VerbsError(format!("ibv_post_send: {e}")))
    }

    /// Ask for an event on the channel at the next completion (once); false if the
    /// device refused.
    pub fn arm(&self) -> bool {
        // SAFETY: cq is valid.
        unsafe { ibv_req_notify_cq(self.cq, 0) == 0 }
    }

    /// The completion queue's identity (a token for [`Epoll`]).
    pub fn cq_id(&self) -> usize {
        self.cq as usize
    }

    /// The descriptor that becomes readable with an event (for [`Epoll::add`]).
    pub fn event_fd(&self) -> i32 {
        self.channel.fd()
    }

    /// Read and acknowledge the events waiting (an event disarms the queue); how many.
    pub fn take_events(&self) -> usize {
        self.channel.drain()
    }

    /// One completion if there is one: `Ok(Some(wr_id))`, `Ok(None)` when the queue is
    /// empty, `Err` for a failed completion (with its status).
    pub fn poll(&mut self) -> Result<Option<u64>, VerbsError> {
        // SAFETY: an all-zero work completion is a valid out-buffer.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: cq and wc are valid.
        let n = unsafe { ibv_poll_cq(self.cq, 1, &mut wc) };
        if n < 0 {
            return Err(VerbsError("ibv_poll_cq failed".into()));
        }
        if n == 0 {
            return Ok(None);
        }
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            // SAFETY: returns a static string.
            let s = unsafe { std::ffi::CStr::from_ptr(ibv_wc_status_str(wc.status)) };
            return Err(VerbsError(format!(
                "work completion status {} ({})",
                s.to_string_lossy(),
                wc.status
            )));
        }
        Ok(Some(wc.wr_id))
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once, in dependency order. With the queue
        // pair gone no completion (and so no event) can come; the events already
        // reported are acknowledged before the queue is destroyed, which waits for that.
        unsafe {
            ibv_destroy_qp(self.qp);
            self.channel.drain();
            ibv_dereg_mr(self.mr);
            ibv_destroy_cq(self.cq);
        }
    }
}
