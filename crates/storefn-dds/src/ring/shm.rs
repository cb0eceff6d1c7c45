//! Shared memory between processes: a sealed memfd mapped `MAP_SHARED`, seen as `[AtomicU64]`.
//!
//! The creator sizes the memfd and seals it (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`), so a
//! peer can never truncate the mapping under us (which would turn a load into SIGBUS). A process
//! that attaches to an inherited fd refuses it unless those seals are set. Every access goes
//! through atomics, so whatever a peer writes, this process has no data race and no undefined
//! behaviour; a misbehaving peer can only make ring records invalid, which the ring reports.

use crate::limits::MAX_SHM_BYTES;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// Seals a region must carry before we map it.
const REQUIRED_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// Shared-memory errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShmError {
    /// A size of 0, not a multiple of 8, or above [`MAX_SHM_BYTES`].
    #[error("shared memory size {0}: must be a multiple of 8 in 8..={MAX_SHM_BYTES}")]
    Size(usize),
    /// The fd is not sealed against resizing.
    #[error("shared memory fd {fd}: seals {seals:#x} lack shrink|grow|seal; refusing to map it")]
    Unsealed {
        /// The fd.
        fd: i32,
        /// The seals it carries.
        seals: i32,
    },
    /// A system call failed.
    #[error("shared memory: {call}: {source}")]
    Sys {
        /// memfd_create, ftruncate, fcntl, fstat, mmap.
        call: &'static str,
        /// errno.
        source: io::Error,
    },
}

fn sys(call: &'static str) -> ShmError {
    ShmError::Sys { call, source: io::Error::last_os_error() }
}

/// A mapped, sealed memfd. Dropping it unmaps the memory and closes the fd.
#[derive(Debug)]
pub struct SharedMemory {
    fd: OwnedFd,
    ptr: NonNull<AtomicU64>,
    len_bytes: usize,
}

// SAFETY: the mapping is plain shared memory accessed only as `AtomicU64`s, which are `Sync`;
// the pointer is owned by this value and unmapped once, in `drop`.
unsafe impl Send for SharedMemory {}
// SAFETY: as above; `&SharedMemory` only hands out `&[AtomicU64]`.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// Creates a zero-filled, sealed region of `len_bytes`. The fd is close-on-exec; use
    /// [`fd`](Self::fd) and clear `FD_CLOEXEC` (or dup it) to hand it to a child.
    ///
    /// # Errors
    /// [`ShmError::Size`] or the failing system call.
    pub fn create(name: &str, len_bytes: usize) -> Result<Self, ShmError> {
        check_size(len_bytes)?;
        let cname = std::ffi::CString::new(name.replace('\0', "_")).expect("NULs replaced");
        // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(sys("memfd_create"));
        }
        // SAFETY: memfd_create returned a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscalls on an fd we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len_bytes as libc::off_t) } != 0 {
            return Err(sys("ftruncate"));
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REQUIRED_SEALS) } != 0 {
            return Err(sys("fcntl(F_ADD_SEALS)"));
        }
        Self::map(fd, len_bytes)
    }

    /// Maps a region another process created (e.g. an inherited fd). Refuses an fd without the
    /// size seals; the length is the fd's size.
    ///
    /// # Errors
    /// [`ShmError::Unsealed`], [`ShmError::Size`] or the failing system call.
    pub fn attach(fd: OwnedFd) -> Result<Self, ShmError> {
        // SAFETY: plain syscall on an fd we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(sys("fcntl(F_GET_SEALS)"));
        }
        if seals & REQUIRED_SEALS != REQUIRED_SEALS {
            return Err(ShmError::Unsealed { fd: fd.as_raw_fd(), seals });
        }
        // SAFETY: `st` is written by fstat before it is read.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and a valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) } != 0 {
            return Err(sys("fstat"));
        }
        let len = usize::try_from(st.st_size).map_err(|_| ShmError::Size(usize::MAX))?;
        check_size(len)?;
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len_bytes: usize) -> Result<Self, ShmError> {
        // SAFETY: a fresh shared mapping of `len_bytes` of an fd whose size is sealed at (at
        // least) `len_bytes`; we never create references to it other than `&[AtomicU64]`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(sys("mmap"));
        }
        let ptr = NonNull::new(p.cast::<AtomicU64>()).ok_or_else(|| sys("mmap"))?;
        Ok(Self { fd, ptr, len_bytes })
    }

    /// The region as words.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is `len_bytes` long (a multiple of 8), page-aligned (so aligned
        // for AtomicU64), stays mapped while `self` lives, and any bit pattern is a valid
        // AtomicU64. Every access is atomic, so concurrent writers (threads or processes) make
        // no data race.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len_bytes / 8) }
    }

    /// Bytes mapped.
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// The memfd (to pass to another process).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` created; no reference into it outlives
        // `self` (words() borrows self).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len_bytes) };
    }
}

fn check_size(len: usize) -> Result<(), ShmError> {
    if len == 0 || !len.is_multiple_of(8) || len > MAX_SHM_BYTES {
        return Err(ShmError::Size(len));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsealed_memfd_is_refused() {
        // SAFETY: plain syscall with a static name.
        let raw = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscall on our fd.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) }, 0);
        assert!(matches!(SharedMemory::attach(fd), Err(ShmError::Unsealed { .. })));
    }

    #[test]
    fn two_mappings_share_words() {
        use std::sync::atomic::Ordering;
        let a = SharedMemory::create("t", 4096).unwrap();
        let b = SharedMemory::attach(a.fd().try_clone_to_owned().unwrap()).unwrap();
        a.words()[3].store(0xABCD, Ordering::Relaxed);
        assert_eq!(b.words()[3].load(Ordering::Relaxed), 0xABCD);
        assert_eq!(b.len_bytes(), 4096);
        assert!(SharedMemory::create("t", 12).is_err());
    }
}
