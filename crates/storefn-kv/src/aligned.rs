//! Page-aligned heap buffers and O_DIRECT file opening (with a buffered fallback where the file
//! system refuses O_DIRECT, e.g. tmpfs).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::limits::IO_ALIGN;
use crate::KvError;

/// A zeroed, `IO_ALIGN`-aligned byte buffer, as O_DIRECT requires.
#[derive(Debug)]
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Box<[u8]>); no shared interior state.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`, which is Sync.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// # Panics
    /// On a zero length or allocation failure (out of memory).
    #[must_use]
    pub fn new(len: usize) -> Self {
        assert!(len > 0, "empty aligned buffer");
        let layout = Layout::from_size_align(len, IO_ALIGN).expect("valid layout");
        // SAFETY: layout has non-zero size (asserted above).
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory allocating {len} bytes");
        Self { ptr, len }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in Deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, IO_ALIGN).expect("valid layout");
        // SAFETY: ptr was allocated in `new` with this exact layout and is freed once.
        unsafe { dealloc(self.ptr, layout) };
    }
}

/// Opens `path` with O_DIRECT if the file system allows it; returns the file and whether it is
/// direct. `write` creates and truncates.
///
/// # Errors
/// `KvError::Io` naming the path.
pub fn open_direct(path: &Path, write: bool) -> Result<(File, bool), KvError> {
    let mk = |direct: bool| {
        let mut o = OpenOptions::new();
        o.read(true);
        if write {
            o.write(true).create(true).truncate(true);
        }
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(path)
    };
    match mk(true) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            mk(false).map(|f| (f, false)).map_err(|e| KvError::io(path, "open", e))
        }
        Err(e) => Err(KvError::io(path, "open", e)),
    }
}
