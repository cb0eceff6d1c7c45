//! DDS's offload engine, as seen from the server: the server does not know the application's
//! messages or the offload functions (they live in storefn-dds, above this crate); it hands each
//! frame's OFFLOAD requests to an [`OffloadHook`] as one batch, serves the reads the hook
//! returns next to the data (straight into the response frame), and forwards the rest to the
//! host application through the hook, relaying its answers back (docs/design/dds.md, "DDS over the
//! network").

/// What the offload functions decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadDecision {
    /// Serve it here: read `size` bytes at `offset` of the hook's file `file`.
    Read { file: u32, offset: u64, size: u32 },
    /// Send it to the host application.
    Forward,
}

/// The server's side of DDS. Implemented by storefn-dds; shared by every server thread.
pub trait OffloadHook: Send + Sync + std::fmt::Debug {
    /// Judges one batch (a frame's OFFLOAD messages, in order): appends one decision per
    /// message to `out`. A message it cannot judge is `Forward` (always correct).
    fn decide(&self, msgs: &[&[u8]], out: &mut Vec<OffloadDecision>);
    /// Reads `buf.len()` bytes at `offset` of `file` into `buf` (the response frame's bytes);
    /// returns how many it read, or an errno.
    ///
    /// # Errors
    /// An errno (EBADF for a file id the hook does not know).
    fn read(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<usize, i32>;
    /// Forwards `msg` to the host application under `token`.
    ///
    /// # Errors
    /// Why it could not be sent (the client gets `IO` with this text).
    fn forward(&self, token: u64, msg: &[u8]) -> Result<(), String>;
    /// Hands each host answer ready now to `f(token, answer)`; returns how many.
    fn poll_answers(&self, f: &mut dyn FnMut(u64, &[u8])) -> usize;
}
