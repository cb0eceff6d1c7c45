//! Errors of the engine: setting it up and opening files ([`EngineError`]), submitting work
//! ([`SubmitError`]), and what fails one chain ([`ChainError`], carrying [`ChainAt`], the context a
//! caller needs to redo the work with plain reads).

use std::path::PathBuf;

use storefn_vm::VmError;

/// An errno from the kernel, mapped to a name. `Other` keeps the number of anything unlisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Errno {
    #[error("EIO (device I/O error)")]
    Io,
    #[error("EINVAL (invalid argument: alignment, flags or offset)")]
    InvalidArgument,
    #[error("EBADF (bad file descriptor)")]
    BadFd,
    #[error("EFAULT (bad buffer address)")]
    Fault,
    #[error("EAGAIN (resource temporarily unavailable)")]
    Again,
    #[error("EINTR (interrupted)")]
    Interrupted,
    #[error("ENOMEM (out of memory)")]
    NoMemory,
    #[error("ECANCELED (operation canceled)")]
    Canceled,
    #[error("EOPNOTSUPP (operation not supported)")]
    NotSupported,
    #[error("EPERM/EACCES (permission denied)")]
    PermissionDenied,
    #[error("ENOENT (no such file)")]
    NotFound,
    #[error("ENODEV/ENXIO (no such device)")]
    NoDevice,
    #[error("EBUSY (busy)")]
    Busy,
    #[error("EOVERFLOW (value too large)")]
    Overflow,
    #[error("ENOSYS (not implemented by this kernel)")]
    NotImplemented,
    #[error("EMFILE/ENFILE (too many open files)")]
    TooManyFiles,
    #[error("errno {0}")]
    Other(i32),
}

impl Errno {
    /// Names a positive errno value.
    #[must_use]
    pub fn from_raw(errno: i32) -> Self {
        match errno {
            libc::EIO => Self::Io,
            libc::EINVAL => Self::InvalidArgument,
            libc::EBADF => Self::BadFd,
            libc::EFAULT => Self::Fault,
            libc::EAGAIN => Self::Again,
            libc::EINTR => Self::Interrupted,
            libc::ENOMEM => Self::NoMemory,
            libc::ECANCELED => Self::Canceled,
            libc::EOPNOTSUPP => Self::NotSupported,
            libc::EPERM | libc::EACCES => Self::PermissionDenied,
            libc::ENOENT => Self::NotFound,
            libc::ENODEV | libc::ENXIO => Self::NoDevice,
            libc::EBUSY => Self::Busy,
            libc::EOVERFLOW => Self::Overflow,
            libc::ENOSYS => Self::NotImplemented,
            libc::EMFILE | libc::ENFILE => Self::TooManyFiles,
            other => Self::Other(other),
        }
    }

    /// Names the errno inside an `io::Error` (`Other(0)` if it carries none).
    #[must_use]
    pub fn from_io(e: &std::io::Error) -> Self {
        Self::from_raw(e.raw_os_error().unwrap_or(0))
    }
}

/// Setting up the engine or opening a file failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("engine config: {what} = {value} is out of range ({limit})")]
    BadConfig { what: &'static str, value: u64, limit: &'static str },
    #[error("io_uring setup failed: {errno}")]
    RingSetup { errno: Errno },
    #[error("SQPOLL is not available here: {errno} (needs CAP_SYS_NICE or a newer kernel)")]
    SqpollUnavailable { errno: Errno },
    #[error("IOPOLL ring setup failed: {errno}")]
    IopollUnavailable { errno: Errno },
    #[error(
        "{path}: IOPOLL is not supported by this device ({errno}: it has no poll queues); \
         use interrupt-driven completions (the default)"
    )]
    IopollUnsupported { path: PathBuf, errno: Errno },
    #[error("registering {count} buffers of {bytes} B failed: {errno}")]
    RegisterBuffers { count: usize, bytes: usize, errno: Errno },
    #[error("registering files failed: {errno}")]
    RegisterFiles { errno: Errno },
    #[error("allocating {bytes} B of aligned buffer memory failed")]
    NoMemory { bytes: usize },
    #[error("{path}: open failed: {errno}")]
    Open { path: PathBuf, errno: Errno },
    #[error(
        "{path}: the file system refuses O_DIRECT ({reason}); open it with buffered I/O instead \
         (IoMode::Buffered, --buffered)"
    )]
    DirectRefused { path: PathBuf, reason: String },
    #[error("{path}: O_DIRECT alignment {align} B exceeds the engine's maximum {max} B")]
    AlignmentTooLarge { path: PathBuf, align: u64, max: usize },
    #[error("{path}: statx failed: {errno}")]
    Statx { path: PathBuf, errno: Errno },
    #[error("{path}: probe read failed: {errno}")]
    Probe { path: PathBuf, errno: Errno },
    #[error("no free file slot: the engine registers at most {max} files")]
    TooManyFiles { max: usize },
    #[error("io_uring submit failed: {errno}")]
    Submit { errno: Errno },
    #[error("the engine has {active} chains in flight; a synchronous call needs it idle")]
    NotIdle { active: usize },
    #[error("{path}: raw mode unavailable: {source}; open it with IoMode::Direct instead")]
    RawUnavailable {
        path: PathBuf,
        #[source]
        source: crate::digest::DigestError,
    },
    #[error(
        "{path}: block device logical block size {block} B is not a power of two up to the \
         engine's maximum {max} B; raw mode unavailable"
    )]
    RawBlockSize { path: PathBuf, block: u64, max: usize },
    #[error("file id {file} is not open in raw mode")]
    NotRaw { file: u32 },
    #[error("range buffer of {capacity} B: must be 1..={max} B")]
    RangeBufSize { capacity: usize, max: usize },
    #[error("all {slots} range-buffer registration slots are taken: unregister one first")]
    RangeBufSlotsFull { slots: usize },
    #[error("registering a range buffer of {bytes} B failed: {errno}")]
    RegisterRangeBuf { bytes: usize, errno: Errno },
}

/// Submitting a chain or read was refused before any I/O; nothing was queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    #[error("all {chains} chain slots are in use: reap completions first")]
    Full { chains: usize },
    #[error("file id {file} is not open in this engine")]
    UnknownFile { file: u32 },
    #[error("file id {file} is being closed: it takes no new reads")]
    Closing { file: u32 },
    #[error("scratch of {len} B exceeds the {max} B a chain slot holds")]
    ScratchTooLarge { len: usize, max: usize },
    #[error("range read of {len} B exceeds the {max} B one range read serves")]
    RangeTooLong { len: u64, max: usize },
    #[error("range {offset:#x}+{len} into a {capacity} B buffer at {at}: {why}")]
    BadRange { offset: u64, len: u64, at: usize, capacity: usize, why: &'static str },
    #[error("all {max} range reads are in flight: reap completions first")]
    RangeReadsFull { max: usize },
}

/// Where a chain was when it failed: enough to redo the lookup with plain reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainAt {
    /// The caller's token for the chain.
    pub token: u64,
    /// File offset the chain started at.
    pub start: u64,
    /// 1-based index of the read (hop) that failed or whose request was rejected.
    pub hop: u32,
    /// File offset of the failing read or request.
    pub addr: u64,
}

impl std::fmt::Display for ChainAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "chain token {} (start {:#x}), hop {}, addr {:#x}",
            self.token, self.start, self.hop, self.addr
        )
    }
}

/// Why one chain (or plain read) failed. Other chains are unaffected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    #[error("{at}: range {addr:#x}+{size} lies outside the file ({file_size} B)", addr = at.addr)]
    OutOfRange { at: ChainAt, size: u64, file_size: u64 },
    #[error(
        "{at}: range {addr:#x}+{size} is outside the file's own extents ({file_size} B): raw \
         mode refuses to read another file's blocks or free space",
        addr = at.addr
    )]
    OutsideFile { at: ChainAt, size: u64, file_size: u64 },
    #[error(
        "{at}: raw-mode data may be stale ({why}); result discarded: redo it (the file now \
         serves this file's hops) and refresh raw mode"
    )]
    Stale { at: ChainAt, why: &'static str },
    #[error("{at}: request of {size} B exceeds the {max} B a slot buffer serves")]
    RequestTooLarge { at: ChainAt, size: u64, max: usize },
    #[error("{at}: chain exceeds its hop limit of {max} reads")]
    ChainTooLong { at: ChainAt, max: u32 },
    #[error("{at}: more than {max} reads outstanding in one chain")]
    FanOutExceeded { at: ChainAt, max: usize },
    #[error("{at}: storage function fault: {fault}")]
    Fault { at: ChainAt, fault: VmError },
    #[error("{at}: read failed: {errno}")]
    Io { at: ChainAt, errno: Errno },
    #[error("{at}: short read: {got} B of {want} B (file truncated?)")]
    ShortRead { at: ChainAt, got: u64, want: u64 },
    #[error("{at}: the function set no request and did not set done")]
    Stalled { at: ChainAt },
    #[error(
        "{at}: the range's aligned cover ({skip} B before it on the device) does not fit the \
         caller's buffer at the given position"
    )]
    RangeCover { at: ChainAt, skip: u64 },
    #[error("synchronous call refused: the engine has {active} chains in flight")]
    NotIdle { active: usize },
    #[error("synchronous call refused: {0}")]
    Submit(SubmitError),
    #[error("io_uring submit failed: {errno}")]
    Ring { errno: Errno },
}

impl ChainError {
    /// The chain's context, for a fallback to plain reads (`None` for engine-level refusals).
    #[must_use]
    pub fn at(&self) -> Option<ChainAt> {
        match self {
            Self::OutOfRange { at, .. }
            | Self::OutsideFile { at, .. }
            | Self::Stale { at, .. }
            | Self::RequestTooLarge { at, .. }
            | Self::ChainTooLong { at, .. }
            | Self::FanOutExceeded { at, .. }
            | Self::Fault { at, .. }
            | Self::Io { at, .. }
            | Self::ShortRead { at, .. }
            | Self::RangeCover { at, .. }
            | Self::Stalled { at } => Some(*at),
            Self::NotIdle { .. } | Self::Submit(_) | Self::Ring { .. } => None,
        }
    }

    /// True for [`ChainError::Stale`]: the request was fine, raw mode's data was not to be
    /// trusted; redo it and refresh raw mode ([`crate::Engine::refresh_raw`]).
    #[must_use]
    pub fn is_stale(&self) -> bool {
        matches!(self, Self::Stale { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_get_names_and_unknown_ones_keep_their_number() {
        assert_eq!(Errno::from_raw(libc::EIO), Errno::Io);
        assert_eq!(Errno::from_raw(libc::EINVAL), Errno::InvalidArgument);
        assert_eq!(Errno::from_raw(libc::EOPNOTSUPP), Errno::NotSupported);
        assert_eq!(Errno::from_raw(libc::EACCES), Errno::PermissionDenied);
        assert_eq!(Errno::from_raw(libc::ENXIO), Errno::NoDevice);
        assert_eq!(Errno::from_raw(libc::EXDEV), Errno::Other(libc::EXDEV));
        assert_eq!(Errno::Other(18).to_string(), "errno 18");
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(Errno::from_io(&e), Errno::NotFound);
    }

    #[test]
    fn chain_errors_name_token_start_hop_and_addr() {
        let at = ChainAt { token: 7, start: 0x200, hop: 3, addr: 0x1000 };
        let e = ChainError::OutOfRange { at, size: 512, file_size: 4096 };
        assert_eq!(
            e.to_string(),
            "chain token 7 (start 0x200), hop 3, addr 0x1000: range 0x1000+512 lies outside the \
             file (4096 B)"
        );
        assert_eq!(e.at(), Some(at));
        assert_eq!(ChainError::NotIdle { active: 2 }.at(), None);
    }
}
