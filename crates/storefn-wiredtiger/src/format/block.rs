//! Blocks as WiredTiger's block manager writes them: the file descriptor block, the page header
//! and block header every block starts with, address cookies and checkpoint cookies.
//!
//! ```text
//! block:  0        8          16        20        24   25    26     27      28
//!         | recno  | write_gen | mem_size | entries | type | flags | unused | version |
//!         28         32         36      37       40
//!         | disk_size | checksum | flags | unused | cells ... (mem_size bytes in all) | pad
//! ```

use super::{intpack::unpack_uint, le_u32, le_u64, take, Malformed};

/// Bytes of the page header (`WT_PAGE_HEADER`).
pub const PAGE_HEADER_BYTES: usize = 28;
/// Bytes of the block header (`WT_BLOCK_HEADER`) that follows the page header.
pub const BLOCK_HEADER_BYTES: usize = 12;
/// Where a page's first cell starts: both headers.
pub const PAGE_PREFIX_BYTES: usize = PAGE_HEADER_BYTES + BLOCK_HEADER_BYTES;
/// Bytes checksummed when a block does not carry [`BLOCK_DATA_CKSUM`] (`WT_BLOCK_COMPRESS_SKIP`).
pub const CHECKSUM_SKIP_BYTES: usize = 64;
/// Block-header flag: the checksum covers the whole block, not only its first 64 bytes.
pub const BLOCK_DATA_CKSUM: u8 = 0x01;
/// Page-header flag: the bytes after the first 64 are compressed.
pub const PAGE_COMPRESSED: u8 = 0x01;
/// Page-header flag: the bytes after the headers are encrypted.
pub const PAGE_ENCRYPTED: u8 = 0x08;

/// The file descriptor block at offset 0: magic, format major and minor, checksum, unused.
pub const BLOCK_DESC_BYTES: usize = 16;
/// `WT_BLOCK_MAGIC`.
pub const BLOCK_MAGIC: u32 = 120_897;
/// Block-manager file format this reader knows (`WT_BLOCK_MAJOR_VERSION`).
pub const BLOCK_MAJOR: u16 = 1;
/// `WT_BLOCK_MINOR_VERSION`.
pub const BLOCK_MINOR: u16 = 0;
/// First byte of a checkpoint cookie (`WT_BM_CHECKPOINT_VERSION`).
pub const CHECKPOINT_VERSION: u8 = 1;

/// The descriptor block at the start of every WiredTiger file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDesc {
    pub magic: u32,
    pub major: u16,
    pub minor: u16,
    pub checksum: u32,
}

impl FileDesc {
    /// Parses and checks the descriptor in `first`, the file's first allocation unit.
    ///
    /// # Errors
    /// A short block, a bad magic, an unknown format version or a checksum mismatch.
    pub fn parse(first: &[u8]) -> Result<Self, Malformed> {
        take(first, 0, BLOCK_DESC_BYTES, "file descriptor block")?;
        let d = FileDesc {
            magic: le_u32(first, 0),
            major: u16::from_le_bytes([first[4], first[5]]),
            minor: u16::from_le_bytes([first[6], first[7]]),
            checksum: le_u32(first, 8),
        };
        if d.magic != BLOCK_MAGIC {
            return Err(Malformed::new(
                0,
                format!("magic {} is not WiredTiger's {BLOCK_MAGIC}", d.magic),
            ));
        }
        if (d.major, d.minor) != (BLOCK_MAJOR, BLOCK_MINOR) {
            return Err(Malformed::new(
                4,
                format!(
                    "block format {}.{} (this reader knows {BLOCK_MAJOR}.{BLOCK_MINOR})",
                    d.major, d.minor
                ),
            ));
        }
        let sum = checksum_with_hole(first, 8);
        if sum != d.checksum {
            return Err(Malformed::new(
                8,
                format!("descriptor checksum {:#010x}, computed {sum:#010x}", d.checksum),
            ));
        }
        Ok(d)
    }
}

/// WiredTiger's page types (`WT_PAGE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PageType {
    BlockManager,
    ColFix,
    ColInt,
    ColVar,
    Overflow,
    RowInternal,
    RowLeaf,
}

/// Where the page type byte sits in a page header.
pub const PAGE_TYPE_OFFSET: usize = 24;

impl PageType {
    /// The type of the page at the start of `block`, without parsing the rest of its headers
    /// (`None`: too short, or an unknown type).
    #[must_use]
    pub fn of(block: &[u8]) -> Option<Self> {
        block.get(PAGE_TYPE_OFFSET).copied().and_then(Self::from_byte)
    }

    /// The page type for its on-disk byte.
    #[must_use]
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => PageType::BlockManager,
            2 => PageType::ColFix,
            3 => PageType::ColInt,
            4 => PageType::ColVar,
            5 => PageType::Overflow,
            6 => PageType::RowInternal,
            7 => PageType::RowLeaf,
            _ => return None,
        })
    }
}

/// The page header at a block's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    pub recno: u64,
    pub write_gen: u64,
    /// Bytes of the page in memory (both headers and the cells); the block may be padded past it.
    pub mem_size: u32,
    /// Cells on the page.
    pub entries: u32,
    pub page_type: PageType,
    pub flags: u8,
    pub version: u8,
}

impl PageHeader {
    /// Parses the page header at the start of `block`.
    ///
    /// # Errors
    /// A block shorter than both headers, or an unknown page type.
    pub fn parse(block: &[u8]) -> Result<Self, Malformed> {
        take(block, 0, PAGE_PREFIX_BYTES, "page and block headers")?;
        let b = block[PAGE_TYPE_OFFSET];
        let page_type = PageType::from_byte(b)
            .ok_or_else(|| Malformed::new(PAGE_TYPE_OFFSET, format!("unknown page type {b}")))?;
        Ok(PageHeader {
            recno: le_u64(block, 0),
            write_gen: le_u64(block, 8),
            mem_size: le_u32(block, 16),
            entries: le_u32(block, 20),
            page_type,
            flags: block[25],
            version: block[27],
        })
    }
}

/// The block header after the page header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// Bytes the block occupies on disk (a multiple of the allocation size).
    pub disk_size: u32,
    pub checksum: u32,
    pub flags: u8,
}

impl BlockHeader {
    /// Where the checksum field sits inside a block.
    pub const CHECKSUM_AT: usize = PAGE_HEADER_BYTES + 4;

    /// Parses the block header of `block`.
    ///
    /// # Errors
    /// A block shorter than both headers.
    pub fn parse(block: &[u8]) -> Result<Self, Malformed> {
        take(block, 0, PAGE_PREFIX_BYTES, "page and block headers")?;
        Ok(BlockHeader {
            disk_size: le_u32(block, PAGE_HEADER_BYTES),
            checksum: le_u32(block, Self::CHECKSUM_AT),
            flags: block[PAGE_HEADER_BYTES + 8],
        })
    }

    /// Checks a block read at `addr`: its header names the address's size and checksum, and the
    /// checksum (over the whole block, or its first 64 bytes without [`BLOCK_DATA_CKSUM`])
    /// matches the bytes.
    ///
    /// # Errors
    /// Any mismatch, named at the field that disagrees.
    pub fn verify(block: &[u8], addr: BlockAddr) -> Result<Self, Malformed> {
        let h = Self::parse(block)?;
        if u64::from(h.disk_size) != addr.size || block.len() as u64 != addr.size {
            return Err(Malformed::new(
                PAGE_HEADER_BYTES,
                format!(
                    "block header says {} bytes, its address {} (read {})",
                    h.disk_size,
                    addr.size,
                    block.len()
                ),
            ));
        }
        if h.checksum != addr.checksum {
            return Err(Malformed::new(
                Self::CHECKSUM_AT,
                format!(
                    "block checksum {:#010x}, its address expects {:#010x}",
                    h.checksum, addr.checksum
                ),
            ));
        }
        let covered = if h.flags & BLOCK_DATA_CKSUM != 0 {
            block.len()
        } else {
            CHECKSUM_SKIP_BYTES.min(block.len())
        };
        let sum = checksum_with_hole(&block[..covered], Self::CHECKSUM_AT);
        if sum != h.checksum {
            return Err(Malformed::new(
                Self::CHECKSUM_AT,
                format!(
                    "checksum mismatch: stored {:#010x}, computed {sum:#010x} over {covered} bytes",
                    h.checksum
                ),
            ));
        }
        Ok(h)
    }
}

/// CRC-32C of `bytes` with the 4-byte field at `hole` read as zeros, as WiredTiger computes it
/// (no copy: the hole is fed as four zero bytes).
#[must_use]
pub fn checksum_with_hole(bytes: &[u8], hole: usize) -> u32 {
    let c = crc32c::crc32c(&bytes[..hole]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    crc32c::crc32c_append(c, &bytes[hole + 4..])
}

/// A block's address: byte offset, byte size and the checksum its header must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockAddr {
    pub offset: u64,
    pub size: u64,
    pub checksum: u32,
}

impl BlockAddr {
    /// Decodes an address cookie at `*pos`: packed (offset / alloc - 1, size / alloc, checksum).
    /// `None` is the empty address (size 0): an empty tree.
    ///
    /// # Errors
    /// Damaged packing, or values that overflow a file offset.
    pub fn unpack(buf: &[u8], pos: &mut usize, alloc: u64) -> Result<Option<Self>, Malformed> {
        let at = *pos;
        let o = unpack_uint(buf, pos)?;
        let s = unpack_uint(buf, pos)?;
        let c = unpack_uint(buf, pos)?;
        if s == 0 {
            return Ok(None);
        }
        let bad =
            || Malformed::new(at, format!("address (unit {o}, {s} units) overflows a file offset"));
        let offset = o.checked_add(1).and_then(|u| u.checked_mul(alloc)).ok_or_else(bad)?;
        let size = s.checked_mul(alloc).ok_or_else(bad)?;
        let checksum = u32::try_from(c)
            .map_err(|_| Malformed::new(at, format!("checksum {c} over 32 bits")))?;
        Ok(Some(BlockAddr { offset, size, checksum }))
    }
}

/// A checkpoint cookie (the hex `addr="..."` of a checkpoint in the metadata, decoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointCookie {
    /// The tree's root page, `None` for an empty tree.
    pub root: Option<BlockAddr>,
    /// The file's size when the checkpoint was taken: every live block lies below it.
    pub file_size: u64,
    pub ckpt_size: u64,
}

impl CheckpointCookie {
    /// Decodes version byte, root, alloc/avail/discard extent-list addresses, file and
    /// checkpoint sizes.
    ///
    /// # Errors
    /// An unknown version or damaged packing.
    pub fn parse(raw: &[u8], alloc: u64) -> Result<Self, Malformed> {
        let v = *raw.first().ok_or_else(|| Malformed::new(0, "empty checkpoint cookie"))?;
        if v != CHECKPOINT_VERSION {
            return Err(Malformed::new(
                0,
                format!("checkpoint cookie version {v} (this reader knows {CHECKPOINT_VERSION})"),
            ));
        }
        let mut pos = 1;
        let root = BlockAddr::unpack(raw, &mut pos, alloc)?;
        for _ in 0..3 {
            BlockAddr::unpack(raw, &mut pos, alloc)?;
        }
        let file_size = unpack_uint(raw, &mut pos)?;
        let ckpt_size = unpack_uint(raw, &mut pos)?;
        Ok(CheckpointCookie { root, file_size, ckpt_size })
    }
}
