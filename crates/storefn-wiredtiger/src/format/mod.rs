//! WiredTiger's on-disk layouts as typed accessors over foreign bytes (docs/FORMAT.md,
//! "WiredTiger"). Every parser here bounds every read by its buffer and answers damage with a
//! [`Malformed`] naming the byte offset inside that buffer; callers add the file and its offset.
//!
//! Learned from WiredTiger 3.2.1's documentation and source (block.h, btmem.h, cell.i,
//! intpack.i, block_addr.c, block_ckpt.c) and checked against files Debian's 3.2.1 wrote.

mod block;
mod cell;
mod config;
mod intpack;

pub use block::{
    checksum_with_hole, BlockAddr, BlockHeader, CheckpointCookie, FileDesc, PageHeader, PageType,
    BLOCK_DATA_CKSUM, BLOCK_DESC_BYTES, BLOCK_HEADER_BYTES, BLOCK_MAGIC, BLOCK_MAJOR, BLOCK_MINOR,
    CHECKPOINT_VERSION, CHECKSUM_SKIP_BYTES, PAGE_COMPRESSED, PAGE_ENCRYPTED, PAGE_HEADER_BYTES,
    PAGE_PREFIX_BYTES, PAGE_TYPE_OFFSET,
};
pub use cell::{Cell, CellKind, CELL_SIZE_ADJUST};
pub use config::{config_entries, config_get, Turtle};
pub use crc32c::crc32c;
pub use intpack::unpack_uint;

/// Damage found in foreign bytes: `at` is the byte offset inside the buffer that was parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    pub at: usize,
    pub what: String,
}

impl Malformed {
    pub(crate) fn new(at: usize, what: impl Into<String>) -> Self {
        Malformed { at, what: what.into() }
    }
}

/// `buf[at..at + n]`, or damage named at `at`.
pub(crate) fn take<'b>(
    buf: &'b [u8],
    at: usize,
    n: usize,
    what: &str,
) -> Result<&'b [u8], Malformed> {
    at.checked_add(n).and_then(|end| buf.get(at..end)).ok_or_else(|| {
        Malformed::new(at, format!("{what}: {n} bytes run past the end ({})", buf.len()))
    })
}

pub(crate) fn le_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn le_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}
