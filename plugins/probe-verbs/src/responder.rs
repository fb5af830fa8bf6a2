//! The responder: accepting probers, setting up their queue pairs, and echoing their
//! messages; a bandwidth prober (its hello starts with the bandwidth magic) is handed to
//! `bwserve` on its setup thread.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bwproto::{HELLO_LEN, MAGIC};
use crate::bwserve::{serve_test, Policy};
use crate::conn::GidCache;
use crate::verbs::{self, Device, Endpoint, Info};

/// The largest message a responder accepts.
const MAX_SIZE: u32 = 1 << 20;

/// A prober being served: its queue pair, and its side channel (closed: it left).
struct Served {
    ep: Endpoint,
    tcp: TcpStream,
}

/// Set up one prober's queue pair over its side channel (a silent client is given up
/// after 2 s); a bandwidth prober's test is served here, on this thread (`Ok(None)`).
fn handshake(
    dev: &Arc<Device>,
    gids: &GidCache,
    policy: &Policy,
    mut tcp: TcpStream,
) -> Result<Option<Served>, String> {
    tcp.set_nodelay(true).ok();
    tcp.set_read_timeout(Some(Duration::from_secs(2))).ok();
    tcp.set_write_timeout(Some(Duration::from_secs(2))).ok();
    let mut first = [0u8; 28];
    tcp.read_exact(&mut first).map_err(|e| e.to_string())?;
    if first[0..4] == MAGIC.to_be_bytes() {
        let hello: &[u8; HELLO_LEN] = &first;
        return serve_test(dev, gids, policy, tcp, hello).map(|()| None);
    }
    let ip = tcp.local_addr().map_err(|e| e.to_string())?.ip();
    let (idx, gid) = gids
        .get(ip)
        .ok_or_else(|| format!("no RoCE v2 GID for {ip} on {}", dev.name))?;
    let size = u32::from_be_bytes(first[0..4].try_into().expect("4 bytes")).clamp(1, MAX_SIZE);
    let remote = Info::decode(first[4..28].try_into().expect("24 bytes"));
    let mut ep =
        Endpoint::new(Arc::clone(dev), size as usize, idx, gid).map_err(|e| e.to_string())?;
    ep.connect(&remote, 0).map_err(|e| e.to_string())?;
    // Receives must be posted before the prober's first send.
    ep.post_recv().map_err(|e| e.to_string())?;
    let mut out = [0u8; 28];
    out[0..4].copy_from_slice(&size.to_be_bytes());
    out[4..28].copy_from_slice(&ep.local.encode());
    tcp.write_all(&out).map_err(|e| e.to_string())?;
    tcp.set_nonblocking(true).ok();
    Ok(Some(Served { ep, tcp }))
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
pub(crate) fn serve(
    listener: TcpListener,
    dev: Arc<Device>,
    gids: Arc<GidCache>,
    busy: bool,
    policy: Arc<Policy>,
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
                let (dev, gids, tx, wake, policy) = (
                    Arc::clone(&dev),
                    Arc::clone(&gids),
                    tx.clone(),
                    Arc::clone(&wake_tx),
                    Arc::clone(&policy),
                );
                let setup = move || match handshake(&dev, &gids, &policy, s) {
                    Ok(Some(sv)) => {
                        if tx.send(sv).is_ok() {
                            let _ = (&*wake).write_all(&[1]);
                        }
                    }
                    Ok(None) => {}
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
