//! The responder: accepting probers, setting up their queue pairs, and echoing their
//! messages; a bandwidth prober (its hello starts with the bandwidth magic) is handed to
//! `bwserve` on its setup thread.
//!
//! One responder answers on every RDMA port of the host ([`Ports`]): a prober's queue
//! pair is made on the port whose RoCE v2 GID is the address the prober reached, so that
//! the agent's one TCP listener serves every rail (issue 50: each rail is probed from
//! its own port, and its peers probe this host's address on that rail).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocewatch_sysfs::SysRoot;

use crate::bwproto::{HELLO_LEN, MAGIC};
use crate::bwserve::{serve_test, Policy};
use crate::conn::{gid_for, GidCache};
use crate::verbs::{self, Device, Endpoint, Info};

/// A port the responder answers on: the opened device and its GIDs.
type Port = (Arc<Device>, Arc<GidCache>);

/// The ports the responder answers on: the plugin's own, and each other port whose RoCE
/// v2 GID is an address probers reach, opened when the first of them comes.
pub(crate) struct Ports {
    root: SysRoot,
    own: Port,
    by_addr: Mutex<HashMap<IpAddr, Port>>,
}

impl Ports {
    pub(crate) fn new(root: SysRoot, dev: Arc<Device>, gids: Arc<GidCache>) -> Ports {
        Ports {
            root,
            own: (dev, gids),
            by_addr: Mutex::default(),
        }
    }

    /// The port whose RoCE v2 GID is `ip`: the own one first, then the last one found
    /// for it (while its GID still is `ip`), else every port of sysfs.
    fn of(&self, ip: IpAddr) -> Result<Port, String> {
        if self.own.1.get(ip).is_some() {
            return Ok(self.own.clone());
        }
        let mut known = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = known.get(&ip) {
            if p.1.get(ip).is_some() {
                return Ok(p.clone());
            }
            known.remove(&ip);
        }
        let (dev, port) = port_of(&self.root, ip).ok_or_else(|| {
            format!(
                "no RoCE v2 GID for {ip} on {} nor on any other RDMA port",
                self.own.0.name
            )
        })?;
        // A port already opened for another of its addresses is shared.
        let opened = known
            .values()
            .find(|(d, _)| d.name == dev && d.port == port)
            .cloned();
        let p = match opened {
            Some(p) => p,
            None => {
                let d = Device::open(Some(&dev), port).map_err(|e| format!("{dev}: {e}"))?;
                let g = Arc::new(GidCache::new(self.root.clone(), &d));
                (d, g)
            }
        };
        known.insert(ip, p.clone());
        Ok(p)
    }
}

/// The RDMA port (device, port number) whose RoCE v2 GID is `ip`, from sysfs.
pub(crate) fn port_of(root: &SysRoot, ip: IpAddr) -> Option<(String, u8)> {
    for dev in root.devices().ok()? {
        for port in root.ports(&dev).unwrap_or_default() {
            let Ok(n) = u8::try_from(port) else { continue };
            if gid_for(root, &dev, n, ip).is_some() {
                return Some((dev, n));
            }
        }
    }
    None
}

/// The largest message a responder accepts.
const MAX_SIZE: u32 = 1 << 20;

/// A prober being served: its queue pair, and its side channel (closed: it left).
struct Served {
    ep: Endpoint,
    tcp: TcpStream,
}

/// Set up one prober's queue pair over its side channel (a silent client is given up
/// after 2 s); a bandwidth prober's test is served here, on this thread (`Ok(None)`).
fn handshake(ports: &Ports, policy: &Policy, mut tcp: TcpStream) -> Result<Option<Served>, String> {
    tcp.set_nodelay(true).ok();
    tcp.set_read_timeout(Some(Duration::from_secs(2))).ok();
    tcp.set_write_timeout(Some(Duration::from_secs(2))).ok();
    let mut first = [0u8; 28];
    tcp.read_exact(&mut first).map_err(|e| e.to_string())?;
    let ip = tcp.local_addr().map_err(|e| e.to_string())?.ip();
    let port = ports.of(ip);
    if first[0..4] == MAGIC.to_be_bytes() {
        let hello: &[u8; HELLO_LEN] = &first;
        // The test says itself what is wrong with an address on no port.
        let (dev, gids) = port.unwrap_or_else(|_| ports.own.clone());
        return serve_test(&dev, &gids, policy, tcp, hello).map(|()| None);
    }
    let (dev, gids) = port?;
    let dev = &dev;
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
    ports: Arc<Ports>,
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
                let (ports, tx, wake, policy) = (
                    Arc::clone(&ports),
                    tx.clone(),
                    Arc::clone(&wake_tx),
                    Arc::clone(&policy),
                );
                let setup = move || match handshake(&ports, &policy, s) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture's two devices each carry one RoCE v2 IPv4 address: a prober reaching
    /// 10.0.1.1 is answered from mlx5_1, whatever device the plugin was started on.
    #[test]
    fn the_port_of_an_address_is_found_on_any_device() {
        let root = SysRoot::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures/mlx5-roce-dual-port/sys"),
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(port_of(&root, ip("10.0.0.1")), Some(("mlx5_0".into(), 1)));
        assert_eq!(port_of(&root, ip("10.0.1.1")), Some(("mlx5_1".into(), 1)));
        assert_eq!(port_of(&root, ip("10.9.9.9")), None);
        assert_eq!(port_of(&SysRoot::new("/nonexistent"), ip("10.0.0.1")), None);
    }
}
