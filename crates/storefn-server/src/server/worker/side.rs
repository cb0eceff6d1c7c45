//! What the loop's side threads share (the writer, the verifier, the λ runner): each takes
//! orders through a channel and answers through another, and raises an eventfd in the loop's
//! poll set once answers are ready; its handle closes the order channel and joins the thread
//! when dropped.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The eventfd a side thread raises when it has sent answers.
#[derive(Debug)]
pub(super) struct Wake(OwnedFd);

impl Wake {
    pub(super) fn new() -> std::io::Result<Arc<Self>> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just created and is owned by nothing else.
        Ok(Arc::new(Self(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// The descriptor the loop polls while answers are pending.
    pub(super) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Answers were sent (the side thread, after sending them).
    pub(super) fn raise(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the eventfd this handle owns.
        unsafe { libc::write(self.fd(), one.as_ptr().cast(), 8) };
    }

    /// The loop is about to take the answers: the counter starts again (the answers themselves
    /// come from the channel, so a raise racing this is at worst one spurious wake).
    pub(super) fn clear(&self) {
        let mut n = [0u8; 8];
        // SAFETY: reads 8 bytes into a live buffer from the non-blocking eventfd.
        unsafe { libc::read(self.fd(), n.as_mut_ptr().cast(), 8) };
    }
}

/// A side thread and the sender of its orders: dropping it closes the channel, which ends the
/// thread's receive loop, and joins the thread.
pub(super) struct Side<S> {
    tx: Option<S>,
    thread: Option<JoinHandle<()>>,
}

impl<S> Side<S> {
    /// Starts thread `name` running `body`, which receives what `tx` sends.
    pub(super) fn spawn(
        name: String,
        tx: S,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Self> {
        let thread = std::thread::Builder::new().name(name).spawn(body)?;
        Ok(Self { tx: Some(tx), thread: Some(thread) })
    }

    /// Where orders go.
    pub(super) fn tx(&self) -> &S {
        self.tx.as_ref().expect("the side thread runs while the worker does")
    }
}

impl<S> Drop for Side<S> {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
