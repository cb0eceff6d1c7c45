//! Handing a [`HostChannel`] to a host application that was started on its own (not spawned by
//! the server): the server listens on a Unix socket, a host connects, the server creates a
//! channel and passes its sealed memfd with `SCM_RIGHTS`; the host attaches to it.
//!
//! Authentication: the socket file is created mode 0600, and the server accepts only peers whose
//! `SO_PEERCRED` uid is its own (or root's). Every socket operation has a timeout
//! ([`HANDOFF_TIMEOUT`]); a peer that connects and stalls costs one timeout, not the server.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{HostChannel, HostError};
use crate::limits::HANDOFF_TIMEOUT;

/// The byte message sent with the fd (and checked by the host).
pub const HANDOFF_MAGIC: [u8; 8] = *b"SFDDSHC1";

fn io_err(path: &Path, source: io::Error) -> HostError {
    HostError::Dir { path: path.display().to_string(), source }
}

/// The server side: a Unix socket host applications connect to.
#[derive(Debug)]
pub struct ChannelListener {
    listener: UnixListener,
    path: PathBuf,
}

impl ChannelListener {
    /// Binds `path` (which must not exist) with mode 0600.
    ///
    /// # Errors
    /// `Dir` naming the path and the system error.
    pub fn bind(path: &Path) -> Result<Self, HostError> {
        let listener = UnixListener::bind(path).map_err(|e| io_err(path, e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io_err(path, e))?;
        Ok(Self { listener, path: path.to_path_buf() })
    }

    /// Accepts one host: checks its uid, creates a channel with `ring_bytes` per ring, passes
    /// the memfd. Returns the server's end of the channel.
    ///
    /// # Errors
    /// `Dir` for socket errors (including a timeout and a refused uid: `PermissionDenied`),
    /// `Shm`/`Ring` for the channel.
    pub fn accept(&self, ring_bytes: usize) -> Result<HostChannel, HostError> {
        self.accept_within(ring_bytes, None)
    }

    /// [`accept`](Self::accept), giving up after `timeout` without a connection (`Dir` with
    /// `TimedOut`), so a server waiting for a host that died does not wait forever.
    ///
    /// # Errors
    /// As [`accept`](Self::accept).
    pub fn accept_timeout(
        &self,
        ring_bytes: usize,
        timeout: Duration,
    ) -> Result<HostChannel, HostError> {
        self.accept_within(ring_bytes, Some(timeout))
    }

    fn accept_within(
        &self,
        ring_bytes: usize,
        timeout: Option<Duration>,
    ) -> Result<HostChannel, HostError> {
        if let Some(t) = timeout {
            let mut pfd =
                libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ms = libc::c_int::try_from(t.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: one valid pollfd for the call's duration.
            let n = unsafe { libc::poll(&raw mut pfd, 1, ms) };
            if n < 0 {
                return Err(io_err(&self.path, io::Error::last_os_error()));
            }
            if n == 0 {
                let e = io::Error::new(io::ErrorKind::TimedOut, format!("no host within {t:?}"));
                return Err(io_err(&self.path, e));
            }
        }
        let (stream, _) = self.listener.accept().map_err(|e| io_err(&self.path, e))?;
        stream.set_write_timeout(Some(HANDOFF_TIMEOUT)).map_err(|e| io_err(&self.path, e))?;
        let uid = peer_uid(&stream).map_err(|e| io_err(&self.path, e))?;
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        if uid != me && uid != 0 {
            return Err(io_err(
                &self.path,
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("peer uid {uid} is not {me}"),
                ),
            ));
        }
        let channel = HostChannel::create(ring_bytes)?;
        send_fd(&stream, channel.fd().as_raw_fd()).map_err(|e| io_err(&self.path, e))?;
        Ok(channel)
    }
}

impl Drop for ChannelListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The host side: connects to the server's socket and attaches to the channel it passes.
///
/// # Errors
/// `Dir` for socket errors or a handoff without a valid fd; `Shm`/`Layout`/`Ring` from attach.
pub fn connect(path: &Path) -> Result<HostChannel, HostError> {
    let stream = UnixStream::connect(path).map_err(|e| io_err(path, e))?;
    stream.set_read_timeout(Some(HANDOFF_TIMEOUT)).map_err(|e| io_err(path, e))?;
    let fd = recv_fd(&stream).map_err(|e| io_err(path, e))?;
    HostChannel::attach(fd)
}

fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    // SAFETY: ucred is plain old data; zero is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid socket fd, out-pointer and length for SO_PEERCRED.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Control-message buffer for one fd, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct FdCmsg([u8; 64]);

fn send_fd(stream: &UnixStream, fd: i32) -> io::Result<()> {
    let mut data = HANDOFF_MAGIC;
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
    let mut cbuf = FdCmsg([0; 64]);
    // SAFETY: msghdr is plain old data; zero is valid; every pointer set below outlives sendmsg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) } as usize;
    assert!(msg.msg_controllen <= cbuf.0.len());
    // SAFETY: msg_control points at a buffer of msg_controllen bytes, so CMSG_FIRSTHDR returns a
    // header inside it, and CMSG_DATA leaves room for one i32 (CMSG_SPACE above).
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&raw const msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd);
    }
    // SAFETY: a valid socket and a msghdr whose pointers are valid for the call.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short handoff message"));
    }
    Ok(())
}

fn recv_fd(stream: &UnixStream) -> io::Result<OwnedFd> {
    let mut data = [0u8; 8];
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
    let mut cbuf = FdCmsg([0; 64]);
    // SAFETY: msghdr is plain old data; zero is valid; every pointer set below outlives recvmsg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len();
    // SAFETY: a valid socket and a msghdr whose buffers are valid for the call. MSG_CMSG_CLOEXEC:
    // the received fd must not leak into children this host spawns.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // Take ownership of any fds first (so they are closed on every error path below).
    let mut fds = Vec::new();
    // SAFETY: walking the control messages recvmsg filled, within msg_controllen, with the libc
    // macros; SCM_RIGHTS data holds (cmsg_len - CMSG_LEN(0)) / 4 fds now owned by this process.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count =
                    ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<i32>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || n as usize != data.len() || data != HANDOFF_MAGIC {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a storefn channel handoff"));
    }
    match fds.len() {
        1 => Ok(fds.pop().expect("one fd")),
        k => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("handoff carried {k} fds, expected 1"),
        )),
    }
}
