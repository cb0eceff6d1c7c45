//! Metadata digest: a file's logical-to-physical extent map, so chains can read the block device
//! directly (XRP's "metadata digest", BRIEF §1) while staying confined to the file's own blocks.
//!
//! What is checked where:
//! - [`Digest::build`] (once, or on suspicion via [`Digest::rebuild`]): FIEMAP with
//!   `FIEMAP_FLAG_SYNC` (dirty data is written back first, so the device holds what the file
//!   holds); every extent overlapping `[0, file_size)` must be a plain, written, unshared,
//!   unencoded, block-aligned extent with a known location, and there must be no hole. Anything
//!   else is refused with a [`DigestError`] naming the extent — the caller stays on the file path.
//! - [`Digest::map`] (every hop): the requested `[offset, offset + len)` must lie inside
//!   `[0, file_size)` and inside one physically contiguous run; otherwise `OutsideFile` (fail the
//!   chain: the function aimed outside its file) or `SpansExtents` (serve that hop through the
//!   file instead). Ranges are refused, never split.
//! - After every chain: [`LeaseGuard::is_intact`] (no one opened the file for writing or
//!   truncated it since the lease was taken) and [`Digest::still_valid`] (inode, size, mtime,
//!   ctime unchanged). Either failing means the chain's data may be stale: discard it, fall back.
//!
//! [`RawAccess`] bundles the three pieces (lease, digest, device) in the order that makes the
//! protocol sound; it is the one type the engine needs for raw mode.

mod device;
mod fiemap;
mod lease;
mod raw;

use crate::limits::MAX_DIGEST_EXTENTS;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

pub use device::{find_block_device, BlockDeviceInfo, RawDevice};
pub use fiemap::ExtentProblem;
pub use lease::{lease_breaks_seen, LeaseGuard};
pub use raw::{DeviceWindow, RawAccess, RetryGate};

/// Errors from building, using or checking a metadata digest.
///
/// [`DigestError::is_fallback`] says whether the right reaction is "use the file path" (the file
/// or device cannot be served raw, or the digest went stale) or "fail the chain" (the function
/// asked for an address outside its file).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// A system call failed for a reason with no more specific variant.
    #[error("{op} failed: {err}")]
    Io {
        /// The operation, e.g. "fstat" or "FS_IOC_FIEMAP".
        op: &'static str,
        /// The OS error.
        err: std::io::Error,
    },
    /// Digests exist only for regular files.
    #[error("not a regular file (st_mode {mode:#o})")]
    NotRegularFile {
        /// The file's `st_mode`.
        mode: u32,
    },
    /// The file system does not implement FIEMAP (tmpfs, overlayfs, network file systems).
    #[error("the file system does not support FIEMAP ({err}); stay on the file path")]
    FiemapUnsupported {
        /// The OS error FIEMAP returned (EOPNOTSUPP, ENOTTY, EBADR).
        err: std::io::Error,
    },
    /// An extent cannot be read through the device (unwritten, delalloc, inline, shared ...).
    #[error(
        "extent at file offset {logical} (device offset {physical}, {len} bytes, flags {flags:#x}) \
         is {problem}; stay on the file path"
    )]
    RefusedExtent {
        /// File offset of the extent.
        logical: u64,
        /// Device offset FIEMAP reported (may be meaningless for the refused kinds).
        physical: u64,
        /// Extent length in bytes.
        len: u64,
        /// Raw `fe_flags`.
        flags: u32,
        /// Why it is refused.
        problem: ExtentProblem,
    },
    /// A hole (unallocated range) inside the file's size: reading it through the device would
    /// return someone else's blocks instead of zeros.
    #[error("hole at file offset {offset} ({len} bytes) inside the file; stay on the file path")]
    Hole {
        /// First byte of the hole.
        offset: u64,
        /// Hole length in bytes (up to the next extent or the end of the file).
        len: u64,
    },
    /// FIEMAP returned extents that overlap or go backwards: the file changed while the digest
    /// was built, or the file system misreports.
    #[error("FIEMAP returned inconsistent extents at file offset {offset}: {what}")]
    InconsistentExtents {
        /// File offset where the inconsistency was found.
        offset: u64,
        /// What is wrong.
        what: &'static str,
    },
    /// More extents than [`MAX_DIGEST_EXTENTS`].
    #[error("file has more than {limit} extents; stay on the file path")]
    TooManyExtents {
        /// The limit.
        limit: usize,
    },
    /// The requested range is not wholly inside the file (past EOF, overflowing, or empty).
    #[error("range at file offset {offset} ({len} bytes) is outside the file ({file_size} bytes)")]
    OutsideFile {
        /// Requested file offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// The file's size when the digest was built.
        file_size: u64,
    },
    /// The requested range crosses from one extent into another that is not physically
    /// adjacent; it is refused, never split (serve that hop through the file).
    #[error(
        "range at file offset {offset} ({len} bytes) crosses an extent boundary at file offset \
         {boundary}"
    )]
    SpansExtents {
        /// Requested file offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// File offset where the physically discontiguous next extent begins.
        boundary: u64,
    },
    /// The file's device number does not lead to a block device node (btrfs and other
    /// anonymous-device file systems, or missing /sys).
    #[error("no block device for st_dev {major}:{minor}: {why}; stay on the file path")]
    NoBlockDevice {
        /// Major number of `st_dev`.
        major: u32,
        /// Minor number of `st_dev`.
        minor: u32,
        /// What was missing.
        why: String,
    },
    /// The block device exists but cannot be opened read-only with O_DIRECT. On these machines
    /// the root disk `/dev/vda` gives EPERM even to root: raw mode is unavailable for files on
    /// it, and the caller must stay on the file path.
    #[error(
        "cannot open block device {path} read-only with O_DIRECT: {err}; raw mode is \
         unavailable for this file, stay on the file path",
        path = path.display()
    )]
    DeviceAccess {
        /// The device node.
        path: PathBuf,
        /// The OS error (EPERM, EACCES, ENOENT ...).
        err: std::io::Error,
    },
    /// Block sizes do not line up: the device's logical block size does not divide the file
    /// system block size, so aligned device reads could leave the file's blocks.
    #[error("device logical block size {logical_block_size} does not divide fs block size {fs_block_size}")]
    BlockSizeMismatch {
        /// The device's logical block size.
        logical_block_size: u64,
        /// The file system block size (`st_blksize`).
        fs_block_size: u64,
    },
    /// A read lease could not be taken (see [`LeaseGuard::acquire`]).
    #[error("cannot take a read lease (F_SETLEASE F_RDLCK): {err}; {hint}; stay on the file path")]
    Lease {
        /// The OS error.
        err: std::io::Error,
        /// What it usually means.
        hint: &'static str,
    },
    /// The digest no longer matches the file (lease broken or identity changed): data read
    /// through the device since the last good check may be stale.
    #[error("digest is stale: {why}; discard the data, rebuild or stay on the file path")]
    Stale {
        /// What changed.
        why: &'static str,
    },
}

impl DigestError {
    /// True when the right reaction is to serve the request through the file instead of the
    /// device (the file or device cannot be served raw, or the digest went stale); false when the
    /// request itself is wrong ([`DigestError::OutsideFile`]) and the chain must fail.
    #[must_use]
    pub fn is_fallback(&self) -> bool {
        !matches!(self, Self::OutsideFile { .. })
    }

    fn last_os(op: &'static str) -> Self {
        Self::Io { op, err: std::io::Error::last_os_error() }
    }
}

/// A timestamp as `stat` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timestamp {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds within the second.
    pub nsec: i64,
}

/// The cheap facts re-checked after every chain: if any changed, the file was replaced,
/// resized or written since the digest was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    /// `st_dev` of the file system.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Last data modification.
    pub mtime: Timestamp,
    /// Last status change (also moves on layout changes such as fallocate or punch).
    pub ctime: Timestamp,
}

impl FileIdentity {
    /// `fstat` the file.
    ///
    /// # Errors
    /// [`DigestError::Io`] when fstat fails.
    pub fn of(file: &File) -> Result<Self, DigestError> {
        Ok(Self::of_stat(&fstat(file)?))
    }

    fn of_stat(st: &libc::stat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime: Timestamp { sec: st.st_mtime, nsec: st.st_mtime_nsec },
            ctime: Timestamp { sec: st.st_ctime, nsec: st.st_ctime_nsec },
        }
    }
}

fn fstat(file: &File) -> Result<libc::stat, DigestError> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for the borrow of `file`; `st` is a valid out pointer.
    if unsafe { libc::fstat(file.as_raw_fd(), &raw mut st) } != 0 {
        return Err(DigestError::last_os("fstat"));
    }
    Ok(st)
}

/// One physically contiguous run of the file: `[logical, logical + len)` of the file lives at
/// `[physical, physical + len)` of the device. Adjacent FIEMAP extents that are also physically
/// adjacent are merged into one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// File byte offset.
    pub logical: u64,
    /// Device byte offset.
    pub physical: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Extent {
    fn logical_end(&self) -> u64 {
        self.logical + self.len
    }
}

/// A file's extent map, checked to be safe for direct device reads. Lookups are a binary search
/// over runs sorted by file offset (O(log n)).
#[derive(Debug, Clone)]
pub struct Digest {
    /// Sorted by `logical`, non-overlapping, covering `[0, identity.size)` without holes (the
    /// last run may extend past the size to the end of its block).
    extents: Vec<Extent>,
    identity: FileIdentity,
    /// `statfs.f_bsize`: the file system block size extents are aligned to.
    fs_block_size: u64,
    /// FIEMAP extents before merging (for reports and comparisons with `filefrag`).
    fiemap_extent_count: usize,
}

impl Digest {
    /// Read the file's extent map with FIEMAP (flushing delayed allocation first) and check it
    /// is safe to serve through the block device.
    ///
    /// For the digest to stay trustworthy, take a [`LeaseGuard`] on the file *before* building
    /// it (or use [`RawAccess::open`], which does).
    ///
    /// # Errors
    /// `NotRegularFile`, `FiemapUnsupported`, `RefusedExtent`, `Hole`, `InconsistentExtents`,
    /// `TooManyExtents`, `Io` — all mean "stay on the file path".
    pub fn build(file: &File) -> Result<Self, DigestError> {
        let st = fstat(file)?;
        let before = FileIdentity::of_stat(&st);
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(DigestError::NotRegularFile { mode: st.st_mode });
        }
        let raw = fiemap::read_extents(file, before.size)?;
        let fiemap_extent_count = raw.len();
        let fs_block_size = fs_block_size(file)?;
        let extents = fiemap::check_and_merge(&raw, before.size, fs_block_size)?;
        // Without a lease a writer may run concurrently with the (batched) FIEMAP calls; an
        // identity that moved means the map may mix two layouts.
        let after = FileIdentity::of(file)?;
        if after != before {
            return Err(DigestError::Stale { why: "file changed while the digest was built" });
        }
        Ok(Self { extents, identity: before, fs_block_size, fiemap_extent_count })
    }

    /// Rebuild in place (after [`Digest::still_valid`] said false or a lease broke).
    ///
    /// # Errors
    /// As [`Digest::build`]; on error `self` is unchanged.
    pub fn rebuild(&mut self, file: &File) -> Result<(), DigestError> {
        *self = Self::build(file)?;
        Ok(())
    }

    /// Translate the file range `[file_offset, file_offset + len)` to the device byte offset of
    /// its first byte. The whole range is guaranteed to be physically contiguous on the device
    /// and to belong to this file.
    ///
    /// # Errors
    /// `OutsideFile` when the range is empty, overflows, or is not wholly inside
    /// `[0, file_size)`; `SpansExtents` when it crosses into a physically discontiguous run.
    pub fn map(&self, file_offset: u64, len: u64) -> Result<u64, DigestError> {
        let size = self.identity.size;
        let outside = DigestError::OutsideFile { offset: file_offset, len, file_size: size };
        let Some(end) = file_offset.checked_add(len) else { return Err(outside) };
        if len == 0 || end > size {
            return Err(outside);
        }
        // First run whose end is past the offset; runs are sorted and gap-free below `size`.
        let i = self.extents.partition_point(|e| e.logical_end() <= file_offset);
        let Some(e) = self.extents.get(i) else { return Err(outside) };
        debug_assert!(e.logical <= file_offset, "digest has a hole below the file size");
        if e.logical > file_offset {
            return Err(outside);
        }
        if end > e.logical_end() {
            return Err(DigestError::SpansExtents {
                offset: file_offset,
                len,
                boundary: e.logical_end(),
            });
        }
        Ok(e.physical + (file_offset - e.logical))
    }

    /// The file size the digest covers.
    #[must_use]
    pub fn file_size(&self) -> u64 {
        self.identity.size
    }

    /// The identity recorded when the digest was built.
    #[must_use]
    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    /// The file system block size (`statfs.f_bsize`) extents are aligned to.
    #[must_use]
    pub fn fs_block_size(&self) -> u64 {
        self.fs_block_size
    }

    /// The physically contiguous runs, sorted by file offset.
    #[must_use]
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// How many extents FIEMAP reported (before physically adjacent ones were merged) — the
    /// figure `filefrag` prints.
    #[must_use]
    pub fn fiemap_extent_count(&self) -> usize {
        self.fiemap_extent_count
    }

    /// Cheap re-check (one fstat): true when inode, device, size, mtime and ctime are unchanged.
    ///
    /// # Errors
    /// [`DigestError::Io`] when fstat fails.
    pub fn still_valid(&self, file: &File) -> Result<bool, DigestError> {
        Ok(FileIdentity::of(file)? == self.identity)
    }
}

/// The file system block size (`f_bsize`; not `st_blksize`, which xfs may inflate to a
/// preferred I/O size).
fn fs_block_size(file: &File) -> Result<u64, DigestError> {
    // SAFETY: an all-zero `statfs` is a valid value of this plain C struct.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for the borrow of `file`; `sfs` is a valid out pointer.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &raw mut sfs) } != 0 {
        return Err(DigestError::last_os("fstatfs"));
    }
    let bsize = u64::try_from(sfs.f_bsize).unwrap_or(0);
    if bsize == 0 || !bsize.is_power_of_two() {
        return Err(DigestError::InconsistentExtents { offset: 0, what: "bad fs block size" });
    }
    Ok(bsize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(extents: Vec<Extent>, size: u64) -> Digest {
        let t = Timestamp { sec: 0, nsec: 0 };
        Digest {
            extents,
            identity: FileIdentity { dev: 0, ino: 0, size, mtime: t, ctime: t },
            fs_block_size: 4096,
            fiemap_extent_count: 0,
        }
    }

    #[test]
    fn map_translates_inside_runs_and_refuses_the_rest() {
        let d = digest(
            vec![
                Extent { logical: 0, physical: 1 << 20, len: 8192 },
                Extent { logical: 8192, physical: 9 << 20, len: 8192 },
            ],
            12000,
        );
        assert_eq!(d.map(0, 512).unwrap(), 1 << 20);
        assert_eq!(d.map(4096, 4096).unwrap(), (1 << 20) + 4096);
        assert_eq!(d.map(8192, 512).unwrap(), 9 << 20);
        assert_eq!(d.map(11999, 1).unwrap(), (9 << 20) + 3807);
        assert!(matches!(
            d.map(8000, 512),
            Err(DigestError::SpansExtents { offset: 8000, len: 512, boundary: 8192 })
        ));
        for (off, len) in [(11999, 2), (12000, 1), (0, 0), (u64::MAX, 2), (1 << 40, 512)] {
            let e = d.map(off, len).unwrap_err();
            assert!(
                matches!(e, DigestError::OutsideFile { offset, len: l, file_size: 12000 }
                    if offset == off && l == len),
                "{off}+{len}: {e}"
            );
            assert!(!e.is_fallback());
        }
    }

    #[test]
    fn empty_digest_maps_nothing() {
        let d = digest(vec![], 0);
        assert!(matches!(d.map(0, 1), Err(DigestError::OutsideFile { .. })));
    }
}
