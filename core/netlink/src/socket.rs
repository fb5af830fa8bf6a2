//! One blocking netlink socket: send a request, collect its replies.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use crate::msg::{self, Message};
use crate::NetlinkError;

/// The largest datagram read at once; the kernel splits dumps across datagrams.
const RECV_BUF: usize = 64 * 1024;

/// A netlink socket of one protocol (`NETLINK_RDMA`, `NETLINK_ROUTE`).
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
    capture: Option<(PathBuf, u32)>,
}

/// Makes a receive on `fd` fail after `timeout` instead of blocking (`SO_RCVTIMEO`).
pub(crate) fn set_recv_timeout(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: tv is a valid timeval of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl NetlinkSocket {
    /// Opens and binds a socket of `protocol`; replies that take longer than `timeout`
    /// fail the request instead of blocking a collection forever.
    pub fn open(
        protocol: libc::c_int,
        family: &'static str,
        timeout: Duration,
    ) -> Result<Self, NetlinkError> {
        let open_err = |source| NetlinkError::Open { family, source };
        // SAFETY: plain socket(2); the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(open_err(io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        set_recv_timeout(&fd, timeout).map_err(open_err)?;
        // SAFETY: an all-zero sockaddr_nl is valid; the family is set below.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: addr is a valid sockaddr_nl of the size passed.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(open_err(io::Error::last_os_error()));
        }
        Ok(NetlinkSocket {
            fd,
            seq: 0,
            buf: vec![0; RECV_BUF],
            capture: None,
        })
    }

    /// A socket over an already connected descriptor (a `socketpair(2)` end), for tests
    /// that play a kernel's recorded replies back.
    #[cfg(test)]
    pub(crate) fn from_connected(fd: OwnedFd) -> Self {
        NetlinkSocket {
            fd,
            seq: 0,
            buf: vec![0; RECV_BUF],
            capture: None,
        }
    }

    /// Writes every request and every received datagram to `dir` (`NNNN-request.bin`,
    /// `NNNN-reply-K.bin`): what the kernel said, for a bug report or a test fixture.
    pub fn capture_to(&mut self, dir: PathBuf) {
        self.capture = Some((dir, 0));
    }

    /// The next sequence number (the kernel echoes it in its replies).
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `request` (built with sequence number `seq`) and calls `on_message` for each
    /// reply message until the request is answered: a single reply, or, for a dump, every
    /// message up to `NLMSG_DONE`. A kernel error (an `NLMSG_ERROR`, or a dump's
    /// `NLMSG_DONE` carrying a negative errno) ends the request with
    /// [`NetlinkError::Kernel`].
    pub fn request(
        &mut self,
        what: &str,
        request: &[u8],
        seq: u32,
        dump: bool,
        mut on_message: impl FnMut(Message<'_>) -> Result<(), String>,
    ) -> Result<(), NetlinkError> {
        let io_err = |source| NetlinkError::Io {
            request: what.to_string(),
            source,
        };
        let capture_n = self.capture.as_mut().map(|(dir, n)| {
            *n += 1;
            let _ = std::fs::create_dir_all(&*dir);
            let _ = std::fs::write(dir.join(format!("{n:04}-request.bin")), request);
            (dir.clone(), *n)
        });
        // SAFETY: request is a valid buffer of the length passed.
        let sent = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                request.as_ptr() as *const libc::c_void,
                request.len(),
                0,
            )
        };
        if sent < 0 {
            return Err(io_err(io::Error::last_os_error()));
        }
        let mut datagram = 0;
        loop {
            // The datagram's whole length first (MSG_PEEK|MSG_TRUNC: netlink_recvmsg and
            // unix_dgram_recvmsg return it whatever the buffer), so that a reply larger
            // than the buffer (a PF's VF list with stats, ~300 bytes a VF) is read whole
            // instead of truncated.
            // SAFETY: a zero-length read into a valid buffer; nothing is written.
            let len = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    0,
                    libc::MSG_PEEK | libc::MSG_TRUNC,
                )
            };
            if len < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io_err(e));
            }
            if len as usize > self.buf.len() {
                self.buf.resize(len as usize, 0);
            }
            // SAFETY: buf is a valid, writable buffer of the length passed.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io_err(e));
            }
            let data = &self.buf[..n as usize];
            datagram += 1;
            if let Some((dir, k)) = &capture_n {
                let _ = std::fs::write(dir.join(format!("{k:04}-reply-{datagram}.bin")), data);
            }
            let mut finished = false;
            for m in msg::messages(data) {
                let m = m.map_err(|detail| NetlinkError::Malformed {
                    request: what.to_string(),
                    detail,
                })?;
                if m.seq != seq {
                    continue; // a late answer to an earlier, timed-out request
                }
                match m.ty {
                    msg::T_ERROR => {
                        let code = m.error_code().unwrap_or(-libc::EPROTO);
                        if code != 0 {
                            return Err(NetlinkError::Kernel {
                                request: what.to_string(),
                                errno: -code,
                            });
                        }
                        finished = true; // an acknowledgement
                    }
                    msg::T_DONE => {
                        if let Some(code @ ..=-1) = m.done_code() {
                            return Err(NetlinkError::Kernel {
                                request: what.to_string(),
                                errno: -code,
                            });
                        }
                        finished = true;
                    }
                    _ => {
                        on_message(m).map_err(|detail| NetlinkError::Malformed {
                            request: what.to_string(),
                            detail,
                        })?;
                        if !dump {
                            finished = true;
                        }
                    }
                }
            }
            if finished {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// One reply message larger than the 64 KiB buffer (a PF with ~250 VFs and their
    /// stats) is read whole, not cut at the buffer.
    #[test]
    fn a_reply_larger_than_the_buffer_is_read_whole() {
        let (mut sock, kernel) = crate::replay::pair();
        let seq = sock.next_seq();
        let payload = 100_000usize;
        let mut m = Vec::with_capacity(16 + payload);
        m.extend_from_slice(&((16 + payload) as u32).to_ne_bytes());
        m.extend_from_slice(&16u16.to_ne_bytes()); // RTM_NEWLINK
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend((0..payload).map(|i| (i % 251) as u8));
        kernel.reply(&m);
        let mut got = Vec::new();
        sock.request("RTM_GETLINK", b"req", seq, false, |msg| {
            got.extend_from_slice(msg.payload);
            Ok(())
        })
        .unwrap();
        assert_eq!(kernel.request(), b"req");
        assert_eq!(got.len(), payload);
        assert_eq!(got[..], m[16..]);
    }
}
