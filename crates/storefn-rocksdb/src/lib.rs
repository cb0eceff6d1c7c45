//! storefn-rocksdb: RocksDB's own files, read as RocksDB wrote them, never written. A database
//! opens read-only through `CURRENT` and the MANIFEST (the live SST files of the default column
//! family per level) with its live WALs replayed into a client-side memtable; a Get is answered
//! as RocksDB answers it (memtable, level 0 newest first, one file per level; the first entry
//! decides), and what this reader does not read (compressed blocks, merge operands, blob
//! references) is a [`Lookup::Fallback`] the caller answers through RocksDB itself.
//!
//! The byte layouts read are in docs/FORMAT.md, "RocksDB"; one module (`format`) knows them.

pub mod chain;
mod db;
mod error;
mod format;
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
pub mod limits;
#[cfg(feature = "native")]
mod native;
pub mod remote;
mod source;
mod sst;
mod xrp;

pub use db::{settle, Db, FallbackReason, LiveFile, Lookup, Source};
pub use error::RocksError;
pub use format::edit::NewFile;
pub use format::table::{ChecksumType, Footer, FORMAT_VERSIONS};
pub use format::{BlockHandle, Malformed, ValueType};
#[cfg(feature = "native")]
pub use native::{Native, NativeOptions};
pub use source::{Files, LocalDir};
pub use sst::{Found, Table};
pub use xrp::{DataCache, XrpConfig, XrpDb, XrpStats};

/// The layout constants docs/FORMAT.md, "RocksDB", documents (its test checks them).
pub mod layout {
    pub use crate::format::block::{BLOCK_FOOTER_BYTES, HASH_INDEX_BIT, RESTART_BYTES};
    pub use crate::format::compress::{BZIP2, LZ4, LZ4HC, SNAPPY, XPRESS, ZLIB, ZSTD};
    pub use crate::format::edit::tag;
    pub use crate::format::filter::{
        FAST_LOCAL_BLOOM, FILTER_LINE_BYTES, FILTER_METADATA_BYTES, NEWER_BLOOM_MARKER,
        PROBE_MULTIPLIER,
    };
    pub use crate::format::log::{HEADER_BYTES, LOG_BLOCK_BYTES, RECYCLABLE_HEADER_BYTES};
    pub use crate::format::table::{
        mask_crc, BLOCK_TRAILER_BYTES, FOOTER_BYTES, LEGACY_TABLE_MAGIC, TABLE_MAGIC,
    };
    pub use crate::format::xxph3::MAX_HASHED_KEY_BYTES;
    pub use crate::format::INTERNAL_KEY_TRAILER_BYTES;
}
