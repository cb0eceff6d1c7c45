//! How much of a file range is *not* in the page cache (the client's own block cache): the
//! uncached fraction λ-IO scales the host's I/O time by. `cachestat(2)` (Linux 6.5, syscall 451)
//! answers with one call; where it is missing (ENOSYS) `mincore(2)` on a temporary mapping does.

use crate::limits::MINCORE_PAGES;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// `cachestat(2)`'s number on x86-64 and aarch64 (the generic syscall table).
const SYS_CACHESTAT: libc::c_long = 451;

/// Set once cachestat returned ENOSYS: later probes go straight to mincore. Relaxed: a hint;
/// a stale read only costs one more failing syscall.
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Which probe answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Cachestat,
    Mincore,
}

fn page_bytes() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Pages the byte range `[off, off + len)` touches.
fn pages_of(off: u64, len: u64, page: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    (off + len - 1) / page - off / page + 1
}

/// Fraction in `[0, 1]` of the pages of `[off, off + len)` not in the page cache, and which
/// probe measured it. An empty range is fully cached (0.0).
///
/// # Errors
/// Both probes failed.
pub fn uncached_fraction(file: &File, off: u64, len: u64) -> io::Result<(f64, Probe)> {
    if !NO_CACHESTAT.load(Ordering::Relaxed) {
        match cachestat_fraction(file, off, len) {
            Ok(f) => return Ok((f, Probe::Cachestat)),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                NO_CACHESTAT.store(true, Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    }
    mincore_fraction(file, off, len).map(|f| (f, Probe::Mincore))
}

/// [`uncached_fraction`] through `cachestat(2)` only.
///
/// # Errors
/// The syscall's error (ENOSYS before Linux 6.5).
pub fn cachestat_fraction(file: &File, off: u64, len: u64) -> io::Result<f64> {
    let page = page_bytes();
    let pages = pages_of(off, len, page);
    if pages == 0 {
        return Ok(0.0);
    }
    let range = CachestatRange { off, len };
    let mut cs = Cachestat::default();
    // SAFETY: both pointers are to live, properly laid out structs for the duration of the
    // call; the kernel writes only `cs`.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            std::ptr::from_ref(&range),
            std::ptr::from_mut(&mut cs),
            0,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fraction(pages, cs.nr_cache.min(pages)))
}

/// [`uncached_fraction`] through `mmap` + `mincore(2)` (no pages are faulted in: a shared
/// read-only mapping that is never touched).
///
/// # Errors
/// `mmap` or `mincore` failed.
pub fn mincore_fraction(file: &File, off: u64, len: u64) -> io::Result<f64> {
    let page = page_bytes();
    let pages = pages_of(off, len, page);
    if pages == 0 {
        return Ok(0.0);
    }
    let start = off / page * page;
    let mut cached = 0u64;
    let mut done = 0u64;
    let mut vec = [0u8; MINCORE_PAGES];
    while done < pages {
        let n = (pages - done).min(MINCORE_PAGES as u64);
        let map_len = usize::try_from(n * page).map_err(|_| io::ErrorKind::InvalidInput)?;
        let map_off =
            libc::off_t::try_from(start + done * page).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: a fresh read-only shared mapping chosen by the kernel; never dereferenced.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                map_off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `p` is the mapping of `map_len` bytes made above; `vec` holds one byte for
        // each of its `n` <= MINCORE_PAGES pages.
        let r = unsafe { libc::mincore(p, map_len, vec.as_mut_ptr()) };
        let err = io::Error::last_os_error();
        // SAFETY: unmaps exactly the mapping made above, which nothing references.
        unsafe { libc::munmap(p, map_len) };
        if r != 0 {
            return Err(err);
        }
        cached += vec[..n as usize].iter().filter(|&&b| b & 1 != 0).count() as u64;
        done += n;
    }
    Ok(fraction(pages, cached))
}

#[allow(clippy::cast_precision_loss)]
fn fraction(pages: u64, cached: u64) -> f64 {
    debug_assert!(cached <= pages);
    (pages - cached) as f64 / pages as f64
}

/// Drops the clean cached pages of `[off, off + len)` (`POSIX_FADV_DONTNEED`): how benchmarks
/// and tests make a range cold. Dirty pages stay until written back.
///
/// # Errors
/// The advice call failed.
pub fn drop_cached(file: &File, off: u64, len: u64) -> io::Result<()> {
    let (o, l) = (
        libc::off_t::try_from(off).map_err(|_| io::ErrorKind::InvalidInput)?,
        libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?,
    );
    // SAFETY: advice on our own descriptor; no memory is passed.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), o, l, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_of_counts_touched_pages() {
        assert_eq!(pages_of(0, 0, 4096), 0);
        assert_eq!(pages_of(0, 1, 4096), 1);
        assert_eq!(pages_of(4095, 2, 4096), 2);
        assert_eq!(pages_of(4096, 8192, 4096), 2);
    }
}
