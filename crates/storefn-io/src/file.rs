//! Files the engine reads: opening (O_DIRECT by default), alignment, and the one place where a
//! chain's requested file range is checked and turned into a device read ([`resolve`]).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::digest::{DigestError, RawAccess};
use crate::error::{EngineError, Errno};
use crate::limits::MAX_BLOCK_ALIGN;

/// How the engine reads a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// O_DIRECT: reads go to the device; requests are widened to the logical block.
    #[default]
    Direct,
    /// Through the page cache (for file systems that refuse O_DIRECT, e.g. tmpfs).
    Buffered,
    /// O_DIRECT file plus the metadata digest: each hop is translated to the block device and
    /// read there, bypassing the file system (docs/design/server.md, "Metadata digest (raw mode)").
    /// Setting it up fails with [`EngineError::RawUnavailable`]; the caller then opens the file
    /// with [`IoMode::Direct`].
    Raw,
}

/// A file registered with an engine (index into its file table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId(pub(crate) u32);

impl FileId {
    /// The registered-file index (also the io_uring fixed-file index).
    #[must_use]
    pub fn index(self) -> u32 {
        self.0
    }
}

/// What a chain's requests address. Nothing else in the engine looks inside a target; every
/// request goes through [`resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// Logical offsets are offsets into the registered file itself.
    File {
        /// io_uring fixed-file index.
        fd_index: u32,
        /// File size when opened (or last refreshed): the access-control bound.
        size_bytes: u64,
    },
    /// Raw mode: requests are translated through the file's metadata digest and read from the
    /// block device; hops the digest cannot serve in one device read go through the file.
    Raw {
        /// io_uring fixed-file index of the file itself (hops across extents, fallback).
        fd_index: u32,
        /// io_uring fixed-file index of the block device.
        dev_index: u32,
        /// File size when opened (or last refreshed).
        size_bytes: u64,
    },
}

impl Target {
    /// The bound every request is checked against (`addr + size <= size_bytes`).
    #[must_use]
    pub fn size_bytes(&self) -> u64 {
        match *self {
            Self::File { size_bytes, .. } | Self::Raw { size_bytes, .. } => size_bytes,
        }
    }

    /// Updates the bound after the file changed size.
    pub(crate) fn set_size_bytes(&mut self, size: u64) {
        match self {
            Self::File { size_bytes, .. } | Self::Raw { size_bytes, .. } => *size_bytes = size,
        }
    }
}

/// A validated request: which registered fd to read, at which byte, widened to which block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    pub fd_index: u32,
    /// Offset of the requested first byte on `fd_index` (file offset, or device offset).
    pub dev_offset: u64,
    /// O_DIRECT alignment of reads on `fd_index` (the file's, or the device's logical block).
    pub align: u64,
    /// True when the read goes to the block device (the chain then needs the staleness check).
    pub device: bool,
}

/// Why [`resolve`] refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveError {
    /// `addr + size` is past the end of the file (or overflows).
    OutOfRange { file_size: u64 },
    /// Raw mode: the digest says the range is not wholly inside the file's own extents.
    OutsideFile { file_size: u64 },
}

/// Checks that `[addr, addr + size)` lies inside the target and maps it to a read.
/// Every read the engine issues for a chain goes through here. `align` is the file's O_DIRECT
/// alignment; `raw` is the digest when raw mode is set up and has not gone stale (`None`: the
/// raw target is served through the file).
///
/// # Errors
/// [`ResolveError::OutOfRange`] (file path) or [`ResolveError::OutsideFile`] (digest) when the
/// range is not inside the file.
pub fn resolve(
    target: &Target,
    align: u64,
    raw: Option<&RawAccess>,
    addr: u64,
    size: u64,
) -> Result<Resolved, ResolveError> {
    match *target {
        Target::File { fd_index, size_bytes } => file_hop(fd_index, size_bytes, align, addr, size),
        Target::Raw { fd_index, dev_index, size_bytes } => {
            let Some(raw) = raw else { return file_hop(fd_index, size_bytes, align, addr, size) };
            match raw.translate(addr, size) {
                Ok(w) => Ok(Resolved {
                    fd_index: dev_index,
                    dev_offset: w.dev_offset + w.skip,
                    align: raw.logical_block_size(),
                    device: true,
                }),
                Err(DigestError::OutsideFile { file_size, .. }) => {
                    Err(ResolveError::OutsideFile { file_size })
                }
                // Not one physically contiguous run: this hop reads the file (never split).
                Err(_) => file_hop(fd_index, size_bytes, align, addr, size),
            }
        }
    }
}

fn file_hop(
    fd_index: u32,
    size_bytes: u64,
    align: u64,
    addr: u64,
    size: u64,
) -> Result<Resolved, ResolveError> {
    let end = addr.checked_add(size);
    if end.is_none_or(|end| end > size_bytes) {
        return Err(ResolveError::OutOfRange { file_size: size_bytes });
    }
    Ok(Resolved { fd_index, dev_offset: addr, align, device: false })
}

/// Raw-mode state of an open file.
#[derive(Debug)]
pub(crate) struct RawState {
    pub access: RawAccess,
    /// Bumped by every refresh: a chain that read the device under an older digest is stale.
    pub epoch: u32,
    /// A check failed: hops go through the file until the caller refreshes.
    pub broken: bool,
    /// Device reads are done inline (the device cannot take non-blocking reads).
    pub inline: bool,
}

/// An open file and what the engine knows about it.
#[derive(Debug)]
pub(crate) struct FileEntry {
    /// Keeps the descriptor open while it is registered.
    pub file: File,
    pub path: PathBuf,
    pub target: Target,
    /// Offset alignment for reads (1 when buffered).
    pub align: u64,
    pub mode: IoMode,
    /// Raw mode's digest and device (`None` outside raw mode, or after a failed refresh).
    pub raw: Option<RawState>,
    /// Last raw-mode epoch handed out for this file. Kept here, not in `raw`, so that epochs
    /// never repeat across a failed refresh (a chain from an old epoch must stay stale).
    pub last_epoch: u32,
    /// Spaces [`crate::Engine::retry_raw`]'s attempts to set raw mode up again.
    pub raw_retry: crate::digest::RetryGate,
    /// Chains and plain reads on this file submitted and not yet delivered.
    pub live: u32,
    /// [`crate::Engine::close`] came while `live` was non-zero: no chain may start on the file,
    /// and its slot is released when the last one is delivered.
    pub closing: bool,
}

/// Opens `path` read-only in `mode` and learns its size and O_DIRECT alignment.
pub(crate) fn open_file(
    path: &Path,
    mode: IoMode,
    fd_index: u32,
) -> Result<FileEntry, EngineError> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    if mode != IoMode::Buffered {
        opts.custom_flags(libc::O_DIRECT);
    }
    let file = opts.open(path).map_err(|e| {
        let errno = Errno::from_io(&e);
        if mode != IoMode::Buffered && errno == Errno::InvalidArgument {
            EngineError::DirectRefused {
                path: path.to_path_buf(),
                reason: "open(O_DIRECT) returned EINVAL".into(),
            }
        } else {
            EngineError::Open { path: path.to_path_buf(), errno }
        }
    })?;
    let (size_bytes, dio_align) = statx_size_align(&file, path)?;
    let align = match mode {
        IoMode::Buffered => 1,
        IoMode::Direct | IoMode::Raw if dio_align == 0 => {
            return Err(EngineError::DirectRefused {
                path: path.to_path_buf(),
                reason: "statx reports no direct-I/O support (dio_offset_align = 0)".into(),
            })
        }
        IoMode::Direct | IoMode::Raw => u64::from(dio_align),
    };
    if !align.is_power_of_two() || align > MAX_BLOCK_ALIGN as u64 {
        return Err(EngineError::AlignmentTooLarge {
            path: path.to_path_buf(),
            align,
            max: MAX_BLOCK_ALIGN,
        });
    }
    Ok(FileEntry {
        file,
        path: path.to_path_buf(),
        target: Target::File { fd_index, size_bytes },
        align,
        mode,
        raw: None,
        last_epoch: 0,
        raw_retry: crate::digest::RetryGate::default(),
        live: 0,
        closing: false,
    })
}

/// Size and O_DIRECT offset alignment (statx `STATX_DIOALIGN`; 0 = no direct I/O).
pub fn statx_size_align(file: &File, path: &Path) -> Result<(u64, u32), EngineError> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for the call's duration, the path is a NUL-terminated empty string
    // (AT_EMPTY_PATH: stat the fd itself) and `stx` is a valid, writable statx buffer.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_SIZE | libc::STATX_DIOALIGN,
            &raw mut stx,
        )
    };
    if rc != 0 {
        let errno = Errno::from_io(&std::io::Error::last_os_error());
        return Err(EngineError::Statx { path: path.to_path_buf(), errno });
    }
    let align = if stx.stx_mask & libc::STATX_DIOALIGN != 0 { stx.stx_dio_offset_align } else { 0 };
    Ok((stx.stx_size, align))
}

/// Aligned span `[start, end)` covering `[addr, addr + size)`; `align` is a power of two.
#[must_use]
pub fn widen(addr: u64, size: u64, align: u64) -> (u64, u64) {
    debug_assert!(align.is_power_of_two());
    let start = addr & !(align - 1);
    let end = (addr + size).next_multiple_of(align);
    (start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_checks_the_end_of_the_file() {
        let t = Target::File { fd_index: 3, size_bytes: 4096 };
        let ok = |dev_offset| Ok(Resolved { fd_index: 3, dev_offset, align: 512, device: false });
        let oor = Err(ResolveError::OutOfRange { file_size: 4096 });
        assert_eq!(resolve(&t, 512, None, 0, 4096), ok(0));
        assert_eq!(resolve(&t, 512, None, 4095, 1), ok(4095));
        assert_eq!(resolve(&t, 512, None, 4095, 2), oor);
        assert_eq!(resolve(&t, 512, None, u64::MAX, 2), oor);
        // A raw target without a (valid) digest is served through the file, same bounds.
        let r = Target::Raw { fd_index: 3, dev_index: 67, size_bytes: 4096 };
        assert_eq!(resolve(&r, 512, None, 4095, 1), ok(4095));
        assert_eq!(resolve(&r, 512, None, 4095, 2), oor);
    }

    #[test]
    fn widen_covers_the_request_with_whole_blocks() {
        assert_eq!(widen(0, 512, 512), (0, 512));
        assert_eq!(widen(100, 8, 512), (0, 512));
        assert_eq!(widen(510, 8, 512), (0, 1024));
        assert_eq!(widen(4096 + 512, 512, 4096), (4096, 8192));
        assert_eq!(widen(4095, 4096, 4096), (0, 8192));
        assert_eq!(widen(7, 9, 1), (7, 16));
    }
}
