//! The path applications take: a connection through the RDMA connection manager
//! (librdmacm), as `rping` makes it: `rdma_resolve_addr` → `rdma_resolve_route` →
//! `rdma_connect` → one RC send/receive ping-pong → `rdma_disconnect`. Each step that
//! fails is named by [`crate::cm_outcome`]; the RTT is the ping-pong's alone.
//!
//! The listener (`serve_cm`) binds a port on every address, accepts each connection
//! (the prober's message size in the request's private data, 4 bytes, network order),
//! echoes every message back, and tears the connection down when the prober disconnects
//! or after [`CONN_IDLE`] without a message; it holds at most [`MAX_CONNS`] at once.
//! One thread, asleep in `poll` on the event channel and the connections' completion
//! channels.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::ptr;
use std::time::{Duration, Instant};

use rdma_sys::*;
use rocewatch_plugin_api::{CmConnection, ProbeOutcome};

use crate::cm_outcome::{call_failed, event, event_outcome, Stage};
use crate::memlock::{memlock_cause, memlock_limit};
use crate::post::{post_recv_raw, post_send_raw};

/// `RDMA_OPTION_ID` and `RDMA_OPTION_ID_TOS` (`rdma/rdma_cma.h`).
const OPTION_ID: i32 = 0;
const OPTION_ID_TOS: i32 = 0;
/// The largest message the listener takes.
pub const MAX_SIZE: u32 = 1 << 20;
/// The most connections the listener holds at once (each up to 2 MiB of registered
/// buffer): one more is refused, so that anyone who can reach the port cannot pin the
/// host's memory by opening connections and never closing them.
pub const MAX_CONNS: usize = 64;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn errno_msg(what: &str) -> String {
    let e = errno();
    format!(
        "{what}: {}{}",
        std::io::Error::from_raw_os_error(e),
        memlock_cause(e, memlock_limit())
    )
}

/// A `sockaddr_storage` of `addr`.
fn sockaddr_of(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: an all-zero sockaddr_storage is valid; the family's fields are set below.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as u16;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as u16;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
        }
    }
    ss
}

/// The peer's address and the CM port.
fn resolve(peer: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = peer.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (peer, port)
        .to_socket_addrs()
        .map_err(|e| format!("address: {peer}: {e}"))?
        .next()
        .ok_or_else(|| format!("address: {peer} has no address"))
}

/// An event channel, destroyed on drop.
struct Channel(*mut rdma_event_channel);

impl Channel {
    fn new() -> Result<Channel, String> {
        // SAFETY: no arguments; null on failure.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            return Err(errno_msg(
                "connection error: rdma_create_event_channel (is /dev/infiniband/rdma_cm there? modprobe rdma_ucm)",
            ));
        }
        Ok(Channel(ch))
    }

    fn fd(&self) -> i32 {
        // SAFETY: the channel is open while it lives.
        unsafe { (*self.0).fd }
    }

    /// The next event, within `deadline`: (event, status, id, private data).
    fn next(&self, deadline: Instant) -> Option<Event> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut p = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            // A signal (EINTR) is not the deadline: wait out the rest.
            if n < 0 && errno() == libc::EINTR && !left.is_zero() {
                continue;
            }
            if n <= 0 {
                return None;
            }
            return self.take();
        }
    }

    /// An event that is waiting (the descriptor was readable).
    fn take(&self) -> Option<Event> {
        let mut ev: *mut rdma_cm_event = ptr::null_mut();
        // SAFETY: the channel is open; the event is copied, then acknowledged.
        unsafe {
            if rdma_get_cm_event(self.0, &mut ev) != 0 || ev.is_null() {
                return None;
            }
            let e = &*ev;
            let private = if e.event == event::CONNECT_REQUEST {
                let c = &e.param.conn;
                if c.private_data.is_null() || c.private_data_len < 4 {
                    None
                } else {
                    let b = std::slice::from_raw_parts(c.private_data as *const u8, 4);
                    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                }
            } else {
                None
            };
            let out = Event {
                kind: e.event,
                status: e.status,
                id: e.id,
                size: private,
            };
            rdma_ack_cm_event(ev);
            Some(out)
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: every id on it was destroyed first (Conn's Drop).
        unsafe { rdma_destroy_event_channel(self.0) };
    }
}

struct Event {
    kind: u32,
    status: i32,
    id: *mut rdma_cm_id,
    /// A connection request's message size.
    size: Option<u32>,
}

/// A connection's verbs resources on its id: PD, completion channel and queue, QP, MR.
struct Conn {
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    comp: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    mr: *mut ibv_mr,
    buf: Box<[u8]>,
    size: usize,
    qp: bool,
}

impl Conn {
    /// The id alone (resources come with [`Conn::attach`]).
    fn bare(id: *mut rdma_cm_id) -> Conn {
        Conn {
            id,
            pd: ptr::null_mut(),
            comp: ptr::null_mut(),
            cq: ptr::null_mut(),
            mr: ptr::null_mut(),
            buf: Box::new([]),
            size: 0,
            qp: false,
        }
    }

    /// A PD, a completion queue on a non-blocking channel, an RC queue pair on the id,
    /// and a registered buffer of `size` to send from and `size` to receive into.
    fn attach(&mut self, size: usize) -> Result<(), String> {
        // SAFETY: the id has a device once its address is resolved (or it came with a
        // connection request); each resource is checked and freed in Drop.
        unsafe {
            let verbs = (*self.id).verbs;
            if verbs.is_null() {
                return Err("connection error: the CM id has no RDMA device".into());
            }
            self.pd = ibv_alloc_pd(verbs);
            if self.pd.is_null() {
                return Err(errno_msg("QP: ibv_alloc_pd"));
            }
            self.comp = ibv_create_comp_channel(verbs);
            if self.comp.is_null() {
                return Err(errno_msg("QP: ibv_create_comp_channel"));
            }
            let fd = (*self.comp).fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            self.cq = ibv_create_cq(verbs, 8, ptr::null_mut(), self.comp, 0);
            if self.cq.is_null() {
                return Err(errno_msg("QP: ibv_create_cq"));
            }
            let mut init: ibv_qp_init_attr = std::mem::zeroed();
            init.send_cq = self.cq;
            init.recv_cq = self.cq;
            init.qp_type = ibv_qp_type::IBV_QPT_RC;
            init.cap.max_send_wr = 4;
            init.cap.max_recv_wr = 4;
            init.cap.max_send_sge = 1;
            init.cap.max_recv_sge = 1;
            if rdma_create_qp(self.id, self.pd, &mut init) != 0 {
                return Err(errno_msg("QP: rdma_create_qp"));
            }
            self.qp = true;
            self.size = size.max(1);
            self.buf = vec![0u8; 2 * self.size].into_boxed_slice();
            self.mr = __ibv_reg_mr(
                self.pd,
                self.buf.as_mut_ptr() as *mut _,
                self.buf.len(),
                ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0,
                0,
            );
            if self.mr.is_null() {
                return Err(errno_msg("QP: ibv_reg_mr"));
            }
        }
        self.post_recv()
    }

    fn sge(&self, at: usize, len: usize) -> ibv_sge {
        // SAFETY: mr is registered over buf.
        ibv_sge {
            addr: self.buf.as_ptr() as u64 + at as u64,
            length: len as u32,
            lkey: unsafe { (*self.mr).lkey },
        }
    }

    fn post_recv(&mut self) -> Result<(), String> {
        let sge = self.sge(self.size, self.size);
        // SAFETY: the id's live QP; sge names the registered buffer's receive half.
        unsafe { post_recv_raw((*self.id).qp, sge, 2) }
            .map_err(|e| format!("QP: ibv_post_recv: {e}"))
    }

    /// Send `len` bytes of the send half.
    fn post_send(&mut self, len: usize) -> Result<(), String> {
        let sge = self.sge(0, len.min(self.size));
        // SAFETY: as post_recv.
        unsafe { post_send_raw((*self.id).qp, sge, 1) }
            .map_err(|e| format!("QP: ibv_post_send: {e}"))
    }

    /// Completions waiting: (wr_id, byte_len) of each, or the failed one's status.
    fn poll(&mut self) -> Result<Vec<(u64, u32)>, String> {
        let mut out = Vec::new();
        loop {
            // SAFETY: an all-zero work completion is a valid out-buffer; cq is live.
            let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
            let n = unsafe { ibv_poll_cq(self.cq, 1, &mut wc) };
            if n < 0 {
                return Err("QP: ibv_poll_cq failed".into());
            }
            if n == 0 {
                return Ok(out);
            }
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                // SAFETY: a static string.
                let s = unsafe { std::ffi::CStr::from_ptr(ibv_wc_status_str(wc.status)) };
                return Err(format!(
                    "broken: work completion status {} ({}) after the connection was established",
                    s.to_string_lossy(),
                    wc.status
                ));
            }
            out.push((wc.wr_id, wc.byte_len));
        }
    }

    /// Arm the queue and drain its channel's events (non-blocking).
    fn rearm(&self) {
        self.ack_cq_events();
        // SAFETY: cq is live once attached.
        unsafe {
            ibv_req_notify_cq(self.cq, 0);
        }
    }

    /// Take and acknowledge every event waiting on the completion channel, if there is
    /// one; it is non-blocking, so this returns once none is left.
    fn ack_cq_events(&self) {
        if self.comp.is_null() {
            return;
        }
        loop {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: comp is a live completion channel, made non-blocking in `attach`;
            // ibv_get_cq_event fills the two out-pointers or fails, and each event taken
            // is acknowledged once, on the CQ it names (Drop calls this before it destroys
            // the CQ).
            unsafe {
                if ibv_get_cq_event(self.comp, &mut cq, &mut ctx) != 0 {
                    break;
                }
                ibv_ack_cq_events(cq, 1);
            }
        }
    }

    fn comp_fd(&self) -> i32 {
        // SAFETY: comp is live once attached.
        unsafe { (*self.comp).fd }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // SAFETY: each resource freed once, QP before CQ, events acknowledged before the
        // CQ goes, the id last.
        unsafe {
            if self.qp {
                rdma_destroy_qp(self.id);
            }
            if !self.mr.is_null() {
                ibv_dereg_mr(self.mr);
            }
            self.ack_cq_events();
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.comp.is_null() {
                ibv_destroy_comp_channel(self.comp);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            rdma_destroy_id(self.id);
        }
    }
}

/// Wait for the event that moves `stage` on; the cause otherwise.
fn expect(
    ch: &Channel,
    stage: Stage,
    deadline: Instant,
    peer: &str,
    port: u16,
) -> Result<(), String> {
    match ch.next(deadline) {
        None => Err(match stage {
            Stage::Address => format!("address: no answer resolving {peer} in time"),
            Stage::Route => format!("route: no route to {peer} resolved in time"),
            _ => format!(
                "unreachable: no answer to the connection request to {peer} port {port} in time"
            ),
        }),
        Some(e) => event_outcome(stage, e.kind, e.status, peer, port),
    }
}

/// One probe over RDMA CM: connect to `peer`'s listener on `port`, one `size`-byte
/// ping-pong, disconnect. `tos`: the connection's type of service (else the device's
/// configfs default applies). With the outcome, where the CM put the connection, once
/// its route was resolved.
pub fn cm_probe(
    peer: &str,
    port: u16,
    size: u32,
    timeout: Duration,
    tos: Option<u8>,
) -> (ProbeOutcome, Option<CmConnection>) {
    let mut at = None;
    let outcome = match cm_probe_inner(peer, port, size.clamp(1, MAX_SIZE), timeout, tos, &mut at) {
        Ok(Some(rtt)) => ProbeOutcome::Ok { rtt_seconds: rtt },
        Ok(None) => ProbeOutcome::Timeout,
        Err(cause) => ProbeOutcome::ConnectFailed { cause },
    };
    (outcome, at)
}

/// The device and port the CM bound `id` to and its route's traffic class (the ToS the
/// connection carries: `cma_resolve_iboe_route` sets it from the id's ToS, else the
/// port's `default_roce_tos`).
fn connection_of(id: *mut rdma_cm_id, tos: Option<u8>) -> Option<CmConnection> {
    // SAFETY: a live id whose route is resolved: its context and path records are
    // librdmacm's, read only here.
    unsafe {
        let id = &*id;
        if id.verbs.is_null() || id.route.path_rec.is_null() || id.route.num_paths < 1 {
            return None;
        }
        let name = ibv_get_device_name((*id.verbs).device);
        (!name.is_null()).then(|| CmConnection {
            device: std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned(),
            port: id.port_num,
            tos: (*id.route.path_rec).traffic_class,
            tos_set: tos.is_some(),
        })
    }
}

fn cm_probe_inner(
    peer: &str,
    port: u16,
    size: u32,
    timeout: Duration,
    tos: Option<u8>,
    at: &mut Option<CmConnection>,
) -> Result<Option<f64>, String> {
    let deadline = Instant::now() + timeout;
    // The CM's own resolution timeouts end before the probe's: its ADDR_ERROR or
    // ROUTE_ERROR, with the status that says why, comes in time to be read.
    let ms = (timeout.as_millis() * 2 / 3).clamp(1, i32::MAX as u128) as i32;
    let dst = resolve(peer, port)?;
    let ch = Channel::new()?;
    let mut id: *mut rdma_cm_id = ptr::null_mut();
    // SAFETY: the channel is open; id is an out-pointer.
    if unsafe { rdma_create_id(ch.0, &mut id, ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) } != 0
    {
        return Err(errno_msg("connection error: rdma_create_id"));
    }
    let mut conn = Conn::bare(id);
    if let Some(mut t) = tos {
        // SAFETY: a one-byte option on a live id.
        if unsafe { rdma_set_option(id, OPTION_ID, OPTION_ID_TOS, &mut t as *mut u8 as *mut _, 1) }
            != 0
        {
            return Err(errno_msg("connection error: rdma_set_option TOS"));
        }
    }
    let mut ss = sockaddr_of(dst);
    // SAFETY: a sockaddr_storage holding the destination, live for the call.
    if unsafe { rdma_resolve_addr(id, ptr::null_mut(), &mut ss as *mut _ as *mut _, ms) } != 0 {
        return Err(call_failed(Stage::Address, errno(), peer));
    }
    expect(&ch, Stage::Address, deadline, peer, port)?;
    // SAFETY: the id's address is resolved.
    if unsafe { rdma_resolve_route(id, ms) } != 0 {
        return Err(call_failed(Stage::Route, errno(), peer));
    }
    expect(&ch, Stage::Route, deadline, peer, port)?;
    *at = connection_of(id, tos);
    conn.attach(size as usize)?;
    let private = size.to_be_bytes();
    // SAFETY: an all-zero connection parameter is valid; the private data lives for
    // the call.
    let mut param: rdma_conn_param = unsafe { std::mem::zeroed() };
    param.private_data = private.as_ptr() as *const _;
    param.private_data_len = 4;
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    // SAFETY: route resolved, QP created on the id.
    if unsafe { rdma_connect(id, &mut param) } != 0 {
        return Err(call_failed(Stage::Connect, errno(), peer));
    }
    expect(&ch, Stage::Connect, deadline, peer, port)?;
    // The ping-pong: send, and the echo back.
    conn.rearm();
    let start = Instant::now();
    conn.post_send(size as usize)?;
    let mut got_reply = None;
    while got_reply.is_none() {
        for (wr, _) in conn.poll()? {
            if wr == 2 {
                got_reply = Some(start.elapsed().as_secs_f64());
            }
        }
        if got_reply.is_some() {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        // Busy for the first 2 ms, then asleep on the completion channel (or a CM
        // event: the peer leaving).
        if start.elapsed() < Duration::from_millis(2) {
            std::hint::spin_loop();
            continue;
        }
        let mut fds = [
            libc::pollfd {
                fd: conn.comp_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: ch.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, left.as_millis().clamp(1, 1000) as i32) };
        if fds[1].revents & libc::POLLIN != 0 {
            if let Some(e) = ch.take() {
                return Err(
                    event_outcome(Stage::Established, e.kind, e.status, peer, port)
                        .err()
                        .unwrap_or_else(|| "broken: an unexpected CM event".into()),
                );
            }
        }
        conn.rearm();
    }
    // SAFETY: connected id.
    unsafe { rdma_disconnect(id) };
    // The DISCONNECTED event, briefly (the id goes either way).
    let _ = ch.next(Instant::now() + Duration::from_millis(200));
    drop(conn);
    drop(ch);
    Ok(got_reply)
}

/// Listen for RDMA CM connections on `port` (every address) and echo every message, on a
/// thread of its own. Errors: the port cannot be bound or listened on.
pub fn serve_cm(port: u16) -> Result<(), String> {
    let ch = Channel::new()?;
    let mut id: *mut rdma_cm_id = ptr::null_mut();
    // SAFETY: as in cm_probe.
    if unsafe { rdma_create_id(ch.0, &mut id, ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) } != 0
    {
        return Err(errno_msg("rdma_create_id"));
    }
    let listen = Conn::bare(id);
    let mut any = sockaddr_of(SocketAddr::new(
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        port,
    ));
    // SAFETY: a sockaddr_storage of [::]:port, live for the call; an IPv6 wildcard takes
    // IPv4 too (AFONLY off by default).
    if unsafe { rdma_bind_addr(id, &mut any as *mut _ as *mut _) } != 0 {
        let mut v4 = sockaddr_of(SocketAddr::new(
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            port,
        ));
        // SAFETY: as above.
        if unsafe { rdma_bind_addr(id, &mut v4 as *mut _ as *mut _) } != 0 {
            return Err(errno_msg(&format!("rdma_bind_addr port {port}")));
        }
    }
    // SAFETY: a bound id.
    if unsafe { rdma_listen(id, 64) } != 0 {
        return Err(errno_msg(&format!("rdma_listen port {port}")));
    }
    let ch = Serving {
        _listen: listen,
        ch,
    };
    std::thread::Builder::new()
        .name(format!("cm-responder-{port}"))
        .spawn(move || {
            // The whole struct moves in (not its fields one by one).
            let whole = ch;
            serve_loop(&whole.ch)
        })
        .map_err(|e| format!("thread: {e}"))?;
    Ok(())
}

/// The listening id and its channel, moved to the serving thread (the id is destroyed
/// before the channel: fields drop in order).
struct Serving {
    _listen: Conn,
    ch: Channel,
}
// SAFETY: the channel and the id are used by the serving thread alone once moved.
unsafe impl Send for Serving {}

/// How long the listener keeps a connection that carries nothing: a prober's connection
/// lives for one ping-pong, so one idle this long belongs to a prober that died or hung
/// (an RC connection without traffic never notices a dead peer), and would otherwise
/// hold one of [`MAX_CONNS`] for good.
/// Longer than the longest probe timeout (60 s), so a live prober is never cut.
pub const CONN_IDLE: Duration = Duration::from_secs(75);

fn serve_loop(ch: &Channel) {
    // Each connection with when it last carried a message (or was accepted).
    let mut conns: Vec<(Conn, Instant)> = Vec::new();
    loop {
        let mut fds = vec![libc::pollfd {
            fd: ch.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        fds.extend(conns.iter().map(|(c, _)| libc::pollfd {
            fd: c.comp_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: valid pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1000) };
        if fds[0].revents & libc::POLLIN != 0 {
            if let Some(e) = ch.take() {
                match e.kind {
                    event::CONNECT_REQUEST => {
                        let mut c = Conn::bare(e.id);
                        let size = e.size.unwrap_or(64).clamp(1, MAX_SIZE) as usize;
                        let ok = conns.len() < MAX_CONNS && c.attach(size).is_ok() && {
                            c.rearm();
                            // SAFETY: an all-zero parameter is valid.
                            let mut p: rdma_conn_param = unsafe { std::mem::zeroed() };
                            p.responder_resources = 1;
                            p.initiator_depth = 1;
                            p.rnr_retry_count = 7;
                            // SAFETY: a connection request's id with its QP.
                            unsafe { rdma_accept(c.id, &mut p) == 0 }
                        };
                        if ok {
                            conns.push((c, Instant::now()));
                        } else {
                            // SAFETY: refuse the request (reason 28 at the prober); the
                            // id is destroyed with `c`.
                            unsafe { rdma_reject(c.id, ptr::null(), 0) };
                        }
                    }
                    event::DISCONNECTED
                    | event::CONNECT_ERROR
                    | event::UNREACHABLE
                    | event::REJECTED
                    | event::DEVICE_REMOVAL => {
                        conns.retain(|(c, _)| c.id != e.id);
                    }
                    _ => {}
                }
            }
        }
        // Echo what came in; a connection whose queue failed goes, and one idle for
        // CONN_IDLE (destroying its id sends the CM's disconnect request).
        conns.retain_mut(|(c, last)| {
            let done = match c.poll() {
                Ok(v) => v,
                Err(_) => return false,
            };
            for (wr, len) in done {
                if wr == 2 {
                    if c.post_recv().is_err() || c.post_send(len as usize).is_err() {
                        return false;
                    }
                    *last = Instant::now();
                }
            }
            c.rearm();
            last.elapsed() < CONN_IDLE
        });
    }
}
