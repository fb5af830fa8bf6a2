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
//! (run a responder, default true), `busy_poll` (false), `reconnect_backoff` ("30s").
//!
//! A probe reuses the peer's queue pair; a timeout or a failed work completion drops it
//! and the next probe connects again; a peer that cannot be connected is tried again
//! after 1 s, 2 s, ... up to `reconnect_backoff`. A round (`probe_many`) has every peer
//! in flight at once: new peers are connected in parallel (64 at a time), then one
//! message goes to each; the thread busy-polls every queue for 2 ms, then sleeps in one
//! epoll set of the queues' completion channels until each reply is in or its deadline
//! passes. A round forgets the peers it does not name.
//!
//! The responder is two threads whatever the number of probers: one accepts and sets up
//! each prober's queue pair, one answers them all, asleep in one epoll set.
//!
//! Completion timestamps: the device is asked (`ibv_query_device_ex`) whether it
//! timestamps completions, and the first result of a round says what it answered; the
//! NIC-measured split of the RTT is not computed by this version (`nic_timestamps` is
//! `unsupported` with the reason, on every device).

pub mod verbs;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_plugin_api::*;
use rocewatch_plugin_sdk::{export_plugin, ExportPlugin};
use rocewatch_sysfs::SysRoot;

use verbs::{Device, Endpoint, Info};

fn default_port() -> u8 {
    1
}
fn default_tcp_port() -> u16 {
    18516
}
fn default_true() -> bool {
    true
}

/// The plugin's options.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default = "default_port")]
    pub port: u8,
    #[serde(default = "default_tcp_port")]
    pub tcp_port: u16,
    #[serde(default = "default_true")]
    pub serve: bool,
    /// Busy-poll for completions instead of sleeping on completion events (prober and
    /// responder), as perftest does: the lowest, steadiest RTTs for a one-off
    /// measurement, at the price of a busy core. Off by default (the agent's prober
    /// spins 2 ms per round at most, its responder not at all).
    #[serde(default)]
    pub busy_poll: bool,
    /// After a peer could not be connected, wait before trying again: 1 s, doubling up
    /// to this (meanwhile its probes fail with the last cause, saying when the next
    /// attempt is). A dead peer then costs a connection attempt (a thread, a TCP SYN,
    /// its timeout) every `reconnect_backoff`, not every round. `"0s"`: try every time
    /// (`rocewatch probe` does).
    #[serde(default = "default_backoff", deserialize_with = "de_duration")]
    pub reconnect_backoff: Duration,
}

fn default_backoff() -> Duration {
    Duration::from_secs(30)
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    humantime::parse_duration(&s).map_err(serde::de::Error::custom)
}

/// A peer that could not be connected: the last cause, the next attempt, the wait.
struct Backoff {
    cause: String,
    next: Instant,
    wait: Duration,
}

/// When to try connecting a peer again after failures: 1 s, doubling up to `max`.
#[derive(Default)]
struct Reconnects {
    max: Duration,
    peers: HashMap<String, Backoff>,
}

impl Reconnects {
    fn new(max: Duration) -> Self {
        Reconnects {
            max,
            peers: HashMap::new(),
        }
    }

    /// `Err(cause)` while the peer waits for its next attempt.
    fn due(&self, peer: &str, now: Instant) -> Result<(), String> {
        match self.peers.get(peer) {
            Some(b) if b.next > now => Err(format!(
                "{} (next attempt in {:.0?})",
                b.cause,
                b.next.saturating_duration_since(now)
            )),
            _ => Ok(()),
        }
    }

    /// The next attempt after `wait` plus up to a quarter of it, at random: peers that
    /// failed together (a responder restarting, a burst of new peers) do not all come
    /// back in the same instant again.
    fn failed(&mut self, peer: &str, cause: &str, now: Instant) {
        if self.max.is_zero() {
            return;
        }
        let wait = self
            .peers
            .get(peer)
            .map_or(Duration::from_secs(1), |b| b.wait * 2)
            .min(self.max);
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos() as u64
            ^ peer.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            });
        let jitter = (seed % 1000) as f64 / 4000.0;
        self.peers.insert(
            peer.to_string(),
            Backoff {
                cause: cause.to_string(),
                next: now + wait.mul_f64(1.0 + jitter),
                wait,
            },
        );
    }

    fn succeeded(&mut self, peer: &str) {
        self.peers.remove(peer);
    }
}

/// The largest message a responder accepts.
const MAX_SIZE: u32 = 1 << 20;

struct Conn {
    ep: Endpoint,
    _tcp: TcpStream,
    size: u32,
}

/// How many connections are set up at once (each on its own short-lived thread): a round
/// with many new or dead peers costs about `peers / CONNECT_PARALLEL` timeouts, not one
/// per peer.
const CONNECT_PARALLEL: usize = 64;

/// A local GID: its index in the port's table, its bytes.
type LocalGid = (u8, [u8; 16]);

/// The RoCE v2 GID whose address is `ip`.
fn gid_for(root: &SysRoot, dev: &str, port: u8, ip: IpAddr) -> Option<LocalGid> {
    let want = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    root.gids(dev, port as u32).ok()?.into_iter().find_map(|g| {
        let addr: std::net::Ipv6Addr = g.gid.parse().ok()?;
        (addr == want && g.gid_type.as_deref() == Some("RoCE v2"))
            .then(|| (g.index as u8, addr.octets()))
    })
}

fn exchange_info(tcp: &mut TcpStream, size: u32, local: &Info) -> std::io::Result<(u32, Info)> {
    let mut out = [0u8; 28];
    out[0..4].copy_from_slice(&size.to_be_bytes());
    out[4..28].copy_from_slice(&local.encode());
    tcp.write_all(&out)?;
    let mut back = [0u8; 28];
    tcp.read_exact(&mut back)?;
    let size = u32::from_be_bytes(back[0..4].try_into().expect("4 bytes"));
    Ok((
        size,
        Info::decode(back[4..28].try_into().expect("24 bytes")),
    ))
}

/// What connecting needs; shared by the threads that connect at once.
struct Setup {
    opts: Options,
    dev: Arc<Device>,
    /// What the device says about completion timestamps, given with every result.
    timestamps: NicTimestamps,
    gids: Arc<GidCache>,
}

/// How long a local address's GID is used before sysfs is read again.
const GID_TTL: Duration = Duration::from_secs(60);

/// The local GID of each local address, read from sysfs at most every [`GID_TTL`]: a GID
/// table is up to a thousand files (rxe) and every connection, probing or answering,
/// needs one, while peers share a handful of local addresses. Shared by the prober and
/// the responder's setup threads.
struct GidCache {
    root: SysRoot,
    dev: String,
    port: u8,
    map: std::sync::Mutex<HashMap<IpAddr, (Instant, LocalGid)>>,
}

impl GidCache {
    fn new(root: SysRoot, dev: &Device) -> Self {
        GidCache {
            root,
            dev: dev.name.clone(),
            port: dev.port,
            map: Default::default(),
        }
    }

    fn get(&self, ip: IpAddr) -> Option<LocalGid> {
        let mut cache = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, g)) = cache.get(&ip) {
            if at.elapsed() < GID_TTL {
                return Some(*g);
            }
        }
        let g = gid_for(&self.root, &self.dev, self.port, ip)?;
        cache.insert(ip, (Instant::now(), g));
        Some(g)
    }
}

/// The probe plugin.
#[derive(Default)]
pub struct VerbsProbe {
    setup: Option<Arc<Setup>>,
    conns: HashMap<String, Conn>,
    /// The connected peers' completion channels (token: the queue's id), and which peer
    /// each token is.
    epoll: Option<verbs::Epoll>,
    tokens: HashMap<u64, String>,
    backoff: Reconnects,
    serving: bool,
}

fn connect(setup: &Setup, peer: &str, size: u32, timeout: Duration) -> Result<Conn, String> {
    let dev = Arc::clone(&setup.dev);
    let addr: SocketAddr = (peer, setup.opts.tcp_port)
        .to_socket_addrs()
        .map_err(|e| format!("address resolution: {peer}: {e}"))?
        .next()
        .ok_or_else(|| format!("address resolution: {peer}: no address"))?;
    let mut tcp = TcpStream::connect_timeout(&addr, timeout).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("rejected: no responder on {addr} (connection refused)")
        }
        std::io::ErrorKind::TimedOut => {
            format!("route: {addr} did not answer within {timeout:?}")
        }
        _ => format!("route: {addr}: {e}"),
    })?;
    tcp.set_read_timeout(Some(timeout)).ok();
    tcp.set_nodelay(true).ok();
    let ip = tcp.local_addr().map_err(|e| format!("route: {e}"))?.ip();
    let (idx, gid) = setup.gids.get(ip).ok_or_else(|| {
        format!(
            "address resolution: no RoCE v2 GID for {ip} on {} port {}",
            dev.name, dev.port
        )
    })?;
    let mut ep = Endpoint::new(dev, size as usize, idx, gid).map_err(|e| format!("QP: {e}"))?;
    let (_, remote) = exchange_info(&mut tcp, size, &ep.local).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("rejected: the responder did not answer on the side channel within {timeout:?}")
        }
        _ => format!("rejected: the responder closed the side channel: {e}"),
    })?;
    ep.connect(&remote).map_err(|e| format!("QP: {e}"))?;
    Ok(Conn {
        ep,
        _tcp: tcp,
        size,
    })
}

/// Connect to the targets at `idx`, [`CONNECT_PARALLEL`] at a time.
fn connect_all(
    setup: &Setup,
    targets: &[ProbeTarget],
    idx: &[usize],
) -> Vec<(usize, Result<Conn, String>)> {
    let mut out = Vec::with_capacity(idx.len());
    for chunk in idx.chunks(CONNECT_PARALLEL) {
        std::thread::scope(|sc| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&i| {
                    let t = &targets[i];
                    let h = std::thread::Builder::new()
                        .name("probe-connect".into())
                        .stack_size(256 * 1024)
                        .spawn_scoped(sc, move || connect(setup, &t.peer, t.size, timeout_of(t)));
                    (i, h)
                })
                .collect();
            for (i, h) in handles {
                let r = match h {
                    Ok(h) => h
                        .join()
                        .unwrap_or_else(|_| Err("QP: the connecting thread panicked".into())),
                    // No thread: connect here instead.
                    Err(_) => connect(
                        setup,
                        &targets[i].peer,
                        targets[i].size,
                        timeout_of(&targets[i]),
                    ),
                };
                out.push((i, r));
            }
        });
    }
    out
}

fn timeout_of(t: &ProbeTarget) -> Duration {
    Duration::from_millis(t.timeout_ms.max(1))
}

/// One probe in flight.
struct Flight {
    /// Index into the targets.
    i: usize,
    t0: Instant,
    deadline: Instant,
    sent: bool,
    answered: Option<Duration>,
    /// Its queue will raise an event on the channel at the next completion.
    armed: bool,
}

/// What polling a flight's queue found.
enum Step {
    Waiting,
    Done(ProbeOutcome),
}

impl Flight {
    /// Drain the queue's completions; done when the reply is in and the send completed
    /// (so no completion of this probe is left to confuse the next one), or at the
    /// deadline.
    fn step(&mut self, ep: &mut Endpoint, now: Instant) -> Step {
        loop {
            match ep.poll() {
                Ok(Some(1)) => self.sent = true,
                Ok(Some(_)) => self.answered = Some(self.t0.elapsed()),
                Ok(None) => break,
                Err(e) => {
                    return Step::Done(ProbeOutcome::ConnectFailed {
                        cause: format!("QP error: {e}"),
                    })
                }
            }
            // A completion disarms the queue.
            self.armed = false;
        }
        match (self.sent, self.answered) {
            (true, Some(rtt)) => Step::Done(ProbeOutcome::Ok {
                rtt_seconds: rtt.as_secs_f64(),
            }),
            _ if now >= self.deadline => Step::Done(ProbeOutcome::Timeout),
            _ => Step::Waiting,
        }
    }
}

impl VerbsProbe {
    fn add_conn(&mut self, peer: &str, c: Conn) {
        let token = c.ep.cq_id() as u64;
        if let Some(ep) = &self.epoll {
            if let Err(e) = ep.add(c.ep.event_fd(), token) {
                // Without it the queue is looked at on deadlines only: slower, not wrong.
                eprintln!("rocewatch probe: {e}");
            }
        }
        self.tokens.insert(token, peer.to_string());
        if let Some(old) = self.conns.insert(peer.to_string(), c) {
            self.forget_conn(old);
        }
    }

    fn drop_conn(&mut self, peer: &str) {
        if let Some(c) = self.conns.remove(peer) {
            self.forget_conn(c);
        }
    }

    fn forget_conn(&mut self, c: Conn) {
        if let Some(ep) = &self.epoll {
            ep.remove(c.ep.event_fd());
        }
        self.tokens.remove(&(c.ep.cq_id() as u64));
    }

    /// Ping every connected target at once: post a receive and a send on each, then wait
    /// for every reply (or deadline). The first 2 ms busy-poll every queue (replies
    /// normally come well within that, and a wake-up would add its latency to the RTT);
    /// after that each waiting queue is armed and the thread sleeps in the epoll set of
    /// the queues' completion channels, polling only the queues an event names: the work per probe
    /// stays constant however many peers are in flight and however slow they answer.
    fn ping_all(
        &mut self,
        busy: bool,
        targets: &[ProbeTarget],
        idx: &[usize],
    ) -> Vec<(usize, ProbeOutcome)> {
        let mut out = Vec::with_capacity(idx.len());
        // By completion queue (what an event names).
        let mut flights: HashMap<usize, Flight> = HashMap::with_capacity(idx.len());
        for &i in idx {
            let conn = self.conns.get_mut(&targets[i].peer).expect("connected");
            let posted = conn.ep.post_recv().and_then(|_| {
                let t0 = Instant::now();
                conn.ep.post_send().map(|_| t0)
            });
            match posted {
                Ok(t0) => {
                    flights.insert(
                        conn.ep.cq_id(),
                        Flight {
                            i,
                            t0,
                            deadline: t0 + timeout_of(&targets[i]),
                            sent: false,
                            answered: None,
                            armed: false,
                        },
                    );
                }
                Err(e) => out.push((
                    i,
                    ProbeOutcome::ConnectFailed {
                        cause: format!("QP error: {e}"),
                    },
                )),
            }
        }
        let conns = &mut self.conns;
        // Poll a flight's queue; false when the flight is over (its outcome is in `out`).
        fn step(
            conns: &mut HashMap<String, Conn>,
            targets: &[ProbeTarget],
            f: &mut Flight,
            now: Instant,
            out: &mut Vec<(usize, ProbeOutcome)>,
        ) -> bool {
            let ep = &mut conns.get_mut(&targets[f.i].peer).expect("connected").ep;
            match f.step(ep, now) {
                Step::Done(o) => {
                    out.push((f.i, o));
                    false
                }
                Step::Waiting => true,
            }
        }
        let spin_until = if busy {
            // Until every reply is in or its deadline passes.
            flights
                .values()
                .map(|f| f.deadline)
                .max()
                .unwrap_or_else(Instant::now)
        } else {
            Instant::now() + Duration::from_millis(2)
        };
        while !flights.is_empty() && Instant::now() < spin_until {
            let now = Instant::now();
            flights.retain(|_, f| step(conns, targets, f, now, &mut out));
            std::hint::spin_loop();
        }
        // Arm every waiting queue, then look once more: a completion that landed before
        // its queue was armed raised no event.
        let mut to_check: Vec<usize> = flights.keys().copied().collect();
        while !flights.is_empty() {
            let now = Instant::now();
            for cq in to_check.drain(..) {
                let Some(f) = flights.get_mut(&cq) else {
                    continue;
                };
                if !f.armed {
                    let ep = &conns.get_mut(&targets[f.i].peer).expect("connected").ep;
                    // A queue that cannot be armed is polled at every wake-up (below).
                    f.armed = ep.arm();
                }
                if !step(conns, targets, f, now, &mut out) {
                    flights.remove(&cq);
                }
            }
            let Some(until) = flights.values().map(|f| f.deadline).min() else {
                break;
            };
            // Sleep until a completion or the first deadline (at most 100 ms, so a queue
            // that could not be armed is still looked at).
            let wait = until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            let mut ready = Vec::new();
            self.epoll.as_ref().expect("started").wait(wait, &mut ready);
            for token in &ready {
                // Read the events (a queue left with one would stay ready); a flight's
                // queue is then disarmed and looked at.
                if let Some(c) = self.tokens.get(token).and_then(|p| conns.get(p)) {
                    c.ep.take_events();
                }
                let cq = *token as usize;
                if let Some(f) = flights.get_mut(&cq) {
                    f.armed = false;
                    to_check.push(cq);
                }
            }
            if to_check.is_empty() {
                // A timeout (or only stale events of earlier rounds): deadlines, and
                // queues that could not be armed.
                let now = Instant::now();
                to_check.extend(
                    flights
                        .iter()
                        .filter(|(_, f)| !f.armed || now >= f.deadline)
                        .map(|(cq, _)| *cq),
                );
            }
        }
        out
    }
}

/// A prober being served: its queue pair, and its side channel (closed: it left).
struct Served {
    ep: Endpoint,
    tcp: TcpStream,
}

/// Set up one prober's queue pair over its side channel (a silent client is given up
/// after 2 s).
fn handshake(dev: &Arc<Device>, gids: &GidCache, mut tcp: TcpStream) -> Result<Served, String> {
    tcp.set_nodelay(true).ok();
    tcp.set_read_timeout(Some(Duration::from_secs(2))).ok();
    tcp.set_write_timeout(Some(Duration::from_secs(2))).ok();
    let ip = tcp.local_addr().map_err(|e| e.to_string())?.ip();
    let (idx, gid) = gids
        .get(ip)
        .ok_or_else(|| format!("no RoCE v2 GID for {ip} on {}", dev.name))?;
    let mut first = [0u8; 28];
    tcp.read_exact(&mut first).map_err(|e| e.to_string())?;
    let size = u32::from_be_bytes(first[0..4].try_into().expect("4 bytes")).clamp(1, MAX_SIZE);
    let remote = Info::decode(first[4..28].try_into().expect("24 bytes"));
    let mut ep =
        Endpoint::new(Arc::clone(dev), size as usize, idx, gid).map_err(|e| e.to_string())?;
    ep.connect(&remote).map_err(|e| e.to_string())?;
    // Receives must be posted before the prober's first send.
    ep.post_recv().map_err(|e| e.to_string())?;
    let mut out = [0u8; 28];
    out[0..4].copy_from_slice(&size.to_be_bytes());
    out[4..28].copy_from_slice(&ep.local.encode());
    tcp.write_all(&out).map_err(|e| e.to_string())?;
    tcp.set_nonblocking(true).ok();
    Ok(Served { ep, tcp })
}

/// Whether the other end of a non-blocking side channel closed it.
fn gone(tcp: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    match tcp.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Answer every message waiting on `ep`'s queue; how many completions there were.
fn echo(ep: &mut Endpoint) -> Result<usize, String> {
    let mut n = 0;
    while let Some(wr) = ep.poll().map_err(|e| e.to_string())? {
        n += 1;
        if wr == 2 {
            ep.post_recv().map_err(|e| e.to_string())?;
            ep.post_send().map_err(|e| e.to_string())?;
        }
    }
    Ok(n)
}

/// Echo what is waiting, then (unless busy-polling) arm the queue for the next event and
/// look once more: a message that came between the look and the arming raised no event.
fn service(ep: &mut Endpoint, busy: bool) -> Result<(), String> {
    loop {
        echo(ep)?;
        if busy {
            return Ok(());
        }
        if !ep.arm() {
            return Err("cannot arm the completion queue".into());
        }
        if echo(ep)? == 0 {
            return Ok(());
        }
    }
}

/// The responder: the accept thread sets up each prober's queue pair and hands it to
/// one serving thread, which sleeps in one epoll set (every queue's completion channel,
/// and a wake-up socket for newcomers) and answers the queues the events name. With
/// `busy`, it polls every queue without sleeping instead (one core busy, as perftest's
/// server). A prober whose side channel closed is forgotten within a second.
fn serve(
    listener: TcpListener,
    dev: Arc<Device>,
    gids: Arc<GidCache>,
    busy: bool,
) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let epoll = verbs::Epoll::new().map_err(|e| e.to_string())?;
    let (tx, rx) = std::sync::mpsc::channel::<Served>();
    let (wake_rx, wake_tx) = std::os::unix::net::UnixStream::pair().map_err(|e| e.to_string())?;
    let wake_tx = Arc::new(wake_tx);
    wake_rx.set_nonblocking(true).ok();
    // Queue ids are addresses, never 0.
    const WAKE: u64 = 0;
    epoll
        .add(wake_rx.as_raw_fd(), WAKE)
        .map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("probe-accept".into())
        .spawn(move || {
            // Each setup on a short-lived thread of its own: many probers starting at
            // once (an agent with many peers) are set up together, not one after another.
            for s in listener.incoming().flatten() {
                let (dev, gids, tx, wake) = (
                    Arc::clone(&dev),
                    Arc::clone(&gids),
                    tx.clone(),
                    Arc::clone(&wake_tx),
                );
                let setup = move || match handshake(&dev, &gids, s) {
                    Ok(sv) => {
                        if tx.send(sv).is_ok() {
                            let _ = (&*wake).write_all(&[1]);
                        }
                    }
                    Err(e) => eprintln!("rocewatch probe responder: {e}"),
                };
                if let Err(e) = std::thread::Builder::new()
                    .name("probe-setup".into())
                    .stack_size(256 * 1024)
                    .spawn(setup)
                {
                    eprintln!("rocewatch probe responder: no thread for a prober's setup: {e}");
                }
            }
        })
        .map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("probe-responder".into())
        .spawn(move || {
            let mut served: HashMap<u64, Served> = HashMap::new();
            let mut due: Vec<u64> = Vec::new();
            let mut checked = Instant::now();
            let drop_served = |served: &mut HashMap<u64, Served>, token: u64| {
                if let Some(sv) = served.remove(&token) {
                    epoll.remove(sv.ep.event_fd());
                }
            };
            loop {
                while let Ok(sv) = rx.try_recv() {
                    let token = sv.ep.cq_id() as u64;
                    if let Err(e) = epoll.add(sv.ep.event_fd(), token) {
                        eprintln!("rocewatch probe responder: {e}");
                        continue;
                    }
                    due.push(token);
                    served.insert(token, sv);
                }
                if busy {
                    due.extend(served.keys().copied());
                }
                for token in due.drain(..) {
                    let Some(sv) = served.get_mut(&token) else {
                        continue;
                    };
                    if let Err(e) = service(&mut sv.ep, busy) {
                        eprintln!("rocewatch probe responder: {e}");
                        drop_served(&mut served, token);
                    }
                }
                if checked.elapsed() >= Duration::from_secs(1) {
                    checked = Instant::now();
                    // Probers that went away: their side channel reads end-of-file.
                    let left: Vec<u64> = served
                        .iter()
                        .filter(|(_, sv)| gone(&sv.tcp))
                        .map(|(t, _)| *t)
                        .collect();
                    for t in left {
                        drop_served(&mut served, t);
                    }
                }
                if busy {
                    std::hint::spin_loop();
                    continue;
                }
                let mut ready = Vec::new();
                epoll.wait(Duration::from_secs(1), &mut ready);
                for token in ready {
                    if token == WAKE {
                        let mut sink = [0u8; 64];
                        while matches!((&wake_rx).read(&mut sink), Ok(n) if n > 0) {}
                    } else if let Some(sv) = served.get(&token) {
                        // Read the events (the queue is disarmed), then answer.
                        sv.ep.take_events();
                        due.push(token);
                    }
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

impl Plugin for VerbsProbe {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
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
            serve(
                listener,
                Arc::clone(&dev),
                Arc::clone(&gids),
                opts.busy_poll,
            )
            .map_err(|e| PluginError::failed(format!("probe responder on {}: {e}", dev.name)))?;
            self.serving = true;
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

    fn stop(&mut self) {
        let peers: Vec<String> = self.conns.keys().cloned().collect();
        for p in peers {
            self.drop_conn(&p);
        }
    }
}

impl ProbePlugin for VerbsProbe {
    fn probe(&mut self, target: &ProbeTarget) -> Result<ProbeResult, PluginError> {
        let mut r = self.probe_targets(std::slice::from_ref(target), false)?;
        Ok(r.remove(0))
    }

    /// Every target at once: peers without a queue pair are connected in parallel, then
    /// one message goes to each and the replies are awaited together. A peer listed twice
    /// gets the first one's result.
    fn probe_many(&mut self, targets: &[ProbeTarget]) -> Result<Vec<ProbeResult>, PluginError> {
        self.probe_targets(targets, true)
    }
}

impl VerbsProbe {
    /// Probe `targets` together; with `whole_round`, peers not among them are forgotten.
    fn probe_targets(
        &mut self,
        targets: &[ProbeTarget],
        whole_round: bool,
    ) -> Result<Vec<ProbeResult>, PluginError> {
        let setup = Arc::clone(
            self.setup
                .as_ref()
                .ok_or_else(|| PluginError::failed("probe called before start"))?,
        );
        let mut outcomes: Vec<Option<ProbeOutcome>> = vec![None; targets.len()];
        let mut first: HashMap<&str, usize> = HashMap::new();
        let mut unique = Vec::new();
        for (i, t) in targets.iter().enumerate() {
            if first.insert(t.peer.as_str(), i).is_none() {
                unique.push(i);
            }
        }
        // A queue pair made for another message size is made again.
        for &i in &unique {
            let t = &targets[i];
            if self.conns.get(&t.peer).is_some_and(|c| c.size != t.size) {
                self.drop_conn(&t.peer);
            }
        }
        let now = Instant::now();
        let mut missing = Vec::new();
        for &i in &unique {
            let peer = &targets[i].peer;
            if self.conns.contains_key(peer) {
                continue;
            }
            match self.backoff.due(peer, now) {
                Err(cause) => outcomes[i] = Some(ProbeOutcome::ConnectFailed { cause }),
                Ok(()) => missing.push(i),
            }
        }
        for (i, r) in connect_all(&setup, targets, &missing) {
            let peer = &targets[i].peer;
            match r {
                Ok(c) => {
                    self.backoff.succeeded(peer);
                    self.add_conn(peer, c);
                }
                Err(cause) => {
                    self.backoff.failed(peer, &cause, Instant::now());
                    outcomes[i] = Some(ProbeOutcome::ConnectFailed { cause });
                }
            }
        }
        // A round names every peer: the others are forgotten (their queue pairs closed),
        // so memory follows the peer list.
        if whole_round {
            let asked: std::collections::HashSet<&str> =
                targets.iter().map(|t| t.peer.as_str()).collect();
            self.backoff.peers.retain(|p, _| asked.contains(p.as_str()));
            let gone: Vec<String> = self
                .conns
                .keys()
                .filter(|p| !asked.contains(p.as_str()))
                .cloned()
                .collect();
            for p in gone {
                self.drop_conn(&p);
            }
        }
        let ready: Vec<usize> = unique
            .iter()
            .copied()
            .filter(|&i| outcomes[i].is_none())
            .collect();
        for (i, o) in self.ping_all(setup.opts.busy_poll, targets, &ready) {
            // A timeout or a failed completion drops the queue pair; the next probe
            // connects again.
            if !matches!(o, ProbeOutcome::Ok { .. }) {
                self.drop_conn(&targets[i].peer);
            }
            outcomes[i] = Some(o);
        }
        Ok(targets
            .iter()
            .enumerate()
            .map(|(i, t)| ProbeResult {
                peer: t.peer.clone(),
                outcome: outcomes[i]
                    .clone()
                    .or_else(|| outcomes[first[t.peer.as_str()]].clone())
                    .unwrap_or(ProbeOutcome::Timeout),
                // The same for every peer: said once per round.
                nic_timestamps: (i == 0).then(|| setup.timestamps.clone()),
            })
            .collect())
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
mod tests {
    use super::*;

    #[test]
    fn side_channel_info_round_trips() {
        let i = Info {
            qpn: 0x11,
            psn: 0xabcdef,
            gid: std::net::Ipv4Addr::new(192, 168, 100, 1)
                .to_ipv6_mapped()
                .octets(),
        };
        assert_eq!(Info::decode(&i.encode()), i);
        assert_eq!(&i.encode()[0..8], &[0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef]);
    }

    #[test]
    fn reconnects_back_off_doubling_to_the_maximum() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut r = Reconnects::new(s(5));
        assert!(r.due("a", t0).is_ok());
        r.failed("a", "route: 10.0.0.9:18516 did not answer within 1s", t0);
        let e = r.due("a", t0).unwrap_err();
        assert!(
            e.starts_with("route: 10.0.0.9") && e.contains("(next attempt in 1"),
            "{e}"
        );
        // Each wait plus up to a quarter of it (jitter).
        let ms = Duration::from_millis;
        assert!(r.due("a", t0 + ms(999)).is_err() && r.due("a", t0 + ms(1250)).is_ok());
        r.failed("a", "route: again", t0);
        assert!(
            r.due("a", t0 + ms(1999)).is_err() && r.due("a", t0 + ms(2500)).is_ok(),
            "then 2 s"
        );
        r.failed("a", "x", t0);
        r.failed("a", "x", t0);
        assert!(
            r.due("a", t0 + ms(4999)).is_err() && r.due("a", t0 + ms(6250)).is_ok(),
            "4 s, then capped at 5 s"
        );
        assert!(r.due("b", t0).is_ok(), "per peer");
        r.succeeded("a");
        assert!(r.due("a", t0).is_ok());
        // 0 s: every probe tries (the CLI).
        let mut none = Reconnects::new(Duration::ZERO);
        none.failed("a", "x", t0);
        assert!(none.due("a", t0).is_ok());
    }

    #[test]
    fn gid_by_ip_from_a_fixture() {
        let root = SysRoot::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures/rxe-soft-roce/sys"),
        );
        let (idx, gid) = gid_for(&root, "rxe0", 1, "10.0.2.15".parse().unwrap()).unwrap();
        assert_eq!(idx, 1);
        assert_eq!(gid[10..], [0xff, 0xff, 10, 0, 2, 15]);
        assert!(gid_for(&root, "rxe0", 1, "10.9.9.9".parse().unwrap()).is_none());
    }
}
