//! Connection setup on the prober's side: the TCP side channel, the local GID of the
//! side channel's address, and connecting peers (in parallel).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_plugin_api::*;
use rocewatch_sysfs::SysRoot;

use crate::options::Options;
use crate::verbs::{Device, Endpoint, Info};

/// One flow to a peer: its queue pair, the side channel that keeps the peer's, and the
/// peer's queue pair (so the flow can move to another source port alone).
pub(crate) struct Conn {
    pub(crate) ep: Endpoint,
    _tcp: TcpStream,
    pub(crate) size: u32,
    pub(crate) flow_label: u32,
    remote: Info,
}

impl Conn {
    /// Move to another flow label (another UDP source port), keeping the queue pairs:
    /// the sequence numbers are the device's own (`ibv_query_qp`), so they hold whatever
    /// the message size and either side's MTU.
    pub(crate) fn repath(&mut self, flow_label: u32) -> Result<(), String> {
        let (sq, rq) = self.ep.psns().map_err(|e| format!("QP: {e}"))?;
        let remote = Info {
            psn: rq,
            ..self.remote
        };
        self.ep
            .repath(sq, &remote, flow_label)
            .map_err(|e| format!("QP: {e}"))?;
        self.flow_label = flow_label;
        Ok(())
    }
}

/// How many connections are set up at once (each on its own short-lived thread): a round
/// with many new or dead peers costs about `peers / CONNECT_PARALLEL` timeouts, not one
/// per peer.
const CONNECT_PARALLEL: usize = 64;

/// A local GID: its index in the port's table, its bytes.
pub(crate) type LocalGid = (u8, [u8; 16]);

/// The RoCE v2 GID whose address is `ip`.
pub(crate) fn gid_for(root: &SysRoot, dev: &str, port: u8, ip: IpAddr) -> Option<LocalGid> {
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
pub(crate) struct Setup {
    pub(crate) opts: Options,
    pub(crate) dev: Arc<Device>,
    /// What the device says about completion timestamps, given with every result.
    pub(crate) timestamps: NicTimestamps,
    pub(crate) gids: Arc<GidCache>,
}

/// How long a local address's GID is used before sysfs is read again.
const GID_TTL: Duration = Duration::from_secs(60);

/// The local GID of each local address, read from sysfs at most every [`GID_TTL`]: a GID
/// table is up to a thousand files (rxe) and every connection, probing or answering,
/// needs one, while peers share a handful of local addresses. Shared by the prober and
/// the responder's setup threads.
pub(crate) struct GidCache {
    root: SysRoot,
    dev: String,
    port: u8,
    map: std::sync::Mutex<HashMap<IpAddr, (Instant, LocalGid)>>,
}

impl GidCache {
    pub(crate) fn new(root: SysRoot, dev: &Device) -> Self {
        GidCache {
            root,
            dev: dev.name.clone(),
            port: dev.port,
            map: Default::default(),
        }
    }

    pub(crate) fn get(&self, ip: IpAddr) -> Option<LocalGid> {
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

/// The side channel to `peer`'s responder, and the local GID (index, bytes) of the
/// address it leaves from; errors start with the step that failed (`route:`,
/// `rejected:`, `address resolution:`), as probe causes do.
pub(crate) fn open_channel(
    setup: &Setup,
    peer: &str,
    timeout: Duration,
) -> Result<(TcpStream, LocalGid), String> {
    let dev = &setup.dev;
    let addr: SocketAddr = (peer, setup.opts.tcp_port)
        .to_socket_addrs()
        .map_err(|e| format!("address resolution: {peer}: {e}"))?
        .next()
        .ok_or_else(|| format!("address resolution: {peer}: no address"))?;
    let tcp = TcpStream::connect_timeout(&addr, timeout).map_err(|e| match e.kind() {
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
    let gid = setup.gids.get(ip).ok_or_else(|| {
        format!(
            "address resolution: no RoCE v2 GID for {ip} on {} port {}",
            dev.name, dev.port
        )
    })?;
    Ok((tcp, gid))
}

fn connect(setup: &Setup, t: &ProbeTarget) -> Result<Conn, String> {
    let (peer, size, timeout) = (t.peer.as_str(), t.size, timeout_of(t));
    let dev = Arc::clone(&setup.dev);
    let (mut tcp, (idx, gid)) = open_channel(setup, peer, timeout)?;
    let mut ep = Endpoint::new(dev, size as usize, idx, gid).map_err(|e| format!("QP: {e}"))?;
    let (_, remote) = exchange_info(&mut tcp, size, &ep.local).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("rejected: the responder did not answer on the side channel within {timeout:?}")
        }
        _ => format!("rejected: the responder closed the side channel: {e}"),
    })?;
    ep.connect(&remote, t.flow_label)
        .map_err(|e| format!("QP: {e}"))?;
    Ok(Conn {
        ep,
        _tcp: tcp,
        size,
        flow_label: t.flow_label,
        remote,
    })
}

/// Connect to the targets at `idx`, [`CONNECT_PARALLEL`] at a time.
pub(crate) fn connect_all(
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
                        .spawn_scoped(sc, move || connect(setup, t));
                    (i, h)
                })
                .collect();
            for (i, h) in handles {
                let r = match h {
                    Ok(h) => h
                        .join()
                        .unwrap_or_else(|_| Err("QP: the connecting thread panicked".into())),
                    // No thread: connect here instead.
                    Err(_) => connect(setup, &targets[i]),
                };
                out.push((i, r));
            }
        });
    }
    out
}

pub(crate) fn timeout_of(t: &ProbeTarget) -> Duration {
    Duration::from_millis(t.timeout_ms.max(1))
}

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
