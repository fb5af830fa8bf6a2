//! Test support: an [`RdmaNetlink`] (or any netlink client) whose kernel is the other end of a `socketpair(2)`.
//! A test hands it the replies a kernel gave (recorded in `testdata/`, or crafted from
//! the uapi layout) and reads back the request the client sent, so a whole request
//! (framing, sequence numbers, dumps across datagrams, errors) runs without RDMA.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::rdma::RdmaNetlink;
use crate::socket::NetlinkSocket;

/// The kernel's end of the pair.
pub(crate) struct FakeKernel {
    peer: OwnedFd,
}

/// A client and its fake kernel; receives on both ends time out after 2 s.
pub(crate) fn rdma_pair() -> (RdmaNetlink, FakeKernel) {
    let (sock, kernel) = pair();
    (RdmaNetlink { sock }, kernel)
}

/// A socket and its fake kernel, for any protocol's client; receives on both ends time
/// out after 2 s.
pub(crate) fn pair() -> (NetlinkSocket, FakeKernel) {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two descriptors; the result is checked.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are fresh and owned from here on.
    let (ours, peer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    for fd in [&ours, &peer] {
        crate::socket::set_recv_timeout(fd, std::time::Duration::from_secs(2)).unwrap();
    }
    (NetlinkSocket::from_connected(ours), FakeKernel { peer })
}

impl FakeKernel {
    /// Queues one datagram for the client (a Unix datagram queue holds about ten: queue
    /// the replies of one request at a time).
    pub(crate) fn reply(&self, datagram: &[u8]) {
        // SAFETY: datagram is a valid buffer of the length passed.
        let n = unsafe {
            libc::send(
                self.peer.as_raw_fd(),
                datagram.as_ptr() as *const libc::c_void,
                datagram.len(),
                0,
            )
        };
        assert_eq!(
            n,
            datagram.len() as isize,
            "{}",
            std::io::Error::last_os_error()
        );
    }

    /// The next request the client sent.
    pub(crate) fn request(&self) -> Vec<u8> {
        let mut buf = vec![0u8; 65536];
        // SAFETY: buf is a valid, writable buffer of the length passed.
        let n = unsafe {
            libc::recv(
                self.peer.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        assert!(n >= 0, "no request: {}", std::io::Error::last_os_error());
        buf.truncate(n as usize);
        buf
    }
}
