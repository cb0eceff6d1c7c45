//! The block-based table's footer and block trailers (docs/FORMAT.md, "RocksDB: SST files").
//!
//! ```text
//! footer (format_version >= 1), the file's last 53 bytes:
//!   checksum_type: u8 | metaindex handle | index handle | zero padding to 41 bytes
//!   | format_version: fixed32 | magic: fixed64 = 0x88e241b785f4cff7
//! block = contents[size] | compression_type: u8 | checksum: fixed32
//! ```
//! The trailer's checksum covers the contents and the compression byte.

use super::{BlockHandle, Cursor, Malformed, Parsed};

/// The block-based table magic number (the footer's last 8 bytes).
pub const TABLE_MAGIC: u64 = 0x88e2_41b7_85f4_cff7;
/// The magic of the legacy (format_version 0) footer, which this reader does not read.
pub const LEGACY_TABLE_MAGIC: u64 = 0xdb47_7524_8b80_fb57;
/// Bytes of the footer of format_version >= 1.
pub const FOOTER_BYTES: usize = 1 + 2 * BlockHandle::MAX_ENCODED_BYTES + 4 + 8;
/// Bytes after every block: the compression type and the checksum.
pub const BLOCK_TRAILER_BYTES: usize = 5;
/// The format versions read (RocksDB 7.8 writes 5 by default and can write 2 to 5).
pub const FORMAT_VERSIONS: std::ops::RangeInclusive<u32> = 2..=5;
/// The compression byte of an uncompressed block.
pub const NO_COMPRESSION: u8 = 0;

/// What the footer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub checksum: ChecksumType,
    pub metaindex: BlockHandle,
    pub index: BlockHandle,
    pub format_version: u32,
}

/// How block trailers are checksummed (`BlockBasedTableOptions::checksum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumType {
    None,
    Crc32c,
    XxHash32,
    XxHash64,
    Xxh3,
}

impl ChecksumType {
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => ChecksumType::None,
            1 => ChecksumType::Crc32c,
            2 => ChecksumType::XxHash32,
            3 => ChecksumType::XxHash64,
            4 => ChecksumType::Xxh3,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ChecksumType::None => "no",
            ChecksumType::Crc32c => "crc32c",
            ChecksumType::XxHash32 => "xxhash32",
            ChecksumType::XxHash64 => "xxhash64",
            ChecksumType::Xxh3 => "xxh3",
        }
    }

    /// The checksum RocksDB stores for `data` followed by `last` (the compression byte).
    pub fn compute(self, data: &[u8], last: u8) -> u32 {
        match self {
            ChecksumType::None => 0,
            ChecksumType::Crc32c => mask_crc(crc32c::crc32c_append(crc32c::crc32c(data), &[last])),
            ChecksumType::XxHash32 => {
                let mut h = xxhash_rust::xxh32::Xxh32::new(0);
                h.update(data);
                h.update(&[last]);
                h.digest()
            }
            ChecksumType::XxHash64 => {
                let mut h = xxhash_rust::xxh64::Xxh64::new(0);
                h.update(data);
                h.update(&[last]);
                // The lower 32 bits are the stored checksum.
                h.digest() as u32
            }
            ChecksumType::Xxh3 => {
                // XXH3 over the contents, the compression byte mixed in after: RocksDB's
                // definition (not XXH3 over contents and byte together).
                const LAST_BYTE_PRIME: u32 = 0x6b90_83d9;
                let v = xxhash_rust::xxh3::xxh3_64(data) as u32;
                v ^ u32::from(last).wrapping_mul(LAST_BYTE_PRIME)
            }
        }
    }
}

/// LevelDB's CRC mask (stored CRCs are rotated and offset so a CRC of CRCs is not trivial).
pub fn mask_crc(crc: u32) -> u32 {
    const MASK_DELTA: u32 = 0xa282_ead8;
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

impl Footer {
    /// Parses the file's last [`FOOTER_BYTES`] (`tail`).
    pub(crate) fn parse(tail: &[u8]) -> Parsed<Result<Self, String>> {
        if tail.len() != FOOTER_BYTES {
            return Err(Malformed { at: 0, what: "file shorter than a table footer" });
        }
        let mut m = Cursor::at(tail, FOOTER_BYTES - 8);
        let magic = m.fixed64("magic")?;
        if magic == LEGACY_TABLE_MAGIC {
            return Ok(Err("legacy block-based table (format_version 0)".into()));
        }
        if magic != TABLE_MAGIC {
            return Err(Malformed {
                at: FOOTER_BYTES - 8,
                what: "not a block-based table (magic)",
            });
        }
        let format_version = Cursor::at(tail, FOOTER_BYTES - 12).fixed32("format version")?;
        if !FORMAT_VERSIONS.contains(&format_version) {
            return Ok(Err(format!(
                "table format_version {format_version} (this reader reads {}..={})",
                FORMAT_VERSIONS.start(),
                FORMAT_VERSIONS.end()
            )));
        }
        let mut c = Cursor::new(tail);
        let kind = c.u8("checksum type")?;
        let Some(checksum) = ChecksumType::from_byte(kind) else {
            return Ok(Err(format!("unknown checksum type {kind}")));
        };
        let metaindex = BlockHandle::decode(&mut c)?;
        let index = BlockHandle::decode(&mut c)?;
        Ok(Ok(Footer { checksum, metaindex, index, format_version }))
    }
}
