//! The host path: the host application (a separate process) reaches the storage server's file
//! service through the host file library ([`HostFiles`]: create/open/read/write/flush/close,
//! blocking or submit + poll) over a [`HostChannel`], a pair of progressive rings in one sealed
//! memfd: requests host -> service, responses service -> host. [`FileService`] is the service
//! side, a library type the server embeds: it executes requests on files confined beneath one
//! directory and calls [`FileHooks`] on every write and read (where DDS's `cache` and
//! `invalidate` functions run).
//!
//! Layout: docs/FORMAT.md, "DDS host channel".

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::limits::DEFAULT_TIMEOUT;
use crate::limits::MAX_RING_BYTES;
use crate::ring::progressive::{ring_words, ProgressiveRing};
use crate::ring::{RingError, SharedMemory, ShmError};

#[cfg(feature = "bench")]
pub mod bench;
mod client;
pub mod doorbell;
pub mod forward;
pub mod handoff;
mod service;
pub mod wire;

pub use client::{Completion, HostFiles};
pub use doorbell::Doorbell;
pub use forward::{ForwardEnd, Side};
pub use handoff::{connect, ChannelListener};
pub(crate) use service::idle_wait as service_idle_wait;
pub use service::{FileHooks, FileService, ServiceStats, SharedFiles};

/// Channel magic, "SFDDSHC1" little-endian.
pub const CHANNEL_MAGIC: u64 = u64::from_le_bytes(*b"SFDDSHC1");
/// Channel layout version (2: doorbells; 3: the host's heartbeat).
pub const CHANNEL_VERSION: u64 = 3;
/// Channel header bytes; the request ring follows, then the response ring.
pub const CHANNEL_HEADER_BYTES: usize = 512;
/// Byte offsets of the channel header words.
pub const CH_MAGIC: usize = 0;
/// Layout version.
pub const CH_VERSION: usize = 8;
/// Data bytes of each of the two rings.
pub const CH_RING_BYTES: usize = 16;
/// Request ring's doorbell: `seq` (its low 32 bits are the futex word), then `waiters`. Each
/// bell on its own 128 bytes, apart from the other bell's traffic.
pub const CH_REQ_BELL_SEQ: usize = 128;
/// Request ring's doorbell waiters.
pub const CH_REQ_BELL_WAITERS: usize = 136;
/// Response ring's doorbell `seq`.
pub const CH_RESP_BELL_SEQ: usize = 256;
/// Response ring's doorbell waiters.
pub const CH_RESP_BELL_WAITERS: usize = 264;
/// The host application's heartbeat: a counter it bumps whenever it looks for requests; the
/// server judges the host gone when it stops moving ([`HOST_HEARTBEAT_TIMEOUT`]).
pub const CH_HEARTBEAT: usize = 384;
/// Largest message on either ring: a header plus [`wire::MAX_IO_BYTES`] (paths are shorter).
pub const CHANNEL_MAX_MESSAGE: usize = wire::REQUEST_HEADER_BYTES + crate::limits::MAX_IO_BYTES;

/// Host-path errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// Mapping the channel failed.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// A ring failed (full past the timeout, corrupt, message too large).
    #[error(transparent)]
    Ring(#[from] RingError),
    /// The channel header is wrong, named.
    #[error("host channel: {0}")]
    Layout(String),
    /// A message too short or answering no outstanding request.
    #[error("host channel: malformed message: {0}")]
    Malformed(String),
    /// The file service answered with an error.
    #[error("host file {op}: {}", std::io::Error::from_raw_os_error(*.errno))]
    File {
        /// The operation.
        op: &'static str,
        /// errno from the service.
        errno: i32,
    },
    /// No answer in time.
    #[error("host file {op}: no response after {after:?}")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The wait.
        after: Duration,
    },
    /// A blocking call while submitted requests are still outstanding.
    #[error("host files: blocking call with {0} submitted requests outstanding; poll them first")]
    Busy(usize),
    /// A new host application while the attached one is alive.
    #[error("a host application is attached and alive (its heartbeat moved within {0:?})")]
    HostAlive(Duration),
    /// The service's directory could not be opened.
    #[error("file service directory {path}: {source}")]
    Dir {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Two progressive rings in one sealed memfd (host <-> file service).
#[derive(Debug)]
pub struct HostChannel {
    shm: SharedMemory,
    ring_bytes: usize,
}

impl HostChannel {
    /// Creates a channel with two rings of `ring_bytes` data bytes each.
    ///
    /// # Errors
    /// `Shm` or `Ring` (a size the ring refuses).
    pub fn create(ring_bytes: usize) -> Result<Self, HostError> {
        let total = CHANNEL_HEADER_BYTES + 2 * ring_words(ring_bytes) * 8;
        let shm = SharedMemory::create("storefn-dds-host", total)?;
        let ch = Self { shm, ring_bytes };
        ProgressiveRing::init(ch.ring_words(0), ring_bytes, CHANNEL_MAX_MESSAGE)?;
        ProgressiveRing::init(ch.ring_words(1), ring_bytes, CHANNEL_MAX_MESSAGE)?;
        let w = ch.shm.words();
        w[CH_RING_BYTES / 8].store(ring_bytes as u64, Ordering::Relaxed);
        w[CH_VERSION / 8].store(CHANNEL_VERSION, Ordering::Relaxed);
        // Release: a peer acquiring the magic sees the header and both ring headers.
        w[CH_MAGIC / 8].store(CHANNEL_MAGIC, Ordering::Release);
        Ok(ch)
    }

    /// Attaches to a channel another process created (an inherited or passed memfd).
    ///
    /// # Errors
    /// `Shm` (unsealed fd), `Layout` naming the bad header word, `Ring` for a bad ring header.
    pub fn attach(fd: OwnedFd) -> Result<Self, HostError> {
        let shm = SharedMemory::attach(fd)?;
        let w = shm.words();
        // Acquire: pairs with the creator's release store of the magic.
        if w[CH_MAGIC / 8].load(Ordering::Acquire) != CHANNEL_MAGIC {
            return Err(HostError::Layout(format!("offset {CH_MAGIC}: no channel magic")));
        }
        let version = w[CH_VERSION / 8].load(Ordering::Relaxed);
        if version != CHANNEL_VERSION {
            return Err(HostError::Layout(format!("offset {CH_VERSION}: version {version}")));
        }
        let ring_bytes = usize::try_from(w[CH_RING_BYTES / 8].load(Ordering::Relaxed)).unwrap_or(0);
        // Range first: `ring_words` of an absurd size would overflow.
        if !ring_bytes.is_power_of_two()
            || ring_bytes > MAX_RING_BYTES
            || CHANNEL_HEADER_BYTES + 2 * ring_words(ring_bytes) * 8 > shm.len_bytes()
        {
            return Err(HostError::Layout(format!(
                "offset {CH_RING_BYTES}: ring bytes {ring_bytes} do not fit the {}-byte region",
                shm.len_bytes()
            )));
        }
        let ch = Self { shm, ring_bytes };
        for i in 0..2 {
            let ring = ProgressiveRing::attach(ch.ring_words(i))?;
            if ring.max_message() < CHANNEL_MAX_MESSAGE {
                return Err(HostError::Layout(format!(
                    "ring {i}: max message {} below {CHANNEL_MAX_MESSAGE}",
                    ring.max_message()
                )));
            }
        }
        Ok(ch)
    }

    fn ring_words(&self, which: usize) -> &[std::sync::atomic::AtomicU64] {
        let start = CHANNEL_HEADER_BYTES / 8 + which * ring_words(self.ring_bytes);
        &self.shm.words()[start..start + ring_words(self.ring_bytes)]
    }

    /// Host -> service. Built from the sizes validated at create/attach, never re-read from
    /// shared memory (a peer rewriting the header later cannot change them under us).
    pub fn requests(&self) -> ProgressiveRing<'_> {
        ProgressiveRing::view(self.ring_words(0), self.ring_bytes, CHANNEL_MAX_MESSAGE)
    }

    /// Service -> host.
    pub fn responses(&self) -> ProgressiveRing<'_> {
        ProgressiveRing::view(self.ring_words(1), self.ring_bytes, CHANNEL_MAX_MESSAGE)
    }

    fn bell(&self, seq: usize, waiters: usize) -> Doorbell<'_> {
        let w = self.shm.words();
        Doorbell::new(&w[seq / 8], &w[waiters / 8])
    }

    /// The request ring's doorbell (rung by whoever pushes requests).
    pub fn request_bell(&self) -> Doorbell<'_> {
        self.bell(CH_REQ_BELL_SEQ, CH_REQ_BELL_WAITERS)
    }

    /// The response ring's doorbell.
    pub fn response_bell(&self) -> Doorbell<'_> {
        self.bell(CH_RESP_BELL_SEQ, CH_RESP_BELL_WAITERS)
    }

    /// Bumps the heartbeat (the host application, whenever it looks for work).
    pub fn beat(&self) {
        // Relaxed: a liveness hint; nothing is published through it.
        self.shm.words()[CH_HEARTBEAT / 8].fetch_add(1, Ordering::Relaxed);
    }

    /// The heartbeat counter now (0: the host never beat).
    pub fn heartbeat(&self) -> u64 {
        // Relaxed: see `beat`.
        self.shm.words()[CH_HEARTBEAT / 8].load(Ordering::Relaxed)
    }

    /// The memfd, to hand to the other process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.shm.fd()
    }
}
