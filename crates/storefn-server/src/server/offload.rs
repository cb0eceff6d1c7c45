//! DDS's offload engine, as seen from the server: the server does not know the application's
//! messages or the offload functions (they live in storefn-dds, above this crate); it hands each
//! frame's OFFLOAD requests to an [`OffloadHook`] as one batch, serves the reads the hook
//! returns next to the data (a range read of the worker's engine straight into the buffer the
//! answer is sent from), and forwards the rest to the host application through the hook,
//! relaying its answers back (docs/design/dds.md, "DDS over the network").

/// What the offload functions decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadDecision {
    /// Serve it here: read `size` bytes at `offset` of the hook's file `file`; `epoch` is the
    /// hook's change epoch taken before the decision ([`OffloadHook::unchanged_since`]).
    Read { file: u32, offset: u64, size: u32, epoch: u64 },
    /// Send it to the host application.
    Forward,
}

/// An offloaded read as checked after it completed ([`OffloadHook::unchanged_since`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadCheck {
    pub file: u32,
    pub offset: u64,
    pub size: u32,
    /// From the decision ([`OffloadDecision::Read`]).
    pub epoch: u64,
    /// From [`OffloadHook::file`], just before the read was submitted.
    pub stamp: u64,
}

/// Bits of a forwarding token below the worker thread's id: a thread's slots number at most
/// connections x in-flight requests per connection, and must fit below it.
pub const TOKEN_THREAD_SHIFT: u32 = 24;
const _: () = assert!(
    (super::MAX_CONNS_PER_THREAD as u64) * (super::MAX_IN_FLIGHT_PER_CONN as u64)
        <= 1 << TOKEN_THREAD_SHIFT
);
const _: () = assert!(super::MAX_THREADS <= 1 << (32 - TOKEN_THREAD_SHIFT));

/// The server thread that forwarded the request of `token` (the hook routes the host's answer
/// back to that thread's [`OffloadHook::poll_answers`]). A token is
/// `generation << 32 | thread << TOKEN_THREAD_SHIFT | slot`.
#[must_use]
pub fn token_thread(token: u64) -> usize {
    ((token & 0xFFFF_FFFF) >> TOKEN_THREAD_SHIFT) as usize
}

/// What the hook hands a server thread for its forwarded requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostAnswer<'a> {
    /// The host application's answer to the request of `token`.
    Data { token: u64, data: &'a [u8] },
    /// The host application the requests were forwarded to under `host` (the value
    /// [`OffloadHook::forward`] returned) is gone: every one still waiting fails now with
    /// `reason` instead of waiting for its timeout.
    HostGone { host: u64, reason: &'a str },
}

/// The server's side of DDS. Implemented by storefn-dds; shared by every server thread.
pub trait OffloadHook: Send + Sync + std::fmt::Debug {
    /// Judges one batch (a frame's OFFLOAD messages, in order: message `i` is
    /// `bytes[bounds[i].0..bounds[i].1]`): appends one decision per message to `out`. A message
    /// it cannot judge is `Forward` (always correct).
    fn decide(&self, bytes: &[u8], bounds: &[(usize, usize)], out: &mut Vec<OffloadDecision>);
    /// The open file behind the hook's file id, for the server to read `[offset, +size)` from
    /// with its engine (which registers the file through its descriptor), and the
    /// change stamp of that range now; `None` (unknown file, or a change of the range running)
    /// forwards the request.
    fn file(
        &self,
        file: u32,
        offset: u64,
        size: u32,
    ) -> Option<(std::sync::Arc<std::fs::File>, u64)>;
    /// Whether nothing that could change the read's bytes (a host write of the range, or a
    /// create, open or close) started since the decision's epoch and the submission's stamp
    /// were taken: a read that completed while this holds saw no concurrent change (no torn
    /// page); otherwise the request is forwarded instead.
    fn unchanged_since(&self, read: &ReadCheck) -> bool;
    /// Forwards `msg` to the host application under `token` (which names the forwarding
    /// thread: [`token_thread`]); returns which host it went to, for a later
    /// [`HostAnswer::HostGone`].
    ///
    /// # Errors
    /// Why it could not be sent (the client gets `IO` with this text).
    fn forward(&self, token: u64, msg: &[u8]) -> Result<u64, String>;
    /// Hands each answer for server thread `thread` ready now to `f`; returns how many. Only
    /// answers to requests that thread forwarded are handed to it.
    fn poll_answers(&self, thread: usize, f: &mut dyn FnMut(HostAnswer<'_>)) -> usize;
    /// A descriptor that becomes readable (an eventfd: the worker reads 8 bytes to reset it)
    /// when answers for server thread `thread` may be ready, so a worker waiting for answers
    /// sleeps in `poll`. Default `None`: the worker polls for answers without sleeping while
    /// any are awaited.
    fn wake_fd(&self, thread: usize) -> Option<std::os::fd::RawFd> {
        let _ = thread;
        None
    }
    /// Whether the host application behind the hook is alive (`None`: the hook cannot tell);
    /// the metrics endpoint reads it at each scrape.
    fn host_alive(&self) -> Option<bool> {
        None
    }
    /// An offloaded read took `ns` from submission to its reaped completion (the device's
    /// share of the request, for the hook's time split). Default: ignored.
    fn offloaded_read_time(&self, ns: u64) {
        let _ = ns;
    }
}
