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
//! (run a responder, default true).
//!
//! A probe reuses the peer's queue pair; a timeout or a failed work completion drops it
//! and the next probe connects again.

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
}

/// The largest message a responder accepts.
const MAX_SIZE: u32 = 1 << 20;

struct Conn {
    ep: Endpoint,
    _tcp: TcpStream,
    size: u32,
    pending: Vec<u64>,
}

/// The RoCE v2 GID (index, bytes) whose address is `ip`.
fn gid_for(root: &SysRoot, dev: &str, port: u8, ip: IpAddr) -> Option<(u8, [u8; 16])> {
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

/// The probe plugin.
#[derive(Default)]
pub struct VerbsProbe {
    opts: Option<Options>,
    dev: Option<Arc<Device>>,
    root: Option<SysRoot>,
    conns: HashMap<String, Conn>,
    serving: bool,
}

impl VerbsProbe {
    fn connect(&mut self, peer: &str, size: u32, timeout: Duration) -> Result<Conn, String> {
        let opts = self.opts.as_ref().expect("started");
        let dev = Arc::clone(self.dev.as_ref().expect("started"));
        let root = self.root.as_ref().expect("started");
        let addr: SocketAddr = (peer, opts.tcp_port)
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
        let (idx, gid) = gid_for(root, &dev.name, dev.port, ip).ok_or_else(|| {
            format!(
                "address resolution: no RoCE v2 GID for {ip} on {} port {}",
                dev.name, dev.port
            )
        })?;
        let mut ep = Endpoint::new(dev, size as usize, idx, gid).map_err(|e| format!("QP: {e}"))?;
        let (_, remote) = exchange_info(&mut tcp, size, &ep.local)
            .map_err(|e| format!("rejected: the responder closed the side channel: {e}"))?;
        ep.connect(&remote).map_err(|e| format!("QP: {e}"))?;
        Ok(Conn {
            ep,
            _tcp: tcp,
            size,
            pending: Vec::new(),
        })
    }

    fn ping(conn: &mut Conn, timeout: Duration) -> Result<Option<Duration>, String> {
        let deadline = Instant::now() + timeout;
        conn.ep.post_recv().map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        conn.ep.post_send().map_err(|e| e.to_string())?;
        let sent = conn
            .ep
            .wait(1, deadline, &mut conn.pending)
            .map_err(|e| format!("QP error: {e}"))?;
        if sent.is_none() {
            return Ok(None);
        }
        match conn.ep.wait(2, deadline, &mut conn.pending) {
            Ok(Some(())) => Ok(Some(t0.elapsed())),
            Ok(None) => Ok(None),
            Err(e) => Err(format!("QP error: {e}")),
        }
    }
}

/// Serve one prober: set up the queue pair, then echo every message until it goes away.
fn respond(dev: Arc<Device>, root: SysRoot, mut tcp: TcpStream) -> Result<(), String> {
    tcp.set_nodelay(true).ok();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let ip = tcp.local_addr().map_err(|e| e.to_string())?.ip();
    let (idx, gid) = gid_for(&root, &dev.name, dev.port, ip)
        .ok_or_else(|| format!("no RoCE v2 GID for {ip} on {}", dev.name))?;
    let mut first = [0u8; 28];
    tcp.read_exact(&mut first).map_err(|e| e.to_string())?;
    let size = u32::from_be_bytes(first[0..4].try_into().expect("4 bytes")).clamp(1, MAX_SIZE);
    let remote = Info::decode(first[4..28].try_into().expect("24 bytes"));
    let mut ep =
        Endpoint::new(Arc::clone(&dev), size as usize, idx, gid).map_err(|e| e.to_string())?;
    ep.connect(&remote).map_err(|e| e.to_string())?;
    // Receives must be posted before the prober's first send.
    ep.post_recv().map_err(|e| e.to_string())?;
    let mut out = [0u8; 28];
    out[0..4].copy_from_slice(&size.to_be_bytes());
    out[4..28].copy_from_slice(&ep.local.encode());
    tcp.write_all(&out).map_err(|e| e.to_string())?;
    tcp.set_nonblocking(true).ok();
    let mut pending = Vec::new();
    loop {
        match ep.wait_event(2, Instant::now() + Duration::from_secs(1), &mut pending) {
            Ok(Some(())) => {
                ep.post_recv().map_err(|e| e.to_string())?;
                ep.post_send().map_err(|e| e.to_string())?;
                if ep
                    .wait(1, Instant::now() + Duration::from_secs(5), &mut pending)
                    .map_err(|e| e.to_string())?
                    .is_none()
                {
                    return Err("reply not completed within 5 s".into());
                }
            }
            Ok(None) => {
                // Idle: is the prober still there?
                let mut b = [0u8; 1];
                match tcp.peek(&mut b) {
                    Ok(0) => return Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return Ok(()),
                    Ok(_) => {}
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
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
        if opts.serve && !self.serving {
            let listener = TcpListener::bind(("0.0.0.0", opts.tcp_port)).map_err(|e| {
                PluginError::failed(format!(
                    "probe responder: cannot listen on TCP port {}: {e}",
                    opts.tcp_port
                ))
            })?;
            let (dev, root) = (Arc::clone(&dev), root.clone());
            std::thread::Builder::new()
                .name("probe-responder".into())
                .spawn(move || {
                    for s in listener.incoming().flatten() {
                        let (dev, root) = (Arc::clone(&dev), root.clone());
                        let _ = std::thread::Builder::new().name("probe-peer".into()).spawn(
                            move || {
                                if let Err(e) = respond(dev, root, s) {
                                    eprintln!("rocewatch probe responder: {e}");
                                }
                            },
                        );
                    }
                })
                .map_err(|e| PluginError::failed(e.to_string()))?;
            self.serving = true;
        }
        self.dev = Some(dev);
        self.root = Some(root);
        self.opts = Some(opts);
        Ok(())
    }

    fn stop(&mut self) {
        self.conns.clear();
    }
}

impl ProbePlugin for VerbsProbe {
    fn probe(&mut self, target: &ProbeTarget) -> Result<ProbeResult, PluginError> {
        if self.dev.is_none() {
            return Err(PluginError::failed("probe called before start"));
        }
        let timeout = Duration::from_millis(target.timeout_ms.max(1));
        let result = |outcome| ProbeResult {
            peer: target.peer.clone(),
            outcome,
        };
        if self
            .conns
            .get(&target.peer)
            .is_some_and(|c| c.size != target.size)
        {
            self.conns.remove(&target.peer);
        }
        if !self.conns.contains_key(&target.peer) {
            match self.connect(&target.peer, target.size, timeout) {
                Ok(c) => {
                    self.conns.insert(target.peer.clone(), c);
                }
                Err(cause) => return Ok(result(ProbeOutcome::ConnectFailed { cause })),
            }
        }
        let conn = self.conns.get_mut(&target.peer).expect("inserted above");
        match Self::ping(conn, timeout) {
            Ok(Some(rtt)) => Ok(result(ProbeOutcome::Ok {
                rtt_seconds: rtt.as_secs_f64(),
            })),
            Ok(None) => {
                self.conns.remove(&target.peer);
                Ok(result(ProbeOutcome::Timeout))
            }
            Err(cause) => {
                self.conns.remove(&target.peer);
                Ok(result(ProbeOutcome::ConnectFailed { cause }))
            }
        }
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
