//! One aligned, zeroed, fixed-size memory region (registered buffers, scratch), allocated once
//! when the engine is built and never resized, so its addresses stay valid for io_uring.

use std::alloc::Layout;
use std::ptr::NonNull;

use crate::error::EngineError;

#[derive(Debug)]
pub(crate) struct Region {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Region {
    pub(crate) fn new(bytes: usize, align: usize) -> Result<Self, EngineError> {
        let layout = Layout::from_size_align(bytes.max(align), align)
            .map_err(|_| EngineError::NoMemory { bytes })?;
        // SAFETY: the layout has non-zero size (at least `align`, which Layout made valid).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(EngineError::NoMemory { bytes })?;
        Ok(Self { ptr, layout })
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout and freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}
