//! The control port of `rocewatch preflight`, both ends: the listener every host keeps
//! for the whole sweep (a driver's hello answered once this host reaches that step, then
//! its done), and the driver's connect and hello. The messages and who is admitted are
//! [`crate::control`]'s.
//!
//! The port is open to anyone who can reach it, so a scan, a stray client or an attacker
//! holding idle connections must not keep a real partner off it: at most
//! [`MAX_CONNECTIONS`] are open at once, and past the cap a connection that has not said
//! hello yet is closed, the oldest first, for the newcomer (a driver says hello as soon
//! as it connects; only admitted drivers keep their slot). A driver whose hello is closed
//! unanswered or reset (a port full of admitted drivers, a partner restarting) says it
//! again after a backoff, within its patience. A hello without the sweep's token (when
//! it has one) is refused and logged with the address it came from, before it can touch
//! a step.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::control::{admit, Hello, Message, StepId, Token, MAX_LINE};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};

/// Control connections open at once, at most.
const MAX_CONNECTIONS: usize = 32;
/// How long a connection may take to say hello.
const HELLO_WITHIN: Duration = Duration::from_secs(10);
/// A driver's first wait before saying hello again; it doubles up to [`HELLO_BACKOFF_MAX`].
const HELLO_BACKOFF: Duration = Duration::from_millis(250);
const HELLO_BACKOFF_MAX: Duration = Duration::from_secs(4);

/// What the listener and the serving steps share.
pub(super) struct Shared {
    pub(super) schedule: crate::Schedule,
    pub(super) me: usize,
    pub(super) rails: crate::HostRails,
    /// The serving step this host has reached (a hello for it is answered).
    pub(super) current: watch::Sender<Option<StepId>>,
    /// The steps whose driver got its answer: both hosts are at the step, its tests run.
    pub(super) begun: Mutex<std::collections::HashSet<StepId>>,
    /// How each driver's step ended: `Ok` on its done, `Err` why not.
    pub(super) ended: Mutex<HashMap<StepId, Result<(), String>>>,
    pub(super) notify: Notify,
    pub(super) patience: Duration,
    pub(super) step_limit: Duration,
    /// The sweep's token: a hello must carry it (none: hellos carry none).
    pub(super) token: Option<Token>,
    pub(super) tell: Arc<dyn super::tell::Tell>,
}

/// Listens on `port` (every address) for the whole sweep, answering drivers with
/// `shared`.
pub(super) async fn listen(shared: Arc<Shared>, port: u16) -> std::io::Result<()> {
    // [::] takes IPv4 too unless net.ipv6.bindv6only is set; then 0.0.0.0 binds as
    // well (otherwise it says the port is taken, by [::] itself).
    let v6 = tokio::net::TcpListener::bind(("::", port)).await;
    let v4 = tokio::net::TcpListener::bind(("0.0.0.0", port)).await;
    let listeners: Vec<tokio::net::TcpListener> = match (v6, v4) {
        (Err(e), Err(_)) => return Err(e),
        (v6, v4) => v6.into_iter().chain(v4).collect(),
    };
    // A host has one partner a step: a few connections are all it needs.
    let gate = Arc::new(Gate::default());
    for listener in listeners {
        let (sh, gate) = (shared.clone(), gate.clone());
        tokio::spawn(async move {
            loop {
                let (sock, from) = match listener.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of descriptors, say: never a busy loop.
                        tracing::debug!("preflight control port: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                // Past the cap, with every slot held past its hello, it is closed at once.
                let Some(ticket) = gate.enter() else {
                    tracing::debug!("preflight control port: {MAX_CONNECTIONS} drivers connected: one more closed");
                    continue;
                };
                let sh = sh.clone();
                tokio::spawn(async move {
                    if let Err(e) = answer(sock, from, &sh, ticket).await {
                        let e: String = e.chars().take(300).collect();
                        tracing::warn!("preflight control connection from {from}: {e}");
                    }
                });
            }
        });
    }
    Ok(())
}

/// The control port's connections: how many are open, and those yet to say hello,
/// oldest first, each with how it is told to close.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    open: usize,
    next: u64,
    waiting: VecDeque<(u64, Arc<Eviction>)>,
}

/// Set, and its waiter woken, when a connection's slot goes to a newer one.
#[derive(Default)]
struct Eviction {
    done: AtomicBool,
    wake: tokio::sync::Notify,
}

/// One connection's slot, given back when dropped (unless it went to a newer one).
struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    eviction: Arc<Eviction>,
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new connection: a free one, or that of the oldest connection yet to
    /// say hello (told to close); `None` when every slot is held past its hello.
    fn enter(self: &Arc<Self>) -> Option<Ticket> {
        let mut st = self.lock();
        if st.open < MAX_CONNECTIONS {
            st.open += 1;
        } else {
            let (_, old) = st.waiting.pop_front()?;
            // Its slot passes to the newcomer: it does not give it back.
            old.done.store(true, Ordering::SeqCst);
            old.wake.notify_one();
        }
        let id = st.next;
        st.next += 1;
        let eviction = Arc::new(Eviction::default());
        st.waiting.push_back((id, eviction.clone()));
        Some(Ticket {
            gate: self.clone(),
            id,
            eviction,
        })
    }
}

impl Ticket {
    /// Resolves when the slot went to a newer connection.
    async fn evicted(&self) {
        self.eviction.wake.notified().await;
    }

    /// Said hello: its slot is kept from now on. False when it went to a newer
    /// connection first.
    fn hello_said(&self) -> bool {
        let mut st = self.gate.lock();
        let at = st.waiting.iter().position(|(id, _)| *id == self.id);
        at.map(|i| st.waiting.remove(i)).is_some()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.gate.lock();
        if let Some(i) = st.waiting.iter().position(|(id, _)| *id == self.id) {
            st.waiting.remove(i);
        }
        if !self.eviction.done.load(Ordering::SeqCst) {
            st.open -= 1;
        }
    }
}

/// The driver's side of a step's start: connects to `peer`'s control port, says hello
/// and waits for its rails (an earlier round may hold the partner), all within
/// `patience`.
pub(super) async fn hello(
    peer: &str,
    port: u16,
    hello: &Hello,
    patience: Duration,
) -> Result<(BufReader<OwnedReadHalf>, OwnedWriteHalf, crate::HostRails), String> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut backoff = HELLO_BACKOFF;
    loop {
        let sock = loop {
            match TcpStream::connect((peer, port)).await {
                Ok(s) => break s,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!(
                    "cannot reach {peer}'s preflight on TCP port {port} within {patience:?}: {e}"
                ))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        };
        let (r, mut w) = sock.into_split();
        let mut r = BufReader::new(r);
        let line = Message::Hello(hello.clone()).encode();
        let said = w.write_all(line.as_bytes());
        // The partner answers when it reaches this step: an earlier round may hold it.
        let got = match said.await {
            Err(e) => Err(ReadError::Closed(e.to_string())),
            Ok(()) => {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                read_message(&mut r, left).await
            }
        };
        match got {
            Ok(Message::Rails(h)) => return Ok((r, w, h)),
            Ok(Message::Refused(why)) => return Err(format!("{peer} refused the test: {why}")),
            Ok(other) => return Err(format!("{peer} answered {other:?}, not its rails")),
            // Closed unanswered: asked again while the patience lasts.
            Err(ReadError::Closed(e)) if tokio::time::Instant::now() + backoff < deadline => {
                tracing::debug!(
                    "preflight: {peer}'s control port closed a hello ({e}); again in {backoff:?}"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(HELLO_BACKOFF_MAX);
            }
            Err(e) => {
                return Err(format!(
                    "{peer}'s preflight did not answer within {patience:?}: {e}"
                ))
            }
        }
    }
}

/// Why no message was read.
#[derive(Debug)]
enum ReadError {
    /// The connection closed or was reset before a whole line came.
    Closed(String),
    /// Nothing within the time, or a line that is no message.
    Other(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed(e) | ReadError::Other(e) => f.write_str(e),
        }
    }
}

/// Reads one message, at most `MAX_LINE` bytes, within `limit`.
async fn read_message<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    limit: Duration,
) -> Result<Message, ReadError> {
    let mut buf = Vec::new();
    let read = async {
        let mut bounded = (&mut *r).take(MAX_LINE as u64 + 1);
        bounded.read_until(b'\n', &mut buf).await
    };
    match tokio::time::timeout(limit, read).await {
        Err(_) => Err(ReadError::Other(format!("nothing within {limit:?}"))),
        Ok(Err(e)) => Err(ReadError::Closed(e.to_string())),
        Ok(Ok(0)) => Err(ReadError::Closed("the connection closed".into())),
        Ok(Ok(_)) if !buf.ends_with(b"\n") && buf.len() <= MAX_LINE => Err(ReadError::Closed(
            "the connection closed in the middle of a line".into(),
        )),
        Ok(Ok(_)) => {
            let line = String::from_utf8_lossy(&buf);
            Message::decode(&line).map_err(|e| ReadError::Other(e.to_string()))
        }
    }
}

/// One control connection: a driver's hello, answered when this host reaches the step,
/// then its done. Until its hello its slot may go to a newer connection.
async fn answer(
    sock: TcpStream,
    from: std::net::SocketAddr,
    sh: &Shared,
    ticket: Ticket,
) -> Result<(), String> {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    // A driver says hello as soon as it connects.
    let first = tokio::select! {
        m = read_message(&mut r, HELLO_WITHIN) => Some(m),
        () = ticket.evicted() => None,
    };
    let hello = match first {
        Some(Ok(Message::Hello(h))) if ticket.hello_said() => h,
        None | Some(Ok(Message::Hello(_))) => {
            tracing::debug!("preflight control port: a connection that had not said hello closed for a newer one");
            return Ok(());
        }
        Some(Ok(other)) => return Err(format!("expected a hello, got {other:?}")),
        Some(Err(e)) => return Err(e.to_string()),
    };
    if !Token::admits(sh.token.as_ref(), hello.token.as_ref()) {
        let why = match (&sh.token, &hello.token) {
            (Some(_), None) => "the hello carries no token and this sweep has one (--token-file or ROCEWATCH_PREFLIGHT_TOKEN: the same on every host)",
            (None, _) => "the hello carries a token and this host was started without one (--token-file or ROCEWATCH_PREFLIGHT_TOKEN: the same on every host)",
            (Some(_), Some(_)) => "the hello's token is not this sweep's (--token-file or ROCEWATCH_PREFLIGHT_TOKEN: the same on every host)",
        };
        let _ = w
            .write_all(Message::Refused(why.into()).encode().as_bytes())
            .await;
        // Said at any log level: someone on the network, or a host of the job started
        // with another token. An IPv4 peer of the [::] listener as IPv4.
        let from = std::net::SocketAddr::new(from.ip().to_canonical(), from.port());
        sh.tell.note(format!(
            "refused a hello from {from} naming {} {}: {why}",
            hello.from,
            super::tell::step_name(hello.round, hello.phase)
        ));
        return Ok(());
    }
    let id = hello.step();
    if let Err(why) = admit(&sh.schedule, sh.me, &id) {
        let _ = w
            .write_all(Message::Refused(why.clone()).encode().as_bytes())
            .await;
        return Err(format!("refused a hello: {why}"));
    }
    let mut current = sh.current.subscribe();
    let reached = current.wait_for(|c| c.as_ref() == Some(&id));
    if tokio::time::timeout(sh.patience + sh.step_limit * 2, reached)
        .await
        .is_err()
    {
        return Err(format!(
            "{} asked for round {} {:?}, which this host did not reach in time",
            id.from, id.round, id.phase
        ));
    }
    let reply = Message::Rails(sh.rails.clone()).encode();
    let written = w.write_all(reply.as_bytes()).await;
    if written.is_ok() {
        // The serving step's wait for its driver ends: the tests' limit begins.
        sh.begun.lock().expect("not poisoned").insert(id.clone());
        sh.notify.notify_waiters();
    }
    let ended = match written {
        Err(e) => Err(format!("answering {}: {e}", id.from)),
        Ok(()) => match read_message(&mut r, sh.step_limit).await {
            Ok(Message::Done(d)) if d == id => Ok(()),
            Ok(other) => Err(format!("expected done, got {other:?}")),
            Err(e) => Err(e.to_string()),
        },
    };
    sh.ended.lock().expect("not poisoned").insert(id, ended);
    sh.notify.notify_waiters();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partner whose control port closes a hello's connection without answering (its
    /// connections all taken, say) is asked again within the patience: the hello that
    /// follows gets its rails.
    #[tokio::test]
    async fn a_hello_closed_unanswered_is_said_again() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let rails = crate::HostRails {
            host: "b".into(),
            nics: Vec::new(),
        };
        let reply = Message::Rails(rails.clone()).encode();
        let server = tokio::spawn(async move {
            let mut hellos = 0;
            loop {
                let (sock, _) = listener.accept().await.unwrap();
                hellos += 1;
                if hellos <= 2 {
                    // Closed at once, as a full control port does.
                    drop(sock);
                    continue;
                }
                let (r, mut w) = sock.into_split();
                let mut r = BufReader::new(r);
                let m = read_message(&mut r, Duration::from_secs(5)).await;
                assert!(matches!(m, Ok(Message::Hello(_))), "{m:?}");
                w.write_all(reply.as_bytes()).await.unwrap();
                return hellos;
            }
        });
        let id = StepId {
            from: "a".into(),
            round: 0,
            phase: crate::Phase::Forward,
        };
        let patience = Duration::from_secs(10);
        let got = hello("127.0.0.1", port, &Hello::new(id, None), patience).await;
        let (_, _, theirs) = got.expect("the third hello is answered");
        assert_eq!(theirs, rails);
        assert_eq!(server.await.unwrap(), 3);
    }

    /// Past the cap the oldest connection yet to say hello gives its slot to the
    /// newcomer (and is told so); admitted ones never do; every slot comes back.
    #[tokio::test]
    async fn the_oldest_silent_connection_makes_room_and_admitted_ones_stay() {
        let gate = Arc::new(Gate::default());
        let mut held: Vec<Ticket> = (0..MAX_CONNECTIONS)
            .map(|_| gate.enter().expect("a free slot"))
            .collect();
        let newcomer = gate.enter().expect("the oldest silent one's slot");
        assert!(held[0].eviction.done.load(Ordering::SeqCst));
        // Told: its wait for the eviction ends at once.
        tokio::time::timeout(Duration::from_secs(1), held[0].evicted())
            .await
            .expect("the evicted connection is woken");
        assert!(!held[0].hello_said(), "too late for its hello");
        assert_eq!(gate.lock().open, MAX_CONNECTIONS);
        // Every other one says hello: none can be evicted, so a newcomer is refused.
        for t in &held[1..] {
            assert!(t.hello_said());
        }
        assert!(newcomer.hello_said());
        assert!(gate.enter().is_none());
        drop(held.remove(0));
        assert_eq!(
            gate.lock().open,
            MAX_CONNECTIONS,
            "the evicted one gave nothing back"
        );
        drop(held.pop());
        assert_eq!(gate.lock().open, MAX_CONNECTIONS - 1);
        assert!(gate.enter().is_some());
        drop(held);
        drop(newcomer);
        assert_eq!(gate.lock().open, 0);
        assert!(gate.lock().waiting.is_empty());
    }
}
