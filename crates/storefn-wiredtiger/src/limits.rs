//! The reader's named limits: every bound it enforces on foreign bytes, with its reason.

/// Deepest B-tree the reader follows from a checkpoint's root. A WiredTiger tree of 4 KiB
/// internal pages holding 2-byte keys reaches 2^64 rows well before 32 levels; a deeper walk
/// means a cycle or a damaged page, answered as an error instead of a hang.
pub const MAX_DEPTH: usize = 32;

/// Largest block the reader accepts (WiredTiger's `internal_page_max`/`leaf_page_max` top out at
/// 512 MiB; a block this large in a lookup path is damage, not data).
pub const MAX_BLOCK_BYTES: u64 = 512 << 20;

/// Largest allocation unit WiredTiger accepts (`allocation_size` is at most 128 MiB).
pub const MAX_ALLOCATION_SIZE: u64 = 128 << 20;

/// Largest `WiredTiger.turtle` read: it holds two short version lines and the metadata file's
/// configuration (a few KiB); a bigger one is not a turtle file.
pub const MAX_TURTLE_BYTES: u64 = 1 << 20;

/// Deepest nesting of `( )`/`[ ]` in a configuration string WiredTiger wrote (checkpoint lists
/// nest three deep).
pub const MAX_CONFIG_NESTING: usize = 16;

/// Times one lookup is redone on a newer checkpoint (or the metadata re-read while WiredTiger
/// replaces it) before the damage it met is reported as such.
pub const MAX_STALE_RETRIES: u32 = 8;

/// The parsed internal pages a remote reader keeps for its pushdowns: a tree of 4 KiB internal
/// pages over 32 KiB leaves has ~1 internal page per 100 leaves, so this covers a table of
/// several GiB (a 744 MB table's take ~1 MB parsed); past it they are dropped and read again.
pub const REMOTE_INTERNAL_BYTES: u64 = 8 << 20;
