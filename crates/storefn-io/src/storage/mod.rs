//! The storage layer under every write the store makes: WAL appends, tree builds (create and
//! compaction), sidecars, markers, renames, and the syncs that order them.
//!
//! [`RealStorage`] is the file system. [`sim::CrashSim`] passes every call through to it and
//! also keeps a model of what a disk would still hold after a power cut at any moment: data not
//! yet `sync`ed may be lost or torn, directory entries not yet `sync_dir`ed may vanish. Reads
//! are not part of the layer: the store reads the files it wrote through the page cache (and
//! O_DIRECT), which sees the current state either way.

pub mod sim;

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One open file of a [`Storage`].
pub trait StorageFile: Send + Sync + Debug {
    /// Writes all of `buf` at `offset` (not durable until [`StorageFile::sync`]).
    ///
    /// # Errors
    /// The OS error (ENOSPC, EIO...).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Sets the file's length (not durable until [`StorageFile::sync`]).
    ///
    /// # Errors
    /// The OS error.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves `len` bytes of space from offset 0 (posix_fallocate; a no-op where the file
    /// system has none). The length it sets is durable only after a sync, like a write.
    ///
    /// # Errors
    /// The OS error (ENOSPC first of all).
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Makes every earlier write and length change of this file durable (fdatasync).
    ///
    /// # Errors
    /// The OS error; the file's durable state is then unknown.
    fn sync(&self) -> io::Result<()>;
}

/// File and directory operations that change what is on disk.
pub trait Storage: Send + Sync + Debug {
    /// Creates `path` empty (truncating an existing file), for writing; `direct` asks for
    /// O_DIRECT where the file system takes it. The new name is durable after
    /// [`Storage::sync_dir`] of its directory.
    ///
    /// # Errors
    /// The OS error.
    fn create(&self, path: &Path, direct: bool) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file for writing; `NotFound` if it does not exist.
    ///
    /// # Errors
    /// The OS error.
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Writes through `file`, an existing file the caller opened for writing itself (a server
    /// opens beneath its served directory, confined, before any storage sees the path); `path`
    /// names it for this storage (a crash model keys its shadow by the file name).
    ///
    /// # Errors
    /// `NotFound` when this storage does not know `path`; the OS error otherwise.
    fn adopt(&self, file: File, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Renames `from` to `to` (replacing it); durable after [`Storage::sync_dir`].
    ///
    /// # Errors
    /// The OS error (`NotFound` when `from` is absent).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes `path`; durable after [`Storage::sync_dir`].
    ///
    /// # Errors
    /// The OS error (`NotFound` when absent).
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creates, renames, removes) durable.
    ///
    /// # Errors
    /// The OS error.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Bytes an unprivileged writer may still allocate on the file system holding `dir`.
    ///
    /// # Errors
    /// The OS error of statvfs.
    fn free_bytes(&self, dir: &Path) -> io::Result<u64>;
}

/// The shared handle the store keeps.
pub type StorageRef = Arc<dyn Storage>;

/// The real file system.
#[must_use]
pub fn real() -> StorageRef {
    Arc::new(RealStorage)
}

/// The directory holding `path` (`.` for a bare name).
#[must_use]
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// The file system, with O_DIRECT where asked and available.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealStorage;

/// A file of [`RealStorage`]. A write O_DIRECT refuses (EINVAL: a tail not aligned to the
/// device's logical block) is redone through a buffered descriptor of the same file; `sync`
/// covers both.
#[derive(Debug)]
struct RealFile {
    file: File,
    /// A buffered descriptor for writes O_DIRECT refuses, when `file` is direct.
    buffered: Option<File>,
}

impl StorageFile for RealFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match (self.file.write_all_at(buf, offset), &self.buffered) {
            (Err(e), Some(b)) if e.raw_os_error() == Some(libc::EINVAL) => {
                b.write_all_at(buf, offset)
            }
            (r, _) => r,
        }
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let len = libc::off_t::try_from(len).map_err(|_| io::Error::other("file too large"))?;
        // SAFETY: plain syscall on an fd we own; no memory is passed.
        let r = unsafe { libc::posix_fallocate(self.file.as_raw_fd(), 0, len) };
        match r {
            // 0 = done; EOPNOTSUPP/EINVAL = a file system without fallocate: writes allocate.
            0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
    fn sync(&self) -> io::Result<()> {
        // One inode: syncing either descriptor syncs the file's data and size.
        self.file.sync_data()
    }
}

impl Storage for RealStorage {
    fn create(&self, path: &Path, direct: bool) -> io::Result<Box<dyn StorageFile>> {
        let open = |flags: i32| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(flags)
                .open(path)
        };
        if direct {
            match open(libc::O_DIRECT) {
                Ok(file) => {
                    let buffered = Some(OpenOptions::new().write(true).open(path)?);
                    return Ok(Box::new(RealFile { file, buffered }));
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {} // tmpfs: buffered
                Err(e) => return Err(e),
            }
        }
        Ok(Box::new(RealFile { file: open(0)?, buffered: None }))
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new().write(true).open(path)?;
        Ok(Box::new(RealFile { file, buffered: None }))
    }
    fn adopt(&self, file: File, _path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(RealFile { file, buffered: None }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: statvfs is plain old data; all-zero is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path and `st` a valid out-pointer, both live across the call.
        if unsafe { libc::statvfs(c.as_ptr(), &raw mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }
}
