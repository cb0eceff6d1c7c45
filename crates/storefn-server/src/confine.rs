//! Paths confined beneath the served directory: every open goes through `openat2` with
//! `RESOLVE_BENEATH` (the kernel refuses `..` above the root, absolute paths and symlinks that
//! leave it, atomically, with no check-then-use race) and `RESOLVE_NO_MAGICLINKS`.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

use storefn_wire::limits::MAX_PATH_BYTES;
use storefn_wire::StatusCode;

/// Why a path could not be opened beneath the root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfineError {
    #[error("path leaves the served directory")]
    Outside,
    #[error("no such file")]
    NotFound,
    #[error("path is not valid: {0}")]
    Invalid(&'static str),
    #[error("not a regular file: {0}")]
    NotRegular(&'static str),
    #[error("open: {0}")]
    Io(String),
}

impl ConfineError {
    /// The wire status for this error.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Outside => StatusCode::OutsideRoot,
            Self::NotFound => StatusCode::NotFound,
            Self::Invalid(_) => StatusCode::BadRequest,
            Self::NotRegular(_) => StatusCode::NotRegular,
            Self::Io(_) => StatusCode::Io,
        }
    }
}

/// The served directory, held open so every lookup starts from the same inode.
#[derive(Debug)]
pub struct Root {
    dir: File,
}

impl Root {
    /// Opens `dir` (it must be a directory).
    ///
    /// # Errors
    /// Open failures, not a directory.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?;
        Ok(Self { dir: f })
    }

    /// The directory's fd.
    #[must_use]
    pub fn fd(&self) -> i32 {
        self.dir.as_raw_fd()
    }

    /// Opens `rel` beneath the root with `flags` (`O_RDONLY`, `O_WRONLY`, ...).
    ///
    /// # Errors
    /// `Outside` for absolute paths, `..` escapes and symlinks out (`EXDEV`, `ELOOP`);
    /// `NotFound`; `Invalid` for NUL bytes or a path that is not UTF-8-free of NUL.
    pub fn open_beneath(&self, rel: &[u8], flags: i32) -> Result<File, ConfineError> {
        if rel.first() == Some(&b'/') {
            return Err(ConfineError::Outside);
        }
        let c = CString::new(rel).map_err(|_| ConfineError::Invalid("NUL byte in path"))?;
        // SAFETY: open_how is plain integers; all-zero is a valid value.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = u64::try_from(flags | libc::O_CLOEXEC).expect("open flags are positive");
        how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
        loop {
            // SAFETY: `c` is NUL-terminated, `how` is a valid open_how of the size passed; the
            // kernel reads both and returns a new fd or -1.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    self.dir.as_raw_fd(),
                    c.as_ptr(),
                    std::ptr::from_ref(&how),
                    std::mem::size_of::<libc::open_how>(),
                )
            };
            if fd >= 0 {
                let fd = i32::try_from(fd).expect("fds fit in i32");
                // SAFETY: the kernel just returned this fd to us; nothing else owns it.
                return Ok(unsafe { File::from_raw_fd(fd) });
            }
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EINTR | libc::EAGAIN) => continue,
                Some(libc::EXDEV | libc::ELOOP) => ConfineError::Outside,
                Some(libc::ENOENT | libc::ENOTDIR) => ConfineError::NotFound,
                _ => ConfineError::Io(e.to_string()),
            });
        }
    }

    /// Opens the regular file `rel` beneath the root for reading (`write` false) or writing,
    /// without ever opening anything else: the path is resolved to an `O_PATH` descriptor
    /// (which opens no device and cannot block on a FIFO), that descriptor is `fstat`ed, and
    /// only a regular file is then reopened through it (`/proc/self/fd/N`: the same inode,
    /// no second path lookup) with `O_NONBLOCK | O_NOCTTY`. A final symlink is followed, as
    /// far as it stays beneath the root: the served directory may link its own files.
    ///
    /// # Errors
    /// As [`Root::open_beneath`]; [`ConfineError::NotRegular`] naming what the path is.
    pub fn open_regular(&self, rel: &[u8], write: bool) -> Result<File, ConfineError> {
        let path = self.open_beneath(rel, libc::O_PATH)?;
        let kind = path.metadata().map_err(|e| ConfineError::Io(e.to_string()))?.file_type();
        if !kind.is_file() {
            use std::os::unix::fs::FileTypeExt;
            return Err(ConfineError::NotRegular(match () {
                () if kind.is_dir() => "a directory",
                () if kind.is_fifo() => "a FIFO",
                () if kind.is_char_device() => "a character device",
                () if kind.is_block_device() => "a block device",
                () if kind.is_socket() => "a socket",
                () => "not a regular file",
            }));
        }
        let proc = format!("/proc/self/fd/{}", path.as_raw_fd());
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(proc)
            .map_err(|e| ConfineError::Io(e.to_string()))
    }

    /// The directory `rel` beneath the root, held open as a root of its own (a tenant's scope
    /// directory: paths resolved beneath it cannot leave it).
    ///
    /// # Errors
    /// As [`Root::open_beneath`]; not a directory.
    pub fn subdir(&self, rel: &[u8]) -> Result<Self, ConfineError> {
        let dir = self.open_beneath(rel, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok(Self { dir })
    }

    /// `statx` of `rel` relative to the root, following symlinks as [`Root::open_regular`]
    /// does: identity, change time and size, used to notice that a cached open file was
    /// replaced (the file is then reopened with [`Root::open_regular`], which does the confined
    /// resolution). The two must agree: an identity taken without following a final symlink
    /// never matched the file opened through it, so every request through a link reopened
    /// the file. The lookup itself is not confined; only a match with a file opened confined
    /// under the same path counts, so it reveals nothing the confined open would not.
    #[must_use]
    pub fn stat_identity(&self, rel: &[u8]) -> Option<(u64, u64, u64, u64)> {
        // NUL-terminated on the stack: this runs on every request and must not allocate.
        let mut c = [0u8; MAX_PATH_BYTES + 1];
        if rel.len() > MAX_PATH_BYTES || rel.contains(&0) {
            return None;
        }
        c[..rel.len()].copy_from_slice(rel);
        // SAFETY: zeroed statx is a valid out-buffer; the kernel fills it.
        let mut sx: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is NUL-terminated; `sx` is a valid, writable statx.
        let r = unsafe {
            libc::statx(
                self.dir.as_raw_fd(),
                c.as_ptr().cast(),
                libc::AT_STATX_SYNC_AS_STAT,
                libc::STATX_INO | libc::STATX_CTIME | libc::STATX_SIZE,
                &raw mut sx,
            )
        };
        (r == 0).then(|| identity_of_statx(&sx))
    }
}

fn identity_of_statx(sx: &libc::statx) -> (u64, u64, u64, u64) {
    let dev = libc::makedev(sx.stx_dev_major, sx.stx_dev_minor);
    let ctime =
        (sx.stx_ctime.tv_sec as u64).wrapping_mul(1_000_000_000) + u64::from(sx.stx_ctime.tv_nsec);
    (dev, sx.stx_ino, ctime, sx.stx_size)
}

/// `(dev, ino, ctime_ns, size)` of an open file.
///
/// # Errors
/// fstat failures.
pub fn identity(f: &File) -> std::io::Result<(u64, u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata()?;
    let ctime = (m.ctime() as u64).wrapping_mul(1_000_000_000) + m.ctime_nsec() as u64;
    Ok((m.dev(), m.ino(), ctime, m.size()))
}

use std::os::unix::fs::OpenOptionsExt;
